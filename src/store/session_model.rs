//! A model of starting the next run of a session from several processes at once
//! (`exec::session::next_run` and `opening`, then the write creating the run with its place:
//! `sqlite::sessions::place`, `postgres::sessions::check_next`, the memory store's check, the
//! `(session, idx)` key of `session_runs`), checked exhaustively with `stateright`.
//!
//! # What is modelled
//!
//! One session, its places in the store (each with its run's status and the place whose
//! final conversation the run began from). `starters` processes each start the session's
//! next run, in atomic steps as the code does them: read the session's runs
//! (`store.session_runs`), then their statuses (`ledger::record`, a later read: a run may
//! end in between), refused when the latest has not ended, else choosing the place after the
//! latest and the latest completed run to go on from (the seed `opening` reads, fixed once
//! that run ended); then the write creating the run, refused with `SessionTaken` unless its
//! place is the session's next. A placed run then completes or fails, or its process is
//! SIGKILLed (the run stays unended: the session refuses new runs until it is resumed or
//! cancelled). A refused process is run again, reading afresh, and a process whose run ended
//! starts the session's next (`attempts` starts each).
//!
//! # Invariants
//!
//! - places are 1, 2, 3, ... without gaps or duplicates;
//! - every run begins from the latest completed run placed before it, and every place
//!   before it had ended when it was placed.
//!
//! # Variants
//!
//! [`Placing::MaxPlusOne`]: the store places a run after whatever is latest at the write,
//! not at the place it read (no refusal); [`Placing::Unchecked`]: the store inserts the place
//! read with no check and no unique key. The checker finds a run beginning from the wrong
//! conversation and a duplicate place.

use stateright::{Checker, Model, Property};

/// How the store places a new run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Placing {
    /// As built: refused unless the place read is the session's next.
    Checked,
    /// Whatever the latest place is at the write, plus one.
    MaxPlusOne,
    /// The place read, unchecked.
    Unchecked,
}

#[derive(Clone, Debug)]
pub(super) struct SessionModel {
    pub(super) placing: Placing,
    pub(super) starters: u8,
    /// Starts each starter attempts (refused or not: a refused one is run again, a placed one
    /// starts the session's next run once its run has ended).
    pub(super) attempts: u8,
    pub(super) crashes: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Status {
    Running,
    Completed,
    Failed,
}

/// One place of the session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct Place {
    pub(super) index: u8,
    pub(super) status: Status,
    /// The place whose run this one began from (`SessionSpec::previous`).
    pub(super) begins_from: Option<u8>,
    /// Every earlier place had ended when this one was taken.
    pub(super) after_ended: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Pc {
    ReadRuns,
    /// Read the statuses of the first `n` places.
    ReadStatuses(u8),
    /// Create the run at `index`, going on from `previous`.
    Write {
        index: u8,
        previous: Option<u8>,
    },
    /// Driving the run at this place.
    Running(u8),
    Exit,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Starter {
    pub(super) pc: Pc,
    pub(super) alive: bool,
    pub(super) tries: u8,
    pub(super) refused_then_placed: bool,
    pub(super) was_refused: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct World {
    pub(super) places: Vec<Place>,
    pub(super) starters: Vec<Starter>,
    pub(super) crashes: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Action {
    Step(u8),
    Complete(u8),
    Fail(u8),
    Crash(u8),
}

pub(super) const NO_GAPS: &str = "places are 1, 2, 3, ... without gaps or duplicates";
pub(super) const BEGINS_FROM: &str =
    "every run begins from the latest completed run before it, all of them ended";

impl SessionModel {
    fn refused(&self, s: &mut Starter) {
        s.was_refused = true;
        self.again(s);
    }

    /// The starter starts again if it has attempts left.
    fn again(&self, s: &mut Starter) {
        s.tries += 1;
        s.pc = if s.tries < self.attempts {
            Pc::ReadRuns
        } else {
            Pc::Exit
        };
    }
}

impl Model for SessionModel {
    type State = World;
    type Action = Action;

    fn init_states(&self) -> Vec<World> {
        let starter = Starter {
            pc: Pc::ReadRuns,
            alive: true,
            tries: 0,
            refused_then_placed: false,
            was_refused: false,
        };
        vec![World {
            places: Vec::new(),
            starters: vec![starter; self.starters as usize],
            crashes: 0,
        }]
    }

    fn actions(&self, w: &World, actions: &mut Vec<Action>) {
        for (i, s) in w.starters.iter().enumerate() {
            let n = i as u8;
            if !s.alive || s.pc == Pc::Exit {
                continue;
            }
            if let Pc::Running(_) = s.pc {
                actions.push(Action::Complete(n));
                actions.push(Action::Fail(n));
            } else {
                actions.push(Action::Step(n));
            }
            if w.crashes < self.crashes {
                actions.push(Action::Crash(n));
            }
        }
    }

    fn next_state(&self, last: &World, action: Action) -> Option<World> {
        let mut w = last.clone();
        match action {
            Action::Step(i) => {
                let s = &mut w.starters[i as usize];
                match s.pc {
                    // `store.session_runs(name)`.
                    Pc::ReadRuns => s.pc = Pc::ReadStatuses(w.places.len() as u8),
                    // `ledger::record` of the latest, then of each back to the last completed.
                    Pc::ReadStatuses(n) => {
                        let read = &w.places[..n as usize];
                        if read.last().is_some_and(|p| p.status == Status::Running) {
                            self.refused(s);
                        } else {
                            let previous = read
                                .iter()
                                .rev()
                                .find(|p| p.status == Status::Completed)
                                .map(|p| p.index);
                            s.pc = Pc::Write {
                                index: n + 1,
                                previous,
                            };
                        }
                    }
                    // `NewRun` with its `SessionLink`: the place check, then the insert.
                    Pc::Write { index, previous } => {
                        let latest = w.places.iter().map(|p| p.index).max().unwrap_or(0);
                        let index = match self.placing {
                            Placing::Checked if index != latest + 1 => {
                                self.refused(s);
                                return Some(w);
                            }
                            Placing::MaxPlusOne => latest + 1,
                            _ => index,
                        };
                        let after_ended = w
                            .places
                            .iter()
                            .filter(|p| p.index < index)
                            .all(|p| p.status != Status::Running);
                        w.places.push(Place {
                            index,
                            status: Status::Running,
                            begins_from: previous,
                            after_ended,
                        });
                        s.refused_then_placed = s.was_refused;
                        s.pc = Pc::Running(w.places.len() as u8 - 1);
                    }
                    Pc::Running(_) | Pc::Exit => {}
                }
            }
            Action::Complete(i) | Action::Fail(i) => {
                let s = &mut w.starters[i as usize];
                if let Pc::Running(at) = s.pc {
                    w.places[at as usize].status = if matches!(action, Action::Complete(_)) {
                        Status::Completed
                    } else {
                        Status::Failed
                    };
                    self.again(s);
                }
            }
            Action::Crash(i) => {
                w.crashes += 1;
                w.starters[i as usize].alive = false;
            }
        }
        Some(w)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(NO_GAPS, |_, w: &World| {
                let mut indexes: Vec<u8> = w.places.iter().map(|p| p.index).collect();
                indexes.sort_unstable();
                indexes
                    .iter()
                    .enumerate()
                    .all(|(i, x)| *x as usize == i + 1)
            }),
            Property::always(BEGINS_FROM, |_, w: &World| {
                w.places.iter().all(|p| {
                    let latest_completed = w
                        .places
                        .iter()
                        .filter(|q| q.index < p.index && q.status == Status::Completed)
                        .map(|q| q.index)
                        .max();
                    p.after_ended && p.begins_from == latest_completed
                })
            }),
            Property::sometimes("a refused starter takes the next place", |_, w: &World| {
                w.starters.iter().any(|s| s.refused_then_placed)
            }),
            Property::sometimes(
                "a run begins from one before a failed run",
                |_, w: &World| {
                    w.places
                        .iter()
                        .any(|p| p.begins_from.is_some_and(|b| b + 1 < p.index))
                },
            ),
        ]
    }
}

/// A counterexample, one line per action: who acted, at which step, and the places after.
fn describe(path: Vec<(World, Option<Action>)>) -> String {
    let mut lines = Vec::new();
    for pair in path.windows(2) {
        let [(before, Some(action)), (after, _)] = pair else {
            continue;
        };
        let what = match action {
            Action::Step(i) => format!("starter {i} {:?}", before.starters[*i as usize].pc),
            Action::Complete(i) => format!("starter {i}'s run completes"),
            Action::Fail(i) => format!("starter {i}'s run fails"),
            Action::Crash(i) => format!("SIGKILL starter {i}"),
        };
        let places: Vec<String> = after
            .places
            .iter()
            .map(|p| {
                format!(
                    "#{} {:?} from {}",
                    p.index,
                    p.status,
                    p.begins_from.map_or("none".into(), |b| format!("#{b}"))
                )
            })
            .collect();
        lines.push(format!("  {what:<56} places: {}", places.join(", ")));
    }
    lines.join("\n")
}

/// Checks `model` breadth first, or until `stop_at` is violated when given; returns the
/// unique states, the violated properties (with the first one's trace) and the `sometimes`
/// properties never reached.
pub(super) fn check(
    model: SessionModel,
    stop_at: Option<&'static str>,
) -> (
    usize,
    Vec<&'static str>,
    Vec<&'static str>,
    Option<String>,
    std::time::Duration,
) {
    let started = std::time::Instant::now();
    let properties = model.properties();
    let mut builder = model.checker();
    if let Some(name) = stop_at {
        builder = builder.finish_when(stateright::HasDiscoveries::AnyOf(
            std::iter::once(name).collect(),
        ));
    }
    let checker = builder.spawn_bfs().join();
    let (mut violated, mut missing, mut trace) = (Vec::new(), Vec::new(), None);
    for p in properties {
        let found = checker.discovery(p.name);
        match (p.expectation, found) {
            (stateright::Expectation::Sometimes, None) => missing.push(p.name),
            (stateright::Expectation::Always, Some(path)) => {
                violated.push(p.name);
                trace.get_or_insert_with(|| describe(path.into()));
            }
            _ => {}
        }
    }
    (
        checker.unique_state_count(),
        violated,
        missing,
        trace,
        started.elapsed(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(placing: Placing, starters: u8) -> SessionModel {
        SessionModel {
            placing,
            starters,
            attempts: 2,
            crashes: 1,
        }
    }

    fn run(
        name: &str,
        m: SessionModel,
        stop_at: Option<&'static str>,
    ) -> (Vec<&'static str>, Vec<&'static str>) {
        let (states, violated, missing, trace, elapsed) = check(m, stop_at);
        println!(
            "session model, {name}: {states} states in {:.2} s; violated: {violated:?}",
            elapsed.as_secs_f64()
        );
        if let Some(trace) = trace {
            println!("  first counterexample:\n{trace}");
        }
        (violated, missing)
    }

    #[test]
    fn places_as_built_have_no_gaps_and_each_run_begins_from_the_one_before() {
        for starters in [2, 3] {
            let (violated, missing) = run("as built", model(Placing::Checked, starters), None);
            assert!(violated.is_empty(), "violated {violated:?}");
            assert!(missing.is_empty(), "never reached {missing:?}");
        }
    }

    #[test]
    fn placing_at_max_plus_one_begins_a_run_from_the_wrong_conversation() {
        let m = model(Placing::MaxPlusOne, 2);
        let (violated, _) = run("max + 1 at the write", m, Some(BEGINS_FROM));
        assert!(violated.contains(&BEGINS_FROM), "{violated:?}");
    }

    #[test]
    fn placing_without_the_check_gives_two_runs_one_place() {
        let m = model(Placing::Unchecked, 2);
        let (violated, _) = run("unchecked place", m, Some(NO_GAPS));
        assert!(violated.contains(&NO_GAPS), "{violated:?}");
    }
}

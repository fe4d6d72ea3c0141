//! A model of the global memory publish (`global_memory.rs`'s [`Publication`] and
//! [`publish_outcome`], the stores' `publish` under `check_epoch`, the driver's
//! `publish_memory` and `load_global_memory`, the machine's `publish::on_published`) racing
//! `runtape memory rm`, checked exhaustively with `stateright` for small bounds.
//!
//! [`Publication`]: crate::store::Publication
//! [`publish_outcome`]: crate::store::global_memory::publish_outcome
//!
//! # What is modelled
//!
//! One global memory of `keys` keys, each a list of versions (a value, or none for a removal;
//! the version it was based on; who wrote it: a run's effect or a removal). `runs` runs share
//! it; each run's agent does read-modify-write: it increments every key it read (absent or
//! removed: 0) and, told of a conflict, increments the keys that moved again from their
//! current values, at most `retries` times before its turns run out (the run fails). Each run
//! has a row (lease epoch and owner, whether the lease has expired, the committed machine
//! state and its sequence number, a cancel request). Processes act in atomic steps, one store
//! transaction, one read or one commit each:
//!
//! - each run's **driver** holds its lease, and `resumers` per run (`runtape resume`, run
//!   again until the lease is free) take it up when its holder was killed or its lease
//!   expired (`AcquireLease`, reading the committed state under the lease): two resumers of
//!   one run race for it, and the one that lost it is fenced;
//! - a driver, from the committed state: reads the memory (`load_entries`) and commits it
//!   (`MemoryLoaded`); runs the agent's turn and commits `Publishing` with the staged writes
//!   (the turn's model call and every commit up to `Handoff --Proceed--> Publishing` folded
//!   into one fenced commit); performs the publish **after** `Publishing` is durable (the
//!   store write `Write::PublishMemory`: `check_epoch`, then `publish`), reads the outcome
//!   back (`publish_outcome`) and commits `MemoryPublished` (`on_published`: completed, or a
//!   new turn for the moved keys, or cancelled when a cancel waited);
//! - a **canceller** (`runtape cancel` of run 0): asks a live driver through the control
//!   column, which it commits at its next step boundary (a publish in flight stays in flight:
//!   `cancel_inflight`), or takes a run at rest up and commits the cancel itself;
//! - a **remover** (`runtape memory rm` of key 0): a version without a value;
//! - the environment: **SIGKILL** of any process at any step, and a lease **expiring** under
//!   a live driver (which keeps going, unaware).
//!
//! With a cap (`max_bytes_global`; a key's bytes are its value), the agent's `remember` is
//! refused when its writes would take its view past the cap, and the publish is refused
//! (`Publication::over_cap`, after the versions) when they would take the memory as it is
//! past the cap and grow it; told either way, the agent answers without writing. With
//! `own_keys`, runs add keys of their own (run `r` key `r % keys`) instead of sharing every
//! key.
//!
//! Abstracted away: several agents of one run (the writer of the moved keys is the one
//! agent), forgets staged by a run, the model's answers (the agent is a deterministic
//! increment), renewal timing, a driver's check of its lease by its own clock (so only the
//! fence stands between a stale driver and the store).
//!
//! # Invariants
//!
//! - a publish is applied at most once, and a run's write of a key lands at most once;
//! - no lost update: every version's base is the version before it, and every increment is
//!   of the value before it;
//! - all or none over an effect's keys; a refusal never writes;
//! - a failed or cancelled run published nothing; a completed run's writes are applied
//!   exactly once;
//! - the memory never holds more than its cap;
//! - the outcome read never finds a publish that wrote nothing and conflicted with nothing;
//! - when no process can act any more, every run has ended unless its last driver was
//!   killed (then `runtape resume` continues it); with as many resumers a run as SIGKILLs
//!   and no expiry, every run has ended.
//!
//! # Variants
//!
//! [`Protocol::FIXED`] is the code as built. Each flag removes one check; the tests show
//! which are needed alone (a counterexample) and which are defence in depth (every invariant
//! still holds without them):
//!
//! - without the version check an update is lost (two runs publish over the same base);
//! - a publish that writes the keys that did not move breaks all or none;
//! - without the cap held at the publish, runs that each fit their own view together pass
//!   it;
//! - an outcome read that does not look for the effect's own rows first calls an applied
//!   publish a conflict, and the run's agent increments a second time;
//! - without the applied check *and* the version check, a publish performed again by the
//!   run's next holder, after its first holder stopped between the write and its answer,
//!   applies twice;
//! - the applied check alone is defence in depth (with the version check, a publish performed
//!   again finds its key moved by itself, and the outcome read finds its rows), and so is the
//!   publish's lease fence (a stale driver's publish is of an effect already applied, or
//!   refused for good since versions only grow).

mod check;
mod steps;
#[cfg(test)]
mod tests;

/// Whether the model checks should also run at their wider bounds (minutes): set
/// `RUNTAPE_WIDE_MODELS` to any value. Both models here and in `exec::protocol_model` ask.
pub(crate) fn wide_models_asked_for() -> bool {
    std::env::var_os("RUNTAPE_WIDE_MODELS").is_some()
}

use check::{Outcome, check};
use stateright::{Model, Property};

/// Which checks the publish makes: each flag removes one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct Protocol {
    /// `publish` does not look for rows naming the effect before writing.
    pub(super) no_applied_check: bool,
    /// `publish` does not check the written keys' versions: it appends each write as the
    /// key's next version, whatever the version it was based on (last writer wins).
    pub(super) no_version_check: bool,
    /// `publish` writes the keys still at their base and skips the moved ones.
    pub(super) per_key: bool,
    /// `publish_outcome` reports the moved keys without first reading the effect's own rows.
    pub(super) outcome_ignores_own_rows: bool,
    /// The publish write skips `check_epoch`.
    pub(super) unfenced: bool,
    /// `publish` does not hold the byte cap (only the run's own check against its view does).
    pub(super) no_cap_at_publish: bool,
}

impl Protocol {
    /// The protocol as built.
    pub(super) const FIXED: Protocol = Protocol {
        no_applied_check: false,
        no_version_check: false,
        per_key: false,
        outcome_ignores_own_rows: false,
        unfenced: false,
        no_cap_at_publish: false,
    };
}

/// The model's bounds and protocol.
#[derive(Clone, Debug)]
pub(super) struct PublishModel {
    pub(super) protocol: Protocol,
    /// Runs sharing the memory.
    pub(super) runs: u8,
    /// Keys every run increments.
    pub(super) keys: u8,
    /// New turns after a conflict before a run's turns run out.
    pub(super) retries: u8,
    /// Resumers of each run.
    pub(super) resumers: u8,
    /// A `runtape cancel` of run 0.
    pub(super) canceller: bool,
    /// A `runtape memory rm` of key 0.
    pub(super) remover: bool,
    /// SIGKILLs the environment may send.
    pub(super) crashes: u8,
    /// Leases that may expire under a live driver.
    pub(super) expiries: u8,
    /// Each run increments one key of its own (run `r` key `r % keys`) instead of every key.
    pub(super) own_keys: bool,
    /// `max_bytes_global`: a key's bytes are its value (a removed key none).
    pub(super) cap: Option<u8>,
}

/// A key's version as a run sees it: `(version, value)`, version 0 for an absent key.
pub(super) type Seen = (u8, Option<u8>);

/// A write staged by the agent: `(base version, value)`.
pub(super) type Staged = (u8, u8);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum End {
    Completed,
    Failed,
    Cancelled,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Phase {
    /// `Preparing` (and the agent's turn).
    Preparing,
    /// `Publishing`, its `PublishMemory` effect at this sequence number.
    Publishing {
        effect: u8,
    },
    Done(End),
}

/// A run's committed machine state, as far as the publish is concerned.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Machine {
    pub(super) phase: Phase,
    /// The `MemoryLoaded` view, updated by each outcome.
    pub(super) view: Option<Vec<Seen>>,
    pub(super) staged: Vec<Option<Staged>>,
    /// Conflicts so far.
    pub(super) conflicts: u8,
    /// A `CancelRequested` waits for the publish's answer.
    pub(super) cancel_pending: bool,
    /// The agent was told the memory is full: it answers without writing.
    pub(super) gave_up: bool,
}

impl Machine {
    pub(super) fn ended(&self) -> bool {
        matches!(self.phase, Phase::Done(_))
    }
}

/// A run's row in the store.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct RunRow {
    pub(super) epoch: u8,
    pub(super) owner: Option<u8>,
    pub(super) expired: bool,
    pub(super) seq: u8,
    pub(super) machine: Machine,
    /// The control column holds a cancel.
    pub(super) cancel_requested: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Writer {
    Publish { run: u8, effect: u8 },
    Removal,
}

/// One version of a key (version = position + 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct Row {
    pub(super) value: Option<u8>,
    pub(super) base: u8,
    pub(super) by: Writer,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Role {
    Driver,
    Resumer,
    Canceller,
    Remover,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Why {
    Ended,
    Fenced,
    OutOfSequence,
    Damaged,
    Refused,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Pc {
    Acquire,
    /// Load the memory and commit `MemoryLoaded`.
    ReadMemory,
    /// The agent's turn and the commit of `Publishing`.
    Turn,
    /// The store's publish write.
    PublishWrite,
    /// `publish_outcome` and the commit of `MemoryPublished`.
    PublishRead,
    CommitCancel,
    Exit(Why),
}

/// What `publish_outcome` answered.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum Answer {
    Published,
    /// Each moved key as it is now (`None`: not moved).
    Conflict(Vec<Option<Seen>>),
    /// Refused over the cap (the write's own answer, `Written::MemoryOverCap`).
    OverCap,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Proc {
    pub(super) role: Role,
    pub(super) run: u8,
    pub(super) pc: Pc,
    pub(super) alive: bool,
    pub(super) epoch: u8,
    pub(super) seq: u8,
    /// The machine state as this process last committed or read it.
    pub(super) local: Option<Machine>,
    /// The publish write refused over the cap.
    pub(super) over_cap: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct World {
    pub(super) memory: Vec<Vec<Row>>,
    pub(super) runs: Vec<RunRow>,
    pub(super) procs: Vec<Proc>,
    /// Every `PublishMemory` committed: `(run, effect, keys written)`.
    pub(super) emitted: Vec<(u8, u8, Vec<bool>)>,
    /// Every refusal committed: `(run, effect)`.
    pub(super) refused: Vec<(u8, u8)>,
    pub(super) crashes: u8,
    pub(super) expiries: u8,
    /// For `sometimes` properties.
    pub(super) reperformed_found_rows: bool,
    pub(super) conflict_with_removal: bool,
    pub(super) cancel_waited_for_publish: bool,
    pub(super) refused_over_cap: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Action {
    Step(u8),
    /// A lease holder commits the cancel its control column asks for.
    Poll(u8),
    Crash(u8),
    Expire(u8),
}

impl World {
    /// The rows naming `run`'s writes (of effect `effect` when given) to `key`.
    pub(super) fn rows_of(&self, key: usize, run: u8, effect: Option<u8>) -> usize {
        self.memory[key]
            .iter()
            .filter(|r| match r.by {
                Writer::Publish { run: r2, effect: e } => {
                    r2 == run && effect.is_none_or(|want| want == e)
                }
                Writer::Removal => false,
            })
            .count()
    }

    /// No process can act any more.
    pub(super) fn quiescent(&self, model: &PublishModel) -> bool {
        let mut actions = Vec::new();
        model.actions(self, &mut actions);
        actions
            .iter()
            .all(|a| matches!(a, Action::Crash(_) | Action::Expire(_)))
    }
}

impl Model for PublishModel {
    type State = World;
    type Action = Action;

    fn init_states(&self) -> Vec<World> {
        let fresh = Machine {
            phase: Phase::Preparing,
            view: None,
            staged: vec![None; self.keys as usize],
            conflicts: 0,
            cancel_pending: false,
            gave_up: false,
        };
        let mut procs = Vec::new();
        for run in 0..self.runs {
            let mut driver = Self::proc(Role::Driver, run, Pc::ReadMemory);
            driver.epoch = 1;
            driver.local = Some(fresh.clone());
            procs.push(driver);
        }
        for _ in 0..self.resumers {
            procs.extend((0..self.runs).map(|run| Self::proc(Role::Resumer, run, Pc::Acquire)));
        }
        if self.canceller {
            procs.push(Self::proc(Role::Canceller, 0, Pc::Acquire));
        }
        if self.remover {
            procs.push(Self::proc(Role::Remover, 0, Pc::Acquire));
        }
        let runs = (0..self.runs)
            .map(|run| RunRow {
                epoch: 1,
                owner: Some(run),
                expired: false,
                seq: 0,
                machine: fresh.clone(),
                cancel_requested: false,
            })
            .collect();
        vec![World {
            memory: vec![Vec::new(); self.keys as usize],
            runs,
            procs,
            emitted: Vec::new(),
            refused: Vec::new(),
            crashes: 0,
            expiries: 0,
            reperformed_found_rows: false,
            conflict_with_removal: false,
            cancel_waited_for_publish: false,
            refused_over_cap: false,
        }]
    }

    fn actions(&self, w: &World, actions: &mut Vec<Action>) {
        for (i, p) in w.procs.iter().enumerate() {
            let n = i as u8;
            if !p.alive || matches!(p.pc, Pc::Exit(_)) {
                continue;
            }
            if self.can_step(w, i) {
                actions.push(Action::Step(n));
            }
            if w.crashes < self.crashes {
                actions.push(Action::Crash(n));
            }
            let row = &w.runs[p.run as usize];
            let boundary = matches!(p.pc, Pc::ReadMemory | Pc::Turn | Pc::PublishWrite);
            let pending = p.local.as_ref().is_some_and(|m| m.cancel_pending);
            if boundary && row.cancel_requested && Self::holds_lease(w, i) && !pending {
                actions.push(Action::Poll(n));
            }
        }
        if w.expiries < self.expiries {
            for (r, row) in w.runs.iter().enumerate() {
                let live_owner = row.owner.is_some_and(|o| {
                    let p = &w.procs[o as usize];
                    p.alive && !matches!(p.pc, Pc::Exit(_))
                });
                if live_owner && !row.expired {
                    actions.push(Action::Expire(r as u8));
                }
            }
        }
    }

    fn next_state(&self, last: &World, action: Action) -> Option<World> {
        let mut w = last.clone();
        match action {
            Action::Step(i) => self.step(&mut w, i as usize),
            Action::Poll(i) => self.commit_cancel(&mut w, i as usize),
            Action::Crash(i) => {
                w.crashes += 1;
                w.procs[i as usize].alive = false;
            }
            Action::Expire(r) => {
                w.expiries += 1;
                w.runs[r as usize].expired = true;
            }
        }
        // What a process that exited or was killed last held matters to no one: forgetting it
        // merges states that differ only by it.
        for p in &mut w.procs {
            if !p.alive || matches!(p.pc, Pc::Exit(_)) {
                (p.epoch, p.seq, p.local, p.over_cap) = (0, 0, None, false);
            }
        }
        Some(w)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(AT_MOST_ONCE, |m: &PublishModel, w: &World| {
                w.emitted.iter().all(|(run, effect, _)| {
                    (0..m.keys as usize).all(|k| w.rows_of(k, *run, Some(*effect)) <= 1)
                }) && (0..m.runs)
                    .all(|run| (0..m.keys as usize).all(|k| w.rows_of(k, run, None) <= 1))
            }),
            Property::always(NO_LOST_UPDATE, |_, w: &World| {
                w.memory.iter().all(|rows| {
                    rows.iter().enumerate().all(|(i, r)| {
                        let before = if i == 0 { None } else { rows[i - 1].value };
                        let increment = match r.by {
                            Writer::Publish { .. } => r.value == Some(before.unwrap_or(0) + 1),
                            Writer::Removal => r.value.is_none(),
                        };
                        r.base as usize == i && increment
                    })
                })
            }),
            Property::always(ALL_OR_NONE, |m: &PublishModel, w: &World| {
                w.emitted.iter().all(|(run, effect, keys)| {
                    let written: Vec<bool> = (0..m.keys as usize)
                        .map(|k| w.rows_of(k, *run, Some(*effect)) > 0)
                        .collect();
                    written.iter().all(|b| !b) || written == *keys
                })
            }),
            Property::always(REFUSAL_WRITES_NOTHING, |m: &PublishModel, w: &World| {
                w.refused.iter().all(|(run, effect)| {
                    (0..m.keys as usize).all(|k| w.rows_of(k, *run, Some(*effect)) == 0)
                })
            }),
            Property::always(
                ENDED_RUNS_PUBLISHED_AS_THEY_SAY,
                |m: &PublishModel, w: &World| {
                    w.runs.iter().enumerate().all(|(run, row)| {
                        let run = run as u8;
                        let rows = |k: usize| w.rows_of(k, run, None);
                        let none = (0..m.keys as usize).all(|k| rows(k) == 0);
                        match row.machine.phase {
                            // Refused over the cap, the agent answered without writing.
                            Phase::Done(End::Completed) if row.machine.gave_up => none,
                            Phase::Done(End::Completed) => (0..m.keys as usize)
                                .all(|k| rows(k) == usize::from(m.writes(run, k))),
                            Phase::Done(_) => none,
                            _ => true,
                        }
                    })
                },
            ),
            Property::always(CAP_HELD, |m: &PublishModel, w: &World| {
                m.cap.is_none_or(|cap| {
                    let bytes: u32 = Self::latest(w)
                        .iter()
                        .map(|(_, v)| u32::from(v.unwrap_or(0)))
                        .sum();
                    bytes <= u32::from(cap)
                })
            }),
            Property::always(NEVER_DAMAGED, |_, w: &World| {
                w.procs
                    .iter()
                    .all(|p| !matches!(p.pc, Pc::Exit(Why::Damaged) | Pc::Exit(Why::OutOfSequence)))
            }),
            Property::always(NO_RUN_LEFT, |m: &PublishModel, w: &World| {
                // Without expiries, and with as many resumers a run as SIGKILLs, a resumer is
                // always left to finish a run: then every run ends.
                let resumer_left = m.expiries == 0 && m.crashes <= m.resumers;
                !w.quiescent(m)
                    || w.runs.iter().all(|row| {
                        let killed = row.owner.is_some_and(|o| !w.procs[o as usize].alive);
                        row.machine.ended() || (killed && !resumer_left)
                    })
            }),
            Property::sometimes("every run completes", |_, w: &World| {
                w.runs
                    .iter()
                    .all(|r| r.machine.phase == Phase::Done(End::Completed))
            }),
            Property::sometimes("a run completes after a conflict", |_, w: &World| {
                w.runs.iter().any(|r| {
                    r.machine.phase == Phase::Done(End::Completed) && r.machine.conflicts > 0
                })
            }),
            Property::sometimes("a run's turns run out", |_, w: &World| {
                w.runs
                    .iter()
                    .any(|r| r.machine.phase == Phase::Done(End::Failed))
            }),
            Property::sometimes(REPERFORMED, |_, w: &World| w.reperformed_found_rows),
            Property::sometimes(REMOVAL_CONFLICT, |_, w: &World| w.conflict_with_removal),
            Property::sometimes(CANCEL_WAITED, |_, w: &World| w.cancel_waited_for_publish),
            Property::sometimes(OVER_CAP, |m: &PublishModel, w: &World| {
                m.cap.is_none() || w.refused_over_cap
            }),
        ]
    }
}

pub(super) const AT_MOST_ONCE: &str = "a publish is applied at most once";
pub(super) const NO_LOST_UPDATE: &str = "no lost update";
pub(super) const ALL_OR_NONE: &str = "all or none over an effect's keys";
pub(super) const REFUSAL_WRITES_NOTHING: &str = "a refusal never writes";
pub(super) const ENDED_RUNS_PUBLISHED_AS_THEY_SAY: &str =
    "a failed or cancelled run published nothing, a completed one exactly once";
pub(super) const CAP_HELD: &str = "the memory never holds more than its cap";
pub(super) const NEVER_DAMAGED: &str = "no driver finds the store damaged or out of sequence";
pub(super) const REPERFORMED: &str = "a publish performed again finds its rows";
pub(super) const REMOVAL_CONFLICT: &str = "a publish conflicts with a removal";
pub(super) const CANCEL_WAITED: &str = "a cancel waits for the publish's answer";
pub(super) const OVER_CAP: &str = "a publish is refused over the cap";
pub(super) const NO_RUN_LEFT: &str =
    "when no process can act, every run has ended unless its last driver was killed";

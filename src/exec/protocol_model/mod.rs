//! A model of the lease, outbox and commit protocol (`takeup.rs`, `driver/`, `perform.rs`,
//! the store's `AcquireLease` / `MarkStarted` / `Commit` / `ReleaseLease` / `SetControl`),
//! checked exhaustively with `stateright` for small bounds.
//!
//! # What is modelled
//!
//! One run whose history is `Start` (emitting a non-idempotent call) and then one result per
//! call: `calls` non-idempotent calls one after the other, then `Done`. The database row
//! holds the lease (epoch, owner, whether it has expired), the committed history, the status,
//! one outbox row per call, and a control request. Processes act on it in atomic steps, one
//! SQLite transaction or one outside action each:
//!
//! - the **driver** that created the run holds the lease and is about to perform call 0;
//! - **resumers** take the run up (`AcquireLease`, read, decide: perform a pending call,
//!   report a started one in doubt — the agent's policy `fail` — or stop);
//! - a **canceller** (`runtape cancel` from another process): takes a run at rest up and
//!   commits the cancellation, or asks its live driver through the control column;
//! - a **pauser** (`runtape pause`): writes the control column;
//! - the environment: **SIGKILL** of any process (its lease is then taken over at once),
//!   **SIGSTOP** of a lease holder until its lease **expires** (then SIGCONT), **SIGTERM**
//!   (a graceful stop: no new call; a call in flight may finish, or is abandoned when the
//!   grace period ends).
//!
//! Every decision the store makes in these steps — may this process take the run up, which
//! control request survives a take-up, is this commit fenced or out of sequence, may this call
//! be started, what status a release leaves, may a request be written — is the store's own
//! pure rule from [`crate::store::protocol`], the one SQLite's, PostgreSQL's and the in-memory
//! store's writers call inside their transactions; the model keeps only the row.
//!
//! A driver marks a call `started` (fenced by the epoch, renewing the lease), checks its lease
//! by its own clock, performs the call, and commits the result (fenced, in sequence). It polls
//! the control column while a call is outstanding. Every commit and release is fenced by the
//! epoch. (In the engine one lease keeper reads the control column and lease of all the runs
//! it drives in one query and hands each request to its driver; a process acts as one unit —
//! frozen, killed or stopped together — so a poll stays one atomic step of the process here.
//! Its renewals are fenced by the epoch and never revive a released lease, and expiry is
//! modelled only for a frozen process, so renewal timing changes nothing modelled.)
//!
//! # Invariants
//!
//! - a non-idempotent call is performed at most once;
//! - a committed step is never lost (every acknowledged commit stays in the history);
//! - the status says what the history says (terminal exactly when the run is done);
//! - a run with no live driver is never reported running forever: when no process can act
//!   any more, a `running` run is one a resume can take over and continue.
//!
//! # Variants
//!
//! [`Protocol::TODAY`] is the protocol before issue 11: the run is read before the lease is
//! taken, `AcquireLease` takes the lease of a finished run, `MarkStarted` does not refuse an
//! answered call, and a release writes its status unconditionally (`running` on the error
//! path). The checker finds the double perform and the wedged run. [`Protocol::FIXED`] is the
//! protocol as built; every invariant holds. Each defect can be switched on alone.

mod steps;

use stateright::{Checker, Model, Property};

/// Which protocol the model follows: each flag is one defect of the old protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct Protocol {
    /// The run's state is read before the lease is taken (the outbox after).
    pub(super) read_before_lease: bool,
    /// `AcquireLease` takes the lease of a run that has ended.
    pub(super) acquire_finished: bool,
    /// `MarkStarted` lets a call whose result is committed be started again.
    pub(super) mark_answered: bool,
    /// A release writes its status whenever the epoch matches (even over a terminal status,
    /// even when already released), and the error path writes `running`.
    pub(super) unfenced_release: bool,
    /// A driver does not check its lease by its own clock before starting a call.
    pub(super) no_lease_check: bool,
}

impl Protocol {
    /// The protocol before issue 11.
    pub(super) const TODAY: Protocol = Protocol {
        read_before_lease: true,
        acquire_finished: true,
        mark_answered: true,
        unfenced_release: true,
        no_lease_check: true,
    };
    /// The protocol as built.
    pub(super) const FIXED: Protocol = Protocol {
        read_before_lease: false,
        acquire_finished: false,
        mark_answered: false,
        unfenced_release: false,
        no_lease_check: false,
    };
}

/// The model's bounds and protocol.
#[derive(Clone, Debug)]
pub(super) struct ProtocolModel {
    pub(super) protocol: Protocol,
    /// Non-idempotent calls in the run, one after the other.
    pub(super) calls: u8,
    /// Processes that run `resume` (besides the first driver).
    pub(super) resumers: u8,
    /// A `runtape cancel` from another process.
    pub(super) canceller: bool,
    /// A `runtape pause` from another process.
    pub(super) pauser: bool,
    /// SIGKILLs the environment may send.
    pub(super) crashes: u8,
    /// SIGSTOPs long enough for the lease to expire.
    pub(super) freezes: u8,
    /// SIGTERMs.
    pub(super) terms: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Phase {
    /// Call `i` is outstanding.
    Calling(u8),
    Done(End),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum End {
    Completed,
    InDoubt,
    Cancelled,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Status {
    Running,
    Paused,
    Completed,
    Failed,
    Cancelled,
}

impl Status {
    fn terminal(self) -> bool {
        matches!(self, Status::Completed | Status::Failed | Status::Cancelled)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Ob {
    Pending,
    Started,
    Done,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Ctl {
    Pause,
    Cancel,
}

/// The run's database row, history and outbox.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Db {
    epoch: u8,
    owner: Option<u8>,
    expired: bool,
    history: Vec<Phase>,
    status: Status,
    outbox: Vec<Option<Ob>>,
    control: Option<Ctl>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Role {
    Driver,
    Resumer,
    Canceller,
    Pauser,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Pc {
    Start,
    Acquire,
    Load,
    Mark(u8),
    Check(u8),
    Perform(u8),
    Commit(u8),
    CommitInDoubt(u8),
    CommitCancel,
    Release(Status),
    ErrorRelease,
    SetControl(Ctl),
    Exit,
}

/// What a process read of the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct View {
    seq: u8,
    phase: Phase,
    outbox: Option<Ob>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Proc {
    role: Role,
    pc: Pc,
    epoch: u8,
    view: Option<View>,
    alive: bool,
    frozen: bool,
    /// Its lease expired while it was frozen after its last renewal.
    slept_past_lease: bool,
    draining: bool,
    pause: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct World {
    db: Db,
    procs: Vec<Proc>,
    /// Times each call was performed.
    performed: Vec<u8>,
    /// Every commit acknowledged to a process: `(seq, phase)`.
    acked: Vec<(u8, Phase)>,
    crashes: u8,
    freezes: u8,
    terms: u8,
    /// A lease expired and the run was taken over (for a `sometimes` property).
    taken_over_after_expiry: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Action {
    Step(u8),
    Poll(u8),
    Crash(u8),
    Freeze(u8),
    Expire,
    Thaw(u8),
    Term(u8),
    GraceOver(u8),
}

impl World {
    fn seq(&self) -> u8 {
        self.db.history.len() as u8
    }

    fn phase(&self) -> Phase {
        self.db.history.last().copied().unwrap_or(Phase::Calling(0))
    }

    /// No process can act any more (every one has exited or died).
    fn quiescent(&self) -> bool {
        self.procs
            .iter()
            .all(|p| !p.alive || (p.pc == Pc::Exit && !p.frozen))
    }
}

impl Model for ProtocolModel {
    type State = World;
    type Action = Action;

    fn init_states(&self) -> Vec<World> {
        let mut outbox = vec![None; self.calls as usize];
        outbox[0] = Some(Ob::Pending);
        let mut driver = Self::proc(Role::Driver, Pc::Mark(0));
        driver.epoch = 1;
        driver.view = Some(View {
            seq: 1,
            phase: Phase::Calling(0),
            outbox: Some(Ob::Pending),
        });
        let mut procs = vec![driver];
        let first = if self.protocol.read_before_lease {
            Pc::Start
        } else {
            Pc::Acquire
        };
        procs.extend((0..self.resumers).map(|_| Self::proc(Role::Resumer, first)));
        if self.canceller {
            procs.push(Self::proc(Role::Canceller, Pc::Start));
        }
        if self.pauser {
            procs.push(Self::proc(Role::Pauser, Pc::Start));
        }
        vec![World {
            db: Db {
                epoch: 1,
                owner: Some(0),
                expired: false,
                history: vec![Phase::Calling(0)],
                status: Status::Running,
                outbox,
                control: None,
            },
            performed: vec![0; self.calls as usize],
            procs,
            acked: vec![(1, Phase::Calling(0))],
            crashes: 0,
            freezes: 0,
            terms: 0,
            taken_over_after_expiry: false,
        }]
    }

    fn actions(&self, w: &World, actions: &mut Vec<Action>) {
        for (i, p) in w.procs.iter().enumerate() {
            let n = i as u8;
            if !p.alive {
                continue;
            }
            if p.frozen {
                actions.push(Action::Thaw(n));
                continue;
            }
            if p.pc != Pc::Exit {
                actions.push(Action::Step(n));
                if w.crashes < self.crashes {
                    actions.push(Action::Crash(n));
                }
            }
            let driving = matches!(
                p.pc,
                Pc::Mark(_) | Pc::Check(_) | Pc::Perform(_) | Pc::Commit(_)
            );
            if driving && w.db.control.is_some() && Self::holds_lease(w, i) {
                actions.push(Action::Poll(n));
            }
            if driving && Self::holds_lease(w, i) && w.freezes < self.freezes {
                actions.push(Action::Freeze(n));
            }
            let drives = matches!(p.role, Role::Driver | Role::Resumer);
            if drives && p.pc != Pc::Exit && !p.draining && w.terms < self.terms {
                actions.push(Action::Term(n));
            }
            if p.draining && driving {
                actions.push(Action::GraceOver(n));
            }
        }
        if let Some(o) = w.db.owner
            && !w.db.expired
            && w.procs[o as usize].frozen
        {
            actions.push(Action::Expire);
        }
    }

    fn next_state(&self, last: &World, action: Action) -> Option<World> {
        let mut w = last.clone();
        match action {
            Action::Step(i) => self.step(&mut w, i as usize),
            Action::Poll(i) => {
                let i = i as usize;
                match w.db.control.take() {
                    Some(Ctl::Pause) => w.procs[i].pause = true,
                    Some(Ctl::Cancel) => {
                        // Cancel aborts the call in flight (a started one stays started: it
                        // is simply not answered) and commits the cancellation.
                        w.procs[i].pc = Pc::CommitCancel;
                    }
                    None => {}
                }
            }
            Action::Crash(i) => {
                w.crashes += 1;
                w.procs[i as usize].alive = false;
            }
            Action::Freeze(i) => {
                w.freezes += 1;
                w.procs[i as usize].frozen = true;
            }
            Action::Expire => {
                w.db.expired = true;
                if let Some(o) = w.db.owner {
                    w.procs[o as usize].slept_past_lease = true;
                }
            }
            Action::Thaw(i) => w.procs[i as usize].frozen = false,
            Action::Term(i) => {
                w.terms += 1;
                w.procs[i as usize].draining = true;
            }
            Action::GraceOver(i) => {
                // The call in flight is abandoned (killed); nothing it returns is committed.
                w.procs[i as usize].pc = Pc::Release(Status::Paused);
            }
        }
        Some(w)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "a non-idempotent call is performed at most once",
                |_, w: &World| w.performed.iter().all(|n| *n <= 1),
            ),
            Property::always("a committed step is never lost", |_, w: &World| {
                w.acked
                    .iter()
                    .all(|(seq, phase)| w.db.history.get(*seq as usize - 1) == Some(phase))
            }),
            Property::always(
                "the status says what the history says",
                |_, w: &World| match w.phase() {
                    Phase::Calling(_) => !w.db.status.terminal(),
                    Phase::Done(End::Completed) => w.db.status == Status::Completed,
                    Phase::Done(End::InDoubt) => w.db.status == Status::Failed,
                    Phase::Done(End::Cancelled) => w.db.status == Status::Cancelled,
                },
            ),
            Property::always(
                "a run with no live driver is never reported running forever",
                |_, w: &World| {
                    !w.quiescent()
                        || w.db.status != Status::Running
                        || matches!(w.phase(), Phase::Calling(_))
                },
            ),
            Property::sometimes("the run completes", |_, w: &World| {
                w.phase() == Phase::Done(End::Completed)
            }),
            Property::sometimes("a call is found in doubt", |_, w: &World| {
                w.phase() == Phase::Done(End::InDoubt)
            }),
            Property::sometimes("the run is cancelled", |_, w: &World| {
                w.phase() == Phase::Done(End::Cancelled)
            }),
            Property::sometimes(
                "a run is taken over after its lease expired",
                |_, w: &World| w.taken_over_after_expiry,
            ),
            Property::sometimes("a stop leaves the run paused", |_, w: &World| {
                w.quiescent() && w.db.status == Status::Paused
            }),
        ]
    }
}

/// What one exhaustive check found: unique states, and the properties that were violated.
pub(super) struct Outcome {
    pub(super) states: usize,
    pub(super) violated: Vec<&'static str>,
    pub(super) missing_examples: Vec<&'static str>,
    pub(super) elapsed: std::time::Duration,
}

/// Resumers are interchangeable: the representative of a state lists them sorted (and the
/// lease owner renumbered to match), so states that differ only by which resumer did what are
/// explored once.
fn representative(w: &World) -> World {
    let first = 1;
    let last = w
        .procs
        .iter()
        .rposition(|p| p.role == Role::Resumer)
        .map_or(first, |i| i + 1);
    if last <= first + 1 {
        return w.clone();
    }
    let mut order: Vec<usize> = (first..last).collect();
    order.sort_by(|a, b| {
        let key = |i: usize| (format!("{:?}", w.procs[i]), w.db.owner == Some(i as u8));
        key(*a).cmp(&key(*b))
    });
    let mut out = w.clone();
    for (slot, from) in (first..last).zip(&order) {
        out.procs[slot] = w.procs[*from].clone();
        if w.db.owner == Some(*from as u8) {
            out.db.owner = Some(slot as u8);
        }
    }
    out
}

/// Runs the checker over every reachable state of `model` (depth first, with the resumers'
/// symmetry), or until `stop_at` is violated when given.
pub(super) fn check(model: ProtocolModel, stop_at: Option<&'static str>) -> Outcome {
    let started = std::time::Instant::now();
    let properties = model.properties();
    let mut builder = model.checker().symmetry_fn(representative);
    if let Some(name) = stop_at {
        builder = builder.finish_when(stateright::HasDiscoveries::AnyOf(
            std::iter::once(name).collect(),
        ));
    }
    let checker = builder.spawn_dfs().join();
    let mut violated = Vec::new();
    let mut missing_examples = Vec::new();
    for p in properties {
        let found = checker.discovery(p.name).is_some();
        match p.expectation {
            stateright::Expectation::Sometimes if !found => missing_examples.push(p.name),
            stateright::Expectation::Always | stateright::Expectation::Eventually if found => {
                violated.push(p.name)
            }
            _ => {}
        }
    }
    Outcome {
        states: checker.unique_state_count(),
        violated,
        missing_examples,
        elapsed: started.elapsed(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AT_MOST_ONCE: &str = "a non-idempotent call is performed at most once";
    const STATUS: &str = "the status says what the history says";

    /// The bounds CI checks: the first driver, two resumers and a canceller; one SIGKILL, one
    /// SIGSTOP past the lease, one SIGTERM, anywhere.
    fn model(protocol: Protocol, calls: u8) -> ProtocolModel {
        ProtocolModel {
            protocol,
            calls,
            resumers: 2,
            canceller: true,
            pauser: false,
            crashes: 1,
            freezes: 1,
            terms: 1,
        }
    }

    fn report(name: &str, o: &Outcome) {
        println!(
            "protocol model, {name}: {} states in {:.2} s; violated: {:?}",
            o.states,
            o.elapsed.as_secs_f64(),
            o.violated
        );
    }

    fn holds(name: &str, m: ProtocolModel) {
        let o = check(m, None);
        report(name, &o);
        assert!(o.violated.is_empty(), "{name}: violated {:?}", o.violated);
        assert!(
            o.missing_examples.is_empty(),
            "{name}: the model never reaches {:?}",
            o.missing_examples
        );
    }

    #[test]
    fn the_protocol_as_built_keeps_every_invariant() {
        holds("as built, one call", model(Protocol::FIXED, 1));
        holds("as built, two calls", model(Protocol::FIXED, 2));
    }

    #[test]
    fn a_pause_request_from_another_process_keeps_every_invariant() {
        let m = ProtocolModel {
            resumers: 1,
            canceller: false,
            pauser: true,
            ..model(Protocol::FIXED, 2)
        };
        let o = check(m, None);
        report("as built, with pause", &o);
        assert!(o.violated.is_empty(), "violated {:?}", o.violated);
    }

    /// Wider bounds, minutes: a canceller and a pauser besides the resumers, then three
    /// resumers, then two of each fault. Checked when `RUNTAPE_WIDE_MODELS` is set
    /// (12.3M states in 90 s in release; minutes in a debug build):
    /// `RUNTAPE_WIDE_MODELS=1 cargo test --release --lib protocol_model -- --nocapture`.
    /// Every run checks the same invariants at the smaller bounds below.
    #[test]
    fn the_protocol_as_built_keeps_every_invariant_at_the_bounds_asked_for() {
        let wide = |resumers, faults| ProtocolModel {
            resumers,
            canceller: true,
            pauser: true,
            crashes: faults,
            freezes: faults,
            terms: faults,
            ..model(Protocol::FIXED, 2)
        };
        holds(
            "as built, 1 resumer, canceller, pauser, one of each fault",
            ProtocolModel {
                resumers: 1,
                ..wide(1, 1)
            },
        );
        if crate::store::publish_model::wide_models_asked_for() {
            holds("as built, 2 resumers, canceller, pauser", wide(2, 1));
            holds("as built, 3 resumers, canceller, pauser", wide(3, 1));
            holds(
                "as built, 2 resumers, canceller, pauser, 2 of each fault",
                wide(2, 2),
            );
        }
    }

    /// Workers on a shared PostgreSQL database are this model's resumers: each takes a run up
    /// by the same compare-and-swap (`claim` then `AcquireLease`), and the lease's expiry is a
    /// fact of the database (`Expire` sets it in `Db`, on the database's clock, whatever any
    /// process's clock says). A partitioned worker is a lease holder that can say nothing
    /// (`Freeze`) until its lease expired and another worker took the run over; it then comes
    /// back (`Thaw`) with its view of the run, and every write it tries is fenced. Three
    /// workers, two partitions and a SIGKILL: every invariant holds.
    #[test]
    fn many_workers_with_database_clock_leases_and_partitions_keep_every_invariant() {
        let m = ProtocolModel {
            resumers: 3,
            canceller: false,
            pauser: false,
            crashes: 1,
            freezes: 2,
            terms: 0,
            ..model(Protocol::FIXED, 2)
        };
        let o = check(m, None);
        report("as built, 3 workers, 2 partitions, 1 SIGKILL", &o);
        assert!(o.violated.is_empty(), "violated {:?}", o.violated);
    }

    #[test]
    fn todays_protocol_performs_a_call_twice_and_wedges_the_run() {
        for property in [AT_MOST_ONCE, STATUS] {
            let o = check(model(Protocol::TODAY, 1), Some(property));
            report("before issue 11", &o);
            assert!(o.violated.contains(&property), "{:?}", o.violated);
        }
    }

    #[test]
    fn reading_before_the_lease_performs_a_call_twice() {
        // Every other fix kept but the outbox's refusal of an answered call: a resumer that
        // read the run before taking the lease performs a call another resumer answered.
        let read_first = Protocol {
            read_before_lease: true,
            mark_answered: true,
            ..Protocol::FIXED
        };
        let o = check(model(read_first, 2), Some(AT_MOST_ONCE));
        report("read before the lease", &o);
        assert!(o.violated.contains(&AT_MOST_ONCE), "{:?}", o.violated);
        // Taking the lease first is enough on its own.
        let lease_first = Protocol {
            mark_answered: true,
            ..Protocol::FIXED
        };
        holds(
            "lease first, answered calls not refused",
            model(lease_first, 2),
        );
    }
}

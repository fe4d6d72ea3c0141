//! Why an operation was refused or failed: [`OpsError`], with a stable machine-readable
//! [`code`](OpsError::code) and the [`ErrorKind`] a front end maps to an exit status or an HTTP
//! status. Its `Display` is the one line the `runtape` command prints after `error: `.

use std::path::PathBuf;

use crate::config::ConfigError;
use crate::exec::EngineError;
use crate::history::{Divergence, HistoryError};
use crate::machine::{MachineError, RunId};
use crate::receipt::ReceiptError;
use crate::store::{RunStatus, StoreError};

/// What kind of failure an [`OpsError`] is: what a front end does with it. The `runtape`
/// command exits 2 for [`Input`](Self::Input), [`NotFound`](Self::NotFound) and
/// [`Conflict`](Self::Conflict), 1 for [`CheckFailed`](Self::CheckFailed), 3 for
/// [`Internal`](Self::Internal); `runtape serve` answers 400, 404, 409, 409 and 500.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Malformed, invalid or not applicable input; nothing was changed.
    Input,
    /// The run was removed by `runtape prune`; its tombstone says how it ended.
    Pruned,
    /// It names a run or step (or memory key) that does not exist.
    NotFound,
    /// The run is in a state that refuses it now: driven elsewhere, already ended, not
    /// waiting for anyone.
    Conflict,
    /// A check found a problem: the run does not match its sealed head or does not verify.
    CheckFailed,
    /// An internal or storage error (a full disk, a damaged file, a lost connection).
    Internal,
}

/// An operation that was refused or failed. Nothing it refuses has been changed.
///
/// Match on the variant, or on [`code`](Self::code) (stable strings such as
/// `"run_not_found"`, `"finished"`, `"lease_held"`, `"tampered"`, `"bad_edit"`), which also
/// names the reason inside the wrapped lower-level errors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpsError {
    /// A run reference (`RUN` or `RUN@SEQ`) that is not one.
    #[error(
        "malformed run reference `{input}`: {why}; write RUN or RUN@SEQ (e.g. 01k2x9w3f4mnq7rs@12)"
    )]
    BadRunRef {
        /// The reference as given, quoted for a message ([`super::quoted`]).
        input: String,
        /// What is wrong with it.
        why: String,
    },
    /// `RUN@SEQ` given to an operation that acts on a whole run.
    #[error(
        "`{input}` names step {seq}, but {what}: write the run id alone, `{run}` (`runtape show {run}@{seq}` shows the step; `runtape fork {run}@{seq}` runs on from it)"
    )]
    StepNamed {
        /// The reference as given, quoted.
        input: String,
        /// The run it names.
        run: RunId,
        /// The step it names.
        seq: u64,
        /// What the operation does with a run.
        what: String,
    },
    /// A setting (an environment variable, a nice value) that is not valid.
    #[error("{0}")]
    BadSetting(String),
    /// The receipt signing key cannot be read.
    #[error("{0}")]
    ReceiptKey(#[from] ReceiptError),
    /// `durability = "normal"` asked of a PostgreSQL database.
    #[error(
        "durability \"normal\" is for SQLite files: a PostgreSQL database commits as its server's synchronous_commit says (set that on the server to trade durability for speed) – drop --durability normal or the spec's [run] durability"
    )]
    NormalDurabilityOnPostgres,
    /// Neither the caller nor the spec file gives a goal.
    #[error(
        "no goal: give one (`runtape run {} \"GOAL\"{}`) or set `goal` in the spec file",
        spec.display(),
        if *detach { " --detach" } else { "" }
    )]
    NoGoal {
        /// The spec file.
        spec: PathBuf,
        /// Whether the run was to be queued for workers.
        detach: bool,
    },
    /// A run started from a program: its providers and tools are not stored, so only that
    /// program can continue it.
    #[error(
        "run {run} was started from a program, not a spec file, so its providers are not stored; continue it from that program"
    )]
    NoStoredSetup {
        /// The run.
        run: RunId,
    },
    /// A budget raise that is not `budget.KEY=VALUE`, `run.KEY=VALUE` or `AGENT.KEY=VALUE`.
    #[error("{0}")]
    BadRaise(String),
    /// A fork edit that does not parse.
    #[error("{0}")]
    BadEdit(String),
    /// An answer for a run that does not wait for a person itself while several of its child
    /// runs do: each must be answered on its own.
    #[error(
        "run {run} does not wait for a person itself; its child runs {} do: answer each with `runtape resume CHILD --approve` (or --reject, --input), then `runtape resume {run}`",
        children.iter().map(RunId::as_str).collect::<Vec<_>>().join(", ")
    )]
    ChildrenWaiting {
        /// The run.
        run: RunId,
        /// Its children that wait for a person.
        children: Vec<RunId>,
    },
    /// `runtape wake` of a run that waits on no timer.
    #[error(
        "run {run} is {status} and waits on no timer (no sleep, no deadline); nothing was woken — `runtape resume {run}` continues a stopped run"
    )]
    NoTimer {
        /// The run.
        run: RunId,
        /// Its status.
        status: RunStatus,
    },
    /// Only a running run can be paused.
    #[error("run {run} is {status}; only a running run can be paused")]
    NotRunning {
        /// The run.
        run: RunId,
        /// Its status.
        status: RunStatus,
    },
    /// The run ended (completed, failed or cancelled otherwise) before a request reached it.
    #[error("run {run} {status} at step {seq} before the {what} took effect; nothing was changed")]
    EndedFirst {
        /// The run.
        run: RunId,
        /// How it ended.
        status: RunStatus,
        /// Its last step.
        seq: u64,
        /// `pause` or `cancel`.
        what: &'static str,
    },
    /// A cancel of a run that has ended.
    #[error("run {run} has already ended ({status} at step {seq}); nothing to cancel")]
    AlreadyEnded {
        /// The run.
        run: RunId,
        /// How it ended.
        status: RunStatus,
        /// Its last step.
        seq: u64,
    },
    /// A cancel that kept meeting a run changing hands between processes.
    #[error(
        "run {run} kept changing hands while being cancelled; try `runtape cancel {run}` again"
    )]
    ChangingHands {
        /// The run.
        run: RunId,
    },
    /// A child run whose link to its parent does not hold.
    #[error("run {child} does not verify as a child of {parent}: {why}")]
    BrokenLink {
        /// The child run.
        child: RunId,
        /// The run it names as its parent.
        parent: RunId,
        /// What does not hold.
        why: String,
    },
    /// A run that does not verify (see [`super::VerifyView::check`]).
    #[error("run {run} does not verify: {divergence}")]
    DoesNotVerify {
        /// The run.
        run: RunId,
        /// The first problem found.
        divergence: Box<Divergence>,
    },
    /// The run was removed by `runtape prune` and left a tombstone (the tombstones' chain
    /// holds).
    #[error(
        "run {} was pruned ({} at step {}, last chain link {}, tombstone {} at {} ms): its history is no longer stored; `runtape export` before pruning keeps a copy",
        .0.run, .0.status, .0.proof.seq, &.0.proof.chain.to_hex()[..16], .0.id, .0.pruned_ms
    )]
    Pruned(Box<crate::store::retention::Tombstone>),
    /// A `runtape import` file that is not an archive this runtape reads, or whose runs do not
    /// verify. Nothing was imported.
    #[error("the archive was not imported: {0}")]
    BadArchive(String),
    /// The tombstones of pruned runs do not hold: one was edited or removed.
    #[error("the tombstones of pruned runs were tampered with: {0}")]
    TombstonesTampered(String),
    /// The spec file is not valid (or, for [`ErrorKind::Internal`], cannot be set up).
    #[error(transparent)]
    Spec(#[from] ConfigError),
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Reading a run's history refused or failed.
    #[error(transparent)]
    History(#[from] HistoryError),
    /// A per-run override (`runtape run --model …`) that is malformed or names nothing in
    /// the spec file.
    #[error("{0}")]
    BadOverride(String),
    /// A run-list filter, sort or cursor that does not parse ([`super::run_query`]).
    #[error("{0}")]
    BadFilter(String),
    /// The engine refused or failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// An evaluation's dataset, scorers, variants or report that cannot be used
    /// ([`super::eval`]). Nothing was run.
    #[error("{0}")]
    BadEval(String),
    /// No report of this experiment in the folder experiments are read from.
    #[error("no report of experiment {0} here; `runtape eval` writes one (eval-EXPERIMENT.json)")]
    UnknownExperiment(String),
}

impl OpsError {
    /// A stable, machine-readable name of the reason: the same for the same reason whichever
    /// layer found it (`"run_not_found"` for an unknown run read by the store or the history).
    pub fn code(&self) -> &'static str {
        match self {
            OpsError::BadRunRef { .. } => "bad_run_ref",
            OpsError::StepNamed { .. } => "step_not_wanted",
            OpsError::BadSetting(_) => "bad_setting",
            OpsError::ReceiptKey(_) => "bad_receipt_key",
            OpsError::NormalDurabilityOnPostgres => "bad_durability",
            OpsError::NoGoal { .. } => "no_goal",
            OpsError::NoStoredSetup { .. } => "no_stored_setup",
            OpsError::BadRaise(_) => "bad_raise",
            OpsError::BadEdit(_) => "bad_edit",
            OpsError::BadOverride(_) => "bad_override",
            OpsError::BadFilter(_) => "bad_filter",
            OpsError::BadEval(_) => "bad_eval",
            OpsError::UnknownExperiment(_) => "experiment_not_found",
            OpsError::ChildrenWaiting { .. } => "children_waiting",
            OpsError::NotRunning { .. } => "not_running",
            OpsError::NoTimer { .. } => "no_timer",
            OpsError::EndedFirst { .. } => "ended_first",
            OpsError::AlreadyEnded { .. } => "finished",
            OpsError::ChangingHands { .. } => "changing_hands",
            OpsError::BrokenLink { .. } => "broken_link",
            OpsError::DoesNotVerify { .. } => "does_not_verify",
            OpsError::Pruned(_) => "pruned",
            OpsError::TombstonesTampered(_) => "tampered",
            OpsError::BadArchive(_) => "bad_archive",
            OpsError::Spec(e) if e.is_internal() => "setup_failed",
            OpsError::Spec(_) => "bad_spec",
            OpsError::Store(e) => store_code(e),
            OpsError::History(e) => history_code(e),
            OpsError::Engine(e) => engine_code(e),
        }
    }

    /// What kind of failure it is (see [`ErrorKind`]).
    pub fn kind(&self) -> ErrorKind {
        use ErrorKind::*;
        match self.code() {
            "run_not_found"
            | "step_not_found"
            | "memory_key_not_found"
            | "experiment_not_found" => NotFound,
            "lease_held" | "finished" | "session_taken" | "not_running" | "no_timer"
            | "ended_first" | "no_input_expected" | "session" | "prune_refused"
            | "import_conflict" => Conflict,
            "tampered" | "broken_link" | "does_not_verify" | "bad_archive" => CheckFailed,
            "pruned" => Pruned,
            "bad_run_ref" | "step_not_wanted" | "bad_setting" | "bad_receipt_key"
            | "bad_durability" | "no_goal" | "no_stored_setup" | "bad_raise" | "bad_edit"
            | "bad_override" | "bad_filter" | "bad_eval" | "children_waiting" | "bad_spec"
            | "duplicate_run" | "wrong_key" | "not_a_raise" | "unknown_agent"
            | "input_mismatch" | "invalid_transition" | "unknown_effect" | "missing_provider"
            | "missing_tool" | "ambiguous_input" => Input,
            _ => Internal,
        }
    }
}

fn store_code(e: &StoreError) -> &'static str {
    match e {
        StoreError::UnknownRun(_) => "run_not_found",
        StoreError::NoMemoryKey { .. } => "memory_key_not_found",
        StoreError::LeaseHeld { .. } => "lease_held",
        StoreError::Finished { .. } => "finished",
        StoreError::DuplicateRun(_) => "duplicate_run",
        StoreError::SessionTaken { .. } => "session_taken",
        StoreError::NewerSchema { .. } => "newer_schema",
        StoreError::Corrupt { .. } => "not_a_database",
        StoreError::MissingDirectory { .. } => "missing_directory",
        StoreError::Full { .. } => "database_full",
        StoreError::Fenced { .. } => "fenced",
        StoreError::Damaged { .. } => "damaged",
        StoreError::PruneRefused { .. } => "prune_refused",
        StoreError::ImportConflict { .. } => "import_conflict",
        _ => "storage",
    }
}

fn history_code(e: &HistoryError) -> &'static str {
    match e {
        HistoryError::Store(s) => store_code(s),
        HistoryError::UnknownRun(_) => "run_not_found",
        HistoryError::SeqOutOfRange { .. } => "step_not_found",
        HistoryError::WrongKey(_) => "wrong_key",
        HistoryError::Tampered { .. } => "tampered",
        _ => "damaged",
    }
}

fn engine_code(e: &EngineError) -> &'static str {
    match e {
        EngineError::Store(s) => store_code(s),
        EngineError::History(h) => history_code(h),
        EngineError::Machine(m) => match m {
            MachineError::EditDoesNotApply(_) => "bad_edit",
            MachineError::NotARaise { .. } => "not_a_raise",
            MachineError::UnknownAgent(_) => "unknown_agent",
            MachineError::InputMismatch { .. } => "input_mismatch",
            MachineError::InvalidTransition { .. } => "invalid_transition",
            MachineError::UnknownEffect { .. } => "unknown_effect",
            _ => "machine",
        },
        EngineError::MissingProvider { .. } => "missing_provider",
        EngineError::MissingTool(_) => "missing_tool",
        EngineError::AmbiguousInput { .. } => "ambiguous_input",
        EngineError::Spec(_) | EngineError::NoRetriever | EngineError::Unencodable { .. } => {
            "bad_spec"
        }
        EngineError::Finished { .. } => "finished",
        EngineError::NoInputExpected(_) => "no_input_expected",
        EngineError::NotASessionRun { .. }
        | EngineError::SessionRevision { .. }
        | EngineError::ChildInSession
        | EngineError::BadSessionName { .. }
        | EngineError::SessionBusy { .. }
        | EngineError::SessionReplayNeverBegan => "session",
        _ => "engine",
    }
}

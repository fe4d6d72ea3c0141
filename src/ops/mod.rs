//! The application layer: every operation a front end offers on runs. The `runtape` command
//! and its HTTP server (`runtape serve`) are adapters over it — they parse their input, call
//! one of these, and render what it returns — and a program embedding runtape calls the same
//! functions to do what they do.
//!
//! | operation | command | here |
//! |---|---|---|
//! | start a run from a spec file | `run SPEC [GOAL] [--session S] [--memory M]` | [`load`], [`prepare`], [`engine`], [`start`] |
//! | start a run of a spec built in Rust | — | [`start_spec`] |
//! | queue a run for workers | `run SPEC --detach` | [`enqueue`] |
//! | resume, answer, raise budgets | `resume RUN [--approve\|--reject\|--input] [--raise]` | [`resume`] with an [`Answer`] and [`Raise`]s |
//! | fork at a step, with edits | `fork RUN@SEQ [--edit E] [--tape]` | [`fork`] with [`Edit`]s |
//! | pause, cancel (across processes) | `pause RUN`, `cancel RUN` | [`pause`], [`cancel`] |
//! | list the runs | `ls --json` | [`runs`] ([`RunView`]) |
//! | a run's timeline, or its last steps | `log RUN [--tail K] --json` | [`timeline`], [`timeline_tail`] ([`EntryView`]) |
//! | a step in full | `show RUN@SEQ --json` | [`show`] ([`StepDetailView`]) |
//! | where two runs differ | `diff A B [--recursive] --json` | [`diff`], [`diff_tree`] |
//! | verify a run (and the runs below it) | `verify RUN [--recursive] --json` | [`verify`], [`verify_tree`] ([`VerifyView`]) |
//! | a delegation tree, forks, waiting children | — | [`tree`], [`forks_of`], [`waiting_below`] |
//! | run a dataset under variants, scored | `eval SPEC --dataset FILE` | [`eval::run`] |
//! | score a finished experiment again | `eval rescore REPORT --scorers FILE` | [`eval::rescore`] |
//!
//! Every operation returns typed views that serialise to exactly what the command's `--json`
//! prints (write them with [`json::encode`]), or an [`OpsError`] whose `Display` is the one
//! line the command prints and whose [`code`](OpsError::code) is stable. Nothing an operation
//! refuses has been changed.
//!
//! ```no_run
//! use runtape::exec::ForkMode;
//! use runtape::ops::{self, Answer, Edit, EngineSettings};
//!
//! # async fn demo() -> Result<(), runtape::ops::OpsError> {
//! // `runtape run runtape.toml --db runs.db`
//! let file = ops::load("runtape.toml".as_ref(), None)?;
//! let (file, goal) = ops::prepare(file, None, ops::trace_warning).await?;
//! let engine = ops::engine("runs.db".as_ref(), &EngineSettings::default(), true)?;
//! file.install(&engine)?;
//! let run = runtape::exec::new_run_id();
//! let handle = ops::start(&engine, run.clone(), &file, &goal, None).await?;
//! // `runtape pause RUN` (from another task or process): it rests at its next step boundary.
//! println!("{}", ops::pause(&engine, &run).await?);
//! handle.wait().await?;
//! // `runtape resume RUN`, then `runtape fork RUN@1 --edit "user=…"`.
//! ops::resume(&engine, &run, Answer::None, None, &[]).await?.wait().await?;
//! let edits = [Edit::parse("user=And in French?")?];
//! let fork = ops::fork(&engine, &run, 1, &edits, ForkMode::Live).await?;
//! // `runtape show FORK@2 --json`
//! let step = ops::show(engine.store().as_ref(), fork.run_id(), Some(2))?;
//! println!("{}", ops::json::encode(&step).unwrap_or_default());
//! # Ok(()) }
//! ```

pub mod archive;
pub mod attachments;
mod control;
pub mod due_runs;
mod edits;
mod error;
pub mod eval;
mod eval_scoring;
pub mod experiments;
mod files;
mod fork;
mod inspect;
pub mod json;
mod open;
mod overrides;
mod refs;
mod resume;
pub mod retention;
mod run_list;
mod run_stats;
pub mod schedule_fire;
pub mod schedules;
mod start;
mod tree;
mod views;
pub mod wake;

#[cfg(test)]
mod tests;

pub use attachments::{MAX_ATTACHMENT_BYTES, attach};
pub use control::{Cancelled, PauseRequest, Paused, cancel, is_driven, pause, request_pause};
pub use edits::{BudgetTarget, Edit, Raise};
pub use error::{ErrorKind, OpsError};
pub use files::attached_file;
pub use fork::fork;
pub use inspect::{
    VerifyTree, diff, diff_tree, forks_of, runs, show, timeline, timeline_tail, tree, verify,
    verify_tree,
};
pub use open::{
    EngineSettings, Warn, db_path, engine, engine_config, env_ms, open_existing, open_store,
    open_store_with, postgres_url, shown, trace_warning,
};
pub use overrides::{MAX_CHOSEN_RUN_ID_CHARS, Overrides, parse_tag};
pub use refs::{MAX_RUN_ID_CHARS, QUOTE_CHARS, parse_run_at, parse_whole_run, quoted};
pub use resume::{Answer, resume};
pub use run_list::{
    DEFAULT_RUNS_PAGE, MAX_RUNS_PAGE, RUN_FILTERS, cursor_text, run_page, run_query,
};
pub use run_stats::{StepDuration, run_stats, step_durations};
pub use start::{connect_mcp, enqueue, load, prepare, start, start_spec};
pub use tree::{
    Waiting, answers, delegated_by, descendants, in_tree_order, waiting_below, waiting_in,
};
pub use views::{
    CallDeadline, DiffView, EntryView, RunAt, RunView, StepDetailView, TreeDiffView, TreeNodeView,
    VerifyView, WaitingCall, driver, waiting_calls,
};

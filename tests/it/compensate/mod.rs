//! Compensation (sagas) with the real binary: a run that created things with a command tool
//! and then failed or was cancelled undoes them, latest first, each once, through crashes;
//! an undo that fails stops the saga for a person; `verify` re-derives the saga and detects
//! tampering with it; bad templates are refused at load.

mod bad_templates;
mod cancel_compensates;
mod failing_undo;
mod killed_mid_saga;
mod undo_in_reverse;

pub(crate) use crate::support::saga::{Saga, logged, saga_spec};

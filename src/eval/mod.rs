//! Evaluation on recorded runs: a dataset of goals run under one or more variants of a spec,
//! each answer scored, the whole written as a report that can be compared with a baseline and
//! scored again later without running anything.
//!
//! This module is the pure part: the [`dataset`] format, the [`scorer`] declarations and the
//! scorers that need only the answer, and the [`report`] with its summaries and its
//! comparison with a baseline. Running the items, performing `command` and `judge` scorers and
//! reading answers back from the database is [`crate::ops::eval`]; the command is
//! `runtape eval` (see the guide's evaluation chapter, [`crate::guide::eval`]).

pub mod dataset;
pub mod report;
pub mod scorer;

pub use dataset::{DatasetError, Item};
pub use report::{ItemResults, REPORT_TYPE, Regression, Report, RunResult, VariantSummary};
pub use scorer::{Score, Scorer, ScorerDecl, ScorerKind};

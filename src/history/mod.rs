//! Reading a run back, for people and tools: its timeline (`runtape log`), one step in full
//! with the exact model request (`runtape show`), where two runs part (`runtape diff`), and
//! the rest of the read API — the run's row, its state at any step, its conversations,
//! `verify` and its receipts — which the [`ledger`](crate::ledger) provides and this module
//! re-exports, so a reader needs only `history`.
//!
//! Everything here reads; nothing writes.

mod diff;
mod edits;
mod inspect;
mod saga;
mod timeline;

pub use crate::ledger::{
    Divergence, HeadSummary, HistoryError, Rebuilt, ReceiptSummary, Recorded, Segment, Verified,
    ancestry, check_receipts, conversation, conversations, receipts, receipts_export,
    receipts_export_tree, record, replay, row, spec_of, state_at, transitions, verify,
};
pub use diff::{Change, ChildDiff, DiffPoint, RunDiff, Side, TreeDiff, diff_runs, diff_trees};
pub use edits::{edit_in_words, fork_goal};
pub use inspect::{SentRequest, StepView, show};
pub use timeline::{TAIL_LEAD_IN, TimelineEntry, cache_tokens, reply_end, timeline, timeline_tail};

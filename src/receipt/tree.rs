//! A whole delegation tree in one export (`runtape receipts export RUN --recursive`), checked
//! offline as one tree.
//!
//! # The file
//!
//! One section per run, each its receipts then its head line, in tree order: the run asked for
//! first (its receipts across fork ancestry, after its parents' when it is a child itself, as a
//! plain export writes them), then each run below it, parents before children, each run's
//! children in the order their parent asked for them. A child's section holds its own receipts
//! only: its first receipt hangs (`parent_sig`) from a receipt of its parent's section. A file
//! with one section is a plain export and verifies as one.
//!
//! ```text
//! {"body":{…"run_id":"R"…},"seal":{…}}          ← R's receipts
//! {"head":{…"run":"R"…},"type":"runtape.receipts.head",…}
//! {"body":{…"run_id":"R.3.0","parent_sig":<a link of R's>…},"seal":{…}}
//! {"head":{…"run":"R.3.0"…},…}
//! ```
//!
//! # What is checked
//!
//! Each section as a plain export is (chain, signatures, head line, count, tip), under its
//! anchor; then the tree:
//!
//! - From revision 5 a parent's receipt for a child's result (kind `child`) names the child's
//!   anchor, last receipt and last step ([`ChildTip`]). The child's section must be in the
//!   file, hang from that anchor, end at that receipt, and its head line must end at that step:
//!   a dropped child, a child's tail cut off or a section swapped for another fails, naming the
//!   child and the parent's receipt.
//! - A section no earlier section names must hang from a receipt of an earlier section (a child
//!   of a revision-4 parent, or one still running); otherwise it does not belong to the tree
//!   (spliced in from elsewhere, or moved above its parent).
//! - No run has two sections.

use std::collections::BTreeMap;
use std::fmt;
use std::io::{Read, Write};

use ed25519_dalek::VerifyingKey;

use super::body::{ChildTip, Receipt, ReceiptKind};
use super::bundle::{Bundle, BundleHead, Completeness, Line, read_lines, verify_bundle_under};
use super::error::ReceiptError;
use super::report::{Integrity, VerifyError};
use crate::machine::RunId;

/// A tree export as read: one [`Bundle`] per run, in file order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeBundle {
    /// The sections; the first is the run the export was asked for.
    pub sections: Vec<Bundle>,
}

/// Reads an export as sections, each ending at a head line (receipts after the last head line
/// make a last, headless section). A plain export reads as one section.
pub fn read_tree_bundle<R: Read>(reader: R) -> Result<TreeBundle, ReceiptError> {
    let mut sections = Vec::new();
    let mut current = Vec::new();
    for line in read_lines(reader)? {
        match line {
            Line::Receipt(r) => current.push(*r),
            Line::Head(h) => sections.push(Bundle {
                receipts: std::mem::take(&mut current),
                head: Some(*h),
            }),
        }
    }
    if !current.is_empty() || sections.is_empty() {
        sections.push(Bundle {
            receipts: current,
            head: None,
        });
    }
    Ok(TreeBundle { sections })
}

/// Writes `sections` (each a run's receipts and its head line), in order.
pub fn write_tree_bundle<W: Write>(
    mut writer: W,
    sections: &[(Vec<Receipt>, BundleHead)],
) -> Result<(), ReceiptError> {
    for (receipts, head) in sections {
        super::write_bundle(&mut writer, receipts, head)?;
    }
    Ok(())
}

/// What one section established.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SectionReport {
    /// Its run.
    pub run: RunId,
    /// Its receipts.
    pub receipts: usize,
    /// Whether its head line shows it complete.
    pub complete: bool,
    /// For a child: the run above it, and whether that run's receipt names this child's end.
    pub below: Option<(RunId, bool)>,
}

/// What a verified tree export established.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeReport {
    /// Each section, in file order.
    pub sections: Vec<SectionReport>,
    /// Signed by the given key, or unsigned (hash-chained).
    pub integrity: Integrity,
}

impl TreeReport {
    /// Receipts in all sections.
    pub fn receipts(&self) -> usize {
        self.sections.iter().map(|s| s.receipts).sum()
    }
}

/// Why a tree export does not verify: one line naming the section, run and receipt at fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TreeError {
    /// A section does not verify as an export of its run.
    #[error("section {index} (run {run}): {error}")]
    Section {
        /// 0-based section.
        index: usize,
        /// Its run.
        run: String,
        /// Why.
        error: VerifyError,
    },
    /// A section that hangs from nothing earlier in the file and that no parent names.
    #[error(
        "section {index} (run {run}) hangs from no receipt of the runs before it and no receipt names it: it does not belong to this tree (spliced in, or moved above its parent)"
    )]
    Unplaced {
        /// 0-based section.
        index: usize,
        /// Its run.
        run: String,
    },
    /// A run has two sections.
    #[error("run {run} has two sections (sections {first} and {second})")]
    Duplicate {
        /// The run.
        run: String,
        /// Its first section.
        first: usize,
        /// Its second.
        second: usize,
    },
    /// A parent names a child whose section is missing.
    #[error(
        "run {parent}'s receipt at seq {seq} names child run {child}, which the file does not hold: its receipts were dropped"
    )]
    MissingChild {
        /// The parent.
        parent: String,
        /// The parent's receipt.
        seq: u64,
        /// The child.
        child: String,
    },
    /// A child's section does not start, end or stop where its parent's receipt says.
    #[error("child run {child}: {detail}, but run {parent}'s receipt at seq {seq} names {named}")]
    ChildMismatch {
        /// The child.
        child: String,
        /// The parent.
        parent: String,
        /// The parent's receipt naming the child.
        seq: u64,
        /// What the child's section shows.
        detail: String,
        /// What the parent's receipt names.
        named: String,
    },
}

/// A `child` receipt: whose chain it is in, its seq, and what it names.
struct Naming<'a> {
    parent: &'a RunId,
    seq: u64,
    tip: &'a ChildTip,
}

/// Verifies a tree export (see the module doc). A key is required for signed files and refused
/// for unsigned ones, as for a plain export; `accept_headless` accepts sections without a head
/// line, reported as not complete.
pub fn verify_tree(
    tree: &TreeBundle,
    public_key: Option<&VerifyingKey>,
    accept_headless: bool,
) -> Result<TreeReport, TreeError> {
    let mut seen: BTreeMap<RunId, usize> = BTreeMap::new();
    let mut links: BTreeMap<&str, &RunId> = BTreeMap::new();
    let mut named: Vec<Naming<'_>> = Vec::new();
    let mut sections = Vec::with_capacity(tree.sections.len());
    let mut integrity = Integrity::Empty;
    for (index, section) in tree.sections.iter().enumerate() {
        let run = run_of(section).ok_or_else(|| TreeError::Unplaced {
            index,
            run: "(unknown: no receipts and no head line)".into(),
        })?;
        if let Some(&first) = seen.get(run) {
            return Err(TreeError::Duplicate {
                run: run.to_string(),
                first,
                second: index,
            });
        }
        let naming = named.iter().find(|n| &n.tip.run_id == run);
        let anchor = match (index, naming, section.receipts.first()) {
            (0, _, _) => None,
            (_, Some(n), _) => n.tip.anchor.as_deref(),
            (_, None, Some(first)) => match first.body.parent_sig.as_deref() {
                Some(link) if links.contains_key(link) => Some(link),
                _ => {
                    return Err(TreeError::Unplaced {
                        index,
                        run: run.to_string(),
                    });
                }
            },
            (_, None, None) => {
                return Err(TreeError::Unplaced {
                    index,
                    run: run.to_string(),
                });
            }
        };
        let at = |error| TreeError::Section {
            index,
            run: run.to_string(),
            error,
        };
        if index > 0 {
            super::check_run(&section.receipts, run).map_err(at)?;
        }
        let (report, complete) =
            verify_bundle_under(section, public_key, accept_headless, anchor).map_err(at)?;
        if report.integrity != Integrity::Empty {
            integrity = report.integrity.clone();
        }
        if let Some(n) = naming {
            check_named(section, n, run)?;
        }
        let below = if index == 0 {
            None
        } else {
            let parent = naming
                .map(|n| n.parent.clone())
                .or_else(|| anchor.and_then(|a| links.get(a)).map(|r| (*r).clone()));
            parent.map(|p| (p, naming.is_some()))
        };
        for r in &section.receipts {
            links.insert(r.link_ref(), &r.body.run_id);
            if let (ReceiptKind::Child, Some(tip)) = (r.body.kind, &r.body.child) {
                named.push(Naming {
                    parent: &r.body.run_id,
                    seq: r.body.seq,
                    tip,
                });
            }
        }
        seen.insert(run.clone(), index);
        sections.push(SectionReport {
            run: run.clone(),
            receipts: section.receipts.len(),
            complete: matches!(complete, Completeness::Complete { .. }),
            below,
        });
    }
    if let Some(n) = named.iter().find(|n| !seen.contains_key(&n.tip.run_id)) {
        return Err(TreeError::MissingChild {
            parent: n.parent.to_string(),
            seq: n.seq,
            child: n.tip.run_id.to_string(),
        });
    }
    Ok(TreeReport {
        sections,
        integrity,
    })
}

/// The run a section is about: its head line's, else its first receipt's.
fn run_of(section: &Bundle) -> Option<&RunId> {
    section
        .head
        .as_ref()
        .map(|h| &h.head.run)
        .or_else(|| section.receipts.first().map(|r| &r.body.run_id))
}

/// The child section ends where its parent's receipt `n` says: the same last receipt, and a
/// head line at the same step and chain link.
fn check_named(section: &Bundle, n: &Naming<'_>, run: &RunId) -> Result<(), TreeError> {
    let mismatch = |detail: String, named: String| TreeError::ChildMismatch {
        child: run.to_string(),
        parent: n.parent.to_string(),
        seq: n.seq,
        detail,
        named,
    };
    let last = section.receipts.last().map(|r| (r.body.seq, r.link()));
    let expected = n.tip.receipt_seq.zip(n.tip.receipt.clone());
    if last != expected {
        return Err(mismatch(
            format!("its receipts end at {}", Seq(last.map(|l| l.0))),
            format!(
                "its last receipt at {}: receipts were cut off its end, added, or swapped",
                Seq(expected.map(|e| e.0))
            ),
        ));
    }
    if let Some(h) = &section.head
        && (h.head.seq != n.tip.seq || h.head.chain != n.tip.chain)
    {
        return Err(mismatch(
            format!("its head line ends its history at step {}", h.head.seq),
            format!("step {} with another chain link", n.tip.seq),
        ));
    }
    Ok(())
}

/// `seq N`, or `none`.
struct Seq(Option<u64>);

impl fmt::Display for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(s) => write!(f, "seq {s}"),
            None => f.write_str("no receipt"),
        }
    }
}

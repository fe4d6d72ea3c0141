//! Retention: removing whole finished run trees (`runtape prune`) and the tombstone each
//! removed run leaves.
//!
//! A run is removed only with every run it shares history or results with: its fork ancestry
//! and forks (a fork's history up to its fork point is its parent's) and its delegation tree
//! (a child's id is `PARENT.SEQ.INDEX`, and a parent's history names where each child's record
//! ends). [`plan`] groups the runs so, and keeps a group unless every member has ended, none is
//! leased, and the newest of them ended before the cutoff. It is pure: the store's rows in,
//! the groups out.
//!
//! Each removed run leaves a [`Tombstone`]: its id, how it ended, where its record ended (its
//! [`ChildProof`], what a parent's `ChildFinished` names) and the digest of its last sealed
//! head. Tombstones form a hash chain ([`TombstoneRecord::chain`], as `runtape memory rm`'s
//! removal records do), so one cannot be edited or dropped from the middle of the list without
//! `verify` saying so, and a run's rows missing *with* a tombstone read as pruned, never as
//! tampered. A store applies a [`Prune`] in one transaction, checking again under it that each
//! run may still go ([`super::StoreError::PruneRefused`] otherwise, nothing written).
//!
//! # Blobs
//!
//! Message bodies are content-addressed conversation nodes, stored once however many runs
//! append them: two runs of one spec and goal, a fork and its parent, the runs of a session,
//! share their first nodes (or all of them, for a deterministic model). A node may go only
//! when no kept run can reach it, and `verify` of a kept run reads every node each of its
//! steps appended (and `show` walks a step's conversation from its head to the first node).
//!
//! Which nodes a run reaches is not in the blobs: a node names its previous node, not the runs
//! that appended it, and a run reaches nodes no state of its end names (a conversation a
//! transfer or an edit rewound, a session summary's exchange). Finding the kept runs that share
//! a node by a mark from their heads means folding every kept run that shares a root with it,
//! which for the system prompt of a busy spec is every run of that spec: a prune's cost would
//! grow with the database, not with what it removes. So the stores keep the references
//! themselves: `blob_refs (hash, run)` gets a row for every blob of every commit (and of every
//! imported run), whether the commit stored the blob or found it stored. A run reaches only
//! nodes appended by its own commits or by those of runs in its group (a fork's inherited
//! prefix is its parent's, a session's next run continues the conversations its previous one
//! ended with), and a group goes or stays whole, so a blob is still needed exactly when a row
//! of a run not going names it. Under the prune's write a store:
//!
//! 1. reads the blobs the runs going refer to (their rows, through an index by run: the cost
//!    is the size of what goes),
//! 2. removes those rows, and keeps each such blob that another row still names (one index
//!    probe each),
//! 3. on SQLite, rewrites a kept blob that refers to the event of a transition going standing
//!    alone ([`crate::format::packed_blob`]), before the transitions go,
//! 4. removes the other blobs, counted in [`BlobsFreed`].
//!
//! The race is a commit that finds a blob stored and so does not store it, while a prune
//! removes it. On SQLite one writer at a time holds the file, so a commit is wholly before
//! the prune (its row is read by step 2) or wholly after (it finds the blob gone and stores
//! it). On PostgreSQL every commit with blobs runs an `INSERT … ON CONFLICT DO NOTHING` on
//! `blobs` and `blob_refs`, which holds the table's `ROW EXCLUSIVE` lock to its end; the prune
//! first takes `blob_refs` in `SHARE ROW EXCLUSIVE` mode, which waits for every such commit in
//! flight to end and holds new ones until it commits, and reads at read committed after
//! that. Commits without blobs go on meanwhile; a batch is a few dozen runs, so the pause is
//! short.
//!
//! Blobs stored before `blob_refs` existed got a row of run 0, which no run has: they are
//! kept, since which runs used them was not recorded.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::global_memory::chain_link;
use super::{RunRecord, RunStatus};
use crate::machine::{ChildProof, Digest, RunId};

/// What a tombstone says, as its canonical JSON.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tombstone {
    /// The tombstone's id (1, 2, ... in order).
    pub id: u64,
    /// The run removed.
    pub run: RunId,
    /// For a fork: the run it was forked from and the seq.
    pub parent: Option<(RunId, u64)>,
    /// How it ended.
    pub status: RunStatus,
    /// Where its record ended: last step, chain link, last receipt (what its parent's
    /// `ChildFinished` names, so a parent's `verify --recursive` still checks).
    pub proof: ChildProof,
    /// BLAKE3 of its last sealed head's body, hex.
    pub head: String,
    /// When it was removed, wall-clock ms.
    pub pruned_ms: u64,
    /// Who removed it (the process's owner id).
    pub by: String,
}

/// One stored tombstone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TombstoneRecord {
    /// Its id.
    pub id: u64,
    /// The run it is the tombstone of.
    pub run: RunId,
    /// The canonical JSON of its [`Tombstone`].
    pub body: Vec<u8>,
    /// `blake3(previous record's chain || body)` (the first record's previous is zero).
    pub chain: Digest,
}

impl TombstoneRecord {
    /// The record following `prev` (`None` for the first) that says `body`.
    pub fn after(prev: Option<&TombstoneRecord>, body: &Tombstone) -> TombstoneRecord {
        // A tombstone is strings, integers and digests: it always encodes.
        let bytes = serde_json::to_vec(body).unwrap_or_default();
        TombstoneRecord {
            id: body.id,
            run: body.run.clone(),
            chain: chain_link(&prev.map_or(Digest::ZERO, |p| p.chain), &bytes),
            body: bytes,
        }
    }

    /// The body, if it decodes.
    pub fn decode(&self) -> Option<Tombstone> {
        serde_json::from_slice(&self.body).ok()
    }
}

/// Where the tombstone chain first fails to hold: ids 1, 2, ... without a gap, each link
/// `blake3(previous || body)`, each body a tombstone naming the run and id of its row.
/// `None` when every record holds. What `verify` checks before it believes a tombstone.
pub fn chain_fault(records: &[TombstoneRecord]) -> Option<String> {
    let mut prev = Digest::ZERO;
    for (i, r) in records.iter().enumerate() {
        let want = i as u64 + 1;
        if r.id != want {
            return Some(format!(
                "pruned_runs.id: expected tombstone {want}, found {} (a tombstone was removed)",
                r.id
            ));
        }
        if chain_link(&prev, &r.body) != r.chain {
            return Some(format!(
                "pruned_runs.chain of tombstone {}: the link does not follow from the one before and its body (edited)",
                r.id
            ));
        }
        match r.decode() {
            Some(t) if t.id == r.id && t.run == r.run => {}
            _ => {
                return Some(format!(
                    "pruned_runs.body of tombstone {}: not a tombstone of run {} with that id",
                    r.id, r.run
                ));
            }
        }
        prev = r.chain;
    }
    None
}

/// One run to remove, as read before the write: where its record ends, checked again by the
/// store under the write (a run that moved on is refused).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PruneRun {
    /// The run.
    pub run: RunId,
    /// For a fork: its parent and the seq.
    pub parent: Option<(RunId, u64)>,
    /// Its status (terminal).
    pub status: RunStatus,
    /// Its last seq.
    pub seq: u64,
    /// Where its record ends ([`crate::ledger::child_proof`]).
    pub proof: ChildProof,
    /// BLAKE3 of its sealed head's body.
    pub head: Digest,
}

/// A write removing whole run groups and leaving their tombstones ([`super::Write::Prune`]):
/// all or none, in one transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prune {
    /// The runs, whole groups of [`plan`].
    pub runs: Vec<PruneRun>,
    /// Wall-clock ms now: recorded in the tombstones, and a lease that has not expired by then
    /// keeps its run.
    pub now_ms: u64,
    /// Who removes them.
    pub by: String,
}

impl Prune {
    /// The tombstones this prune writes after the stored record `prev`, in run order.
    pub fn tombstones_after(&self, prev: Option<&TombstoneRecord>) -> Vec<TombstoneRecord> {
        let mut out: Vec<TombstoneRecord> = Vec::with_capacity(self.runs.len());
        let mut last = prev.cloned();
        for r in &self.runs {
            let body = Tombstone {
                id: last.as_ref().map_or(1, |p| p.id + 1),
                run: r.run.clone(),
                parent: r.parent.clone(),
                status: r.status,
                proof: r.proof.clone(),
                head: r.head.to_hex(),
                pruned_ms: self.now_ms,
                by: self.by.clone(),
            };
            let record = TombstoneRecord::after(last.as_ref(), &body);
            last = Some(record.clone());
            out.push(record);
        }
        out
    }
}

/// The blobs a prune removed: how many and their stored bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct BlobsFreed {
    /// Blobs removed.
    pub blobs: u64,
    /// Their bytes as stored.
    pub bytes: u64,
}

impl BlobsFreed {
    /// Adds `other`'s counts.
    pub fn add(&mut self, other: BlobsFreed) {
        self.blobs += other.blobs;
        self.bytes += other.bytes;
    }
}

/// Why a group of runs is kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kept {
    /// A member has not ended, or ended with a status not asked for.
    Live(RunId, RunStatus),
    /// A member's lease is held.
    Leased(RunId),
    /// A member changed after the cutoff.
    Recent(RunId),
}

/// A group of runs that go or stay together, members in id order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    /// The members.
    pub runs: Vec<RunId>,
    /// `None`: the group goes; else why it stays.
    pub kept: Option<Kept>,
}

/// What to remove of `runs` (every stored run): groups joined by fork and delegation links and
/// by `links` (runs of one session), each going only when every member ended with one of
/// `statuses`, holds no lease unexpired at `now_ms`, and last changed before `cutoff_ms`.
/// Groups in order of their first member.
pub fn plan(
    runs: &[RunRecord],
    links: &[(RunId, RunId)],
    statuses: &[RunStatus],
    cutoff_ms: u64,
    now_ms: u64,
) -> Vec<Group> {
    let ids: BTreeSet<&str> = runs.iter().map(|r| r.id.as_str()).collect();
    let mut parent_of: BTreeMap<&str, &str> = BTreeMap::new();
    for r in runs {
        if let Some((p, _)) = &r.parent
            && ids.contains(p.as_str())
        {
            parent_of.insert(r.id.as_str(), p.as_str());
        }
        // A delegated child: the longest stored prefix before a `.SEQ.INDEX` ending.
        if let Some(p) = delegating_parent(r.id.as_str(), &ids) {
            parent_of.entry(r.id.as_str()).or_insert(p);
        }
    }
    let mut joined = UnionFind::default();
    for (child, parent) in &parent_of {
        joined.join(child, parent);
    }
    for (a, b) in links {
        if let (Some(a), Some(b)) = (ids.get(a.as_str()), ids.get(b.as_str())) {
            joined.join(a, b);
        }
    }
    let mut groups: BTreeMap<&str, Vec<&RunRecord>> = BTreeMap::new();
    for r in runs {
        groups
            .entry(joined.root(r.id.as_str()))
            .or_default()
            .push(r);
    }
    let mut out: Vec<Group> = groups
        .into_values()
        .map(|mut members| {
            members.sort_by(|a, b| a.id.as_str().cmp(b.id.as_str()));
            let kept = members
                .iter()
                .find_map(|r| why_kept(r, statuses, cutoff_ms, now_ms));
            Group {
                runs: members.iter().map(|r| r.id.clone()).collect(),
                kept,
            }
        })
        .collect();
    out.sort_by(|a, b| a.runs.first().cmp(&b.runs.first()));
    out
}

/// Why `r` keeps its group, if it does.
fn why_kept(r: &RunRecord, statuses: &[RunStatus], cutoff_ms: u64, now_ms: u64) -> Option<Kept> {
    if !r.status.is_terminal() || !statuses.contains(&r.status) {
        return Some(Kept::Live(r.id.clone(), r.status));
    }
    if r.lease_owner.is_some() && r.lease_expires_ms > now_ms {
        return Some(Kept::Leased(r.id.clone()));
    }
    if r.updated_ms >= cutoff_ms {
        return Some(Kept::Recent(r.id.clone()));
    }
    None
}

/// The stored run `id` names as its delegating parent: `PARENT.SEQ.INDEX` with `PARENT` stored.
fn delegating_parent<'a>(id: &str, ids: &BTreeSet<&'a str>) -> Option<&'a str> {
    let (rest, index) = id.rsplit_once('.')?;
    let (parent, seq) = rest.rsplit_once('.')?;
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !numeric(index) || !numeric(seq) {
        return None;
    }
    ids.get(parent).copied()
}

/// Groups of ids joined by links, each named by one member.
#[derive(Default)]
struct UnionFind<'a> {
    up: BTreeMap<&'a str, &'a str>,
}

impl<'a> UnionFind<'a> {
    fn root(&self, mut at: &'a str) -> &'a str {
        while let Some(next) = self.up.get(at) {
            at = next;
        }
        at
    }

    fn join(&mut self, a: &'a str, b: &'a str) {
        let (ra, rb) = (self.root(a), self.root(b));
        if ra != rb {
            self.up.insert(ra.max(rb), ra.min(rb));
        }
    }
}

/// Parses `--status completed,failed`: terminal statuses only, at least one. The error is one
/// line naming what is wrong.
pub fn parse_statuses(list: &str) -> Result<Vec<RunStatus>, String> {
    let mut out = Vec::new();
    for part in list.split(',').map(str::trim) {
        match RunStatus::parse(part) {
            Some(s) if s.is_terminal() => {
                if !out.contains(&s) {
                    out.push(s);
                }
            }
            Some(s) => {
                return Err(format!(
                    "--status {s}: only ended runs are pruned (completed, failed, cancelled)"
                ));
            }
            None => {
                return Err(format!(
                    "--status `{part}` is not a status; use completed, failed or cancelled, comma-separated"
                ));
            }
        }
    }
    Ok(out)
}

/// Parses `--older-than 30d`: a whole number and a unit (`s`, `m`, `h`, `d`, `w`), in ms.
pub fn parse_age(text: &str) -> Result<u64, String> {
    let bad = || {
        format!(
            "--older-than `{text}` is not a duration; write a number and a unit: 90s, 30m, 12h, 30d, 2w"
        )
    };
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (n, unit) = t.split_at(split);
    let n: u64 = n.parse().map_err(|_| bad())?;
    let ms: u64 = match unit {
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        "w" => 7 * 86_400_000,
        _ => return Err(bad()),
    };
    n.checked_mul(ms).ok_or_else(bad)
}

#[cfg(test)]
mod tests;

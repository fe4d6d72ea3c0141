//! A page of the run list, filtered and sorted by the store ([`super::Store::run_page`]): what
//! `runtape serve`'s run list asks for. The filters are one pure predicate over a run's row
//! ([`RunQuery::matches`]); a backend may narrow the rows with an index first (the run
//! summary of SQLite and PostgreSQL), but every row it returns has passed the predicate, so an index never makes a
//! run appear that does not match.
//!
//! Pages are keyset pages: a page ends with a [`Cursor`] (the last run's sort value and its
//! key), and the next page starts strictly after it, so a page deep in the list costs what
//! the first does and a run created between two requests neither repeats nor skips a run.

use super::{RunRecord, RunStatus};
use crate::machine::RunId;

/// Which runs by status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StatusFilter {
    /// Stored with this status (for `running`: taken up by a process, live or not).
    Stored(RunStatus),
    /// Waiting for a process to take it up ([`RunRecord::is_queued`]).
    Queued,
    /// `running`, but the process that took it up is gone or its lease lapsed.
    Interrupted,
}

/// Which runs by their place among other runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Relation {
    /// Neither a fork nor a child run.
    Root,
    /// A fork of another run.
    Fork,
    /// A child run another run's delegation started.
    Child,
}

/// What the list is ordered by (newest, costliest, longest first unless ascending).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RunSort {
    /// When it was created.
    #[default]
    Started,
    /// Its known cost.
    Cost,
    /// How long it has run ([`RunRecord::duration_ms`]).
    Duration,
}

/// Where a page ends: the last run's sort value and its key (the store's order of creation;
/// ties in the sort value are broken by it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cursor {
    /// The sort value of the last run of the page.
    pub value: i64,
    /// Its key.
    pub key: i64,
}

/// A request for a page of runs. Every filter set must hold; none set lists every run.
#[derive(Clone, Debug, Default)]
pub struct RunQuery {
    /// By status.
    pub status: Option<StatusFilter>,
    /// Runs whose entry agent is this one.
    pub agent: Option<String>,
    /// Runs whose [`RunRecord::spec_digest`] begins with this (lowercase hex).
    pub spec: Option<String>,
    /// Created at or after, wall ms.
    pub created_from_ms: Option<u64>,
    /// Created before, wall ms.
    pub created_to_ms: Option<u64>,
    /// Known cost at least, nanodollars.
    pub cost_min: Option<u64>,
    /// Known cost at most, nanodollars.
    pub cost_max: Option<u64>,
    /// Duration at least, ms.
    pub duration_min_ms: Option<u64>,
    /// Duration at most, ms.
    pub duration_max_ms: Option<u64>,
    /// By place among other runs.
    pub relation: Option<Relation>,
    /// Forks of this run and the child runs it started.
    pub parent: Option<RunId>,
    /// Tags every one of which it carries.
    pub tags: Vec<(String, String)>,
    /// Text (lowercase) its id, goal, answer, failure reason or session name contains.
    pub text: Option<String>,
    /// The order.
    pub sort: RunSort,
    /// Smallest first instead of largest.
    pub ascending: bool,
    /// Start after this run (the previous page's [`RunPage::next`]).
    pub after: Option<Cursor>,
    /// The most runs on the page (at least 1).
    pub limit: usize,
}

/// A page of runs, in order.
#[derive(Clone, Debug, Default)]
pub struct RunPage {
    /// The runs.
    pub runs: Vec<RunRecord>,
    /// Where the next page starts; `None` on the last page.
    pub next: Option<Cursor>,
}

impl RunQuery {
    /// Whether `r` passes every filter, its driver judged at wall time `now_ms` (a `running`
    /// run is interrupted once no live process holds its lease).
    pub fn matches(&self, r: &RunRecord, now_ms: u64) -> bool {
        let status_ok = match &self.status {
            None => true,
            Some(StatusFilter::Queued) => r.is_queued(),
            Some(StatusFilter::Interrupted) => {
                r.status == RunStatus::Running
                    && r.lease_owner.as_deref().is_some_and(|owner| {
                        r.lease_expires_ms <= now_ms || super::owner_is_dead(owner)
                    })
            }
            Some(StatusFilter::Stored(s)) => r.status == *s && !r.is_queued(),
        };
        let in_range = |v: u64, min: Option<u64>, max: Option<u64>| {
            min.is_none_or(|m| v >= m) && max.is_none_or(|m| v <= m)
        };
        let child_of = r.child_of();
        let relation_ok = match self.relation {
            None => true,
            Some(Relation::Root) => r.parent.is_none() && child_of.is_none(),
            Some(Relation::Fork) => r.parent.is_some(),
            Some(Relation::Child) => child_of.is_some(),
        };
        let parent_ok = self.parent.as_ref().is_none_or(|p| {
            r.parent.as_ref().is_some_and(|(run, _)| run == p) || child_of.as_ref() == Some(p)
        });
        let tags_ok = self.tags.is_empty() || {
            let tags = r.tags();
            self.tags.iter().all(|(k, v)| tags.get(k) == Some(v))
        };
        let text_ok = self.text.as_deref().is_none_or(|t| {
            [
                Some(r.id.to_string()),
                Some(r.goal.clone()),
                r.answer(),
                r.reason(),
                r.session_name(),
            ]
            .into_iter()
            .flatten()
            .any(|s| s.to_lowercase().contains(t))
        });
        status_ok
            && self.agent.as_deref().is_none_or(|a| a == r.entry_agent())
            && self
                .spec
                .as_deref()
                .is_none_or(|s| r.spec_digest().starts_with(s))
            && self.created_from_ms.is_none_or(|t| r.created_ms >= t)
            && self.created_to_ms.is_none_or(|t| r.created_ms < t)
            && in_range(r.cost_nanos, self.cost_min, self.cost_max)
            && in_range(r.duration_ms(), self.duration_min_ms, self.duration_max_ms)
            && relation_ok
            && parent_ok
            && tags_ok
            && text_ok
    }

    /// `r`'s value under this query's sort (`key` for [`RunSort::Started`]).
    pub fn sort_value(&self, r: &RunRecord, key: i64) -> i64 {
        let clamp = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        match self.sort {
            RunSort::Started => key,
            RunSort::Cost => clamp(r.cost_nanos),
            RunSort::Duration => clamp(r.duration_ms()),
        }
    }

    /// Whether a run at `c` comes after `after` in this query's order.
    pub fn is_after(&self, c: Cursor, after: Cursor) -> bool {
        let (a, b) = ((c.value, c.key), (after.value, after.key));
        if self.ascending { a > b } else { a < b }
    }
}

/// [`super::Store::run_page`] for a backend without an index for it: `runs` are every run
/// ([`super::Store::runs`], newest first), filtered and sorted here. and filters and sorts them here. A run's key is its place
/// counted from the oldest.
pub(crate) fn page_of_all(runs: Vec<RunRecord>, q: &RunQuery, now_ms: u64) -> RunPage {
    let n = runs.len();
    let mut rows: Vec<(Cursor, RunRecord)> = runs
        .into_iter()
        .enumerate()
        .filter_map(|(i, r)| {
            let key = i64::try_from(n - 1 - i).unwrap_or(i64::MAX);
            let c = Cursor {
                value: q.sort_value(&r, key),
                key,
            };
            let keep = q.after.is_none_or(|a| q.is_after(c, a)) && q.matches(&r, now_ms);
            keep.then_some((c, r))
        })
        .collect();
    rows.sort_by_key(|(c, _)| (c.value, c.key));
    if !q.ascending {
        rows.reverse();
    }
    let limit = q.limit.max(1);
    let next = (rows.len() > limit).then(|| rows[limit - 1].0);
    rows.truncate(limit);
    RunPage {
        runs: rows.into_iter().map(|(_, r)| r).collect(),
        next,
    }
}

//! What the read operations return: typed views of runs and steps whose JSON is exactly what
//! `runtape … --json` prints and `runtape serve` answers (each object carries a `type`
//! field). Write them with [`super::json::encode`] for readers that hold numbers as doubles.

use serde::{Serialize, Serializer};

use crate::history::{self, Divergence, HistoryError, RunDiff, TimelineEntry, TreeDiff, Verified};
use crate::machine::{
    EffectId, Escalated, OnDeadline, RunId, RunState, SlotStatus, Spec, StateKind,
};
use crate::store::{RunRecord, RunStatus, Store};

/// A `u64` as JSON: a number up to 2^53, a string above (readers that parse numbers as
/// doubles would round it).
fn exact_u64<S: Serializer>(n: &u64, s: S) -> Result<S::Ok, S::Error> {
    if *n > super::json::MAX_EXACT {
        s.serialize_str(&n.to_string())
    } else {
        s.serialize_u64(*n)
    }
}

/// A run and a step of it (a fork's parent and fork point).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RunAt {
    /// The run.
    pub run: RunId,
    /// The step.
    pub seq: u64,
}

/// A run as `runtape ls --json` prints it (and `runtape serve` lists it, with more).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RunView {
    /// Always `run`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The run's id.
    pub id: RunId,
    /// Its status as shown: `queued` for a run no process has taken up yet
    /// ([`RunRecord::is_queued`]), else the stored status's name.
    pub status: &'static str,
    /// Its stored status (`running` for a queued run).
    #[serde(skip)]
    pub stored_status: RunStatus,
    /// The kind of its latest state.
    pub state: StateKind,
    /// Its steps (the seq of its latest transition).
    pub steps: u64,
    /// What its priced model turns cost, in nanodollars.
    #[serde(serialize_with = "exact_u64")]
    pub cost_nanos: u64,
    /// True when every model turn had a price (`cost_nanos` is then the whole cost).
    pub cost_known: bool,
    /// Model turns without a price.
    pub unpriced_turns: u64,
    /// Tokens its models reported, input and output.
    pub tokens: u64,
    /// When it was created, wall ms.
    pub created_ms: u64,
    /// When its row last changed, wall ms.
    pub updated_ms: u64,
    /// For a fork: the run and step it was forked from.
    pub parent: Option<RunAt>,
    /// For a child run: the parent's effect that started it.
    pub delegated_by: Option<EffectId>,
    /// The process driving it (`host:pid`), while a live one holds its lease.
    pub driver: Option<String>,
    /// Its goal: the one it began with, or, as [`listed`](Self::listed) shows a fork whose
    /// edit rewrote a user message (`fork RUN@SEQ --edit "user=…"`), that message.
    pub goal: String,
    /// The session it belongs to, if any.
    pub session: Option<String>,
    /// Its place in that session (for a fork or a replay: the place of the run it continues
    /// or replays).
    pub session_index: Option<u64>,
    /// `run` (it holds that place), `fork` or `replay` (they hold no place).
    pub session_kind: Option<&'static str>,
    /// When its earliest timer comes due, wall ms: a sleep, or the deadline of a call waiting
    /// for a person ([`wake::next_wake`](crate::machine::wake::next_wake)). Set by
    /// [`listed`](Self::listed); absent when it waits on no timer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wakes_ms: Option<u64>,
    /// It does nothing but sleep until `wakes_ms`
    /// ([`wake::sleeps_until`](crate::machine::wake::sleeps_until)); `ls` shows it `sleeping`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub sleeping: bool,
    /// Who its calls waiting for a person were escalated to, in call order
    /// ([`escalation`](crate::machine::escalation)). Set by [`listed`](Self::listed); absent
    /// when no waiting call was escalated.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub waits_for: Vec<String>,
    /// The schedule that started it and the instant it was due, as its sealed setup records
    /// (`runtape schedule`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schedule: Option<crate::config::ScheduledBy>,
    /// Its tags (`run --tag KEY=VALUE`, [`RunRecord::tags`]); absent when none.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub tags: std::collections::BTreeMap<String, String>,
    /// Why it failed or was cancelled ([`RunRecord::reason`]); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl RunView {
    /// The view of the run `r` is the row of, its driver judged now.
    pub fn of(r: &RunRecord) -> RunView {
        let mark = mark_of(r);
        RunView {
            kind: "run",
            id: r.id.clone(),
            status: r.shown_status(),
            stored_status: r.status,
            state: r.state_kind,
            steps: r.seq,
            cost_nanos: r.cost_nanos,
            cost_known: r.unpriced_turns == 0,
            unpriced_turns: r.unpriced_turns,
            tokens: r.tokens,
            created_ms: r.created_ms,
            updated_ms: r.updated_ms,
            parent: r.parent.as_ref().map(|(run, seq)| RunAt {
                run: run.clone(),
                seq: *seq,
            }),
            delegated_by: super::tree::delegated_by(r),
            driver: driver(r, crate::clock::wall_ms()),
            goal: r.goal.clone(),
            session_index: mark.as_ref().map(|m| m.index),
            session_kind: mark.as_ref().map(|m| m.kind),
            session: mark.map(|m| m.name),
            wakes_ms: None,
            sleeping: false,
            waits_for: Vec::new(),
            schedule: r
                .setup
                .as_deref()
                .and_then(crate::config::ScheduledBy::of_setup),
            tags: r.tags(),
            reason: r.reason(),
        }
    }
}

impl RunView {
    /// [`of`](Self::of), with the goal a fork asks instead of its parent's when its edit
    /// rewrote a user message ([`history::fork_goal`]: one more read
    /// for a fork, none for another run), and its wake time ([`wakes_ms`](Self::wakes_ms):
    /// its state is read for a run taking tool calls). Call it to list runs (`ls`, `serve`'s
    /// run list).
    pub fn listed(store: &dyn Store, r: &RunRecord) -> Result<RunView, HistoryError> {
        let mut view = RunView::of(r);
        if let Some(goal) = history::fork_goal(store, r)? {
            view.goal = goal;
        }
        // Only a run taking tool calls can wait on a timer: its state is read then.
        if !r.status.is_terminal()
            && matches!(
                r.state_kind,
                StateKind::CallingTools | StateKind::AwaitingInput
            )
        {
            let spec = history::spec_of(r)?;
            if crate::machine::wake::may_wait_on_timers(spec.spec()) {
                let state = crate::ledger::state_at(store, &r.id, &spec, r.seq)?.state;
                view.wakes_ms = crate::machine::wake::next_wake(&state).map(|due| due.ms());
                view.sleeping = crate::machine::wake::sleeps_until(&state).is_some();
                view.waits_for = crate::machine::wake::escalated_to(&state);
            }
        }
        Ok(view)
    }
}

/// The process driving the run (`host:pid`: a `runtape worker`, or the command that started
/// or resumed it), while its lease is live at `now_ms`.
pub fn driver(r: &RunRecord, now_ms: u64) -> Option<String> {
    let owner = r.lease_owner.as_deref()?;
    if r.lease_expires_ms <= now_ms || crate::store::owner_is_dead(owner) {
        return None;
    }
    Some(
        owner
            .rsplit_once(':')
            .map_or(owner, |(process, _)| process)
            .to_owned(),
    )
}

/// What a run's stored spec says of its session.
struct SessionMark {
    name: String,
    index: u64,
    kind: &'static str,
}

/// Only the session of a stored spec.
#[derive(serde::Deserialize)]
struct SpecSession {
    #[serde(default)]
    session: Option<SessionPart>,
}

#[derive(serde::Deserialize)]
struct SessionPart {
    name: String,
    index: u64,
    #[serde(default)]
    replayed: bool,
}

/// The session `r` belongs to, read from its stored spec (covered by its sealed head); `None`
/// for a run of no session (or a spec that does not parse, which `verify` reports on its own).
fn mark_of(r: &RunRecord) -> Option<SessionMark> {
    let s = serde_json::from_str::<SpecSession>(&r.spec).ok()?.session?;
    let kind = if s.replayed {
        "replay"
    } else if r.parent.is_some() {
        "fork"
    } else {
        "run"
    };
    Some(SessionMark {
        name: s.name,
        index: s.index,
        kind,
    })
}

/// A timeline entry as `runtape log --json` prints it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EntryView {
    /// Always `step`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The entry.
    #[serde(flatten)]
    pub entry: TimelineEntry,
}

impl From<TimelineEntry> for EntryView {
    fn from(entry: TimelineEntry) -> Self {
        EntryView {
            kind: "step",
            entry,
        }
    }
}

/// A step in full as `runtape show RUN@SEQ --json` prints it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepDetailView {
    /// Always `step`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The step.
    #[serde(flatten)]
    pub step: history::StepView,
    /// The run's tags (`run --tag`); absent when it has none.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub tags: std::collections::BTreeMap<String, String>,
}

impl From<history::StepView> for StepDetailView {
    /// The step without the run's tags ([`super::show`] adds them).
    fn from(step: history::StepView) -> Self {
        StepDetailView {
            kind: "step",
            step,
            tags: Default::default(),
        }
    }
}

/// A comparison of two runs as `runtape diff A B --json` prints it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DiffView {
    /// Always `diff`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The comparison.
    #[serde(flatten)]
    pub diff: RunDiff,
}

impl From<RunDiff> for DiffView {
    fn from(diff: RunDiff) -> Self {
        DiffView { kind: "diff", diff }
    }
}

/// Two delegation trees compared as `runtape diff A B --recursive --json` prints it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TreeDiffView {
    /// Always `diff`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The comparison.
    #[serde(flatten)]
    pub diff: TreeDiff,
}

impl From<TreeDiff> for TreeDiffView {
    fn from(diff: TreeDiff) -> Self {
        TreeDiffView { kind: "diff", diff }
    }
}

/// A verification as `runtape verify --json` prints it: the report with `ok: true`, or the
/// first problem with `ok: false`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyView {
    /// The run verified.
    pub run: RunId,
    /// What was checked, or the first problem found.
    pub result: Result<Verified, Divergence>,
}

impl VerifyView {
    /// True when the run verified.
    pub fn ok(&self) -> bool {
        self.result.is_ok()
    }

    /// The report, or [`OpsError::DoesNotVerify`](super::OpsError::DoesNotVerify) naming the
    /// first problem.
    pub fn check(self) -> Result<Verified, super::OpsError> {
        self.result.map_err(|d| super::OpsError::DoesNotVerify {
            run: self.run,
            divergence: Box::new(d),
        })
    }
}

impl Serialize for VerifyView {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        /// `ok: true`: the report.
        #[derive(Serialize)]
        struct Passed<'a> {
            #[serde(rename = "type")]
            kind: &'static str,
            ok: bool,
            #[serde(flatten)]
            report: &'a Verified,
        }
        /// `ok: false`: the first problem (`column` is `null` when it is about no column).
        #[derive(Serialize)]
        struct Failed<'a> {
            #[serde(rename = "type")]
            kind: &'static str,
            ok: bool,
            run: &'a RunId,
            seq: u64,
            column: &'a Option<String>,
            what: &'a str,
            expected: &'a str,
            found: &'a str,
        }
        match &self.result {
            Ok(report) => Passed {
                kind: "verify",
                ok: true,
                report,
            }
            .serialize(s),
            Err(d) => Failed {
                kind: "verify",
                ok: false,
                run: &self.run,
                seq: d.seq,
                column: &d.column,
                what: &d.what,
                expected: &d.expected,
                found: &d.found,
            }
            .serialize(s),
        }
    }
}

/// A run of a delegation tree, in tree order ([`super::tree`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TreeNodeView {
    /// The run.
    pub run: RunId,
    /// Its place below the root: the `SEQ.INDEX` of each delegating effect from the root
    /// down, joined by dots (`3.0`, `3.0.5.1`); empty for the root.
    pub path: String,
    /// How many levels below the root (0 for the root).
    pub depth: usize,
}

/// A call that waits for a person in a run's state: what `resume` (or the API's approve,
/// reject and answer) can answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WaitingCall {
    /// The call's id (`--call`).
    pub call_id: String,
    /// The tool it calls.
    pub tool: String,
    /// Its arguments.
    pub args: serde_json::Value,
    /// `approval`, `question` or `in_doubt`.
    pub kind: &'static str,
    /// When nobody answering decides it (`[timers.deadlines]`); absent without a deadline.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadline: Option<CallDeadline>,
    /// Who it waits for since a deadline escalated it, and how many times it was handed on;
    /// absent while it waits for whoever answers first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub escalated: Option<Escalated>,
}

/// The deadline of a call waiting for a person, as the state that asked recorded it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CallDeadline {
    /// Its due instant, wall ms (the `StartTimer` effect's).
    pub due_ms: u64,
    /// What the machine decides then: `reject`, `approve`, `fail`, `{"input": TEXT}` or
    /// `{"escalate": {"to", "after_ms", "then"}}`, as the run's spec says for this link of the
    /// call's escalation chain.
    pub then: OnDeadline,
}

/// The calls in `state` that wait for a person, each with its deadline and what `spec` (the
/// run's) decides when it passes.
pub fn waiting_calls(state: &RunState, spec: &Spec) -> Vec<WaitingCall> {
    let slots = match state {
        RunState::CallingTools { batch, .. } | RunState::AwaitingInput { batch, .. } => {
            batch.slots.as_slice()
        }
        _ => &[],
    };
    let policy = |slot: &crate::machine::Slot| {
        spec.timers
            .as_ref()
            .and_then(|t| t.deadlines.get(&slot.tool))
            .and_then(|d| crate::machine::escalation::policy_now(&d.then, slot))
            .cloned()
    };
    slots
        .iter()
        .filter_map(|s| {
            let kind = match s.status {
                SlotStatus::Approval { .. } => "approval",
                SlotStatus::Question { .. } => "question",
                SlotStatus::InDoubt { .. } => "in_doubt",
                _ => return None,
            };
            // An in-doubt call waits under no deadline: only an approval or a question arms one.
            let deadline = match (kind, s.deadline, policy(s)) {
                ("approval" | "question", Some(timer), Some(then)) => Some(CallDeadline {
                    due_ms: timer.due.ms(),
                    then,
                }),
                _ => None,
            };
            Some(WaitingCall {
                call_id: s.call_id.clone(),
                tool: s.tool.clone(),
                args: s.args.clone(),
                kind,
                deadline,
                escalated: s.escalated.clone(),
            })
        })
        .collect()
}

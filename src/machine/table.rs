//! The transition table, as data. [`step`](super::step) names the edge it takes and checks it
//! against this table on every call, and `statechart.md` is rendered from it
//! ([`render_statechart`]), so the diagram is the code.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A state's kind (its variant without data).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StateKind {
    /// See [`RunState::Created`](super::RunState::Created).
    Created,
    /// See [`RunState::Preparing`](super::RunState::Preparing).
    Preparing,
    /// See [`RunState::Generating`](super::RunState::Generating).
    Generating,
    /// See [`RunState::CallingTools`](super::RunState::CallingTools).
    CallingTools,
    /// See [`RunState::AwaitingInput`](super::RunState::AwaitingInput).
    AwaitingInput,
    /// See [`RunState::Handoff`](super::RunState::Handoff).
    Handoff,
    /// See [`RunState::BudgetExhausted`](super::RunState::BudgetExhausted).
    BudgetExhausted,
    /// See [`RunState::Done`](super::RunState::Done).
    Done,
}

impl StateKind {
    /// Every kind, in lifecycle order.
    pub const ALL: [StateKind; 8] = [
        StateKind::Created,
        StateKind::Preparing,
        StateKind::Generating,
        StateKind::CallingTools,
        StateKind::AwaitingInput,
        StateKind::Handoff,
        StateKind::BudgetExhausted,
        StateKind::Done,
    ];

    /// The CamelCase name used in the statechart.
    pub fn name(self) -> &'static str {
        match self {
            StateKind::Created => "Created",
            StateKind::Preparing => "Preparing",
            StateKind::Generating => "Generating",
            StateKind::CallingTools => "CallingTools",
            StateKind::AwaitingInput => "AwaitingInput",
            StateKind::Handoff => "Handoff",
            StateKind::BudgetExhausted => "BudgetExhausted",
            StateKind::Done => "Done",
        }
    }

    /// The snake_case name used in logs and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            StateKind::Created => "created",
            StateKind::Preparing => "preparing",
            StateKind::Generating => "generating",
            StateKind::CallingTools => "calling_tools",
            StateKind::AwaitingInput => "awaiting_input",
            StateKind::Handoff => "handoff",
            StateKind::BudgetExhausted => "budget_exhausted",
            StateKind::Done => "done",
        }
    }
}

impl fmt::Display for StateKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An event's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// `Start`.
    Start,
    /// `Proceed`.
    Proceed,
    /// `ModelReplied`.
    ModelReplied,
    /// `ModelFailed`.
    ModelFailed,
    /// `ToolReturned`.
    ToolReturned,
    /// `InputProvided`.
    InputProvided,
    /// `EffectInDoubt`.
    EffectInDoubt,
    /// `Reconciled`.
    Reconciled,
    /// `BudgetRaised`.
    BudgetRaised,
    /// `CancelRequested`.
    CancelRequested,
    /// `Edited`.
    Edited,
}

impl EventKind {
    /// Every kind.
    pub const ALL: [EventKind; 11] = [
        EventKind::Start,
        EventKind::Proceed,
        EventKind::ModelReplied,
        EventKind::ModelFailed,
        EventKind::ToolReturned,
        EventKind::InputProvided,
        EventKind::EffectInDoubt,
        EventKind::Reconciled,
        EventKind::BudgetRaised,
        EventKind::CancelRequested,
        EventKind::Edited,
    ];

    /// The CamelCase name used in the statechart.
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Start => "Start",
            EventKind::Proceed => "Proceed",
            EventKind::ModelReplied => "ModelReplied",
            EventKind::ModelFailed => "ModelFailed",
            EventKind::ToolReturned => "ToolReturned",
            EventKind::InputProvided => "InputProvided",
            EventKind::EffectInDoubt => "EffectInDoubt",
            EventKind::Reconciled => "Reconciled",
            EventKind::BudgetRaised => "BudgetRaised",
            EventKind::CancelRequested => "CancelRequested",
            EventKind::Edited => "Edited",
        }
    }

    /// The snake_case name used in logs and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Start => "start",
            EventKind::Proceed => "proceed",
            EventKind::ModelReplied => "model_replied",
            EventKind::ModelFailed => "model_failed",
            EventKind::ToolReturned => "tool_returned",
            EventKind::InputProvided => "input_provided",
            EventKind::EffectInDoubt => "effect_in_doubt",
            EventKind::Reconciled => "reconciled",
            EventKind::BudgetRaised => "budget_raised",
            EventKind::CancelRequested => "cancel_requested",
            EventKind::Edited => "edited",
        }
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One row of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Edge {
    /// Stable id, e.g. `generating.replied.tools`.
    pub id: &'static str,
    /// Source state; `None` means any state but `Created` and `Done`.
    pub from: Option<StateKind>,
    /// Triggering event; `None` means any event.
    pub on: Option<EventKind>,
    /// Target state.
    pub to: StateKind,
    /// What it means, in one line.
    pub meaning: &'static str,
}

impl Edge {
    /// Whether `(from, on, to)` is an instance of this edge.
    pub fn admits(&self, from: StateKind, on: EventKind, to: StateKind) -> bool {
        let from_ok = match self.from {
            Some(f) => f == from,
            None => from != StateKind::Created && from != StateKind::Done,
        };
        from_ok && self.on.is_none_or(|e| e == on) && self.to == to
    }
}

use EventKind as E;
use StateKind as S;

const fn edge(id: &'static str, from: S, on: E, to: S, meaning: &'static str) -> Edge {
    Edge {
        id,
        from: Some(from),
        on: Some(on),
        to,
        meaning,
    }
}

/// Every edge the machine can take.
pub const TABLE: &[Edge] = &[
    edge(
        "created.start",
        S::Created,
        E::Start,
        S::Preparing,
        "the run begins: the entry agent is activated with the goal",
    ),
    edge(
        "created.transition_cap",
        S::Created,
        E::Start,
        S::Done,
        "max_transitions = 1: the run fails with transition_cap as it starts",
    ),
    edge(
        "created.cancel",
        S::Created,
        E::CancelRequested,
        S::Done,
        "cancelled before it started",
    ),
    edge(
        "preparing.proceed.call",
        S::Preparing,
        E::Proceed,
        S::Generating,
        "budgets allow a turn: CallModel is emitted on the first route not cooling down, with the remaining budget",
    ),
    edge(
        "preparing.proceed.exhausted",
        S::Preparing,
        E::Proceed,
        S::BudgetExhausted,
        "a cap is reached: no model call is made",
    ),
    edge(
        "preparing.raise",
        S::Preparing,
        E::BudgetRaised,
        S::Preparing,
        "a cap is raised",
    ),
    edge(
        "preparing.edit",
        S::Preparing,
        E::Edited,
        S::Preparing,
        "fork edits are applied at a step boundary",
    ),
    edge(
        "preparing.cancel",
        S::Preparing,
        E::CancelRequested,
        S::Done,
        "cancelled at a step boundary",
    ),
    edge(
        "generating.replied.tools",
        S::Generating,
        E::ModelReplied,
        S::CallingTools,
        "the reply asks for tools: valid granted calls are dispatched in parallel",
    ),
    edge(
        "generating.replied.input",
        S::Generating,
        E::ModelReplied,
        S::AwaitingInput,
        "every runnable call needs a person (approval or question)",
    ),
    edge(
        "generating.replied.resolved",
        S::Generating,
        E::ModelReplied,
        S::Preparing,
        "every call was answered without running (refused, invalid, over budget); results go back to the model",
    ),
    edge(
        "generating.replied.answer",
        S::Generating,
        E::ModelReplied,
        S::Handoff,
        "a final answer: the agent is finished",
    ),
    edge(
        "generating.replied.refused",
        S::Generating,
        E::ModelReplied,
        S::Done,
        "the model refused (a refusal, or stop reason refusal): fails with refused",
    ),
    edge(
        "generating.replied.output_invalid",
        S::Generating,
        E::ModelReplied,
        S::Preparing,
        "the answer does not match the agent's output schema: what is wrong is fed back (correction budget)",
    ),
    edge(
        "generating.replied.output_failed",
        S::Generating,
        E::ModelReplied,
        S::Done,
        "the answer does not match the output schema and the correction budget is spent: fails with output_invalid",
    ),
    edge(
        "generating.replied.fail",
        S::Generating,
        E::ModelReplied,
        S::Done,
        "the correction budget is spent: fails with tool_denied or tool_failed",
    ),
    edge(
        "generating.failed.retry",
        S::Generating,
        E::ModelFailed,
        S::Generating,
        "retryable failure: the same call again with attempt + 1 after backoff",
    ),
    edge(
        "generating.failed.fallback",
        S::Generating,
        E::ModelFailed,
        S::Generating,
        "attempts on this route are spent (or Retry-After is too long): it cools down and the next route not cooling down is called",
    ),
    edge(
        "generating.failed.exhausted",
        S::Generating,
        E::ModelFailed,
        S::BudgetExhausted,
        "the call failed and a cap is now reached (e.g. wall time): no retry",
    ),
    edge(
        "generating.failed.fail",
        S::Generating,
        E::ModelFailed,
        S::Done,
        "every route is spent: fails with the provider error class",
    ),
    edge(
        "generating.raise",
        S::Generating,
        E::BudgetRaised,
        S::Generating,
        "a cap is raised",
    ),
    edge(
        "generating.edit",
        S::Generating,
        E::Edited,
        S::Generating,
        "fork edits are applied and the model call is re-issued",
    ),
    edge(
        "generating.edit.exhausted",
        S::Generating,
        E::Edited,
        S::BudgetExhausted,
        "fork edits are applied and a cap is now reached: the call is not re-issued",
    ),
    edge(
        "generating.cancel",
        S::Generating,
        E::CancelRequested,
        S::Done,
        "cancelled; the in-flight model call is aborted",
    ),
    edge(
        "calling_tools.returned.wait",
        S::CallingTools,
        E::ToolReturned,
        S::CallingTools,
        "a result arrived; other calls still run",
    ),
    edge(
        "calling_tools.returned.input",
        S::CallingTools,
        E::ToolReturned,
        S::AwaitingInput,
        "a result arrived; what remains waits for a person",
    ),
    edge(
        "calling_tools.returned.done",
        S::CallingTools,
        E::ToolReturned,
        S::Preparing,
        "the last result arrived: all results go back to the model in call order",
    ),
    edge(
        "calling_tools.input",
        S::CallingTools,
        E::InputProvided,
        S::CallingTools,
        "a person answered while other calls still run",
    ),
    edge(
        "calling_tools.in_doubt.retry",
        S::CallingTools,
        E::EffectInDoubt,
        S::CallingTools,
        "on_in_doubt = retry: the call is performed again with the same idempotency key",
    ),
    edge(
        "calling_tools.in_doubt.ask_wait",
        S::CallingTools,
        E::EffectInDoubt,
        S::CallingTools,
        "on_in_doubt = ask while other calls still run",
    ),
    edge(
        "calling_tools.in_doubt.ask",
        S::CallingTools,
        E::EffectInDoubt,
        S::AwaitingInput,
        "on_in_doubt = ask: a person decides",
    ),
    edge(
        "calling_tools.in_doubt.reconcile",
        S::CallingTools,
        E::EffectInDoubt,
        S::CallingTools,
        "on_in_doubt = reconcile: the tool's reconcile command is asked whether the call was performed",
    ),
    edge(
        "calling_tools.reconciled.retry",
        S::CallingTools,
        E::Reconciled,
        S::CallingTools,
        "not performed: the call is performed, with the same idempotency key",
    ),
    edge(
        "calling_tools.reconciled.wait",
        S::CallingTools,
        E::Reconciled,
        S::CallingTools,
        "performed (its result is recorded) or unknown (a person decides) while other calls still run",
    ),
    edge(
        "calling_tools.reconciled.input",
        S::CallingTools,
        E::Reconciled,
        S::AwaitingInput,
        "unknown: a person decides, as with on_in_doubt = ask",
    ),
    edge(
        "calling_tools.reconciled.done",
        S::CallingTools,
        E::Reconciled,
        S::Preparing,
        "performed, and it was the last outstanding call: its result goes back to the model",
    ),
    edge(
        "calling_tools.in_doubt.fail",
        S::CallingTools,
        E::EffectInDoubt,
        S::Done,
        "on_in_doubt = fail: fails with effect_in_doubt",
    ),
    edge(
        "calling_tools.raise",
        S::CallingTools,
        E::BudgetRaised,
        S::CallingTools,
        "a cap is raised",
    ),
    edge(
        "calling_tools.edit",
        S::CallingTools,
        E::Edited,
        S::CallingTools,
        "fork edits are applied; calls still outstanding remain so",
    ),
    edge(
        "calling_tools.edit.input",
        S::CallingTools,
        E::Edited,
        S::AwaitingInput,
        "fork edits supplied the running calls' results; what remains waits for a person",
    ),
    edge(
        "calling_tools.edit.done",
        S::CallingTools,
        E::Edited,
        S::Preparing,
        "fork edits supplied the last outstanding result",
    ),
    edge(
        "calling_tools.cancel",
        S::CallingTools,
        E::CancelRequested,
        S::Done,
        "cancelled; running tools are aborted",
    ),
    edge(
        "awaiting_input.input.wait",
        S::AwaitingInput,
        E::InputProvided,
        S::AwaitingInput,
        "answered; other calls still wait for a person",
    ),
    edge(
        "awaiting_input.input.run",
        S::AwaitingInput,
        E::InputProvided,
        S::CallingTools,
        "approved: the call runs",
    ),
    edge(
        "awaiting_input.input.done",
        S::AwaitingInput,
        E::InputProvided,
        S::Preparing,
        "the last call is settled (rejected or answered): results go back to the model",
    ),
    edge(
        "awaiting_input.raise",
        S::AwaitingInput,
        E::BudgetRaised,
        S::AwaitingInput,
        "a cap is raised",
    ),
    edge(
        "awaiting_input.edit",
        S::AwaitingInput,
        E::Edited,
        S::AwaitingInput,
        "fork edits are applied; calls still wait for a person",
    ),
    edge(
        "awaiting_input.edit.done",
        S::AwaitingInput,
        E::Edited,
        S::Preparing,
        "fork edits supplied the last outstanding result",
    ),
    edge(
        "awaiting_input.cancel",
        S::AwaitingInput,
        E::CancelRequested,
        S::Done,
        "cancelled while waiting for a person",
    ),
    edge(
        "handoff.proceed.next",
        S::Handoff,
        E::Proceed,
        S::Preparing,
        "the first matching plan edge activates the next agent",
    ),
    edge(
        "handoff.proceed.complete",
        S::Handoff,
        E::Proceed,
        S::Done,
        "no edge matches and the agent is an exit: completed with its answer",
    ),
    edge(
        "handoff.proceed.unfinished",
        S::Handoff,
        E::Proceed,
        S::Done,
        "an exit ran out of budget without answering: fails with that budget's limit class",
    ),
    edge(
        "handoff.proceed.no_route",
        S::Handoff,
        E::Proceed,
        S::Done,
        "no edge matches and the agent is not an exit: fails with no_route",
    ),
    edge(
        "handoff.proceed.cycle",
        S::Handoff,
        E::Proceed,
        S::Done,
        "the next agent has used max_agent_visits: fails with handoff_cycle",
    ),
    edge(
        "handoff.raise",
        S::Handoff,
        E::BudgetRaised,
        S::Handoff,
        "a cap is raised",
    ),
    edge(
        "handoff.edit",
        S::Handoff,
        E::Edited,
        S::Handoff,
        "fork edits are applied at a step boundary",
    ),
    edge(
        "handoff.cancel",
        S::Handoff,
        E::CancelRequested,
        S::Done,
        "cancelled at a step boundary",
    ),
    edge(
        "budget_exhausted.proceed.handoff",
        S::BudgetExhausted,
        E::Proceed,
        S::Handoff,
        "on_exhausted = handoff: the agent counts as finished",
    ),
    edge(
        "budget_exhausted.proceed.fail",
        S::BudgetExhausted,
        E::Proceed,
        S::Done,
        "a run-wide cap with on_exhausted = fail: fails with the limit class",
    ),
    edge(
        "budget_exhausted.raise.resume",
        S::BudgetExhausted,
        E::BudgetRaised,
        S::Preparing,
        "the cap is raised enough: the agent goes on",
    ),
    edge(
        "budget_exhausted.raise.still",
        S::BudgetExhausted,
        E::BudgetRaised,
        S::BudgetExhausted,
        "a cap is raised but one is still reached",
    ),
    edge(
        "budget_exhausted.edit",
        S::BudgetExhausted,
        E::Edited,
        S::BudgetExhausted,
        "fork edits are applied; a cap is still reached",
    ),
    edge(
        "budget_exhausted.edit.resume",
        S::BudgetExhausted,
        E::Edited,
        S::Preparing,
        "fork edits lifted the cap: the agent goes on",
    ),
    edge(
        "budget_exhausted.cancel",
        S::BudgetExhausted,
        E::CancelRequested,
        S::Done,
        "cancelled while out of budget",
    ),
    Edge {
        id: "any.transition_cap",
        from: None,
        on: None,
        to: S::Done,
        meaning: "the run reached max_transitions: fails with transition_cap (a cancel still wins)",
    },
];

/// The edge with this id.
pub fn edge_by_id(id: &str) -> Option<&'static Edge> {
    TABLE.iter().find(|e| e.id == id)
}

/// `statechart.md`: a Mermaid `stateDiagram-v2` and the full edge table. `runtape statechart`
/// prints this; a test fails when the committed file differs.
pub fn render_statechart() -> String {
    let mut out = String::new();
    out.push_str("# runtape statechart\n\n");
    out.push_str("<!-- Generated by `runtape statechart` from `src/machine/table.rs`. Do not edit by hand:\n");
    out.push_str(
        "     change the table, then run `cargo run -- statechart > statechart.md`. -->\n\n",
    );
    out.push_str("Every state of a run and every edge `step` can take. `step` checks each transition it makes\n");
    out.push_str("against this table, so a path that is not listed here is reported as an internal error.\n\n");
    out.push_str("```mermaid\nstateDiagram-v2\n");
    out.push_str("    [*] --> Created\n");
    let mut pairs: Vec<(StateKind, StateKind, Vec<&'static str>)> = Vec::new();
    for e in TABLE {
        let Some(from) = e.from else { continue };
        let label = e.on.map_or("any", EventKind::name);
        match pairs.iter_mut().find(|(f, t, _)| *f == from && *t == e.to) {
            Some((_, _, labels)) => {
                if !labels.contains(&label) {
                    labels.push(label);
                }
            }
            None => pairs.push((from, e.to, vec![label])),
        }
    }
    for (from, to, labels) in &pairs {
        out.push_str(&format!(
            "    {} --> {}: {}\n",
            from.name(),
            to.name(),
            labels.join(", ")
        ));
    }
    out.push_str("    Done --> [*]\n");
    out.push_str("    note right of Done\n        any non-terminal state also reaches Done\n        when max_transitions is reached\n    end note\n");
    out.push_str("```\n\n");
    out.push_str("## Edges\n\n");
    out.push_str("| edge | from | event | to | meaning |\n|---|---|---|---|---|\n");
    for e in TABLE {
        let from = e.from.map_or("any but Created, Done", StateKind::name);
        let on = e.on.map_or("any", EventKind::name);
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} |\n",
            e.id,
            from,
            on,
            e.to.name(),
            e.meaning
        ));
    }
    out.push_str("\n`Done` refuses every event (`InvalidTransition`, state unchanged). Any (state, event) pair not\n");
    out.push_str("listed is refused the same way.\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edge_ids_are_unique() {
        let mut ids: Vec<_> = TABLE.iter().map(|e| e.id).collect();
        ids.sort_unstable();
        let n = ids.len();
        ids.dedup();
        assert_eq!(ids.len(), n);
    }

    #[test]
    fn nothing_leaves_done() {
        assert!(TABLE.iter().all(|e| e.from != Some(StateKind::Done)));
    }
}

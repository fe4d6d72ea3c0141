//! Where the machine applies guarded tools (see [`flow_policy`](super::flow_policy)): the label
//! a tool's result is filed under, and the policy check on each call of a model reply.

use super::flow_policy::OnUntrusted;
use super::ids::AgentId;
use super::label::{Integrity, Label};
use super::reply::ToolCallRequest;
use super::state::RunData;
use super::step::{Cx, Note};

/// What a tool's policy does with a call it blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Blocked {
    /// Not run; the reason is its result.
    Deny(String),
    /// Held for a person's approval; the reason goes in the request.
    Ask(String),
}

/// The label results of tool `name` carry in `run`: its guard's, trusted for a tool the run
/// does not know (the machine's own refusal words).
pub(crate) fn results_label(spec: &super::RunSpec, run: &RunData, name: &str) -> Label {
    super::offer::tool(spec, run, name).map_or(Label::TRUSTED, |t| t.guard.results)
}

/// True when tool `name` keeps its results from the model (`hide = true`).
pub(crate) fn hides(spec: &super::RunSpec, run: &RunData, name: &str) -> bool {
    super::offer::tool(spec, run, name).is_some_and(|t| t.guard.hide)
}

/// True when tool `name`'s successful answers never quote its arguments
/// (`echoes_arguments = false`).
pub(crate) fn echoes_nothing(spec: &super::RunSpec, run: &RunData, name: &str) -> bool {
    super::offer::tool(spec, run, name).is_some_and(|t| t.guard.no_echo)
}

/// A tool's own result for call `call_id` made with `args` (as the model wrote them, naming
/// the first `nameable` hidden values) as the
/// model will read it: labelled with the tool's results label joined with the labels of the
/// hidden values `args` refer to (a tool may echo what it was given: a channel's name, a
/// message), and kept in `run` as a hidden value when the tool hides or when that join is
/// untrusted because of them — so an untrusted value passed unread does not come back to the
/// model through a trusted tool's answer. A tool declared `echoes_arguments = false` takes
/// only their confidentiality in a successful answer (see [`echoes_nothing`]): its answer is
/// one the tool would give anyway, the hidden value at most chose which.
pub(crate) fn tool_result(
    spec: &super::RunSpec,
    run: &mut RunData,
    tool: &str,
    call_id: &str,
    args: &serde_json::Value,
    nameable: usize,
    outcome: &super::ToolOutcome,
) -> super::state::ToolResult {
    let mut carried = super::hidden::carried(&run.hidden[..nameable.min(run.hidden.len())], args);
    let own = results_label(spec, run, tool);
    let mut result = super::batch::result_of(outcome, own);
    if !result.is_error && echoes_nothing(spec, run, tool) {
        carried.integrity = Integrity::Trusted;
    }
    result.label = own.join(carried);
    let hide = hides(spec, run, tool) || carried.is_untrusted();
    super::hidden::file_result(run, hide, tool, call_id, result)
}

/// True when the result of a call of `tool` made with `args` (naming the first `nameable`
/// hidden values) is shown to the model rather than kept as a hidden value (see
/// [`tool_result`]): only then does the model get the files the result carries.
pub(crate) fn shows(
    spec: &super::RunSpec,
    run: &RunData,
    tool: &str,
    args: &serde_json::Value,
    nameable: usize,
) -> bool {
    let carried = super::hidden::carried(&run.hidden[..nameable.min(run.hidden.len())], args);
    !(hides(spec, run, tool) || carried.is_untrusted())
}

/// Checks `call` of `agent`'s reply against its tool's policy, with the agent's taint as the
/// label of the decision (and of each argument, joined with the labels of the hidden values
/// it refers to); notes a blocked call. `None`: the call may go on (to approval,
/// questions or dispatch as usual). Call it only for calls that passed the grant and argument
/// checks.
pub(crate) fn judge(
    cx: &mut Cx<'_>,
    run: &RunData,
    agent: &AgentId,
    call_id: &str,
    call: &ToolCallRequest,
) -> Option<Blocked> {
    let tool = super::offer::tool(cx.spec, run, &call.name)?;
    let decision = run.agents.get(agent).map_or(Label::TRUSTED, |a| a.taint);
    let violation = tool.guard.check(decision, &call.arguments, |v| {
        super::hidden::carried(&run.hidden, v)
    })?;
    let asked = tool.guard.on_untrusted == OnUntrusted::Ask;
    cx.notes.push(Note::ToolBlocked {
        agent: agent.clone(),
        call_id: call_id.to_owned(),
        tool: call.name.clone(),
        rule: violation.code().to_owned(),
        asked,
    });
    Some(if asked {
        Blocked::Ask(violation.hold(&call.name))
    } else {
        Blocked::Deny(violation.denial(&call.name))
    })
}

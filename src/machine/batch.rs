//! Tool batches: classifying the calls of a model reply (grant, arguments, approval, budget),
//! collecting results in any arrival order, and feeding them back in call order.

use serde_json::Value;

use super::effect::{Effect, InputKind, InputRequest};
use super::error::{ErrorClass, Failure, MachineError};
use super::event::{HumanInput, Reconciliation, ToolOutcome};
use super::ids::{AgentId, EffectId};
use super::message::{Message, Role, ToolCall};
use super::reply::{ModelReply, ToolCallRequest};
use super::spec::{MAX_ARGUMENT_BYTES, MAX_ARGUMENT_DEPTH, OnInDoubt};
use super::state::{Batch, Outcome, RunData, RunState, Slot, SlotStatus, ToolResult};
use super::step::{Cx, Note};
use super::table::EdgeId;
use super::table::StateKind;

/// The only thing a model hears about a tool it may not use or that does not exist: the same
/// words for both, and never the name it asked for.
pub const TOOL_UNAVAILABLE: &str = "tool unavailable";

/// Judges a call to a tool the machine answers itself (memory, timers): refused as
/// unavailable when it is not `granted` to `agent`, as invalid arguments when they are not
/// JSON or `check` says what is wrong with them. Returns the refusal fed back instead of the
/// call (`None` to take it), whether it counts against the correction budget, and whether it
/// was outside the agent's grant; each refusal is noted.
pub(crate) fn judge_builtin(
    cx: &mut Cx<'_>,
    agent: &AgentId,
    call_id: &str,
    call: &ToolCallRequest,
    granted: bool,
    check: impl FnOnce(&Value) -> Result<(), String>,
) -> (Option<String>, bool, bool) {
    if !granted {
        cx.notes.push(Note::ToolRejected {
            agent: agent.clone(),
            call_id: call_id.to_owned(),
            tool: call.name.clone(),
        });
        return (Some(TOOL_UNAVAILABLE.to_owned()), true, true);
    }
    let checked = match &call.parse_error {
        Some(e) => Err(format!("not valid JSON ({e})")),
        None => check(&call.arguments),
    };
    match checked {
        Ok(()) => (None, false, false),
        Err(reason) => {
            cx.notes.push(Note::ToolInvalid {
                agent: agent.clone(),
                call_id: call_id.to_owned(),
                tool: call.name.clone(),
                reason: reason.clone(),
            });
            let refusal = format!("invalid arguments for {}: {reason}", call.name);
            (Some(refusal), true, false)
        }
    }
}

/// `Generating` + `ModelReplied`.
pub(crate) fn on_reply(
    cx: &mut Cx<'_>,
    mut run: RunData,
    reply: &ModelReply,
) -> (EdgeId, RunState) {
    let agent = run.active.clone();
    let tokens = reply.usage.map(|u| (u.input_tokens, u.output_tokens));
    let reasoning_tokens = reply.usage.and_then(|u| u.reasoning_tokens).unwrap_or(0);
    run.usage.add_turn(tokens, reply.cost_nanos);
    run.usage.reasoning_tokens = run.usage.reasoning_tokens.saturating_add(reasoning_tokens);
    if let Some(a) = run.agents.get_mut(&agent) {
        a.usage.add_turn(tokens, reply.cost_nanos);
        a.usage.reasoning_tokens = a.usage.reasoning_tokens.saturating_add(reasoning_tokens);
        super::context::on_reply(a, reply.usage.as_ref());
    }
    if cx.spec.spec().semantics >= super::TRUNCATION_SEMANTICS && super::is_truncated(reply) {
        return super::truncation::on_truncated(cx, run, reply);
    }
    // The pieces of an answer cut and continued before this reply (revision 7).
    let continued = run
        .agents
        .get_mut(&agent)
        .map(|a| std::mem::take(&mut a.continued))
        .unwrap_or_default();

    let call_ids: Vec<String> = reply
        .tool_calls
        .iter()
        .enumerate()
        .map(|(i, c)| match &c.id {
            Some(id) if !id.is_empty() => id.clone(),
            _ => format!("call_{}_{}", cx.seq, i),
        })
        .collect();
    let problems: Vec<Option<String>> = reply
        .tool_calls
        .iter()
        .map(|c| argument_problem(cx, &run, c))
        .collect();
    let assistant = Message {
        role: Role::Assistant,
        content: reply.text.clone(),
        tool_calls: reply
            .tool_calls
            .iter()
            .zip(&call_ids)
            .zip(&problems)
            .map(|((c, id), problem)| ToolCall {
                id: id.clone(),
                name: c.name.clone(),
                arguments: remembered_arguments(c, problem.is_some()),
            })
            .collect(),
        tool_call_id: None,
        name: None,
        is_error: false,
        reasoning: reply.reasoning.clone(),
        attachments: Vec::new(),
        // Labelled with the agent's taint as it is appended.
        label: super::Label::TRUSTED,
    };
    cx.append(&mut run, &agent, assistant);

    if reply.tool_calls.is_empty() {
        return super::output::on_answer(cx, run, reply, &continued);
    }
    if let Some((to, note)) = super::child::sole_transfer(cx, &agent, reply) {
        let call_id = call_ids.into_iter().next().unwrap_or_default();
        return super::child::transfer(cx, run, &agent, call_id, to, &note);
    }

    // Judge every call before dispatching any, so a reply that spends the correction budget
    // runs none of its calls.
    let mut bad = 0u32;
    let mut denied = false;
    // Calls a tool's policy holds for a person, with the rule they break.
    let mut asks: Vec<(String, String)> = Vec::new();
    let mut judged: Vec<(String, &ToolCallRequest, Option<String>)> =
        Vec::with_capacity(reply.tool_calls.len());
    for ((call, call_id), problem) in reply.tool_calls.iter().zip(call_ids).zip(problems) {
        let refusal =
            if let Some((refusal, strike)) = super::child::judge(cx, &agent, &call_id, call) {
                bad += u32::from(strike);
                refusal
            } else if let Some((refusal, strike, refused)) =
                super::memory::tools::judge(cx, &agent, &call_id, call)
                    .or_else(|| super::timer::judge(cx, &agent, &call_id, call))
            {
                bad += u32::from(strike);
                denied |= refused;
                refusal
            } else if super::offer::tool(cx.spec, &run, &call.name).is_none() {
                bad += 1;
                cx.notes.push(Note::ToolInvalid {
                    agent: agent.clone(),
                    call_id: call_id.clone(),
                    tool: call.name.clone(),
                    reason: "unknown tool".into(),
                });
                Some(TOOL_UNAVAILABLE.to_owned())
            } else if !super::offer::available(&run, &call.name) {
                bad += 1;
                cx.notes.push(Note::ToolInvalid {
                    agent: agent.clone(),
                    call_id: call_id.clone(),
                    tool: call.name.clone(),
                    reason: "its MCP server no longer lists it".into(),
                });
                Some(TOOL_UNAVAILABLE.to_owned())
            } else if !super::offer::is_granted(cx.spec, &run, &agent, &call.name) {
                bad += 1;
                denied = true;
                cx.notes.push(Note::ToolRejected {
                    agent: agent.clone(),
                    call_id: call_id.clone(),
                    tool: call.name.clone(),
                });
                Some(TOOL_UNAVAILABLE.to_owned())
            } else if let Some(reason) = problem {
                bad += 1;
                cx.notes.push(Note::ToolInvalid {
                    agent: agent.clone(),
                    call_id: call_id.clone(),
                    tool: call.name.clone(),
                    reason: reason.clone(),
                });
                Some(format!("invalid arguments for {}: {reason}", call.name))
            } else {
                match super::guard::judge(cx, &run, &agent, &call_id, call) {
                    Some(super::guard::Blocked::Deny(reason)) => {
                        bad += 1;
                        denied = true;
                        Some(reason)
                    }
                    Some(super::guard::Blocked::Ask(reason)) => {
                        asks.push((call_id.clone(), reason));
                        None
                    }
                    None => None,
                }
            };
        judged.push((call_id, call, refusal));
    }

    let budget = cx.spec.agent(&agent).map_or(0, |a| a.correction_budget);
    let strikes = match run.agents.get_mut(&agent) {
        Some(a) if bad > 0 => {
            a.strikes = a.strikes.saturating_add(bad);
            a.strikes
        }
        Some(a) => {
            a.strikes = 0;
            0
        }
        None => 0,
    };
    if strikes > budget {
        let class = if denied {
            ErrorClass::ToolDenied
        } else {
            ErrorClass::ToolFailed
        };
        let error = Failure::new(
            class,
            format!(
                "agent {agent} made {strikes} bad tool calls in a row (correction budget {budget})"
            ),
        );
        return (
            EdgeId::GeneratingRepliedFail,
            RunState::Done {
                run,
                outcome: Outcome::Failed { error },
            },
        );
    }

    let mut batch = Batch {
        slots: Vec::with_capacity(judged.len()),
    };
    super::child::plan(
        cx,
        &run,
        &agent,
        judged.iter().map(|(_, c, r)| (*c, r.is_none())),
    );
    for (call_id, call, refusal) in judged {
        let mut slot = Slot {
            call_id,
            tool: call.name.clone(),
            args: call.arguments.clone(),
            status: SlotStatus::Finished {
                result: ToolResult {
                    content: String::new(),
                    is_error: true,
                    label: super::Label::TRUSTED,
                },
            },
            origin: None,
            deadline: None,
            escalated: None,
            hidden_seen: run.hidden.len(),
            files: Vec::new(),
        };
        slot.status = match (
            refusal,
            super::offer::tool(cx.spec, &run, &call.name).cloned(),
        ) {
            (Some(content), _) => SlotStatus::Finished {
                result: ToolResult {
                    content,
                    is_error: true,
                    label: super::Label::TRUSTED,
                },
            },
            (None, _) if asks.iter().any(|(id, _)| *id == slot.call_id) => {
                let reason = asks
                    .iter()
                    .find(|(id, _)| *id == slot.call_id)
                    .map(|(_, r)| r.clone());
                request_input_why(cx, &run, &agent, &slot, InputKind::Approval, reason)
            }
            (None, Some(t)) if t.interactive => {
                request_input(cx, &run, &agent, &slot, InputKind::Question)
            }
            (None, Some(t)) if t.requires_approval => {
                request_input(cx, &run, &agent, &slot, InputKind::Approval)
            }
            (None, _) => dispatch(cx, &mut run, &agent, &mut slot),
        };
        super::deadline::arm(cx, &agent, &mut slot);
        batch.slots.push(slot);
    }
    match settle(cx, run, batch) {
        (StateKind::CallingTools, s) => (EdgeId::GeneratingRepliedTools, s),
        (StateKind::AwaitingInput, s) => (EdgeId::GeneratingRepliedInput, s),
        (_, s) => (EdgeId::GeneratingRepliedResolved, s),
    }
}

/// Emits `CallTool` for a validated call if the tool-call budget allows; counts it.
fn dispatch(cx: &mut Cx<'_>, run: &mut RunData, agent: &AgentId, slot: &mut Slot) -> SlotStatus {
    let left = |limits: &super::Limits, usage: &super::Usage| {
        limits
            .max_tool_calls
            .map(|cap| cap.saturating_sub(usage.tool_calls))
    };
    let agent_left = run
        .agents
        .get(agent)
        .and_then(|a| left(&a.limits, &a.usage));
    let run_left = left(&run.limits, &run.usage);
    if agent_left == Some(0) || run_left == Some(0) {
        cx.notes.push(Note::ToolBudget {
            agent: agent.clone(),
            call_id: slot.call_id.clone(),
        });
        return SlotStatus::Finished {
            result: ToolResult {
                content: "tool call budget exhausted; this call was not run".into(),
                is_error: true,
                label: super::Label::TRUSTED,
            },
        };
    }
    run.usage.tool_calls += 1;
    if let Some(a) = run.agents.get_mut(agent) {
        a.usage.tool_calls += 1;
    }
    if let Some(answered) = super::memory::tools::apply(cx, run, agent, slot) {
        return answered;
    }
    if let Some(sleeping) = super::timer::start(cx, agent, slot) {
        return sleeping;
    }
    if let Some(child) = super::child::start(cx, run, agent, slot) {
        return child;
    }
    perform(cx, run, agent, slot)
}

/// Emits `CallTool` for `slot` (first dispatch or a retry with the original key).
/// Hidden values the arguments refer to are filled in here, for the tool only.
fn perform(cx: &mut Cx<'_>, run: &RunData, agent: &AgentId, slot: &mut Slot) -> SlotStatus {
    let origin = *slot.origin.get_or_insert_with(|| cx.next_ref());
    let key = origin.in_run(cx.run_id).idempotency_key();
    let (agent, call_id, tool, args) = (
        agent.clone(),
        slot.call_id.clone(),
        slot.tool.clone(),
        super::hidden::reveal(slot.nameable(run), &slot.args),
    );
    let effect = cx.emit(|id| Effect::CallTool {
        id,
        agent,
        call_id,
        tool,
        args,
        idempotency_key: key,
    });
    SlotStatus::Running { effect }
}

fn request_input(
    cx: &mut Cx<'_>,
    run: &RunData,
    agent: &AgentId,
    slot: &Slot,
    kind: InputKind,
) -> SlotStatus {
    request_input_why(cx, run, agent, slot, kind, None)
}

/// Emits `RequestInput` for `slot`, saying `reason` (a policy's rule) when there is one. A
/// person sees the arguments with the hidden values they refer to filled in: what would run.
fn request_input_why(
    cx: &mut Cx<'_>,
    run: &RunData,
    agent: &AgentId,
    slot: &Slot,
    kind: InputKind,
    reason: Option<String>,
) -> SlotStatus {
    let request = InputRequest {
        kind,
        tool: slot.tool.clone(),
        args: super::hidden::reveal(slot.nameable(run), &slot.args),
        reason,
    };
    let (agent, call_id) = (agent.clone(), slot.call_id.clone());
    let effect = cx.emit(|id| Effect::RequestInput {
        id,
        agent,
        call_id,
        request,
    });
    match kind {
        InputKind::Approval => SlotStatus::Approval { effect },
        InputKind::Question => SlotStatus::Question { effect },
        InputKind::InDoubt => SlotStatus::InDoubt { effect },
    }
}

/// Picks the batch's state: tools still running → `CallingTools`; only people awaited →
/// `AwaitingInput`; everything settled → results appended in call order, `Preparing`.
pub(crate) fn settle(cx: &mut Cx<'_>, mut run: RunData, batch: Batch) -> (StateKind, RunState) {
    if batch.any_running() {
        return (
            StateKind::CallingTools,
            RunState::CallingTools { run, batch },
        );
    }
    if !batch.all_finished() {
        return (
            StateKind::AwaitingInput,
            RunState::AwaitingInput { run, batch },
        );
    }
    let agent = run.active.clone();
    for slot in batch.slots {
        let SlotStatus::Finished { result } = slot.status else {
            continue;
        };
        let granted = super::offer::is_granted(cx.spec, &run, &agent, &slot.tool);
        let message = Message {
            role: Role::Tool,
            content: Some(result.content),
            tool_calls: Vec::new(),
            tool_call_id: Some(slot.call_id),
            name: granted.then_some(slot.tool),
            is_error: result.is_error,
            reasoning: Vec::new(),
            attachments: slot.files,
            label: result.label,
        };
        cx.append(&mut run, &agent, message);
    }
    (StateKind::Preparing, RunState::Preparing { run })
}

/// The status of `slot` once its call ended with `outcome`: the result the guard makes of it
/// (labelled, and hidden as a value where the tool is declared so; see
/// [`guard::tool_result`](super::guard::tool_result)).
fn finished(cx: &Cx<'_>, run: &mut RunData, slot: &Slot, outcome: &ToolOutcome) -> SlotStatus {
    SlotStatus::Finished {
        result: super::guard::tool_result(
            cx.spec,
            run,
            &slot.tool,
            &slot.call_id,
            &slot.args,
            slot.hidden_seen,
            outcome,
        ),
    }
}

/// `CallingTools` + `ToolReturned`.
pub(crate) fn on_tool_returned(
    cx: &mut Cx<'_>,
    mut run: RunData,
    mut batch: Batch,
    effect: &EffectId,
    outcome: &ToolOutcome,
) -> Result<(EdgeId, RunState), MachineError> {
    let slot = batch
        .slot_for(effect)
        .filter(|s| matches!(s.status, SlotStatus::Running { .. }))
        .ok_or_else(|| MachineError::UnknownEffect {
            state: StateKind::CallingTools,
            effect: effect.clone(),
        })?;
    if let Some(running) = slot.status.effect() {
        super::saga::record(cx, &mut run, slot, running, outcome);
    }
    if let ToolOutcome::Ok { files, .. } = outcome
        && super::guard::shows(cx.spec, &run, &slot.tool, &slot.args, slot.hidden_seen)
    {
        slot.files.clone_from(files);
    }
    slot.status = finished(cx, &mut run, slot, outcome);
    Ok(match settle(cx, run, batch) {
        (StateKind::CallingTools, s) => (EdgeId::CallingToolsReturnedWait, s),
        (StateKind::AwaitingInput, s) => (EdgeId::CallingToolsReturnedInput, s),
        (_, s) => (EdgeId::CallingToolsReturnedDone, s),
    })
}

/// `CallingTools`/`AwaitingInput` + `InputProvided`.
pub(crate) fn on_input(
    cx: &mut Cx<'_>,
    from: StateKind,
    mut run: RunData,
    mut batch: Batch,
    effect: &EffectId,
    input: &HumanInput,
) -> Result<(EdgeId, RunState), MachineError> {
    let agent = run.active.clone();
    let unknown = || MachineError::UnknownEffect {
        state: from,
        effect: effect.clone(),
    };
    let index = batch
        .slots
        .iter()
        .position(|s| {
            !matches!(s.status, SlotStatus::Running { .. })
                && s.status.effect().is_some_and(|e| e.matches(effect))
        })
        .ok_or_else(unknown)?;
    let mut slot = batch.slots[index].clone();
    let ok = |content: String| SlotStatus::Finished {
        result: ToolResult {
            content,
            is_error: false,
            label: super::Label::TRUSTED,
        },
    };
    let err = |content: String| SlotStatus::Finished {
        result: ToolResult {
            content,
            is_error: true,
            label: super::Label::TRUSTED,
        },
    };
    let because = |reason: &Option<String>| {
        reason
            .as_ref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default()
    };
    slot.status = match (&slot.status, input) {
        (SlotStatus::Approval { .. }, HumanInput::Approve) => {
            dispatch(cx, &mut run, &agent, &mut slot)
        }
        (SlotStatus::InDoubt { .. }, HumanInput::Approve) => perform(cx, &run, &agent, &mut slot),
        (_, HumanInput::Approve) => {
            return Err(MachineError::InputMismatch {
                effect: effect.clone(),
                reason: "this request is a question: answer it or reject it".into(),
            });
        }
        (_, HumanInput::Answer { text, files }) => {
            slot.files.clone_from(files);
            ok(text.clone())
        }
        (SlotStatus::Approval { .. }, HumanInput::Reject { reason }) => {
            err(format!("a person declined this call{}", because(reason)))
        }
        (SlotStatus::Question { .. }, HumanInput::Reject { reason }) => {
            err(format!("a person declined to answer{}", because(reason)))
        }
        (_, HumanInput::Reject { reason }) => err(format!(
            "the call was interrupted and its outcome is unknown; a person chose not to retry it{}",
            because(reason)
        )),
    };
    batch.slots[index] = slot;
    let settled = settle(cx, run, batch);
    Ok(match (from, settled) {
        (StateKind::CallingTools, (_, s)) => (EdgeId::CallingToolsInput, s),
        (_, (StateKind::AwaitingInput, s)) => (EdgeId::AwaitingInputInputWait, s),
        (_, (StateKind::CallingTools, s)) => (EdgeId::AwaitingInputInputRun, s),
        (_, (_, s)) => (EdgeId::AwaitingInputInputDone, s),
    })
}

/// `CallingTools` + `EffectInDoubt`: the agent's `on_in_doubt` policy.
pub(crate) fn on_in_doubt(
    cx: &mut Cx<'_>,
    run: RunData,
    mut batch: Batch,
    effect: &EffectId,
) -> Result<(EdgeId, RunState), MachineError> {
    let agent = run.active.clone();
    let index = batch
        .slots
        .iter()
        .position(|s| matches!(s.status, SlotStatus::Running { effect: e } if e.matches(effect)))
        .ok_or_else(|| MachineError::UnknownEffect {
            state: StateKind::CallingTools,
            effect: effect.clone(),
        })?;
    let policy = cx
        .spec
        .agent(&agent)
        .map(|a| a.on_in_doubt)
        .unwrap_or_default();
    let mut slot = batch.slots[index].clone();
    match policy {
        OnInDoubt::Fail => {
            let error = Failure::new(
                ErrorClass::EffectInDoubt,
                format!(
                    "tool call {} ({}) was interrupted after it started and its outcome is unknown",
                    slot.call_id, slot.tool
                ),
            );
            Ok((
                EdgeId::CallingToolsInDoubtFail,
                RunState::Done {
                    run,
                    outcome: Outcome::Failed { error },
                },
            ))
        }
        OnInDoubt::Retry => {
            slot.status = perform(cx, &run, &agent, &mut slot);
            batch.slots[index] = slot;
            Ok((
                EdgeId::CallingToolsInDoubtRetry,
                RunState::CallingTools { run, batch },
            ))
        }
        OnInDoubt::Ask => {
            slot.status = request_input(cx, &run, &agent, &slot, InputKind::InDoubt);
            batch.slots[index] = slot;
            Ok(match settle(cx, run, batch) {
                (StateKind::CallingTools, s) => (EdgeId::CallingToolsInDoubtAskWait, s),
                (_, s) => (EdgeId::CallingToolsInDoubtAsk, s),
            })
        }
        OnInDoubt::Reconcile => {
            slot.status = reconcile(cx, &run, &agent, &mut slot);
            batch.slots[index] = slot;
            Ok((
                EdgeId::CallingToolsInDoubtReconcile,
                RunState::CallingTools { run, batch },
            ))
        }
    }
}

/// Emits `Reconcile` for an interrupted call: its tool is asked, by the call's idempotency
/// key, whether it was performed.
fn reconcile(cx: &mut Cx<'_>, run: &RunData, agent: &AgentId, slot: &mut Slot) -> SlotStatus {
    let origin = *slot.origin.get_or_insert_with(|| cx.next_ref());
    let key = origin.in_run(cx.run_id).idempotency_key();
    let (agent, call_id, tool, args) = (
        agent.clone(),
        slot.call_id.clone(),
        slot.tool.clone(),
        super::hidden::reveal(slot.nameable(run), &slot.args),
    );
    let effect = cx.emit(|id| Effect::Reconcile {
        id,
        agent,
        call_id,
        tool,
        args,
        idempotency_key: key,
    });
    SlotStatus::Reconciling { effect }
}

/// What the model is told about a call its reconcile command says was performed, when the
/// command did not give its result.
pub const PERFORMED_WITHOUT_RESULT: &str = "this call was interrupted, but its tool confirms it was performed; its result was not recorded";

/// `CallingTools` + `Reconciled`: performed → the result goes back to the model; not
/// performed → the call is performed with its original idempotency key; unknown → a person
/// decides (as with `on_in_doubt = "ask"`).
pub(crate) fn on_reconciled(
    cx: &mut Cx<'_>,
    mut run: RunData,
    mut batch: Batch,
    effect: &EffectId,
    answer: &Reconciliation,
) -> Result<(EdgeId, RunState), MachineError> {
    let agent = run.active.clone();
    let index = batch
        .slots
        .iter()
        .position(
            |s| matches!(s.status, SlotStatus::Reconciling { effect: e } if e.matches(effect)),
        )
        .ok_or_else(|| MachineError::UnknownEffect {
            state: StateKind::CallingTools,
            effect: effect.clone(),
        })?;
    let mut slot = batch.slots[index].clone();
    if *answer == Reconciliation::NotPerformed {
        slot.status = perform(cx, &run, &agent, &mut slot);
        batch.slots[index] = slot;
        return Ok((
            EdgeId::CallingToolsReconciledRetry,
            RunState::CallingTools { run, batch },
        ));
    }
    slot.status = match answer {
        Reconciliation::Performed {
            result: Some(value),
        } => finished(cx, &mut run, &slot, &ToolOutcome::ok(value.clone())),
        Reconciliation::Performed { result: None } => SlotStatus::Finished {
            result: ToolResult {
                content: PERFORMED_WITHOUT_RESULT.into(),
                is_error: false,
                label: super::Label::TRUSTED,
            },
        },
        _ => request_input(cx, &run, &agent, &slot, InputKind::InDoubt),
    };
    batch.slots[index] = slot;
    Ok(match settle(cx, run, batch) {
        (StateKind::CallingTools, s) => (EdgeId::CallingToolsReconciledWait, s),
        (StateKind::AwaitingInput, s) => (EdgeId::CallingToolsReconciledInput, s),
        (_, s) => (EdgeId::CallingToolsReconciledDone, s),
    })
}

/// A tool outcome as the model sees it, labelled `label` (the tool's results label; an
/// error the tool reported carries it too, since the tool wrote its words).
pub(crate) fn result_of(outcome: &ToolOutcome, label: super::Label) -> ToolResult {
    match outcome {
        ToolOutcome::Ok {
            value: Value::String(s),
            ..
        } => ToolResult {
            content: s.clone(),
            is_error: false,
            label,
        },
        ToolOutcome::Ok { value, .. } => ToolResult {
            content: value.to_string(),
            is_error: false,
            label,
        },
        ToolOutcome::Error { message } => ToolResult {
            content: message.clone(),
            is_error: true,
            label,
        },
    }
}

/// Why these arguments are unacceptable, if they are: not JSON, too deep, too large, or not
/// matching the tool's schema. Depth is checked first, without recursion, so hostile nesting
/// cannot exhaust the stack in the later checks.
fn argument_problem(cx: &Cx<'_>, run: &RunData, call: &ToolCallRequest) -> Option<String> {
    if let Some(e) = &call.parse_error {
        return Some(format!("not valid JSON ({e})"));
    }
    if depth_exceeds(&call.arguments, MAX_ARGUMENT_DEPTH) {
        return Some(format!("nested deeper than {MAX_ARGUMENT_DEPTH} levels"));
    }
    if encoded_len_exceeds(&call.arguments, MAX_ARGUMENT_BYTES) {
        return Some(format!("larger than {MAX_ARGUMENT_BYTES} bytes"));
    }
    // Hidden values are checked as the tool will get them; the validator's words are not
    // passed on then, since they could quote what the model must not read.
    let hiding = super::hidden::refers(&run.hidden, &call.arguments);
    let errors = if hiding {
        let revealed = super::hidden::reveal(&run.hidden, &call.arguments);
        super::offer::schema_errors(cx.spec, run, &call.name, &revealed)
    } else {
        super::offer::schema_errors(cx.spec, run, &call.name, &call.arguments)
    };
    if errors.is_empty() {
        return None;
    }
    if hiding {
        return Some(
            "they do not match the tool's schema once the hidden values they name are filled in (the details are not shown: they could quote hidden data)".into(),
        );
    }
    let shown: Vec<&str> = errors.iter().take(3).map(String::as_str).collect();
    let more = if errors.len() > 3 {
        format!(" (and {} more)", errors.len() - 3)
    } else {
        String::new()
    };
    Some(format!("{}{more}", shown.join("; ")))
}

/// What the conversation remembers of a call's arguments: the arguments, or for unusable ones
/// a short marker (so a hostile payload is not stored twice or echoed back at full size).
fn remembered_arguments(call: &ToolCallRequest, unusable: bool) -> Value {
    if !unusable {
        return call.arguments.clone();
    }
    match (&call.parse_error, &call.arguments_raw) {
        (Some(_), Some(raw)) if raw.len() <= 4096 => Value::String(raw.clone()),
        _ => Value::String("<arguments rejected>".into()),
    }
}

/// True when `value` nests deeper than `max` (a scalar has depth 0, `[]` depth 1).
pub(crate) fn depth_exceeds(value: &Value, max: usize) -> bool {
    let mut stack: Vec<(&Value, usize)> = vec![(value, 0)];
    while let Some((v, d)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match v {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(map) => Box::new(map.values()),
            _ => continue,
        };
        if d + 1 > max {
            return true;
        }
        stack.extend(children.map(|c| (c, d + 1)));
    }
    false
}

/// True when the compact JSON encoding of `value` is longer than `max` bytes; stops counting
/// early.
fn encoded_len_exceeds(value: &Value, max: usize) -> bool {
    let mut total = 0usize;
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        total += match v {
            Value::Null => 4,
            Value::Bool(_) => 5,
            Value::Number(n) => n.to_string().len(),
            Value::String(s) => s.len() + 2,
            Value::Array(items) => {
                stack.extend(items.iter());
                2 + items.len()
            }
            Value::Object(map) => {
                stack.extend(map.values());
                map.keys().map(|k| k.len() + 4).sum::<usize>() + 2
            }
        };
        if total > max {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(depth: usize) -> Value {
        let mut v = Value::Null;
        for _ in 0..depth {
            v = Value::Array(vec![v]);
        }
        v
    }

    #[test]
    fn depth_counts_containers() {
        assert!(!depth_exceeds(&Value::Null, 0));
        assert!(!depth_exceeds(&nested(64), 64));
        assert!(depth_exceeds(&nested(65), 64));
        assert!(!depth_exceeds(&serde_json::json!({"a": {"b": [1]}}), 3));
        assert!(depth_exceeds(&serde_json::json!({"a": {"b": [1]}}), 2));
    }

    #[test]
    fn size_check_stops_at_the_limit() {
        let big = Value::String("x".repeat(100));
        assert!(encoded_len_exceeds(&big, 50));
        assert!(!encoded_len_exceeds(&big, 200));
    }
}

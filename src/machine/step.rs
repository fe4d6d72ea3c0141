//! `step`: one event in, one transition out. Pure, total and deterministic.

use serde::Serialize;

use super::budget::{BudgetKey, Remaining, Scope, first_exhausted};
use super::effect::{Effect, ModelRequest};
use super::error::{ErrorClass, Failure, MachineError};
use super::event::{Event, EventBody};
use super::ids::{AgentId, EffectRef, Hlc, RunId};
use super::message::{Appended, Message};
use super::spec::RunSpec;
use super::state::{AgentRun, ModelCall, Outcome, RunData, RunState};
use super::table::{EdgeId, EventKind, StateKind};
use super::{batch, child, delegation, offer, retrieval, route, session, summary};

/// What one event did: the next state, the effects to perform once this transition is
/// durable, the messages appended to conversations, and trace notes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Transition {
    /// The table edge taken (see `statechart.md`).
    pub edge: EdgeId,
    /// The next state.
    pub next: RunState,
    /// Effects to perform, in order; ids are `(event.run, next.seq, index)`.
    pub effects: Vec<Effect>,
    /// Messages appended to conversations by this transition, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub appended: Vec<Appended>,
    /// Things worth a trace record (refused tool calls, retries, handoffs, ...).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<Note>,
}

/// A trace record the machine asks the executor to publish. Notes are derived from the
/// history, so they are not stored; replaying the events yields them again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "note", rename_all = "snake_case")]
pub enum Note {
    /// A call outside the agent's grant was refused; the model was told only "tool
    /// unavailable", the trace names the tool.
    ToolRejected {
        /// The agent.
        agent: AgentId,
        /// The call.
        call_id: String,
        /// The tool it asked for.
        tool: String,
    },
    /// A tool's policy blocked a call (see [`flow_policy`](super::flow_policy)): denied, with
    /// the reason fed back as its result, or (`asked`) held for a person's approval.
    ToolBlocked {
        /// The agent.
        agent: AgentId,
        /// The call.
        call_id: String,
        /// The tool.
        tool: String,
        /// The rule it broke ([`Violation::code`](super::Violation::code)).
        rule: String,
        /// True when a person was asked rather than the call denied.
        asked: bool,
    },
    /// A call named an unknown tool or had invalid arguments; fed back as an error.
    ToolInvalid {
        /// The agent.
        agent: AgentId,
        /// The call.
        call_id: String,
        /// The tool it asked for.
        tool: String,
        /// What was wrong.
        reason: String,
    },
    /// A call was not run because the tool-call budget is spent.
    ToolBudget {
        /// The agent.
        agent: AgentId,
        /// The call.
        call_id: String,
    },
    /// A budget ran out.
    BudgetExhausted {
        /// Whose.
        scope: Scope,
        /// Which.
        key: BudgetKey,
    },
    /// A model call is retried.
    Retry {
        /// The agent.
        agent: AgentId,
        /// The new attempt number.
        attempt: u32,
        /// Backoff before it.
        delay_ms: u64,
    },
    /// The agent moves to its next route.
    Fallback {
        /// The agent.
        agent: AgentId,
        /// New route index.
        route: u32,
        /// Its provider.
        provider: String,
        /// Its model.
        model: String,
    },
    /// The agent goes back to an earlier route (its primary, usually) because that route's
    /// cooldown is over.
    RouteRestored {
        /// The agent.
        agent: AgentId,
        /// The route index it returns to.
        route: u32,
        /// Its provider.
        provider: String,
        /// Its model.
        model: String,
    },
    /// The plan moved the run to another agent.
    Handoff {
        /// Finished agent.
        from: AgentId,
        /// Activated agent.
        to: AgentId,
    },
    /// The plan tried to activate an agent past `max_agent_visits`.
    HandoffCycle {
        /// The agent.
        agent: AgentId,
        /// Its visits so far.
        visits: u32,
    },
    /// A session run's summary of what fell out of an agent's window was written (revision 5).
    SessionSummarized {
        /// Whose history it summarises.
        agent: AgentId,
        /// Who wrote it.
        by: AgentId,
    },
    /// A cap was reached before a session run's summary could be written: the agent's window
    /// is kept without a new summary (revision 5).
    SessionSummarySkipped {
        /// Whose history was not summarised.
        agent: AgentId,
    },
    /// The retriever failed; the turn goes on without passages (revision 5).
    RetrievalFailed {
        /// The agent whose turn it was.
        agent: AgentId,
        /// What went wrong.
        error: String,
    },
    /// A reply was cut by the output-token limit and is retried or continued (revision 7).
    Truncated {
        /// The agent.
        agent: AgentId,
        /// What it does about it (`retry` or `continue`).
        policy: super::OnTruncated,
        /// The output tokens the cut reply used, where reported.
        output_tokens: Option<u64>,
        /// The output-token limit the retry asks for.
        next_limit: Option<u64>,
    },
    /// The next request would not have fit the agent's context window: the oldest messages
    /// were summarised by another agent (see [`context_summary`](super::context_summary)).
    ContextSummarized(super::context_summary::Summarized),
    /// The next request would not have fit the agent's context window: tool results were
    /// dropped or shortened (see [`context`](super::context)).
    Compacted {
        /// The agent.
        agent: AgentId,
        /// Its `on_overflow` policy.
        policy: super::context::OnOverflow,
        /// The positions of the messages compacted, in its conversation.
        messages: Vec<u32>,
        /// Their size before, in bytes.
        bytes_before: u64,
        /// Their size after.
        bytes_after: u64,
    },
}

/// Applies `event` to `state` under `spec`.
///
/// Call it once per event, in the order events happened, and perform the returned effects only
/// after the transition is durable. The result depends on nothing but the three arguments:
/// the same inputs give byte-identical outputs. An event that does not apply (a stale effect
/// id, anything after `Done`) is an error and changes nothing.
pub fn step(state: &RunState, event: &Event, spec: &RunSpec) -> Result<Transition, MachineError> {
    let from = state.kind();
    let on = event.kind();
    if from == StateKind::Done {
        return Err(MachineError::InvalidTransition {
            state: from,
            event: on,
        });
    }
    let mut cx = Cx::new(event, spec, state.seq() + 1);
    let (edge, mut next) = match (state, &event.body) {
        (RunState::Compensating { .. }, body) => super::saga::on_event(&mut cx, state, body)?,
        (RunState::Publishing { .. }, EventBody::CancelRequested { reason }) => {
            super::memory::on_cancel(state, reason)
        }
        (_, EventBody::CancelRequested { reason }) => {
            let run = state.data().cloned().unwrap_or_default();
            let edge = match from {
                StateKind::Created => EdgeId::CreatedCancel,
                StateKind::Preparing => EdgeId::PreparingCancel,
                StateKind::Generating => EdgeId::GeneratingCancel,
                StateKind::Summarizing => EdgeId::SummarizingCancel,
                StateKind::Retrieving => EdgeId::RetrievingCancel,
                StateKind::CallingTools => EdgeId::CallingToolsCancel,
                StateKind::AwaitingInput => EdgeId::AwaitingInputCancel,
                StateKind::Handoff => EdgeId::HandoffCancel,
                StateKind::BudgetExhausted
                | StateKind::Publishing
                | StateKind::Compensating
                | StateKind::Done => EdgeId::BudgetExhaustedCancel,
            };
            let outcome = Outcome::Cancelled {
                reason: reason.clone(),
            };
            (edge, RunState::Done { run, outcome })
        }
        (RunState::Created, EventBody::Start { goal }) => {
            session::refuse_plain_start(&cx)?;
            start(&mut cx, goal)
        }
        (RunState::Created, EventBody::SessionStart { goal, seed }) => {
            session::on_start(&mut cx, goal, seed)?
        }
        (
            RunState::Summarizing {
                run,
                call,
                summaries,
            },
            EventBody::ModelReplied { effect, reply, .. },
        ) => {
            check_call(from, call, effect)?;
            summary::on_summary(&mut cx, run.clone(), summaries.clone(), reply)
        }
        (
            RunState::Summarizing {
                run,
                call,
                summaries,
            },
            EventBody::ModelFailed { effect, failure },
        ) => {
            check_call(from, call, effect)?;
            summary::on_summary_failed(&mut cx, run.clone(), call, summaries.clone(), failure)
        }
        (
            RunState::Retrieving { run, effect },
            EventBody::Retrieved {
                effect: answered,
                retrieval,
            },
        ) => {
            if !effect.matches(answered) {
                return Err(MachineError::UnknownEffect {
                    state: from,
                    effect: answered.clone(),
                });
            }
            retrieval::on_retrieved(&mut cx, run.clone(), retrieval)
        }
        (RunState::Preparing { run }, EventBody::Proceed) => prepare(&mut cx, run.clone()),
        (
            RunState::Preparing { run },
            EventBody::ToolsListed {
                server,
                catalog,
                tools,
                added,
            },
        ) => offer::on_tools_listed(&cx, run.clone(), server, *catalog, tools, added)?,
        (RunState::Preparing { run }, EventBody::MemoryLoaded { name, entries, .. }) => {
            super::memory::on_loaded(&cx, run.clone(), name, entries)?
        }
        (
            RunState::Publishing {
                run,
                answer,
                output,
                effect: publish,
                cancel,
                ..
            },
            EventBody::MemoryPublished {
                effect, outcome, ..
            },
        ) => {
            let publishing = super::memory::Publishing {
                answer,
                output,
                effect: *publish,
                cancel,
            };
            super::memory::on_published(&mut cx, run.clone(), publishing, effect, outcome)?
        }
        (RunState::Publishing { .. }, EventBody::Edited { .. }) => {
            return Err(MachineError::EditDoesNotApply(
                "the run is publishing its global memory at this step; fork from an earlier step"
                    .into(),
            ));
        }
        (RunState::Generating { run, call }, EventBody::ModelReplied { effect, reply, .. }) => {
            check_call(from, call, effect)?;
            batch::on_reply(&mut cx, run.clone(), reply)
        }
        (RunState::Generating { run, call }, EventBody::ModelFailed { effect, failure }) => {
            check_call(from, call, effect)?;
            route::on_model_failed(&mut cx, run.clone(), call, failure)
        }
        (RunState::CallingTools { run, batch }, EventBody::ToolReturned { effect, outcome }) => {
            batch::on_tool_returned(&mut cx, run.clone(), batch.clone(), effect, outcome)?
        }
        (
            RunState::CallingTools { run, batch } | RunState::AwaitingInput { run, batch },
            EventBody::InputProvided { effect, input },
        ) => batch::on_input(&mut cx, from, run.clone(), batch.clone(), effect, input)?,
        (
            RunState::CallingTools { run, batch },
            EventBody::ChildFinished { effect, report, .. },
        ) => child::on_child_finished(&mut cx, run.clone(), batch.clone(), effect, report)?,
        (
            RunState::CallingTools { run, batch } | RunState::AwaitingInput { run, batch },
            EventBody::TimerFired { effect, due, early },
        ) => {
            let firing = super::timer::Firing {
                effect,
                due: *due,
                early: *early,
            };
            super::timer::on_fired(&mut cx, from, run.clone(), batch.clone(), firing)?
        }
        (RunState::CallingTools { run, batch }, EventBody::EffectInDoubt { effect }) => {
            batch::on_in_doubt(&mut cx, run.clone(), batch.clone(), effect)?
        }
        (RunState::CallingTools { run, batch }, EventBody::Reconciled { effect, answer }) => {
            batch::on_reconciled(&mut cx, run.clone(), batch.clone(), effect, answer)?
        }
        (_, EventBody::BudgetRaised { scope, key, limit }) if from != StateKind::Created => {
            route::on_budget_raised(&mut cx, state, scope, *key, *limit)?
        }
        (
            RunState::Handoff {
                run,
                from,
                transfer: Some(transfer),
                ..
            },
            EventBody::ConversationSupplied { agent, messages },
        ) => {
            child::on_conversation_supplied(&mut cx, run.clone(), from, transfer, agent, messages)?
        }
        (
            RunState::Handoff {
                run,
                from: agent,
                answer,
                output,
                exhausted,
                transfer: None,
            },
            EventBody::Proceed,
        ) => route::on_handoff(
            &mut cx,
            run.clone(),
            agent,
            answer.as_deref(),
            output.as_ref(),
            *exhausted,
        ),
        (
            RunState::BudgetExhausted {
                run,
                scope,
                key,
                resting: false,
            },
            EventBody::Proceed,
        ) => route::on_exhausted_proceed(run.clone(), scope, *key),
        // A fork edits at a step boundary or around tools; a summary or retrieval outstanding
        // is answered first (fork one step later).
        (_, EventBody::Edited { edits })
            if !matches!(
                from,
                StateKind::Created | StateKind::Summarizing | StateKind::Retrieving
            ) =>
        {
            super::edit::apply(&mut cx, state, edits)?
        }
        _ => {
            return Err(MachineError::InvalidTransition {
                state: from,
                event: on,
            });
        }
    };

    let seq = cx.seq;
    if let Some(run) = next.data_mut() {
        run.seq = seq;
    }
    let mut edge = edge;
    // A saga is not capped: it is as long as the calls it undoes, and stopping it would
    // leave their effects in place.
    if !next.is_done() && from != StateKind::Compensating && seq >= spec.spec().max_transitions {
        // A publish in flight decides the run's end (revision 5): only its answer may take
        // the run on from `Publishing`, and a refusal (nothing written) is capped below.
        if from == StateKind::Publishing && on != EventKind::MemoryPublished {
            return Err(MachineError::InvalidTransition {
                state: from,
                event: on,
            });
        }
        let run = next.data().cloned().unwrap_or_default();
        let error = Failure::new(
            ErrorClass::TransitionCap,
            format!(
                "the run reached max_transitions ({})",
                spec.spec().max_transitions
            ),
        );
        next = RunState::Done {
            run,
            outcome: Outcome::Failed { error },
        };
        cx.effects.clear();
        // `any.transition_cap` covers every started state; a cap of 1 is reached by `Start`
        // itself, which has its own edge (`Created` is not a started state).
        edge = match (from, on) {
            (StateKind::Created, EventKind::SessionStart) => {
                EdgeId::CreatedSessionStartTransitionCap
            }
            (StateKind::Created, _) => EdgeId::CreatedTransitionCap,
            _ => EdgeId::AnyTransitionCap,
        };
    }

    if from != StateKind::Compensating
        && let Some((e, s)) = super::saga::begin(&mut cx, &next)
    {
        edge = e;
        next = s;
    }

    let to = next.kind();
    let declared = edge.row();
    if !declared.admits(from, on, to) {
        return Err(MachineError::EdgeMismatch {
            edge,
            declared: format!("{:?} --{:?}--> {}", declared.from, declared.on, declared.to),
            actual: format!("{from} --{on}--> {to}"),
        });
    }
    Ok(Transition {
        edge,
        next,
        effects: cx.effects,
        appended: cx.appended,
        notes: cx.notes,
    })
}

fn check_call(
    state: StateKind,
    call: &ModelCall,
    effect: &super::EffectId,
) -> Result<(), MachineError> {
    if call.effect.matches(effect) {
        Ok(())
    } else {
        Err(MachineError::UnknownEffect {
            state,
            effect: effect.clone(),
        })
    }
}

/// What one `step` call accumulates besides the next state.
pub(crate) struct Cx<'a> {
    pub(crate) run_id: &'a RunId,
    pub(crate) at: Hlc,
    pub(crate) spec: &'a RunSpec,
    pub(crate) seq: u64,
    pub(crate) effects: Vec<Effect>,
    pub(crate) appended: Vec<Appended>,
    pub(crate) notes: Vec<Note>,
    /// While a reply's calls are dispatched (revision 4): how many child runs it starts and
    /// what the parent had left before any of them, which their budgets are carved from.
    pub(crate) children: Option<(u32, super::Remaining)>,
}

impl<'a> Cx<'a> {
    fn new(event: &'a Event, spec: &'a RunSpec, seq: u64) -> Self {
        Cx {
            run_id: &event.run,
            at: event.at,
            spec,
            seq,
            effects: Vec::new(),
            appended: Vec::new(),
            notes: Vec::new(),
            children: None,
        }
    }

    /// The position the next emitted effect will have.
    pub(crate) fn next_ref(&self) -> EffectRef {
        EffectRef {
            seq: self.seq,
            index: u32::try_from(self.effects.len()).unwrap_or(u32::MAX),
        }
    }

    /// Emits an effect built from its id; returns its position.
    pub(crate) fn emit(&mut self, build: impl FnOnce(super::EffectId) -> Effect) -> EffectRef {
        let r = self.next_ref();
        self.effects.push(build(r.in_run(self.run_id)));
        r
    }

    /// Appends `message` to `agent`'s conversation in `run`, and joins its label into the
    /// agent's taint. A model reply (an assistant message) is labelled with the taint first:
    /// the model read everything the conversation holds before writing it.
    pub(crate) fn append(&mut self, run: &mut RunData, agent: &AgentId, mut message: Message) {
        if let Some(a) = run.agents.get_mut(agent) {
            if message.role == super::message::Role::Assistant {
                message.label = message.label.join(a.taint);
            }
            a.taint = a.taint.join(message.label);
            let rec = a.conversation.push(agent, message);
            super::context::on_append(self, a, &rec);
            self.appended.push(rec);
        }
    }

    /// Emits `CallModel` for the active agent on `route`, attempt `attempt`.
    pub(crate) fn call_model(
        &mut self,
        run: &RunData,
        route: u32,
        attempt: u32,
        not_before: Option<Hlc>,
    ) -> ModelCall {
        let agent = run.active.clone();
        let request = build_request(self, run, route);
        let effect = self.emit(|id| Effect::CallModel {
            id,
            agent,
            request,
            attempt,
            not_before,
        });
        ModelCall {
            effect,
            route,
            attempt,
        }
    }

    /// The first exhausted budget for the active agent: run scope first, then the agent's.
    /// Returns the scope, the key and whether the policy rests the run there.
    pub(crate) fn exhaustion(&self, run: &RunData) -> Option<(Scope, BudgetKey, bool)> {
        use super::spec::{OnExhausted, RunOnExhausted};
        let elapsed = self.at.ms_since(run.started_at);
        if let Some(key) = first_exhausted(&run.limits, &run.usage, elapsed) {
            let resting = self.spec.spec().on_exhausted == RunOnExhausted::Pause;
            return Some((Scope::Run, key, resting));
        }
        let a = run.agents.get(&run.active)?;
        let key = first_exhausted(&a.limits, &a.usage, self.at.ms_since(a.first_active_at))?;
        let resting = self
            .spec
            .agent(&run.active)
            .is_some_and(|s| s.on_exhausted == OnExhausted::Pause);
        Some((Scope::Agent(run.active.clone()), key, resting))
    }

    /// What is left of the active agent's budgets and the run's, the tighter of each, now.
    pub(crate) fn remaining(&self, run: &RunData) -> Remaining {
        let a = run.agents.get(&run.active).cloned().unwrap_or_default();
        Remaining::of(&[
            (&a.limits, &a.usage, self.at.ms_since(a.first_active_at)),
            (&run.limits, &run.usage, self.at.ms_since(run.started_at)),
        ])
    }
}

fn build_request(cx: &Cx<'_>, run: &RunData, route: u32) -> ModelRequest {
    let agent = &run.active;
    let spec_agent = cx.spec.agent(agent);
    let r = spec_agent.and_then(|a| a.routes.get(route as usize));
    let a = run.agents.get(agent).cloned().unwrap_or_default();
    let remaining = cx.remaining(run);
    let (mut tools, catalogs) = offer::offered(cx.spec, run, agent);
    if let Some(a) = spec_agent {
        tools.extend(delegation::offered_names(a));
    }
    tools.extend(super::memory::tools::offered_names(cx.spec, agent));
    tools.extend(super::timer::offered_names(cx.spec, agent));
    let memory = cx
        .spec
        .spec()
        .memory
        .as_ref()
        .and_then(|m| super::memory::injected_text(&run.memory, &m.inject, agent));
    ModelRequest {
        provider: r.map(|r| r.provider.clone()).unwrap_or_default(),
        model: r.map(|r| r.model.clone()).unwrap_or_default(),
        route,
        conversation: a.conversation,
        tools,
        remaining,
        catalogs,
        summary: false,
        memory,
        max_output_tokens: a.output_limit,
        compacted: a
            .context
            .compacted
            .iter()
            .filter(|c| c.index < a.conversation.len)
            .copied()
            .collect(),
        summarize: None,
        summarized: a
            .context
            .summary
            .clone()
            .filter(|s| s.upto <= a.conversation.len)
            .map(Box::new),
    }
}

fn start(cx: &mut Cx<'_>, goal: &str) -> (EdgeId, RunState) {
    let mut run = begin(cx, goal);
    let entry = cx.spec.plan().entry.clone();
    let files = cx.spec.spec().attachments.clone();
    activate_with(
        cx,
        &mut run,
        &entry,
        goal.to_owned(),
        super::Label::TRUSTED,
        files,
    );
    (EdgeId::CreatedStart, RunState::Preparing { run })
}

/// The run data of a run beginning now toward `goal`: every agent of the spec with its
/// budgets, nobody activated yet.
pub(crate) fn begin(cx: &Cx<'_>, goal: &str) -> RunData {
    let spec = cx.spec;
    let mut run = RunData {
        seq: cx.seq,
        started_at: cx.at,
        goal: goal.into(),
        active: spec.plan().entry.clone(),
        agents: Default::default(),
        usage: Default::default(),
        limits: spec.spec().limits,
        cooldowns: Default::default(),
        catalogs: Default::default(),
        memory: Default::default(),
        saga: Vec::new(),
        hidden: Vec::new(),
    };
    for a in &spec.spec().agents {
        run.agents.insert(
            a.id.clone(),
            Box::new(AgentRun {
                limits: a.limits,
                ..AgentRun::default()
            }),
        );
    }
    run
}

/// Makes `agent` active: first visit gets its system prompt, every visit gets `user_text`,
/// labelled `label` (trusted for the goal; the sender's taint for a handoff or transfer note,
/// which carries its answer).
pub(crate) fn activate(
    cx: &mut Cx<'_>,
    run: &mut RunData,
    agent: &AgentId,
    user_text: String,
    label: super::Label,
) {
    activate_with(cx, run, agent, user_text, label, Vec::new());
}

/// [`activate`], the user message carrying `files` (the goal's attachments).
fn activate_with(
    cx: &mut Cx<'_>,
    run: &mut RunData,
    agent: &AgentId,
    user_text: String,
    label: super::Label,
    files: Vec<super::Attachment>,
) {
    let system = cx
        .spec
        .agent(agent)
        .map(|a| a.system_prompt.clone())
        .unwrap_or_default();
    let at = cx.at;
    let Some(a) = run.agents.get_mut(agent) else {
        return;
    };
    let first = a.visits == 0;
    // An agent whose conversation a session opened has its system prompt already.
    let prompted = a.seeded;
    a.visits += 1;
    a.strikes = 0;
    a.route = 0;
    if first {
        a.first_active_at = at;
    }
    run.active = agent.clone();
    if first && !prompted && !system.is_empty() {
        cx.append(
            run,
            agent,
            Message::text(super::message::Role::System, system),
        );
    }
    cx.append(
        run,
        agent,
        Message {
            label,
            attachments: files,
            ..Message::text(super::message::Role::User, user_text)
        },
    );
}

fn prepare(cx: &mut Cx<'_>, mut run: RunData) -> (EdgeId, RunState) {
    if let Some((scope, key, resting)) = cx.exhaustion(&run) {
        cx.notes.push(Note::BudgetExhausted {
            scope: scope.clone(),
            key,
        });
        return (
            EdgeId::PreparingProceedExhausted,
            RunState::BudgetExhausted {
                run,
                scope,
                key,
                resting,
            },
        );
    }
    if retrieval::retrieves(cx.spec, &run.active) {
        return retrieval::begin(cx, run);
    }
    match model_turn(cx, &mut run) {
        Turn::Call { call, compacted } => (
            if compacted {
                EdgeId::PreparingProceedCompact
            } else {
                EdgeId::PreparingProceedCall
            },
            RunState::Generating { run, call },
        ),
        Turn::Summarize { call, summaries } => (
            EdgeId::PreparingProceedSummarize,
            RunState::Summarizing {
                run,
                call,
                summaries,
            },
        ),
        Turn::Exhausted(error) => (
            EdgeId::PreparingProceedContextExhausted,
            RunState::Done {
                run,
                outcome: Outcome::Failed { error },
            },
        ),
    }
}

/// What a new turn of the active agent came to.
pub(crate) enum Turn {
    /// `CallModel` was emitted; `compacted` when tool results were compacted to fit the
    /// agent's context window first.
    Call {
        /// The call.
        call: ModelCall,
        /// Whether a compaction was recorded.
        compacted: bool,
    },
    /// The request would not fit the agent's context window: a summary of the oldest
    /// messages is asked for first (`Summarizing`).
    Summarize {
        /// The summary call.
        call: ModelCall,
        /// The state's summarisation.
        summaries: super::summary::Summaries,
    },
    /// The request would not fit the agent's context window: the run fails with this.
    Exhausted(Failure),
}

/// Emits the active agent's `CallModel` for a new turn, on the route a step boundary chooses,
/// once its context window has room for the request (see [`context`](super::context)).
pub(crate) fn model_turn(cx: &mut Cx<'_>, run: &mut RunData) -> Turn {
    let route = if cx.spec.spec().semantics >= 2 {
        route::choose_route(cx, run)
    } else {
        // Revision 1: the route an agent fell back to stays for the rest of its activation.
        run.agents.get(&run.active).map_or(0, |a| a.route)
    };
    // Guarded tools: the memory injected into the request taints its reader.
    if let Some(m) = cx.spec.spec().memory.as_ref() {
        let shown = run.memory.label_of(&m.inject, &run.active);
        if let Some(a) = run.agents.get_mut(&run.active) {
            a.taint = a.taint.join(shown);
        }
    }
    let request = build_request(cx, run, route);
    let compacted = match super::context::make_room(cx, run, &request) {
        super::context::Room::Fits => false,
        super::context::Room::Compacted => true,
        super::context::Room::Exhausted(error) => return Turn::Exhausted(error),
        super::context::Room::Summarize(job) => {
            return super::context_summary::begin(cx, run, job);
        }
    };
    Turn::Call {
        call: cx.call_model(run, route, 1, None),
        compacted,
    }
}

//! One step of a run, in full (`runtape show RUN@SEQ`): the state after it, the event that
//! led there, the effects it emitted, and for a model call the exact request that was sent —
//! messages, tools offered and remaining budget.

use serde::Serialize;

use crate::ledger::codec::{decode_effects, decode_event};
use crate::ledger::{HistoryError, conversation, row, spec_of, state_at, transitions};
use crate::machine::{
    AgentId, EdgeId, Effect, EffectId, Event, Message, ModelSettings, Remaining, RunId, RunState,
};
use crate::provider::ToolDef;
use crate::store::Store;

/// A step of a run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepView {
    /// The run.
    pub run: RunId,
    /// The step (0 = before `Start`).
    pub seq: u64,
    /// The run's latest step.
    pub latest: u64,
    /// The edge taken into this step (none at 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub edge: Option<EdgeId>,
    /// The event that led here (none at 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<Event>,
    /// The state after the step.
    pub state: RunState,
    /// Its hash.
    pub state_hash: String,
    /// Effects emitted by the step.
    pub effects: Vec<Effect>,
    /// The model request the step sent, resolved, if it sent one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<SentRequest>,
    /// The run's place in its session, and the run it goes on from (revision 5).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<crate::machine::SessionSpec>,
    /// For a model reply that was not a plain answer: `truncated` (cut by the output-token
    /// limit) or `refused` (the model declined). The reply itself is in `event`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply_end: Option<&'static str>,
}

/// A model request exactly as the provider received it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SentRequest {
    /// The `CallModel` effect.
    pub effect: EffectId,
    /// The agent.
    pub agent: AgentId,
    /// Provider name.
    pub provider: String,
    /// Model.
    pub model: String,
    /// Attempt on its route.
    pub attempt: u32,
    /// The messages.
    pub messages: Vec<Message>,
    /// Tools offered.
    pub tools: Vec<ToolDef>,
    /// The MCP catalogs (by server) the offer was resolved against (revision 3).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub catalogs: std::collections::BTreeMap<String, crate::machine::Digest>,
    /// Budget left.
    pub remaining: Remaining,
    /// The agent's model settings sent with it (sampling, stop, reasoning, ...).
    #[serde(skip_serializing_if = "ModelSettings::is_empty")]
    pub settings: ModelSettings,
    /// The output schema structured output was asked for with, if the agent has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<serde_json::Value>,
}

/// The step `seq` of `run` (`None` = the latest).
pub fn show(store: &dyn Store, run: &RunId, seq: Option<u64>) -> Result<StepView, HistoryError> {
    let rec = row(store, run)?;
    let spec = spec_of(&rec)?;
    let seq = seq.unwrap_or(rec.seq);
    let rebuilt = state_at(store, run, &spec, seq)?;
    let row = if seq == 0 {
        None
    } else {
        transitions(store, run, seq, seq)?.into_iter().next()
    };
    let (edge, event, effects) = match &row {
        Some(t) => (
            Some(t.edge),
            Some(decode_event(run, t.seq, &t.event)?),
            decode_effects(run, t.seq, &t.effects)?,
        ),
        None => (None, None, Vec::new()),
    };
    let request = effects
        .iter()
        .find_map(|e| match e {
            Effect::CallModel {
                id,
                agent,
                request,
                attempt,
                ..
            } => Some((id, agent, request, *attempt)),
            _ => None,
        })
        .map(
            |(id, agent, request, attempt)| -> Result<SentRequest, HistoryError> {
                Ok(SentRequest {
                    effect: id.clone(),
                    agent: agent.clone(),
                    provider: request.provider.clone(),
                    model: request.model.clone(),
                    attempt,
                    messages: {
                        let mut messages = conversation(store, agent, &request.conversation)?;
                        // Compactions and injected memory, as the driver sent them.
                        request.complete_messages(&mut messages);
                        messages
                    },
                    tools: request
                        .tools
                        .iter()
                        .filter_map(|n| {
                            let listed = match rebuilt.state.data() {
                                Some(data) => crate::machine::offered_tool(&spec, data, n),
                                None => spec.tool(n),
                            };
                            // A `delegate_…`/`transfer_to_…` tool is defined by the spec's
                            // agents (as the driver resolves it).
                            match listed {
                                Some(t) => Some(std::borrow::Cow::Borrowed(t)),
                                None => spec.offered_tool(n),
                            }
                        })
                        .map(|t| ToolDef {
                            name: t.name.clone(),
                            description: t.description.clone(),
                            schema: t.schema.clone(),
                        })
                        .collect(),
                    catalogs: request.catalogs.clone(),
                    remaining: request.remaining,
                    settings: request.settings(spec.agent(agent)),
                    // A session summary is plain text whatever the agent answers with.
                    output_schema: spec
                        .agent(agent)
                        .filter(|_| !request.summary)
                        .and_then(|a| a.output_schema.clone()),
                })
            },
        )
        .transpose()?;
    let reply_end = match event.as_ref().map(|e| &e.body) {
        Some(crate::machine::EventBody::ModelReplied { reply, .. }) => {
            super::timeline::reply_end(reply)
        }
        _ => None,
    };
    Ok(StepView {
        run: run.clone(),
        seq,
        latest: rec.seq,
        edge,
        event,
        reply_end,
        state_hash: rebuilt.state.state_hash(spec.history_hash()).to_hex(),
        state: rebuilt.state,
        effects,
        request,
        session: spec.spec().session.clone(),
    })
}

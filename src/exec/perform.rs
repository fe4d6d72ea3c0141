//! Performing effects: each becomes a future that resolves to the event carrying its result.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::EngineError;
use super::clock::{Clock, wall_ms};
use super::trace::{Trace, TraceEvent};
use crate::machine::{
    AgentId, EffectId, EventBody, Hlc, ModelFailure, ProviderErrorClass, RunId, ToolOutcome,
};
use crate::provider::{ModelProvider, ProviderRequest};
use crate::store::{OutboxRecord, OutboxStatus, Store};
use crate::tool::{Tool, ToolContext};

/// What a performed effect produced.
// Produced once per effect and consumed at once; boxing the event would cost more than it saves.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Completion {
    /// The event carrying its result.
    Event(EventBody),
    /// The driver must stop (it lost the run's lease while marking a call started).
    Fatal(EngineError),
}

/// Calls the model after `not_before`; token deltas go to the trace.
pub(crate) fn model_call(
    id: EffectId,
    provider: Option<Arc<dyn ModelProvider>>,
    provider_name: String,
    request: ProviderRequest,
    not_before: Option<Hlc>,
    trace: broadcast::Sender<TraceEvent>,
    clock: Arc<dyn Clock>,
) -> BoxFuture<'static, Completion> {
    Box::pin(async move {
        if let Some(at) = not_before {
            let wait = at.ms().saturating_sub(wall_ms());
            if wait > 0 {
                tokio::time::sleep(Duration::from_millis(wait)).await;
            }
        }
        let Some(provider) = provider else {
            let failure = ModelFailure {
                retryable: false,
                ..ModelFailure::new(
                    ProviderErrorClass::BadRequest,
                    format!("no provider named `{provider_name}` is registered in this process"),
                )
            };
            return Completion::Event(EventBody::ModelFailed {
                effect: id,
                failure,
            });
        };
        let run = id.run.clone();
        let agent = request.agent.clone();
        let sink = move |delta: &str| {
            if trace.receiver_count() > 0 {
                let _ = trace.send(TraceEvent {
                    run: run.clone(),
                    at: clock.trace(),
                    seq: None,
                    kind: Trace::ModelToken {
                        agent: agent.clone(),
                        text: delta.to_owned(),
                    },
                });
            }
        };
        match provider.complete(&request, &sink).await {
            Ok(reply) => Completion::Event(EventBody::ModelReplied { effect: id, reply }),
            Err(e) => Completion::Event(EventBody::ModelFailed {
                effect: id,
                failure: e.to_failure(),
            }),
        }
    })
}

/// Everything a tool call needs.
pub(crate) struct ToolJob {
    pub(crate) id: EffectId,
    pub(crate) agent: AgentId,
    pub(crate) call_id: String,
    pub(crate) tool_name: String,
    pub(crate) tool: Option<Arc<dyn Tool>>,
    pub(crate) args: Value,
    pub(crate) idempotency_key: String,
    pub(crate) epoch: u64,
    /// The run's head, which lists the calls marked started.
    pub(crate) head: Arc<crate::history::head::HeadKeeper>,
    pub(crate) timeout: Duration,
    pub(crate) cancel: CancellationToken,
}

/// Runs a tool. A non-idempotent tool is first marked `started` durably, so a crash while it
/// runs is recognised as in doubt on resume rather than silently repeated.
pub(crate) fn tool_call(store: Arc<dyn Store>, job: ToolJob) -> BoxFuture<'static, Completion> {
    Box::pin(async move {
        let ToolJob {
            id,
            agent,
            call_id,
            tool_name,
            tool,
            args,
            idempotency_key,
            epoch,
            head,
            timeout,
            cancel,
        } = job;
        let error = |message: String| {
            Completion::Event(EventBody::ToolReturned {
                effect: id.clone(),
                outcome: ToolOutcome::Error { message },
            })
        };
        let Some(tool) = tool else {
            return error(format!("tool {tool_name} is not available in this process"));
        };
        if !tool.idempotent() {
            let started = vec![OutboxRecord {
                effect: crate::machine::EffectRef {
                    seq: id.seq,
                    index: id.index,
                },
                status: OutboxStatus::Started,
                idempotency_key: Some(idempotency_key.clone()),
            }];
            let ack = head.submit_mark_started(store.as_ref(), id.run.clone(), epoch, started);
            if let Err(e) = ack.await.unwrap_or(Err(crate::store::StoreError::Closed)) {
                return Completion::Fatal(e.into());
            }
        }
        let ctx = ToolContext {
            run_id: RunId::clone(&id.run),
            agent,
            call_id,
            idempotency_key,
            cancel: cancel.clone(),
        };
        let limit = tool.timeout().unwrap_or(timeout);
        match tokio::time::timeout(limit, tool.invoke(args, ctx)).await {
            Ok(Ok(value)) => Completion::Event(EventBody::ToolReturned {
                effect: id,
                outcome: ToolOutcome::Ok { value },
            }),
            Ok(Err(e)) => error(e.message),
            Err(_) => {
                cancel.cancel();
                error(format!(
                    "tool {tool_name} timed out after {} ms",
                    limit.as_millis()
                ))
            }
        }
    })
}

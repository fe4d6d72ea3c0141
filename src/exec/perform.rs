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
use crate::store::{OutboxRecord, OutboxStatus, Store, Write};
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

/// Calls the model after `not_before`; token deltas go to the trace. The `model.request`
/// trace is published when the call is actually sent (after the backoff wait, so a retry is
/// not announced before it happens), and the wait is taken off the request's remaining
/// wall-time budget, which bounds the provider's deadline.
pub(crate) fn model_call(
    id: EffectId,
    provider: Option<Arc<dyn ModelProvider>>,
    provider_name: String,
    mut request: ProviderRequest,
    not_before: Option<Hlc>,
    trace: broadcast::Sender<TraceEvent>,
    clock: Arc<dyn Clock>,
) -> BoxFuture<'static, Completion> {
    Box::pin(async move {
        if let Some(at) = not_before {
            let wait = at.ms().saturating_sub(wall_ms());
            if wait > 0 {
                tokio::time::sleep(Duration::from_millis(wait)).await;
                if let Some(left) = &mut request.remaining.wall_ms {
                    *left = left.saturating_sub(wait);
                }
            }
        }
        if trace.receiver_count() > 0 {
            let _ = trace.send(TraceEvent {
                run: id.run.clone(),
                at: clock.trace(),
                seq: Some(id.seq),
                kind: Trace::ModelRequest {
                    agent: request.agent.clone(),
                    provider: provider_name.clone(),
                    model: request.model.clone(),
                    attempt: request.attempt,
                    messages: request.messages.len(),
                },
            });
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
        // Known secret values are scrubbed from everything the provider sends back before it
        // is traced or becomes an event (a value split across token deltas included).
        let secrets = crate::secrets::global();
        let scrubber = std::sync::Mutex::new(secrets.stream());
        let send = move |text: String| {
            if !text.is_empty() && trace.receiver_count() > 0 {
                let _ = trace.send(TraceEvent {
                    run: run.clone(),
                    at: clock.trace(),
                    seq: None,
                    kind: Trace::ModelToken {
                        agent: agent.clone(),
                        text,
                    },
                });
            }
        };
        let sink = |delta: &str| {
            let clean = match scrubber.lock() {
                Ok(mut s) => s.push(delta),
                Err(poisoned) => poisoned.into_inner().push(delta),
            };
            send(clean);
        };
        let result = provider.complete(&request, &sink).await;
        let rest = match scrubber.lock() {
            Ok(mut s) => s.finish(),
            Err(poisoned) => poisoned.into_inner().finish(),
        };
        send(rest);
        match result {
            Ok(mut reply) => {
                secrets.scrub(&mut reply);
                Completion::Event(EventBody::ModelReplied { effect: id, reply })
            }
            Err(e) => {
                let mut failure = e.to_failure();
                secrets.scrub(&mut failure);
                Completion::Event(EventBody::ModelFailed {
                    effect: id,
                    failure,
                })
            }
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
            let mark = Write::MarkStarted {
                run: id.run.clone(),
                epoch,
                effects: vec![OutboxRecord {
                    effect: crate::machine::EffectRef {
                        seq: id.seq,
                        index: id.index,
                    },
                    status: OutboxStatus::Started,
                    idempotency_key: Some(idempotency_key.clone()),
                }],
            };
            if let Err(e) = crate::store::write(store.as_ref(), mark).await {
                return Completion::Fatal(e.into());
            }
        }
        let ctx = ToolContext {
            run_id: RunId::clone(&id.run),
            agent,
            call_id,
            idempotency_key,
            lease_epoch: epoch,
            cancel: cancel.clone(),
        };
        let limit = tool.timeout().unwrap_or(timeout);
        let secrets = crate::secrets::global();
        match tokio::time::timeout(limit, tool.invoke(args, ctx)).await {
            Ok(Ok(mut value)) => {
                secrets.scrub_value(&mut value);
                Completion::Event(EventBody::ToolReturned {
                    effect: id,
                    outcome: ToolOutcome::Ok { value },
                })
            }
            Ok(Err(e)) => error(secrets.scrub_str(&e.message).into_owned()),
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

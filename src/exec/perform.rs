//! Performing effects: each becomes a future that resolves to the event carrying its result.

use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::EngineError;
use super::trace::{Trace, TraceEvent};
use super::writes::Writes;
use crate::clock::Clock;
use crate::machine::{
    AgentId, EffectId, EventBody, Hlc, ModelFailure, ProviderErrorClass, Reconciliation, RunId,
    ToolOutcome,
};
use crate::provider::{ModelProvider, ProviderRequest};
use crate::store::{OutboxRecord, OutboxStatus};
use crate::tool::{Tool, ToolContext};

/// What a performed effect produced.
// Produced once per effect and consumed at once; boxing the event would cost more than it saves.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Completion {
    /// The event carrying its result.
    Event(EventBody),
    /// The event carrying a tool's result, with the bytes of the files the result names
    /// (stored as blobs by the transition that records the event).
    EventWithFiles {
        /// The event.
        body: EventBody,
        /// The bytes of each file its result names.
        files: Vec<Vec<u8>>,
    },
    /// The driver must stop (it lost the run's lease while marking a call started).
    Fatal(EngineError),
    /// Cancelled before it produced anything worth committing.
    Abandoned,
    /// A child run rests waiting for a person (revision 4): nothing to commit; the parent
    /// stops waiting on it, and rests once nothing else is in flight. Performing the
    /// `RunChild` effect again (`resume`) picks the child up where it stands.
    ChildWaiting(crate::machine::RunId),
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
            let wait = clock.until(at);
            if !wait.is_zero() {
                clock.sleep(wait).await;
                if let Some(left) = &mut request.remaining.wall_ms {
                    let waited = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
                    *left = left.saturating_sub(waited);
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
                    params: super::trace::RequestParams::of(
                        &request.settings,
                        request.output_schema.is_some(),
                    ),
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
        let stream = std::sync::Mutex::new(Stream::default());
        let send = |text: String| {
            if text.is_empty() {
                return;
            }
            stream
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .push(&text);
            if trace.receiver_count() > 0 {
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
        // The provider's own timeouts run on the engine's clock.
        let result = crate::clock::scope(clock.clone(), provider.complete(&request, &sink)).await;
        let rest = match scrubber.lock() {
            Ok(mut s) => s.finish(),
            Err(poisoned) => poisoned.into_inner().finish(),
        };
        send(rest);
        let stream = stream
            .into_inner()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match result {
            Ok(mut reply) => {
                secrets.scrub(&mut reply);
                let chunks = stream.lengths_for(reply.text.as_deref());
                Completion::Event(EventBody::ModelReplied {
                    effect: id,
                    reply,
                    chunks,
                })
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

/// The text a reply streamed, piece by piece, as observers saw it.
#[derive(Default)]
struct Stream {
    text: String,
    lengths: Vec<u32>,
}

impl Stream {
    fn push(&mut self, piece: &str) {
        self.text.push_str(piece);
        self.lengths
            .push(u32::try_from(piece.len()).unwrap_or(u32::MAX));
    }

    /// The pieces' lengths, when they are exactly `text` in more than one piece; otherwise
    /// none (a reply that came whole, or a stream that is not its text).
    fn lengths_for(self, text: Option<&str>) -> Vec<u32> {
        if self.lengths.len() > 1 && text == Some(self.text.as_str()) {
            self.lengths
        } else {
            Vec::new()
        }
    }
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
    pub(crate) head: Arc<crate::ledger::HeadKeeper>,
    pub(crate) timeout: Duration,
    pub(crate) cancel: CancellationToken,
    /// How long the lease lasts after a write renews it, and the clock it is judged by.
    pub(crate) lease: LeaseTerms,
}

impl ToolJob {
    /// The context its tool is handed: call it just before the call (or the reconcile
    /// question) goes to the tool. The context's token is a clone of the job's, so a
    /// timeout cancelling the job's token reaches the tool.
    fn context(&self) -> ToolContext {
        ToolContext {
            run_id: RunId::clone(&self.id.run),
            agent: self.agent.clone(),
            call_id: self.call_id.clone(),
            idempotency_key: self.idempotency_key.clone(),
            lease_epoch: self.epoch,
            cancel: self.cancel.clone(),
        }
    }
}

/// The lease as the driver judges it by its own clock.
#[derive(Clone)]
pub(crate) struct LeaseTerms {
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) ttl: Duration,
}

impl LeaseTerms {
    /// The safety margin: a lease with less than this left is treated as lost (a quarter of
    /// the lease, so clocks may drift and a process may be descheduled that long).
    pub(crate) fn margin_ms(&self) -> u64 {
        (self.ttl.as_millis() as u64) / 4
    }

    /// True when a lease that expires at `expires_ms` is still good at `now_ms`, with margin.
    pub(crate) fn still_good(&self, now_ms: u64, expires_ms: u64) -> bool {
        now_ms.saturating_add(self.margin_ms()) < expires_ms
    }
}

/// Runs a tool. A non-idempotent tool is first marked `started` durably (fenced by the lease
/// epoch, renewing the lease), so a crash while it runs is recognised as in doubt on resume
/// rather than silently repeated; then, before it starts, the driver checks by its own clock
/// that the lease it just renewed is still good with margin. A process frozen longer than
/// that since the mark does not start the call (it stops, and the call is in doubt for
/// whoever takes the run over). A process frozen *after* this check and before the program
/// starts cannot know: the call may then start after another process found it in doubt, and
/// only the tool's idempotency key can tell the two apart.
pub(crate) fn tool_call(writes: Arc<Writes>, job: ToolJob) -> BoxFuture<'static, Completion> {
    Box::pin(async move {
        let tool_name = &job.tool_name;
        let error = |message: String| {
            Completion::Event(EventBody::ToolReturned {
                effect: job.id.clone(),
                outcome: ToolOutcome::Error { message },
            })
        };
        let Some(tool) = &job.tool else {
            return error(format!("tool {tool_name} is not available in this process"));
        };
        if !tool.idempotent() {
            let lease = &job.lease;
            let expires_ms = lease.clock.wall_ms() + lease.ttl.as_millis() as u64;
            let started = vec![OutboxRecord {
                effect: crate::machine::EffectRef {
                    seq: job.id.seq,
                    index: job.id.index,
                },
                status: OutboxStatus::Started,
                idempotency_key: Some(job.idempotency_key.clone()),
            }];
            let run = job.id.run.clone();
            let pending = writes
                .submit_with(|store| {
                    job.head
                        .submit_mark_started(store, run, job.epoch, started, expires_ms)
                })
                .await;
            if let Err(e) = pending.done().await {
                return Completion::Fatal(e.into());
            }
            if !lease.still_good(lease.clock.wall_ms(), expires_ms) {
                return Completion::Fatal(EngineError::LeaseExpired {
                    run: job.id.run.to_string(),
                    call_id: job.call_id.clone(),
                });
            }
        }
        let limit = tool.timeout().unwrap_or(job.timeout);
        let secrets = crate::secrets::global();
        let ctx = job.context();
        // The tool's own timeouts run on the engine's clock.
        let called = crate::clock::scope(job.lease.clock.clone(), tool.answer(job.args, ctx));
        match within_or_cancel(&job.lease.clock, limit, &job.cancel, called).await {
            Ok(Ok(answer)) => {
                let mut value = answer.value;
                secrets.scrub_value(&mut value);
                let files = answer
                    .files
                    .iter()
                    .map(|f| {
                        crate::machine::Attachment::of(&f.media_type, &f.bytes, f.name.clone())
                    })
                    .collect();
                Completion::EventWithFiles {
                    body: EventBody::ToolReturned {
                        effect: job.id,
                        outcome: ToolOutcome::Ok { value, files },
                    },
                    files: answer.files.into_iter().map(|f| f.bytes).collect(),
                }
            }
            Ok(Err(e)) => error(secrets.scrub_str(&e.message).into_owned()),
            Err(()) => error(format!(
                "tool {tool_name} timed out after {} ms",
                limit.as_millis()
            )),
        }
    })
}

/// Asks a tool whether an interrupted call was performed (see [`Tool::reconcile`]); any
/// failure to get a clear answer — no reconcile support, an error, a timeout, an answer that
/// is not `{"performed": true|false|null, …}` — is recorded as unknown, with the reason.
pub(crate) fn reconcile_call(job: ToolJob) -> BoxFuture<'static, Completion> {
    Box::pin(async move {
        let tool_name = &job.tool_name;
        let answer = match &job.tool {
            None => Reconciliation::Unknown {
                reason: format!("tool {tool_name} is not available in this process"),
            },
            Some(tool) => {
                let limit = tool.timeout().unwrap_or(job.timeout);
                let ctx = job.context();
                match tool.reconcile(job.args, ctx) {
                    None => Reconciliation::Unknown {
                        reason: format!("tool {tool_name} declares no reconcile command"),
                    },
                    Some(asked) => {
                        let asked = crate::clock::scope(job.lease.clock.clone(), asked);
                        match within_or_cancel(&job.lease.clock, limit, &job.cancel, asked).await {
                            Ok(Ok(mut value)) => {
                                // Its answer becomes an event like any tool result: no known
                                // secret value may land through it.
                                crate::secrets::global().scrub_value(&mut value);
                                reconciliation(tool_name, &value)
                            }
                            Ok(Err(e)) => Reconciliation::Unknown {
                                reason: crate::secrets::global().scrub_str(&e.message).into_owned(),
                            },
                            Err(()) => Reconciliation::Unknown {
                                reason: format!(
                                    "the reconcile command of {tool_name} timed out after {} ms",
                                    limit.as_millis()
                                ),
                            },
                        }
                    }
                }
            }
        };
        Completion::Event(EventBody::Reconciled {
            effect: job.id,
            answer,
        })
    })
}

/// Asks the retriever for passages (revision 5). Never fails the run: no retriever in this
/// process, its failure or a timeout is the recorded result, and the turn goes on without
/// passages. Read-only, so performed again after a crash.
pub(crate) fn retrieve(
    id: EffectId,
    retriever: Option<crate::tool::retriever::Retriever>,
    query: Value,
    ctx: ToolContext,
    clock: Arc<dyn Clock>,
    default: Duration,
) -> BoxFuture<'static, Completion> {
    Box::pin(async move {
        let cancel = ctx.cancel.clone();
        let retrieval = match retriever {
            None => crate::machine::Retrieval::Failed {
                error: "no retriever is registered in this process".into(),
            },
            Some(r) => {
                let limit = r.timeout(default);
                let asked = crate::clock::scope(clock.clone(), r.retrieve(query, ctx));
                match within_or_cancel(&clock, limit, &cancel, asked).await {
                    Ok(retrieval) => retrieval,
                    Err(()) => crate::machine::Retrieval::Failed {
                        error: format!("the retriever timed out after {} ms", limit.as_millis()),
                    },
                }
            }
        };
        Completion::Event(EventBody::Retrieved {
            effect: id,
            retrieval,
        })
    })
}

/// `fut`'s output, or `Err(())` when `limit` passes first on `clock`; then `cancel` (the
/// token the call was handed) is cancelled, so that the work it started stops. Await every
/// timed call to a tool or the retriever through this.
async fn within_or_cancel<T>(
    clock: &Arc<dyn Clock>,
    limit: Duration,
    cancel: &CancellationToken,
    fut: impl std::future::Future<Output = T>,
) -> Result<T, ()> {
    // The limit counts from now; the timer is built only for a call that is not ready at
    // once (an in-process tool answers on its first poll), and then polled after the call.
    let deadline = clock.now() + limit;
    let mut fut = std::pin::pin!(fut);
    if let Some(out) = fut.as_mut().now_or_never() {
        return Ok(out);
    }
    let finished = tokio::select! {
        biased;
        out = fut => Ok(out),
        () = clock.sleep_until(deadline) => Err(()),
    };
    // Cancelled only once `select!` is over, so the abandoned call is already dropped.
    if finished.is_err() {
        cancel.cancel();
    }
    finished
}

/// Reads a reconcile command's answer: `{"performed": true, "result": …}`,
/// `{"performed": false}`, `{"performed": null}` (or no `performed`: unknown).
pub(crate) fn reconciliation(tool: &str, value: &Value) -> Reconciliation {
    match value.get("performed") {
        Some(Value::Bool(true)) => Reconciliation::Performed {
            result: value.get("result").cloned(),
        },
        Some(Value::Bool(false)) => Reconciliation::NotPerformed,
        Some(Value::Null) | None if value.is_object() => Reconciliation::Unknown {
            reason: format!("the reconcile command of {tool} does not know"),
        },
        _ => {
            let shown: String = value.to_string().chars().take(120).collect();
            Reconciliation::Unknown {
                reason: format!(
                    "the reconcile command of {tool} answered {shown}, not {{\"performed\": true|false|null}}"
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::SystemClock;

    #[test]
    fn a_lease_is_good_until_a_quarter_of_it_is_left() {
        let lease = LeaseTerms {
            clock: Arc::new(SystemClock::default()),
            ttl: Duration::from_millis(1000),
        };
        assert_eq!(lease.margin_ms(), 250);
        assert!(lease.still_good(0, 1000));
        assert!(lease.still_good(749, 1000));
        assert!(!lease.still_good(750, 1000), "inside the margin");
        assert!(!lease.still_good(5000, 1000), "expired");
        assert!(!lease.still_good(u64::MAX, 1000), "no overflow");
    }

    #[tokio::test]
    async fn a_call_gets_its_limit_counted_from_before_its_first_poll_and_is_cancelled_past_it() {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock::default());
        let limit = Duration::from_millis(50);
        // Ready at once.
        let cancel = CancellationToken::new();
        assert_eq!(
            within_or_cancel(&clock, limit, &cancel, async { 7 }).await,
            Ok(7)
        );
        assert!(!cancel.is_cancelled());
        // Ready after a wait within the limit.
        let slow = async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            8
        };
        assert_eq!(within_or_cancel(&clock, limit, &cancel, slow).await, Ok(8));
        assert!(!cancel.is_cancelled());
        // Never ready: times out and cancels the token it was handed.
        let never = std::future::pending::<u8>();
        assert_eq!(
            within_or_cancel(&clock, limit, &cancel, never).await,
            Err(())
        );
        assert!(cancel.is_cancelled());
        // A first poll that blocks past the limit, then waits: the limit has already passed,
        // so it times out at once (~250 ms in all), not a whole limit later (~450 ms).
        let cancel = CancellationToken::new();
        let blocking = async {
            std::thread::sleep(Duration::from_millis(250));
            std::future::pending::<u8>().await
        };
        let started = std::time::Instant::now();
        let limit = Duration::from_millis(200);
        assert_eq!(
            within_or_cancel(&clock, limit, &cancel, blocking).await,
            Err(())
        );
        assert!(
            started.elapsed() < Duration::from_millis(400),
            "{:?}: the limit counted from after the first poll",
            started.elapsed()
        );
        assert!(cancel.is_cancelled());
    }

    #[test]
    fn reconcile_answers_are_read_strictly() {
        use serde_json::json;
        assert_eq!(
            reconciliation("t", &json!({"performed": true, "result": {"id": 7}})),
            Reconciliation::Performed {
                result: Some(json!({"id": 7}))
            }
        );
        assert_eq!(
            reconciliation("t", &json!({"performed": true})),
            Reconciliation::Performed { result: None }
        );
        assert_eq!(
            reconciliation("t", &json!({"performed": false})),
            Reconciliation::NotPerformed
        );
        for unknown in [
            json!({"performed": null}),
            json!({}),
            json!({"performed": "yes"}),
            json!("performed"),
            json!([true]),
        ] {
            assert!(
                matches!(
                    reconciliation("t", &unknown),
                    Reconciliation::Unknown { .. }
                ),
                "{unknown}"
            );
        }
    }
}

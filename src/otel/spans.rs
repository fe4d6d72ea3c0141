//! Trace events in, spans out: the tracker keeps each run's open spans (its take-up, the
//! activation of its active agent, the model call of each agent, each tool call) and closes
//! them as the events that end them arrive. Times are the events' own (their hybrid clock's
//! milliseconds); ids are derived from the run and the step, so exporting the same run twice
//! gives the same ids.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{
    Event, Link, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};
use tokio::sync::{broadcast, oneshot};

use super::Exporter;
use super::chat;
use super::ids::{delegator, link, mcp_span, root_span, span_id, trace_id};
use super::setup::RunSetup;
use crate::exec::{Trace, TraceEvent};
use crate::machine::{Hlc, Outcome, RunId};
use crate::store::Store;

fn time(at: Hlc) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(at.ms())
}

/// A span being built.
struct Open {
    id: SpanId,
    parent: SpanId,
    kind: SpanKind,
    name: String,
    start: SystemTime,
    attributes: Vec<KeyValue>,
    events: Vec<Event>,
    links: Vec<Link>,
}

impl Open {
    fn new(id: SpanId, parent: SpanId, kind: SpanKind, name: String, start: SystemTime) -> Open {
        Open {
            id,
            parent,
            kind,
            name,
            start,
            attributes: Vec::new(),
            events: Vec::new(),
            links: Vec::new(),
        }
    }
}

/// A model call in flight.
struct Chat {
    open: Open,
    /// The model asked.
    model: String,
    /// The provider's kind (`gen_ai.provider.name`).
    kind: String,
    seq: u64,
    /// The attributes of the GenAI client metrics recorded when it ends.
    metric: Vec<KeyValue>,
}

/// An agent's activation: from the first thing it does in a take-up (or the handoff that
/// activated it) to the handoff away from it or the take-up's end.
struct Activation {
    agent: String,
    open: Open,
    /// Whether the provider's kind and model are on the span yet (set by its first request).
    described: bool,
}

/// What the tracker knows of one run.
struct RunSpans {
    trace: TraceId,
    take_up: Option<Open>,
    /// The active agent's activation, while one is open.
    agent: Option<Activation>,
    /// Activations opened so far in this process (for their span ids).
    activations: u64,
    /// The model call in flight, per agent (an agent makes one at a time).
    chats: HashMap<String, Chat>,
    /// Tool calls in flight, by call id.
    tools: HashMap<String, (Open, u64)>,
    /// The MCP client spans (`tools/call {tool}`) of MCP tool calls in flight, by call id.
    mcp: HashMap<String, Open>,
    /// Its providers and tools, from the run's stored setup.
    setup: RunSetup,
}

pub(super) struct Tracker {
    exporter: Exporter,
    store: Arc<dyn Store>,
    content: bool,
    runs: HashMap<RunId, RunSpans>,
    scope: InstrumentationScope,
}

impl Tracker {
    pub(super) fn new(exporter: Exporter, store: Arc<dyn Store>, content: bool) -> Tracker {
        Tracker {
            exporter,
            store,
            content,
            runs: HashMap::new(),
            scope: InstrumentationScope::builder("runtape")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
        }
    }

    /// Handles events until `stop`, then those already sent, then closes what is open.
    pub(super) async fn run(
        mut self,
        mut events: broadcast::Receiver<Arc<TraceEvent>>,
        mut stop: oneshot::Receiver<()>,
    ) {
        loop {
            tokio::select! {
                biased;
                e = events.recv() => match e {
                    Ok(e) => self.see(&e).await,
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => break,
                },
                _ = &mut stop => {
                    while let Ok(e) = events.try_recv() {
                        self.see(&e).await;
                    }
                    break;
                }
            }
        }
        let now = UNIX_EPOCH + Duration::from_millis(crate::clock::wall_ms());
        let runs: Vec<RunId> = self.runs.keys().cloned().collect();
        for run in runs {
            self.close_all(&run, now, Some("the export stopped before the run rested"));
        }
    }

    /// A blocking read of the store, off the async workers.
    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&dyn Store) -> Option<T> + Send + 'static,
    ) -> Option<T> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || f(store.as_ref()))
            .await
            .ok()
            .flatten()
    }

    async fn see(&mut self, e: &TraceEvent) {
        if !self.runs.contains_key(&e.run) {
            let run = e.run.clone();
            let setup = self
                .read(move |store| Some(RunSetup::read(store, &run)))
                .await
                .unwrap_or_default();
            self.runs.insert(
                e.run.clone(),
                RunSpans {
                    trace: trace_id(&e.run),
                    take_up: None,
                    agent: None,
                    activations: 0,
                    chats: HashMap::new(),
                    tools: HashMap::new(),
                    mcp: HashMap::new(),
                    setup,
                },
            );
        }
        let at = time(e.at);
        let run = e.run.clone();
        match &e.kind {
            Trace::RunStarted { goal } => {
                // A delegated child hangs under the activation that delegated it.
                let parent = delegator(&run).map_or(SpanId::INVALID, |p| {
                    self.runs
                        .get(&p)
                        .and_then(|s| s.agent.as_ref().map(|a| a.open.id))
                        .unwrap_or_else(|| root_span(&p))
                });
                let mut open = self.take_up_span(&run, root_span(&run), parent, at);
                if self.content {
                    open.attributes
                        .push(KeyValue::new("runtape.goal", goal.clone()));
                }
                self.set_take_up(&run, open, at);
            }
            Trace::RunForked { parent, seq } => {
                let mut open = self.take_up_span(&run, root_span(&run), SpanId::INVALID, at);
                open.attributes.extend([
                    KeyValue::new("runtape.fork.parent", parent.to_string()),
                    KeyValue::new("runtape.fork.seq", *seq as i64),
                ]);
                open.links.push(link(parent, "fork"));
                self.set_take_up(&run, open, at);
            }
            Trace::RunResumed { state } => {
                let id = span_id(&[run.as_str(), "resume", &e.at.0.to_string()]);
                let mut open = self.take_up_span(&run, id, root_span(&run), at);
                open.attributes
                    .push(KeyValue::new("runtape.resumed_in", state.as_str()));
                open.links.push(link(&run, "resume"));
                self.set_take_up(&run, open, at);
            }
            Trace::Transition { edge, .. } => self.exporter.counters().transition(edge.as_str()),
            Trace::ModelRequest {
                agent,
                provider,
                model,
                attempt,
                params,
                ..
            } => {
                let seq = e.seq.unwrap_or(0);
                let parent = self.activation(&run, agent.as_str(), at);
                let spans = self.runs.get_mut(&run);
                let Some(spans) = spans else { return };
                let info = spans.setup.provider(provider);
                let kind = info.kind.clone();
                if let Some(a) = spans.agent.as_mut().filter(|a| !a.described) {
                    a.open.attributes.extend([
                        KeyValue::new("gen_ai.provider.name", kind.clone()),
                        KeyValue::new("gen_ai.request.model", model.clone()),
                    ]);
                    a.described = true;
                }
                let id = span_id(&[
                    run.as_str(),
                    "chat",
                    &seq.to_string(),
                    &attempt.to_string(),
                    agent.as_str(),
                ]);
                let mut open = Open::new(id, parent, SpanKind::Client, format!("chat {model}"), at);
                open.attributes.extend([
                    KeyValue::new("gen_ai.operation.name", "chat"),
                    KeyValue::new("gen_ai.provider.name", kind.clone()),
                    KeyValue::new("gen_ai.system", kind.clone()),
                    KeyValue::new("gen_ai.request.model", model.clone()),
                    KeyValue::new("gen_ai.agent.name", agent.to_string()),
                    KeyValue::new("gen_ai.conversation.id", run.to_string()),
                    KeyValue::new("runtape.provider", provider.clone()),
                    KeyValue::new("runtape.attempt", i64::from(*attempt)),
                    KeyValue::new("runtape.seq", seq as i64),
                ]);
                open.attributes
                    .extend(chat::request_attributes(&info, params));
                let chat = Chat {
                    open,
                    model: model.clone(),
                    kind,
                    seq,
                    metric: chat::metric_attributes(&info, model),
                };
                spans.chats.insert(agent.to_string(), chat);
            }
            Trace::ModelReply {
                agent,
                tool_calls,
                usage,
                cost_nanos,
                finish: reported,
                refusal,
                response_model,
                response_id,
                ..
            } => {
                let Some(Chat {
                    mut open,
                    model,
                    kind,
                    seq,
                    mut metric,
                }) = self
                    .runs
                    .get_mut(&run)
                    .and_then(|s| s.chats.remove(agent.as_str()))
                else {
                    return;
                };
                use crate::machine::Finish;
                let finish = match (reported, refusal) {
                    (_, Some(_)) => "refusal",
                    (Some(Finish::Length), _) => "length",
                    (Some(Finish::ContentFilter), _) => "content_filter",
                    (Some(Finish::StopSequence), _) => "stop_sequence",
                    _ if *tool_calls > 0 => "tool_calls",
                    _ => "stop",
                };
                open.attributes.push(KeyValue::new(
                    "gen_ai.response.finish_reasons",
                    opentelemetry::Value::Array(opentelemetry::Array::String(vec![finish.into()])),
                ));
                open.attributes.extend(chat::reply_attributes(
                    &kind,
                    response_model.as_deref(),
                    response_id.as_deref(),
                    usage.as_ref(),
                ));
                if let Some(m) = response_model {
                    metric.push(KeyValue::new("gen_ai.response.model", scrub(m)));
                }
                self.exporter
                    .counters()
                    .operation(&metric, seconds(open.start, at));
                if let Some(u) = usage {
                    let input = chat::input_tokens(&kind, u);
                    self.exporter
                        .counters()
                        .tokens(&model, input, u.output_tokens);
                    self.exporter
                        .counters()
                        .token_usage(&metric, input, u.output_tokens);
                }
                if let Some(c) = cost_nanos {
                    let usd = *c as f64 / 1e9;
                    open.attributes.push(KeyValue::new("runtape.cost_usd", usd));
                    self.exporter.counters().cost(&model, usd);
                }
                if self.content {
                    let r = run.clone();
                    let replied = e.seq;
                    let (input, output) = self
                        .read(move |store| {
                            // The request is the call's transition's; the reply is the event
                            // of the transition that took it in.
                            let asked = crate::history::show(store, &r, Some(seq)).ok()?;
                            let input = asked
                                .request
                                .map(|q| super::messages::input_messages(&q.messages));
                            let answered = replied
                                .and_then(|at| crate::ledger::event_at(store, &r, at).ok()?);
                            let output = match answered {
                                Some(crate::machine::EventBody::ModelReplied { reply, .. }) => {
                                    Some(super::messages::output_messages(&reply, finish))
                                }
                                _ => None,
                            };
                            Some((input, output))
                        })
                        .await
                        .unwrap_or_default();
                    for (key, value) in [
                        ("gen_ai.input.messages", input),
                        ("gen_ai.output.messages", output),
                    ] {
                        if let Some(v) = value {
                            open.attributes
                                .push(KeyValue::new(key, scrub(&v.to_string())));
                        }
                    }
                }
                self.end(&run, open, at, Status::Unset);
            }
            Trace::ModelError {
                agent,
                error,
                retryable,
            } => {
                let Some(Chat {
                    mut open,
                    mut metric,
                    ..
                }) = self
                    .runs
                    .get_mut(&run)
                    .and_then(|s| s.chats.remove(agent.as_str()))
                else {
                    return;
                };
                open.attributes.extend([
                    KeyValue::new("error.type", "provider_error"),
                    KeyValue::new("runtape.retryable", *retryable),
                ]);
                metric.push(KeyValue::new("error.type", "provider_error"));
                self.exporter
                    .counters()
                    .operation(&metric, seconds(open.start, at));
                self.end(&run, open, at, Status::error(scrub(error)));
            }
            Trace::ToolCall {
                agent,
                call_id,
                tool,
                args,
            } => {
                let seq = e.seq.unwrap_or(0);
                let parent = self.activation(&run, agent.as_str(), at);
                let id = span_id(&[run.as_str(), "tool", call_id, &seq.to_string()]);
                let info = self
                    .runs
                    .get(&run)
                    .map(|s| s.setup.tool(tool))
                    .unwrap_or_else(|| RunSetup::default().tool(tool));
                let mut open = Open::new(
                    id,
                    parent,
                    SpanKind::Internal,
                    format!("execute_tool {tool}"),
                    at,
                );
                open.attributes.extend([
                    KeyValue::new("gen_ai.operation.name", "execute_tool"),
                    KeyValue::new("gen_ai.tool.name", tool.clone()),
                    KeyValue::new("gen_ai.tool.call.id", call_id.clone()),
                    KeyValue::new("gen_ai.tool.type", info.kind),
                    KeyValue::new("gen_ai.agent.name", agent.to_string()),
                    KeyValue::new("runtape.seq", seq as i64),
                ]);
                if let Some(d) = info.description {
                    open.attributes
                        .push(KeyValue::new("gen_ai.tool.description", scrub(&d)));
                }
                if self.content {
                    open.attributes.push(KeyValue::new(
                        "gen_ai.tool.call.arguments",
                        scrub(&args.to_string()),
                    ));
                }
                // An MCP server's tool: the `tools/call` request is a client span of its own,
                // the parent of whatever the server reports (MCP semantic conventions).
                let mcp = info.mcp.map(|(server, remote)| {
                    let mut client = Open::new(
                        mcp_span(&run, call_id),
                        id,
                        SpanKind::Client,
                        format!("tools/call {remote}"),
                        at,
                    );
                    client.attributes.extend([
                        KeyValue::new("mcp.method.name", "tools/call"),
                        KeyValue::new("gen_ai.operation.name", "execute_tool"),
                        KeyValue::new("gen_ai.tool.name", remote),
                        KeyValue::new("gen_ai.tool.call.id", call_id.clone()),
                        KeyValue::new("runtape.mcp.server", server),
                    ]);
                    client
                });
                if let Some(s) = self.runs.get_mut(&run) {
                    s.tools.insert(call_id.clone(), (open, seq));
                    if let Some(client) = mcp {
                        s.mcp.insert(call_id.clone(), client);
                    }
                }
            }
            Trace::ToolResult { call_id, ok, .. } => {
                if let Some(mut client) =
                    self.runs.get_mut(&run).and_then(|s| s.mcp.remove(call_id))
                {
                    let status = if *ok {
                        Status::Unset
                    } else {
                        client
                            .attributes
                            .push(KeyValue::new("error.type", "tool_error"));
                        Status::error("the tool returned an error")
                    };
                    self.end(&run, client, at, status);
                }
                let Some((mut open, _)) = self
                    .runs
                    .get_mut(&run)
                    .and_then(|s| s.tools.remove(call_id))
                else {
                    return;
                };
                if self.content
                    && let Some(seq) = e.seq
                {
                    let r = run.clone();
                    let result = self
                        .read(move |store| {
                            match crate::ledger::event_at(store, &r, seq).ok()?? {
                                crate::machine::EventBody::ToolReturned { outcome, .. } => {
                                    serde_json::to_string(&outcome).ok()
                                }
                                _ => None,
                            }
                        })
                        .await;
                    if let Some(result) = result {
                        open.attributes
                            .push(KeyValue::new("gen_ai.tool.call.result", scrub(&result)));
                    }
                }
                let status = if *ok {
                    Status::Unset
                } else {
                    open.attributes
                        .push(KeyValue::new("error.type", "tool_error"));
                    Status::error("the tool returned an error")
                };
                self.end(&run, open, at, status);
            }
            Trace::InputRequested {
                call_id,
                tool,
                kind,
                ..
            } => self.event(
                &run,
                "runtape.input_requested",
                at,
                vec![
                    KeyValue::new("gen_ai.tool.call.id", call_id.clone()),
                    KeyValue::new("gen_ai.tool.name", tool.clone()),
                    KeyValue::new("runtape.input.kind", kind.clone()),
                ],
            ),
            Trace::TimerStarted {
                call_id, due_ms, ..
            } => self.event(
                &run,
                "runtape.timer_started",
                at,
                vec![
                    KeyValue::new("gen_ai.tool.call.id", call_id.clone()),
                    KeyValue::new("runtape.timer.due", crate::text::rfc3339(*due_ms)),
                ],
            ),
            Trace::TimerFired {
                agent,
                call_id,
                timer,
                started_seq,
                due_ms,
                early,
            } => {
                let (r, started_seq) = (run.clone(), *started_seq);
                // The wait began with the transition that started the timer, maybe in another
                // process (a run that rested, or was killed asleep): its time is in the store.
                let started = self
                    .read(move |store| {
                        let t = store.transitions(&r, started_seq, started_seq).ok()?;
                        t.first().map(|t| time(t.at))
                    })
                    .await;
                let take_up_start = self
                    .runs
                    .get(&run)
                    .and_then(|s| s.take_up.as_ref().map(|o| o.start));
                let due = time(Hlc::from_ms(*due_ms));
                let fired_by = if *early {
                    "wake"
                } else if take_up_start.is_some_and(|t| t >= due) {
                    "take_up"
                } else {
                    "clock"
                };
                let id = span_id(&[run.as_str(), "timer", &started_seq.to_string(), call_id]);
                let start = started.or(take_up_start).unwrap_or(at);
                let parent = self.parent_of(&run);
                let name = format!("wait {timer}");
                let mut open = Open::new(id, parent, SpanKind::Internal, name, start);
                open.attributes.extend([
                    KeyValue::new("runtape.run.id", run.to_string()),
                    KeyValue::new("gen_ai.agent.name", agent.to_string()),
                    KeyValue::new("gen_ai.tool.call.id", call_id.clone()),
                    KeyValue::new("runtape.timer.kind", timer.clone()),
                    KeyValue::new("runtape.timer.due", crate::text::rfc3339(*due_ms)),
                    KeyValue::new("runtape.timer.due_ms", *due_ms as i64),
                    KeyValue::new("runtape.timer.fired_by", fired_by),
                    KeyValue::new("runtape.timer.early", *early),
                    KeyValue::new("runtape.timer.started_seq", started_seq as i64),
                    KeyValue::new("runtape.seq", e.seq.unwrap_or(0) as i64),
                ]);
                self.end(&run, open, at, Status::Unset);
            }
            Trace::Handoff { from, to } => {
                self.event(
                    &run,
                    "runtape.handoff",
                    at,
                    vec![
                        KeyValue::new("runtape.from", from.to_string()),
                        KeyValue::new("runtape.to", to.to_string()),
                    ],
                );
                // The sender's activation ends here and the receiver's begins.
                self.activation(&run, to.as_str(), at);
            }
            Trace::BudgetExhausted { key, .. } => self.event(
                &run,
                "runtape.budget_exhausted",
                at,
                vec![KeyValue::new("runtape.budget", key.to_string())],
            ),
            Trace::ModelTruncated {
                agent,
                policy,
                next_limit,
                ..
            } => self.event(
                &run,
                "runtape.model_truncated",
                at,
                vec![
                    KeyValue::new("gen_ai.agent.name", agent.to_string()),
                    KeyValue::new("runtape.on_truncated", policy.as_str()),
                    KeyValue::new("runtape.next_limit", next_limit.map_or(0, |n| n as i64)),
                ],
            ),
            Trace::ContextCompacted {
                agent,
                policy,
                messages,
                bytes_before,
                bytes_after,
            } => self.event(
                &run,
                "runtape.context_compacted",
                at,
                vec![
                    KeyValue::new("gen_ai.agent.name", agent.to_string()),
                    KeyValue::new("runtape.on_overflow", policy.as_str()),
                    KeyValue::new("runtape.messages", messages.len() as i64),
                    KeyValue::new("runtape.bytes_before", *bytes_before as i64),
                    KeyValue::new("runtape.bytes_after", *bytes_after as i64),
                ],
            ),
            Trace::ContextSummarized(s) => self.event(
                &run,
                "runtape.context_summarized",
                at,
                vec![
                    KeyValue::new("gen_ai.agent.name", s.agent.to_string()),
                    KeyValue::new("runtape.summary.by", s.by.to_string()),
                    KeyValue::new("runtape.summary.from", i64::from(s.from)),
                    KeyValue::new("runtape.summary.upto", i64::from(s.upto)),
                    KeyValue::new("runtape.bytes_before", s.bytes_before as i64),
                    KeyValue::new("runtape.bytes_after", s.bytes_after as i64),
                ],
            ),
            Trace::AttachmentsNotSent {
                agent,
                model,
                files,
            } => self.event(
                &run,
                "runtape.attachments_not_sent",
                at,
                vec![
                    KeyValue::new("gen_ai.agent.name", agent.to_string()),
                    KeyValue::new("gen_ai.request.model", model.clone()),
                    KeyValue::new("runtape.files", files.join(", ")),
                ],
            ),
            Trace::ModelRetry { agent, detail } => self.event(
                &run,
                "runtape.model_retry",
                at,
                vec![
                    KeyValue::new("gen_ai.agent.name", agent.to_string()),
                    KeyValue::new("runtape.detail", detail.clone()),
                ],
            ),
            Trace::RunPaused { status } => {
                self.finish_take_up(&run, at, status.as_str(), Status::Unset, false);
            }
            Trace::RunFinished { outcome } => {
                let (status, otel) = match outcome {
                    Outcome::Completed { .. } => ("completed", Status::Ok),
                    Outcome::Failed { error } => (
                        "failed",
                        Status::error(scrub(&format!("{}: {}", error.class, error.message))),
                    ),
                    Outcome::Cancelled { .. } => ("cancelled", Status::Unset),
                };
                self.finish_take_up(&run, at, status, otel, true);
            }
            _ => {}
        }
    }

    /// The span a run's take-up gets.
    fn take_up_span(&self, run: &RunId, id: SpanId, parent: SpanId, at: SystemTime) -> Open {
        let mut open = Open::new(
            id,
            parent,
            SpanKind::Internal,
            "invoke_workflow runtape".into(),
            at,
        );
        open.attributes.extend([
            KeyValue::new("gen_ai.operation.name", "invoke_workflow"),
            KeyValue::new("gen_ai.conversation.id", run.to_string()),
            KeyValue::new("runtape.run.id", run.to_string()),
        ]);
        open
    }

    fn set_take_up(&mut self, run: &RunId, open: Open, at: SystemTime) {
        // A take-up still open (its end was never seen) ends where the next begins.
        self.close_all(run, at, Some("superseded by a later take-up"));
        if let Some(s) = self.runs.get_mut(run) {
            s.take_up = Some(open);
        }
    }

    fn parent_of(&self, run: &RunId) -> SpanId {
        self.runs
            .get(run)
            .and_then(|s| s.take_up.as_ref().map(|o| o.id))
            .unwrap_or_else(|| root_span(run))
    }

    /// The span of `agent`'s activation in `run`, opened at `at` under the take-up when
    /// another agent's (ended there) or none is open: what its model calls, tool calls and
    /// delegated child runs hang under.
    fn activation(&mut self, run: &RunId, agent: &str, at: SystemTime) -> SpanId {
        let parent = self.parent_of(run);
        let Some(s) = self.runs.get_mut(run) else {
            return parent;
        };
        if let Some(a) = s.agent.as_ref().filter(|a| a.agent == agent) {
            return a.open.id;
        }
        let ended = s.agent.take();
        s.activations += 1;
        let id = span_id(&[
            run.as_str(),
            "agent",
            &parent.to_string(),
            &s.activations.to_string(),
        ]);
        let mut open = Open::new(
            id,
            parent,
            SpanKind::Internal,
            format!("invoke_agent {agent}"),
            at,
        );
        open.attributes.extend([
            KeyValue::new("gen_ai.operation.name", "invoke_agent"),
            KeyValue::new("gen_ai.agent.name", agent.to_owned()),
            KeyValue::new("gen_ai.agent.id", agent.to_owned()),
            KeyValue::new("gen_ai.conversation.id", run.to_string()),
            KeyValue::new("runtape.run.id", run.to_string()),
        ]);
        s.agent = Some(Activation {
            agent: agent.to_owned(),
            open,
            described: false,
        });
        if let Some(a) = ended {
            self.end(run, a.open, at, Status::Unset);
        }
        id
    }

    fn event(&mut self, run: &RunId, name: &'static str, at: SystemTime, attrs: Vec<KeyValue>) {
        if let Some(open) = self.runs.get_mut(run).and_then(|s| s.take_up.as_mut()) {
            open.events.push(Event::new(name, at, attrs, 0));
        }
    }

    /// Ends the run's take-up span with `status`; a `terminal` end forgets the run.
    fn finish_take_up(
        &mut self,
        run: &RunId,
        at: SystemTime,
        status: &str,
        otel: Status,
        terminal: bool,
    ) {
        let Some(s) = self.runs.get_mut(run) else {
            return;
        };
        let Some(mut open) = s.take_up.take() else {
            return;
        };
        let activation = s.agent.take();
        open.attributes
            .push(KeyValue::new("runtape.status", status.to_owned()));
        self.close_all(run, at, Some("the run stopped before it ended"));
        if let Some(a) = activation {
            // The active agent's activation ends with the take-up, failed when the run failed.
            let agent_status = match &otel {
                Status::Error { .. } => otel.clone(),
                _ => Status::Unset,
            };
            self.end(run, a.open, at, agent_status);
        }
        self.end(run, open, at, otel);
        if terminal {
            self.runs.remove(run);
        }
    }

    /// Ends every open span of `run` at `at`, as unfinished for `why`.
    fn close_all(&mut self, run: &RunId, at: SystemTime, why: Option<&str>) {
        let Some(s) = self.runs.get_mut(run) else {
            return;
        };
        let mut open: Vec<Open> = s.chats.drain().map(|(_, c)| c.open).collect();
        open.extend(s.mcp.drain().map(|(_, o)| o));
        open.extend(s.tools.drain().map(|(_, (o, _))| o));
        open.extend(s.agent.take().map(|a| a.open));
        open.extend(s.take_up.take());
        for o in open {
            let status = why.map_or(Status::Unset, |w| Status::error(w.to_owned()));
            self.end(run, o, at, status);
        }
    }

    fn end(&self, run: &RunId, open: Open, at: SystemTime, status: Status) {
        let Some(trace) = self.runs.get(run).map(|s| s.trace) else {
            return;
        };
        let mut events = SpanEvents::default();
        events.events = open.events;
        let mut links = SpanLinks::default();
        links.links = open.links;
        let span = SpanData {
            span_context: SpanContext::new(
                trace,
                open.id,
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id: open.parent,
            parent_span_is_remote: false,
            span_kind: open.kind,
            name: Cow::Owned(open.name),
            start_time: open.start,
            end_time: at.max(open.start),
            attributes: open.attributes,
            dropped_attributes_count: 0,
            events,
            links,
            status,
            instrumentation_scope: self.scope.clone(),
        };
        self.exporter.send(span);
    }
}

/// The seconds from `start` to `end` (zero when the clock went back).
fn seconds(start: SystemTime, end: SystemTime) -> f64 {
    end.duration_since(start).unwrap_or_default().as_secs_f64()
}

/// `text` with every known secret value redacted.
pub(super) fn scrub(text: &str) -> String {
    crate::secrets::scrub_text(text).into_owned()
}

//! Trace events in, spans out: the tracker keeps each run's open spans (its take-up, the model
//! call of each agent, each tool call) and closes them as the events that end them arrive.
//! Times are the events' own (their hybrid clock's milliseconds); ids are derived from the run
//! and the step, so exporting the same run twice gives the same ids.

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
use crate::exec::{Trace, TraceEvent};
use crate::machine::{Hlc, Outcome, RunId};
use crate::store::Store;

/// The trace every span of `run` belongs to.
pub(crate) fn trace_id(run: &RunId) -> TraceId {
    let h = blake3::hash(format!("runtape/otel/trace/{run}").as_bytes());
    let mut b = [0u8; 16];
    b.copy_from_slice(&h.as_bytes()[..16]);
    TraceId::from_bytes(b)
}

/// A span id derived from `parts`.
fn span_id(parts: &[&str]) -> SpanId {
    let h = blake3::hash(format!("runtape/otel/span/{}", parts.join("/")).as_bytes());
    let mut b = [0u8; 8];
    b.copy_from_slice(&h.as_bytes()[..8]);
    SpanId::from_bytes(b)
}

/// The span of a run's first take-up: the root of its trace.
pub(crate) fn root_span(run: &RunId) -> SpanId {
    span_id(&[run.as_str(), "root"])
}

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

/// What the tracker knows of one run.
struct RunSpans {
    trace: TraceId,
    take_up: Option<Open>,
    /// The model call in flight, per agent (an agent makes one at a time).
    chats: HashMap<String, (Open, String, u64)>,
    /// Tool calls in flight, by call id.
    tools: HashMap<String, (Open, u64)>,
    /// Provider name → kind (`openai`, `anthropic`, …), from the run's stored setup.
    kinds: HashMap<String, String>,
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
            let kinds = self
                .read(move |store| provider_kinds(store, &run))
                .await
                .unwrap_or_default();
            self.runs.insert(
                e.run.clone(),
                RunSpans {
                    trace: trace_id(&e.run),
                    take_up: None,
                    chats: HashMap::new(),
                    tools: HashMap::new(),
                    kinds,
                },
            );
        }
        let at = time(e.at);
        let run = e.run.clone();
        match &e.kind {
            Trace::RunStarted { goal } => {
                let mut open = self.take_up_span(&run, root_span(&run), SpanId::INVALID, at);
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
                ..
            } => {
                let seq = e.seq.unwrap_or(0);
                let parent = self.parent_of(&run);
                let spans = self.runs.get_mut(&run);
                let Some(spans) = spans else { return };
                let kind = spans
                    .kinds
                    .get(provider)
                    .cloned()
                    .unwrap_or_else(|| provider.clone());
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
                    KeyValue::new("gen_ai.system", kind),
                    KeyValue::new("gen_ai.request.model", model.clone()),
                    KeyValue::new("gen_ai.agent.name", agent.to_string()),
                    KeyValue::new("gen_ai.conversation.id", run.to_string()),
                    KeyValue::new("runtape.provider", provider.clone()),
                    KeyValue::new("runtape.attempt", i64::from(*attempt)),
                    KeyValue::new("runtape.seq", seq as i64),
                ]);
                spans
                    .chats
                    .insert(agent.to_string(), (open, model.clone(), seq));
            }
            Trace::ModelReply {
                agent,
                text,
                tool_calls,
                usage,
                cost_nanos,
                finish: reported,
                refusal,
                ..
            } => {
                let Some((mut open, model, seq)) = self
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
                if let Some(u) = usage {
                    open.attributes.extend([
                        KeyValue::new("gen_ai.usage.input_tokens", u.input_tokens as i64),
                        KeyValue::new("gen_ai.usage.output_tokens", u.output_tokens as i64),
                    ]);
                    self.exporter
                        .counters()
                        .tokens(&model, u.input_tokens, u.output_tokens);
                }
                if let Some(c) = cost_nanos {
                    let usd = *c as f64 / 1e9;
                    open.attributes.push(KeyValue::new("runtape.cost_usd", usd));
                    self.exporter.counters().cost(&model, usd);
                }
                if self.content {
                    let r = run.clone();
                    let input = self
                        .read(move |store| {
                            let view = crate::history::show(store, &r, Some(seq)).ok()?;
                            serde_json::to_string(&view.request?.messages).ok()
                        })
                        .await;
                    if let Some(input) = input {
                        open.attributes
                            .push(KeyValue::new("gen_ai.input.messages", scrub(&input)));
                    }
                    let output = serde_json::json!([{"role": "assistant", "content": text, "tool_calls": tool_calls}]);
                    open.attributes.push(KeyValue::new(
                        "gen_ai.output.messages",
                        scrub(&output.to_string()),
                    ));
                }
                self.end(&run, open, at, Status::Unset);
            }
            Trace::ModelError {
                agent,
                error,
                retryable,
            } => {
                let Some((mut open, _, _)) = self
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
                self.end(&run, open, at, Status::error(scrub(error)));
            }
            Trace::ToolCall {
                agent,
                call_id,
                tool,
                args,
            } => {
                let seq = e.seq.unwrap_or(0);
                let parent = self.parent_of(&run);
                let id = span_id(&[run.as_str(), "tool", call_id, &seq.to_string()]);
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
                    KeyValue::new("gen_ai.agent.name", agent.to_string()),
                    KeyValue::new("runtape.seq", seq as i64),
                ]);
                if self.content {
                    open.attributes.push(KeyValue::new(
                        "gen_ai.tool.call.arguments",
                        scrub(&args.to_string()),
                    ));
                }
                if let Some(s) = self.runs.get_mut(&run) {
                    s.tools.insert(call_id.clone(), (open, seq));
                }
            }
            Trace::ToolResult { call_id, ok, .. } => {
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
                            let view = crate::history::show(store, &r, Some(seq)).ok()?;
                            match view.event?.body {
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
            Trace::Handoff { from, to } => self.event(
                &run,
                "runtape.handoff",
                at,
                vec![
                    KeyValue::new("runtape.from", from.to_string()),
                    KeyValue::new("runtape.to", to.to_string()),
                ],
            ),
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
        open.attributes
            .push(KeyValue::new("runtape.status", status.to_owned()));
        self.close_all(run, at, Some("the run stopped before it ended"));
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
        let mut open: Vec<Open> = s.chats.drain().map(|(_, (o, _, _))| o).collect();
        open.extend(s.tools.drain().map(|(_, (o, _))| o));
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

/// A link to `run`'s root span, with `runtape.link = why`.
fn link(run: &RunId, why: &'static str) -> Link {
    Link::new(
        SpanContext::new(
            trace_id(run),
            root_span(run),
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        ),
        vec![KeyValue::new("runtape.link", why)],
        0,
    )
}

fn scrub(text: &str) -> String {
    crate::secrets::scrub_text(text).into_owned()
}

/// The kind of each provider a run's stored setup names (`openai`, `anthropic`, `ollama`,
/// `azure.ai.openai`, `runtape.scripted`, `runtape.echo`).
fn provider_kinds(store: &dyn Store, run: &RunId) -> Option<HashMap<String, String>> {
    let rec = store.run(run).ok()??;
    let setup = crate::config::Setup::from_json(rec.setup.as_deref()?).ok()?;
    Some(
        setup
            .providers
            .iter()
            .map(|p| {
                let kind = match p {
                    crate::config::ProviderSetup::Http(h) => {
                        match serde_json::to_value(h.kind)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_owned))
                        {
                            Some(k) if k == "azure" => "azure.ai.openai".to_owned(),
                            Some(k) if k == "openai-responses" => "openai".to_owned(),
                            Some(k) => k,
                            None => "unknown".to_owned(),
                        }
                    }
                    crate::config::ProviderSetup::Echo { .. } => "runtape.echo".to_owned(),
                    crate::config::ProviderSetup::Scripted(_) => "runtape.scripted".to_owned(),
                };
                (p.name().to_owned(), kind)
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_and_distinct() {
        let a = RunId::new("01aaaa");
        let b = RunId::new("01bbbb");
        assert_eq!(trace_id(&a), trace_id(&a));
        assert_ne!(trace_id(&a), trace_id(&b));
        assert_ne!(root_span(&a), root_span(&b));
        assert_ne!(trace_id(&a), TraceId::INVALID);
        assert_ne!(root_span(&a), SpanId::INVALID);
    }
}

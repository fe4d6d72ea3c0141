//! OpenTelemetry export: one more observer of trace events. The runs an [`Engine`] drives
//! become spans, histograms and counters sent over OTLP/HTTP to an endpoint given
//! ([`Exporter::from_options`]), else `$OTEL_EXPORTER_OTLP_ENDPOINT` (`/v1/traces` and
//! `/v1/metrics` are appended, as the OpenTelemetry spec says for that variable), as
//! protobuf unless `$OTEL_EXPORTER_OTLP_PROTOCOL` is `http/json` (`grpc` and other values are
//! refused with one line). The resource's `service.name` is `$OTEL_SERVICE_NAME`, else
//! `runtape`. `runtape serve --otlp-endpoint URL` exports the runs it drives; the run-driving
//! commands (`run`, `resume`, `fork`, `replay`) export theirs the same way when that variable
//! is set, without content. A program embedding runtape does what they do:
//!
//! ```no_run
//! # async fn demo(engine: runtape::Engine) -> Result<(), String> {
//! // Outside the async runtime in a real program: the exporter starts its own threads.
//! if let Some(exporter) = runtape::otel::Exporter::from_options(None, false, |w| eprintln!("{w}"))? {
//!     exporter.observe_engine(&engine);
//!     // … drive runs …
//!     exporter.finish().await; // then, off the runtime: exporter.shutdown()
//! }
//! # Ok(()) }
//! ```
//!
//! [`Engine`]: crate::Engine
//!
//! # Spans (GenAI semantic conventions)
//!
//! - **A run**: `invoke_workflow runtape`, one span per take-up (start, resume, fork), from
//!   its first event to the moment it pauses, rests or ends. `gen_ai.operation.name =
//!   invoke_workflow`, `gen_ai.conversation.id` = the run id, `runtape.run.id`,
//!   `runtape.status` at the end, status Error with the reason when the run failed.
//! - **An agent activation**: `invoke_agent {agent}`, a child of the run span, from the
//!   agent's first model or tool call in the take-up (or the handoff that activated it) to
//!   the handoff away from it or the take-up's end: `gen_ai.operation.name = invoke_agent`,
//!   `gen_ai.agent.name`, `gen_ai.agent.id`, and from its first model call
//!   `gen_ai.provider.name` and `gen_ai.request.model`. Its model and tool calls are its
//!   children, and so is the first span of each child run it delegates: a child run (id
//!   `PARENT.SEQ.INDEX`) is in its top run's trace. A child whose id was too long and became a
//!   hash has a trace of its own.
//! - **A model call**: `chat {model}`, a child of the activation, from the request to the
//!   reply: `gen_ai.operation.name = chat`, `gen_ai.provider.name` and `gen_ai.system` (the
//!   provider kind: `openai`, `anthropic`, `ollama`, …), `gen_ai.request.model`,
//!   `gen_ai.agent.name`; the spec's `gen_ai.request.temperature`, `top_p`, `seed`,
//!   `stop_sequences` and `max_tokens` (the agent's `max_output_tokens`, else the provider
//!   entry's `max_tokens`) when set; `gen_ai.output.type` (`json` when the agent has an
//!   output schema, else `text`); `server.address` and `server.port` from the provider's base
//!   URL; from the reply `gen_ai.response.model`, `gen_ai.response.id`,
//!   `gen_ai.usage.input_tokens` (cached tokens included: Anthropic's cache reads and writes
//!   are added to its count), `gen_ai.usage.output_tokens`,
//!   `gen_ai.usage.cache_read.input_tokens`, `gen_ai.usage.cache_creation.input_tokens` and
//!   `gen_ai.usage.reasoning.output_tokens` where reported, `gen_ai.response.finish_reasons`
//!   (`tool_calls` or `stop`, …), `runtape.cost_usd` when priced. A failed call has status
//!   Error and `error.type`.
//! - **A tool call**: `execute_tool {name}`, a child of the activation:
//!   `gen_ai.operation.name = execute_tool`, `gen_ai.tool.name`, `gen_ai.tool.call.id`,
//!   `gen_ai.tool.type` (`function` for command tools and runtape's own, `extension` for an
//!   MCP server's), `gen_ai.tool.description` (from the run's stored setup: a tool
//!   registered in code has none), `gen_ai.agent.name`; status Error when the tool returned
//!   an error.
//! - **An MCP call**: for an MCP server's tool, `tools/call {tool}` (kind Client), a child of
//!   the tool's span, as the MCP semantic conventions say: `mcp.method.name = tools/call`,
//!   `gen_ai.operation.name = execute_tool`, `gen_ai.tool.name` (the server's own name for
//!   it), `gen_ai.tool.call.id`, `runtape.mcp.server`. While a process exports, its MCP
//!   requests carry this span's W3C trace context in `params._meta.traceparent`, so an
//!   instrumented server's spans join the run's trace under it.
//!
//! - **A timer wait**: `wait sleep` (a `sleep_for`/`sleep_until` call) or `wait deadline`
//!   (the deadline of a call waiting for a person), a child of the take-up that fired it,
//!   from the transition that started the timer (read from the store: it may have been
//!   another process's) to the `TimerFired` transition: `runtape.timer.kind`,
//!   `runtape.timer.due` (RFC 3339), `runtape.timer.due_ms`, `runtape.timer.fired_by`
//!   (`clock`: the process driving the run waited for it; `take_up`: the run was taken up at
//!   or after its instant, by a worker, `serve` or `resume`; `wake`: `runtape wake` before
//!   it), `runtape.timer.early`, `runtape.timer.started_seq`, `gen_ai.tool.call.id`.
//!
//! Handoffs, requests for a person, exhausted budgets and retries are events on the run span.
//!
//! **Links.** A run's trace id is derived from its id, so every process that exports a run
//! puts it in the same trace. The first take-up's span is the trace's root; each later
//! take-up (a resume) is its child and links to it (`runtape.link = resume`); a fork's root
//! links to its parent's root (`runtape.link = fork`), in the parent's trace.
//!
//! **Content.** Prompts, completions, tool arguments and results are exported only with
//! `--otlp-content` (`gen_ai.input.messages`, `gen_ai.output.messages`,
//! `gen_ai.tool.call.arguments`, `gen_ai.tool.call.result`, the goal as `runtape.goal`).
//! Messages take the conventions' shape (`role` and typed `parts`, a `finish_reason` per
//! output message; see `messages.rs`). Secrets are scrubbed from them as from everything else.
//!
//! # Metrics
//!
//! The GenAI client histograms, per model call: `gen_ai.client.token.usage` (`{token}`, by
//! `gen_ai.token.type` = `input` / `output`) and `gen_ai.client.operation.duration` (seconds,
//! with `error.type` for a failed call), each with `gen_ai.operation.name`,
//! `gen_ai.provider.name`, `gen_ai.request.model`, `gen_ai.response.model` and the server,
//! on the conventions' bucket boundaries. Counters: `runtape.transitions` (by
//! `runtape.edge`), `runtape.tokens` (by `gen_ai.token.type` = `input` / `output`,
//! `gen_ai.request.model`) and `runtape.cost` (USD, by `gen_ai.request.model`). All are
//! exported every 10 s and when the program stops.
//!
//! Export never slows a run: spans queue for a background thread (the oldest are dropped past
//! 4,096 queued), and an endpoint that is down gets one warning line.

use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, MeterProvider as _};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{SpanData, SpanExporter as _};
use tokio::sync::{broadcast, oneshot};

use crate::exec::TraceEvent;
use crate::store::Store;

mod chat;
mod ids;
mod messages;
mod setup;
mod spans;

/// Spans waiting for the export thread at most; more are dropped (never waited for).
const QUEUE: usize = 4096;

/// Spans sent in one request at most.
const BATCH: usize = 512;

/// How long a finished span may wait before it is sent.
const BATCH_DELAY: Duration = Duration::from_millis(500);

/// How often counters are exported.
const METRICS_EVERY: Duration = Duration::from_secs(10);

/// The W3C `traceparent` of the MCP client span of tool call `call_id` in `run`, for the
/// request's `params._meta`; installed into the MCP client when an exporter starts
/// ([`crate::tool::mcp::propagate_trace_context`]).
fn mcp_traceparent(run: &crate::machine::RunId, call_id: &str) -> String {
    format!(
        "00-{}-{}-01",
        ids::trace_id(run),
        ids::mcp_span(run, call_id)
    )
}

/// The variable the standard OpenTelemetry SDKs read the endpoint from.
pub const ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";

/// The variable the standard OpenTelemetry SDKs read the wire format from.
pub const PROTOCOL_ENV: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";

/// The variable the standard OpenTelemetry SDKs read the service's name from.
pub const SERVICE_NAME_ENV: &str = "OTEL_SERVICE_NAME";

/// `gen_ai.client.token.usage` buckets, as the GenAI metric conventions give them.
const TOKEN_BUCKETS: [f64; 14] = [
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
    16777216.0, 67108864.0,
];

/// `gen_ai.client.operation.duration` buckets (seconds), as the conventions give them.
const DURATION_BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];

/// The OTLP wire format named by `$OTEL_EXPORTER_OTLP_PROTOCOL` (`value`): `http/protobuf`
/// when unset or empty, `http/json`; `grpc` and anything else are refused with one line.
fn protocol(value: Option<&str>) -> Result<Protocol, String> {
    match value.map(str::trim) {
        None | Some("") | Some("http/protobuf") => Ok(Protocol::HttpBinary),
        Some("http/json") => Ok(Protocol::HttpJson),
        Some("grpc") => Err(format!(
            "{PROTOCOL_ENV}=grpc is not supported; use http/protobuf (the default) or http/json, to the collector's OTLP/HTTP port (4318)"
        )),
        Some(other) => Err(format!(
            "{PROTOCOL_ENV}=`{}` is not a protocol runtape speaks; use http/protobuf (the default) or http/json",
            crate::text::one_line(other, 40)
        )),
    }
}

/// The service name the resource carries: `$OTEL_SERVICE_NAME` (`value`) when set, else
/// `runtape`.
fn service_name(value: Option<&str>) -> String {
    match value.map(str::trim) {
        Some(name) if !name.is_empty() => crate::text::one_line(name, 200),
        _ => "runtape".to_owned(),
    }
}

enum Msg {
    Span(Box<SpanData>),
    Finish(std::sync::mpsc::Sender<()>),
}

/// The counters, and the GenAI client histograms.
#[derive(Clone)]
pub(crate) struct Counters {
    transitions: Counter<u64>,
    tokens: Counter<u64>,
    cost: Counter<f64>,
    /// `gen_ai.client.token.usage`: input and output tokens of each model call.
    token_usage: Histogram<u64>,
    /// `gen_ai.client.operation.duration`: seconds of each model call.
    duration: Histogram<f64>,
}

/// Exports spans and counters; cheap to clone.
#[derive(Clone)]
pub struct Exporter(Arc<Inner>);

struct Inner {
    content: bool,
    spans: SyncSender<Msg>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    meters: SdkMeterProvider,
    counters: Counters,
    observers: Mutex<Vec<Relay>>,
    /// The tasks relaying each observed engine's events to its tracker: drained and stopped
    /// by [`Exporter::finish`] before the trackers, so a tracker sees every event its engine
    /// sent before the program finished.
    relays: Mutex<Vec<Relay>>,
    /// Where warnings go (an endpoint that fails, counters that could not be sent).
    warn: fn(&str),
}

/// A task with what stops it.
type Relay = (oneshot::Sender<()>, tokio::task::JoinHandle<()>);

/// Poisoned locks only mean another thread panicked while holding them; every update here is
/// a single push or take, so the data stays consistent: keep going.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Exporter {
    /// An exporter to `endpoint` (else `$OTEL_EXPORTER_OTLP_ENDPOINT`); `None` when neither
    /// is set. `content` exports prompts, completions and tool data too. `warn` is given one
    /// line when the endpoint fails (once) or the counters cannot be sent. Call outside the
    /// async runtime: it starts threads with blocking HTTP clients. An endpoint that is not
    /// `https://`, or `http://` to a loopback host, is refused with one line, and so is a
    /// `$OTEL_EXPORTER_OTLP_PROTOCOL` other than `http/protobuf` (the default) or
    /// `http/json`. `$OTEL_SERVICE_NAME` names the service (default `runtape`).
    pub fn from_options(
        endpoint: Option<&str>,
        content: bool,
        warn: fn(&str),
    ) -> Result<Option<Exporter>, String> {
        let endpoint = match endpoint {
            Some(e) => e.to_owned(),
            None => match std::env::var(ENDPOINT_ENV) {
                Ok(e) if !e.trim().is_empty() => e.trim().to_owned(),
                _ => return Ok(None),
            },
        };
        check_endpoint(&endpoint)?;
        let protocol = protocol(std::env::var(PROTOCOL_ENV).ok().as_deref())?;
        let service = service_name(std::env::var(SERVICE_NAME_ENV).ok().as_deref());
        let base = endpoint.trim_end_matches('/');
        // An https endpoint needs the TLS provider the rest of runtape uses.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let resource = Resource::builder()
            .with_service_name(service)
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build();
        let mut span_exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(protocol)
            .with_endpoint(format!("{base}/v1/traces"))
            .with_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| format!("--otlp-endpoint `{endpoint}`: {e}"))?;
        span_exporter.set_resource(&resource);
        let metric_exporter = opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_protocol(protocol)
            .with_endpoint(format!("{base}/v1/metrics"))
            .with_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| format!("--otlp-endpoint `{endpoint}`: {e}"))?;
        let meters = SdkMeterProvider::builder()
            .with_resource(resource)
            .with_reader(
                PeriodicReader::builder(metric_exporter)
                    .with_interval(METRICS_EVERY)
                    .build(),
            )
            .build();
        let meter = meters.meter("runtape");
        let counters = Counters {
            transitions: meter
                .u64_counter("runtape.transitions")
                .with_description("Transitions committed")
                .with_unit("{transition}")
                .build(),
            tokens: meter
                .u64_counter("runtape.tokens")
                .with_description("Tokens models reported, input and output")
                .with_unit("{token}")
                .build(),
            cost: meter
                .f64_counter("runtape.cost")
                .with_description("Cost of model turns with a known price")
                .with_unit("USD")
                .build(),
            token_usage: meter
                .u64_histogram("gen_ai.client.token.usage")
                .with_description("Number of input and output tokens used")
                .with_unit("{token}")
                .with_boundaries(TOKEN_BUCKETS.to_vec())
                .build(),
            duration: meter
                .f64_histogram("gen_ai.client.operation.duration")
                .with_description("GenAI operation duration")
                .with_unit("s")
                .with_boundaries(DURATION_BUCKETS.to_vec())
                .build(),
        };
        crate::tool::mcp::propagate_trace_context(mcp_traceparent);
        let (tx, rx) = sync_channel(QUEUE);
        let thread = std::thread::Builder::new()
            .name("runtape-otlp".into())
            .spawn(move || export_loop(span_exporter, rx, warn))
            .map_err(|e| format!("cannot start the OTLP export thread: {e}"))?;
        Ok(Some(Exporter(Arc::new(Inner {
            content,
            spans: tx,
            thread: Mutex::new(Some(thread)),
            meters,
            counters,
            observers: Mutex::new(Vec::new()),
            relays: Mutex::new(Vec::new()),
            warn,
        }))))
    }

    /// Turns every event `events` carries into spans and counters, in a task on the current
    /// runtime, until [`finish`](Self::finish). `store` is read for content (prompts, tool
    /// results) and provider kinds.
    pub fn observe(&self, events: broadcast::Receiver<Arc<TraceEvent>>, store: Arc<dyn Store>) {
        let (stop_tx, stop_rx) = oneshot::channel();
        let tracker = spans::Tracker::new(self.clone(), store, self.0.content);
        let task = tokio::spawn(tracker.run(events, stop_rx));
        lock(&self.0.observers).push((stop_tx, task));
    }

    /// Exports `engine`'s runs: its trace events are relayed to a tracker like the one
    /// [`observe`](Self::observe) starts. Call inside the runtime, before the engine starts or
    /// takes up a run.
    pub fn observe_engine(&self, engine: &crate::exec::Engine) {
        let (tx, rx) = broadcast::channel(4096);
        let mut events = engine.subscribe();
        let (stop_tx, mut stop) = oneshot::channel::<()>();
        let relay = tokio::spawn(async move {
            loop {
                tokio::select! {
                    biased;
                    e = events.recv() => match e {
                        Ok(e) => {
                            let _ = tx.send(Arc::new(e));
                        }
                        Err(broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(broadcast::error::RecvError::Closed) => return,
                    },
                    _ = &mut stop => {
                        // Forward what the engine has already said (a run's last events come
                        // just before the command finishes), then stop.
                        while let Ok(e) = events.try_recv() {
                            let _ = tx.send(Arc::new(e));
                        }
                        return;
                    }
                }
            }
        });
        lock(&self.0.relays).push((stop_tx, relay));
        self.observe(rx, engine.store().clone());
    }

    /// Ends the observers (inside the runtime, once the work is done): first every relay of
    /// an observed engine forwards what its engine has sent, then every tracker reads what it
    /// was sent, and spans still open (a run cut off by the stop) are closed as unfinished.
    pub async fn finish(&self) {
        let relays = std::mem::take(&mut *lock(&self.0.relays));
        for (stop, task) in relays {
            let _ = stop.send(());
            let _ = task.await;
        }
        let observers = std::mem::take(&mut *lock(&self.0.observers));
        for (stop, task) in observers {
            let _ = stop.send(());
            let _ = task.await;
        }
    }

    /// Sends what is queued and the counters, then stops the threads. Call outside the async
    /// runtime, after [`finish`](Self::finish).
    pub fn shutdown(&self) {
        let (ack, done) = std::sync::mpsc::channel();
        if self.0.spans.send(Msg::Finish(ack)).is_ok() {
            let _ = done.recv_timeout(Duration::from_secs(15));
        }
        if let Err(e) = self.0.meters.shutdown() {
            (self.0.warn)(&format!("warning: OTLP metrics export: {e}"));
        }
        if let Some(t) = lock(&self.0.thread).take() {
            drop(t);
        }
    }

    pub(crate) fn counters(&self) -> &Counters {
        &self.0.counters
    }

    /// Queues a finished span; drops it when the queue is full.
    pub(crate) fn send(&self, span: SpanData) {
        if let Err(TrySendError::Full(_)) = self.0.spans.try_send(Msg::Span(Box::new(span))) {
            tracing::debug!("OTLP span queue full: a span was dropped");
        }
    }
}

impl Counters {
    pub(crate) fn transition(&self, edge: &str) {
        self.transitions
            .add(1, &[KeyValue::new("runtape.edge", edge.to_owned())]);
    }

    pub(crate) fn tokens(&self, model: &str, input: u64, output: u64) {
        let m = KeyValue::new("gen_ai.request.model", model.to_owned());
        self.tokens.add(
            input,
            &[KeyValue::new("gen_ai.token.type", "input"), m.clone()],
        );
        self.tokens
            .add(output, &[KeyValue::new("gen_ai.token.type", "output"), m]);
    }

    /// Records a model call's input and output tokens in `gen_ai.client.token.usage`, with
    /// the call's `attributes` and `gen_ai.token.type`.
    pub(crate) fn token_usage(&self, attributes: &[KeyValue], input: u64, output: u64) {
        for (kind, n) in [("input", input), ("output", output)] {
            let mut attrs = attributes.to_vec();
            attrs.push(KeyValue::new("gen_ai.token.type", kind));
            self.token_usage.record(n, &attrs);
        }
    }

    /// Records a model call's duration in `gen_ai.client.operation.duration`.
    pub(crate) fn operation(&self, attributes: &[KeyValue], seconds: f64) {
        self.duration.record(seconds, attributes);
    }

    pub(crate) fn cost(&self, model: &str, usd: f64) {
        self.cost.add(
            usd,
            &[KeyValue::new("gen_ai.request.model", model.to_owned())],
        );
    }
}

/// An endpoint is an `http(s)://` URL; plain `http` only to a loopback host, as for model
/// providers (spans may carry content).
fn check_endpoint(endpoint: &str) -> Result<(), String> {
    let bad = |why: &str| {
        Err(format!(
            "OTLP endpoint `{}`: {why}",
            crate::text::one_line(endpoint, 80)
        ))
    };
    let Ok(url) = reqwest::Url::parse(endpoint) else {
        return bad("not a URL; write e.g. http://127.0.0.1:4318");
    };
    let loopback = matches!(
        url.host_str(),
        Some("localhost") | Some("127.0.0.1") | Some("[::1]") | Some("::1")
    ) || url
        .host_str()
        .and_then(|h| h.parse::<std::net::IpAddr>().ok())
        .is_some_and(|ip| ip.is_loopback());
    match url.scheme() {
        "https" => Ok(()),
        "http" if loopback => Ok(()),
        "http" => bad("plain http is allowed only to a loopback host; use https"),
        _ => bad("the scheme must be http or https"),
    }
}

/// The export thread: batches spans, sends them, warns once when the endpoint fails.
fn export_loop(exporter: opentelemetry_otlp::SpanExporter, rx: Receiver<Msg>, warn: fn(&str)) {
    let mut batch: Vec<SpanData> = Vec::new();
    let mut failures = 0u64;
    let send = |batch: &mut Vec<SpanData>, failures: &mut u64| {
        if batch.is_empty() {
            return;
        }
        let spans = std::mem::take(batch);
        if let Err(e) = futures_executor::block_on(exporter.export(spans)) {
            if *failures == 0 {
                warn(&format!(
                    "warning: OTLP span export failed ({e}); runs go on, later failures are not reported"
                ));
            }
            *failures += 1;
        }
    };
    loop {
        match rx.recv_timeout(BATCH_DELAY) {
            Ok(Msg::Span(s)) => {
                batch.push(*s);
                if batch.len() >= BATCH {
                    send(&mut batch, &mut failures);
                }
            }
            Ok(Msg::Finish(ack)) => {
                while let Ok(Msg::Span(s)) = rx.try_recv() {
                    batch.push(*s);
                }
                send(&mut batch, &mut failures);
                let _ = ack.send(());
                break;
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => send(&mut batch, &mut failures),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                send(&mut batch, &mut failures);
                break;
            }
        }
    }
    let _ = exporter.shutdown();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_https_or_loopback_http() {
        assert!(check_endpoint("http://127.0.0.1:4318").is_ok());
        assert!(check_endpoint("http://localhost:4318/").is_ok());
        assert!(check_endpoint("https://otel.example.com").is_ok());
        assert!(check_endpoint("http://otel.example.com").is_err());
        assert!(check_endpoint("ftp://127.0.0.1").is_err());
        assert!(check_endpoint("not a url\nat all").expect_err("bad").len() < 200);
    }

    #[test]
    fn protocols_default_to_protobuf_and_others_get_one_line() {
        assert!(matches!(protocol(None), Ok(Protocol::HttpBinary)));
        assert!(matches!(protocol(Some("")), Ok(Protocol::HttpBinary)));
        assert!(matches!(
            protocol(Some("http/protobuf")),
            Ok(Protocol::HttpBinary)
        ));
        assert!(matches!(
            protocol(Some("http/json")),
            Ok(Protocol::HttpJson)
        ));
        for bad in ["grpc", "http/xml", "json\nwith a newline"] {
            let e = protocol(Some(bad)).expect_err("refused");
            assert!(!e.contains('\n') && e.contains("http/protobuf"), "{e}");
        }
        assert_eq!(service_name(None), "runtape");
        assert_eq!(service_name(Some("  ")), "runtape");
        assert_eq!(service_name(Some("billing-agents")), "billing-agents");
    }
}

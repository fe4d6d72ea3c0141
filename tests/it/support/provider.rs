//! Shared support for the provider tests: the recorded cases, a byte-exact local HTTP server
//! (hand-written on tokio, because controlling where chunk boundaries fall is the point), a
//! seeded RNG, an injectable environment, and a tracing subscriber that captures log lines.
#![allow(dead_code, unreachable_pub)]

pub mod recorded;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use runtape::machine::{AgentId, Message, Remaining, Role};
use runtape::provider::http::{EnvLookup, HttpProvider, HttpProviderConfig, ProviderKind};
use runtape::provider::{ProviderRequest, ToolDef};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// The name of the fake key variable the tests configure.
pub const KEY_VAR: &str = "RUNTAPE_TEST_API_KEY";

// ---------------------------------------------------------------------------------------
// Recorded cases

/// The cases this repository adds (structured output, reasoning, settings, Azure, the
/// Responses API, more errors), each with its source in `meta.json`.
pub fn own_cases_dir() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/providers"
    ))
}

/// The folder of recorded cases: `RUNTAPE_PROVIDER_CASES` when set, else the recorded vendor cases in `tests/fixtures/provider-recordings`.
pub fn cases_dir() -> PathBuf {
    match std::env::var_os("RUNTAPE_PROVIDER_CASES") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/provider-recordings"
        )),
    }
}

/// One recorded case folder.
#[derive(Clone, Debug)]
pub struct Case {
    pub name: String,
    pub request: Value,
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub expect: Value,
    pub meta: Value,
}

impl Case {
    /// The protocol, from `expect.json` (`openai-chat (OpenRouter)` counts as OpenAI).
    pub fn kind(&self) -> ProviderKind {
        let protocol = self.expect["protocol"]
            .as_str()
            .or(self.meta["provider_protocol"].as_str())
            .unwrap_or_default();
        if protocol.starts_with("anthropic") {
            ProviderKind::Anthropic
        } else if protocol.starts_with("ollama") {
            ProviderKind::Ollama
        } else if protocol.starts_with("openai-responses") {
            ProviderKind::OpenAiResponses
        } else if protocol.starts_with("azure") {
            ProviderKind::AzureOpenAi
        } else if protocol.starts_with("openai") {
            ProviderKind::OpenAi
        } else {
            panic!("case {}: unknown protocol {protocol:?}", self.name)
        }
    }

    pub fn stream(&self) -> bool {
        self.expect["stream"].as_bool().unwrap_or(false)
    }

    /// The recorded request path (`/v1/chat/completions`, ...), without query.
    pub fn path(&self) -> Option<String> {
        let uri = self.meta["request"]["uri"].as_str()?;
        let after_scheme = uri.split_once("://").map_or(uri, |(_, rest)| rest);
        let path = after_scheme.find('/').map_or("/", |i| &after_scheme[i..]);
        Some(path.split('?').next().unwrap_or(path).to_owned())
    }

    /// The recorded query string (Azure's `api-version=...`), if any.
    pub fn query(&self) -> Option<String> {
        let uri = self.meta["request"]["uri"].as_str()?;
        uri.split_once('?').map(|(_, q)| q.to_owned())
    }
}

fn read(dir: &Path, file: &str) -> Vec<u8> {
    std::fs::read(dir.join(file)).unwrap_or_else(|e| panic!("{}/{file}: {e}", dir.display()))
}

/// Every case folder of the recorded vendor cases and of this repository's own, sorted by name.
pub fn load_cases() -> Vec<Case> {
    let mut all = load_cases_in(&cases_dir());
    all.extend(load_cases_in(&own_cases_dir()));
    all.sort_by(|a, b| a.name.cmp(&b.name));
    all
}

/// The recorded case `name` (of [`load_cases`]).
pub fn case(name: &str) -> Case {
    load_cases()
        .into_iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no recorded case {name}"))
}

/// A server answering its requests with the recorded responses of `cases` in order (the last
/// one again after that).
pub async fn serve_cases(cases: Vec<Case>) -> MockServer {
    let n = AtomicUsize::new(0);
    MockServer::start(move |_| {
        let c = &cases[n.fetch_add(1, Ordering::SeqCst).min(cases.len() - 1)];
        let headers: Vec<(&str, &str)> = c
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        Behaviour::respond(c.status, &headers, &c.body)
    })
    .await
}

/// Every case folder in `dir`, sorted by name.
pub fn load_cases_in(dir: &Path) -> Vec<Case> {
    let dir = dir.to_path_buf();
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cases folder {}: {e}", dir.display()))
        .filter_map(Result::ok)
        .filter(|e| e.path().join("expect.json").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let d = dir.join(&name);
            let json = |f: &str| -> Value {
                serde_json::from_slice(&read(&d, f)).unwrap_or_else(|e| panic!("{name}/{f}: {e}"))
            };
            let status = String::from_utf8(read(&d, "response.status")).unwrap();
            let headers: serde_json::Map<String, Value> =
                serde_json::from_value(json("response.headers.json")).unwrap_or_default();
            let headers = headers
                .into_iter()
                .flat_map(|(k, vs)| {
                    let vs = vs.as_array().cloned().unwrap_or_default();
                    vs.into_iter()
                        .map(move |v| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                })
                .collect();
            Case {
                request: json("request.json"),
                status: status.trim().parse().unwrap(),
                headers,
                body: read(&d, "response.body"),
                expect: json("expect.json"),
                meta: json("meta.json"),
                name,
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// A seeded RNG (SplitMix64) so chunking is random but reproducible.

#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    pub fn from_name(name: &str) -> Rng {
        Rng(name.bytes().fold(0x9E37_79B9_7F4A_7C15, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01B3)
        }))
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// A number in `1..=max`.
    pub fn size(&mut self, max: usize) -> usize {
        1 + (self.next() % max as u64) as usize
    }
    /// `body` cut into random pieces of 1..=max bytes.
    pub fn split<'b>(&mut self, body: &'b [u8], max: usize) -> Vec<&'b [u8]> {
        let mut pieces = Vec::new();
        let mut rest = body;
        while !rest.is_empty() {
            let n = self.size(max).min(rest.len());
            pieces.push(&rest[..n]);
            rest = &rest[n..];
        }
        pieces
    }
}

// ---------------------------------------------------------------------------------------
// The local HTTP server

/// A request as the server received it.
#[derive(Clone, Debug, Default)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Recorded {
    /// The key the request carried as `Authorization: Bearer KEY` ("no key" without one).
    pub fn bearer(&self) -> String {
        self.header("authorization")
            .and_then(|h| h.strip_prefix("Bearer "))
            .unwrap_or("no key")
            .to_owned()
    }

    /// Whether the request's chat messages hold a tool result (the model is being answered).
    pub fn answers_a_tool(&self) -> bool {
        let body: serde_json::Value = self.json();
        body["messages"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("request body is JSON")
    }
}

/// How the body is written.
#[derive(Clone, Debug)]
pub enum Chunking {
    /// One write with `Content-Length`.
    Whole,
    /// `Transfer-Encoding: chunked`, pieces of 1..=max bytes, each flushed, with a yield to the
    /// other tasks between. The client's HTTP decoder hands the body over one chunk at a time
    /// even when several arrive in one read, so the pieces reach the stream decoder as split
    /// here without a pause.
    Random { seed: u64, max: usize },
}

/// What happens after the head and `body` are written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum End {
    /// End the body properly and close.
    Finish,
    /// Keep the connection open, write nothing more, and wait for the client to close it.
    Hang,
}

/// What the server answers.
#[derive(Clone, Debug)]
pub enum Behaviour {
    Respond {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
        chunking: Chunking,
        end: End,
    },
    /// Read the request, never answer, wait for the client to close.
    Silent,
    /// A stream that never ends: `status` and `headers`, then `first` as one chunk, then
    /// `tick` (an SSE comment, say) every `every`, until the client closes.
    Endless {
        headers: Vec<(String, String)>,
        first: Vec<u8>,
        tick: Vec<u8>,
        every: Duration,
    },
}

impl Behaviour {
    pub fn json(status: u16, body: &str) -> Behaviour {
        Behaviour::respond(
            status,
            &[("Content-Type", "application/json")],
            body.as_bytes(),
        )
    }
    pub fn respond(status: u16, headers: &[(&str, &str)], body: &[u8]) -> Behaviour {
        Behaviour::Respond {
            status,
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            body: body.to_vec(),
            chunking: Chunking::Whole,
            end: End::Finish,
        }
    }
    pub fn sse(body: &str) -> Behaviour {
        Behaviour::respond(
            200,
            &[("Content-Type", "text/event-stream")],
            body.as_bytes(),
        )
    }
    pub fn chunked(mut self, seed: u64) -> Behaviour {
        if let Behaviour::Respond { chunking, .. } = &mut self {
            *chunking = Chunking::Random { seed, max: 48 };
        }
        self
    }
    pub fn then_hang(mut self) -> Behaviour {
        if let Behaviour::Respond { end, chunking, .. } = &mut self {
            *end = End::Hang;
            if matches!(chunking, Chunking::Whole) {
                *chunking = Chunking::Random {
                    seed: 1,
                    max: 1 << 20,
                };
            }
        }
        self
    }
}

type Responder = dyn Fn(&Recorded) -> Behaviour + Send + Sync;

/// A local HTTP/1.1 server on 127.0.0.1 that records requests and answers as told.
pub struct MockServer {
    pub addr: SocketAddr,
    requests: Arc<Mutex<Vec<Recorded>>>,
    connections: Arc<AtomicUsize>,
    closed_by_client: Arc<AtomicUsize>,
    closed: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl MockServer {
    pub async fn start(
        respond: impl Fn(&Recorded) -> Behaviour + Send + Sync + 'static,
    ) -> MockServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicUsize::new(0));
        let closed_by_client = Arc::new(AtomicUsize::new(0));
        let closed = Arc::new(Notify::new());
        let respond: Arc<Responder> = Arc::new(respond);
        let (r, c, cc, n) = (
            requests.clone(),
            connections.clone(),
            closed_by_client.clone(),
            closed.clone(),
        );
        let task = tokio::spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    return;
                };
                c.fetch_add(1, Ordering::SeqCst);
                let (r, respond, cc, n) = (r.clone(), respond.clone(), cc.clone(), n.clone());
                tokio::spawn(async move {
                    if serve(socket, &r, &*respond).await {
                        cc.fetch_add(1, Ordering::SeqCst);
                        n.notify_waiters();
                        n.notify_one();
                    }
                });
            }
        });
        MockServer {
            addr,
            requests,
            connections,
            closed_by_client,
            closed,
            task,
        }
    }

    /// An OpenAI chat-completions server answering every request, unstreamed, with the
    /// text "ok".
    pub async fn ok_chat() -> MockServer {
        MockServer::always(Behaviour::json(
            200,
            r#"{"choices":[{"index":0,"message":{"content":"ok"},"finish_reason":"stop"}]}"#,
        ))
        .await
    }

    /// A server answering every request with `behaviour`.
    pub async fn always(behaviour: Behaviour) -> MockServer {
        MockServer::start(move |_| behaviour.clone()).await
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
    /// How many hanging connections the client closed.
    pub fn closed_by_client(&self) -> usize {
        self.closed_by_client.load(Ordering::SeqCst)
    }
    /// Waits until a hanging connection is closed by the client; false after `limit`.
    pub async fn wait_client_close(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        while self.closed_by_client() == 0 {
            if tokio::time::timeout_at(deadline, self.closed.notified())
                .await
                .is_err()
            {
                return self.closed_by_client() > 0;
            }
        }
        true
    }
}

/// Serves one connection; true when it waited for and saw the client close it.
async fn serve(
    mut socket: TcpStream,
    requests: &Mutex<Vec<Recorded>>,
    respond: &Responder,
) -> bool {
    let _ = socket.set_nodelay(true);
    let Some(request) = read_request(&mut socket).await else {
        return false;
    };
    requests.lock().unwrap().push(request.clone());
    match respond(&request) {
        Behaviour::Silent => wait_for_close(&mut socket).await,
        Behaviour::Endless {
            headers,
            first,
            tick,
            every,
        } => {
            let mut head = "HTTP/1.1 200 OK\r\n".to_owned();
            for (k, v) in &headers {
                let _ = write!(head, "{k}: {v}\r\n");
            }
            head.push_str("Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
            let frame = |piece: &[u8]| {
                [format!("{:x}\r\n", piece.len()).as_bytes(), piece, b"\r\n"].concat()
            };
            if socket.write_all(head.as_bytes()).await.is_err()
                || socket.write_all(&frame(&first)).await.is_err()
            {
                return false;
            }
            loop {
                tokio::time::sleep(every).await;
                if socket.write_all(&frame(&tick)).await.is_err() || socket.flush().await.is_err() {
                    return true;
                }
            }
        }
        Behaviour::Respond {
            status,
            headers,
            body,
            chunking,
            end,
        } => {
            let mut head = format!("HTTP/1.1 {status} {}\r\n", reason(status));
            for (k, v) in &headers {
                let lower = k.to_ascii_lowercase();
                if !matches!(
                    lower.as_str(),
                    "content-length" | "content-encoding" | "transfer-encoding" | "connection"
                ) {
                    let _ = write!(head, "{k}: {v}\r\n");
                }
            }
            let chunked = !matches!(chunking, Chunking::Whole);
            if chunked {
                head.push_str("Transfer-Encoding: chunked\r\n");
            } else {
                let _ = write!(head, "Content-Length: {}\r\n", body.len());
            }
            head.push_str("Connection: close\r\n\r\n");
            if socket.write_all(head.as_bytes()).await.is_err() {
                return false;
            }
            match chunking {
                Chunking::Whole => {
                    if socket.write_all(&body).await.is_err() {
                        return false;
                    }
                }
                Chunking::Random { seed, max } => {
                    let mut rng = Rng(seed);
                    for piece in rng.split(&body, max) {
                        let framed =
                            [format!("{:x}\r\n", piece.len()).as_bytes(), piece, b"\r\n"].concat();
                        if socket.write_all(&framed).await.is_err() || socket.flush().await.is_err()
                        {
                            return false;
                        }
                        tokio::task::yield_now().await;
                    }
                    if end == End::Finish && socket.write_all(b"0\r\n\r\n").await.is_err() {
                        return false;
                    }
                }
            }
            let _ = socket.flush().await;
            match end {
                End::Finish => {
                    let _ = socket.shutdown().await;
                    false
                }
                End::Hang => wait_for_close(&mut socket).await,
            }
        }
    }
}

async fn wait_for_close(socket: &mut TcpStream) -> bool {
    let mut buf = [0u8; 1024];
    loop {
        match socket.read(&mut buf).await {
            Ok(0) | Err(_) => return true,
            Ok(_) => {}
        }
    }
}

async fn read_request(socket: &mut TcpStream) -> Option<Recorded> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 || buf.len() > 1 << 20 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let method = first.next()?.to_owned();
    let path = first.next()?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some(Recorded {
        method,
        path,
        headers,
        body,
    })
}

fn reason(status: u16) -> &'static str {
    reqwest::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Unknown")
}

// ---------------------------------------------------------------------------------------
// Providers, requests, environment

/// An environment holding only `pairs`.
pub fn env_with(pairs: &[(&str, &str)]) -> EnvLookup {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Arc::new(move |name| map.get(name).cloned())
}

/// A config for `kind` pointed at `base_url`, key in [`KEY_VAR`] (none for Ollama).
pub fn config(kind: ProviderKind, base_url: &str, model: &str) -> HttpProviderConfig {
    let mut c = HttpProviderConfig::new(kind, model);
    c.base_url = base_url.to_owned();
    c.api_key_env = (kind != ProviderKind::Ollama).then(|| KEY_VAR.to_owned());
    c.timeout = Duration::from_secs(10);
    c
}

/// [`config`] for a `kind` server that is `server`.
pub fn config_for(kind: ProviderKind, server: &MockServer, model: &str) -> HttpProviderConfig {
    config(kind, &base_for(kind, &server.url()), model)
}

/// The provider for `config` with `key` in [`KEY_VAR`].
pub fn provider(config: HttpProviderConfig, key: &str) -> HttpProvider {
    HttpProvider::with_env(config, env_with(&[(KEY_VAR, key)])).expect("provider builds")
}

/// The base URL for a `kind` server at `server_url`.
pub fn base_for(kind: ProviderKind, server_url: &str) -> String {
    match kind {
        ProviderKind::OpenAi | ProviderKind::OpenAiResponses => format!("{server_url}/v1"),
        ProviderKind::AzureOpenAi => format!("{server_url}/openai/deployments/dep"),
        _ => server_url.to_owned(),
    }
}

/// A request with `messages` and no tools.
pub fn request(model: &str, messages: Vec<Message>) -> ProviderRequest {
    ProviderRequest {
        agent: AgentId::from("agent"),
        model: model.to_owned(),
        messages: Arc::new(messages),
        tools: Vec::<ToolDef>::new(),
        remaining: Remaining::default(),
        attempt: 1,
        ..ProviderRequest::default()
    }
}

/// A one-message user request.
pub fn hello(model: &str) -> ProviderRequest {
    request(model, vec![Message::text(Role::User, "hello")])
}

/// A token sink that collects deltas.
#[derive(Clone, Default)]
pub struct Deltas(pub Arc<Mutex<Vec<String>>>);

impl Deltas {
    pub fn sink(&self) -> impl Fn(&str) + Send + Sync + 'static {
        let inner = self.0.clone();
        move |t: &str| inner.lock().unwrap().push(t.to_owned())
    }
    pub fn joined(&self) -> String {
        self.0.lock().unwrap().concat()
    }
    pub fn count(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

// ---------------------------------------------------------------------------------------
// Captured log lines

/// A tracing subscriber that formats every event and span field into lines.
#[derive(Clone, Default)]
pub struct Capture {
    pub lines: Arc<Mutex<Vec<String>>>,
    next_id: Arc<AtomicU64>,
}

struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, " {}={:?}", field.name(), value);
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, attrs: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let mut f = Fields(format!("span {}", attrs.metadata().name()));
        attrs.record(&mut f);
        self.lines.lock().unwrap().push(f.0);
        tracing::span::Id::from_u64(self.next_id.fetch_add(1, Ordering::SeqCst) + 1)
    }
    fn record(&self, _: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        let mut f = Fields("record".into());
        values.record(&mut f);
        self.lines.lock().unwrap().push(f.0);
    }
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let m = event.metadata();
        let mut f = Fields(format!("{} {}:", m.level(), m.target()));
        event.record(&mut f);
        self.lines.lock().unwrap().push(f.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// What keeps a [`Capture`] installed ([`Capture::install`]); drop it to uninstall.
pub struct Installed {
    _guard: tracing::subscriber::DefaultGuard,
    _anchor: tracing::Dispatch,
}

impl Capture {
    /// Installs this capture as the calling thread's subscriber, so it sees every event this
    /// thread emits even while other tests run in the process: `tracing` caches each
    /// callsite's interest process-wide, and while only one dispatcher is registered it asks
    /// the *registering* thread's own default (tracing-core 0.1.36, `Rebuilder::JustOne`), so a
    /// thread of another test, with no subscriber, would cache "never" and this capture would
    /// see nothing. A second dispatcher, registered for as long as the capture is installed,
    /// makes `tracing` ask every registered dispatcher instead.
    pub fn install(&self) -> Installed {
        let anchor = tracing::Dispatch::new(self.clone());
        let guard = tracing::subscriber::set_default(self.clone());
        tracing::callsite::rebuild_interest_cache();
        Installed {
            _guard: guard,
            _anchor: anchor,
        }
    }

    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }
    pub fn warnings(&self) -> Vec<String> {
        self.lines()
            .into_iter()
            .filter(|l| l.starts_with("WARN"))
            .collect()
    }
}

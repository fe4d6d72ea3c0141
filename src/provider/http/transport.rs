//! The I/O shell around the pure codecs: sends the encoded request with reqwest, feeds the
//! response to the decoder chunk by chunk, and turns every failure into a [`ProviderError`].
//!
//! Transport rules: redirects are never followed (a 3xx is an error naming the target), so
//! the key can never be forwarded to another host; `timeout` bounds the whole request, from
//! sending it to the reply's last byte, lowered to the agent's remaining wall-time budget
//! (so a stream that never ends — one chunk, then keep-alive comments forever — fails at
//! that deadline); `idle_timeout` bounds every silence between chunks; dropping the future
//! drops the connection; an error body is read to at most 8 KiB, and a whole body or a
//! stream to at most [`MAX_BODY_BYTES`]. A reply with no text, no tool call and no refusal
//! is a retryable `provider_unavailable` error, never an answer.

use std::fmt;
use std::time::{Duration, UNIX_EPOCH};

use futures_util::future::BoxFuture;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use reqwest::{Response, Url};
use tokio::time::Instant;

use super::codec::{DecodeError, Decoded, EncodeOptions, StreamDecoder};
use super::codec::{decode_response, encode_request};
use super::config::{
    DEFAULT_AZURE_API_VERSION, EnvLookup, HttpProviderConfig, ProviderBuildError, ProviderKind,
    check_base_url, process_env, read_key,
};
use super::errors::{ERROR_BODY_LIMIT, decode_failure, http_error, name_refused_setting, redact};
use super::pricing::{PricingTable, UnpricedWarnings, cost_nanos};
use crate::clock::{self, Clock, within_until};
use crate::machine::BudgetKey;
use crate::machine::{ModelReply, ProviderErrorClass};
use crate::provider::{ModelProvider, ProviderError, ProviderRequest, TokenSink};

/// The largest response accepted, whole body or stream: 32 MiB. A bigger one is refused
/// (`unknown`, not retryable) and nothing of it is kept.
pub const MAX_BODY_BYTES: usize = 32 << 20;

/// The `anthropic-version` header sent with every Anthropic call.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// An HTTP model provider: one of OpenAI chat completions, Anthropic Messages or Ollama
/// `/api/chat`, chosen by [`HttpProviderConfig::kind`]. Build it with [`build`](super::build)
/// (as a `dyn ModelProvider`) or [`HttpProvider::new`] (to also get [`Decoded`] details).
pub struct HttpProvider {
    name: String,
    kind: ProviderKind,
    base_url: String,
    endpoint: Url,
    model: String,
    key_env: Option<String>,
    env: EnvLookup,
    timeout: Duration,
    idle_timeout: Duration,
    stream: bool,
    max_tokens: Option<u64>,
    compat: super::codec::OpenAiCompat,
    attachments: Option<Vec<crate::machine::AttachmentKind>>,
    pricing: PricingTable,
    unpriced: UnpricedWarnings,
    client: reqwest::Client,
}

impl HttpProvider {
    /// Builds a provider that reads its key from the process environment (at every call;
    /// checked now). See [`ProviderBuildError`] for what is refused.
    pub fn new(config: HttpProviderConfig) -> Result<Self, ProviderBuildError> {
        Self::with_env(config, process_env())
    }

    /// Like [`new`](Self::new), reading variables through `env` instead of the process
    /// environment (for embedding and tests).
    pub fn with_env(
        config: HttpProviderConfig,
        env: EnvLookup,
    ) -> Result<Self, ProviderBuildError> {
        let name = if config.name.trim().is_empty() {
            config.kind.as_str().to_owned()
        } else {
            config.name.clone()
        };
        if config.model.trim().is_empty() {
            return Err(ProviderBuildError::MissingModel { provider: name });
        }
        if config.timeout.is_zero() || config.idle_timeout.is_zero() {
            return Err(ProviderBuildError::ZeroTimeout { provider: name });
        }
        let raw_url = if config.base_url.trim().is_empty() {
            config.kind.default_base_url()
        } else {
            config.base_url.as_str()
        };
        if config.kind == ProviderKind::AzureOpenAi && raw_url.trim().is_empty() {
            return Err(ProviderBuildError::Azure {
                provider: name,
                reason: "Azure OpenAI needs the deployment URL as base_url".into(),
            });
        }
        let base = check_base_url(&name, raw_url)?;
        let base_url = base.as_str().trim_end_matches('/').to_owned();
        let mut endpoint = Url::parse(&format!("{base_url}{}", config.kind.endpoint_path()))
            .map_err(|e| ProviderBuildError::InvalidBaseUrl {
                provider: name.clone(),
                url: raw_url.to_owned(),
                reason: e.to_string(),
            })?;
        if config.kind == ProviderKind::AzureOpenAi {
            let version = config
                .api_version
                .as_deref()
                .unwrap_or(DEFAULT_AZURE_API_VERSION);
            if version.is_empty()
                || !version
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
            {
                return Err(ProviderBuildError::Azure {
                    provider: name,
                    reason: format!("api_version `{version}` is not a version like 2024-10-21"),
                });
            }
            endpoint
                .query_pairs_mut()
                .append_pair("api-version", version);
        }
        if matches!(
            config.kind,
            ProviderKind::Anthropic | ProviderKind::AzureOpenAi
        ) && config.api_key_env.is_none()
        {
            return Err(ProviderBuildError::KeyRequired {
                provider: name,
                kind: config.kind,
            });
        }
        read_key(&name, config.api_key_env.as_deref(), &env)?;
        let pricing = PricingTable::with_overrides(&config.pricing).map_err(|e| {
            ProviderBuildError::InvalidPricing {
                provider: name.clone(),
                model: e.model,
                reason: e.reason,
            }
        })?;
        // Installing fails only when a provider is already installed, which is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(config.timeout)
            .user_agent(concat!("runtape/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ProviderBuildError::Client {
                provider: name.clone(),
                reason: e.without_url().to_string(),
            })?;
        Ok(HttpProvider {
            name,
            kind: config.kind,
            base_url,
            endpoint,
            model: config.model,
            key_env: config.api_key_env,
            env,
            timeout: config.timeout,
            idle_timeout: config.idle_timeout.min(config.timeout),
            stream: config.stream,
            max_tokens: config.max_tokens,
            compat: config.compat,
            attachments: config.attachments,
            pricing,
            unpriced: UnpricedWarnings::default(),
            client,
        })
    }

    /// The protocol this provider speaks.
    pub fn kind(&self) -> ProviderKind {
        self.kind
    }

    /// Performs one call and returns the reply with its wire details (what
    /// [`ModelProvider::complete`] returns is `reply`). The key is read from the environment
    /// now; text deltas go to `tokens` as they arrive (a whole-body reply's text is sent once).
    pub async fn complete_decoded(
        &self,
        request: &ProviderRequest,
        tokens: TokenSink<'_>,
    ) -> Result<Decoded, ProviderError> {
        let key = read_key(&self.name, self.key_env.as_deref(), &self.env).map_err(|e| {
            let message = match &e {
                ProviderBuildError::KeyUnset { var, .. } => {
                    format!("environment variable `{var}` is unset")
                }
                ProviderBuildError::KeyEmpty { var, .. } => {
                    format!("environment variable `{var}` is empty")
                }
                other => other.to_string(),
            };
            let mut err = ProviderError::new(&self.name, ProviderErrorClass::ProviderAuth, message);
            err.retryable = false;
            err.hint = "set the API key variable before the call".into();
            err
        })?;
        let budget_cap = self
            .budget_cap(request)
            .map_err(|(key, input)| self.refused(key, input))?;
        let mut result = self.call(request, tokens, key.as_deref(), budget_cap).await;
        match &mut result {
            Ok(decoded) => self.price(request, &mut decoded.reply),
            Err(err) => {
                if let Some(key) = &key {
                    redact(err, key);
                }
            }
        }
        result
    }

    /// The output-token limit the run's budgets allow `request` (see
    /// [`allowance`](crate::machine::allowance::allowance)), from the remaining cost
    /// budget, the requested model's price in this provider's table and an upper bound of the
    /// request's input tokens; or the error that refuses the call, naming the budget it would
    /// pass. The token budget keeps lowering the cap as before (`request_cap`), counting input
    /// after the call, so a call whose bytes exceed the tokens left is not refused on the byte
    /// bound alone. `None` when no budget bounds the call (no cost cap, or an unpriced model).
    ///
    /// A refusal is `(the budget, the input tokens the request was bounded at)`.
    fn budget_cap(&self, request: &ProviderRequest) -> Result<Option<u64>, (BudgetKey, u64)> {
        use crate::machine::allowance::{Allowance, CallPrices, allowance, estimate_input_tokens};
        // Only a cost cap with a known price bounds the call here: the machine asks for no call
        // once the turns are spent, and the token budget lowers the cap in `request_cap`. Most
        // calls stop at this check, before the request is measured.
        let Some(cost_left) = request.remaining.cost_nanos else {
            return Ok(None);
        };
        let model = if request.model.is_empty() {
            self.model.as_str()
        } else {
            request.model.as_str()
        };
        let Some(price) = self.pricing.price_for(None, model) else {
            return Ok(None);
        };
        let prices = CallPrices {
            // A prompt-cache write is charged above the input price on Anthropic.
            input: match self.kind {
                ProviderKind::Anthropic => price.input.max(
                    price
                        .cache_write
                        .unwrap_or_else(|| price.input.saturating_mul(5).div_ceil(4)),
                ),
                _ => price.input,
            },
            output: price.output,
        };
        let left = crate::machine::Remaining {
            cost_nanos: Some(cost_left),
            ..crate::machine::Remaining::default()
        };
        // The request as JSON bounds every byte of text it sends (escapes only add bytes);
        // counted as it is written, not collected.
        let mut bytes = ByteCount(0);
        let _ = serde_json::to_writer(&mut bytes, request);
        let input = estimate_input_tokens(bytes.0, request.messages.len() as u64, None);
        match allowance(&left, Some(prices), input, None) {
            Allowance::Call { max_output_tokens } => Ok(max_output_tokens),
            Allowance::Refuse { key } => Err((key, input)),
        }
    }

    /// The error that stands for a call [`budget_cap`](Self::budget_cap) refused: not
    /// retryable, naming the budget, so the machine treats it as that budget spent.
    fn refused(&self, key: BudgetKey, input: u64) -> ProviderError {
        let mut err = ProviderError::new(
            &self.name,
            ProviderErrorClass::BadRequest,
            format!(
                "not called: the request (up to {input} input tokens) would pass the {key} budget"
            ),
        );
        err.retryable = false;
        err.budget = Some(key);
        err.hint = format!("raise the {key} budget to let the call be made");
        err
    }

    async fn call(
        &self,
        request: &ProviderRequest,
        tokens: TokenSink<'_>,
        key: Option<&str>,
        budget_cap: Option<u64>,
    ) -> Result<Decoded, ProviderError> {
        let options = EncodeOptions {
            default_model: self.model.clone(),
            stream: self.stream,
            max_tokens: self.max_tokens,
            budget_cap,
            compat: self.compat,
        };
        let model = request.model.as_str();
        let accepts = self.accepts(if model.is_empty() { &self.model } else { model });
        let request = super::attachments::sendable(request, &accepts.unwrap_or_default());
        let body = encode_request(self.kind, &request, &options);
        let accept = match (self.stream, self.kind) {
            (false, _) => "application/json",
            (true, ProviderKind::Ollama) => "application/x-ndjson",
            (true, _) => "text/event-stream",
        };
        let mut builder = self
            .client
            .post(self.endpoint.clone())
            .header(ACCEPT, accept)
            .json(&body);
        if self.kind == ProviderKind::Anthropic {
            builder = builder.header("anthropic-version", ANTHROPIC_VERSION);
        }
        if let Some(key) = key {
            let (name, value) = match self.kind {
                ProviderKind::Anthropic => (HeaderName::from_static("x-api-key"), key.to_owned()),
                ProviderKind::AzureOpenAi => (HeaderName::from_static("api-key"), key.to_owned()),
                _ => (AUTHORIZATION, format!("Bearer {key}")),
            };
            let mut value = HeaderValue::from_str(&value).map_err(|_| {
                ProviderError::new(
                    &self.name,
                    ProviderErrorClass::ProviderAuth,
                    "the API key cannot be sent as an HTTP header",
                )
            })?;
            value.set_sensitive(true);
            builder = builder.header(name, value);
        }
        tracing::debug!(provider = %self.name, url = %self.endpoint, stream = self.stream, "model call");

        let budget = request.remaining.wall_ms.map_or(self.timeout, |ms| {
            self.timeout.min(Duration::from_millis(ms))
        });
        // The engine's clock while a run performs the call: its deadlines are that clock's.
        let engine_clock = clock::current();
        let clock = engine_clock.as_ref();
        let deadline = clock.now() + budget;
        let mut response = match within_until(clock, deadline, builder.send()).await {
            Err(_) => return Err(self.timed_out("no response", budget)),
            Ok(Err(e)) => return Err(self.transport_error(e)),
            Ok(Ok(r)) => r,
        };
        let headers = response.headers().clone();
        let status = response.status();
        if !status.is_success() {
            let body = self.read_capped(clock, &mut response, deadline).await;
            // A `Retry-After` date is the server's wall time.
            let now = UNIX_EPOCH + Duration::from_millis(clock.wall_ms());
            let mut err = http_error(&self.name, status.as_u16(), &headers, &body, now, key);
            name_refused_setting(&mut err, self.kind, &request.settings);
            return Err(err);
        }
        let json_body = headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with("application/json"));
        let failed = |e: DecodeError| decode_failure(&self.name, e, &headers);
        let decoded = if self.stream && !json_body {
            let mut on_text = |t: &str| tokens(t);
            let mut decoder = StreamDecoder::new(self.kind);
            let mut received = 0usize;
            while !decoder.is_done() {
                match self
                    .next_chunk(clock, &mut response, deadline, budget)
                    .await?
                {
                    None => break,
                    Some(chunk) => {
                        let chunk = chunk.as_ref();
                        received = received.saturating_add(chunk.len());
                        if received > MAX_BODY_BYTES {
                            return Err(failed(DecodeError::TooLarge {
                                limit: MAX_BODY_BYTES,
                                what: "streamed response",
                            }));
                        }
                        decoder.push(chunk, &mut on_text).map_err(failed)?;
                    }
                }
            }
            decoder.finish(&mut on_text).map_err(failed)?
        } else {
            let body = self
                .read_whole(clock, &mut response, &headers, deadline, budget)
                .await?;
            let decoded = decode_response(self.kind, &body).map_err(failed)?;
            if let Some(text) = decoded.reply.text.as_deref() {
                tokens(text);
            }
            decoded
        };
        check_not_empty(&decoded).map_err(failed)?;
        Ok(decoded)
    }

    /// The next chunk of the body, `None` at its end: fails when the stream stays silent
    /// for `idle_timeout` or the request's deadline passes.
    async fn next_chunk(
        &self,
        clock: &dyn Clock,
        response: &mut Response,
        deadline: Instant,
        budget: Duration,
    ) -> Result<Option<impl AsRef<[u8]>>, ProviderError> {
        let idle_at = clock.now() + self.idle_timeout;
        let (until, idle) = if idle_at < deadline {
            (idle_at, true)
        } else {
            (deadline, false)
        };
        match within_until(clock, until, response.chunk()).await {
            Err(_) if idle => {
                Err(self.timed_out("the stream went silent: no data", self.idle_timeout))
            }
            Err(_) => Err(self.timed_out("the reply did not finish", budget)),
            Ok(Err(e)) => Err(self.transport_error(e)),
            Ok(Ok(chunk)) => Ok(chunk),
        }
    }

    /// Reads up to [`ERROR_BODY_LIMIT`] bytes of an error body; a failure ends the read.
    async fn read_capped(
        &self,
        clock: &dyn Clock,
        response: &mut Response,
        deadline: Instant,
    ) -> Vec<u8> {
        let mut body = Vec::new();
        while body.len() < ERROR_BODY_LIMIT {
            let until = deadline.min(clock.now() + self.idle_timeout);
            match within_until(clock, until, response.chunk()).await {
                Ok(Ok(Some(chunk))) => body.extend_from_slice(&chunk),
                _ => break,
            }
        }
        body.truncate(ERROR_BODY_LIMIT);
        body
    }

    async fn read_whole(
        &self,
        clock: &dyn Clock,
        response: &mut Response,
        headers: &HeaderMap,
        deadline: Instant,
        budget: Duration,
    ) -> Result<Vec<u8>, ProviderError> {
        let mut body = Vec::new();
        loop {
            match self.next_chunk(clock, response, deadline, budget).await? {
                None => return Ok(body),
                Some(chunk) => {
                    let chunk = chunk.as_ref();
                    if body.len() + chunk.len() > MAX_BODY_BYTES {
                        let e = DecodeError::TooLarge {
                            limit: MAX_BODY_BYTES,
                            what: "response body",
                        };
                        return Err(decode_failure(&self.name, e, headers));
                    }
                    body.extend_from_slice(chunk);
                }
            }
        }
    }

    fn timed_out(&self, what: &str, limit: Duration) -> ProviderError {
        let message = format!("{what} within {limit:?}");
        let mut err =
            ProviderError::new(&self.name, ProviderErrorClass::ProviderUnavailable, message);
        err.retryable = true;
        err.hint = "the server did not answer in time – retrying; raise `timeout_ms` (whole request) or `idle_timeout_ms` (silence) if replies are legitimately slow".into();
        err
    }

    fn transport_error(&self, error: reqwest::Error) -> ProviderError {
        let error = error.without_url();
        let mut message = error.to_string();
        let mut source = std::error::Error::source(&error);
        while let Some(cause) = source {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            source = cause.source();
        }
        let (class, hint) = if error.is_builder() {
            (
                ProviderErrorClass::Unknown,
                "the request could not be built",
            )
        } else if error.is_connect() {
            (
                ProviderErrorClass::ProviderUnavailable,
                "could not connect – check base_url and that the server is running",
            )
        } else {
            (
                ProviderErrorClass::ProviderUnavailable,
                "the connection failed – retrying",
            )
        };
        let mut err = ProviderError::new(&self.name, class, message);
        err.hint = hint.into();
        err
    }

    /// Sets `cost_nanos` by [`PricingTable::price_for`]; warns once per unpriced model. No
    /// usage means no cost.
    fn price(&self, request: &ProviderRequest, reply: &mut ModelReply) {
        let requested = if request.model.is_empty() {
            &self.model
        } else {
            &request.model
        };
        let reported = reply.model.as_deref();
        match (self.pricing.price_for(reported, requested), reply.usage) {
            (Some(price), Some(usage)) => reply.cost_nanos = Some(cost_nanos(&price, &usage)),
            // Ollama runs models on your own machine: they cost nothing unless priced.
            (None, _) if self.kind == ProviderKind::Ollama => reply.cost_nanos = Some(0),
            (None, _) => {
                self.unpriced
                    .note(&self.name, reported.unwrap_or(requested));
            }
            (Some(_), None) => {}
        }
    }
}

/// A reply with nothing in it — no text, no tool call, no refusal — is not an answer: the
/// provider failed to produce one (`choices: []`, `content: null`, an empty content list).
/// A content filter that left nothing is its own, non-retryable error. A reply cut by the
/// output-token limit before any visible text (all of it spent on reasoning) is not empty but
/// truncated: it goes to the machine, whose `on_truncated` policy decides.
fn check_not_empty(decoded: &Decoded) -> Result<(), DecodeError> {
    let r = &decoded.reply;
    let empty = r.text.as_deref().is_none_or(|t| t.trim().is_empty())
        && r.tool_calls.is_empty()
        && r.refusal.is_none();
    if !empty
        || r.finish_reason.raw.as_deref() == Some("refusal")
        || r.finish_reason.normalized == Some(crate::machine::Finish::Length)
    {
        return Ok(());
    }
    if r.finish_reason.normalized == Some(crate::machine::Finish::ContentFilter) {
        return Err(DecodeError::Reported(Box::new(
            super::codec::ReportedError {
                error_type: Some("content_filter".into()),
                code: Some("content_filter".into()),
                message: "the provider's content filter removed the whole reply".into(),
                ..super::codec::ReportedError::default()
            },
        )));
    }
    Err(DecodeError::Empty)
}

impl ModelProvider for HttpProvider {
    fn describe(&self) -> String {
        format!("{} {} at {}", self.kind, self.model, self.base_url)
    }

    fn complete<'a>(
        &'a self,
        request: &'a ProviderRequest,
        tokens: TokenSink<'a>,
    ) -> BoxFuture<'a, Result<ModelReply, ProviderError>> {
        Box::pin(async move { Ok(self.complete_decoded(request, tokens).await?.reply) })
    }

    fn accepts(&self, model: &str) -> Option<Vec<crate::machine::AttachmentKind>> {
        Some(
            self.attachments
                .clone()
                .unwrap_or_else(|| super::attachments::built_in_accepts(self.kind, model)),
        )
    }
}

impl fmt::Debug for HttpProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpProvider")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("endpoint", &self.endpoint.as_str())
            .field("model", &self.model)
            .field("api_key_env", &self.key_env)
            .field("timeout", &self.timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("stream", &self.stream)
            .field("max_tokens", &self.max_tokens)
            .finish_non_exhaustive()
    }
}

/// An `io::Write` that only counts the bytes written to it: the size of a request's JSON
/// without building it.
struct ByteCount(u64);

impl std::io::Write for ByteCount {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

//! HTTP model providers: OpenAI chat completions (and OpenAI-compatible servers: Azure
//! OpenAI, Gemini, Mistral, vLLM, ...), the OpenAI Responses API, Anthropic Messages, and
//! Ollama's native `/api/chat`.
//!
//! # Building one
//!
//! Describe the provider with an [`HttpProviderConfig`] and call [`build`]:
//!
//! ```no_run
//! use runtape::provider::http::{HttpProviderConfig, ProviderKind, build};
//!
//! let mut config = HttpProviderConfig::new(ProviderKind::Anthropic, "claude-sonnet-4-5");
//! config.max_tokens = Some(2048);
//! let provider = build(config)?; // fails now if ANTHROPIC_API_KEY is unset or empty
//! # Ok::<(), runtape::provider::http::ProviderBuildError>(())
//! ```
//!
//! Construction refuses a missing model, a key variable that is unset or empty (the error
//! names the variable, never a value), a base URL with credentials, and plain `http://` to
//! anything but a loopback host. Base URLs: OpenAI's includes the version
//! (`https://api.openai.com/v1`, then `/chat/completions`, or `/responses` for the Responses
//! API); Azure's is the deployment URL (`https://RESOURCE.openai.azure.com/openai/deployments/
//! DEPLOYMENT`, then `/chat/completions?api-version=…`, the key in an `api-key` header);
//! Anthropic's does not include the version (`https://api.anthropic.com`, then
//! `/v1/messages`); Ollama's is the server (`http://127.0.0.1:11434`, then `/api/chat`).
//!
//! # What a request carries
//!
//! Besides messages and tools, a [`ProviderRequest`](crate::provider::ProviderRequest) carries
//! the agent's model settings and output schema, encoded per protocol (one table per vendor
//! in [`fields`], with the vendor reference of each row), and each assistant message's reasoning, sent back the way
//! the protocol requires. A call is bounded by `timeout` (the whole request, lowered to the
//! agent's remaining wall-time budget) and `idle_timeout` (silence), and a reply by
//! [`MAX_BODY_BYTES`]; a reply with nothing in it is a retryable error.
//!
//! # Calls
//!
//! Each call sends `request.model` (the route's model; the config's model only when the
//! request names none), reads the key from the environment at that moment, and returns a
//! [`ModelReply`](crate::machine::ModelReply) or a classified
//! [`ProviderError`](crate::provider::ProviderError). Streaming replies report text deltas
//! to the token sink as they arrive. Dropping the future closes the connection. The key is
//! sent only in a header marked sensitive and never appears in an error, a log line or
//! `Debug` output; redirects are not followed, so it never reaches another host.
//!
//! # The pure core
//!
//! Encoding and decoding do no I/O and can be driven with bytes: [`encode_request`],
//! [`decode_response`], and [`StreamDecoder`] (built on [`SseDecoder`] and
//! [`NdjsonDecoder`]), which gives the same reply however the body is cut into chunks.
//! [`http_error`] and [`classify`] turn error responses into typed errors; [`PricingTable`]
//! and [`cost_nanos`] price replies in integer nanodollars.

use std::sync::Arc;

use super::ModelProvider;

mod anthropic;
mod anthropic_stream;
pub mod attachments;
mod codec;
mod common;
mod config;
mod errors;
pub mod fields;
mod line_buffer;
mod ndjson;
mod ollama;
mod openai;
mod openai_stream;
mod pricing;
mod responses;
mod responses_stream;
mod sse;
mod transport;
pub mod windows;

pub use codec::{
    DecodeError, Decoded, EncodeOptions, OpenAiCompat, ReplyDetails, ReportedError, StreamDecoder,
    StreamFacts, decode_response, decode_stream, encode_request,
};
pub use config::{
    DEFAULT_ANTHROPIC_MAX_TOKENS, DEFAULT_AZURE_API_VERSION, DEFAULT_IDLE_TIMEOUT, DEFAULT_TIMEOUT,
    EnvLookup, HttpProviderConfig, ProviderBuildError, ProviderKind, process_env,
};
pub use errors::{
    ERROR_BODY_LIMIT, SNIPPET_CHARS, classify, decode_failure, http_error, name_refused_setting,
    parse_error_body, retry_after_ms, retryable_status,
};
pub use ndjson::NdjsonDecoder;
pub use pricing::{Price, PriceEntry, PricingError, PricingTable, cost_nanos};
pub use sse::{MAX_EVENT_BYTES, SseDecoder, SseEvent};
pub use transport::{ANTHROPIC_VERSION, HttpProvider, MAX_BODY_BYTES};
pub use windows::context_window;

/// Builds the provider `config` describes, reading its key from the process environment.
/// Use this where the engine turns a run spec's provider entry into a provider; it fails
/// with a one-line [`ProviderBuildError`] saying what to fix.
pub fn build(config: HttpProviderConfig) -> Result<Arc<dyn ModelProvider>, ProviderBuildError> {
    Ok(Arc::new(HttpProvider::new(config)?))
}

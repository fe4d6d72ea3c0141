//! The pure half of the adapters: [`encode_request`] turns a [`ProviderRequest`] into the
//! request body, [`decode_response`] turns a whole response body into a [`Decoded`] reply,
//! and [`StreamDecoder`] does the same for a stream fed in arbitrary byte chunks. Nothing
//! here does I/O, reads the clock or the environment, so every rule can be tested on bytes.

use std::collections::BTreeSet;

use serde_json::Value;

use super::anthropic;
use super::anthropic_stream::AnthropicStream;
use super::config::ProviderKind;
use super::ndjson::NdjsonDecoder;
use super::ollama::{self, OllamaStream};
use super::openai;
use super::openai_stream::OpenAiStream;
use super::responses;
use super::responses_stream::ResponsesStream;
use super::sse::SseDecoder;
use crate::machine::ModelReply;
use crate::provider::ProviderRequest;

/// Request settings that do not come from the [`ProviderRequest`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EncodeOptions {
    /// The model to send when the request names none.
    pub default_model: String,
    /// Ask for a streamed reply.
    pub stream: bool,
    /// The configured output-token cap (lowered to `request.remaining.tokens`).
    pub max_tokens: Option<u64>,
    /// The most output tokens the run's budgets let this call ask for
    /// ([`allowance`](crate::machine::allowance::allowance)); lowers every other cap, reasoning
    /// included where the vendor counts it as output. `None`: no budget bounds the call.
    pub budget_cap: Option<u64>,
    /// OpenAI-compatible servers only: how they differ from OpenAI's own.
    pub compat: OpenAiCompat,
}

/// What an OpenAI-compatible server does differently from OpenAI's own chat completions
/// (Mistral, for one, refuses both of OpenAI's newer fields with a 422).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OpenAiCompat {
    /// Send the output cap as the older `max_tokens` instead of `max_completion_tokens`.
    pub legacy_max_tokens: bool,
    /// Ask for usage in a streamed reply with `stream_options.include_usage`.
    pub stream_usage: bool,
}

impl Default for OpenAiCompat {
    fn default() -> Self {
        OpenAiCompat {
            legacy_max_tokens: false,
            stream_usage: true,
        }
    }
}

/// A decoded reply: the [`ModelReply`] the machine sees, plus wire details it has no field
/// for (kept for conformance tests, receipts and debugging).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Decoded {
    /// The reply. `cost_nanos` is left `None` here; the provider prices it.
    pub reply: ModelReply,
    /// What else the response said.
    pub details: ReplyDetails,
}

/// Parts of a response that [`ModelReply`] does not carry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplyDetails {
    /// Anthropic: the stop sequence that ended the reply.
    pub stop_sequence: Option<String>,
    /// Anthropic: signatures of thinking blocks, in order.
    pub thinking_signatures: Vec<String>,
    /// Anthropic: the type of each content block, in order (`text`, `tool_use`, ...).
    pub content_block_types: Vec<String>,
    /// OpenAI, not streamed: how many choices the response held (only the first is used).
    pub choices: Option<usize>,
    /// Counts from the stream parser; `None` for a whole-body response.
    pub stream: Option<StreamFacts>,
}

/// Counts a stream parser saw: handy for asserting that a parser read what was sent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamFacts {
    /// SSE events dispatched, not counting OpenAI's `[DONE]` sentinel.
    pub events: usize,
    /// Distinct SSE event types (Anthropic).
    pub event_types: BTreeSet<String>,
    /// SSE comment lines.
    pub comments: usize,
    /// Whether OpenAI's `data: [DONE]` arrived.
    pub done_sentinel: bool,
    /// Non-blank NDJSON lines.
    pub lines: usize,
}

/// An error the provider reported in a response body: an HTTP error body, or an error
/// inside an HTTP-200 response or stream.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReportedError {
    /// The error type (`rate_limit_error`, `invalid_request_error`, ...).
    pub error_type: Option<String>,
    /// The error code, as text (OpenRouter sends integers).
    pub code: Option<String>,
    /// The provider's message (empty when the body carried none).
    pub message: String,
    /// The request id, when the body carries one.
    pub request_id: Option<String>,
    /// The request field the error is about (OpenAI's `error.param`), when given.
    pub param: Option<String>,
    /// Extra structured detail (OpenRouter's `error.metadata`).
    pub metadata: Option<Value>,
}

/// Why a response could not be turned into a reply.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// A JSON document did not parse; `truncated` when it ended early.
    #[error("response is not valid JSON: {reason}")]
    InvalidJson {
        /// The input ended in the middle of the document.
        truncated: bool,
        /// The parser's complaint (positions only, no content).
        reason: String,
    },
    /// Bytes that are not UTF-8.
    #[error("response is not valid UTF-8")]
    InvalidUtf8,
    /// The model answered nothing: no text, no tool call, no refusal (`choices: []`,
    /// `content: null`, an empty content list). Retryable: the provider failed to answer.
    #[error("the model returned an empty reply (no text, no tool call)")]
    Empty,
    /// More bytes than the decoder accepts.
    #[error("response too large: a {what} exceeds {limit} bytes")]
    TooLarge {
        /// The limit.
        limit: usize,
        /// What grew too large.
        what: &'static str,
    },
    /// Valid JSON of the wrong shape.
    #[error("unexpected response shape: {0}")]
    Shape(String),
    /// The stream ended before its terminal event.
    #[error("stream ended before {expected}")]
    Truncated {
        /// The terminal event that never came.
        expected: &'static str,
    },
    /// The provider reported an error inside a successful response.
    #[error("provider reported an error: {}", crate::text::one_line(&.0.message, 500))]
    Reported(Box<ReportedError>),
}

/// The request body for `kind`. The model is `request.model`, or `options.default_model`
/// when the request names none.
pub fn encode_request(
    kind: ProviderKind,
    request: &ProviderRequest,
    options: &EncodeOptions,
) -> Value {
    match kind {
        ProviderKind::OpenAi | ProviderKind::AzureOpenAi => openai::encode(request, options),
        ProviderKind::OpenAiResponses => responses::encode(request, options),
        ProviderKind::Anthropic => anthropic::encode(request, options),
        ProviderKind::Ollama => ollama::encode(request, options),
    }
}

/// Decodes a whole (not streamed) response body of a successful call.
pub fn decode_response(kind: ProviderKind, body: &[u8]) -> Result<Decoded, DecodeError> {
    match kind {
        ProviderKind::OpenAi | ProviderKind::AzureOpenAi => openai::decode(body),
        ProviderKind::OpenAiResponses => responses::decode(body),
        ProviderKind::Anthropic => anthropic::decode(body),
        ProviderKind::Ollama => ollama::decode(body),
    }
}

/// Decodes a whole stream given as chunks (a convenience over [`StreamDecoder`]).
pub fn decode_stream<'c>(
    kind: ProviderKind,
    chunks: impl IntoIterator<Item = &'c [u8]>,
    on_text: &mut dyn FnMut(&str),
) -> Result<Decoded, DecodeError> {
    let mut decoder = StreamDecoder::new(kind);
    for chunk in chunks {
        decoder.push(chunk, on_text)?;
    }
    decoder.finish(on_text)
}

/// Decodes a streamed reply incrementally: [`push`](Self::push) each chunk as it arrives
/// (text deltas go to `on_text` at once), then [`finish`](Self::finish) when the body ends.
/// The result does not depend on how the body was cut into chunks.
#[derive(Clone, Debug)]
pub struct StreamDecoder {
    framing: Framing,
    acc: Accumulator,
    failed: Option<DecodeError>,
}

#[derive(Clone, Debug)]
enum Framing {
    Sse(SseDecoder),
    Ndjson(NdjsonDecoder),
}

#[derive(Clone, Debug)]
enum Accumulator {
    OpenAi(OpenAiStream),
    Responses(ResponsesStream),
    Anthropic(AnthropicStream),
    Ollama(OllamaStream),
}

impl StreamDecoder {
    /// A decoder for a `kind` stream (SSE for OpenAI and Anthropic, NDJSON for Ollama).
    pub fn new(kind: ProviderKind) -> Self {
        let (framing, acc) = match kind {
            ProviderKind::OpenAi | ProviderKind::AzureOpenAi => (
                Framing::Sse(SseDecoder::new()),
                Accumulator::OpenAi(OpenAiStream::default()),
            ),
            ProviderKind::OpenAiResponses => (
                Framing::Sse(SseDecoder::new()),
                Accumulator::Responses(ResponsesStream::default()),
            ),
            ProviderKind::Anthropic => (
                Framing::Sse(SseDecoder::new()),
                Accumulator::Anthropic(AnthropicStream::default()),
            ),
            ProviderKind::Ollama => (
                Framing::Ndjson(NdjsonDecoder::new()),
                Accumulator::Ollama(OllamaStream::default()),
            ),
        };
        StreamDecoder {
            framing,
            acc,
            failed: None,
        }
    }

    /// Feeds received bytes. Fails (and keeps failing) on malformed input or an error the
    /// provider reported in the stream.
    pub fn push(&mut self, chunk: &[u8], on_text: &mut dyn FnMut(&str)) -> Result<(), DecodeError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let result = self.feed(chunk, on_text);
        if let Err(e) = &result {
            self.failed = Some(e.clone());
        }
        result
    }

    /// Whether the terminal event arrived; bytes after it are ignored.
    pub fn is_done(&self) -> bool {
        acc_done(&self.acc)
    }

    /// Ends the stream: the reply, or [`DecodeError::Truncated`] when the terminal event
    /// never came.
    pub fn finish(mut self, on_text: &mut dyn FnMut(&str)) -> Result<Decoded, DecodeError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        let done = acc_done(&self.acc);
        let comments = match &mut self.framing {
            Framing::Sse(sse) => {
                // A last event closed by the end of the stream rather than a blank line counts.
                if !done && let Some(event) = sse.finish_event() {
                    match &mut self.acc {
                        Accumulator::OpenAi(a) => a.on_event(&event, on_text)?,
                        Accumulator::Responses(a) => a.on_event(&event, on_text)?,
                        Accumulator::Anthropic(a) => a.on_event(&event, on_text)?,
                        Accumulator::Ollama(_) => {}
                    }
                }
                sse.comments()
            }
            Framing::Ndjson(nd) => {
                // A last line without a newline counts, unless the stream already ended.
                if !done
                    && let Some(line) = nd.finish()?
                    && let Accumulator::Ollama(acc) = &mut self.acc
                {
                    acc.on_line(&line, on_text)?;
                }
                0
            }
        };
        let mut decoded = match self.acc {
            Accumulator::OpenAi(a) => a.finish()?,
            Accumulator::Responses(a) => a.finish()?,
            Accumulator::Anthropic(a) => a.finish()?,
            Accumulator::Ollama(a) => a.finish(true)?,
        };
        if let Some(facts) = &mut decoded.details.stream {
            facts.comments = comments;
        }
        Ok(decoded)
    }

    fn feed(&mut self, chunk: &[u8], on_text: &mut dyn FnMut(&str)) -> Result<(), DecodeError> {
        if self.is_done() {
            return Ok(());
        }
        match (&mut self.framing, &mut self.acc) {
            (Framing::Sse(sse), acc) => {
                sse.push(chunk);
                while let Some(event) = sse.next_event()? {
                    match acc {
                        Accumulator::OpenAi(a) => a.on_event(&event, on_text)?,
                        Accumulator::Responses(a) => a.on_event(&event, on_text)?,
                        Accumulator::Anthropic(a) => a.on_event(&event, on_text)?,
                        Accumulator::Ollama(_) => {}
                    }
                    if acc_done(acc) {
                        break;
                    }
                }
            }
            (Framing::Ndjson(nd), Accumulator::Ollama(acc)) => {
                nd.push(chunk);
                while let Some(line) = nd.next_line()? {
                    acc.on_line(&line, on_text)?;
                    if acc.done {
                        break;
                    }
                }
            }
            (Framing::Ndjson(_), _) => {}
        }
        Ok(())
    }
}

fn acc_done(acc: &Accumulator) -> bool {
    match acc {
        Accumulator::OpenAi(a) => a.done,
        Accumulator::Responses(a) => a.done,
        Accumulator::Anthropic(a) => a.done,
        Accumulator::Ollama(a) => a.done,
    }
}

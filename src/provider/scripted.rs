//! `scripted`: deterministic replies for tests, demos and benchmarks.
//!
//! A scripted provider is a pure function of the request, so a run that is killed and resumed
//! in another process gets the same replies: the usual script indexes replies by
//! [`ProviderRequest::turn`] (the number of assistant messages so far).

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::{ModelProvider, ProviderError, ProviderRequest, TokenSink, after};
use crate::machine::{ModelReply, ProviderErrorClass};

/// What the script answers for one request.
#[derive(Clone, Debug)]
pub struct ScriptOutcome {
    /// The reply or the failure.
    pub result: Result<ModelReply, ProviderError>,
    /// How long to wait first.
    pub latency: Duration,
    /// Text deltas to stream before returning (their concatenation should be the reply text).
    pub chunks: Vec<String>,
}

impl ScriptOutcome {
    /// A reply with no latency, streamed as one chunk.
    pub fn reply(reply: ModelReply) -> Self {
        let chunks = reply.text.clone().into_iter().collect();
        ScriptOutcome {
            result: Ok(reply),
            latency: Duration::ZERO,
            chunks,
        }
    }

    /// A failure with no latency.
    pub fn fail(error: ProviderError) -> Self {
        ScriptOutcome {
            result: Err(error),
            latency: Duration::ZERO,
            chunks: Vec::new(),
        }
    }
}

type Script = dyn Fn(&ProviderRequest) -> ScriptOutcome + Send + Sync;

/// Answers each request with the outcome its script computes.
#[derive(Clone)]
pub struct ScriptedProvider {
    name: String,
    script: Arc<Script>,
    latency: Duration,
}

impl std::fmt::Debug for ScriptedProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedProvider")
            .field("name", &self.name)
            .finish()
    }
}

impl ScriptedProvider {
    /// A provider whose answer to each request is `script(request)`.
    pub fn new(
        name: &str,
        script: impl Fn(&ProviderRequest) -> ScriptOutcome + Send + Sync + 'static,
    ) -> Self {
        ScriptedProvider {
            name: name.to_owned(),
            script: Arc::new(script),
            latency: Duration::ZERO,
        }
    }

    /// Reply `i` answers the agent's turn `i`; a turn past the end is a `bad_request` failure
    /// ("script exhausted").
    pub fn replies(name: &str, replies: Vec<ModelReply>) -> Self {
        let owner = name.to_owned();
        Self::new(name, move |req| match replies.get(req.turn()) {
            Some(r) => ScriptOutcome::reply(r.clone()),
            None => ScriptOutcome::fail(ProviderError::new(
                &owner,
                ProviderErrorClass::BadRequest,
                format!(
                    "script exhausted: no reply for turn {} of agent {}",
                    req.turn(),
                    req.agent
                ),
            )),
        })
    }

    /// The same provider, waiting `latency` before every answer (added to the script's own).
    pub fn with_latency(mut self, latency: Duration) -> Self {
        self.latency = latency;
        self
    }
}

impl ModelProvider for ScriptedProvider {
    fn describe(&self) -> String {
        format!("scripted:{}", self.name)
    }

    fn complete<'a>(
        &'a self,
        request: &'a ProviderRequest,
        tokens: TokenSink<'a>,
    ) -> BoxFuture<'a, Result<ModelReply, ProviderError>> {
        Box::pin(async move {
            let outcome = (self.script)(request);
            after(self.latency + outcome.latency).await;
            for chunk in &outcome.chunks {
                tokens(chunk);
            }
            outcome.result
        })
    }
}

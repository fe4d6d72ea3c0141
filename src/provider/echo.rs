//! `echo`: answers every call with the last user message. Needs nothing, costs nothing.

use futures_util::future::BoxFuture;

use super::{ModelProvider, ProviderError, ProviderRequest, TokenSink};
use crate::machine::{ModelReply, Role, TokenUsage};

/// Replies with the text of the last user message, prefixed with `echo: `.
#[derive(Clone, Debug, Default)]
pub struct EchoProvider;

impl ModelProvider for EchoProvider {
    fn describe(&self) -> String {
        "echo".into()
    }

    fn complete<'a>(
        &'a self,
        request: &'a ProviderRequest,
        tokens: TokenSink<'a>,
    ) -> BoxFuture<'a, Result<ModelReply, ProviderError>> {
        Box::pin(async move {
            let last = request
                .messages
                .iter()
                .rev()
                .find(|m| m.role == Role::User)
                .and_then(|m| m.content.clone())
                .unwrap_or_default();
            let text = format!("echo: {last}");
            tokens(&text);
            let input: u64 = request
                .messages
                .iter()
                .map(|m| {
                    m.content
                        .as_deref()
                        .map_or(0, |c| c.split_whitespace().count() as u64)
                })
                .sum();
            let output = text.split_whitespace().count() as u64;
            Ok(ModelReply {
                usage: Some(TokenUsage::new(input, output)),
                cost_nanos: Some(0),
                model: Some(request.model.clone()),
                ..ModelReply::text(text)
            })
        })
    }
}

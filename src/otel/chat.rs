//! The attributes of a `chat {model}` span and of the GenAI client metrics recorded when it
//! ends, from the `model.request` and `model.reply` trace events and the provider's entry in
//! the run's setup. Pure: the tracker calls these and owns the spans.

use opentelemetry::{Array, KeyValue, StringValue, Value};

use super::setup::ProviderInfo;
use crate::exec::RequestParams;
use crate::machine::TokenUsage;

/// The attributes a request sets on its span (besides operation, provider and model): the
/// spec's sampling settings, the output-token cap (the agent's, else the provider entry's),
/// `gen_ai.output.type` and the server.
pub(super) fn request_attributes(provider: &ProviderInfo, params: &RequestParams) -> Vec<KeyValue> {
    let mut out = Vec::new();
    if let Some(t) = params.temperature {
        out.push(KeyValue::new("gen_ai.request.temperature", t));
    }
    if let Some(p) = params.top_p {
        out.push(KeyValue::new("gen_ai.request.top_p", p));
    }
    if let Some(s) = params.seed {
        out.push(KeyValue::new("gen_ai.request.seed", clamp(s)));
    }
    if !params.stop.is_empty() {
        let stops = params
            .stop
            .iter()
            .map(|s| StringValue::from(super::spans::scrub(s)))
            .collect();
        out.push(KeyValue::new(
            "gen_ai.request.stop_sequences",
            Value::Array(Array::String(stops)),
        ));
    }
    if let Some(m) = params.max_tokens.or(provider.max_tokens) {
        out.push(KeyValue::new("gen_ai.request.max_tokens", clamp(m)));
    }
    let output = if params.structured { "json" } else { "text" };
    out.push(KeyValue::new("gen_ai.output.type", output));
    out.extend(provider.server_attributes());
    out
}

/// The attributes a reply sets: the server's model and response id, and token usage with its
/// cache and reasoning parts where the provider reported them. `input_tokens` counts every
/// input token, cached ones included, as the conventions ask: Anthropic reports the cache
/// reads and writes apart from its `input_tokens`, so for it they are added in.
pub(super) fn reply_attributes(
    kind: &str,
    response_model: Option<&str>,
    response_id: Option<&str>,
    usage: Option<&TokenUsage>,
) -> Vec<KeyValue> {
    let mut out = Vec::new();
    if let Some(m) = response_model {
        out.push(KeyValue::new(
            "gen_ai.response.model",
            super::spans::scrub(m),
        ));
    }
    if let Some(id) = response_id {
        out.push(KeyValue::new("gen_ai.response.id", super::spans::scrub(id)));
    }
    if let Some(u) = usage {
        out.extend([
            KeyValue::new("gen_ai.usage.input_tokens", clamp(input_tokens(kind, u))),
            KeyValue::new("gen_ai.usage.output_tokens", clamp(u.output_tokens)),
        ]);
        if let Some(read) = u.cache_read_input_tokens.or(u.cached_input_tokens) {
            out.push(KeyValue::new(
                "gen_ai.usage.cache_read.input_tokens",
                clamp(read),
            ));
        }
        if let Some(written) = u.cache_creation_input_tokens {
            out.push(KeyValue::new(
                "gen_ai.usage.cache_creation.input_tokens",
                clamp(written),
            ));
        }
        if let Some(r) = u.reasoning_tokens {
            out.push(KeyValue::new(
                "gen_ai.usage.reasoning.output_tokens",
                clamp(r),
            ));
        }
    }
    out
}

/// Every input token of a reply, cached ones included.
pub(super) fn input_tokens(kind: &str, u: &TokenUsage) -> u64 {
    if kind == "anthropic" {
        u.input_tokens
            .saturating_add(u.cache_read_input_tokens.unwrap_or(0))
            .saturating_add(u.cache_creation_input_tokens.unwrap_or(0))
    } else {
        u.input_tokens
    }
}

/// The attributes both GenAI client metrics carry for a chat: operation, provider, requested
/// model and server (the response model and `error.type` are added at the end).
pub(super) fn metric_attributes(provider: &ProviderInfo, model: &str) -> Vec<KeyValue> {
    let mut out = vec![
        KeyValue::new("gen_ai.operation.name", "chat"),
        KeyValue::new("gen_ai.provider.name", provider.kind.clone()),
        KeyValue::new("gen_ai.request.model", model.to_owned()),
    ];
    out.extend(provider.server_attributes());
    out
}

/// OpenTelemetry integers are signed.
fn clamp(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(attrs: &[KeyValue]) -> Vec<String> {
        attrs.iter().map(|kv| kv.key.to_string()).collect()
    }

    #[test]
    fn only_what_the_spec_set_is_reported() {
        let none = request_attributes(&ProviderInfo::default(), &RequestParams::default());
        assert_eq!(keys(&none), ["gen_ai.output.type"]);
        let provider = ProviderInfo {
            kind: "openai".into(),
            server: Some(("api.openai.com".into(), 443)),
            max_tokens: Some(900),
        };
        let params = RequestParams {
            temperature: Some(0.2),
            seed: Some(7),
            structured: true,
            ..RequestParams::default()
        };
        let attrs = request_attributes(&provider, &params);
        assert_eq!(
            keys(&attrs),
            [
                "gen_ai.request.temperature",
                "gen_ai.request.seed",
                "gen_ai.request.max_tokens",
                "gen_ai.output.type",
                "server.address",
                "server.port"
            ]
        );
        assert!(attrs.contains(&KeyValue::new("gen_ai.output.type", "json")));
        assert!(attrs.contains(&KeyValue::new("gen_ai.request.max_tokens", 900)));
    }

    #[test]
    fn anthropic_input_counts_its_cache() {
        let u = TokenUsage {
            cache_read_input_tokens: Some(50),
            cache_creation_input_tokens: Some(5),
            ..TokenUsage::new(10, 3)
        };
        assert_eq!(input_tokens("anthropic", &u), 65);
        assert_eq!(input_tokens("openai", &u), 10);
        let attrs = reply_attributes("anthropic", Some("m"), Some("id"), Some(&u));
        assert!(attrs.contains(&KeyValue::new("gen_ai.usage.input_tokens", 65)));
        assert!(attrs.contains(&KeyValue::new("gen_ai.usage.cache_read.input_tokens", 50)));
    }
}

//! Context windows per model: the most tokens one request (input and output together) may
//! hold, as the vendors document them. An agent whose spec does not set
//! `[agents.context] window` gets the smallest of these over its routes' models (see
//! `machine::context`); a model found here under no name has no known window, and its
//! requests are not measured unless the spec sets one.
//!
//! Sources (the vendors' model pages, read for late 2025):
//!
//! | models | window | source |
//! |---|---|---|
//! | `gpt-4o`, `gpt-4o-mini`, `gpt-4-turbo` | 128,000 | platform.openai.com/docs/models (each model's "Context window") |
//! | `gpt-4.1`, `gpt-4.1-mini`, `gpt-4.1-nano` | 1,047,576 | platform.openai.com/docs/models/gpt-4.1 |
//! | `gpt-5`, `gpt-5-mini`, `gpt-5-nano` | 400,000 | platform.openai.com/docs/models/gpt-5 |
//! | `o1`, `o3`, `o3-mini`, `o4-mini` | 200,000 | platform.openai.com/docs/models/o3 |
//! | `gpt-3.5-turbo` | 16,385 | platform.openai.com/docs/models/gpt-3.5-turbo |
//! | `claude-*` (3, 3.5, 3.7, 4, 4.5) | 200,000 | docs.anthropic.com/en/docs/about-claude/models/overview ("Context window"; the 1M beta is opt-in) |
//! | `gemini-1.5-pro` | 2,097,152 | ai.google.dev/gemini-api/docs/models ("Input token limit") |
//! | `gemini-1.5-flash`, `gemini-2.0-flash`, `gemini-2.5-pro`, `gemini-2.5-flash` | 1,048,576 | ai.google.dev/gemini-api/docs/models |
//!
//! Ollama models are left out on purpose: a local server's window is its `num_ctx` setting,
//! not the model's; set `window` in the spec for them.
//!
//! Lookup: the exact name, else the longest name here that is a prefix of the model's ending
//! at a `-`, `:`, `@` or `/` (so `gpt-4o-2024-08-06` is `gpt-4o`, and `claude-sonnet-4-5`
//! is `claude`).

/// `(model name or prefix, window in tokens)`.
const WINDOWS: &[(&str, u64)] = &[
    ("gpt-4o", 128_000),
    ("gpt-4o-mini", 128_000),
    ("gpt-4-turbo", 128_000),
    ("gpt-4.1", 1_047_576),
    ("gpt-4.1-mini", 1_047_576),
    ("gpt-4.1-nano", 1_047_576),
    ("gpt-5", 400_000),
    ("gpt-5-mini", 400_000),
    ("gpt-5-nano", 400_000),
    ("o1", 200_000),
    ("o3", 200_000),
    ("o3-mini", 200_000),
    ("o4-mini", 200_000),
    ("gpt-3.5-turbo", 16_385),
    ("claude", 200_000),
    ("gemini-1.5-pro", 2_097_152),
    ("gemini-1.5-flash", 1_048_576),
    ("gemini-2.0-flash", 1_048_576),
    ("gemini-2.5-pro", 1_048_576),
    ("gemini-2.5-flash", 1_048_576),
];

/// The documented context window of `model`, if this table knows it (see the module docs
/// for the lookup rule and the sources).
pub fn context_window(model: &str) -> Option<u64> {
    let covers = |name: &str| {
        name == model
            || model
                .strip_prefix(name)
                .and_then(|rest| rest.bytes().next())
                .is_some_and(|b| matches!(b, b'-' | b':' | b'@' | b'/'))
    };
    WINDOWS
        .iter()
        .filter(|(name, _)| covers(name))
        .max_by_key(|(name, _)| name.len())
        .map(|&(_, window)| window)
}

#[cfg(test)]
mod tests {
    use super::context_window;

    #[test]
    fn exact_names_dated_variants_and_unknown_models() {
        assert_eq!(context_window("gpt-4o"), Some(128_000));
        assert_eq!(context_window("gpt-4o-2024-08-06"), Some(128_000));
        assert_eq!(context_window("gpt-4.1-mini-2025-04-14"), Some(1_047_576));
        assert_eq!(context_window("claude-sonnet-4-5"), Some(200_000));
        assert_eq!(context_window("gpt-3.5-turbo-0125"), Some(16_385));
        // `gpt-4.5` is not `gpt-4`'s, `llama3.1` is nobody's.
        assert_eq!(context_window("gpt-4.5-preview"), None);
        assert_eq!(context_window("llama3.1"), None);
        assert_eq!(context_window("claudefoo"), None);
    }
}

//! Prices per model and the cost of a reply, in integer nanodollars (USD × 10⁹).
//!
//! The built-in table holds list prices in USD per million tokens for current OpenAI and
//! Anthropic models, as the providers published them in late 2025. Prices change: pass your
//! own entries (config field `pricing`), which take precedence over the built-in ones.
//!
//! Lookup: exact name first, then the longest table name that is a prefix of the model name
//! ending at a `-`, `:`, `@` or `/` (so `gpt-4o-2024-08-06` resolves to `gpt-4o`, while
//! `gpt-4.5` does not resolve to `gpt-4`), over your entries and the built-in ones together;
//! where both name the same model, yours wins. A reply is priced by the model the server says
//! answered (see [`PricingTable::price_for`]).
//!
//! A model found in neither has **unknown cost**: the reply's `cost_nanos` is `None`, one
//! warning is logged per provider and model, and a cost cap cannot trigger for it (the budget
//! counts the turn as unpriced, see [`crate::machine::Usage`]). Add an entry (`0` for local
//! models) to have it counted.
//!
//! Cost = uncached input × input price + cached input × cached price (the input price when
//! none is listed) + cache writes × the cache-write price (1.25 × the input price when none is
//! listed) + output × output price, rounded up to a whole nanodollar so a budget never
//! under-counts. OpenAI's `cached_input_tokens` are part of `input_tokens`; Anthropic's cache
//! reads and writes are not; both are handled.

use std::collections::HashSet;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::machine::TokenUsage;

/// A price in nanodollars per million tokens (USD per million × 10⁹).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Price {
    /// Input (prompt) tokens.
    pub input: u64,
    /// Output (completion) tokens, reasoning included.
    pub output: u64,
    /// Input tokens read from the prompt cache, where the provider discounts them.
    pub cached_input: Option<u64>,
    /// Input tokens written to the prompt cache (Anthropic's 5-minute writes), where the
    /// provider charges them apart; 1.25 × `input` when not listed.
    pub cache_write: Option<u64>,
}

/// A user-supplied price in USD per million tokens, as written in a config file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceEntry {
    /// Model name (exact, or a prefix such as `gpt-4o` that covers dated variants).
    pub model: String,
    /// USD per million input tokens.
    pub input: f64,
    /// USD per million output tokens.
    pub output: f64,
    /// USD per million cached input tokens (cache reads), if discounted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input: Option<f64>,
    /// USD per million tokens written to the prompt cache (Anthropic), if listed; 1.25 ×
    /// `input` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<f64>,
}

/// `usd_thousandths` USD/1000 per million tokens, as nanodollars per million tokens.
const fn m(usd_thousandths: u64) -> u64 {
    usd_thousandths * 1_000_000
}

/// A built-in price: model (prefix), input, output, cache reads, cache writes.
type BuiltinPrice = (&'static str, u64, u64, Option<u64>, Option<u64>);

/// Built-in list prices (USD/1000 per million tokens: 2500 is $2.50): input, output, cache
/// reads (OpenAI "cached input", Anthropic "cache hits"), cache writes (Anthropic "5m cache
/// writes"). Sources: OpenAI's and Anthropic's pricing pages as of late 2025
/// (`platform.openai.com/docs/pricing`, `docs.anthropic.com/en/docs/about-claude/pricing`:
/// 5-minute writes 1.25 × input, hits 0.1 × input); Claude Sonnet 4.6 and Opus 4.6 as listed at
/// their release (2026) at the prices of Sonnet 4.5 and Opus 4.5.
const BUILTIN: &[BuiltinPrice] = &[
    ("gpt-5", m(1250), m(10_000), Some(m(125)), None),
    ("gpt-5-mini", m(250), m(2000), Some(m(25)), None),
    ("gpt-5-nano", m(50), m(400), Some(m(5)), None),
    ("gpt-4.1", m(2000), m(8000), Some(m(500)), None),
    ("gpt-4.1-mini", m(400), m(1600), Some(m(100)), None),
    ("gpt-4.1-nano", m(100), m(400), Some(m(25)), None),
    ("gpt-4o", m(2500), m(10_000), Some(m(1250)), None),
    ("gpt-4o-2024-05-13", m(5000), m(15_000), None, None),
    ("chatgpt-4o-latest", m(5000), m(15_000), None, None),
    ("gpt-4o-mini", m(150), m(600), Some(m(75)), None),
    ("gpt-4-turbo", m(10_000), m(30_000), None, None),
    ("gpt-4", m(30_000), m(60_000), None, None),
    ("gpt-3.5-turbo", m(500), m(1500), None, None),
    ("o1", m(15_000), m(60_000), Some(m(7500)), None),
    ("o1-mini", m(1100), m(4400), Some(m(550)), None),
    ("o1-pro", m(150_000), m(600_000), None, None),
    ("o3", m(2000), m(8000), Some(m(500)), None),
    ("o3-mini", m(1100), m(4400), Some(m(550)), None),
    ("o3-pro", m(20_000), m(80_000), None, None),
    ("o4-mini", m(1100), m(4400), Some(m(275)), None),
    ("claude-3-haiku", m(250), m(1250), Some(m(30)), Some(m(300))),
    (
        "claude-3-5-haiku",
        m(800),
        m(4000),
        Some(m(80)),
        Some(m(1000)),
    ),
    (
        "claude-haiku-4-5",
        m(1000),
        m(5000),
        Some(m(100)),
        Some(m(1250)),
    ),
    (
        "claude-3-sonnet",
        m(3000),
        m(15_000),
        Some(m(300)),
        Some(m(3750)),
    ),
    (
        "claude-3-5-sonnet",
        m(3000),
        m(15_000),
        Some(m(300)),
        Some(m(3750)),
    ),
    (
        "claude-3-7-sonnet",
        m(3000),
        m(15_000),
        Some(m(300)),
        Some(m(3750)),
    ),
    (
        "claude-sonnet-4",
        m(3000),
        m(15_000),
        Some(m(300)),
        Some(m(3750)),
    ),
    (
        "claude-sonnet-4-5",
        m(3000),
        m(15_000),
        Some(m(300)),
        Some(m(3750)),
    ),
    (
        "claude-3-opus",
        m(15_000),
        m(75_000),
        Some(m(1500)),
        Some(m(18_750)),
    ),
    (
        "claude-opus-4",
        m(15_000),
        m(75_000),
        Some(m(1500)),
        Some(m(18_750)),
    ),
    (
        "claude-opus-4-1",
        m(15_000),
        m(75_000),
        Some(m(1500)),
        Some(m(18_750)),
    ),
    (
        "claude-opus-4-5",
        m(5000),
        m(25_000),
        Some(m(500)),
        Some(m(6250)),
    ),
    (
        "claude-sonnet-4-6",
        m(3000),
        m(15_000),
        Some(m(300)),
        Some(m(3750)),
    ),
    (
        "claude-opus-4-6",
        m(5000),
        m(25_000),
        Some(m(500)),
        Some(m(6250)),
    ),
];

/// Why a user price entry was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("price for `{model}` is invalid: {reason}")]
pub struct PricingError {
    /// The entry's model.
    pub model: String,
    /// What is wrong.
    pub reason: String,
}

/// Prices to look models up in: your entries first, then the built-in table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PricingTable {
    user: Vec<(String, Price)>,
}

impl PricingTable {
    /// Only the built-in prices.
    pub fn builtin() -> Self {
        Self::default()
    }

    /// The built-in prices overridden by `entries` (USD per million tokens). Fails on an
    /// empty model name or a price that is negative, not finite or above $1,000,000/M.
    pub fn with_overrides(entries: &[PriceEntry]) -> Result<Self, PricingError> {
        let user = entries
            .iter()
            .map(|e| {
                let bad = |reason: &str| PricingError {
                    model: e.model.clone(),
                    reason: reason.to_owned(),
                };
                if e.model.trim().is_empty() {
                    return Err(bad("the model name is empty"));
                }
                let nanos = |usd: f64| {
                    if !usd.is_finite() || !(0.0..=1e6).contains(&usd) {
                        return Err(bad("prices must be between 0 and 1000000 USD per million"));
                    }
                    // In range by the check above: at most 1e15, well inside u64.
                    Ok((usd * 1e9).round() as u64)
                };
                let price = Price {
                    input: nanos(e.input)?,
                    output: nanos(e.output)?,
                    cached_input: e.cached_input.map(nanos).transpose()?,
                    cache_write: e.cache_write.map(nanos).transpose()?,
                };
                Ok((e.model.clone(), price))
            })
            .collect::<Result<_, _>>()?;
        Ok(PricingTable { user })
    }

    /// The price for `model`: an exact name, else the longest prefix, searched over your
    /// entries and the built-in ones together; on the same name yours wins. So overriding
    /// `gpt-4o` re-prices `gpt-4o-2024-08-06` but not `gpt-4o-mini`.
    pub fn lookup(&self, model: &str) -> Option<Price> {
        best_match(model, self.entries(true))
    }

    /// The price of a reply: by the model the server `reported` (the one that answered),
    /// or the `requested` one when the server named none; failing that, your entry for the
    /// requested name, so an alias you priced keeps its price whatever the server calls it.
    pub fn price_for(&self, reported: Option<&str>, requested: &str) -> Option<Price> {
        self.lookup(reported.unwrap_or(requested))
            .or_else(|| best_match(requested, self.entries(false)))
    }

    /// `(name, price, is_yours)`, yours first; with `builtin`, the built-in ones after.
    fn entries(&self, builtin: bool) -> impl Iterator<Item = (&str, Price, bool)> + Clone {
        let user = self
            .user
            .iter()
            .map(|(name, price)| (name.as_str(), *price, true));
        let table = BUILTIN.iter().take(if builtin { BUILTIN.len() } else { 0 });
        let builtin = table.map(|&(name, input, output, cached_input, cache_write)| {
            let price = Price {
                input,
                output,
                cached_input,
                cache_write,
            };
            (name, price, false)
        });
        user.chain(builtin)
    }
}

fn best_match<'n>(
    model: &str,
    table: impl Iterator<Item = (&'n str, Price, bool)> + Clone,
) -> Option<Price> {
    if let Some((_, price, _)) = table.clone().find(|(name, _, _)| *name == model) {
        return Some(price);
    }
    table
        .filter(|(name, _, _)| {
            model.len() > name.len()
                && model.starts_with(name)
                // In bounds: `model` is longer than `name`.
                && matches!(model.as_bytes()[name.len()], b'-' | b':' | b'@' | b'/')
        })
        .max_by_key(|(name, _, yours)| (name.len(), *yours))
        .map(|(_, price, _)| price)
}

/// The cost of `usage` at `price`, in nanodollars, rounded up.
pub fn cost_nanos(price: &Price, usage: &TokenUsage) -> u64 {
    let t = |n: u64| u128::from(n);
    let openai_cached = usage.cached_input_tokens.unwrap_or(0);
    let uncached = usage.input_tokens.saturating_sub(openai_cached);
    let cached = openai_cached.saturating_add(usage.cache_read_input_tokens.unwrap_or(0));
    let writes = usage.cache_creation_input_tokens.unwrap_or(0);
    let cached_price = price.cached_input.unwrap_or(price.input);
    // Everything times 4 so that cache writes at 1.25 × input stay in integers.
    let writes_quadruple = match price.cache_write {
        Some(w) => 4 * t(writes) * t(w),
        None => 5 * t(writes) * t(price.input),
    };
    let quadruple = 4 * t(uncached) * t(price.input)
        + 4 * t(cached) * t(cached_price)
        + writes_quadruple
        + 4 * t(usage.output_tokens) * t(price.output);
    let nanos = quadruple.div_ceil(4 * 1_000_000);
    u64::try_from(nanos).unwrap_or(u64::MAX)
}

/// Remembers which provider/model pairs were reported as unpriced, to warn once each.
#[derive(Debug, Default)]
pub(crate) struct UnpricedWarnings {
    seen: Mutex<HashSet<(String, String)>>,
}

impl UnpricedWarnings {
    /// Logs the warning the first time `model` is unpriced for `provider`; true if it did.
    pub(crate) fn note(&self, provider: &str, model: &str) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let first = seen.insert((provider.to_owned(), model.to_owned()));
        if first {
            tracing::warn!(
                provider,
                model,
                "no price for this model: its cost is unknown and cost caps cannot trigger for it; add a pricing entry to count it"
            );
        }
        first
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_must_end_at_a_separator() {
        let t = PricingTable::builtin();
        assert_eq!(t.lookup("gpt-4o-2024-08-06"), t.lookup("gpt-4o"));
        assert_eq!(t.lookup("gpt-4o-mini-2024-07-18"), t.lookup("gpt-4o-mini"));
        assert_ne!(t.lookup("gpt-4o-2024-05-13"), t.lookup("gpt-4o"));
        assert_eq!(t.lookup("gpt-4.5-preview"), None);
        assert_eq!(
            t.lookup("gpt-4o"),
            Some(Price {
                input: 2_500_000_000,
                output: 10_000_000_000,
                cached_input: Some(1_250_000_000),
                cache_write: None,
            })
        );
        assert_eq!(t.lookup("llama3"), None);
    }

    #[test]
    fn cost_is_integer_and_rounded_up() {
        let price = Price {
            input: m(500),
            output: m(1500),
            cached_input: None,
            cache_write: None,
        };
        // 15 × $0.50/M + 19 × $1.50/M = $0.000036 = 36 000 nanodollars.
        assert_eq!(cost_nanos(&price, &TokenUsage::new(15, 19)), 36_000);
        let tiny = Price {
            input: 1,
            output: 0,
            cached_input: None,
            cache_write: None,
        };
        assert_eq!(cost_nanos(&tiny, &TokenUsage::new(1, 0)), 1);
    }
}

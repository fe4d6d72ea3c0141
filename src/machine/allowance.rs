//! How much one model call may spend before it is made: the output-token limit a request is
//! sent with so the run cannot end above its caps, or that the call must not be made at all.
//!
//! Today a cost cap is checked only between calls, so one call can overshoot it by its whole
//! price: a $0.05 cap ends at $0.15 after one call of a model priced at $10,000 per million
//! input tokens when no output limit is sent. [`allowance`] closes that gap from what the
//! machine knows before the call: what is left of the turn, token and cost budgets
//! ([`Remaining`]), the model's prices ([`CallPrices`]), a conservative estimate of the
//! request's input tokens ([`estimate_input_tokens`]) and the agent's own `max_output_tokens`.
//!
//! Pure: no I/O, no clock. Called by the HTTP provider just before a call is sent (it has the
//! model's prices and the request's bytes): a refused call becomes a `ModelFailed` whose
//! [`budget`](super::ModelFailure::budget) names the budget, which the machine treats as
//! that budget spent (`BudgetExhausted`), and a limit is sent as the request's output-token
//! cap. The token budget is not passed here (see `HttpProvider`'s use of it).

use super::budget::{BudgetKey, Remaining};

/// Tokens a provider adds per message for roles and framing, counted on top of the bytes
/// (OpenAI documents 3–4 per message; 8 leaves room for the others).
pub const FRAMING_TOKENS_PER_MESSAGE: u64 = 8;

/// A model's prices as the allowance needs them, in nanodollars per million tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallPrices {
    /// The highest price any input token of the call may be charged: the input price, or the
    /// cache-write price where a provider charges writes more (Anthropic: 1.25 × input).
    pub input: u64,
    /// The output price (reasoning included).
    pub output: u64,
}

/// What one model call may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Allowance {
    /// Make the call; ask for at most this many output tokens (`None`: no budget bounds it
    /// and the agent set no limit, so none is sent).
    Call {
        /// The output-token limit to send.
        max_output_tokens: Option<u64>,
    },
    /// Do not make the call: even its input, or its input plus one output token, would pass
    /// the cap of `key`. The run goes to `BudgetExhausted` naming `key`, as when a budget is
    /// spent.
    Refuse {
        /// The budget the call would overshoot.
        key: BudgetKey,
    },
}

/// The most input tokens a request can be charged, where `bytes` is all the text it sends
/// (system prompt, messages, tool definitions, injected memory) and `messages` its message
/// count: one token per byte plus [`FRAMING_TOKENS_PER_MESSAGE`] per message.
///
/// One token per byte is the bound that holds for every byte-level BPE tokenizer (every token
/// covers at least one byte), whatever the language; the usual 3–4 bytes per token of English
/// would under-count code, JSON and CJK text, and an under-count is what lets a call
/// overshoot. To keep the bound from refusing calls that fit, pass `reported` when the
/// previous call of the same conversation reported its input tokens: `(tokens it reported,
/// bytes it sent)`. The bytes sent since are then counted at one token per byte on top of
/// the reported figure, which was exact for the prefix.
pub fn estimate_input_tokens(bytes: u64, messages: u64, reported: Option<(u64, u64)>) -> u64 {
    let framing = messages.saturating_mul(FRAMING_TOKENS_PER_MESSAGE);
    let upper = bytes.saturating_add(framing);
    match reported {
        Some((tokens, bytes_then)) if bytes_then <= bytes => {
            let new = bytes - bytes_then;
            // The reported prefix was exact (tool definitions and framing included); the new
            // bytes are bounded as above.
            tokens.saturating_add(new).saturating_add(framing)
        }
        _ => upper,
    }
}

/// Whether the next model call may be made and with what output-token limit, given what is
/// `left` (the tighter of the agent's and the run's budgets), the model's `prices` (`None`:
/// unknown, so the cost cap does not bound the call, as it does not count it), the request's
/// `input_tokens` as [`estimate_input_tokens`] gives them and the agent's own
/// `max_output_tokens`.
///
/// The limit is the smallest of: the agent's limit; the tokens left minus the input; the
/// output tokens the cost left after the input buys (rounded down, so the output's cost,
/// rounded up, still fits). The call is refused when no turn is left, or when the input
/// alone leaves no room for one output token under the token or cost cap. Budgets are tested
/// in [`BudgetKey::ALL`] order, so a refusal names the same key a spent budget would.
pub fn allowance(
    left: &Remaining,
    prices: Option<CallPrices>,
    input_tokens: u64,
    max_output_tokens: Option<u64>,
) -> Allowance {
    if left.turns == Some(0) {
        return Allowance::Refuse {
            key: BudgetKey::Turns,
        };
    }
    let mut limit = max_output_tokens;
    let mut lower = |bound: u64| limit = Some(limit.map_or(bound, |l| l.min(bound)));
    if let Some(tokens) = left.tokens {
        let room = tokens.saturating_sub(input_tokens);
        if room == 0 {
            return Allowance::Refuse {
                key: BudgetKey::Tokens,
            };
        }
        lower(room);
    }
    if let (Some(cost), Some(prices)) = (left.cost_nanos, prices) {
        let input_cost = nanos_for(input_tokens, prices.input);
        let room = cost.saturating_sub(input_cost);
        let outputs = match prices.output {
            0 => None,
            price => Some(tokens_for(room, price)),
        };
        if input_cost >= cost || outputs == Some(0) {
            return Allowance::Refuse {
                key: BudgetKey::Cost,
            };
        }
        if let Some(outputs) = outputs {
            lower(outputs);
        }
    }
    Allowance::Call {
        max_output_tokens: limit,
    }
}

/// The cost of `tokens` at `price` nanodollars per million, rounded up (as replies are
/// priced, so the estimate is never below the charge).
fn nanos_for(tokens: u64, price: u64) -> u64 {
    let exact = u128::from(tokens) * u128::from(price);
    u64::try_from(exact.div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

/// The most tokens `nanos` buys at `price` (> 0) nanodollars per million, rounded down.
fn tokens_for(nanos: u64, price: u64) -> u64 {
    let exact = u128::from(nanos) * 1_000_000 / u128::from(price);
    u64::try_from(exact).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const USD: u64 = 1_000_000_000;

    fn cost_left(nanos: u64) -> Remaining {
        Remaining {
            cost_nanos: Some(nanos),
            ..Remaining::default()
        }
    }

    /// The case: $0.05 left, input at $10,000/M. 4 input tokens cost $0.04, so one
    /// $0.01 is left, which at $10,000/M output buys exactly 1 token.
    #[test]
    fn the_cost_left_after_the_input_sizes_the_output() {
        let prices = CallPrices {
            input: 10_000 * USD,
            output: 10_000 * USD,
        };
        let got = allowance(&cost_left(USD / 20), Some(prices), 4, None);
        assert_eq!(
            got,
            Allowance::Call {
                max_output_tokens: Some(1)
            }
        );
        // Input and output at the limit together cost exactly the cap, never more.
        assert_eq!(
            nanos_for(4, prices.input) + nanos_for(1, prices.output),
            USD / 20
        );
    }

    #[test]
    fn an_input_that_alone_reaches_the_cap_is_refused() {
        let prices = CallPrices {
            input: 10_000 * USD,
            output: 1,
        };
        assert_eq!(
            allowance(&cost_left(USD / 20), Some(prices), 5, Some(100)),
            Allowance::Refuse {
                key: BudgetKey::Cost
            }
        );
        // A fraction of a nanodollar counts as a whole one, as replies are priced.
        let tiny = CallPrices {
            input: 1,
            output: 1,
        };
        assert_eq!(
            allowance(&cost_left(1), Some(tiny), 1, None),
            Allowance::Refuse {
                key: BudgetKey::Cost
            }
        );
        // Room for the input but not one output token is refused too.
        let dear_output = CallPrices {
            input: 10_000 * USD,
            output: 100_000 * USD,
        };
        assert_eq!(
            allowance(&cost_left(USD / 20), Some(dear_output), 4, None),
            Allowance::Refuse {
                key: BudgetKey::Cost
            }
        );
    }

    #[test]
    fn the_smallest_bound_wins_and_unknown_prices_do_not_bound() {
        let left = Remaining {
            tokens: Some(1_000),
            cost_nanos: Some(USD),
            turns: Some(3),
            ..Remaining::default()
        };
        let prices = CallPrices {
            input: USD,
            output: 2 * USD,
        };
        // $1 left, 100 input tokens cost $0.0001: the output could buy ~500,000 tokens, so
        // the token budget (900 left after the input) binds, then the agent's 50.
        let limit = |p, max| match allowance(&left, p, 100, max) {
            Allowance::Call { max_output_tokens } => max_output_tokens,
            refused => panic!("refused: {refused:?}"),
        };
        assert_eq!(limit(Some(prices), None), Some(900));
        assert_eq!(limit(Some(prices), Some(50)), Some(50));
        assert_eq!(limit(None, None), Some(900));
        let unbounded = allowance(&Remaining::default(), None, 10_000, None);
        assert_eq!(
            unbounded,
            Allowance::Call {
                max_output_tokens: None
            }
        );
    }

    #[test]
    fn no_turn_or_token_left_is_refused_in_budget_order() {
        let left = Remaining {
            turns: Some(0),
            tokens: Some(0),
            ..Remaining::default()
        };
        assert_eq!(
            allowance(&left, None, 1, None),
            Allowance::Refuse {
                key: BudgetKey::Turns
            }
        );
        let tokens = Remaining {
            tokens: Some(10),
            ..Remaining::default()
        };
        assert_eq!(
            allowance(&tokens, None, 10, None),
            Allowance::Refuse {
                key: BudgetKey::Tokens
            }
        );
    }

    #[test]
    fn free_output_is_bounded_only_by_the_input_cost() {
        let prices = CallPrices {
            input: USD,
            output: 0,
        };
        assert_eq!(
            // 10 input tokens at $1/M cost 10,000 nanodollars.
            allowance(&cost_left(10_001), Some(prices), 10, None),
            Allowance::Call {
                max_output_tokens: None
            }
        );
        assert_eq!(
            allowance(&cost_left(10_000), Some(prices), 10, None),
            Allowance::Refuse {
                key: BudgetKey::Cost
            }
        );
    }

    #[test]
    fn the_estimate_never_undercounts_and_uses_a_reported_prefix() {
        // Without a report: one token per byte plus framing.
        assert_eq!(estimate_input_tokens(300, 2, None), 316);
        // A report for the first 280 bytes (70 tokens): 70 + 20 new bytes + framing.
        assert_eq!(estimate_input_tokens(300, 2, Some((70, 280))), 106);
        // A report above the plain bound (tool definitions not in `bytes`) is believed.
        assert_eq!(estimate_input_tokens(300, 2, Some((1_000, 280))), 1_036);
        // A report for a longer conversation than this one (edited away): ignored.
        assert_eq!(estimate_input_tokens(300, 2, Some((70, 400))), 316);
    }
}

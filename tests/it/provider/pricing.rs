//! Pricing: exact then longest-prefix lookup, your prices before the built-in ones, integer
//! nanodollar costs, and an unknown model costing "unknown" with one warning per provider
//! and model.

use crate::support;

use runtape::machine::TokenUsage;
use runtape::provider::http::{PriceEntry, PricingTable, ProviderKind, cost_nanos};
use support::provider::*;

const USD: u64 = 1_000_000_000;

#[test]
fn the_required_models_are_priced_and_dated_variants_resolve() {
    let t = PricingTable::builtin();
    for model in [
        "gpt-4o",
        "gpt-4o-mini",
        "gpt-4.1",
        "gpt-4.1-mini",
        "gpt-4.1-nano",
        "o3",
        "o4-mini",
        "gpt-3.5-turbo",
        "claude-3-5-haiku",
        "claude-3-5-sonnet",
        "claude-3-7-sonnet",
        "claude-sonnet-4",
        "claude-opus-4",
        "claude-haiku-4-5",
    ] {
        assert!(t.lookup(model).is_some(), "{model} is priced");
    }
    assert_eq!(t.lookup("gpt-4o-2024-08-06"), t.lookup("gpt-4o"));
    assert_eq!(
        t.lookup("claude-3-5-haiku-20241022"),
        t.lookup("claude-3-5-haiku")
    );
    assert_eq!(
        t.lookup("claude-haiku-4-5-20251001"),
        t.lookup("claude-haiku-4-5")
    );
    assert_eq!(t.lookup("o4-mini-2025-04-16"), t.lookup("o4-mini"));
    assert_ne!(
        t.lookup("o3-mini"),
        t.lookup("o3"),
        "the longer prefix wins"
    );
    assert_eq!(
        t.lookup("gpt-4o").unwrap().input,
        2_500_000_000,
        "$2.50 per million"
    );
    assert_eq!(t.lookup("gpt-4o").unwrap().output, 10 * USD);
    assert_eq!(t.lookup("llama3"), None);
    assert_eq!(
        t.lookup("gpt-4oops"),
        None,
        "a prefix must end at a separator"
    );
}

#[test]
fn your_prices_take_precedence() {
    let t = PricingTable::with_overrides(&[
        PriceEntry {
            model: "gpt-4o".into(),
            input: 1.0,
            output: 2.0,
            cached_input: Some(0.5),
            cache_write: None,
        },
        PriceEntry {
            model: "llama3".into(),
            input: 0.0,
            output: 0.0,
            cached_input: None,
            cache_write: None,
        },
    ])
    .unwrap();
    let p = t.lookup("gpt-4o-2024-08-06").unwrap();
    assert_eq!(
        (p.input, p.output, p.cached_input),
        (USD, 2 * USD, Some(USD / 2))
    );
    assert_eq!(t.lookup("llama3:8b").unwrap().output, 0);
    assert_eq!(
        t.lookup("gpt-4o-mini"),
        PricingTable::builtin().lookup("gpt-4o-mini"),
        "a longer built-in name is not shadowed by a shorter one of yours"
    );
    // The server's model decides; your entry for the requested alias also applies.
    assert_eq!(t.price_for(Some("moonshotai/kimi-k2"), "gpt-4o"), Some(p));
    assert_eq!(
        PricingTable::builtin().price_for(Some("moonshotai/kimi-k2"), "gpt-4o"),
        None
    );
    assert_eq!(
        PricingTable::builtin().price_for(None, "gpt-4o"),
        PricingTable::builtin().lookup("gpt-4o")
    );
}

#[test]
fn costs_are_integer_nanodollars() {
    let t = PricingTable::builtin();
    let gpt4o = t.lookup("gpt-4o").unwrap();
    assert_eq!(
        cost_nanos(&gpt4o, &TokenUsage::new(1_000_000, 1_000_000)),
        12_500_000_000
    );
    // OpenAI: 400 of the 1000 input tokens were cached at $1.25/M.
    let cached = TokenUsage {
        cached_input_tokens: Some(400),
        ..TokenUsage::new(1000, 0)
    };
    assert_eq!(cost_nanos(&gpt4o, &cached), 600 * 2_500 + 400 * 1_250);
    // Anthropic: reads at the cached price, writes at 1.25 × input, both beside input_tokens.
    let sonnet = t.lookup("claude-sonnet-4-20250514").unwrap();
    let usage = TokenUsage {
        cache_read_input_tokens: Some(1000),
        cache_creation_input_tokens: Some(1000),
        ..TokenUsage::new(1000, 100)
    };
    assert_eq!(
        cost_nanos(&sonnet, &usage),
        1000 * 3_000 + 1000 * 300 + 1000 * 3_750 + 100 * 15_000
    );
    // Rounded up: a single token never costs nothing when its price is not zero.
    let mini = t.lookup("gpt-4o-mini").unwrap();
    assert_eq!(cost_nanos(&mini, &TokenUsage::new(1, 0)), 150);
    let tiny = PricingTable::with_overrides(&[PriceEntry {
        model: "t".into(),
        input: 0.0001,
        output: 0.0,
        cached_input: None,
        cache_write: None,
    }])
    .unwrap();
    assert_eq!(
        cost_nanos(&tiny.lookup("t").unwrap(), &TokenUsage::new(1, 0)),
        1
    );
}

fn reply_json(model: &str) -> String {
    format!(
        r#"{{"model":"{model}","choices":[{{"index":0,"message":{{"content":"hi"}},"finish_reason":"stop"}}],"usage":{{"prompt_tokens":1000,"completion_tokens":100}}}}"#
    )
}

#[tokio::test]
async fn replies_are_priced_and_unknown_models_warn_once_per_provider_and_model() {
    let capture = Capture::default();
    let _installed = capture.install();
    let known =
        MockServer::always(Behaviour::json(200, &reply_json("gpt-4o-mini-2024-07-18"))).await;
    let mut cfg = config_for(ProviderKind::OpenAi, &known, "gpt-4o-mini");
    cfg.stream = false;
    let reply = provider(cfg, "k-1234")
        .complete_decoded(&hello("gpt-4o-mini"), &|_| {})
        .await
        .unwrap()
        .reply;
    assert_eq!(reply.cost_nanos, Some(1000 * 150 + 100 * 600));
    assert!(capture.warnings().is_empty());

    let unknown = MockServer::always(Behaviour::json(200, &reply_json("mystery-1"))).await;
    let mut cfg = config_for(ProviderKind::OpenAi, &unknown, "mystery-1");
    cfg.stream = false;
    cfg.name = "first".into();
    let first = provider(cfg.clone(), "k-1234");
    for _ in 0..3 {
        let reply = first
            .complete_decoded(&hello("mystery-1"), &|_| {})
            .await
            .unwrap()
            .reply;
        assert_eq!(reply.cost_nanos, None, "unknown cost, never 0");
        assert!(reply.usage.is_some());
    }
    assert_eq!(capture.warnings().len(), 1, "{:?}", capture.warnings());
    let warning = &capture.warnings()[0];
    assert!(
        warning.contains("mystery-1")
            && warning.contains("first")
            && warning.contains("cost caps cannot trigger"),
        "{warning}"
    );

    cfg.name = "second".into();
    let second = provider(cfg.clone(), "k-1234");
    second
        .complete_decoded(&hello("mystery-1"), &|_| {})
        .await
        .unwrap();
    assert_eq!(capture.warnings().len(), 2, "one more for another provider");

    cfg.name = "third".into();
    cfg.pricing = vec![PriceEntry {
        model: "mystery".into(),
        input: 1.0,
        output: 1.0,
        cached_input: None,
        cache_write: None,
    }];
    let priced = provider(cfg, "k-1234")
        .complete_decoded(&hello("mystery-1"), &|_| {})
        .await
        .unwrap()
        .reply;
    assert_eq!(priced.cost_nanos, Some(1100 * 1_000));
    assert_eq!(capture.warnings().len(), 2, "a priced model does not warn");
}

#[test]
fn cache_writes_use_the_listed_price_and_reads_the_discount() {
    let t = PricingTable::builtin();
    let opus = t.lookup("claude-opus-4-5").unwrap();
    let mut u = TokenUsage::new(0, 0);
    u.cache_creation_input_tokens = Some(1_000_000);
    assert_eq!(cost_nanos(&opus, &u), 6_250_000_000, "$6.25/M writes");
    u.cache_creation_input_tokens = None;
    u.cache_read_input_tokens = Some(1_000_000);
    assert_eq!(cost_nanos(&opus, &u), 500_000_000, "$0.50/M reads");
    // A user price with a cache-write price of its own.
    let mine = PricingTable::with_overrides(&[PriceEntry {
        model: "my-claude".into(),
        input: 2.0,
        output: 8.0,
        cached_input: Some(0.2),
        cache_write: Some(4.0),
    }])
    .unwrap()
    .lookup("my-claude")
    .unwrap();
    let mut w = TokenUsage::new(0, 0);
    w.cache_creation_input_tokens = Some(1_000_000);
    assert_eq!(cost_nanos(&mine, &w), 4_000_000_000);
    // OpenAI: cached tokens are part of input_tokens and cost the cached price.
    let gpt = t.lookup("gpt-4o").unwrap();
    let mut o = TokenUsage::new(1_000_000, 0);
    o.cached_input_tokens = Some(1_000_000);
    assert_eq!(cost_nanos(&gpt, &o), 1_250_000_000);
}

//! Construction fails early with one clear line: missing model, key variable unset or empty
//! (named, never printed), plain http to a non-loopback host, credentials in the URL, zero
//! timeout, bad prices. Ollama and keyless local OpenAI-compatible servers need no key.

use crate::support;

use std::time::Duration;

use runtape::provider::ModelProvider;
use runtape::provider::http::{
    HttpProvider, HttpProviderConfig, PriceEntry, ProviderBuildError, ProviderKind, build,
};
use support::provider::{KEY_VAR, env_with};

fn try_build(
    config: HttpProviderConfig,
    env: &[(&str, &str)],
) -> Result<HttpProvider, ProviderBuildError> {
    HttpProvider::with_env(config, env_with(env))
}

fn keyed(kind: ProviderKind, base_url: &str) -> HttpProviderConfig {
    let mut c = HttpProviderConfig::new(kind, "some-model");
    c.base_url = base_url.to_owned();
    c.api_key_env = Some(KEY_VAR.to_owned());
    c
}

#[test]
fn defaults_per_kind() {
    let openai = HttpProviderConfig::new(ProviderKind::OpenAi, "gpt-4o");
    assert_eq!(openai.base_url, "https://api.openai.com/v1");
    assert_eq!(openai.api_key_env.as_deref(), Some("OPENAI_API_KEY"));
    assert!(openai.stream);
    let anthropic = HttpProviderConfig::new(ProviderKind::Anthropic, "claude-sonnet-4-5");
    assert_eq!(anthropic.base_url, "https://api.anthropic.com");
    assert_eq!(anthropic.api_key_env.as_deref(), Some("ANTHROPIC_API_KEY"));
    let ollama = HttpProviderConfig::new(ProviderKind::Ollama, "llama3");
    assert_eq!(ollama.base_url, "http://127.0.0.1:11434");
    assert_eq!(ollama.api_key_env, None);
    let p = try_build(ollama, &[]).expect("Ollama needs no key");
    assert_eq!(p.describe(), "ollama llama3 at http://127.0.0.1:11434");
}

#[test]
fn a_missing_model_is_refused() {
    let err = try_build(HttpProviderConfig::new(ProviderKind::Ollama, "  "), &[]).unwrap_err();
    assert!(matches!(err, ProviderBuildError::MissingModel { .. }));
    assert_eq!(
        err.to_string(),
        "provider `ollama`: no model configured – set `model` to the model to call"
    );
}

#[test]
fn an_unset_or_empty_key_variable_is_named_and_explained() {
    let cfg = keyed(ProviderKind::OpenAi, "https://api.openai.com/v1");
    let unset = try_build(cfg.clone(), &[]).unwrap_err();
    assert_eq!(
        unset.to_string(),
        format!(
            "provider `openai`: environment variable `{KEY_VAR}` is unset – export it with the API key"
        )
    );
    let empty = try_build(cfg.clone(), &[(KEY_VAR, "  ")]).unwrap_err();
    assert_eq!(
        empty.to_string(),
        format!(
            "provider `openai`: environment variable `{KEY_VAR}` is empty – put the API key in it"
        )
    );
    let broken = try_build(cfg.clone(), &[(KEY_VAR, "abc\ndef-secret")]).unwrap_err();
    assert!(matches!(broken, ProviderBuildError::KeyInvalid { .. }));
    assert!(
        !broken.to_string().contains("def-secret") && !format!("{broken:?}").contains("def-secret")
    );
    assert!(try_build(cfg, &[(KEY_VAR, "sk-ok")]).is_ok());
}

#[test]
fn the_process_environment_is_what_build_reads() {
    let mut cfg = keyed(ProviderKind::OpenAi, "https://api.openai.com/v1");
    cfg.api_key_env = Some("RUNTAPE_TEST_SURELY_UNSET_VARIABLE_7D1F".into());
    let err = build(cfg).err().expect("unset in the process environment");
    assert!(
        matches!(err, ProviderBuildError::KeyUnset { ref var, .. } if var == "RUNTAPE_TEST_SURELY_UNSET_VARIABLE_7D1F")
    );
}

#[test]
fn anthropic_always_needs_a_key_and_local_openai_servers_may_have_none() {
    let mut anthropic = keyed(ProviderKind::Anthropic, "https://api.anthropic.com");
    anthropic.api_key_env = None;
    assert!(matches!(
        try_build(anthropic, &[]).unwrap_err(),
        ProviderBuildError::KeyRequired { .. }
    ));
    let mut local = keyed(ProviderKind::OpenAi, "http://127.0.0.1:8000/v1");
    local.api_key_env = None;
    assert!(try_build(local, &[]).is_ok());
}

#[test]
fn plain_http_only_for_loopback_hosts() {
    let ok = [
        "http://127.0.0.1:8080/v1",
        "http://127.9.9.9",
        "http://localhost:11434",
        "http://LOCALHOST",
        "http://[::1]:8000",
        "https://api.example.com/v1",
        "https://10.0.0.5/v1",
    ];
    for url in ok {
        assert!(
            try_build(keyed(ProviderKind::OpenAi, url), &[(KEY_VAR, "k")]).is_ok(),
            "{url}"
        );
    }
    let insecure = [
        "http://api.openai.com/v1",
        "http://10.0.0.5:8000",
        "http://localhost.example.com",
        "http://[::2]:80",
        "http://128.0.0.1",
    ];
    for url in insecure {
        let err = try_build(keyed(ProviderKind::OpenAi, url), &[(KEY_VAR, "k")]).unwrap_err();
        assert!(
            matches!(err, ProviderBuildError::InsecureBaseUrl { .. }),
            "{url}: {err}"
        );
        assert!(err.to_string().contains("use https://"), "{err}");
    }
    for url in [
        "ftp://example.com",
        "not a url",
        "https://",
        "https://example.com/v1?key=1",
    ] {
        let err = try_build(keyed(ProviderKind::OpenAi, url), &[(KEY_VAR, "k")]).unwrap_err();
        assert!(
            matches!(err, ProviderBuildError::InvalidBaseUrl { .. }),
            "{url}: {err}"
        );
    }
    let err = try_build(
        keyed(ProviderKind::OpenAi, "https://user:pw@example.com"),
        &[(KEY_VAR, "k")],
    )
    .unwrap_err();
    assert!(matches!(err, ProviderBuildError::CredentialsInUrl { .. }));
    assert!(!err.to_string().contains("pw"));
}

#[test]
fn an_empty_base_url_means_the_default_and_a_zero_timeout_is_refused() {
    let mut cfg = keyed(ProviderKind::Anthropic, "");
    let p = try_build(cfg.clone(), &[(KEY_VAR, "k")]).unwrap();
    assert_eq!(
        p.describe(),
        "anthropic some-model at https://api.anthropic.com"
    );
    cfg.timeout = Duration::ZERO;
    assert!(matches!(
        try_build(cfg, &[(KEY_VAR, "k")]).unwrap_err(),
        ProviderBuildError::ZeroTimeout { .. }
    ));
}

#[test]
fn bad_prices_are_refused() {
    for (input, output) in [
        (-1.0, 1.0),
        (f64::NAN, 1.0),
        (1.0, f64::INFINITY),
        (2e6, 1.0),
    ] {
        let mut cfg = keyed(ProviderKind::Ollama, "http://127.0.0.1:11434");
        cfg.pricing = vec![PriceEntry {
            model: "m".into(),
            input,
            output,
            cached_input: None,
            cache_write: None,
        }];
        let err = try_build(cfg, &[(KEY_VAR, "k")]).unwrap_err();
        assert!(
            matches!(err, ProviderBuildError::InvalidPricing { .. }),
            "{input} {output}"
        );
    }
}

#[test]
fn config_debug_names_the_variable_only() {
    let cfg = keyed(ProviderKind::OpenAi, "https://api.openai.com/v1");
    let shown = format!("{cfg:?}");
    assert!(shown.contains(KEY_VAR), "{shown}");
    let p = try_build(cfg, &[(KEY_VAR, "sk-visible-if-leaked-123")]).unwrap();
    let shown = format!("{p:?}");
    assert!(
        shown.contains("HttpProvider") && !shown.contains("sk-visible-if-leaked-123"),
        "{shown}"
    );
}

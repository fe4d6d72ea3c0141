//! `[session]` and `[retriever]` of a spec file (revision 5): how the file's runs of a session
//! keep their history, and the program asked for passages before each model turn.
//!
//! ```toml
//! [session]                          # used by `runtape run SPEC "…" --session NAME`
//! window = { messages = 40 }         # or { tokens = 8000 }: what is kept verbatim
//! summarizer = "assistant"           # the agent that summarises what falls out (default:
//!                                    # each agent its own)
//!
//! [retriever]
//! command = ["python3", "retrieve.py"]  # query JSON on stdin, passages JSON on stdout
//! agents = ["assistant"]             # default: every agent
//! timeout_ms = 10000                 # default 10000
//! max_bytes = 65536                  # passages larger than this are refused (≤ 1 MiB)
//! env = ["INDEX_PATH"]               # variables passed besides the minimal environment
//!                                    # (or a table: { INDEX = "${INDEX_PATH}", MODE = "fast" })
//! env_all = false
//! ```

use std::path::Path;

use serde::Deserialize;

use super::error::{At, ConfigError};
use super::file::RawAgent;
use crate::exec::SessionSettings;
use crate::machine::{AgentId, RetrieverSpec, SessionWindow, did_you_mean};
use crate::tool::command::CommandConfig;
use crate::tool::retriever::{
    DEFAULT_MAX_BYTES, DEFAULT_TIMEOUT_MS, MAX_MAX_BYTES, RetrieverConfig,
};

/// `[session]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSession {
    pub(crate) window: Option<RawWindow>,
    pub(crate) summarizer: Option<String>,
}

/// `window = { messages = N }` or `{ tokens = T }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawWindow {
    pub(crate) messages: Option<u32>,
    pub(crate) tokens: Option<u64>,
}

/// `[retriever]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRetriever {
    pub(crate) command: Option<Vec<String>>,
    pub(crate) agents: Option<Vec<String>>,
    pub(crate) timeout_ms: Option<u64>,
    pub(crate) max_bytes: Option<u64>,
    pub(crate) env: Option<super::program_env::RawEnv>,
    pub(crate) env_all: Option<bool>,
    /// What its program may reach (see [`crate::tool::confine`]); paths relative to the spec.
    pub(crate) confine: Option<crate::tool::confine::Confine>,
    /// The label its passages carry (see [`super::guard`]).
    pub(crate) trust: Option<crate::machine::Integrity>,
    pub(crate) confidentiality: Option<crate::machine::Confidentiality>,
}

/// The file's `[session]`, checked: one window of at least 1, a summarizer that is an agent.
pub(crate) fn session(
    raw: Option<&RawSession>,
    agents: &[RawAgent],
) -> Result<SessionSettings, ConfigError> {
    let Some(raw) = raw else {
        return Ok(SessionSettings::default());
    };
    let mut settings = SessionSettings::default();
    if let Some(w) = &raw.window {
        settings.window = match (w.messages, w.tokens) {
            (Some(n), None) if n > 0 => SessionWindow::Messages(n),
            (None, Some(t)) if t > 0 => SessionWindow::Tokens(t),
            _ => {
                return Err(ConfigError::invalid(
                    "session.window",
                    "give one of `{ messages = N }` (the last N messages) or `{ tokens = T }` (the latest messages that fit T estimated tokens), at least 1",
                ));
            }
        };
    }
    if let Some(name) = &raw.summarizer {
        settings.summarizer = Some(agent(name, agents, "session.summarizer")?);
    }
    Ok(settings)
}

/// The file's `[retriever]`: which agents ask it (for the machine) and how it is run (for the
/// setup).
pub(crate) fn retriever(
    raw: Option<&RawRetriever>,
    agents: &[RawAgent],
    spec_dir: &Path,
) -> Result<Option<(RetrieverSpec, RetrieverConfig)>, ConfigError> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    let Some((program, args)) = raw.command.as_deref().and_then(<[String]>::split_first) else {
        return Err(ConfigError::invalid(
            "retriever.command",
            "a retriever needs `command = [\"program\", \"arg\", …]` – the program gets the query as JSON on stdin and prints passages as JSON",
        ));
    };
    let program = super::program::resolve(program, spec_dir).map_err(|reason| {
        ConfigError::CommandNotFound {
            at: At::field("retriever.command[0]"),
            tool: "retriever".into(),
            reason,
        }
    })?;
    if raw.timeout_ms == Some(0) {
        return Err(ConfigError::invalid(
            "retriever.timeout_ms",
            "timeout_ms must be at least 1 – give the longest a retrieval may take, in milliseconds",
        ));
    }
    let max_bytes = match raw.max_bytes {
        None => DEFAULT_MAX_BYTES,
        Some(n) if n >= 1 && n <= MAX_MAX_BYTES as u64 => n as usize,
        Some(n) => {
            return Err(ConfigError::invalid(
                "retriever.max_bytes",
                format!("max_bytes must be between 1 and {MAX_MAX_BYTES} (got {n})"),
            ));
        }
    };
    let mut which = None;
    if let Some(names) = &raw.agents {
        let mut ids = Vec::with_capacity(names.len());
        for (i, name) in names.iter().enumerate() {
            let id = agent(name, agents, &format!("retriever.agents[{i}]"))?;
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        which = Some(ids);
    }
    let env = super::program_env::compile(raw.env.as_ref(), "retriever")?;
    let command = CommandConfig {
        name: "retriever".into(),
        description: String::new(),
        schema: serde_json::json!({"type": "object"}),
        program,
        args: args.to_vec(),
        dir: spec_dir.to_path_buf(),
        timeout_ms: Some(raw.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS)),
        idempotent: true,
        read_only: true,
        env: env.pass,
        env_set: env.set,
        env_all: raw.env_all.unwrap_or(false),
        reconcile: None,
        confine: super::compile::confinement("retriever", raw.confine.as_ref(), spec_dir)?,
    };
    Ok(Some((
        RetrieverSpec {
            agents: which,
            results: super::guard::label(raw.trust, raw.confidentiality),
        },
        RetrieverConfig { command, max_bytes },
    )))
}

/// `name` as an agent of the file, or an error at `field` with a did-you-mean.
fn agent(name: &str, agents: &[RawAgent], field: &str) -> Result<AgentId, ConfigError> {
    if agents.iter().any(|a| a.id == name) {
        return Ok(AgentId::from(name));
    }
    let hint = did_you_mean(name, agents.iter().map(|a| a.id.as_str()));
    Err(ConfigError::invalid(
        field,
        format!(
            "`{}` is not an agent of this file{hint}",
            crate::text::one_line(name, 80)
        ),
    ))
}

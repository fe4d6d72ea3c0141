//! The environment of every program runtape starts: command tools, the retriever, stdio MCP
//! servers (and their reconcile commands). One policy for all of them.
//!
//! A program gets a **minimal environment**, never the engine's whole one, so provider keys,
//! the receipt signing key, the serve token, database passwords and whatever else the
//! engine's process holds do not reach it (and from there tool results, the database and the
//! next model request). What each kind of program receives:
//!
//! | what | command tool, retriever | stdio MCP server |
//! |---|---|---|
//! | `PATH`, `HOME`, `USER`, `LOGNAME`, `SHELL`, `LANG`, `LANGUAGE`, `LC_*`, `TZ`, `TMPDIR`, `TERM` | yes, when runtape has them | yes, when runtape has them |
//! | the call's `RUNTAPE_RUN_ID`, `RUNTAPE_AGENT`, `RUNTAPE_CALL_ID`, `RUNTAPE_TOOL`, `RUNTAPE_IDEMPOTENCY_KEY`, `RUNTAPE_LEASE_EPOCH` | yes | no (a server outlives calls and runs) |
//! | variables named in `env = ["NAME", …]` or as `env = { NAME = "${OTHER}" }` | yes, when runtape has them; their values are registered as secrets and scrubbed from everything stored or printed | the same |
//! | a variable of an `--env-file` ([`crate::secrets::env_file`]) | only when named as above (it wins over runtape's own variable of that name); never as a base variable or under `env_all` | the same |
//! | `env = { NAME = "text" }` | that text, stored with the run (so the loader refuses it for credential-shaped names and URLs with credentials) | the same |
//! | runtape's other variables | only with `env_all = true`, and even then not credential-shaped names ([`looks_secret`]: `*PASS*`, `*SECRET*`, `*TOKEN*`, `*_KEY`, `*_SK`, `AWS_*`, `RUNTAPE_*`, …), values with URL credentials (`scheme://user:pw@host`), or the setup's provider key variables, unless named one by one | the same |
//! | `RUNTAPE_RECEIPT_KEY` (the receipt signing key) | never | never |
//!
//! An HTTP MCP server (`url = …`) starts no program: it gets only its `headers_env` headers.
//! The spec's `env`, `env_all` and literal values are part of the run's stored setup, so a
//! resumed run starts its programs with the same policy.
//!
//! [`looks_secret`]: crate::secrets::looks_secret

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};

use serde::{Deserialize, Serialize};

use super::ToolContext;

/// The receipt signing key's variable: no program ever gets it (a program holding the key
/// could sign receipts of its own).
pub const SIGNING_KEY_ENV: &str = crate::receipt::DEFAULT_KEY_ENV;

/// Variables every program gets from the engine's environment when set there (with every
/// `LC_*`): where to find programs and files, who and where it runs, how to write text.
pub const BASE_ENV: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TERM",
];

/// Carries the run id into the program's environment; with [`EPOCH_ENV`] it lets a later
/// driver find programs an earlier one left running (see [`super::orphans`]).
pub const RUN_ID_ENV: &str = "RUNTAPE_RUN_ID";

/// The lease epoch of the driver that started the program.
pub const EPOCH_ENV: &str = "RUNTAPE_LEASE_EPOCH";

/// True for the variables of the minimal environment ([`BASE_ENV`] and `LC_*`).
pub fn is_base(name: &str) -> bool {
    BASE_ENV.contains(&name) || name.starts_with("LC_")
}

/// A value a spec sets for one of a program's variables (`env = { NAME = "…" }`), as the
/// setup stores it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum EnvValue {
    /// This text, as written. It is stored with the run, so it is configuration, never a
    /// credential (the loader refuses credential-shaped names and URLs with credentials).
    Value(String),
    /// The value of the engine's variable of this name when the program starts
    /// (`NAME = "${OTHER}"`), if it has one: passed explicitly, so registered as a secret.
    FromEnv(String),
}

/// How a program's environment is chosen (see the [module docs](self)). Built from what the
/// setup stores for the program, plus what the setup withholds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EnvPolicy {
    /// Names passed through besides the base set (the spec's `env` list).
    pub pass: Vec<String>,
    /// Variables set by the spec (`env = { NAME = "…" }`), by the program's name for them.
    pub set: BTreeMap<String, EnvValue>,
    /// Pass everything else too, minus what [`withheld`](Self::withheld) and the credential
    /// rules exclude (the spec's `env_all`).
    pub all: bool,
    /// Names kept out under [`all`](Self::all) (the setup's provider key variables).
    pub withheld: Vec<String>,
}

impl EnvPolicy {
    /// The program's environment, chosen from `engine` (the engine's variables, e.g.
    /// `std::env::vars_os()`). The values of the variables it passes explicitly (named in
    /// [`pass`](Self::pass) or read by [`EnvValue::FromEnv`]) are registered as secrets
    /// ([`crate::secrets::register_value`]) before the program can print them. For a server;
    /// a tool call uses [`build`](Self::build).
    pub fn environment<I>(&self, engine: I) -> BTreeMap<OsString, OsString>
    where
        I: IntoIterator<Item = (OsString, OsString)>,
    {
        let mut engine: BTreeMap<OsString, OsString> = engine.into_iter().collect();
        // An env file's variable is seen only where the spec names it, never by the base set
        // or `env_all`.
        for name in self.explicit_sources() {
            if let Some(value) = crate::secrets::env_file::file_var(name) {
                engine.insert(OsString::from(name), OsString::from(value));
            }
        }
        for name in self.explicit_sources() {
            if let Some(value) = engine.get(OsStr::new(name)) {
                crate::secrets::register_value(name, &value.to_string_lossy());
            }
        }
        self.choose(&engine)
    }

    /// The environment of one call of tool `tool`: [`environment`](Self::environment) plus
    /// the call's `RUNTAPE_*` context from `ctx`. Later entries win, so the call's own
    /// variables cannot be overridden from outside.
    pub fn build<I>(&self, engine: I, tool: &str, ctx: &ToolContext) -> BTreeMap<OsString, OsString>
    where
        I: IntoIterator<Item = (OsString, OsString)>,
    {
        let mut out = self.environment(engine);
        let call = [
            (RUN_ID_ENV, ctx.run_id.as_str().to_owned()),
            ("RUNTAPE_AGENT", ctx.agent.as_str().to_owned()),
            ("RUNTAPE_CALL_ID", ctx.call_id.clone()),
            ("RUNTAPE_IDEMPOTENCY_KEY", ctx.idempotency_key.clone()),
            ("RUNTAPE_TOOL", tool.to_owned()),
            (EPOCH_ENV, ctx.lease_epoch.to_string()),
        ];
        for (name, value) in call {
            out.insert(OsString::from(name), OsString::from(value));
        }
        out
    }

    /// Whether the engine's variable `name`, holding `value`, reaches the program under its
    /// own name.
    pub fn passes(&self, name: &OsStr, value: &OsStr) -> bool {
        let Some(name) = name.to_str() else {
            // Not a name a spec can write, so only `env_all` could pass it; keep it out.
            return false;
        };
        if name == SIGNING_KEY_ENV {
            return false;
        }
        if is_base(name) || self.pass.iter().any(|p| p == name) {
            return true;
        }
        self.all
            && !self.withheld.iter().any(|w| w == name)
            && !crate::secrets::looks_secret(name)
            && !crate::secrets::carries_url_credentials(&value.to_string_lossy())
    }

    /// Registers with [`crate::secrets`] the values, in this process's environment, of the
    /// variables this policy passes explicitly. [`environment`](Self::environment) does it
    /// when a program starts; a setup does it up front when it is installed.
    pub fn register_secrets(&self) {
        for name in self.explicit_sources() {
            if let Some(value) = crate::secrets::env_file::var(name) {
                crate::secrets::register_value(name, &value);
            }
        }
    }

    /// The engine variables passed because the spec names them: `pass` (minus the base set,
    /// which every program gets anyway) and the sources of `FromEnv` values.
    fn explicit_sources(&self) -> impl Iterator<Item = &str> {
        let named = self.pass.iter().map(String::as_str).filter(|n| !is_base(n));
        let read = self.set.values().filter_map(|v| match v {
            EnvValue::FromEnv(source) => Some(source.as_str()),
            EnvValue::Value(_) => None,
        });
        named.chain(read)
    }

    /// The environment chosen from `engine`, without registering anything.
    fn choose(&self, engine: &BTreeMap<OsString, OsString>) -> BTreeMap<OsString, OsString> {
        let mut out: BTreeMap<OsString, OsString> = engine
            .iter()
            .filter(|(name, value)| self.passes(name, value))
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        for (name, value) in &self.set {
            if name == SIGNING_KEY_ENV {
                continue;
            }
            let value = match value {
                EnvValue::Value(text) => OsString::from(text),
                EnvValue::FromEnv(source) if source == SIGNING_KEY_ENV => continue,
                EnvValue::FromEnv(source) => match engine.get(OsStr::new(source)) {
                    Some(value) => value.clone(),
                    None => continue,
                },
            };
            out.insert(OsString::from(name), value);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::machine::{AgentId, RunId};

    fn engine() -> Vec<(OsString, OsString)> {
        [
            ("PATH", "/bin"),
            ("HOME", "/home/u"),
            ("TZ", "UTC"),
            ("LC_ALL", "C"),
            ("OPENAI_API_KEY", "sk-1"),
            ("RUNTAPE_RECEIPT_KEY", "seed"),
            ("RUNTAPE_SERVE_TOKEN", "tok"),
            ("PGPASSWORD", "pw"),
            ("STRIPE_SK", "sk"),
            ("AWS_SECRET_ACCESS_KEY", "aws"),
            ("DATABASE_URL", "postgres://u:pw@h/db"),
            ("EDITOR", "vi"),
            ("MY_PROVIDER", "k"),
            ("RUNTAPE_RUN_ID", "spoofed"),
        ]
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect()
    }

    fn ctx() -> ToolContext {
        ToolContext {
            run_id: RunId::new("run-1"),
            agent: AgentId::from("a"),
            call_id: "c".into(),
            idempotency_key: "run-1:3:0".into(),
            lease_epoch: 4,
            cancel: CancellationToken::new(),
        }
    }

    fn chosen(policy: &EnvPolicy) -> BTreeMap<String, String> {
        let engine = engine().into_iter().collect();
        policy
            .choose(&engine)
            .into_iter()
            .map(|(k, v)| {
                (
                    k.to_string_lossy().into_owned(),
                    v.to_string_lossy().into_owned(),
                )
            })
            .collect()
    }

    fn names(policy: &EnvPolicy) -> Vec<String> {
        chosen(policy).into_keys().collect()
    }

    #[test]
    fn the_default_is_minimal_and_a_call_adds_its_context() {
        assert_eq!(
            names(&EnvPolicy::default()),
            ["HOME", "LC_ALL", "PATH", "TZ"]
        );
        let env = EnvPolicy::default().build(Vec::new(), "t", &ctx());
        let keys: Vec<_> = env.keys().map(|k| k.to_string_lossy()).collect();
        assert_eq!(
            keys,
            [
                "RUNTAPE_AGENT",
                "RUNTAPE_CALL_ID",
                "RUNTAPE_IDEMPOTENCY_KEY",
                "RUNTAPE_LEASE_EPOCH",
                "RUNTAPE_RUN_ID",
                "RUNTAPE_TOOL"
            ]
        );
        let env = EnvPolicy::default().build(engine(), "t", &ctx());
        assert_eq!(env[OsStr::new("RUNTAPE_RUN_ID")], "run-1", "not spoofable");
        assert_eq!(env[OsStr::new("RUNTAPE_LEASE_EPOCH")], "4");
    }

    #[test]
    fn env_all_withholds_credentials_unless_named_and_never_passes_the_signing_key() {
        let all = EnvPolicy {
            all: true,
            withheld: vec!["MY_PROVIDER".into()],
            ..EnvPolicy::default()
        };
        assert_eq!(names(&all), ["EDITOR", "HOME", "LC_ALL", "PATH", "TZ"]);
        let named = EnvPolicy {
            pass: vec![
                "OPENAI_API_KEY".into(),
                "DATABASE_URL".into(),
                "RUNTAPE_RECEIPT_KEY".into(),
            ],
            ..all
        };
        let seen = names(&named);
        assert!(seen.contains(&"OPENAI_API_KEY".to_owned()));
        assert!(seen.contains(&"DATABASE_URL".to_owned()));
        assert!(!seen.contains(&"RUNTAPE_RECEIPT_KEY".to_owned()));
        assert!(!seen.contains(&"PGPASSWORD".to_owned()));
    }

    #[test]
    fn set_values_are_literal_or_read_by_name_and_win_over_the_engine() {
        let policy = EnvPolicy {
            set: [
                ("LOG_LEVEL", EnvValue::Value("debug".into())),
                ("TZ", EnvValue::Value("Europe/Paris".into())),
                ("API_TOKEN", EnvValue::FromEnv("STRIPE_SK".into())),
                ("ABSENT", EnvValue::FromEnv("NOT_SET_ANYWHERE".into())),
                ("KEY", EnvValue::FromEnv(SIGNING_KEY_ENV.into())),
                (SIGNING_KEY_ENV, EnvValue::Value("x".into())),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
            ..EnvPolicy::default()
        };
        let env = chosen(&policy);
        assert_eq!(env["LOG_LEVEL"], "debug");
        assert_eq!(env["TZ"], "Europe/Paris");
        assert_eq!(env["API_TOKEN"], "sk");
        assert!(!env.contains_key("STRIPE_SK"), "renamed, not passed twice");
        for absent in ["ABSENT", "KEY", SIGNING_KEY_ENV] {
            assert!(!env.contains_key(absent), "{absent}");
        }
        assert_eq!(
            policy.explicit_sources().collect::<Vec<_>>(),
            ["NOT_SET_ANYWHERE", "STRIPE_SK", SIGNING_KEY_ENV]
        );
    }
}

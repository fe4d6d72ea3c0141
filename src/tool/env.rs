//! The environment a command tool's program starts with.
//!
//! Programs the model drives get a **minimal environment** by default, never the engine's
//! whole one, so provider keys, the receipt signing key and whatever else the engine's
//! process holds do not leak into tool results (and from there into the database and the
//! next model request). The table:
//!
//! | variables | passed |
//! |---|---|
//! | `PATH`, `HOME`, `LANG`, `LC_*`, `TMPDIR` | always, when the engine has them |
//! | `RUNTAPE_RUN_ID`, `RUNTAPE_AGENT`, `RUNTAPE_CALL_ID`, `RUNTAPE_TOOL`, `RUNTAPE_IDEMPOTENCY_KEY`, `RUNTAPE_LEASE_EPOCH` | always: the call's context |
//! | the names in the tool's `env` | when the engine has them — including a provider key variable, since the spec asked for it by name |
//! | everything else | only with `env_all = true`, and even then **not** credential-looking variables ([`looks_secret`]) nor the key variables the setup's providers name, unless `env` names them |
//! | [`SIGNING_KEY_ENV`] | never |
//!
//! [`looks_secret`]: crate::secrets::looks_secret

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};

use super::ToolContext;

/// The receipt signing key's variable: no tool ever gets it (a tool holding the key could sign
/// receipts of its own).
pub const SIGNING_KEY_ENV: &str = crate::receipt::DEFAULT_KEY_ENV;

/// Variables every program gets from the engine's environment when set there.
pub const BASE_ENV: &[&str] = &["PATH", "HOME", "LANG", "TMPDIR"];

/// Carries the run id into the program's environment; with [`EPOCH_ENV`] it lets a later
/// driver find programs an earlier one left running (see [`super::orphans`]).
pub const RUN_ID_ENV: &str = "RUNTAPE_RUN_ID";

/// The lease epoch of the driver that started the program.
pub const EPOCH_ENV: &str = "RUNTAPE_LEASE_EPOCH";

/// How a program's environment is chosen.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EnvPolicy {
    /// Names passed through besides the base set (the spec's `env`).
    pub pass: Vec<String>,
    /// Pass everything else too, minus what [`withheld`](Self::withheld) and
    /// [`looks_secret`](crate::secrets::looks_secret) exclude (the spec's `env_all`).
    pub all: bool,
    /// Names kept out under [`all`](Self::all) (the setup's provider key variables).
    pub withheld: Vec<String>,
}

impl EnvPolicy {
    /// The program's whole environment, chosen from `engine` (the engine's variables) for the
    /// call `ctx` of tool `tool`. Later entries win, so the call's own variables cannot be
    /// overridden from outside.
    pub fn build<I>(&self, engine: I, tool: &str, ctx: &ToolContext) -> BTreeMap<OsString, OsString>
    where
        I: IntoIterator<Item = (OsString, OsString)>,
    {
        let mut out = BTreeMap::new();
        for (name, value) in engine {
            if self.passes(&name) {
                out.insert(name, value);
            }
        }
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

    /// Whether the engine's variable `name` reaches the program.
    pub fn passes(&self, name: &OsStr) -> bool {
        let Some(name) = name.to_str() else {
            // Not a name a spec can write, so only `env_all` could pass it; keep it out.
            return false;
        };
        if name == SIGNING_KEY_ENV {
            return false;
        }
        if BASE_ENV.contains(&name) || name.starts_with("LC_") {
            return true;
        }
        if self.pass.iter().any(|p| p == name) {
            return true;
        }
        self.all
            && !self.withheld.iter().any(|w| w == name)
            && !crate::secrets::looks_secret(name)
            && !name.starts_with("RUNTAPE_")
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
            ("LC_ALL", "C"),
            ("OPENAI_API_KEY", "sk-1"),
            ("RUNTAPE_RECEIPT_KEY", "seed"),
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

    fn names(policy: &EnvPolicy) -> Vec<String> {
        policy
            .build(engine(), "t", &ctx())
            .keys()
            .map(|k| k.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn the_default_is_minimal() {
        assert_eq!(
            names(&EnvPolicy::default()),
            [
                "HOME",
                "LC_ALL",
                "PATH",
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
    fn env_all_withholds_keys_unless_named_and_never_passes_the_signing_key() {
        let all = EnvPolicy {
            all: true,
            withheld: vec!["MY_PROVIDER".into()],
            ..EnvPolicy::default()
        };
        let seen = names(&all);
        assert!(seen.contains(&"EDITOR".to_owned()));
        for hidden in ["OPENAI_API_KEY", "MY_PROVIDER", "RUNTAPE_RECEIPT_KEY"] {
            assert!(!seen.contains(&hidden.to_owned()), "{hidden}");
        }
        let named = EnvPolicy {
            pass: vec!["OPENAI_API_KEY".into(), "RUNTAPE_RECEIPT_KEY".into()],
            ..all
        };
        let seen = names(&named);
        assert!(seen.contains(&"OPENAI_API_KEY".to_owned()));
        assert!(!seen.contains(&"RUNTAPE_RECEIPT_KEY".to_owned()));
    }
}

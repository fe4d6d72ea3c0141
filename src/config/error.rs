//! What can be wrong with a spec file, as one line that points at the spot:
//! `FILE:LINE:COL: FIELD: what is wrong – what to do`.

use std::fmt;
use std::path::PathBuf;

use crate::machine::{SpecError, did_you_mean};
use crate::provider::http::ProviderBuildError;

/// A position in a spec file (1-based line and column, the column counted in characters).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    /// The file, as the caller named it.
    pub file: PathBuf,
    /// Line, from 1.
    pub line: usize,
    /// Column, from 1.
    pub column: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file.display(), self.line, self.column)
    }
}

/// The field an error is about (`agents[1].tools[0]`), and where it is when that is known.
/// Displays as `FILE:LINE:COL: FIELD`, or `FIELD` alone when the error did not come from a
/// file (a setup rebuilt from a stored run).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct At {
    /// Where in the file, if known (boxed to keep errors small).
    pub location: Option<Box<Location>>,
    /// The dotted field path, in the file's own terms.
    pub field: String,
}

impl At {
    /// A field without a known location (filled in later by the loader).
    pub(crate) fn field(field: impl Into<String>) -> Self {
        At {
            location: None,
            field: field.into(),
        }
    }
}

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.location {
            Some(loc) => write!(f, "{loc}: {}", self.field),
            None => f.write_str(&self.field),
        }
    }
}

/// A spec file (or a stored setup) that cannot be used. Every message is one line saying
/// what is wrong and what to do; nothing has run when it is returned. Use
/// [`ConfigError::is_internal`] to choose the exit code.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    Read {
        /// The file.
        file: PathBuf,
        /// Why.
        reason: String,
    },
    /// The file is not TOML.
    Syntax {
        /// Where the parser stopped.
        at: Location,
        /// The parser's complaint.
        message: String,
    },
    /// A key the format does not know (usually a typo).
    UnknownField {
        /// The field.
        at: At,
        /// The key as written.
        key: String,
        /// A did-you-mean, or empty.
        hint: String,
    },
    /// A value of the wrong type, out of range, missing or otherwise unusable.
    Invalid {
        /// The field.
        at: At,
        /// What is wrong and what to do.
        message: String,
    },
    /// The machine refused the spec (ids, grants, schemas, the plan, caps).
    Spec {
        /// The field, translated from the machine's path to the file's.
        at: At,
        /// The machine's error.
        error: Box<SpecError>,
        /// Its text without the machine's path, with what to do.
        message: String,
    },
    /// Two providers share a name.
    DuplicateProvider {
        /// The second one's name field.
        at: At,
        /// The name.
        name: String,
    },
    /// An agent (or a fallback) names a provider the file does not define.
    UnknownProvider {
        /// The provider field.
        at: At,
        /// The agent.
        agent: String,
        /// The name used.
        provider: String,
        /// A did-you-mean, or empty.
        hint: String,
    },
    /// An HTTP provider could not be built: a bad or insecure base URL, a key variable that
    /// is unset or empty (named, its value never shown), bad pricing.
    Provider {
        /// The field at fault.
        at: At,
        /// What the provider layer said.
        error: ProviderBuildError,
    },
    /// A command tool's program is neither on `PATH` nor at its path.
    CommandNotFound {
        /// The command field.
        at: At,
        /// The tool.
        tool: String,
        /// What was looked for, and where.
        reason: String,
    },
    /// A setup could not be read back (written by a newer runtape, or damaged) or written as
    /// JSON.
    Setup {
        /// What is wrong and what to do.
        reason: String,
    },
}

/// The longest message a [`ConfigError`] displays (one line; quoted input is cut).
const MAX_MESSAGE_CHARS: usize = 2000;

impl fmt::Display for ConfigError {
    /// One line: input quoted in the message (keys, names, values from the file) cannot break
    /// it, since control characters are escaped and the whole is cut at
    /// `MAX_MESSAGE_CHARS`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            ConfigError::Read { file, reason } => format!(
                "{}: cannot read the spec file: {reason} – check the path",
                file.display()
            ),
            ConfigError::Syntax { at, message } => {
                format!("{at}: not valid TOML: {message} – fix the syntax here")
            }
            ConfigError::UnknownField { at, key, hint } => {
                format!("{at}: unknown field `{key}`{hint} – fix its name or remove it")
            }
            ConfigError::Invalid { at, message } | ConfigError::Spec { at, message, .. } => {
                format!("{at}: {message}")
            }
            ConfigError::DuplicateProvider { at, name } => {
                format!("{at}: duplicate provider name `{name}` – give each provider a unique name")
            }
            ConfigError::UnknownProvider {
                at,
                agent,
                provider,
                hint,
            } => format!(
                "{at}: agent `{agent}` uses unknown provider `{provider}`{hint} – define it under [[providers]] or fix the name"
            ),
            ConfigError::Provider { at, error } => format!("{at}: {error}"),
            ConfigError::CommandNotFound { at, tool, reason } => format!(
                "{at}: tool `{tool}`: {reason} – install it, fix the path (relative paths start at the spec file's directory), or make it executable"
            ),
            ConfigError::Setup { reason } => format!("run setup: {reason}"),
        };
        f.write_str(&crate::text::one_line(&text, MAX_MESSAGE_CHARS))
    }
}

impl std::error::Error for ConfigError {}

impl ConfigError {
    /// True when the fault is not in the user's input: a stored setup that cannot be read
    /// back or written, or an HTTP client that could not be created. The command line exits 3
    /// for these and 2 (usage) for every other config error.
    pub fn is_internal(&self) -> bool {
        matches!(
            self,
            ConfigError::Setup { .. }
                | ConfigError::Provider {
                    error: ProviderBuildError::Client { .. },
                    ..
                }
        )
    }

    /// The field the error is about, when it is about one.
    pub fn field(&self) -> Option<&str> {
        self.at().map(|at| at.field.as_str())
    }

    /// Where in the file the error is, when known.
    pub fn location(&self) -> Option<&Location> {
        match self {
            ConfigError::Syntax { at, .. } => Some(at),
            other => other.at().and_then(|at| at.location.as_deref()),
        }
    }

    fn at(&self) -> Option<&At> {
        match self {
            ConfigError::UnknownField { at, .. }
            | ConfigError::Invalid { at, .. }
            | ConfigError::Spec { at, .. }
            | ConfigError::DuplicateProvider { at, .. }
            | ConfigError::UnknownProvider { at, .. }
            | ConfigError::Provider { at, .. }
            | ConfigError::CommandNotFound { at, .. } => Some(at),
            ConfigError::Read { .. } | ConfigError::Syntax { .. } | ConfigError::Setup { .. } => {
                None
            }
        }
    }

    /// Fills in the location of the field with `locate` when it is not known yet.
    pub(crate) fn located(mut self, locate: impl FnOnce(&str) -> Location) -> Self {
        let at = match &mut self {
            ConfigError::UnknownField { at, .. }
            | ConfigError::Invalid { at, .. }
            | ConfigError::Spec { at, .. }
            | ConfigError::DuplicateProvider { at, .. }
            | ConfigError::UnknownProvider { at, .. }
            | ConfigError::Provider { at, .. }
            | ConfigError::CommandNotFound { at, .. } => at,
            ConfigError::Read { .. } | ConfigError::Syntax { .. } | ConfigError::Setup { .. } => {
                return self;
            }
        };
        if at.location.is_none() {
            at.location = Some(Box::new(locate(&at.field)));
        }
        self
    }

    /// An invalid value of `field`.
    pub(crate) fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError::Invalid {
            at: At::field(field),
            message: message.into(),
        }
    }

    /// The machine's refusal, with its path translated to the file's terms.
    pub(crate) fn from_spec(error: SpecError) -> Self {
        let spec_path = error.path().to_owned();
        let text = error.to_string();
        let bare = text
            .strip_prefix(&format!("{spec_path}: "))
            .unwrap_or(&text)
            .to_owned();
        let advice = match &error {
            SpecError::BadAgentId { .. } => " – rename it",
            SpecError::DuplicateAgent { .. } => " – give each agent a unique id",
            SpecError::DuplicateTool { .. } => " – give each tool a unique, non-empty name",
            SpecError::BadToolName { .. } => " – rename it",
            SpecError::UnknownTool { .. } => {
                " – define it under [[tools]] or remove it from the agent's `tools`"
            }
            SpecError::BadSchema { .. } => " – fix the schema",
            SpecError::OutOfRange { .. } => " – change the value",
            SpecError::UnknownAgent { .. } => " – use the id of an [[agents]] entry",
            SpecError::BadCondition { .. } => " – fix the condition",
            _ => "",
        };
        ConfigError::Spec {
            at: At::field(super::paths::file_path(&spec_path)),
            message: format!("{bare}{advice}"),
            error: Box::new(error),
        }
    }

    /// A deserialisation error at `field`, reworded for a person: unknown fields and
    /// variants get a did-you-mean, Rust type names become words.
    pub(crate) fn from_serde(field: String, message: &str) -> Self {
        let ticked = backticked(message);
        if message.starts_with("unknown field")
            && let Some((key, expected)) = ticked.split_first()
        {
            let hint = did_you_mean(key, expected.iter().map(String::as_str));
            return ConfigError::UnknownField {
                at: At::field(field),
                key: key.clone(),
                hint,
            };
        }
        if message.starts_with("unknown variant")
            && let Some((value, expected)) = ticked.split_first()
        {
            let hint = did_you_mean(value, expected.iter().map(String::as_str));
            let list = expected
                .iter()
                .map(|e| format!("`{e}`"))
                .collect::<Vec<_>>()
                .join(", ");
            return ConfigError::invalid(
                field,
                format!("unknown value `{value}`{hint} – use one of {list}"),
            );
        }
        if message.starts_with("invalid type: unit variant, expected newtype variant")
            && field.ends_with(".on_overflow")
        {
            // The only choice of a word-valued setting that takes settings of its own.
            return ConfigError::invalid(
                field,
                "on_overflow = \"summarize\" needs the agent that writes the summary – write on_overflow = { summarize = { agent = \"NAME\" } }",
            );
        }
        if message.starts_with("missing field")
            && let Some(key) = ticked.first()
        {
            return ConfigError::invalid(
                format!("{field}.{key}").trim_start_matches('.').to_owned(),
                format!("missing field `{key}` – add it"),
            );
        }
        let worded = message
            .replace("expected u64", "expected a non-negative integer")
            .replace("expected u32", "expected a non-negative integer below 2^32")
            .replace("expected f64", "expected a number");
        let flat = worded.split_whitespace().collect::<Vec<_>>().join(" ");
        ConfigError::invalid(field, format!("{flat} – fix the value"))
    }
}

/// The `backticked` words of a serde message, in order.
fn backticked(message: &str) -> Vec<String> {
    message
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_fields_suggest_the_closest_name() {
        let e = ConfigError::from_serde(
            "agents[0].sytem_prompt".into(),
            "unknown field `sytem_prompt`, expected one of `id`, `system_prompt`, `provider`",
        );
        assert_eq!(
            e.to_string(),
            "agents[0].sytem_prompt: unknown field `sytem_prompt` (did you mean `system_prompt`?) – fix its name or remove it"
        );
    }

    #[test]
    fn unknown_variants_list_the_choices() {
        let e = ConfigError::from_serde(
            "agents[0].on_exhausted".into(),
            "unknown variant `hand`, expected `handoff` or `pause`",
        );
        assert_eq!(
            e.to_string(),
            "agents[0].on_exhausted: unknown value `hand` – use one of `handoff`, `pause`"
        );
    }

    #[test]
    fn internal_errors_are_told_apart() {
        assert!(ConfigError::Setup { reason: "x".into() }.is_internal());
        assert!(!ConfigError::invalid("run", "bad").is_internal());
    }
}

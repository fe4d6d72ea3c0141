//! Per-run overrides of a loaded spec file (`runtape run --model … --max-steps … --timeout …
//! --max-retries … --run-id …`): applied to the file's spec before the run is created, so the
//! run's stored spec (sealed by its head, read by replay, `fork` and `verify`) carries them.

use super::OpsError;
use crate::config::RunFile;
use crate::machine::tags::tag_problem;
use crate::machine::{RunId, RunSpec};

/// The longest caller-chosen run id: 64 characters.
pub const MAX_CHOSEN_RUN_ID_CHARS: usize = 64;

/// What one run changes of its spec file. Empty by default: the file as written.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    /// `PROVIDER/MODEL` (every agent) or `AGENT=PROVIDER/MODEL`, applied in order: each sets
    /// the agent's primary route (its fallbacks stay). The provider must be one of the file's
    /// `[[providers]]`; the model is everything after the first `/`.
    pub models: Vec<String>,
    /// The run-wide cap on model turns (`limits.max_turns`); the run ends `turn_limit` there.
    pub max_steps: Option<u64>,
    /// The run-wide wall-clock cap (`limits.max_wall_ms`), as `500ms`, `30s`, `5m` or `2h`.
    pub timeout: Option<String>,
    /// Retries after a failed model call, on every route of every agent (each route's
    /// `max_attempts` becomes this plus one).
    pub max_retries: Option<u32>,
    /// The run's id instead of a generated one: 1 to [`MAX_CHOSEN_RUN_ID_CHARS`] letters,
    /// digits, `-`, `_` or `.`, beginning with a letter or digit. A run with that id existing
    /// already in the database is refused when the run is created.
    pub run_id: Option<String>,
    /// `KEY=VALUE` tags, in order (a key given twice is refused): stored in the run's spec
    /// ([`Spec::tags`](crate::machine::Spec::tags)), shown by `show`, `ls` and `serve`, and
    /// filtered on by `ls --tag` and `serve`'s run list.
    pub tags: Vec<String>,
    /// Files given with the goal (`--attach`), in order: images and PDFs the entry agent's
    /// first message carries (see [`attach`](super::attach)).
    pub attach: Vec<std::path::PathBuf>,
}

impl Overrides {
    /// Applies every override to `file`'s spec (checked again as a whole) and returns the
    /// chosen run id, if one is given. Call after [`load`](super::load) and before the run is
    /// started or queued; on an error (an unknown agent or provider, a malformed value, a bad
    /// id) the file is unchanged and nothing has been written.
    pub fn apply(&self, file: &mut RunFile) -> Result<Option<RunId>, OpsError> {
        let run_id = self.run_id.as_deref().map(chosen_run_id).transpose()?;
        let mut spec = file.spec.spec().clone();
        for model in &self.models {
            let (agent, provider, name) = parse_model(model)?;
            if !file.setup.providers.iter().any(|p| p.name() == provider) {
                let known: Vec<&str> = file.setup.providers.iter().map(|p| p.name()).collect();
                return Err(bad(format!(
                    "--model {}: no provider `{provider}` in the spec file (its providers: {})",
                    super::quoted(model),
                    known.join(", ")
                )));
            }
            let mut matched = false;
            for a in spec.agents.iter_mut() {
                if agent.is_none_or(|want| a.id.as_str() == want) {
                    matched = true;
                    if let Some(primary) = a.routes.first_mut() {
                        primary.provider = provider.to_owned();
                        primary.model = name.to_owned();
                    }
                }
            }
            if !matched {
                let known: Vec<&str> = spec.agents.iter().map(|a| a.id.as_str()).collect();
                return Err(bad(format!(
                    "--model {}: no agent `{}` in the spec file (its agents: {})",
                    super::quoted(model),
                    agent.unwrap_or_default(),
                    known.join(", ")
                )));
            }
        }
        if let Some(steps) = self.max_steps {
            if steps == 0 {
                return Err(bad("--max-steps must be at least 1".to_owned()));
            }
            spec.limits.max_turns = Some(steps);
        }
        if let Some(timeout) = &self.timeout {
            spec.limits.max_wall_ms = Some(parse_duration_ms(timeout)?);
        }
        if let Some(retries) = self.max_retries {
            let attempts = retries
                .checked_add(1)
                .ok_or_else(|| bad(format!("--max-retries {retries} is too large")))?;
            for route in spec.agents.iter_mut().flat_map(|a| a.routes.iter_mut()) {
                route.max_attempts = attempts;
            }
        }
        for tag in &self.tags {
            let (key, value) = parse_tag(tag)?;
            if spec.tags.insert(key.to_owned(), value.to_owned()).is_some() {
                return Err(bad(format!(
                    "--tag {}: the key `{key}` is given twice",
                    super::quoted(tag)
                )));
            }
        }
        let files = super::attachments::read_all(&self.attach)?;
        spec.attachments
            .extend(files.iter().map(|(attachment, _)| attachment.clone()));
        file.spec = RunSpec::build(spec).map_err(|e| bad(format!("the overridden spec: {e}")))?;
        file.files.extend(files.into_iter().map(|(_, bytes)| bytes));
        Ok(run_id)
    }
}

fn bad(why: String) -> OpsError {
    OpsError::BadOverride(why)
}

/// `KEY=VALUE` → (key, value), each checked by [`tag_problem`].
pub fn parse_tag(s: &str) -> Result<(&str, &str), OpsError> {
    let Some((key, value)) = s.split_once('=') else {
        return Err(bad(format!("--tag {}: write KEY=VALUE", super::quoted(s))));
    };
    match tag_problem(key, value) {
        Some(why) => Err(bad(format!("--tag {}: {why}", super::quoted(s)))),
        None => Ok((key, value)),
    }
}

/// `[AGENT=]PROVIDER/MODEL` → (agent, provider, model).
fn parse_model(s: &str) -> Result<(Option<&str>, &str, &str), OpsError> {
    let malformed = || {
        bad(format!(
            "--model {}: write PROVIDER/MODEL (every agent) or AGENT=PROVIDER/MODEL",
            super::quoted(s)
        ))
    };
    let (agent, rest) = match s.split_once('=') {
        Some((agent, rest)) => (Some(agent), rest),
        None => (None, s),
    };
    let (provider, model) = rest.split_once('/').ok_or_else(malformed)?;
    if agent.is_some_and(str::is_empty) || provider.is_empty() || model.is_empty() {
        return Err(malformed());
    }
    Ok((agent, provider, model))
}

/// `500ms`, `30s`, `5m`, `2h` (a whole number and a unit) → milliseconds, at least 1.
fn parse_duration_ms(s: &str) -> Result<u64, OpsError> {
    let malformed = || {
        bad(format!(
            "--timeout {}: write a whole number and a unit: 500ms, 30s, 5m or 2h",
            super::quoted(s)
        ))
    };
    let split = s
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(malformed)?;
    let (number, unit) = s.split_at(split);
    let n: u64 = number.parse().map_err(|_| malformed())?;
    let per = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(malformed()),
    };
    match n.checked_mul(per) {
        Some(0) => Err(bad("--timeout must be at least 1ms".to_owned())),
        Some(ms) => Ok(ms),
        None => Err(malformed()),
    }
}

/// A caller-chosen run id, checked by the rule on [`Overrides::run_id`].
fn chosen_run_id(s: &str) -> Result<RunId, OpsError> {
    let ok = (1..=MAX_CHOSEN_RUN_ID_CHARS).contains(&s.len())
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !ok {
        return Err(bad(format!(
            "--run-id {}: a run id is 1 to {MAX_CHOSEN_RUN_ID_CHARS} letters, digits, `-`, `_` or `.`, beginning with a letter or digit",
            super::quoted(s)
        )));
    }
    Ok(RunId::new(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_durations_and_ids_parse_by_their_rules() {
        assert_eq!(parse_model("s/m").unwrap(), (None, "s", "m"));
        assert_eq!(parse_model("a=s/x/y").unwrap(), (Some("a"), "s", "x/y"));
        for bad in ["s", "/m", "s/", "=s/m", "a=s"] {
            assert!(parse_model(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_duration_ms("30s").unwrap(), 30_000);
        assert_eq!(parse_duration_ms("2h").unwrap(), 7_200_000);
        assert_eq!(parse_duration_ms("5ms").unwrap(), 5);
        for bad in ["30", "s", "0s", "1d", "-1s", "1.5s"] {
            assert!(parse_duration_ms(bad).is_err(), "{bad}");
        }
        assert!(chosen_run_id("nightly-2026.11_29").is_ok());
        for bad in ["", "-x", ".x", "a b", "a@1", &"x".repeat(65)] {
            assert!(chosen_run_id(bad).is_err(), "{bad}");
        }
    }
}

//! What a run's row says beyond its standing, read in one place for every reader (`ls`,
//! `show`, `runtape serve`, the run list's filters and the SQLite run summary): its tags and
//! its spec's identity (from its stored spec, which its sealed head covers) and how it ended
//! (from its stored outcome, which its sealed head covers too).

use std::collections::BTreeMap;

use serde::Deserialize;

use super::RunRecord;
use crate::machine::{EffectId, Outcome, RunId};

/// The parts of a stored spec the run list reads.
#[derive(Deserialize)]
struct SpecFacts {
    #[serde(default)]
    tags: BTreeMap<String, String>,
    #[serde(default)]
    delegated_by: Option<EffectId>,
    #[serde(default)]
    session: Option<SessionName>,
}

/// Only the name of a stored spec's session.
#[derive(Deserialize)]
struct SessionName {
    name: String,
}

/// The name of the session the run of a stored spec belongs to.
pub(crate) fn spec_session(spec: &str) -> Option<String> {
    Some(serde_json::from_str::<SpecFacts>(spec).ok()?.session?.name)
}

/// The tags of a stored spec.
pub(crate) fn spec_tags(spec: &str) -> BTreeMap<String, String> {
    serde_json::from_str::<SpecFacts>(spec)
        .map(|s| s.tags)
        .unwrap_or_default()
}

/// The run whose delegation started the run of a stored spec.
pub(crate) fn spec_child_of(spec: &str) -> Option<RunId> {
    serde_json::from_str::<SpecFacts>(spec)
        .ok()?
        .delegated_by
        .map(|e| e.run)
}

/// [`RunRecord::spec_digest`] of a stored spec.
pub(crate) fn spec_digest(spec: &str) -> String {
    let Ok(mut spec) = serde_json::from_str::<serde_json::Value>(spec) else {
        return String::new();
    };
    if let Some(fields) = spec.as_object_mut() {
        fields.remove("tags");
    }
    crate::receipt::text_digest(&spec.to_string())
}

/// The entry agent of a stored spec: its plan's entry, else its first agent (empty for a
/// spec that does not parse).
pub(crate) fn spec_entry_agent(spec: &str) -> String {
    spec_entry_route(spec).0
}

/// The entry agent of a stored spec and its primary route as `provider/model` (empty for a
/// spec that does not parse).
pub(crate) fn spec_entry_route(spec: &str) -> (String, String) {
    let Ok(spec) = serde_json::from_str::<crate::machine::Spec>(spec) else {
        return (String::new(), String::new());
    };
    let entry = spec
        .plan
        .as_ref()
        .map(|p| p.entry.to_string())
        .or_else(|| spec.agents.first().map(|a| a.id.to_string()))
        .unwrap_or_default();
    let model = spec
        .agents
        .iter()
        .find(|a| a.id.as_str() == entry)
        .and_then(|a| a.routes.first())
        .map(|r| format!("{}/{}", r.provider, r.model))
        .unwrap_or_default();
    (entry, model)
}

/// What a stored outcome says a person would search for: the answer, or why it did not
/// complete.
pub(crate) fn outcome_text(outcome: Option<&str>) -> Option<String> {
    let ended = ended(outcome)?;
    answer(&ended).or_else(|| reason(ended))
}

/// A stored outcome read back.
fn ended(outcome: Option<&str>) -> Option<Outcome> {
    serde_json::from_str(outcome?).ok()
}

/// [`RunRecord::reason`] of an outcome.
fn reason(ended: Outcome) -> Option<String> {
    match ended {
        Outcome::Failed { error } => {
            let class = serde_json::to_value(error.class)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            Some(format!("{class}: {}", error.message))
        }
        Outcome::Cancelled { reason } => {
            Some(reason.map_or_else(|| "cancelled".to_owned(), |r| format!("cancelled: {r}")))
        }
        Outcome::Completed { .. } => None,
    }
}

/// [`RunRecord::answer`] of an outcome.
fn answer(ended: &Outcome) -> Option<String> {
    match ended {
        Outcome::Completed { answer, .. } => answer.clone(),
        _ => None,
    }
}

impl RunRecord {
    /// The tags it was started with (`run --tag`); empty for a run without any, or a spec
    /// that does not parse (which `verify` reports on its own).
    pub fn tags(&self) -> BTreeMap<String, String> {
        spec_tags(&self.spec)
    }

    /// The name of the session it belongs to, if any.
    pub fn session_name(&self) -> Option<String> {
        spec_session(&self.spec)
    }

    /// For a child run, the run whose delegation started it.
    pub fn child_of(&self) -> Option<RunId> {
        spec_child_of(&self.spec)
    }

    /// Which spec it runs, as hex: BLAKE3 of its stored spec with the tags taken out (so runs
    /// of one spec file with different tags share it; any other override changes it). Empty
    /// for a spec that does not parse.
    pub fn spec_digest(&self) -> String {
        spec_digest(&self.spec)
    }

    /// The agent it starts with (empty for a spec that does not parse).
    pub fn entry_agent(&self) -> String {
        spec_entry_agent(&self.spec)
    }

    /// Why it did not complete, as one line: a failed run's error class and message
    /// (`tool_failed: …`), a cancelled run's reason (or `cancelled`). `None` while it runs and
    /// for a completed run.
    pub fn reason(&self) -> Option<String> {
        reason(ended(self.outcome.as_deref())?)
    }

    /// A completed run's answer (`None` otherwise, and for an answer given as structured
    /// output alone).
    pub fn answer(&self) -> Option<String> {
        answer(&ended(self.outcome.as_deref())?)
    }

    /// How long it has run: from its creation to its row's last change, ms.
    pub fn duration_ms(&self) -> u64 {
        self.updated_ms.saturating_sub(self.created_ms)
    }
}

//! Session runs and retrievals in a cassette (revision 5): the history a session run began
//! with ([`RecordedSession`], its `SessionStart`) and what the retriever answered each time it
//! was asked ([`RetrievalEntry`]), so `runtape replay` begins where the recorded run began and
//! serves the recorded passages instead of running the retriever.
//!
//! Both are covered like model calls: each carries its own digest (`sessionHash`,
//! `retrievalHash`: SHA-256 of the RFC 8785 form of its content with the `cassetteId`, and for
//! a retrieval its `index` and, in a delegated child's section, the child's `path`), and
//! `envelopeHash` covers the digests (`session`, `retrievals`, and each child section's
//! `retrievals`). A cassette without them hashes as before they existed.
//!
//! ```text
//! "session": { "name": "trip-1", "index": 3, "goal": "…",
//!              "seed": { "previous": "01…", "agents": { "assistant": { "ended_with": {…}, "messages": [...] } } },
//!              "sessionHash": "<64 hex>" },
//! "retrievals": [ { "index": 0, "agent": "assistant", "turn": 1,
//!                   "query": { "agent": …, "goal": …, "turn": 1, "query": …, "last_role": "user", "session": "trip-1" },
//!                   "retrieval": { "status": "passages", "passages": [...] },
//!                   "retrievalHash": "<64 hex>" } ]
//! ```
//!
//! A recorded `query` is what the retriever was given, without the run id (a replay runs under
//! another id); a replay compares the query it would send with it, so a replay that asks the
//! retriever something else stops with [`CassetteError::RetrievalMismatch`], like a drifted
//! model request.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::error::CassetteError;
use super::format::CassetteData;
use super::hash::{check_numbers, digest_of, is_hex};
use crate::machine::{AgentId, Retrieval, SessionSeed};

/// The history a recorded session run began with: its `SessionStart`, and which run of which
/// session it was.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RecordedSession {
    name: String,
    index: u64,
    goal: String,
    seed: SessionSeed,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    session_hash: Option<String>,
}

impl RecordedSession {
    /// The session start of run `index` of session `name`, sealed for `cassette_id`.
    pub(crate) fn sealed(
        cassette_id: &str,
        name: &str,
        index: u64,
        goal: &str,
        seed: SessionSeed,
    ) -> Result<RecordedSession, String> {
        let mut recorded = RecordedSession {
            name: name.to_owned(),
            index,
            goal: goal.to_owned(),
            seed,
            session_hash: None,
        };
        recorded.session_hash = Some(recorded.digest_in(cassette_id)?);
        Ok(recorded)
    }

    /// The `sessionHash` this content has under `cassette_id`.
    pub(crate) fn digest_in(&self, cassette_id: &str) -> Result<String, String> {
        let seed = serde_json::to_value(&self.seed).map_err(|e| e.to_string())?;
        digest_of(&json!({
            "cassetteId": cassette_id,
            "name": self.name,
            "index": self.index,
            "goal": self.goal,
            "seed": seed,
        }))
    }

    /// The session's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The recorded run's place in the session (for a recorded fork or replay, the place of
    /// the run it continued).
    pub fn index(&self) -> u64 {
        self.index
    }

    /// The goal the run began with.
    pub fn goal(&self) -> &str {
        &self.goal
    }

    /// Each agent's conversation as the session's previous run ended it: the messages, their
    /// count and Merkle head, and the run they came from. The machine rebuilds the window and
    /// any summary job from it, as it did when the run was recorded.
    pub fn seed(&self) -> &SessionSeed {
        &self.seed
    }

    /// Its digest (`None` only in a version-1 cassette, which cannot carry one).
    pub fn session_hash(&self) -> Option<&str> {
        self.session_hash.as_deref()
    }
}

/// One answer of the retriever, at its place among its run's retrievals.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RetrievalEntry {
    index: u64,
    agent: AgentId,
    turn: u64,
    query: Value,
    retrieval: Retrieval,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    retrieval_hash: Option<String>,
}

impl RetrievalEntry {
    /// Retrieval `index` of the section at `section` (`None`: the run itself), sealed for
    /// `cassette_id`.
    pub(crate) fn sealed(
        cassette_id: &str,
        section: Option<&str>,
        index: u64,
        agent: &AgentId,
        turn: u64,
        query: Value,
        retrieval: Retrieval,
    ) -> Result<RetrievalEntry, String> {
        let mut entry = RetrievalEntry {
            index,
            agent: agent.clone(),
            turn,
            query: comparable_query(query),
            retrieval,
            retrieval_hash: None,
        };
        entry.retrieval_hash = Some(entry.digest_in(cassette_id, section)?);
        Ok(entry)
    }

    /// The `retrievalHash` this content has under `cassette_id` in `section`.
    pub(crate) fn digest_in(
        &self,
        cassette_id: &str,
        section: Option<&str>,
    ) -> Result<String, String> {
        let mut object = json!({
            "cassetteId": cassette_id,
            "index": self.index,
            "agent": self.agent,
            "turn": self.turn,
            "query": self.query,
            "retrieval": serde_json::to_value(&self.retrieval).map_err(|e| e.to_string())?,
        });
        if let Some(path) = section {
            object["path"] = json!(path);
        }
        digest_of(&object)
    }

    /// Its position among its run's retrievals: 0 for the first.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// The agent whose turn it was for.
    pub fn agent(&self) -> &AgentId {
        &self.agent
    }

    /// The agent's model turn it was for (1 for its first).
    pub fn turn(&self) -> u64 {
        self.turn
    }

    /// What the retriever was given, without the run id.
    pub fn query(&self) -> &Value {
        &self.query
    }

    /// What it answered: passages, or why there were none.
    pub fn retrieval(&self) -> &Retrieval {
        &self.retrieval
    }

    /// Its digest (`None` only in a version-1 cassette, which cannot carry one).
    pub fn retrieval_hash(&self) -> Option<&str> {
        self.retrieval_hash.as_deref()
    }
}

/// A retriever query as a cassette keeps and compares it: without `run`, which differs on
/// every replay.
pub fn comparable_query(mut query: Value) -> Value {
    if let Some(map) = query.as_object_mut() {
        map.remove("run");
    }
    query
}

/// The digests of `entries`, in order, for `envelopeHash`.
pub(crate) fn digests(entries: &[RetrievalEntry]) -> Vec<&str> {
    entries
        .iter()
        .map(|e| e.retrieval_hash.as_deref().unwrap_or(""))
        .collect()
}

/// Every section's retrievals: `(section path, where to say it is, retrievals)`.
fn sections(data: &CassetteData) -> Vec<(Option<&str>, &[RetrievalEntry])> {
    std::iter::once((None, data.retrievals.as_slice()))
        .chain(
            data.children
                .iter()
                .map(|c| (Some(c.path.as_str()), c.retrievals.as_slice())),
        )
        .collect()
}

/// Wraps `error` as being in the child at `section`, if it is a child's.
fn placed(section: Option<&str>, error: CassetteError) -> CassetteError {
    match section {
        Some(path) => CassetteError::InChild {
            child: path.to_owned(),
            run: None,
            error: Box::new(error),
        },
        None => error,
    }
}

/// The first field of a version-2-or-later feature a version-1 file carries, if any (see
/// [`CassetteError::Downgrade`]).
pub(crate) fn downgraded_field(data: &CassetteData) -> Option<&'static str> {
    if data.session.is_some() {
        Some("session")
    } else if sections(data).iter().any(|(_, r)| !r.is_empty()) {
        Some("retrievals")
    } else {
        None
    }
}

/// Shapes: each section's retrievals numbered 0, 1, 2, ... in file order; digests present (from
/// version 2) and 64 lowercase hex digits; no integer canonical JSON cannot carry.
pub(crate) fn check_shapes(data: &CassetteData) -> Result<(), CassetteError> {
    let hashed = data.version >= 2;
    if let Some(s) = &data.session {
        let location = "session";
        match s.session_hash.as_deref() {
            None if hashed => {
                return Err(CassetteError::MissingField {
                    location: location.into(),
                    field: "sessionHash",
                });
            }
            Some(h) if !is_hex(h, 64) => {
                return Err(CassetteError::bad_field(
                    location,
                    "sessionHash",
                    "not 64 lowercase hex digits",
                ));
            }
            _ => {}
        }
        let seed = serde_json::to_value(&s.seed)
            .map_err(|e| CassetteError::unencodable(location, e.to_string()))?;
        check_numbers(&seed).map_err(|d| CassetteError::unencodable(location, d))?;
    }
    for (section, entries) in sections(data) {
        for (position, entry) in entries.iter().enumerate() {
            let position = u64::try_from(position).unwrap_or(u64::MAX);
            if entry.index != position {
                return Err(placed(
                    section,
                    CassetteError::RetrievalOrder {
                        position,
                        found: entry.index,
                    },
                ));
            }
            let location = format!("retrieval {position}");
            match entry.retrieval_hash.as_deref() {
                None if hashed => {
                    return Err(placed(
                        section,
                        CassetteError::MissingField {
                            location,
                            field: "retrievalHash",
                        },
                    ));
                }
                Some(h) if !is_hex(h, 64) => {
                    return Err(placed(
                        section,
                        CassetteError::bad_field(
                            location,
                            "retrievalHash",
                            "not 64 lowercase hex digits",
                        ),
                    ));
                }
                _ => {}
            }
            let retrieval = serde_json::to_value(&entry.retrieval)
                .map_err(|e| CassetteError::unencodable(location.clone(), e.to_string()))?;
            for value in [&entry.query, &retrieval] {
                check_numbers(value).map_err(|d| {
                    placed(section, CassetteError::unencodable(location.clone(), d))
                })?;
            }
        }
    }
    Ok(())
}

/// Digests (version 2 on): the session's and each retrieval's recomputed with `cassette_id`
/// (and the section's path). A mismatch means the content was edited after recording, or the
/// item was copied from another cassette.
pub(crate) fn check_digests(data: &CassetteData, cassette_id: &str) -> Result<(), CassetteError> {
    if let Some(s) = &data.session {
        let digest = s
            .digest_in(cassette_id)
            .map_err(|d| CassetteError::unencodable("session", d))?;
        if s.session_hash.as_deref() != Some(digest.as_str()) {
            return Err(CassetteError::SessionEdited);
        }
    }
    for (section, entries) in sections(data) {
        for entry in entries {
            let digest = entry
                .digest_in(cassette_id, section)
                .map_err(|d| CassetteError::unencodable(format!("retrieval {}", entry.index), d))?;
            if entry.retrieval_hash.as_deref() != Some(digest.as_str()) {
                return Err(placed(
                    section,
                    CassetteError::RetrievalEdited { index: entry.index },
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::{Passage, RunId};

    fn entry(id: &str, section: Option<&str>, text: &str) -> RetrievalEntry {
        RetrievalEntry::sealed(
            id,
            section,
            0,
            &AgentId::from("a"),
            1,
            json!({"run": "r1", "agent": "a", "query": "q"}),
            Retrieval::Passages {
                passages: vec![Passage {
                    text: text.into(),
                    source: None,
                }],
            },
        )
        .expect("seals")
    }

    #[test]
    fn a_retrieval_digest_binds_its_content_its_cassette_and_its_section() {
        let a = entry("00", None, "lisbon");
        assert_eq!(
            a.query,
            json!({"agent": "a", "query": "q"}),
            "no run id kept"
        );
        assert_eq!(a.digest_in("00", None).ok().as_deref(), a.retrieval_hash());
        assert_ne!(entry("00", None, "porto").retrieval_hash, a.retrieval_hash);
        assert_ne!(entry("01", None, "lisbon").retrieval_hash, a.retrieval_hash);
        assert_ne!(
            entry("00", Some("3.0"), "lisbon").retrieval_hash,
            a.retrieval_hash
        );
    }

    #[test]
    fn a_session_digest_covers_the_seed() {
        let seed = SessionSeed {
            previous: RunId::new("p"),
            agents: Default::default(),
        };
        let s = RecordedSession::sealed("00", "trip", 3, "go", seed.clone()).expect("seals");
        let other = RecordedSession::sealed(
            "00",
            "trip",
            3,
            "go",
            SessionSeed {
                previous: RunId::new("q"),
                ..seed
            },
        )
        .expect("seals");
        assert_ne!(s.session_hash, other.session_hash);
        assert_eq!(s.digest_in("00").ok().as_deref(), s.session_hash());
    }
}

//! Starting a run of a session (revision 5): its place in the session, the run it goes on
//! from, and the history its first event carries. Pure reads; the place is taken by the write
//! that creates the run (see [`crate::store::SessionLink`]).
//!
//! Which run a new one goes on from: the session's latest **completed** run. A session whose
//! latest run has not ended (running, paused, waiting for a person or a budget) is refused
//! with one line saying which run to resume or cancel; failed and cancelled runs keep their
//! place in the session but nobody goes on from them (the run after goes on from the last one
//! that completed, as a chat retried after an error would).

use crate::ledger::{self, HistoryError};
use crate::machine::{
    CarriedConversation, EventBody, RunId, RunSpec, SESSION_SEMANTICS, SessionSeed, SessionSpec,
    session::{DEFAULT_WINDOW, SessionWindow, is_valid_name},
};
use crate::store::{RunStatus, SessionLink, Store};

use super::EngineError;

/// How a session's runs keep their history: the `[session]` table of a spec file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionSettings {
    /// How much of the carried conversation is kept verbatim (default: the last 40 messages).
    pub window: SessionWindow,
    /// The agent that writes summaries (default: each agent its own).
    pub summarizer: Option<crate::machine::AgentId>,
}

impl Default for SessionSettings {
    fn default() -> Self {
        SessionSettings {
            window: DEFAULT_WINDOW,
            summarizer: None,
        }
    }
}

/// How a run starts as part of a session.
#[derive(Clone, Debug)]
pub(crate) enum SessionStartKind {
    /// As the session's next run, going on from its latest completed run.
    Next {
        name: String,
        settings: SessionSettings,
    },
    /// As a replay of run `index` of session `name`, beginning with a recorded history.
    Replay {
        name: String,
        index: u64,
        settings: SessionSettings,
        seed: SessionSeed,
    },
}

/// `spec` as a replay of run `index` of session `name` beginning with `seed` (revision 5):
/// the session spec names the run it replays, marked `replayed`, and the first event carries
/// the recorded history. Refused when the spec does not follow revision 5 or is a delegated
/// child's, or when the name is not a session name.
pub(crate) fn replayed_run(
    spec: &RunSpec,
    name: &str,
    index: u64,
    settings: &SessionSettings,
    seed: SessionSeed,
    goal: &str,
) -> Result<(RunSpec, EventBody), EngineError> {
    if !is_valid_name(name) || index == 0 {
        return Err(EngineError::NotASessionRun {
            name: crate::text::one_line(name, 80),
            index,
        });
    }
    if spec.spec().semantics < SESSION_SEMANTICS {
        return Err(EngineError::SessionRevision {
            semantics: spec.spec().semantics,
            needs: SESSION_SEMANTICS,
        });
    }
    if spec.spec().delegated_by.is_some() {
        return Err(EngineError::ChildInSession);
    }
    let mut s = spec.spec().clone();
    s.session = Some(SessionSpec {
        name: name.to_owned(),
        index,
        previous: Some(seed.previous.clone()),
        window: settings.window,
        summarizer: settings.summarizer.clone(),
        replayed: true,
    });
    let spec = RunSpec::build(s)?;
    let opening = EventBody::SessionStart {
        goal: goal.to_owned(),
        seed,
    };
    Ok((spec, opening))
}

/// `spec` as the next run of session `name`: its place (the latest run's + 1), the completed
/// run it goes on from, and `settings`. Refused when the name is not a session name, when the
/// session's latest run has not ended, or when the spec does not follow revision 5.
pub(crate) fn next_run(
    store: &dyn Store,
    spec: &RunSpec,
    name: &str,
    settings: &SessionSettings,
) -> Result<(RunSpec, SessionLink), EngineError> {
    if !is_valid_name(name) {
        return Err(EngineError::BadSessionName {
            name: crate::text::one_line(name, 80),
            max: crate::machine::session::MAX_SESSION_NAME,
        });
    }
    if spec.spec().semantics < SESSION_SEMANTICS {
        return Err(EngineError::SessionRevision {
            semantics: spec.spec().semantics,
            needs: SESSION_SEMANTICS,
        });
    }
    if spec.spec().delegated_by.is_some() {
        return Err(EngineError::ChildInSession);
    }
    let runs = store.session_runs(name)?;
    let mut previous = None;
    if let Some((index, latest)) = runs.last() {
        let rec = ledger::record(store, latest)?;
        if !rec.status.is_terminal() {
            return Err(EngineError::SessionBusy {
                name: name.to_owned(),
                latest: latest.to_string(),
                index: *index,
                status: rec.status,
            });
        }
        for (_, run) in runs.iter().rev() {
            if ledger::record(store, run)?.status == RunStatus::Completed {
                previous = Some(run.clone());
                break;
            }
        }
    }
    let index = runs.last().map_or(1, |(i, _)| i + 1);
    let mut s = spec.spec().clone();
    s.session = Some(SessionSpec {
        name: name.to_owned(),
        index,
        previous,
        window: settings.window,
        summarizer: settings.summarizer.clone(),
        replayed: false,
    });
    let spec = RunSpec::build(s)?;
    let link = SessionLink {
        name: name.to_owned(),
        index,
    };
    Ok((spec, link))
}

/// The first event of a run of `spec` toward `goal`: `SessionStart` with the history of the
/// run a session run goes on from, else `Start`. The same whenever it is asked (the run it
/// goes on from has ended), so a run created but never started, or a fork from step 0, begins
/// exactly as the run would have.
pub(super) fn opening(
    store: &dyn Store,
    spec: &RunSpec,
    goal: &str,
) -> Result<EventBody, EngineError> {
    let previous = spec
        .spec()
        .session
        .as_ref()
        .filter(|_| spec.spec().semantics >= SESSION_SEMANTICS)
        .and_then(|s| s.previous.clone());
    let Some(previous) = previous else {
        return Ok(EventBody::Start {
            goal: goal.to_owned(),
        });
    };
    if spec.spec().session.as_ref().is_some_and(|s| s.replayed) {
        // Its history was in the cassette, and nothing here holds it.
        return Err(EngineError::SessionReplayNeverBegan);
    }
    Ok(EventBody::SessionStart {
        goal: goal.to_owned(),
        seed: seed(store, &previous)?,
    })
}

/// Every agent's conversation at the end of `previous`, read from its final state.
pub(crate) fn seed(store: &dyn Store, previous: &RunId) -> Result<SessionSeed, HistoryError> {
    let rec = ledger::record(store, previous)?;
    let spec = ledger::spec_of(&rec)?;
    let end = ledger::state_at(store, previous, &spec, rec.seq)?;
    let mut agents = std::collections::BTreeMap::new();
    if let Some(data) = end.state.data() {
        for (agent, a) in &data.agents {
            if a.conversation.len == 0 {
                continue;
            }
            let messages = ledger::conversation(store, agent, &a.conversation)?;
            agents.insert(
                agent.clone(),
                CarriedConversation {
                    ended_with: a.conversation,
                    messages,
                },
            );
        }
    }
    Ok(SessionSeed {
        previous: previous.clone(),
        agents,
    })
}

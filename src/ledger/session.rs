//! What `verify` checks of a run's session (revision 5), beside its own history:
//!
//! - **its place** (`session_runs`): a run whose stored spec names a session place holds
//!   exactly that place in the store's list, and a fork or a run of no session holds none;
//! - **the history it began with**: the `SessionStart` event carries the conversations of the
//!   run its spec says it goes on from; that run must be a completed run of the same session,
//!   earlier in it, and must have ended with exactly those conversations (each agent's message
//!   count and Merkle head in its final state). `step` has already checked, while replaying,
//!   that the carried messages are those conversations.
//!
//! A run `runtape replay` started from a session run's cassette (its spec's session says
//! `replayed`) holds no place, and the run its history comes from is not looked for: it is in
//! the database the cassette was exported from.
//!
//! The run it goes on from is not verified here (`runtape verify PREVIOUS` does that); only
//! the link between the two is.

use super::HistoryError;
use super::read::{record, spec_of, state_at};
use super::replay::Divergence;
use crate::machine::{RunId, RunSpec, SessionSeed};
use crate::receipt::RunHead;
use crate::store::{RunStatus, SessionLink, Store};

/// Checks `run`'s session place against its spec, and `seed` (its `SessionStart`'s, if its
/// history has one) against the run it carries history from.
pub(crate) fn check(
    store: &dyn Store,
    run: &RunId,
    spec: &RunSpec,
    head: &RunHead,
    seed: Option<&SessionSeed>,
) -> Result<Result<(), Divergence>, HistoryError> {
    let session = spec.spec().session.as_ref();
    // A fork continues a session run's history but is not a run of the session; nor is a
    // replay of one.
    let expected = session
        .filter(|s| head.parent.is_none() && !s.replayed)
        .map(|s| SessionLink {
            name: s.name.clone(),
            index: s.index,
        });
    let found = store.session_of(run)?;
    if found != expected {
        let show = |l: &Option<SessionLink>| {
            l.as_ref().map_or("none".to_owned(), |l| {
                format!("run {} of session {}", l.index, l.name)
            })
        };
        return Ok(Err(Divergence::column(
            0,
            "session_runs",
            "the run's place in its session",
            show(&expected),
            show(&found),
        )));
    }
    let Some(seed) = seed else {
        return Ok(Ok(()));
    };
    // A replay began with the history its cassette recorded: the run it comes from is in the
    // recording's database, not here. `step` checked the messages are the conversations the
    // seed names; that they are what that run ended with, `verify` there says.
    if session.is_some_and(|s| s.replayed) {
        return Ok(Ok(()));
    }
    let (Some(session), Some(previous)) = (session, session.and_then(|s| s.previous.as_ref()))
    else {
        return Ok(Err(Divergence::column(
            1,
            "transitions.event",
            "session history",
            "none (the run goes on from no run)",
            format!("the history of run {}", seed.previous),
        )));
    };
    let bad = |what: &str, expected: String, found: String| {
        Ok(Err(Divergence::column(
            1,
            "transitions.event",
            what,
            expected,
            found,
        )))
    };
    let prev = match record(store, previous) {
        Ok(rec) => rec,
        Err(HistoryError::UnknownRun(_)) => {
            return bad(
                "the run the session history comes from",
                format!("run {previous} in this database"),
                "no such run".into(),
            );
        }
        Err(e) => return Err(e),
    };
    if prev.status != RunStatus::Completed {
        return bad(
            "the run the session history comes from",
            format!("run {previous} completed"),
            format!("run {previous} {}", prev.status),
        );
    }
    let place = store.session_of(previous)?;
    if !place
        .as_ref()
        .is_some_and(|p| p.name == session.name && p.index < session.index)
    {
        return bad(
            "the run the session history comes from",
            format!(
                "an earlier run of session {} than run {}",
                session.name, session.index
            ),
            place.map_or("a run of no session".into(), |p| {
                format!("run {} of session {}", p.index, p.name)
            }),
        );
    }
    let prev_spec = spec_of(&prev)?;
    let end = state_at(store, previous, &prev_spec, prev.seq)?;
    let ended: Vec<_> = end
        .state
        .data()
        .map(|d| {
            d.agents
                .iter()
                .filter(|(_, a)| a.conversation.len > 0)
                .map(|(agent, a)| (agent.clone(), a.conversation))
                .collect()
        })
        .unwrap_or_default();
    let carried: Vec<_> = seed
        .agents
        .iter()
        .map(|(agent, c)| (agent.clone(), c.ended_with))
        .collect();
    if ended != carried {
        let show = |list: &[(crate::machine::AgentId, crate::machine::ConversationRef)]| {
            list.iter()
                .map(|(a, c)| format!("{a}: {} messages ({})", c.len, &c.head.to_hex()[..12]))
                .collect::<Vec<_>>()
                .join(", ")
        };
        return bad(
            &format!("the conversations run {previous} ended with"),
            show(&ended),
            show(&carried),
        );
    }
    Ok(Ok(()))
}

//! Replaying retrievals from a cassette (revision 5): [`RecordedRetrievals`] answers a
//! replayed run's `Retrieve` effects with what the recorded run's retriever answered, in
//! order — each run of a tree its own, by its place in the tree — so a replay runs no
//! retriever and its agents read exactly the recorded passages.
//!
//! Strict (the default) compares each query the replay would send (without its run id) with
//! the recorded one: a different query is a [`CassetteError::RetrievalMismatch`], kept for
//! [`first_error`](RecordedRetrievals::first_error), and the replayed run is cancelled there,
//! as a drifted model request stops a replay. Non-strict serves the next recorded answer
//! whatever was asked and lists the drifted retrievals.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

use serde_json::Value;

use super::RetrievalSource;
use super::error::CassetteError;
use super::format::Cassette;
use super::session::{RetrievalEntry, comparable_query};
use crate::machine::Retrieval;

/// The longest query shown in a mismatch, in characters.
const SHOWN_QUERY: usize = 300;

/// The recorded retrievals of one cassette, by the place in the tree of the run that made
/// them, each served once.
pub struct RecordedRetrievals {
    strict: bool,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    left: BTreeMap<String, VecDeque<RetrievalEntry>>,
    /// How many each section holds, for the exhaustion message.
    counts: BTreeMap<String, u64>,
    first_error: Option<CassetteError>,
    /// Non-strict: `(path, index)` of each retrieval served although its query differed.
    drifted: Vec<(String, u64)>,
    served: u64,
}

impl RecordedRetrievals {
    /// What `cassette` recorded, none served yet; `None` when it recorded no retrieval (an
    /// older cassette, or a run without a retriever: a replay then runs the retriever live).
    /// `strict`: a query that differs from the recorded one is refused.
    pub fn of(cassette: &Cassette, strict: bool) -> Option<Self> {
        if !cassette.has_retrievals() {
            return None;
        }
        let mut state = State::default();
        let sections = std::iter::once(("", cassette.retrievals())).chain(
            cassette
                .children()
                .iter()
                .map(|c| (c.path.as_str(), c.retrievals.as_slice())),
        );
        for (path, entries) in sections {
            state
                .left
                .insert(path.to_owned(), entries.iter().cloned().collect());
            state
                .counts
                .insert(path.to_owned(), u64::try_from(entries.len()).unwrap_or(0));
        }
        Some(RecordedRetrievals {
            strict,
            state: Mutex::new(state),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every update under the lock is a single pop, push or assignment: a panic elsewhere
        // cannot leave it half done.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The first retrieval the replay could not be given, if any: why the replayed run was
    /// cancelled.
    pub fn first_error(&self) -> Option<CassetteError> {
        self.state().first_error.clone()
    }

    /// Non-strict replay: `(path, index)` of each retrieval served although the replay asked
    /// something else. Always empty in strict mode.
    pub fn drifted(&self) -> Vec<(String, u64)> {
        self.state().drifted.clone()
    }

    /// How many recorded retrievals were served.
    pub fn served(&self) -> u64 {
        self.state().served
    }

    /// The next recorded answer for `path`, or why there is none.
    fn serve(&self, path: &str, query: &Value) -> Result<Retrieval, CassetteError> {
        let mut state = self.state();
        let placed = |error: CassetteError| match path {
            "" => error,
            p => CassetteError::InChild {
                child: p.to_owned(),
                run: None,
                error: Box::new(error),
            },
        };
        let count = state.counts.get(path).copied().unwrap_or(0);
        let asked = comparable_query(query.clone());
        let outcome = match state.left.get(path).and_then(VecDeque::front) {
            None => Err(placed(CassetteError::RetrievalsExhausted { count })),
            Some(next) if next.query() == &asked => Ok((next.retrieval().clone(), None)),
            Some(next) if !self.strict => Ok((
                next.retrieval().clone(),
                Some((path.to_owned(), next.index())),
            )),
            Some(next) => Err(placed(CassetteError::RetrievalMismatch {
                index: next.index(),
                recorded: shown(next.query()),
                asked: shown(&asked),
            })),
        };
        match outcome {
            Ok((retrieval, drifted)) => {
                if let Some(queue) = state.left.get_mut(path) {
                    queue.pop_front();
                }
                state.drifted.extend(drifted);
                state.served += 1;
                Ok(retrieval)
            }
            Err(error) => {
                state.first_error.get_or_insert_with(|| error.clone());
                Err(error)
            }
        }
    }
}

/// A query on one line, shortened.
fn shown(query: &Value) -> String {
    crate::text::one_line(&query.to_string(), SHOWN_QUERY)
}

impl RetrievalSource for RecordedRetrievals {
    fn retrieve(&self, path: &str, query: &Value) -> Result<Retrieval, String> {
        self.serve(path, query).map_err(|e| {
            let text = e.to_string();
            format!(
                "replay stopped: {}",
                text.lines().next().unwrap_or_default()
            )
        })
    }
}

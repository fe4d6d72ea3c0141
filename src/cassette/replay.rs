//! Replaying: [`CassetteProvider`] answers model calls from a cassette, in order, checking
//! each request against the recorded prompt hash. A delegated child run's calls (their
//! request's [`origin`](crate::provider::ProviderRequest::origin) has a path) are served from
//! the child's own section (cassette version 4), in its own order, so children running side
//! by side replay deterministically.

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::error::CassetteError;
use super::format::{Cassette, Entry};
use super::hash::{self, HashFilter, Prompt};
use super::load::{LoadOptions, snippet};
use crate::machine::ModelReply;
use crate::provider::{ModelProvider, ProviderError, ProviderRequest, TokenSink};

/// The longest request diff kept in a [`CassetteError::Mismatch`], in bytes.
const MAX_DIFF_BYTES: usize = 16 * 1024;

/// How to replay.
#[derive(Clone, Debug)]
pub struct ReplayOptions {
    /// `true` (the default): a request whose prompt hash differs from the recorded one fails
    /// with [`CassetteError::Mismatch`]. `false`: best effort for exploration; each call gets
    /// the next recorded response whatever it asked, the turns that differed are listed by
    /// [`CassetteProvider::drifted_turns`], and only running past the end is an error.
    pub strict: bool,
    /// The hash filter the cassette was recorded with (same name), or `None` if it had none.
    pub hash_filter: Option<HashFilter>,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            strict: true,
            hash_filter: None,
        }
    }
}

/// A [`ModelProvider`] that answers from a cassette: call `i` gets entry `i`'s response
/// (reply or error) after its chunks are sent to the token sink. It is single-use: after
/// the last entry every call fails with [`CassetteError::Exhausted`] until [`reset`].
///
/// A failure is returned from `complete` as a non-retryable `bad_request` [`ProviderError`]
/// carrying the error's text (turn, hashes, diff); the typed error stays available from
/// [`last_error`]. A mismatched call does not consume its entry.
///
/// [`reset`]: CassetteProvider::reset
/// [`last_error`]: CassetteProvider::last_error
pub struct CassetteProvider {
    cassette: Arc<Cassette>,
    options: ReplayOptions,
    state: Mutex<ReplayState>,
}

#[derive(Default)]
struct ReplayState {
    /// The entry the run's next call gets.
    next: usize,
    /// Per child section (by path), the entry its next call gets.
    child_next: std::collections::BTreeMap<String, usize>,
    last_error: Option<CassetteError>,
    first_error: Option<CassetteError>,
    drifted: Vec<u64>,
    /// Non-strict: children's turns that drifted, as `(path, turn)`.
    child_drifted: Vec<(String, u64)>,
}

impl CassetteProvider {
    /// A replay of `cassette`. Fails with [`CassetteError::HashFilterMismatch`] when the
    /// options' hash filter does not match the recorded one by name (one given on one side
    /// only, or two different names).
    pub fn new(
        cassette: impl Into<Arc<Cassette>>,
        options: ReplayOptions,
    ) -> Result<Self, CassetteError> {
        let cassette = cassette.into();
        let recorded = cassette.hash_filter();
        let given = options.hash_filter.as_ref().map(HashFilter::name);
        if recorded != given {
            return Err(CassetteError::HashFilterMismatch {
                recorded: recorded.map(str::to_owned),
                given: given.map(str::to_owned),
            });
        }
        Ok(CassetteProvider {
            cassette,
            options,
            state: Mutex::new(ReplayState::default()),
        })
    }

    /// Loads the cassette at `path` and replays it: [`Cassette::load`] then [`new`](Self::new).
    pub fn load(
        path: impl AsRef<Path>,
        load: &LoadOptions,
        options: ReplayOptions,
    ) -> Result<Self, CassetteError> {
        CassetteProvider::new(Cassette::load(path, load)?, options)
    }

    fn state(&self) -> MutexGuard<'_, ReplayState> {
        // Every update under the lock is a single assignment or push, so a panic elsewhere
        // cannot leave it inconsistent: a poisoned lock is safe to keep using.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The cassette being replayed.
    pub fn cassette(&self) -> &Cassette {
        &self.cassette
    }

    /// How many of the run's own entries were served since creation or the last
    /// [`reset`](Self::reset) (its children's are counted by [`served`](Self::served)).
    pub fn position(&self) -> usize {
        self.state().next
    }

    /// How many entries of the section of the run at `path` were served (`""`: the run's
    /// own, as [`position`](Self::position); else the child's at that place in the tree).
    pub fn position_in(&self, path: &str) -> usize {
        let state = self.state();
        if path.is_empty() {
            return state.next;
        }
        state.child_next.get(path).copied().unwrap_or(0)
    }

    /// How many entries were served in all, the children's included.
    pub fn served(&self) -> usize {
        let state = self.state();
        state.next + state.child_next.values().sum::<usize>()
    }

    /// True when every entry was served, every child section's included.
    pub fn is_finished(&self) -> bool {
        self.served() >= self.cassette.len()
    }

    /// Non-strict replay: the children's turns that differed from the recording but were
    /// served anyway, as `(path, turn)`.
    pub fn drifted_child_turns(&self) -> Vec<(String, u64)> {
        self.state().child_drifted.clone()
    }

    /// Rewinds to the first entry and forgets the last error and the drifted turns, so the
    /// same provider can replay the cassette again.
    pub fn reset(&self) {
        *self.state() = ReplayState::default();
    }

    /// The most recent failure (mismatch, exhaustion, unhashable request), kept until
    /// [`reset`](Self::reset).
    pub fn last_error(&self) -> Option<CassetteError> {
        self.state().last_error.clone()
    }

    /// The first failure since creation or the last [`reset`](Self::reset): the cause, when
    /// one failure led to others (a child's drifted request fails the child, whose parent then
    /// asks something the recording never saw).
    pub fn first_error(&self) -> Option<CassetteError> {
        self.state().first_error.clone()
    }

    /// Non-strict replay: the turns whose request differed from the recording but were
    /// served anyway. Always empty in strict mode.
    pub fn drifted_turns(&self) -> Vec<u64> {
        self.state().drifted.clone()
    }

    /// Picks the entry for `request`, advancing the position, or records and returns why not.
    fn serve(&self, request: &ProviderRequest) -> Result<&Entry, CassetteError> {
        let mut state = self.state();
        let path = request.origin.path.as_str();
        let child = (!path.is_empty()).then_some(path);
        let in_child = |error: CassetteError| match child {
            Some(p) => CassetteError::InChild {
                child: p.to_owned(),
                run: request.origin.run.as_ref().map(ToString::to_string),
                error: Box::new(error),
            },
            None => error,
        };
        let Some(entries) = self.cassette.section(path) else {
            let error = CassetteError::NoSection {
                child: path.to_owned(),
                run: request.origin.run.as_ref().map(ToString::to_string),
            };
            state.first_error.get_or_insert_with(|| error.clone());
            state.last_error = Some(error.clone());
            return Err(error);
        };
        let position = match child {
            Some(p) => state.child_next.get(p).copied().unwrap_or(0),
            None => state.next,
        };
        let turn = u64::try_from(position).unwrap_or(u64::MAX);
        let outcome = match entries.get(position) {
            None => Err(in_child(CassetteError::Exhausted {
                turns: u64::try_from(entries.len()).unwrap_or(u64::MAX),
            })),
            Some(entry) => self.check(entry, request, turn).map_err(in_child),
        };
        match outcome {
            Ok((entry, drifted)) => {
                match child {
                    Some(p) => {
                        if drifted {
                            state.child_drifted.push((p.to_owned(), turn));
                        }
                        *state.child_next.entry(p.to_owned()).or_default() += 1;
                    }
                    None => {
                        if drifted {
                            state.drifted.push(turn);
                        }
                        state.next += 1;
                    }
                }
                Ok(entry)
            }
            Err(error) => {
                state.first_error.get_or_insert_with(|| error.clone());
                state.last_error = Some(error.clone());
                Err(error)
            }
        }
    }

    /// Compares the request with the entry: the entry and whether it drifted, or a mismatch.
    fn check<'e>(
        &self,
        entry: &'e Entry,
        request: &ProviderRequest,
        turn: u64,
    ) -> Result<(&'e Entry, bool), CassetteError> {
        let prompt = match &self.options.hash_filter {
            Some(filter) => filter.apply(Prompt::of(request)),
            None => Prompt::of(request),
        };
        let actual = match hash::prompt_hash_for(self.cassette.version(), &prompt) {
            Ok(actual) => actual,
            Err(_) if !self.options.strict => return Ok((entry, true)),
            Err(detail) => {
                return Err(CassetteError::unencodable(
                    format!("request of turn {turn}"),
                    detail,
                ));
            }
        };
        if actual == entry.prompt_hash() {
            return Ok((entry, false));
        }
        if !self.options.strict {
            return Ok((entry, true));
        }
        Err(CassetteError::Mismatch {
            turn,
            expected_hash: entry.prompt_hash().to_owned(),
            actual_hash: actual,
            diff: request_diff(entry.prompt(), &prompt),
        })
    }
}

/// The changed hunks of a line diff of the two prompts' pretty JSON, or a summary of the
/// request sent when the cassette holds only the hash.
fn request_diff(recorded: Option<&Prompt>, sent: &Prompt) -> String {
    let Some(recorded) = recorded else {
        let last = sent.messages.last().map_or_else(
            || "none".to_owned(),
            |m| {
                format!(
                    "{:?}: {:?}",
                    m.role,
                    snippet(m.content.as_deref().unwrap_or(""))
                )
            },
        );
        let tools: Vec<&str> = sent.tools.iter().map(|t| t.name.as_str()).collect();
        return format!(
            "(no diff: this cassette stores only prompt hashes; record with RecordOptions::store_prompts to see one)\nsent: {} messages, tools [{}], last message {last}",
            sent.messages.len(),
            tools.join(", "),
        );
    };
    let (old, new) = (recorded.pretty(), sent.pretty());
    let diff = similar::TextDiff::configure()
        .timeout(Duration::from_secs(2))
        .diff_lines(old.as_str(), new.as_str());
    let mut text = diff
        .unified_diff()
        .context_radius(2)
        .header("recorded", "sent")
        .to_string();
    if text.len() > MAX_DIFF_BYTES {
        let mut cut = MAX_DIFF_BYTES;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("\n… (diff truncated)\n");
    }
    text
}

impl ModelProvider for CassetteProvider {
    fn describe(&self) -> String {
        let id = self.cassette.cassette_id().unwrap_or("v1");
        format!(
            "cassette:{id} (recorded from {})",
            self.cassette.recorded_provider()
        )
    }

    fn complete<'a>(
        &'a self,
        request: &'a ProviderRequest,
        tokens: TokenSink<'a>,
    ) -> BoxFuture<'a, Result<ModelReply, ProviderError>> {
        Box::pin(async move {
            let entry = self
                .serve(request)
                .map_err(|e| e.to_provider_error(&self.describe()))?;
            for chunk in entry.chunks() {
                tokens(chunk);
            }
            entry.response().as_result().cloned().map_err(Clone::clone)
        })
    }
}

//! Everything that can go wrong with a cassette, as one typed enum.
//!
//! Each variant's message is one line saying what is wrong and what to do about it (a
//! [`CassetteError::Mismatch`] adds its request diff below that line). The enum is `Clone +
//! PartialEq` so a replay provider can keep the last one for [`last_error`] and tests can
//! compare it.
//!
//! [`last_error`]: super::CassetteProvider::last_error

use crate::machine::ProviderErrorClass;
use crate::provider::ProviderError;

/// Why a cassette could not be recorded, saved, loaded or replayed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CassetteError {
    /// Reading or writing the file failed.
    #[error("cassette {path}: cannot {action}: {message}; check the path and its permissions")]
    Io {
        /// The file.
        path: String,
        /// What was being done (`read`, `write`, `rename`, ...).
        action: &'static str,
        /// The operating system's message.
        message: String,
    },
    /// The file is larger than [`LoadOptions::max_bytes`](super::LoadOptions::max_bytes).
    #[error(
        "cassette is {size} bytes, over the {limit}-byte limit; raise LoadOptions::max_bytes if the file is trusted"
    )]
    TooLarge {
        /// The file's size (or the bytes read before giving up).
        size: u64,
        /// The limit in force.
        limit: u64,
    },
    /// The text is not JSON, or a field has the wrong type, or a field is unknown.
    #[error("cassette is not valid: {detail}; re-record it or fix the file by hand")]
    Malformed {
        /// serde_json's message, with line and column.
        detail: String,
    },
    /// The `version` field is not 1 to 4.
    #[error("cassette version {found} is not supported (this build reads versions 1 to 4)")]
    UnsupportedVersion {
        /// The value found, as JSON text.
        found: String,
    },
    /// A field required by the cassette's version is absent.
    #[error(
        "cassette {location} lacks `{field}`, which version 2 requires; re-record the cassette"
    )]
    MissingField {
        /// `envelope` or `entry N`.
        location: String,
        /// The camelCase field name.
        field: &'static str,
    },
    /// A field is present but its value is not acceptable (a hash that is not 64 hex digits,
    /// a `recordedAt` that is not RFC 3339, ...).
    #[error("cassette {location}: `{field}` is invalid: {detail}")]
    BadField {
        /// `envelope`, `entry N`, or `recording`.
        location: String,
        /// The camelCase field name.
        field: &'static str,
        /// What is wrong with it.
        detail: String,
    },
    /// Entries are not numbered 0, 1, 2, ... in file order (reordered or renumbered by hand).
    #[error(
        "cassette entry at position {position} has turnIndex {found}; entries must be numbered 0, 1, 2, ... in order (re-record rather than edit)"
    )]
    TurnOrder {
        /// Position in the `entries` array.
        position: u64,
        /// The `turnIndex` found there.
        found: u64,
    },
    /// A cassette carries a field its stated version does not have (a version-1 file with a
    /// version-2 integrity field, a version-3 file with `children`): someone lowered the
    /// version to escape the checks.
    #[error(
        "cassette carries `{field}`, which its stated version does not have: the version was lowered to skip integrity checks; use the original file"
    )]
    Downgrade {
        /// The version-2 field found.
        field: &'static str,
    },
    /// [`LoadOptions::require_integrity`](super::LoadOptions::require_integrity) is set and
    /// the cassette is version 1.
    #[error(
        "cassette is version 1, which has no integrity hashes, and integrity is required; re-record it as version 2"
    )]
    IntegrityRequired,
    /// An entry's content no longer matches its digest: it was edited after recording.
    #[error(
        "cassette entry {turn} was edited after recording (its {part} no longer matches its hash); re-record instead of editing"
    )]
    EntryEdited {
        /// The entry's turn.
        turn: u64,
        /// `response` (checked by `responseHash`) or `prompt` (checked by `promptHash`).
        part: &'static str,
    },
    /// An entry's digest was not made for this cassette: it was copied from another recording.
    #[error(
        "cassette entry {turn} does not belong to this cassette (its responseHash was made for another cassetteId); do not splice recordings"
    )]
    EntrySpliced {
        /// The entry's turn.
        turn: u64,
    },
    /// The entries check out but `envelopeHash` does not: an envelope field was edited, or
    /// entries were added or removed.
    #[error(
        "cassette envelope was edited after recording (envelopeHash does not match its fields and entries); re-record instead of editing"
    )]
    EnvelopeEdited,
    /// The hash filter given for replay is not the one the cassette was recorded with.
    #[error("{}", filter_message(.recorded, .given))]
    HashFilterMismatch {
        /// The filter name stored in the cassette (`hashFilter`).
        recorded: Option<String>,
        /// The filter name given to the replay.
        given: Option<String>,
    },
    /// Strict replay: the request's prompt hash is not the recorded one.
    #[error(
        "cassette replay: turn {turn} sent a different request than was recorded (prompt hash {expected_hash} recorded, {actual_hash} sent); re-record, or replay non-strict to explore (`runtape replay --non-strict`, or `strict: false`)\n{diff}"
    )]
    Mismatch {
        /// The turn (entry index) being replayed.
        turn: u64,
        /// The recorded `promptHash`.
        expected_hash: String,
        /// The hash of the request that arrived.
        actual_hash: String,
        /// Changed hunks of a line diff of the two prompts' pretty JSON (`-` recorded, `+`
        /// sent), or a note when the cassette holds only the hash.
        diff: String,
    },
    /// The replay was asked for more turns than the cassette holds.
    #[error(
        "cassette replay exhausted: all {turns} recorded turns were served and another call came; call reset() to replay again, or re-record a longer run"
    )]
    Exhausted {
        /// How many entries the cassette holds.
        turns: u64,
    },
    /// An exchange cannot be stored so that it reads back and hashes the same.
    #[error("cassette cannot encode {location}: {detail}")]
    Unencodable {
        /// `entry N`, `request of turn N`, ...
        location: String,
        /// What cannot be encoded, and where.
        detail: String,
    },
    /// Something is wrong in a delegated child's section (version 4): its path, the child
    /// run that asked (when replaying), and what is wrong there.
    #[error("{}: {error}", child_name(.child, .run))]
    InChild {
        /// The child's path in the tree (`3.0`).
        child: String,
        /// The child run whose request it was, when replaying.
        run: Option<String>,
        /// What is wrong.
        error: Box<CassetteError>,
    },
    /// A delegated child asked for a model turn and the cassette has no section for it.
    #[error(
        "cassette replay: {} asked for a model turn, but the cassette holds no recording of it; export the cassette from the parent run with `runtape cassette export` (children are recorded from cassette version 4)",
        child_name(.child, .run)
    )]
    NoSection {
        /// The child's path in the tree.
        child: String,
        /// The child run.
        run: Option<String>,
    },
    /// Retrievals are not numbered 0, 1, 2, ... in file order.
    #[error(
        "cassette retrieval at position {position} has index {found}; retrievals must be numbered 0, 1, 2, ... in order (re-record rather than edit)"
    )]
    RetrievalOrder {
        /// Position in its `retrievals` list.
        position: u64,
        /// The `index` found there.
        found: u64,
    },
    /// A recorded retrieval no longer matches its `retrievalHash`: its query or passages were
    /// edited after recording, or it was copied from another recording.
    #[error(
        "cassette retrieval {index} was edited after recording (its query or passages no longer match its retrievalHash); re-record instead of editing"
    )]
    RetrievalEdited {
        /// Its index.
        index: u64,
    },
    /// The recorded session start no longer matches its `sessionHash`.
    #[error(
        "cassette session history was edited after recording (it no longer matches its sessionHash); re-record instead of editing"
    )]
    SessionEdited,
    /// Strict replay: the run asked the retriever something else than the recording did.
    #[error(
        "cassette replay: retrieval {index} asked the retriever something else than was recorded (recorded {recorded}, asked {asked}); re-record, or replay non-strict to explore (`runtape replay --non-strict`)"
    )]
    RetrievalMismatch {
        /// The retrieval's index in its section.
        index: u64,
        /// The recorded query (one line, shortened).
        recorded: String,
        /// The query the replay would have sent (one line, shortened).
        asked: String,
    },
    /// The replay asked the retriever more often than the recording did.
    #[error(
        "cassette replay exhausted: all {count} recorded retrievals were served and the run asked again; re-record a longer run"
    )]
    RetrievalsExhausted {
        /// How many retrievals the section holds.
        count: u64,
    },
    /// The operating system's random source failed while choosing a cassette id.
    #[error("cannot choose a random cassetteId: {detail}; pass RecordOptions::cassette_id")]
    Random {
        /// The error reported.
        detail: String,
    },
}

fn child_name(child: &str, run: &Option<String>) -> String {
    match run {
        Some(run) => format!("child {child} (run {run})"),
        None => format!("child {child}"),
    }
}

fn filter_message(recorded: &Option<String>, given: &Option<String>) -> String {
    match (recorded, given) {
        (Some(r), None) => format!(
            "cassette was recorded with hash filter `{r}` but the replay has none; pass the same filter to ReplayOptions::hash_filter"
        ),
        (None, Some(g)) => format!(
            "cassette was recorded without a hash filter but the replay has `{g}`; remove the filter or re-record with it"
        ),
        (Some(r), Some(g)) => format!(
            "cassette was recorded with hash filter `{r}` but the replay has `{g}`; use the same filter (name and behaviour) on both sides"
        ),
        (None, None) => "hash filters agree".to_owned(),
    }
}

impl CassetteError {
    /// The error as a [`ProviderError`] from the provider described by `provider`: class
    /// `bad_request`, never retryable (replaying the same request gives the same answer), the
    /// message being this error's text. Replay and recording providers return this from
    /// `complete` and keep the typed error for `last_error()`.
    pub fn to_provider_error(&self, provider: &str) -> ProviderError {
        let mut error =
            ProviderError::new(provider, ProviderErrorClass::BadRequest, self.to_string());
        error.retryable = false;
        let inner = match self {
            CassetteError::InChild { error, .. } => error.as_ref(),
            e => e,
        };
        error.hint = match inner {
            CassetteError::Mismatch { .. } => {
                "the run no longer sends what was recorded".to_owned()
            }
            CassetteError::Exhausted { .. } => {
                "the run asked for more turns than were recorded".to_owned()
            }
            _ => "the cassette cannot serve this call".to_owned(),
        };
        error
    }

    pub(crate) fn unencodable(location: impl Into<String>, detail: impl Into<String>) -> Self {
        CassetteError::Unencodable {
            location: location.into(),
            detail: detail.into(),
        }
    }

    pub(crate) fn bad_field(
        location: impl Into<String>,
        field: &'static str,
        detail: impl Into<String>,
    ) -> Self {
        CassetteError::BadField {
            location: location.into(),
            field,
            detail: detail.into(),
        }
    }
}

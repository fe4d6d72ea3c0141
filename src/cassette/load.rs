//! Reading a cassette: size cap, version probe, strict parse, and every check a file must
//! pass before it becomes a [`Cassette`].
//!
//! The checks run in this order, and the first failure is returned:
//!
//! 1. size (`max_bytes`), JSON syntax, `version` ∈ {1, 2, 3, 4}, field names and types;
//!    `children` only from version 4, each section's `path` a child's path, no path twice;
//! 2. version 1: no version-2 field (`cassetteId`, `envelopeHash`, any `responseHash`), then
//!    `require_integrity` refuses it; versions 2 and 3: those fields present and well-formed;
//! 3. `recordedAt` is RFC 3339; entries and retrievals (and each child section's) are
//!    numbered 0, 1, 2, ... in file order; hashes are 64 lowercase hex digits; no integer
//!    beyond ±(2^53 − 1); a stored prompt hashes to its `promptHash` (as its version computes
//!    it);
//! 4. versions 2 to 4: the session start's `sessionHash` and each retrieval's
//!    `retrievalHash` are recomputed ([`SessionEdited`], [`RetrievalEdited`]), then each
//!    entry's `responseHash` with the file's `cassetteId` (and a child entry's section path),
//!    and
//!    `envelopeHash` over the envelope and the stored digests. An entry whose digest is wrong
//!    while the envelope checks out was edited ([`EntryEdited`]); one whose digest is wrong
//!    while the envelope does not check out either carries a digest from elsewhere
//!    ([`EntrySpliced`]); entries that check out under an envelope that does not means an
//!    envelope field changed or entries were added or removed ([`EnvelopeEdited`]).
//!
//! The hashes detect edits, splices and downgrades, not a forger: they are unkeyed, so
//! someone who recomputes all of them can write any cassette they like.
//!
//! [`EntryEdited`]: CassetteError::EntryEdited
//! [`EntrySpliced`]: CassetteError::EntrySpliced
//! [`EnvelopeEdited`]: CassetteError::EnvelopeEdited
//! [`SessionEdited`]: CassetteError::SessionEdited
//! [`RetrievalEdited`]: CassetteError::RetrievalEdited

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use super::error::CassetteError;
use super::format::{Cassette, CassetteData, CatalogChange, Entry, TREE_VERSION};
use super::hash::{self, is_hex};

/// The default [`LoadOptions::max_bytes`]: 64 MiB.
pub const DEFAULT_MAX_BYTES: u64 = 64 * 1024 * 1024;

/// How strictly to read a cassette file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadOptions {
    /// Refuse version-1 cassettes (which carry no hashes). Set it wherever a cassette gates
    /// something (CI, a model-upgrade check) so that a file stripped of its hashes is refused.
    pub require_integrity: bool,
    /// Files larger than this are refused before parsing.
    pub max_bytes: u64,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            require_integrity: false,
            max_bytes: DEFAULT_MAX_BYTES,
        }
    }
}

impl Cassette {
    /// Reads and verifies the cassette at `path` (see the module doc for every check).
    pub fn load(path: impl AsRef<Path>, options: &LoadOptions) -> Result<Cassette, CassetteError> {
        let path = path.as_ref();
        let io_error = |action: &'static str, e: std::io::Error| CassetteError::Io {
            path: path.display().to_string(),
            action,
            message: e.to_string(),
        };
        let file = fs::File::open(path).map_err(|e| io_error("open", e))?;
        let size = file.metadata().map_err(|e| io_error("stat", e))?.len();
        if size > options.max_bytes {
            return Err(CassetteError::TooLarge {
                size,
                limit: options.max_bytes,
            });
        }
        let mut bytes = Vec::new();
        // Read one byte past the limit so a file that grew after the size check is caught.
        file.take(options.max_bytes.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| io_error("read", e))?;
        Cassette::from_slice(&bytes, options)
    }

    /// Parses and verifies cassette text, as [`Cassette::load`] does for a file.
    pub fn from_json(text: &str, options: &LoadOptions) -> Result<Cassette, CassetteError> {
        Cassette::from_slice(text.as_bytes(), options)
    }

    /// Parses and verifies cassette bytes (UTF-8 JSON).
    pub fn from_slice(bytes: &[u8], options: &LoadOptions) -> Result<Cassette, CassetteError> {
        let size = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        if size > options.max_bytes {
            return Err(CassetteError::TooLarge {
                size,
                limit: options.max_bytes,
            });
        }
        probe_version(bytes)?;
        let data: CassetteData =
            serde_json::from_slice(bytes).map_err(|e| CassetteError::Malformed {
                detail: serde_detail(&e),
            })?;
        verify(&data, options)?;
        Ok(Cassette { data })
    }
}

/// Reads only `version`, so an unknown version is reported as such rather than as whatever
/// unknown field that version added.
fn probe_version(bytes: &[u8]) -> Result<(), CassetteError> {
    #[derive(Deserialize)]
    struct Probe {
        version: Value,
    }
    let probe: Probe = serde_json::from_slice(bytes).map_err(|e| CassetteError::Malformed {
        detail: serde_detail(&e),
    })?;
    match probe.version.as_u64() {
        Some(v) if (1..=u64::from(TREE_VERSION)).contains(&v) => Ok(()),
        _ => Err(CassetteError::UnsupportedVersion {
            found: snippet(&probe.version.to_string()),
        }),
    }
}

/// Every check after parsing, in the order the module doc gives.
pub(crate) fn verify(data: &CassetteData, options: &LoadOptions) -> Result<(), CassetteError> {
    if data.version == 1 {
        let downgrade = if data.cassette_id.is_some() {
            Some("cassetteId")
        } else if data.envelope_hash.is_some() {
            Some("envelopeHash")
        } else if data.entries.iter().any(|e| e.response_hash().is_some()) {
            Some("responseHash")
        } else if !data.catalogs.is_empty() {
            Some("catalogs")
        } else if !data.tool_results.is_empty() {
            Some("toolResults")
        } else if !data.catalog_changes.is_empty() {
            Some("catalogChanges")
        } else if !data.children.is_empty() {
            Some("children")
        } else if !data.memory.is_empty() {
            Some("memory")
        } else {
            super::session::downgraded_field(data)
        };
        if let Some(field) = downgrade {
            return Err(CassetteError::Downgrade { field });
        }
        if options.require_integrity {
            return Err(CassetteError::IntegrityRequired);
        }
    } else {
        check_v2_fields(data)?;
    }
    if data.version < TREE_VERSION && !data.children.is_empty() {
        return Err(CassetteError::Downgrade { field: "children" });
    }
    check_rfc3339(&data.recorded_at)
        .map_err(|d| CassetteError::bad_field("envelope", "recordedAt", d))?;
    check_entries(data.version, &data.entries)?;
    check_catalog_changes(&data.catalog_changes, data.entries.len(), &data.catalogs)?;
    for (i, child) in data.children.iter().enumerate() {
        let in_child = |error| CassetteError::InChild {
            child: child.path.clone(),
            run: None,
            error: Box::new(error),
        };
        check_tree_path(format!("children[{i}]"), &child.path)?;
        if data.children[..i].iter().any(|c| c.path == child.path) {
            return Err(CassetteError::bad_field(
                format!("children[{i}]"),
                "path",
                format!("child {} has two sections", child.path),
            ));
        }
        check_entries(data.version, &child.entries).map_err(in_child)?;
        check_catalog_changes(&child.catalog_changes, child.entries.len(), &data.catalogs)
            .map_err(in_child)?;
    }
    super::session::check_shapes(data)?;
    if data.version != 1 {
        check_digests(data)?;
    }
    Ok(())
}

/// Numbering, hash shapes, numbers and stored prompts of one section's entries.
fn check_entries(version: u32, entries: &[Entry]) -> Result<(), CassetteError> {
    for (position, entry) in entries.iter().enumerate() {
        let position = u64::try_from(position).unwrap_or(u64::MAX);
        if entry.turn_index() != position {
            return Err(CassetteError::TurnOrder {
                position,
                found: entry.turn_index(),
            });
        }
        let location = format!("entry {position}");
        if !is_hex(entry.prompt_hash(), 64) {
            return Err(CassetteError::bad_field(
                location,
                "promptHash",
                "not 64 lowercase hex digits",
            ));
        }
        let response = entry
            .response_value()
            .map_err(|d| CassetteError::unencodable(location.clone(), d))?;
        hash::check_numbers(&response)
            .map_err(|d| CassetteError::unencodable(location.clone(), d))?;
        if let Some(prompt) = entry.prompt() {
            let digest = hash::prompt_hash_for(version, prompt)
                .map_err(|d| CassetteError::unencodable(location, d))?;
            if digest != entry.prompt_hash() {
                return Err(CassetteError::EntryEdited {
                    turn: position,
                    part: "prompt",
                });
            }
        }
    }
    Ok(())
}

/// The later tool lists of one section (the run's, or a child's) against what a recording
/// can produce: each names a server the cassette has a catalog for, and is listed at a step
/// boundary the section's `entries` reach, no earlier than the same server's list before it (a
/// child's section holds each server's lists together, so servers interleave out of step
/// order). A replay serves a list when the section's model calls reach its `atEntry`: a list
/// past the last entry would silently never be served, one out of order at the wrong step.
fn check_catalog_changes(
    changes: &[CatalogChange],
    entries: usize,
    catalogs: &BTreeMap<String, Value>,
) -> Result<(), CassetteError> {
    let entries = u64::try_from(entries).unwrap_or(u64::MAX);
    let mut previous: BTreeMap<&str, u64> = BTreeMap::new();
    for (i, change) in changes.iter().enumerate() {
        let location = format!("catalogChanges[{i}]");
        if !catalogs.contains_key(&change.server) {
            return Err(CassetteError::bad_field(
                location,
                "server",
                format!(
                    "`{}` has no catalog in this cassette",
                    snippet(&change.server)
                ),
            ));
        }
        if change.at_entry > entries {
            return Err(CassetteError::bad_field(
                location,
                "atEntry",
                format!(
                    "{} is past the section's {entries} model calls",
                    change.at_entry
                ),
            ));
        }
        if let Some(&before) = previous.get(change.server.as_str())
            && change.at_entry < before
        {
            return Err(CassetteError::bad_field(
                location,
                "atEntry",
                format!(
                    "{} is earlier than {}'s list before it ({before})",
                    change.at_entry,
                    snippet(&change.server)
                ),
            ));
        }
        previous.insert(&change.server, change.at_entry);
    }
    Ok(())
}

/// True for a child's path: `SEQ.INDEX` pairs of decimal numbers joined by dots (`3.0`,
/// `3.0.5.1`).
pub(crate) fn is_tree_path(path: &str) -> bool {
    let parts: Vec<&str> = path.split('.').collect();
    parts.len().is_multiple_of(2)
        && parts.len() <= 2 * 64
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.len() <= 20
                && p.bytes().all(|b| b.is_ascii_digit())
                && p.parse::<u64>().is_ok()
        })
}

/// Refuses `path` (the `path` field at `location`) unless it is a child's path
/// ([`is_tree_path`]).
pub(crate) fn check_tree_path(
    location: impl Into<String>,
    path: &str,
) -> Result<(), CassetteError> {
    if is_tree_path(path) {
        return Ok(());
    }
    Err(CassetteError::bad_field(
        location,
        "path",
        format!("`{}` is not a child's path such as 3.0", snippet(path)),
    ))
}

/// A path's numbers, for sorting sections into tree order (a child's path extends its
/// parent's, so numeric order is depth-first order).
pub(crate) fn path_key(path: &str) -> Vec<u64> {
    path.split('.').filter_map(|p| p.parse().ok()).collect()
}

fn check_v2_fields(data: &CassetteData) -> Result<(), CassetteError> {
    let missing = |location: String, field| CassetteError::MissingField { location, field };
    let id = data
        .cassette_id
        .as_deref()
        .ok_or_else(|| missing("envelope".into(), "cassetteId"))?;
    if !is_hex(id, 32) {
        return Err(CassetteError::bad_field(
            "envelope",
            "cassetteId",
            "not 32 lowercase hex digits",
        ));
    }
    let envelope = data
        .envelope_hash
        .as_deref()
        .ok_or_else(|| missing("envelope".into(), "envelopeHash"))?;
    if !is_hex(envelope, 64) {
        return Err(CassetteError::bad_field(
            "envelope",
            "envelopeHash",
            "not 64 lowercase hex digits",
        ));
    }
    let all = data
        .entries
        .iter()
        .enumerate()
        .map(|(i, e)| (format!("entry {i}"), e))
        .chain(data.children.iter().flat_map(|c| {
            c.entries
                .iter()
                .enumerate()
                .map(move |(i, e)| (format!("entry {i} of child {}", c.path), e))
        }));
    for (location, entry) in all {
        let digest = entry
            .response_hash()
            .ok_or_else(|| missing(location.clone(), "responseHash"))?;
        if !is_hex(digest, 64) {
            return Err(CassetteError::bad_field(
                location,
                "responseHash",
                "not 64 lowercase hex digits",
            ));
        }
    }
    Ok(())
}

fn check_digests(data: &CassetteData) -> Result<(), CassetteError> {
    let Some(id) = data.cassette_id.as_deref() else {
        return Err(CassetteError::MissingField {
            location: "envelope".into(),
            field: "cassetteId",
        });
    };
    let envelope = data
        .compute_envelope_hash()
        .map_err(|d| CassetteError::unencodable("envelope", d))?;
    let envelope_ok = envelope.is_some() && envelope.as_deref() == data.envelope_hash.as_deref();
    let sections = std::iter::once((None, &data.entries)).chain(
        data.children
            .iter()
            .map(|c| (Some(c.path.as_str()), &c.entries)),
    );
    super::session::check_digests(data, id)?;
    for (section, entries) in sections {
        for entry in entries {
            let turn = entry.turn_index();
            let digest = entry
                .digest_in(id, section)
                .map_err(|d| CassetteError::unencodable(format!("entry {turn}"), d))?;
            if Some(digest.as_str()) != entry.response_hash() {
                let error = if envelope_ok {
                    CassetteError::EntryEdited {
                        turn,
                        part: "response",
                    }
                } else {
                    CassetteError::EntrySpliced { turn }
                };
                return Err(match section {
                    Some(path) => CassetteError::InChild {
                        child: path.to_owned(),
                        run: None,
                        error: Box::new(error),
                    },
                    None => error,
                });
            }
        }
    }
    if envelope_ok {
        Ok(())
    } else {
        Err(CassetteError::EnvelopeEdited)
    }
}

/// Checks `text` is an RFC 3339 date-time (`2025-01-31T12:00:00Z`, `...T12:00:00.5+01:00`).
pub(crate) fn check_rfc3339(text: &str) -> Result<(), String> {
    let complaint = || {
        format!(
            "`{}` is not an RFC 3339 date-time such as 2025-01-31T12:00:00Z",
            snippet(text)
        )
    };
    let b = text.as_bytes();
    let num = |range: std::ops::Range<usize>| -> Option<u32> {
        let digits = b.get(range)?;
        digits.iter().try_fold(0u32, |acc, &d| {
            d.is_ascii_digit().then(|| acc * 10 + u32::from(d - b'0'))
        })
    };
    let at = |i: usize, allowed: &[u8]| b.get(i).is_some_and(|c| allowed.contains(c));
    let fields = (|| {
        let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
        let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
        let separators =
            at(4, b"-") && at(7, b"-") && at(10, b"Tt") && at(13, b":") && at(16, b":");
        Some((separators, year, month, day, hour, minute, second))
    })();
    let Some((true, year, month, day, hour, minute, second)) = fields else {
        return Err(complaint());
    };
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return Err(complaint()),
    };
    if day == 0 || day > days || hour > 23 || minute > 59 || second > 60 {
        return Err(complaint());
    }
    let mut rest = &b[19..];
    if let Some(fraction) = rest.strip_prefix(b".") {
        let digits = fraction.iter().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 {
            return Err(complaint());
        }
        rest = &fraction[digits..];
    }
    let offset_ok = match rest {
        [b'Z' | b'z'] => true,
        [b'+' | b'-', h1, h2, b':', m1, m2] => {
            let two = |a: u8, b: u8| {
                (a.is_ascii_digit() && b.is_ascii_digit()).then(|| (a - b'0') * 10 + (b - b'0'))
            };
            matches!((two(*h1, *h2), two(*m1, *m2)), (Some(h), Some(m)) if h <= 23 && m <= 59)
        }
        _ => false,
    };
    if offset_ok { Ok(()) } else { Err(complaint()) }
}

/// At most 60 characters of `text` on one line, for error messages about hostile input.
pub(crate) fn snippet(text: &str) -> String {
    crate::text::one_line(text, 60)
}

/// serde_json's complaint on one line: it quotes the offending key or value, which comes
/// from the file and may hold newlines or be huge.
fn serde_detail(e: &serde_json::Error) -> String {
    crate::text::one_line(&e.to_string(), 300)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_childs_path_is_seq_index_pairs_and_anything_else_is_refused_naming_the_field() {
        for good in ["3.0", "3.0.5.1", "0.0"] {
            assert_eq!(check_tree_path("recording", good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "3",
            "3.0.5",
            "3.x",
            "3..0",
            "-1.0",
            "99999999999999999999999.0",
        ] {
            let err = check_tree_path("children[2]", bad).expect_err(bad);
            let text = err.to_string();
            assert!(
                text.contains("children[2]") && text.contains("not a child's path"),
                "{bad}: {text}"
            );
        }
    }

    #[test]
    fn rfc3339_accepts_the_usual_forms_and_refuses_the_rest() {
        for good in [
            "2025-01-31T12:00:00Z",
            "2024-02-29t23:59:60.123456+05:30",
            "2025-12-01T00:00:00-00:00",
        ] {
            assert_eq!(check_rfc3339(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "2025-01-31",
            "2025-02-29T00:00:00Z",
            "2025-01-31 12:00:00Z",
            "2025-01-31T12:00:00",
            "2025-01-31T12:00:00.Z",
            "2025-13-01T00:00:00Z",
            "2025-01-31T24:00:00Z",
            "2025-01-31T12:00:00+24:00",
            "２０２５-01-31T12:00:00Z",
        ] {
            assert!(check_rfc3339(bad).is_err(), "{bad}");
        }
    }

    fn change(server: &str, at_entry: u64) -> CatalogChange {
        CatalogChange {
            server: server.into(),
            at_entry,
            catalog: serde_json::json!([]),
        }
    }

    #[test]
    fn later_tool_lists_must_be_reachable_in_order_and_of_a_known_server() {
        let catalogs: BTreeMap<String, Value> = [("fs", Value::Null), ("git", Value::Null)]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        // As a child's section is written: each server's lists together, servers interleaved,
        // the last list at the section's end.
        let good = [
            change("git", 1),
            change("git", 2),
            change("fs", 0),
            change("fs", 3),
        ];
        assert_eq!(check_catalog_changes(&good, 3, &catalogs), Ok(()));
        assert_eq!(check_catalog_changes(&[], 0, &catalogs), Ok(()));

        let refused = |changes: &[CatalogChange], entries, field: &str, index: usize| {
            let text = check_catalog_changes(changes, entries, &catalogs)
                .expect_err("refused")
                .to_string();
            assert!(
                text.contains(&format!("catalogChanges[{index}]")) && text.contains(field),
                "{text}"
            );
        };
        refused(&good, 2, "atEntry", 3);
        refused(&[change("fs", 2), change("fs", 1)], 5, "atEntry", 1);
        refused(&[change("fs", 0), change("mail", 0)], 5, "server", 1);
    }

    #[test]
    fn a_cassette_whose_later_list_is_past_its_last_call_is_refused_at_load() {
        let mut builder = super::super::record::CassetteBuilder::new(
            super::super::record::RecordOptions::default(),
        )
        .expect("a recording");
        builder
            .add_catalog("fs", serde_json::json!([{"name": "read"}]))
            .expect("first list");
        builder
            .add_catalog("fs", serde_json::json!([{"name": "write"}]))
            .expect("second list");
        let json = builder
            .finish("2026-11-26T12:00:00Z", "scripted")
            .expect("finished")
            .to_json()
            .expect("encodes");
        let options = LoadOptions::default();
        Cassette::from_json(&json, &options).expect("the recording loads");
        assert!(json.contains("\"atEntry\": 0"), "{json}");
        let edited = json.replace("\"atEntry\": 0", "\"atEntry\": 7");
        let text = Cassette::from_json(&edited, &options)
            .expect_err("refused")
            .to_string();
        assert!(
            text.contains("catalogChanges[0]") && text.contains("atEntry") && text.contains("past"),
            "{text}"
        );
    }

    #[test]
    fn snippets_cut_on_character_boundaries() {
        let long = "é".repeat(100);
        assert_eq!(snippet(&long).chars().count(), 61);
        assert_eq!(snippet("short"), "short");
    }
}

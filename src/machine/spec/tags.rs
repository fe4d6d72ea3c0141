//! A run's tags: `key=value` pairs a person sets when starting it (`runtape run --tag
//! team=search`), kept in the run's spec so its sealed head, and so `verify`, covers them.
//! They change nothing the machine does; lists filter and group runs by them.

use std::collections::BTreeMap;

use super::SpecError;

/// The most tags one run carries.
pub const MAX_TAGS: usize = 32;
/// The longest tag key, in bytes.
pub const MAX_TAG_KEY_BYTES: usize = 64;
/// The longest tag value, in bytes.
pub const MAX_TAG_VALUE_BYTES: usize = 256;

/// Why a tag is refused, as one line (without the `--tag` prefix the caller adds).
pub fn tag_problem(key: &str, value: &str) -> Option<String> {
    let key_ok = !key.is_empty()
        && key.len() <= MAX_TAG_KEY_BYTES
        && key
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && key.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'-' | b'.')
        });
    if !key_ok {
        return Some(format!(
            "the key must be 1 to {MAX_TAG_KEY_BYTES} lowercase letters, digits, `_`, `-` or `.`, beginning with a letter or digit"
        ));
    }
    if value.is_empty() || value.len() > MAX_TAG_VALUE_BYTES {
        return Some(format!(
            "the value must be 1 to {MAX_TAG_VALUE_BYTES} bytes"
        ));
    }
    if value.chars().any(char::is_control) {
        return Some("the value may not hold control characters (newlines, tabs, …)".into());
    }
    None
}

/// Checks a spec's tags as [`tag_problem`] does, and their number.
pub(super) fn validate(tags: &BTreeMap<String, String>) -> Result<(), SpecError> {
    if tags.len() > MAX_TAGS {
        return Err(SpecError::OutOfRange {
            path: "tags".into(),
            reason: format!("a run carries at most {MAX_TAGS} tags (got {})", tags.len()),
        });
    }
    for (key, value) in tags {
        if let Some(why) = tag_problem(key, value) {
            return Err(SpecError::OutOfRange {
                path: format!("tags.{key}"),
                reason: why,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values_are_checked() {
        assert_eq!(tag_problem("team", "search"), None);
        assert_eq!(tag_problem("ab.c-d_9", "any text, even ü"), None);
        assert!(tag_problem("", "x").is_some());
        assert!(tag_problem("Team", "x").is_some());
        assert!(tag_problem("-x", "x").is_some());
        assert!(tag_problem("a b", "x").is_some());
        assert!(tag_problem("k", "").is_some());
        assert!(tag_problem("k", "two\nlines").is_some());
        assert!(tag_problem(&"k".repeat(65), "x").is_some());
        assert!(tag_problem("k", &"v".repeat(257)).is_some());
    }

    #[test]
    fn too_many_tags_are_refused() {
        let tags: BTreeMap<String, String> = (0..=MAX_TAGS)
            .map(|i| (format!("k{i}"), "v".into()))
            .collect();
        assert!(validate(&tags).is_err());
    }
}

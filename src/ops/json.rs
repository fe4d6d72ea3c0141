//! JSON for readers that hold numbers as doubles (JavaScript, jq, most dashboards): every
//! integer beyond 2^53 is written as a string, everything else as it is.
//!
//! This is an *output* rule. Stored encodings — events in the database, receipts, cassettes —
//! are hashed and chained, so they keep their numbers; only what `runtape … --json` prints and
//! what `runtape serve` answers goes through here. Event times (`at`, a hybrid logical clock:
//! wall milliseconds shifted left by 16 bits) exceed 2^53 today, so they always come out as
//! strings; costs and counters do only when they grow that large.

use serde::Serialize;
use serde_json::Value;

/// The largest integer every JSON reader holds exactly: 2^53. Larger ones are strings.
pub const MAX_EXACT: u64 = 1 << 53;

/// `value` as a JSON value with every integer beyond [`MAX_EXACT`] (either sign) replaced by
/// its decimal string, and every known secret value replaced by `[redacted:NAME]` (see
/// [`crate::secrets`]: what runs store is scrubbed already; this also covers a secret
/// registered after it was stored, such as the serve token). Call it on anything about to be
/// written for another program.
pub fn safe_value(value: &impl Serialize) -> Result<Value, serde_json::Error> {
    let mut v = serde_json::to_value(value)?;
    make_safe(&mut v);
    crate::secrets::global().scrub_value(&mut v);
    Ok(v)
}

/// [`safe_value`] written as one line of JSON text.
pub fn encode(value: &impl Serialize) -> Result<String, serde_json::Error> {
    serde_json::to_string(&safe_value(value)?)
}

/// Rewrites `v` in place: integers beyond [`MAX_EXACT`] become strings. Floats are left
/// alone (they are approximate anyway).
pub fn make_safe(v: &mut Value) {
    match v {
        Value::Number(n) => {
            let big = match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => u > MAX_EXACT,
                (None, Some(i)) => i.unsigned_abs() > MAX_EXACT,
                (None, None) => false,
            };
            if big {
                *v = Value::String(n.to_string());
            }
        }
        Value::Array(items) => items.iter_mut().for_each(make_safe),
        Value::Object(map) => map.values_mut().for_each(make_safe),
        Value::Null | Value::Bool(_) | Value::String(_) => {}
    }
}

/// The integers beyond [`MAX_EXACT`] that `v` still holds as numbers, as JSON pointers: for
/// tests that check an output is safe.
#[cfg(test)]
pub fn unsafe_integers(v: &Value) -> Vec<String> {
    let mut out = Vec::new();
    walk(v, &mut String::new(), &mut out);
    out
}

#[cfg(test)]
fn walk(v: &Value, path: &mut String, out: &mut Vec<String>) {
    match v {
        Value::Number(n) => {
            let big = n.as_u64().is_some_and(|u| u > MAX_EXACT)
                || n.as_i64().is_some_and(|i| i.unsigned_abs() > MAX_EXACT);
            if big {
                out.push(format!("{path} = {n}"));
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("/{i}"));
                walk(item, path, out);
                path.truncate(len);
            }
        }
        Value::Object(map) => {
            for (k, item) in map {
                let len = path.len();
                path.push('/');
                path.push_str(k);
                walk(item, path, out);
                path.truncate(len);
            }
        }
        Value::Null | Value::Bool(_) | Value::String(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn integers_beyond_two_to_the_53_become_strings_and_nothing_else_changes() {
        let hlc = 1_763_683_200_123u64 << 16;
        let v = safe_value(&json!({
            "at": hlc,
            "small": 42,
            "edge": MAX_EXACT,
            "past": MAX_EXACT + 1,
            "negative": -(MAX_EXACT as i64) - 1,
            "float": 1e300,
            "nested": [{"at": hlc}, "text", null, true],
        }))
        .expect("encodes");
        assert_eq!(v["at"], json!(hlc.to_string()));
        assert_eq!(v["small"], json!(42));
        assert_eq!(v["edge"], json!(MAX_EXACT));
        assert_eq!(v["past"], json!((MAX_EXACT + 1).to_string()));
        assert_eq!(v["negative"], json!((-(MAX_EXACT as i64) - 1).to_string()));
        assert_eq!(v["float"], json!(1e300));
        assert_eq!(v["nested"][0]["at"], json!(hlc.to_string()));
        assert_eq!(v["nested"][1], json!("text"));
        assert!(unsafe_integers(&v).is_empty());
        assert_eq!(
            unsafe_integers(&json!({"a": [1, hlc]})),
            vec![format!("/a/1 = {hlc}")]
        );
    }
}

//! The argument templates of a compensation (`compensate = { tool, arguments }`): the undo's
//! arguments, written as JSON whose strings may name values of the original call.
//!
//! # The language
//!
//! A placeholder is `{args.PATH}` (the original call's arguments) or `{result.PATH}` (its
//! result, read as JSON when it is JSON text); `PATH` is keys separated by dots, a number
//! indexing an array (`{result.items.0.id}`). `{args}` and `{result}` name the whole value.
//! A string that is exactly one placeholder is replaced by the value as it is (a number stays
//! a number, an object an object); a placeholder inside other text is replaced by its text (a
//! string, number or boolean; anything else is an error). `{{` and `}}` are literal braces.
//! Keys of objects are taken as written. Nothing else is evaluated: no defaults, no functions.
//!
//! [`check`] is called when a spec is loaded, so a malformed template is refused before any
//! run starts; [`fill`] is called when the original call completes, and a value the result
//! does not have is recorded on the saga entry (its compensation then fails, see
//! [`saga`](super)).

use serde_json::Value;

/// Where a placeholder reads from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Root {
    Args,
    Result,
}

/// One piece of a template string.
#[derive(Debug, PartialEq)]
enum Piece<'a> {
    Text(String),
    Hole(Root, Vec<&'a str>),
}

/// Checks every string in `arguments` parses as a template. The error is one line naming the
/// string and what is wrong with it.
pub fn check(arguments: &Value) -> Result<(), String> {
    walk(arguments, &mut |s| parse(s).map(|_| ()))
}

/// `arguments` with every placeholder replaced by the value it names in the original call's
/// `args` and `result`. Call it when the call completed; the error says which placeholder has
/// no value.
pub fn fill(arguments: &Value, args: &Value, result: &Value) -> Result<Value, String> {
    let result = match result {
        Value::String(s) => serde_json::from_str(s).unwrap_or_else(|_| result.clone()),
        other => other.clone(),
    };
    fill_value(arguments, args, &result)
}

fn walk(v: &Value, f: &mut dyn FnMut(&str) -> Result<(), String>) -> Result<(), String> {
    match v {
        Value::String(s) => f(s),
        Value::Array(items) => items.iter().try_for_each(|i| walk(i, f)),
        Value::Object(map) => map.values().try_for_each(|i| walk(i, f)),
        _ => Ok(()),
    }
}

fn fill_value(v: &Value, args: &Value, result: &Value) -> Result<Value, String> {
    Ok(match v {
        Value::String(s) => fill_string(s, args, result)?,
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|i| fill_value(i, args, result))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, i)| Ok((k.clone(), fill_value(i, args, result)?)))
                .collect::<Result<_, String>>()?,
        ),
        other => other.clone(),
    })
}

fn fill_string(s: &str, args: &Value, result: &Value) -> Result<Value, String> {
    let pieces = parse(s)?;
    let lookup = |root: Root, path: &[&str]| -> Result<Value, String> {
        let base = match root {
            Root::Args => args,
            Root::Result => result,
        };
        let mut at = base;
        for seg in path {
            at = match at {
                Value::Object(m) => m.get(*seg),
                Value::Array(a) => seg.parse::<usize>().ok().and_then(|i| a.get(i)),
                _ => None,
            }
            .ok_or_else(|| {
                format!(
                    "`{s}`: the call's {} has no `{}`",
                    name(root),
                    path.join(".")
                )
            })?;
        }
        Ok(at.clone())
    };
    if let [Piece::Hole(root, path)] = pieces.as_slice() {
        return lookup(*root, path);
    }
    let mut out = String::new();
    for p in &pieces {
        match p {
            Piece::Text(t) => out.push_str(t),
            Piece::Hole(root, path) => match lookup(*root, path)? {
                Value::String(v) => out.push_str(&v),
                v @ (Value::Number(_) | Value::Bool(_)) => out.push_str(&v.to_string()),
                _ => {
                    return Err(format!(
                        "`{s}`: `{}` is not text, a number or a boolean, so it cannot be part of a longer string (make the whole string the placeholder)",
                        path.join(".")
                    ));
                }
            },
        }
    }
    Ok(Value::String(out))
}

fn name(root: Root) -> &'static str {
    match root {
        Root::Args => "arguments",
        Root::Result => "result",
    }
}

fn parse(s: &str) -> Result<Vec<Piece<'_>>, String> {
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut rest = s;
    while let Some(c) = rest.chars().next() {
        if let Some(after) = rest.strip_prefix("{{") {
            text.push('{');
            rest = after;
        } else if let Some(after) = rest.strip_prefix("}}") {
            text.push('}');
            rest = after;
        } else if c == '}' {
            return Err(format!("`{s}`: a lone `}}` (write `}}}}` for a brace)"));
        } else if c == '{' {
            let end = rest
                .find('}')
                .ok_or_else(|| format!("`{s}`: a `{{` is not closed (write `{{{{` for a brace)"))?;
            let inner = &rest[1..end];
            let mut segs = inner.split('.');
            let root = match segs.next() {
                Some("args") => Root::Args,
                Some("result") => Root::Result,
                _ => {
                    return Err(format!(
                        "`{s}`: `{{{inner}}}` must start with `args` or `result` (e.g. `{{result.id}}`)"
                    ));
                }
            };
            let path: Vec<&str> = segs.collect();
            if path.iter().any(|p| {
                p.is_empty()
                    || !p
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            }) {
                return Err(format!(
                    "`{s}`: `{{{inner}}}` has an empty or invalid key (keys are letters, digits, `_` and `-`, separated by dots)"
                ));
            }
            if !text.is_empty() {
                pieces.push(Piece::Text(std::mem::take(&mut text)));
            }
            pieces.push(Piece::Hole(root, path));
            rest = &rest[end + 1..];
        } else {
            text.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    if !text.is_empty() || pieces.is_empty() {
        pieces.push(Piece::Text(text));
    }
    Ok(pieces)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_whole_placeholder_keeps_its_type_and_text_interpolates() {
        let t = json!({"id": "{result.id}", "name": "br-{args.name}-{result.n}", "all": ["{args}"], "n": 3});
        let filled = fill(&t, &json!({"name": "x"}), &json!("{\"id\": 7, \"n\": 2}"));
        assert_eq!(
            filled,
            Ok(json!({"id": 7, "name": "br-x-2", "all": [{"name": "x"}], "n": 3}))
        );
    }

    #[test]
    fn arrays_are_indexed_and_braces_escape() {
        let t = json!("{{{result.items.1}}}");
        assert_eq!(
            fill(&t, &json!({}), &json!({"items": ["a", "b"]})),
            Ok(json!("{b}"))
        );
    }

    #[test]
    fn a_missing_value_is_named() {
        let e = fill(&json!("{result.branch}"), &json!({}), &json!("not json"));
        assert_eq!(
            e,
            Err("`{result.branch}`: the call's result has no `branch`".into())
        );
    }

    #[test]
    fn bad_templates_are_refused_at_check() {
        for (t, why) in [
            ("{res.x}", "must start with `args` or `result`"),
            ("{args.}", "empty or invalid key"),
            ("{args.a b}", "empty or invalid key"),
            ("{args.a", "is not closed"),
            ("a}", "lone"),
        ] {
            let e = check(&json!({"k": [t]})).expect_err(t);
            assert!(e.contains(why), "{t}: {e}");
        }
        assert_eq!(check(&json!({"k": "plain {{text}}", "n": 1})), Ok(()));
    }

    #[test]
    fn an_object_cannot_be_part_of_text() {
        let e = fill(&json!("x-{args.o}"), &json!({"o": {}}), &json!(null));
        assert!(e.is_err_and(|e| e.contains("cannot be part of a longer string")));
    }
}

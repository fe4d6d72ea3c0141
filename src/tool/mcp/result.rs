//! What the model is given for an MCP tool's answer (`tools/call` result).
//!
//! - `structuredContent` is the structured form of the same result (MCP 2025-06-18), so the
//!   model gets it only when there is no `content`: as the JSON value itself. A result with
//!   both is given once, as its `content`.
//! - Only text blocks: the texts joined by newlines, as a string.
//! - Any other `content`: `{"content": [...]}` where a text block is its string, a resource link and an embedded text resource are kept as the server sent them
//!   (minus `_meta`), and binary data (images, audio, blob resources) — which no provider here
//!   accepts in a tool message — is replaced by a summary naming its type, MIME type, size and
//!   BLAKE3 digest, so the model knows it was there. Nothing is dropped without a trace.
//! - `isError: true`: the same text, as a tool error fed back to the model.
//! - A result whose JSON is larger than [`MAX_RESULT_BYTES`] fails the call (like a command
//!   tool's output over its cap) rather than flooding the conversation.

use serde_json::{Map, Value, json};

/// The largest result handed to the model, in bytes of JSON.
pub const MAX_RESULT_BYTES: usize = 1 << 20;

/// The model's view of `result` (a `CallToolResult` as JSON): `Ok` for a result, `Err` with
/// the text of a result the server marked `isError`, or of one too large to hand on.
pub(crate) fn for_model(result: &Value) -> Result<Value, String> {
    let blocks: Vec<Value> = result
        .get("content")
        .and_then(Value::as_array)
        .map(|items| items.iter().map(block).collect())
        .unwrap_or_default();
    let structured = result
        .get("structuredContent")
        .filter(|_| blocks.is_empty())
        .cloned();
    let is_error = result.get("isError").and_then(Value::as_bool) == Some(true);
    let all_text = blocks.iter().all(Value::is_string);
    let value = if let Some(structured) = structured {
        structured
    } else if all_text {
        Value::String(
            blocks
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join("\n"),
        )
    } else {
        let mut out = Map::new();
        out.insert("content".into(), Value::Array(blocks));
        Value::Object(out)
    };
    let size = match &value {
        Value::String(s) => s.len(),
        other => other.to_string().len(),
    };
    if size > MAX_RESULT_BYTES {
        return Err(format!(
            "the result is {size} bytes, more than the {MAX_RESULT_BYTES} a tool result may have – ask for less (a smaller range, a filter)"
        ));
    }
    if is_error {
        return Err(match value {
            Value::String(s) if !s.is_empty() => s,
            Value::String(_) => "the tool reported an error without a message".into(),
            other => other.to_string(),
        });
    }
    Ok(value)
}

/// One content block as the model sees it.
fn block(item: &Value) -> Value {
    let kind = item.get("type").and_then(Value::as_str).unwrap_or("");
    match kind {
        "text" => Value::String(
            item.get("text")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        ),
        "image" | "audio" => binary_summary(kind, item.get("mimeType"), item.get("data"), None),
        "resource" => {
            let resource = item.get("resource").cloned().unwrap_or(Value::Null);
            if resource.get("blob").is_some() {
                binary_summary(
                    "resource",
                    resource.get("mimeType"),
                    resource.get("blob"),
                    resource.get("uri"),
                )
            } else {
                json!({"type": "resource", "resource": without_meta(&resource)})
            }
        }
        _ => without_meta(item),
    }
}

/// `{"type", "mimeType", "bytes", "blake3", "uri"?, "note"}` for base64 `data`.
fn binary_summary(
    kind: &str,
    mime: Option<&Value>,
    data: Option<&Value>,
    uri: Option<&Value>,
) -> Value {
    let data = data.and_then(Value::as_str).unwrap_or_default();
    let digest = blake3::hash(data.as_bytes()).to_hex();
    let mut out = json!({
        "type": kind,
        "mimeType": mime.cloned().unwrap_or(Value::Null),
        "bytes": data.trim_end_matches('=').len() * 3 / 4,
        "blake3": &digest.as_str()[..16],
        "note": "binary content; not passed to the model",
    });
    if let (Some(uri), Some(map)) = (uri, out.as_object_mut()) {
        map.insert("uri".into(), uri.clone());
    }
    out
}

fn without_meta(v: &Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| k.as_str() != "_meta" && k.as_str() != "icons")
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_only_results_are_strings() {
        let r = json!({"content": [{"type": "text", "text": "Echo: hi"}]});
        assert_eq!(for_model(&r), Ok(Value::from("Echo: hi")));
        let two =
            json!({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]});
        assert_eq!(for_model(&two), Ok(Value::from("a\nb")));
        assert_eq!(for_model(&json!({})), Ok(Value::from("")));
    }

    #[test]
    fn structured_content_is_given_only_when_there_is_no_content() {
        let both = json!({
            "content": [{"type": "text", "text": "{\"temperature\": 22}"}],
            "structuredContent": {"temperature": 22}
        });
        assert_eq!(for_model(&both), Ok(Value::from("{\"temperature\": 22}")));
        let only = json!({"content": [], "structuredContent": {"temperature": 22}});
        assert_eq!(for_model(&only), Ok(json!({"temperature": 22})));
        let absent = json!({"structuredContent": [1, 2]});
        assert_eq!(for_model(&absent), Ok(json!([1, 2])));
        let failed = json!({"structuredContent": {"why": "no such city"}, "isError": true});
        assert_eq!(for_model(&failed), Err("{\"why\":\"no such city\"}".into()));
    }

    #[test]
    fn links_are_kept_and_binaries_summarised() {
        let r = json!({
            "content": [
                {"type": "text", "text": "see"},
                {"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"},
                {"type": "resource_link", "uri": "demo://r/1", "name": "r1", "_meta": {"x": 1}},
                {"type": "resource", "resource": {"uri": "demo://b", "mimeType": "application/gzip", "blob": "AAAA"}},
                {"type": "resource", "resource": {"uri": "demo://t", "text": "inline"}}
            ],
            "structuredContent": {"temperature": 22}
        });
        let v = for_model(&r).expect("ok");
        assert!(
            v.get("structuredContent").is_none(),
            "given once, as content"
        );
        let c = &v["content"];
        assert_eq!(c[0], "see");
        assert_eq!(c[1]["type"], "image");
        assert_eq!(c[1]["mimeType"], "image/png");
        assert_eq!(c[1]["bytes"], 5);
        assert!(c[1].get("data").is_none(), "the bytes are not sent");
        assert_eq!(
            c[2],
            json!({"type": "resource_link", "uri": "demo://r/1", "name": "r1"})
        );
        assert_eq!(c[3]["uri"], "demo://b");
        assert_eq!(c[4]["resource"]["text"], "inline");
    }

    #[test]
    fn errors_and_oversized_results_fail_the_call() {
        let r = json!({"content": [{"type": "text", "text": "Access denied"}], "isError": true});
        assert_eq!(for_model(&r), Err("Access denied".into()));
        let big = json!({"content": [{"type": "text", "text": "x".repeat(MAX_RESULT_BYTES + 1)}]});
        assert!(for_model(&big).expect_err("too big").contains("more than"));
    }
}

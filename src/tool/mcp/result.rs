//! What the model is given for an MCP tool's answer (`tools/call` result).
//!
//! - `structuredContent` is the structured form of the same result (MCP 2025-06-18), so the
//!   model gets it only when there is no `content`: as the JSON value itself. A result with
//!   both is given once, as its `content`.
//! - Only text blocks: the texts joined by newlines, as a string.
//! - Any other `content`: `{"content": [...]}` where a text block is its string, a resource link and an embedded text resource are kept as the server sent them
//!   (minus `_meta`), and binary data (images, audio, blob resources) is replaced by a summary
//!   naming its type, MIME type, size and BLAKE3 digest, so the model knows it was there.
//!   Nothing is dropped without a trace.
//! - An `image` block or an embedded `resource` blob whose bytes are a PNG, JPEG, GIF, WebP
//!   image or a PDF (known by its magic bytes, at most
//!   [`MAX_ATTACHMENT_BYTES`]) is also a
//!   file of the answer ([`ToolFile`]): the model is sent it when it takes that kind of file,
//!   its summary (noted `attached`) otherwise. Audio and other blobs are only summarised.
//! - `isError: true`: the same text, as a tool error fed back to the model.
//! - A result whose JSON is larger than [`MAX_RESULT_BYTES`] fails the call (like a command
//!   tool's output over its cap) rather than flooding the conversation.

use base64::Engine as _;
use serde_json::{Map, Value, json};

use crate::machine::attachment::{MAX_ATTACHMENT_BYTES, sniff_media_type};
use crate::tool::{ToolAnswer, ToolFile};

/// The largest result handed to the model, in bytes of JSON.
pub const MAX_RESULT_BYTES: usize = 1 << 20;

/// The model's view of `result` (a `CallToolResult` as JSON): `Ok` for a result, with the
/// images and PDFs it carries, `Err` with the text of a result the server marked `isError`,
/// or of one too large to hand on (an error's files are not passed on).
pub(crate) fn for_model(result: &Value) -> Result<ToolAnswer, String> {
    let mut files = Vec::new();
    let blocks: Vec<Value> = result
        .get("content")
        .and_then(Value::as_array)
        .map(|items| items.iter().map(|i| block(i, &mut files)).collect())
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
    Ok(ToolAnswer { value, files })
}

/// One content block as the model sees it; an image or PDF it holds is added to `files`.
fn block(item: &Value, files: &mut Vec<ToolFile>) -> Value {
    let kind = item.get("type").and_then(Value::as_str).unwrap_or("");
    match kind {
        "text" => Value::String(
            item.get("text")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        ),
        "image" | "audio" => {
            let summary = binary_summary(kind, item.get("mimeType"), item.get("data"), None);
            if kind == "image" {
                attached(summary, item.get("data"), None, files)
            } else {
                summary
            }
        }
        "resource" => {
            let resource = item.get("resource").cloned().unwrap_or(Value::Null);
            if resource.get("blob").is_some() {
                let summary = binary_summary(
                    "resource",
                    resource.get("mimeType"),
                    resource.get("blob"),
                    resource.get("uri"),
                );
                let name = resource.get("uri").and_then(Value::as_str);
                attached(summary, resource.get("blob"), name, files)
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

/// `summary`, noted as attached when base64 `data` decodes to an image or PDF runtape takes
/// (by its bytes, whatever MIME type the server said), no larger than the limit; the file is
/// then added to `files`, named `name`.
fn attached(
    mut summary: Value,
    data: Option<&Value>,
    name: Option<&str>,
    files: &mut Vec<ToolFile>,
) -> Value {
    let Some(bytes) = data
        .and_then(Value::as_str)
        .and_then(|d| base64::engine::general_purpose::STANDARD.decode(d).ok())
    else {
        return summary;
    };
    let Some(media_type) = sniff_media_type(&bytes) else {
        return summary;
    };
    if bytes.len() as u64 > MAX_ATTACHMENT_BYTES {
        return summary;
    }
    if let Some(map) = summary.as_object_mut() {
        map.insert("mimeType".into(), Value::from(media_type));
        map.insert(
            "note".into(),
            Value::from("attached: a model that takes this kind of file is sent it"),
        );
    }
    files.push(ToolFile {
        media_type: media_type.to_owned(),
        bytes,
        name: name.map(str::to_owned),
    });
    summary
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

    fn value(r: &Value) -> Result<Value, String> {
        for_model(r).map(|a| a.value)
    }

    const PNG: &[u8] = b"\x89PNG\r\n\x1a\n tiny";

    #[test]
    fn images_and_pdf_resources_become_files_and_stay_summarised() {
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let r = json!({
            "content": [
                {"type": "image", "data": b64(PNG), "mimeType": "image/png"},
                {"type": "resource", "resource": {"uri": "file:///r/report.pdf", "mimeType": "application/pdf", "blob": b64(b"%PDF-1.4 x")}},
                {"type": "image", "data": b64(b"not an image"), "mimeType": "image/png"},
                {"type": "audio", "data": b64(b"RIFF\0\0\0\0WAVE"), "mimeType": "audio/wav"}
            ]
        });
        let answer = for_model(&r).expect("ok");
        assert_eq!(answer.files.len(), 2, "{:?}", answer.files);
        assert_eq!(answer.files[0].media_type, "image/png");
        assert_eq!(answer.files[0].bytes, PNG);
        assert_eq!(answer.files[0].name, None);
        assert_eq!(answer.files[1].media_type, "application/pdf");
        assert_eq!(
            answer.files[1].name.as_deref(),
            Some("file:///r/report.pdf")
        );
        let c = &answer.value["content"];
        assert!(c[0]["note"].as_str().unwrap_or("").starts_with("attached"));
        assert!(c[1]["note"].as_str().unwrap_or("").starts_with("attached"));
        assert_eq!(c[2]["note"], "binary content; not passed to the model");
        assert_eq!(c[3]["type"], "audio");
        let failed = json!({"content": [{"type": "image", "data": b64(PNG), "mimeType": "image/png"}], "isError": true});
        assert!(for_model(&failed).is_err(), "an error passes no files on");
    }

    #[test]
    fn text_only_results_are_strings() {
        let r = json!({"content": [{"type": "text", "text": "Echo: hi"}]});
        assert_eq!(value(&r), Ok(Value::from("Echo: hi")));
        let two =
            json!({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]});
        assert_eq!(value(&two), Ok(Value::from("a\nb")));
        assert_eq!(value(&json!({})), Ok(Value::from("")));
    }

    #[test]
    fn structured_content_is_given_only_when_there_is_no_content() {
        let both = json!({
            "content": [{"type": "text", "text": "{\"temperature\": 22}"}],
            "structuredContent": {"temperature": 22}
        });
        assert_eq!(value(&both), Ok(Value::from("{\"temperature\": 22}")));
        let only = json!({"content": [], "structuredContent": {"temperature": 22}});
        assert_eq!(value(&only), Ok(json!({"temperature": 22})));
        let absent = json!({"structuredContent": [1, 2]});
        assert_eq!(value(&absent), Ok(json!([1, 2])));
        let failed = json!({"structuredContent": {"why": "no such city"}, "isError": true});
        assert_eq!(value(&failed), Err("{\"why\":\"no such city\"}".into()));
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
        let v = value(&r).expect("ok");
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
        assert_eq!(value(&r), Err("Access denied".into()));
        let big = json!({"content": [{"type": "text", "text": "x".repeat(MAX_RESULT_BYTES + 1)}]});
        assert!(value(&big).expect_err("too big").contains("more than"));
    }
}

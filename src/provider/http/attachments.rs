//! Images and PDFs on the wire: which models take which kinds (the built-in table, overridden
//! by a provider's `attachments` setting), the placeholder text a model that does not take a
//! file gets instead, and the data each wire format encodes a file as.
//!
//! | wire format | image | PDF |
//! |---|---|---|
//! | Anthropic Messages | `{"type":"image","source":{"type":"base64",…}}` | `{"type":"document","source":{"type":"base64",…}}` |
//! | OpenAI chat (and compatible hosts) | `{"type":"image_url","image_url":{"url":"data:…"}}` | `{"type":"file","file":{"filename",…,"file_data":"data:…"}}` |
//! | OpenAI Responses | `{"type":"input_image","detail":"auto","image_url":"data:…"}` | `{"type":"input_file","filename",…,"file_data":"data:…"}` |
//! | Ollama `/api/chat` | the message's `images` list (base64) | — |
//!
//! Files of a tool result go inside Anthropic's `tool_result` block and the Responses API's
//! `function_call_output` (its `output` a list of parts); chat completions take only text in
//! a `tool` message, so the files of a batch's results follow them in one user message, as
//! pydantic-ai sends them (`tests/fixtures/providers`, the `*-tool-result-*` cases).

use std::borrow::Cow;
use std::sync::Arc;

use base64::Engine as _;

use super::config::ProviderKind;
use crate::machine::{Attachment, AttachmentKind, Message};
use crate::provider::ProviderRequest;

/// The kinds of attachment `model` is sent on `kind`, from the built-in table: every Claude
/// model takes images and PDFs; OpenAI's GPT-4o, GPT-4.1, GPT-5 and o-series models take
/// both on chat completions and the Responses API; Gemini (through its OpenAI-compatible
/// endpoint) takes images; Ollama's vision models (`llava`, `llama3.2-vision`, `gemma3`,
/// `qwen2.5vl`, `minicpm-v`, `moondream`, `bakllava`, `granite3.2-vision`, `mistral-small3.1`)
/// take images. Any other model: none, until the provider's `attachments` setting says so.
pub fn built_in_accepts(kind: ProviderKind, model: &str) -> Vec<AttachmentKind> {
    let m = model.to_ascii_lowercase();
    let m = m.rsplit('/').next().unwrap_or(&m);
    let both = vec![AttachmentKind::Image, AttachmentKind::Pdf];
    let starts = |prefixes: &[&str]| prefixes.iter().any(|p| m.starts_with(p));
    match kind {
        ProviderKind::Anthropic if m.starts_with("claude") => both,
        ProviderKind::OpenAi | ProviderKind::AzureOpenAi | ProviderKind::OpenAiResponses
            if starts(&["gpt-4o", "gpt-4.1", "gpt-5", "o1", "o3", "o4", "chatgpt-4o"]) =>
        {
            both
        }
        ProviderKind::OpenAi if m.starts_with("gemini") => vec![AttachmentKind::Image],
        ProviderKind::Ollama
            if starts(&[
                "llava",
                "llama3.2-vision",
                "gemma3",
                "qwen2.5vl",
                "minicpm-v",
                "moondream",
                "bakllava",
                "granite3.2-vision",
                "mistral-small3.1",
            ]) =>
        {
            vec![AttachmentKind::Image]
        }
        _ => Vec::new(),
    }
}

/// `request` as `accepts` lets it be sent: each attachment of a kind the model does not take,
/// or whose bytes the request lacks, is taken off its message and its
/// [`placeholder`](Attachment::placeholder) added to the message's text. Borrowed unchanged
/// when nothing has to go.
pub(crate) fn sendable<'a>(
    request: &'a ProviderRequest,
    accepts: &[AttachmentKind],
) -> Cow<'a, ProviderRequest> {
    let keeps =
        |a: &Attachment| accepts.contains(&a.kind()) && request.files.contains_key(&a.digest);
    if request
        .messages
        .iter()
        .all(|m| m.attachments.iter().all(keeps))
    {
        return Cow::Borrowed(request);
    }
    let mut out = request.clone();
    let messages = Arc::make_mut(&mut out.messages);
    for m in messages.iter_mut() {
        let (kept, dropped): (Vec<_>, Vec<_>) = std::mem::take(&mut m.attachments)
            .into_iter()
            .partition(|a| keeps(a));
        m.attachments = kept;
        for a in dropped {
            let text = m.content.get_or_insert_with(String::new);
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&a.placeholder());
        }
    }
    Cow::Owned(out)
}

/// The file's bytes in base64 (empty when the request lacks them: [`sendable`] has taken
/// such a file off first).
pub(crate) fn base64_of(request: &ProviderRequest, a: &Attachment) -> String {
    request
        .files
        .get(&a.digest)
        .map(|bytes| base64::engine::general_purpose::STANDARD.encode(bytes))
        .unwrap_or_default()
}

/// The file as a `data:` URL, as the OpenAI formats take it.
pub(crate) fn data_url(request: &ProviderRequest, a: &Attachment) -> String {
    format!("data:{};base64,{}", a.media_type, base64_of(request, a))
}

/// The text that opens the user message carrying a tool result's files on the OpenAI formats.
pub(crate) fn from_tool_note(m: &Message) -> String {
    format!("[files from {}]", m.name.as_deref().unwrap_or("a tool"))
}

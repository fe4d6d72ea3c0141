//! What the hashes of a cassette cover: the normalised [`Prompt`], canonical JSON (RFC 8785),
//! and the three SHA-256 digests (`promptHash`, `responseHash`, `envelopeHash`).
//!
//! Every digest is lowercase hex SHA-256 of the RFC 8785 canonical form of a JSON value. RFC
//! 8785 writes every number as an IEEE-754 double, so an integer beyond ±(2^53 − 1) would be
//! hashed as a neighbouring value; such values are refused ([`check_numbers`]) rather than
//! hashed ambiguously.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use super::error::CassetteError;
use crate::machine::{Message, ModelSettings};
use crate::provider::{ProviderRequest, ToolDef};

/// The largest integer magnitude an RFC 8785 number (a double) holds exactly: 2^53 − 1.
const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// The part of a request that is the prompt, and so what `promptHash` covers: the messages,
/// system prompt first, the tools offered, in grant order, and (from cassette version 3) the
/// model settings and the output schema sent with them. The model name, the attempt number
/// and the remaining budget are not part of it: a retry or a model swap asks the same
/// question; a changed temperature or schema does not.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prompt {
    /// The conversation as sent (each [`Message`] in its own serde form).
    pub messages: Vec<Message>,
    /// The tools offered (name, description, schema).
    pub tools: Vec<ToolDef>,
    /// The model settings sent (sampling, stop, reasoning, ...); left out when none are set.
    #[serde(default, skip_serializing_if = "ModelSettings::is_empty")]
    pub settings: ModelSettings,
    /// The JSON Schema structured output was asked for with, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
}

impl Prompt {
    /// The prompt of a request. Call it to hash or store what a request asked.
    pub fn of(request: &ProviderRequest) -> Prompt {
        Prompt {
            messages: request.messages.as_ref().clone(),
            tools: request.tools.clone(),
            settings: request.settings.clone(),
            output_schema: request.output_schema.clone(),
        }
    }

    /// `promptHash` as this build records it (cassette version 3): SHA-256 over the RFC 8785
    /// form of `{"messages": [...], "tools": [...], "settings"?: {...}, "output_schema"?: ...}`
    /// (settings and schema left out when absent, so a request without them hashes as in
    /// version 2). Apply the hash filter first (the recorder and the replay provider do).
    /// Fails when a number in the prompt cannot be represented exactly (see the module doc).
    pub fn hash(&self) -> Result<String, CassetteError> {
        prompt_hash(self).map_err(|detail| CassetteError::unencodable("prompt", detail))
    }

    /// The prompt as indented JSON, for diffs.
    pub(crate) fn pretty(&self) -> String {
        serde_json::to_string_pretty(self)
            .unwrap_or_else(|e| format!("(prompt not printable: {e})"))
    }
}

/// A named normalisation applied to every prompt before it is hashed, on both sides: while
/// recording and while replaying. Use it for content that changes from run to run without
/// changing the question (today's date in a system prompt, a temp path). The name is stored in
/// the cassette as `hashFilter`; a replay must give a filter of the same name, and none if the
/// recording had none. Change the name whenever the filter's behaviour changes (for example
/// `date-v2`), so old cassettes are refused instead of silently mismatching.
#[derive(Clone)]
pub struct HashFilter {
    name: String,
    apply: Arc<dyn Fn(&mut Prompt) + Send + Sync>,
}

impl HashFilter {
    /// A filter called `name` (its identity in the cassette) that edits a prompt in place.
    pub fn new(
        name: impl Into<String>,
        apply: impl Fn(&mut Prompt) + Send + Sync + 'static,
    ) -> Self {
        HashFilter {
            name: name.into(),
            apply: Arc::new(apply),
        }
    }

    /// The name stored as `hashFilter`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `prompt` after the filter.
    pub fn apply(&self, mut prompt: Prompt) -> Prompt {
        (self.apply)(&mut prompt);
        prompt
    }
}

impl fmt::Debug for HashFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HashFilter")
            .field("name", &self.name)
            .finish()
    }
}

/// A recording's random identity: 128 bits as 32 lowercase hex digits. It is bound into
/// every `responseHash`, so an entry copied from another cassette does not verify.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CassetteId(String);

impl CassetteId {
    /// A fresh id from the operating system's random source. Fails only when that source does.
    pub fn random() -> Result<CassetteId, CassetteError> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).map_err(|e| CassetteError::Random {
            detail: e.to_string(),
        })?;
        Ok(CassetteId(hex(&bytes)))
    }

    /// Parses 32 lowercase hex digits. Use it to give an export a stable id (for example one
    /// derived from the run id), so exporting the same run twice gives the same file; never
    /// reuse one id for different recordings, or splices between them go unnoticed.
    pub fn from_hex(text: &str) -> Option<CassetteId> {
        is_hex(text, 32).then(|| CassetteId(text.to_owned()))
    }

    /// The id as hex.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CassetteId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// [`Prompt::hash`] with the failure as text, for callers that name the turn.
pub(crate) fn prompt_hash(prompt: &Prompt) -> Result<String, String> {
    let value = serde_json::to_value(prompt).map_err(|e| e.to_string())?;
    digest_of(&value)
}

/// `promptHash` as a cassette of format `version` computed it: versions 1 and 2 covered only
/// the messages and the tools, so a request is compared with their entries on those alone.
pub(crate) fn prompt_hash_for(version: u32, prompt: &Prompt) -> Result<String, String> {
    if version >= 3 {
        return prompt_hash(prompt);
    }
    prompt_hash(&Prompt {
        messages: prompt.messages.clone(),
        tools: prompt.tools.clone(),
        settings: ModelSettings::default(),
        output_schema: None,
    })
}

/// `responseHash`: SHA-256 over canonical `{cassetteId, turnIndex, promptHash, response}`,
/// plus `chunks` when the entry has any, and (version 4) `path` for an entry of a delegated
/// child's section, so an entry cannot move between sections unnoticed.
pub(crate) fn response_hash(
    cassette_id: &str,
    section: Option<&str>,
    turn: u64,
    prompt_hash: &str,
    response: &Value,
    chunks: &[String],
) -> Result<String, String> {
    let mut object = json!({
        "cassetteId": cassette_id,
        "turnIndex": turn,
        "promptHash": prompt_hash,
        "response": response,
    });
    if !chunks.is_empty() {
        object["chunks"] = json!(chunks);
    }
    if let Some(path) = section {
        object["path"] = json!(path);
    }
    digest_of(&object)
}

/// The envelope fields `envelopeHash` covers.
pub(crate) struct EnvelopeFields<'a> {
    pub(crate) version: u32,
    pub(crate) agent_id: Option<&'a str>,
    pub(crate) recorded_at: &'a str,
    pub(crate) recorded_provider: &'a str,
    pub(crate) cassette_id: &'a str,
    pub(crate) hash_filter: Option<&'a str>,
}

/// `envelopeHash`: SHA-256 over canonical `{version, agentId?, recordedAt, recordedProvider,
/// cassetteId, hashFilter?, entries, catalogs?, toolResults?, memory?, catalogChanges?,
/// children?, session?, retrievals?}`, where `entries` is the list of the entries'
/// `responseHash` values in file order, `catalogs` / `toolResults` / `catalogChanges` are the
/// MCP fields and `memory` the global memory as stored, `children` (version 4) lists each
/// child section as `{path, entries, retrievals?, catalogChanges?}` with its entries' (and
/// retrievals') digests and its own tool lists as stored, in file order, `session` is the session start's `sessionHash` and `retrievals` the
/// run's retrievals' `retrievalHash` values in order (absent or empty optional fields are left
/// out, not `null`, so a cassette without them hashes as before they existed).
pub(crate) fn envelope_hash(
    fields: &EnvelopeFields<'_>,
    digests: &[&str],
    extras: Vec<(&str, Value)>,
) -> Result<String, String> {
    let mut object = json!({
        "version": fields.version,
        "recordedAt": fields.recorded_at,
        "recordedProvider": fields.recorded_provider,
        "cassetteId": fields.cassette_id,
        "entries": digests,
    });
    if let Some(agent) = fields.agent_id {
        object["agentId"] = json!(agent);
    }
    if let Some(filter) = fields.hash_filter {
        object["hashFilter"] = json!(filter);
    }
    for (key, value) in extras {
        object[key] = value;
    }
    digest_of(&object)
}

/// Lowercase hex SHA-256 of the RFC 8785 form of `value`.
pub(crate) fn digest_of(value: &Value) -> Result<String, String> {
    check_numbers(value)?;
    let bytes = serde_json_canonicalizer::to_vec(value).map_err(|e| e.to_string())?;
    Ok(hex(&Sha256::digest(&bytes)))
}

/// Refuses integers RFC 8785 cannot represent exactly, naming where the first one is (as a
/// JSON pointer).
pub(crate) fn check_numbers(value: &Value) -> Result<(), String> {
    match find_unsafe_integer(value) {
        None => Ok(()),
        Some((pointer, number)) => Err(format!(
            "the integer {number} at {} is beyond ±(2^53 − 1), which canonical JSON (RFC 8785) cannot represent exactly",
            if pointer.is_empty() { "/" } else { &pointer }
        )),
    }
}

fn find_unsafe_integer(value: &Value) -> Option<(String, String)> {
    match value {
        Value::Number(n) => {
            let unsafe_int = match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => u > MAX_SAFE_INTEGER,
                (None, Some(i)) => i.unsigned_abs() > MAX_SAFE_INTEGER,
                (None, None) => false,
            };
            unsafe_int.then(|| (String::new(), n.to_string()))
        }
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, item)| find_unsafe_integer(item).map(|(p, n)| (format!("/{i}{p}"), n))),
        Value::Object(map) => map.iter().find_map(|(key, item)| {
            let key = key.replace('~', "~0").replace('/', "~1");
            find_unsafe_integer(item).map(|(p, n)| (format!("/{key}{p}"), n))
        }),
        Value::Null | Value::Bool(_) | Value::String(_) => None,
    }
}

/// True when `text` is exactly `len` lowercase hex digits.
pub(crate) fn is_hex(text: &str, len: usize) -> bool {
    crate::text::is_lower_hex(text, len)
}

fn hex(bytes: &[u8]) -> String {
    crate::text::lower_hex(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_of_canonical_json_matches_a_known_vector() {
        // SHA-256("{}"), the canonical form of an empty object.
        assert_eq!(
            digest_of(&json!({})).ok().as_deref(),
            Some("44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a")
        );
        // Key order and whitespace do not matter.
        let a: Value = serde_json::from_str(r#"{"b": 1, "a": [1.0, "x"]}"#).unwrap_or_default();
        let b: Value = serde_json::from_str(r#"{"a":[1,"x"],"b":1}"#).unwrap_or_default();
        assert_eq!(digest_of(&a), digest_of(&b));
    }

    #[test]
    fn integers_beyond_two_to_the_53_are_refused_with_their_pointer() {
        assert!(check_numbers(&json!({"a": [9_007_199_254_740_991_u64]})).is_ok());
        let err = check_numbers(&json!({"a": [1, {"b/c": 9_007_199_254_740_993_u64}]}));
        assert!(err.is_err_and(|e| e.contains("/a/1/b~1c")));
        assert!(check_numbers(&json!(-9_007_199_254_740_993_i64)).is_err());
    }

    #[test]
    fn settings_and_schema_change_the_hash_from_version_3_only() {
        let plain = Prompt {
            messages: vec![Message::text(crate::machine::Role::User, "hi")],
            tools: Vec::new(),
            settings: ModelSettings::default(),
            output_schema: None,
        };
        let tuned = Prompt {
            settings: ModelSettings {
                temperature: Some(0.2),
                ..ModelSettings::default()
            },
            output_schema: Some(json!({"type": "object"})),
            ..plain.clone()
        };
        assert_eq!(
            prompt_hash(&plain),
            prompt_hash_for(2, &plain),
            "nothing new, same hash"
        );
        assert_ne!(prompt_hash(&plain), prompt_hash(&tuned));
        assert_eq!(
            prompt_hash_for(2, &tuned),
            prompt_hash_for(2, &plain),
            "v2 ignores them"
        );
        let stored = serde_json::to_value(&plain).expect("encodes");
        assert_eq!(
            stored,
            json!({"messages": [{"role": "user", "content": "hi"}], "tools": []})
        );
    }

    #[test]
    fn cassette_ids_are_32_lowercase_hex_digits() {
        let id = CassetteId::random();
        assert!(id.is_ok_and(|id| CassetteId::from_hex(id.as_str()).is_some()));
        assert!(CassetteId::from_hex("ABCDEF0123456789abcdef0123456789").is_none());
        assert!(CassetteId::from_hex("abc").is_none());
    }
}

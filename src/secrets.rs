//! Known secret values, and scrubbing them out of everything runtape stores or prints.
//!
//! Keys are kept out of the record by construction (providers read them at call time, setups
//! hold variable names), and programs runtape starts get only what their spec names
//! ([`crate::tool::env`]). But a value can still come back from outside: a provider that
//! echoes the key inside a reply or an error, a tool or MCP server that prints what it was
//! given. So the values themselves are registered here, process-wide, and replaced by
//! `[redacted:NAME]` wherever outside text enters runtape:
//!
//! - model replies (text, tool-call arguments, thinking, refusals, ids), model errors, streamed
//!   token deltas, tool results and tool errors (command tools, MCP tools, reconcile answers),
//!   retriever passages, MCP tool lists (descriptions and schemas) — before they become events,
//!   so the database, traces, `--json` lines, `show`, cassette exports, receipts and OTel spans
//!   never see them, and `verify` and replay see the same redacted text the run saw;
//! - every line the command line prints on stdout or stderr, every answer and event stream of
//!   `runtape serve`, every OTel attribute, and the log lines that carry a server's words.
//!
//! What is registered:
//!
//! | value | when |
//! |---|---|
//! | the receipt signing key (`RUNTAPE_RECEIPT_KEY`, or `--receipt-key`'s file): its text and seed | when a command starts or loads it |
//! | the serve token (`RUNTAPE_SERVE_TOKEN`, or `--token-env`'s variable) | when a command starts; `serve` for its own variable |
//! | database passwords: `PGPASSWORD`, the password of `DATABASE_URL`, of `RUNTAPE_DB`, of a `postgres://` `--db` | when a command starts; the store when it connects |
//! | every HTTP provider's `api_key_env` | when a setup is installed ([`crate::config::Setup::install`]) |
//! | every variable a spec passes to a program by name (`env`, `"${NAME}"`), the password inside it when it is a URL | when the setup is installed, and again when the program starts |
//! | an HTTP MCP server's `headers_env` values | when it connects |
//! | every value of an `--env-file` ([`env_file`]) | when the file is installed, before the spec is loaded |
//!
//! [`register_engine_env`] does the first three rows; embedders register their own with
//! [`register`] or [`register_value`].
//!
//! Limits: values shorter than [`MIN_SECRET_CHARS`] characters are not registered (scrubbing
//! them would mangle ordinary text; such a key is not a real secret anyway). Only the exact
//! value is found: a key that comes back transformed (base64, split across JSON fields, cut
//! short) is not recognised. Text a person types (a goal, an answer) is stored as typed.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock, RwLock};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub mod env_file;
mod shapes;

pub use shapes::{carries_url_credentials, looks_secret, url_credentials};

/// The variable `runtape serve` reads its bearer token from unless `--token-env` names
/// another.
pub const SERVE_TOKEN_ENV: &str = "RUNTAPE_SERVE_TOKEN";

/// Variables holding a database URL, whose password is a secret wherever it comes back.
pub const DATABASE_URL_ENVS: &[&str] = &["DATABASE_URL", "RUNTAPE_DB"];

/// Values shorter than this (in characters) are not registered.
pub const MIN_SECRET_CHARS: usize = 8;

/// A set of secret values, each with the name it is redacted as.
#[derive(Clone, Default)]
pub struct Secrets {
    /// `(name, value)`, longest value first so a secret containing another is replaced whole.
    entries: Vec<(String, String)>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Names only: the values are what this type exists to hide.
        f.debug_list()
            .entries(self.entries.iter().map(|(name, _)| name))
            .finish()
    }
}

impl Secrets {
    /// An empty set.
    pub fn new() -> Self {
        Secrets::default()
    }

    /// Adds `value`, redacted as `[redacted:NAME]`. Values shorter than [`MIN_SECRET_CHARS`]
    /// are ignored; surrounding whitespace is trimmed (a key read from a file or variable often
    /// ends in a newline). Returns whether it was added.
    pub fn add(&mut self, name: &str, value: &str) -> bool {
        let value = value.trim();
        if value.chars().count() < MIN_SECRET_CHARS {
            return false;
        }
        if self.entries.iter().any(|(_, v)| v == value) {
            return true;
        }
        self.entries.push((name.to_owned(), value.to_owned()));
        self.entries
            .sort_by(|a, b| b.1.len().cmp(&a.1.len()).then_with(|| a.1.cmp(&b.1)));
        true
    }

    /// True when nothing is registered (scrubbing is then free).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many values are registered.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether `value` (trimmed) is registered.
    pub fn contains(&self, value: &str) -> bool {
        let value = value.trim();
        self.entries.iter().any(|(_, v)| v == value)
    }

    /// `text` with every registered value replaced; borrowed when nothing was found.
    pub fn scrub_str<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for (name, value) in &self.entries {
            if out.contains(value.as_str()) {
                out = Cow::Owned(out.replace(value.as_str(), &redaction(name)));
            }
        }
        out
    }

    /// Replaces registered values in every string (and object key) of `value`. Returns
    /// whether anything changed.
    pub fn scrub_value(&self, value: &mut Value) -> bool {
        if self.is_empty() {
            return false;
        }
        match value {
            Value::String(s) => self.scrub_string(s),
            Value::Array(items) => items
                .iter_mut()
                .fold(false, |changed, v| self.scrub_value(v) | changed),
            Value::Object(map) => {
                let dirty_keys = map
                    .keys()
                    .any(|k| matches!(self.scrub_str(k), Cow::Owned(_)));
                let mut changed = false;
                if dirty_keys {
                    let old = std::mem::take(map);
                    for (k, v) in old {
                        map.insert(self.scrub_str(&k).into_owned(), v);
                    }
                    changed = true;
                }
                map.values_mut()
                    .fold(changed, |changed, v| self.scrub_value(v) | changed)
            }
            _ => false,
        }
    }

    /// Replaces registered values in `s` in place. Returns whether anything changed.
    pub fn scrub_string(&self, s: &mut String) -> bool {
        match self.scrub_str(s) {
            Cow::Borrowed(_) => false,
            Cow::Owned(clean) => {
                *s = clean;
                true
            }
        }
    }

    /// Replaces registered values in every string of a serialisable value (a model reply, a
    /// tool outcome, a failure), by a round trip through JSON that happens only when a value
    /// was found. A value that does not round-trip is left as it was.
    pub fn scrub<T: Serialize + DeserializeOwned>(&self, item: &mut T) {
        if self.is_empty() {
            return;
        }
        let Ok(mut json) = serde_json::to_value(&*item) else {
            return;
        };
        if self.scrub_value(&mut json)
            && let Ok(clean) = serde_json::from_value(json)
        {
            *item = clean;
        }
    }

    /// A scrubber for text that arrives in pieces (streamed token deltas), which finds a
    /// value even when it is split across pieces.
    pub fn stream(self: &Arc<Self>) -> StreamScrubber {
        StreamScrubber {
            secrets: Arc::clone(self),
            pending: String::new(),
        }
    }

    /// The length of the longest suffix of `text` that is a proper prefix of some value:
    /// text that may still turn into a secret when the next piece arrives.
    fn held_back(&self, text: &str) -> usize {
        let mut longest = 0;
        for (_, value) in &self.entries {
            let max = value.len().saturating_sub(1).min(text.len());
            for len in (longest + 1..=max).rev() {
                let start = text.len() - len;
                if text.is_char_boundary(start) && value.starts_with(&text[start..]) {
                    longest = len;
                    break;
                }
            }
        }
        longest
    }
}

/// Scrubs text that arrives in pieces: [`push`](Self::push) each piece and send on what it
/// returns, then send what [`finish`](Self::finish) returns when the stream ends. Text that
/// could be the start of a secret is held back until the next piece shows what it is.
#[derive(Debug)]
pub struct StreamScrubber {
    secrets: Arc<Secrets>,
    pending: String,
}

impl StreamScrubber {
    /// Takes the next piece; returns the text that is safe to pass on now (may be empty).
    pub fn push(&mut self, piece: &str) -> String {
        if self.secrets.is_empty() {
            return piece.to_owned();
        }
        self.pending.push_str(piece);
        let clean = self.secrets.scrub_str(&self.pending).into_owned();
        let keep = self.secrets.held_back(&clean);
        let cut = clean.len() - keep;
        self.pending = clean[cut..].to_owned();
        clean[..cut].to_owned()
    }

    /// The text still held back, scrubbed: call once when the stream has ended.
    pub fn finish(&mut self) -> String {
        let rest = std::mem::take(&mut self.pending);
        self.secrets.scrub_str(&rest).into_owned()
    }
}

fn redaction(name: &str) -> String {
    format!("[redacted:{name}]")
}

fn registry() -> &'static RwLock<Arc<Secrets>> {
    static REGISTRY: OnceLock<RwLock<Arc<Secrets>>> = OnceLock::new();
    REGISTRY.get_or_init(|| RwLock::new(Arc::new(Secrets::new())))
}

/// The process-wide set, as it is now. Cheap (an `Arc` clone); take it where outside text is
/// about to be stored or printed.
pub fn global() -> Arc<Secrets> {
    // A poisoned lock still holds a consistent `Arc`: writers only swap it.
    match registry().read() {
        Ok(guard) => Arc::clone(&guard),
        Err(poisoned) => Arc::clone(&poisoned.into_inner()),
    }
}

/// Registers `value` process-wide, redacted as `[redacted:NAME]` (see [`Secrets::add`]).
/// Call it for every key your program hands to a provider or tool outside a spec file.
/// Registered values stay for the life of the process.
pub fn register(name: &str, value: &str) {
    if global().contains(value) {
        return;
    }
    let mut guard = match registry().write() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    };
    let mut next = Secrets::clone(&guard);
    if next.add(name, value) && next.len() != guard.len() {
        *guard = Arc::new(next);
    }
}

/// Registers the value of the environment variable `name`, if it is set and long enough.
pub fn register_env(name: &str) {
    if let Some(value) = std::env::var_os(name) {
        register(name, &value.to_string_lossy());
    }
}

/// Registers a receipt signing key's text (as read from its file or variable, labelled
/// `label`): the whole text and each line that is not a `#` comment (the seed). The public
/// key, which the file carries in a comment, stays visible: receipts name it.
pub fn register_key_text(label: &str, text: &str) {
    for line in text.lines() {
        let line = line.trim();
        if !line.is_empty() && !line.starts_with('#') {
            register(label, line);
        }
    }
    register(label, text);
}

/// `text` scrubbed of every value registered process-wide.
pub fn scrub_text(text: &str) -> Cow<'_, str> {
    let secrets = global();
    if secrets.is_empty() {
        return Cow::Borrowed(text);
    }
    match secrets.scrub_str(text) {
        Cow::Borrowed(_) => Cow::Borrowed(text),
        Cow::Owned(s) => Cow::Owned(s),
    }
}

/// Registers `value` as [`register`] does and, when it holds URLs with credentials
/// (`postgres://user:password@host/db`), each password (and user information) in it too, so a
/// program that prints only the password is caught as well. Call it for a value runtape hands
/// to a program or server.
pub fn register_value(name: &str, value: &str) {
    for userinfo in url_credentials(value) {
        for part in shapes::secret_parts(userinfo) {
            register(name, part);
        }
    }
    register(name, value);
}

/// Registers the secrets runtape's own variables hold, from this process's environment: the
/// receipt signing key ([`crate::receipt::DEFAULT_KEY_ENV`]), the serve token
/// ([`SERVE_TOKEN_ENV`]), `PGPASSWORD` and the credentials in [`DATABASE_URL_ENVS`]. Every
/// `runtape` command calls it first, and [`crate::config::Setup::register_secrets`] does too,
/// so a value one of them holds is scrubbed even when a program that should not have it
/// echoes it.
pub fn register_engine_env() {
    if let Ok(text) = std::env::var(crate::receipt::DEFAULT_KEY_ENV) {
        register_key_text(crate::receipt::DEFAULT_KEY_ENV, &text);
    }
    register_env(SERVE_TOKEN_ENV);
    register_env("PGPASSWORD");
    for name in DATABASE_URL_ENVS {
        if let Ok(url) = std::env::var(name) {
            for userinfo in url_credentials(&url) {
                for part in shapes::secret_parts(userinfo) {
                    register(name, part);
                }
            }
        }
    }
}

/// True for a string that can be an environment variable's name: ASCII letters, digits and
/// `_`, not starting with a digit, at most 256 characters.
pub(crate) fn is_variable_name(name: &str) -> bool {
    name.len() <= 256
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn set(values: &[(&str, &str)]) -> Arc<Secrets> {
        let mut s = Secrets::new();
        for (name, value) in values {
            s.add(name, value);
        }
        Arc::new(s)
    }

    #[test]
    fn values_are_replaced_everywhere_in_text_and_json() {
        let s = set(&[("K", "sk-abcdef123456")]);
        assert_eq!(
            s.scrub_str("key=sk-abcdef123456; again sk-abcdef123456"),
            "key=[redacted:K]; again [redacted:K]"
        );
        let mut v = json!({"a": ["x sk-abcdef123456"], "sk-abcdef123456": 1, "n": 5});
        assert!(s.scrub_value(&mut v));
        assert_eq!(
            v,
            json!({"a": ["x [redacted:K]"], "[redacted:K]": 1, "n": 5})
        );
        assert!(!s.scrub_value(&mut json!("clean")));
    }

    #[test]
    fn short_values_are_not_registered_and_longer_ones_win() {
        let s = set(&[
            ("short", "abc"),
            ("A", "secret-one"),
            ("B", "secret-one-two"),
        ]);
        assert_eq!(s.len(), 2);
        assert_eq!(s.scrub_str("abc secret-one-two"), "abc [redacted:B]");
    }

    #[test]
    fn a_value_split_across_stream_pieces_is_still_caught() {
        let s = set(&[("K", "sk-abcdef123456")]);
        let mut stream = s.stream();
        let mut out = String::new();
        for piece in ["hello sk-abc", "def12", "3456 bye s", "k-ab"] {
            out.push_str(&stream.push(piece));
        }
        out.push_str(&stream.finish());
        assert_eq!(out, "hello [redacted:K] bye sk-ab");
        let mut plain = Secrets::new().into_stream_for_test();
        assert_eq!(plain.push("sk-abc"), "sk-abc");
    }

    #[test]
    fn typed_values_round_trip_only_when_dirty() {
        let s = set(&[("K", "sk-abcdef123456")]);
        let mut reply = crate::machine::ModelReply::text("the key is sk-abcdef123456");
        s.scrub(&mut reply);
        assert_eq!(reply.text.as_deref(), Some("the key is [redacted:K]"));
    }

    impl Secrets {
        fn into_stream_for_test(self) -> StreamScrubber {
            Arc::new(self).stream()
        }
    }
}

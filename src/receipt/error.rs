//! Errors from making receipts and handling keys and bundles (verification failures are
//! [`VerifyError`](super::VerifyError)).
//!
//! No variant ever carries key material: a malformed key is described by what is wrong with
//! its shape, and I/O errors are reduced to their message, which names no file content.

use std::fmt;
use std::path::PathBuf;

use super::body::FieldError;

/// Where a signing key was read from, for error messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyOrigin {
    /// A key file.
    File(PathBuf),
    /// An environment variable holding the key file's text.
    Env(String),
    /// Text handed over by the caller.
    Text,
}

impl fmt::Display for KeyOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyOrigin::File(path) => write!(f, "key file {}", path.display()),
            KeyOrigin::Env(var) => write!(f, "environment variable {var}"),
            KeyOrigin::Text => f.write_str("key text"),
        }
    }
}

/// What is wrong with the text of a key, without quoting it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyProblem {
    /// Only blank and `#` comment lines.
    NoKeyLine,
    /// More than one line that is neither blank nor a comment.
    SeveralKeyLines,
    /// The key line is not exactly 64 hex characters.
    NotHex64,
    /// The text is not UTF-8.
    NotUtf8,
    /// 32 bytes that are not a valid Ed25519 public key (public keys only).
    NotAPoint,
}

impl fmt::Display for KeyProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KeyProblem::NoKeyLine => "it holds no key line",
            KeyProblem::SeveralKeyLines => "it holds more than one non-comment line",
            KeyProblem::NotHex64 => "its key line is not 64 hex characters",
            KeyProblem::NotUtf8 => "it is not UTF-8 text",
            KeyProblem::NotAPoint => "its 32 bytes are not a valid Ed25519 public key",
        })
    }
}

/// Why a key could not be loaded or written, a receipt could not be sealed, or a bundle could
/// not be read or written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReceiptError {
    /// A configured key file does not exist.
    #[error(
        "receipt signing key file {} does not exist; create it with keygen or fix the configured path",
        path.display()
    )]
    KeyFileMissing {
        /// The configured path.
        path: PathBuf,
    },
    /// A key file exists but could not be read.
    #[error("cannot read receipt key file {}: {reason}; check the path and its permissions", path.display())]
    KeyFileUnreadable {
        /// The file.
        path: PathBuf,
        /// The operating system's message.
        reason: String,
    },
    /// A secret key's text is malformed.
    #[error(
        "receipt signing key from {origin} is malformed: {problem}; expected one line of 64 hex characters (a 32-byte Ed25519 seed), optionally after # comment lines"
    )]
    MalformedKey {
        /// Where the key came from.
        origin: KeyOrigin,
        /// What is wrong with it (never the text itself).
        problem: KeyProblem,
    },
    /// A public key's text is malformed.
    #[error(
        "receipt public key from {origin} is malformed: {problem}; expected 64 hex characters (a 32-byte Ed25519 public key)"
    )]
    MalformedPublicKey {
        /// Where the key came from.
        origin: KeyOrigin,
        /// What is wrong with it.
        problem: KeyProblem,
    },
    /// keygen (or writing a public key) found a file already at the path.
    #[error("refusing to overwrite existing file {}; move it away or choose another path", path.display())]
    KeyFileExists {
        /// The existing file.
        path: PathBuf,
    },
    /// Writing a key file failed.
    #[error("cannot write key file {}: {reason}; check the directory exists and is writable", path.display())]
    KeyWrite {
        /// The file.
        path: PathBuf,
        /// The operating system's message.
        reason: String,
    },
    /// The operating system's random number generator failed.
    #[error("cannot generate a key: the system random number generator failed ({reason}); retry")]
    Randomness {
        /// The generator's message.
        reason: String,
    },
    /// A draft's fields cannot be sealed.
    #[error("cannot seal receipt for seq {seq}: {error}; this is a bug in the caller")]
    InvalidField {
        /// The draft's seq.
        seq: u64,
        /// The offending field.
        error: FieldError,
    },
    /// The draft's seq does not follow the chain tip's.
    #[error(
        "cannot chain receipt for seq {seq} after seq {previous}: seqs must strictly increase along a chain"
    )]
    SeqNotIncreasing {
        /// The chain tip's seq.
        previous: u64,
        /// The draft's seq.
        seq: u64,
    },
    /// The signer's mode (signed or unsigned) differs from the chain tip's.
    #[error(
        "cannot append a {} receipt to a chain whose tip is {}: a chain must be all signed or all unsigned; restore the original key setting or start a new run",
        if *signer_signs { "signed" } else { "unsigned" },
        if *signer_signs { "unsigned" } else { "signed" }
    )]
    ModeChanged {
        /// True when the signer has a key (and the tip is unsigned).
        signer_signs: bool,
    },
    /// The signer's key differs from the one that signed the chain tip.
    #[error(
        "cannot extend a chain signed by key {tip_key} with key {signer_key}: use the key the run started with"
    )]
    KeyChanged {
        /// Key id of the chain tip.
        tip_key: String,
        /// Key id of this signer.
        signer_key: String,
    },
    /// Reading or writing a JSONL bundle failed.
    #[error("receipt bundle I/O failed: {reason}")]
    Io {
        /// The operating system's message.
        reason: String,
    },
    /// A line of a JSONL bundle is not a receipt.
    #[error(
        "receipt bundle line {line} is not a receipt: {reason}; the file is corrupt or not a receipt export"
    )]
    MalformedLine {
        /// 1-based line number.
        line: usize,
        /// The parser's message.
        reason: String,
    },
}

//! Key files: generating a signing key, reading it from a file or an environment variable, and
//! reading and writing the public key a verifier needs.
//!
//! The file format is documented in the [module doc](super#key-file-format).
//!
//! Nothing here stores a key anywhere else: the secret is read, turned into a
//! [`SigningKey`] (which zeroes itself on drop), and the buffers that held its text are
//! overwritten.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use ed25519_dalek::{SigningKey, VerifyingKey};

use super::error::{KeyOrigin, KeyProblem, ReceiptError};
use super::hex;

/// The first line [`keygen`] writes into a secret key file.
pub const KEY_FILE_HEADER: &str =
    "# runtape receipt signing key (Ed25519 seed, hex). Keep it secret.";

/// Generates a new signing key and writes it to `path` (created with mode 0600; an existing
/// file is never overwritten). Returns the public key: hand it to verifiers with
/// [`write_public_key`] or [`public_key_hex`]. The secret is not returned and stays only in the
/// file; load it with [`ReceiptSigner::from_key_file`](super::ReceiptSigner::from_key_file).
pub fn keygen(path: &Path) -> Result<VerifyingKey, ReceiptError> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| ReceiptError::Randomness {
        reason: e.to_string(),
    })?;
    let key = SigningKey::from_bytes(&seed);
    hex::wipe(&mut seed);
    let public = key.verifying_key();
    let mut text = Vec::with_capacity(256);
    text.extend_from_slice(KEY_FILE_HEADER.as_bytes());
    text.extend_from_slice(b"\n# public key: ");
    text.extend_from_slice(public_key_hex(&public).as_bytes());
    text.push(b'\n');
    let mut seed_hex = hex::encode(key.as_bytes()).into_bytes();
    text.extend_from_slice(&seed_hex);
    text.push(b'\n');
    hex::wipe(&mut seed_hex);
    let written = write_new(path, &text, 0o600);
    hex::wipe(&mut text);
    written.map(|()| public)
}

/// The public key as 64 lowercase hex characters: what a verifier is given, and the `key_id`
/// of every receipt the matching secret key signs.
pub fn public_key_hex(key: &VerifyingKey) -> String {
    hex::encode(key.as_bytes())
}

/// Writes `key` to a new file at `path` (mode 0644: `# comment` line, then the hex line), for
/// shipping to verifiers. Refuses to overwrite an existing file.
pub fn write_public_key(path: &Path, key: &VerifyingKey) -> Result<(), ReceiptError> {
    let text = format!(
        "# runtape receipt public key (Ed25519, hex)\n{}\n",
        public_key_hex(key)
    );
    write_new(path, text.as_bytes(), 0o644)
}

/// Parses a public key from text in the key file format (64 hex characters, optionally after
/// `#` comment lines), e.g. a `--public-key` argument or a file's content.
pub fn parse_public_key(text: &str) -> Result<VerifyingKey, ReceiptError> {
    public_from_bytes(text.as_bytes(), KeyOrigin::Text)
}

/// Reads a public key file written by [`write_public_key`] (or any text in the key file
/// format holding a public key).
pub fn read_public_key(path: &Path) -> Result<VerifyingKey, ReceiptError> {
    let bytes = read_file(path)?;
    public_from_bytes(&bytes, KeyOrigin::File(path.to_owned()))
}

/// Loads a secret key file. Warns (through `tracing`) when group or others may read it.
pub(crate) fn load_key_file(path: &Path) -> Result<SigningKey, ReceiptError> {
    let mut bytes = read_file(path)?;
    if let Ok(meta) = fs::metadata(path)
        && meta.permissions().mode() & 0o077 != 0
    {
        tracing::warn!(
            path = %path.display(),
            mode = format_args!("{:o}", meta.permissions().mode() & 0o777),
            "receipt signing key file is readable by other users; run chmod 600 on it"
        );
    }
    let key = secret_from_bytes(&bytes, KeyOrigin::File(path.to_owned()));
    hex::wipe(&mut bytes);
    key
}

/// Loads a secret key from the environment variable `var`. `Ok(None)` when the variable is
/// unset or holds only whitespace.
pub(crate) fn load_key_env(var: &str) -> Result<Option<SigningKey>, ReceiptError> {
    let Some(value) = std::env::var_os(var) else {
        return Ok(None);
    };
    let mut bytes = value.into_vec();
    let key = if bytes.iter().all(u8::is_ascii_whitespace) {
        Ok(None)
    } else {
        secret_from_bytes(&bytes, KeyOrigin::Env(var.to_owned())).map(Some)
    };
    hex::wipe(&mut bytes);
    key
}

/// Parses secret key text (the key file format).
pub(crate) fn secret_from_bytes(
    bytes: &[u8],
    origin: KeyOrigin,
) -> Result<SigningKey, ReceiptError> {
    let malformed = |problem| ReceiptError::MalformedKey {
        origin: origin.clone(),
        problem,
    };
    let mut seed = key_line_bytes(bytes).map_err(malformed)?;
    let key = SigningKey::from_bytes(&seed);
    hex::wipe(&mut seed);
    Ok(key)
}

fn public_from_bytes(bytes: &[u8], origin: KeyOrigin) -> Result<VerifyingKey, ReceiptError> {
    let malformed = |problem| ReceiptError::MalformedPublicKey {
        origin: origin.clone(),
        problem,
    };
    let raw = key_line_bytes(bytes).map_err(malformed)?;
    match VerifyingKey::from_bytes(&raw) {
        Ok(key) if !key.is_weak() => Ok(key),
        _ => Err(malformed(KeyProblem::NotAPoint)),
    }
}

/// The 32 bytes on the single key line of `bytes`, skipping blank and `#` lines.
fn key_line_bytes(bytes: &[u8]) -> Result<[u8; 32], KeyProblem> {
    let text = std::str::from_utf8(bytes).map_err(|_| KeyProblem::NotUtf8)?;
    let mut lines = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'));
    let line = lines.next().ok_or(KeyProblem::NoKeyLine)?;
    if lines.next().is_some() {
        return Err(KeyProblem::SeveralKeyLines);
    }
    hex::decode::<32>(line).ok_or(KeyProblem::NotHex64)
}

fn read_file(path: &Path) -> Result<Vec<u8>, ReceiptError> {
    fs::read(path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => ReceiptError::KeyFileMissing {
            path: path.to_owned(),
        },
        _ => ReceiptError::KeyFileUnreadable {
            path: path.to_owned(),
            reason: e.to_string(),
        },
    })
}

/// Creates `path` with `mode` (failing if anything exists there, symlinks included), writes
/// `bytes` and syncs. A partly written file is removed so that a retry is not refused.
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), ReceiptError> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|e| match e.kind() {
            io::ErrorKind::AlreadyExists => ReceiptError::KeyFileExists {
                path: path.to_owned(),
            },
            _ => ReceiptError::KeyWrite {
                path: path.to_owned(),
                reason: e.to_string(),
            },
        })?;
    // `mode` passed through the umask; set it exactly, then write.
    let written = file
        .set_permissions(fs::Permissions::from_mode(mode))
        .and_then(|()| file.write_all(bytes))
        .and_then(|()| file.sync_all());
    written.map_err(|e| {
        drop(file);
        // Best effort: the write error below is the one worth reporting.
        let _ = fs::remove_file(path);
        ReceiptError::KeyWrite {
            path: path.to_owned(),
            reason: e.to_string(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 8032 §7.1, test 1.
    const SEED: &str = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";
    const PUBLIC: &str = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";

    #[test]
    fn parses_the_key_file_format() {
        let text = format!("{KEY_FILE_HEADER}\n\n  {}  \n", SEED.to_uppercase());
        let key = secret_from_bytes(text.as_bytes(), KeyOrigin::Text).expect("valid key text");
        assert_eq!(public_key_hex(&key.verifying_key()), PUBLIC);
        let public = parse_public_key(&format!("# comment\n{PUBLIC}\n")).expect("valid");
        assert_eq!(public, key.verifying_key());
    }

    #[test]
    fn names_the_problem_without_the_text() {
        let cases: [(&[u8], KeyProblem); 4] = [
            (b"# only a comment\n", KeyProblem::NoKeyLine),
            (b"abcd\nef01\n", KeyProblem::SeveralKeyLines),
            (&SEED.as_bytes()[..63], KeyProblem::NotHex64),
            (b"\xff\xfe", KeyProblem::NotUtf8),
        ];
        for (text, problem) in cases {
            let err = secret_from_bytes(text, KeyOrigin::Env("K".into())).expect_err("malformed");
            assert_eq!(
                err,
                ReceiptError::MalformedKey {
                    origin: KeyOrigin::Env("K".into()),
                    problem
                }
            );
            assert!(!err.to_string().contains(&SEED[..16]));
        }
    }
}

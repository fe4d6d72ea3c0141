//! The team example run with a signing key, and reading its receipt exports.

use crate::support::delegation::root_id;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::*;
use crate::support::cli::{example, temp_db, utf8};

/// The team example (a lead delegating to two specialists in one turn), run with a signing key.
pub struct Team {
    pub dir: tempfile::TempDir,
    pub db: PathBuf,
    pub key: PathBuf,
    pub parent: String,
    pub children: Vec<String>,
}

pub fn team() -> Team {
    team_signed_like(None)
}

/// The team example, signed with `like`'s key when given (else a new one).
pub fn team_signed_like(like: Option<&Team>) -> Team {
    let example = example("team.toml");
    run_signed(&example, like)
}

/// [`parallel_team`] (whose children each make a tool call, so they have three receipts),
/// run with a new signing key.
pub fn parallel_team_signed() -> Team {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = write(dir.path(), "team.toml", &parallel_team(0));
    let team = run_signed(&spec, None);
    drop(dir);
    team
}

/// Runs the spec at `example` with `like`'s key when given (else a new one): a lead that
/// delegates to two children at once.
pub fn run_signed(example: &Path, like: Option<&Team>) -> Team {
    let (dir, db) = temp_db();
    let key = dir.path().join("receipt.key");
    match like {
        Some(other) => {
            std::fs::copy(&other.key, &key).expect("copies the key");
            std::fs::copy(other.pubkey(), format!("{}.pub", key.display()))
                .expect("copies the public key");
        }
        None => {
            ok(&db, &["keygen", "-o", utf8(&key)]);
        }
    }
    let seed = std::fs::read_to_string(&key).expect("the key file");
    let o = on(&db)
        .env("RUNTAPE_RECEIPT_KEY", seed)
        .args(["run", utf8(example)])
        .output()
        .expect("runtape runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let parent = root_id(&db, "the lead's run");
    let mut children: Vec<String> = children_of(&db, &parent)
        .iter()
        .map(|c| c["id"].as_str().expect("id").to_owned())
        .collect();
    children.sort();
    assert_eq!(children.len(), 2, "two children in parallel");
    Team {
        dir,
        db,
        key,
        parent,
        children,
    }
}

impl Team {
    pub fn pubkey(&self) -> String {
        format!("{}.pub", self.key.display())
    }

    /// `receipts export RUN`, as its lines (receipts, then the head line).
    pub fn export(&self, run: &str) -> Vec<String> {
        let file = self.dir.path().join(format!("{run}.jsonl"));
        ok(&self.db, &["receipts", "export", run, "-o", utf8(&file)]);
        std::fs::read_to_string(file)
            .expect("the export")
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// `receipts verify --pubkey KEY EXTRA…` over `lines` written to a file, as it ran.
    pub fn verify_output(&self, lines: &[String], extra: &[&str]) -> std::process::Output {
        let file = self.dir.path().join("check.jsonl");
        std::fs::write(&file, lines.join("\n") + "\n").expect("writes the bundle");
        let pubkey = self.pubkey();
        let args = [
            &["receipts", "verify", utf8(&file), "--pubkey", &pubkey][..],
            extra,
        ];
        runtape(&self.db, &args.concat())
    }

    /// `receipts verify` over `lines` written to a file: Ok(stdout) or Err(stderr).
    pub fn verify(&self, lines: &[String]) -> Result<String, String> {
        let o = self.verify_output(lines, &[]);
        let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
        if o.status.success() {
            Ok(stdout)
        } else {
            assert_eq!(
                o.status.code(),
                Some(1),
                "a bundle that does not verify exits 1"
            );
            assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
            Err(stderr)
        }
    }
}

pub fn json(line: &str) -> Value {
    serde_json::from_str(line).expect("a JSON line")
}

pub fn run_of(line: &str) -> String {
    json(line)["body"]["run_id"]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

pub fn link(line: &str) -> String {
    json(line)["seal"]["signature"]
        .as_str()
        .expect("signed")
        .to_owned()
}

pub fn parent_sig(line: &str) -> Option<String> {
    json(line)["body"]["parent_sig"].as_str().map(str::to_owned)
}

/// The index of the first receipt of `run` in `lines`.
pub fn first_of(lines: &[String], run: &str) -> usize {
    lines
        .iter()
        .position(|l| run_of(l) == run)
        .expect("a receipt of the run")
}

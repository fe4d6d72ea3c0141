//! A receipts export ends with the run's sealed head, so a file cut short — trailing lines
//! removed, the head line kept after receipts were removed, or an empty file — fails
//! `receipts verify --pubkey` with one line; a file without a head line (an export by runtape
//! 0.1.0) is checked only with `--allow-headless`, and then said to be unproven.

use crate::support;

use std::path::{Path, PathBuf};

use crate::support::cli::utf8;
use support::tamper::*;

fn export(db: &Path, run: &str, dir: &Path) -> (PathBuf, Vec<String>) {
    let file = dir.join(format!("{run}.jsonl"));
    let out = runtape(db, &["receipts", "export", run, "-o", utf8(&file)]);
    assert!(out.status.success(), "{}", text(&out));
    let lines = std::fs::read_to_string(&file)
        .expect("reads")
        .lines()
        .map(str::to_owned)
        .collect();
    (file, lines)
}

fn verify_file(file: &Path, pubkey: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["receipts", "verify", utf8(file), "--pubkey", pubkey];
    args.extend(extra);
    runtape(Path::new("unused.db"), &args)
}

fn write(dir: &Path, name: &str, lines: &[String]) -> PathBuf {
    let p = dir.join(name);
    let body = if lines.is_empty() {
        String::new()
    } else {
        lines.join("\n") + "\n"
    };
    std::fs::write(&p, body).expect("writes");
    p
}

fn assert_fails(file: &Path, pubkey: &str, needle: &str) {
    let out = verify_file(file, pubkey, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}: {}",
        file.display(),
        text(&out)
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(needle), "{needle}: {err}");
}

#[test]
fn a_complete_export_verifies_and_says_so() {
    let f = fixture();
    let dir = tempfile::tempdir().expect("tempdir");
    for run in [&f.long, &f.fork, &f.killed] {
        let (file, lines) = export(&f.db, run, dir.path());
        assert!(
            lines
                .last()
                .expect("a line")
                .contains("runtape.receipts.head")
        );
        let out = verify_file(&file, &f.pubkey, &[]);
        assert!(out.status.success(), "{}", text(&out));
        assert!(
            text(&out).contains("complete: the run's signed head"),
            "{}",
            text(&out)
        );
    }
}

#[test]
fn a_file_cut_short_or_empty_fails() {
    let f = fixture();
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, lines) = export(&f.db, &f.long, dir.path());
    let n = lines.len();
    assert!(n > 20, "{n} lines");
    for cut in 1..=5 {
        let p = write(dir.path(), &format!("cut{cut}.jsonl"), &lines[..n - cut]);
        assert_fails(&p, &f.pubkey, "no head line");
    }
    // The head line kept, receipts before it removed.
    for removed in 1..=3 {
        let mut kept: Vec<String> = lines[..n - 1 - removed].to_vec();
        kept.push(lines[n - 1].clone());
        let p = write(dir.path(), &format!("gap{removed}.jsonl"), &kept);
        assert_fails(&p, &f.pubkey, "receipts were removed");
    }
    // ... and its count edited to match: the sealed head still names the real last receipt.
    let mut kept: Vec<String> = lines[..n - 2].to_vec();
    let count = format!("\"receipts\":{}", n - 1);
    let head_line = lines[n - 1].replacen(&count, &format!("\"receipts\":{}", n - 2), 1);
    assert_ne!(head_line, lines[n - 1]);
    kept.push(head_line);
    let p = write(dir.path(), "recounted.jsonl", &kept);
    assert_fails(
        &p,
        &f.pubkey,
        "ends its receipt chain at the receipt of seq",
    );
    // The head itself edited: its signature no longer holds.
    let mut edited = lines.clone();
    edited[n - 1] = edited[n - 1].replacen("\"status\":\"completed\"", "\"status\":\"failed\"", 1);
    assert_ne!(edited, lines);
    let p = write(dir.path(), "edited.jsonl", &edited);
    assert_fails(&p, &f.pubkey, "head line's seal does not hold");
    let empty = write(dir.path(), "empty.jsonl", &[]);
    assert_fails(&empty, &f.pubkey, "no head line");
}

#[test]
fn a_headless_file_is_checked_only_when_accepted_and_then_called_unproven() {
    let f = fixture();
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, lines) = export(&f.db, &f.long, dir.path());
    let headless = write(dir.path(), "old.jsonl", &lines[..lines.len() - 1]);
    let out = verify_file(&headless, &f.pubkey, &["--allow-headless"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("NOT proven complete"), "{}", text(&out));
    let json = verify_file(&headless, &f.pubkey, &["--allow-headless", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("one JSON object");
    assert_eq!(v["complete"], false);
    // Accepting a headless file does not accept a broken chain.
    let mut gap = lines[..lines.len() - 1].to_vec();
    gap.remove(3);
    let p = write(dir.path(), "gap.jsonl", &gap);
    let out = verify_file(&p, &f.pubkey, &["--allow-headless"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
}

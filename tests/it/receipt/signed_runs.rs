//! Signed receipts end to end: keygen, a signed run, `verify --pubkey`, export, offline
//! verification, tampering named by receipt, unsigned runs, and the secret key never written
//! anywhere but its own file.

use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use runtape::exec::{Engine, EngineConfig};
use runtape::receipt::ReceiptSigner;
use runtape::store::RunStatus;
use support::durable::*;

use crate::support::cli::{bare, utf8};
use support::cli::text;

fn secret_hex(key_file: &Path) -> String {
    std::fs::read_to_string(key_file)
        .expect("key file")
        .lines()
        .find(|l| !l.starts_with('#') && !l.trim().is_empty())
        .expect("key line")
        .trim()
        .to_owned()
}

fn signed_run(dir: &Path, signer: ReceiptSigner) -> String {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let config = EngineConfig {
            receipts: Arc::new(signer),
            ..EngineConfig::default()
        };
        let engine = Engine::open_with(&dir.join("runs.db"), config).expect("opens");
        lookup_rounds(&engine, 3);
        let end = run_to_rest(
            &engine,
            spec(vec![lookup_spec()], |_| {}),
            "Sign everything.",
        )
        .await;
        assert_eq!(end.status, RunStatus::Completed);
        end.run_id.to_string()
    })
}

#[test]
fn a_signed_run_verifies_offline_and_tampering_is_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = dir.path().join("receipts.key");
    let k = utf8(&key);
    let out = bare(&["keygen", "-o", k]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        std::fs::metadata(&key).expect("key").permissions().mode() & 0o777,
        0o600
    );
    let again = bare(&["keygen", "-o", k]);
    assert_eq!(
        again.status.code(),
        Some(2),
        "never overwrites: {}",
        text(&again)
    );
    let pubkey = format!("{k}.pub");

    let run = signed_run(
        dir.path(),
        ReceiptSigner::from_key_file(&key).expect("loads"),
    );
    let db = dir.path().join("runs.db");
    let d = utf8(&db);

    let v = bare(&["--db", d, "verify", &run, "--pubkey", &pubkey]);
    assert!(v.status.success(), "{}", text(&v));
    assert!(
        text(&v).contains("7 receipts signed by the trusted key"),
        "{}",
        text(&v)
    );

    let bundle = dir.path().join("receipts.jsonl");
    let b = utf8(&bundle);
    assert!(
        bare(&["--db", d, "receipts", "export", &run, "-o", b])
            .status
            .success()
    );
    let ok = bare(&["receipts", "verify", b, "--pubkey", &pubkey]);
    assert!(ok.status.success(), "{}", text(&ok));
    assert!(text(&ok).starts_with("OK: 7 receipts, signed by"));

    // Tampering, each named by receipt.
    let lines: Vec<String> = std::fs::read_to_string(&bundle)
        .expect("bundle")
        .lines()
        .map(str::to_owned)
        .collect();
    let write = |name: &str, lines: &[String]| {
        let p = dir.path().join(name);
        std::fs::write(&p, lines.join("\n") + "\n").expect("writes");
        p
    };
    let mut missing = lines.clone();
    missing.remove(3);
    let mut swapped = lines.clone();
    swapped.swap(2, 3);
    let mut edited = lines.clone();
    edited[4] = edited[4].replacen("\"seq\":", "\"seq\":1", 1);
    for (name, bad, needle) in [
        ("missing", missing, "receipt 3"),
        ("swapped", swapped, "receipt 2"),
        ("edited", edited, "receipt 4"),
    ] {
        let p = write(&format!("{name}.jsonl"), &bad);
        let out = bare(&["receipts", "verify", utf8(&p), "--pubkey", &pubkey]);
        assert_eq!(out.status.code(), Some(1), "{name}: {}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{name}: {err}");
        assert!(err.contains(needle), "{name}: {err}");
    }
    // Re-signed with another key: the trusted key rejects it.
    let other = dir.path().join("other.key");
    assert!(bare(&["keygen", "-o", utf8(&other)]).status.success());
    let dir2 = tempfile::tempdir().expect("tempdir");
    let run2 = signed_run(
        dir2.path(),
        ReceiptSigner::from_key_file(&other).expect("loads"),
    );
    let forged = dir.path().join("forged.jsonl");
    let d2 = dir2.path().join("runs.db");
    assert!(
        bare(&[
            "--db",
            utf8(&d2),
            "receipts",
            "export",
            &run2,
            "-o",
            utf8(&forged)
        ])
        .status
        .success()
    );
    let out = bare(&["receipts", "verify", utf8(&forged), "--pubkey", &pubkey]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("receipt 0"),
        "{}",
        text(&out)
    );

    // The secret is nowhere but its file: database, WAL, exports, command output.
    let secret = secret_hex(&key);
    let mut haystacks: Vec<Vec<u8>> = Vec::new();
    for f in std::fs::read_dir(dir.path()).expect("lists").flatten() {
        let path = f.path();
        if path != key {
            haystacks.push(std::fs::read(&path).expect("reads"));
        }
    }
    haystacks.push(text(&v).into_bytes());
    haystacks.push(text(&ok).into_bytes());
    for h in &haystacks {
        assert!(
            !String::from_utf8_lossy(h)
                .to_lowercase()
                .contains(&secret.to_lowercase()),
            "the signing key leaked"
        );
    }
}

#[test]
fn without_a_key_receipts_are_unsigned_and_still_chained() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = signed_run(dir.path(), ReceiptSigner::unsigned());
    let db = dir.path().join("runs.db");
    let d = utf8(&db);
    let v = bare(&["--db", d, "verify", &run]);
    assert!(v.status.success(), "{}", text(&v));
    assert!(
        text(&v).contains("7 receipts, unsigned (hash-chained only)"),
        "{}",
        text(&v)
    );
    // Editing a stored receipt seal breaks it, and verify names where.
    let conn = rusqlite::Connection::open(&db).expect("opens");
    let n = conn
        .execute("UPDATE transitions SET seal = zeroblob(33) WHERE id = (SELECT min(id) FROM transitions WHERE seal IS NOT NULL)", [])
        .expect("tampers");
    assert_eq!(n, 1);
    drop(conn);
    let v = bare(&["--db", d, "verify", &run]);
    assert_eq!(v.status.code(), Some(1), "{}", text(&v));
    assert!(
        String::from_utf8_lossy(&v.stderr).contains("receipt"),
        "{}",
        text(&v)
    );
}

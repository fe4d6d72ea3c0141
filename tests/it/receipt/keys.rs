//! Signing keys: keygen writes a private file and never overwrites; a key loads the same from a
//! file and from an environment variable; malformed keys give clear errors that do not quote
//! them; and the secret never shows up in receipts, exports, errors or Debug output.
//!
//! Environment variables cannot be set inside this process (`set_var` is `unsafe` and unsafe
//! code is forbidden), so the env tests re-run this test binary as a child process with the
//! variable set, running only `env_child`, which prints what it loaded.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use runtape::machine::{AgentId, Hlc, RunId};
use runtape::receipt::*;
use serde_json::json;

const CHILD_MARK: &str = "RUNTAPE_TEST_RECEIPT_CHILD";
const CHILD_KEY_VAR: &str = "RUNTAPE_TEST_RECEIPT_KEY";
const CHILD_FILE_VAR: &str = "RUNTAPE_TEST_RECEIPT_FILE";

/// The seed hex line of a key file written by keygen.
fn seed_hex(path: &Path) -> String {
    let text = fs::read_to_string(path).expect("key file is readable");
    let line = text.lines().find(|l| !l.starts_with('#'));
    line.expect("key file has a key line").trim().to_owned()
}

/// Runs `env_child` in a child process with `key_text` in the key variable and optionally a
/// key file; returns the line it printed.
fn load_in_child(key_text: Option<&str>, file: Option<&Path>) -> String {
    let exe = std::env::current_exe().expect("the test binary knows its path");
    let mut cmd = Command::new(exe);
    let child = crate::libtest_name(concat!(module_path!(), "::env_child"));
    cmd.args(["--exact", child, "--nocapture", "--test-threads=1"])
        .env(CHILD_MARK, "1")
        .env_remove(CHILD_KEY_VAR)
        .env_remove(CHILD_FILE_VAR);
    if let Some(text) = key_text {
        cmd.env(CHILD_KEY_VAR, text);
    }
    if let Some(path) = file {
        cmd.env(CHILD_FILE_VAR, path);
    }
    let out = cmd.output().expect("the test binary runs");
    assert!(out.status.success(), "child failed: {out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    // libtest prints "test env_child ... " on the same line, before the child's output.
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("CHILD-RESULT: ").map(|(_, result)| result));
    match line {
        Some(result) => result.to_owned(),
        None => panic!("the child printed no result: {stdout}"),
    }
}

/// Not a test of its own: the body of the child process `load_in_child` starts. Does nothing
/// when run by the normal test harness.
#[test]
fn env_child() {
    if std::env::var_os(CHILD_MARK).is_none() {
        return;
    }
    let file = std::env::var_os(CHILD_FILE_VAR).map(std::path::PathBuf::from);
    match ReceiptSigner::from_env_or_file(CHILD_KEY_VAR, file.as_deref()) {
        Ok(signer) => println!("CHILD-RESULT: ok {}", signer.key_id().unwrap_or("unsigned")),
        Err(err) => println!("CHILD-RESULT: err {err}"),
    }
}

#[test]
fn keygen_writes_a_private_file_and_never_overwrites() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("receipt.key");
    let public = keygen(&path).expect("keygen succeeds");
    let mode = fs::metadata(&path)
        .expect("file exists")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let text = fs::read_to_string(&path).expect("readable");
    assert!(text.starts_with(KEY_FILE_HEADER));
    assert!(
        text.contains(&public_key_hex(&public)),
        "the comment names the public key"
    );

    let err = keygen(&path).expect_err("the file exists");
    assert_eq!(err, ReceiptError::KeyFileExists { path: path.clone() });
    assert_eq!(
        fs::read_to_string(&path).expect("readable"),
        text,
        "file untouched"
    );

    let signer = ReceiptSigner::from_key_file(&path).expect("the key loads");
    assert_eq!(signer.verifying_key(), Some(public));
    assert_eq!(signer.key_id(), Some(public_key_hex(&public).as_str()));

    let other = keygen(&dir.path().join("second.key")).expect("keygen succeeds");
    assert_ne!(other, public, "keys are random");
}

#[test]
fn public_key_files_round_trip() {
    let dir = tempfile::tempdir().expect("temp dir");
    let public = keygen(&dir.path().join("k")).expect("keygen");
    let pub_path = dir.path().join("k.pub");
    write_public_key(&pub_path, &public).expect("written");
    assert_eq!(read_public_key(&pub_path).expect("read back"), public);
    assert_eq!(
        parse_public_key(&public_key_hex(&public)).expect("hex"),
        public
    );
    assert!(matches!(
        write_public_key(&pub_path, &public),
        Err(ReceiptError::KeyFileExists { .. })
    ));
    assert!(matches!(
        parse_public_key("zz"),
        Err(ReceiptError::MalformedPublicKey {
            problem: KeyProblem::NotHex64,
            ..
        })
    ));
}

#[test]
fn a_key_from_the_environment_matches_the_key_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("receipt.key");
    let public = public_key_hex(&keygen(&path).expect("keygen"));
    let seed = seed_hex(&path);

    assert_eq!(load_in_child(Some(&seed), None), format!("ok {public}"));
    let whole_file = fs::read_to_string(&path).expect("readable");
    assert_eq!(
        load_in_child(Some(&whole_file), None),
        format!("ok {public}")
    );
    assert_eq!(load_in_child(None, Some(&path)), format!("ok {public}"));

    // The variable wins over the file; blank or unset with no file means unsigned.
    let other = dir.path().join("other.key");
    keygen(&other).expect("keygen");
    assert_eq!(
        load_in_child(Some(&seed), Some(&other)),
        format!("ok {public}")
    );
    assert_eq!(load_in_child(Some("  "), None), "ok unsigned");
    assert_eq!(load_in_child(None, None), "ok unsigned");

    // A malformed variable is an error naming the variable, not its content.
    let bad = format!("{seed}0");
    let line = load_in_child(Some(&bad), Some(&path));
    assert!(line.starts_with("err "), "{line}");
    assert!(line.contains(CHILD_KEY_VAR), "{line}");
    assert!(!line.contains(&seed[..16]), "{line}");
}

#[test]
fn malformed_or_missing_key_files_give_clear_errors_without_content() {
    let dir = tempfile::tempdir().expect("temp dir");
    let secret = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0";
    let cases = [
        (format!("{}\n", &secret[..63]), KeyProblem::NotHex64),
        (format!("{secret}\n{secret}\n"), KeyProblem::SeveralKeyLines),
        ("# nothing here\n\n".to_owned(), KeyProblem::NoKeyLine),
        (format!("key = \"{secret}\"\n"), KeyProblem::NotHex64),
    ];
    for (i, (text, problem)) in cases.into_iter().enumerate() {
        let path = dir.path().join(format!("bad{i}.key"));
        fs::write(&path, &text).expect("written");
        let err = ReceiptSigner::from_key_file(&path).expect_err("malformed");
        assert_eq!(
            err,
            ReceiptError::MalformedKey {
                origin: KeyOrigin::File(path.clone()),
                problem
            }
        );
        let shown = err.to_string();
        assert!(shown.contains(&path.display().to_string()), "{shown}");
        assert!(
            shown.contains("64 hex characters"),
            "says what to do: {shown}"
        );
        assert!(!shown.contains(&secret[..16]) && !format!("{err:?}").contains(&secret[..16]));
        assert!(!shown.contains('\n'));
    }

    let missing = dir.path().join("missing.key");
    let err = ReceiptSigner::from_env_or_file("RUNTAPE_TEST_UNSET_VAR_7Q2", Some(&missing))
        .expect_err("a configured file must exist");
    assert_eq!(err, ReceiptError::KeyFileMissing { path: missing });
}

#[test]
fn the_secret_never_appears_in_receipts_exports_errors_or_debug() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("receipt.key");
    keygen(&path).expect("keygen");
    let seed = seed_hex(&path);
    let signer = ReceiptSigner::from_key_file(&path).expect("loads");

    let mut receipts: Vec<Receipt> = Vec::new();
    for i in 0..5u64 {
        let draft = ReceiptDraft {
            run_id: RunId::new("run-s"),
            seq: i + 1,
            kind: ReceiptKind::Model,
            agent: AgentId::new("a"),
            request_hash: hash_json(&json!(i)),
            response_hash: hash_json(&json!(i + 1)),
            usage: Some(json!({"input_tokens": i})),
            cost: Some(i),
            hlc: Hlc::from_ms(1_700_000_000_000 + i),
            child: None,
        };
        let receipt = signer.seal(receipts.last(), draft).expect("valid");
        receipts.push(receipt);
    }
    let mut export = Vec::new();
    write_jsonl(&mut export, &receipts).expect("export");

    let mut seen = vec![
        format!("{signer:?}"),
        format!("{signer:#?}"),
        format!("{receipts:?}"),
        String::from_utf8(export).expect("UTF-8"),
    ];
    let key = signer.verifying_key().expect("keyed");
    seen.push(
        verify_chain(&receipts, Some(&key))
            .expect("verifies")
            .to_string(),
    );
    let mut tampered = receipts.clone();
    tampered[2].body.cost = Some(99);
    let err = verify_chain(&tampered, Some(&key)).expect_err("tampered");
    seen.push(format!("{err} {err:?}"));
    let err = verify_chain(&receipts, None).expect_err("key required");
    seen.push(format!("{err} {err:?}"));
    let other = ReceiptSigner::unsigned();
    let err = other.seal(receipts.last(), redraft(&receipts[0]));
    seen.push(format!("{err:?}"));

    let bad_path = dir.path().join("bad.key");
    fs::write(&bad_path, format!("{seed}\n{seed}\n")).expect("written");
    let err = ReceiptSigner::from_key_file(&bad_path).expect_err("two lines");
    seen.push(format!("{err} {err:?}"));

    for text in &seen {
        for needle in [seed.as_str(), &seed[..16], &seed.to_uppercase()] {
            assert!(!text.contains(needle), "secret leaked into: {text}");
        }
    }
}

/// A draft with a receipt's fields, for provoking a sealing error in the leak test.
fn redraft(r: &Receipt) -> ReceiptDraft {
    let b = r.body.clone();
    ReceiptDraft {
        run_id: b.run_id,
        seq: b.seq + 100,
        kind: b.kind,
        agent: b.agent,
        request_hash: b.request_hash,
        response_hash: b.response_hash,
        usage: b.usage,
        cost: b.cost,
        hlc: b.hlc,
        child: None,
    }
}

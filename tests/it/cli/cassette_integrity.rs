//! The command line requires cassette integrity: a cassette downgraded to version 1 (its
//! `cassetteId`, `envelopeHash` and every `responseHash` removed) with an edited reply is
//! refused by `replay` and `cassette diff` with one line and exit 2, and accepted only with
//! `--allow-unverified`, which says so on stderr. An edited version-2 cassette is refused
//! even then.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::support;
use support::cli::{run_id, runtape, utf8, write};
use support::spec::{agent, scripted_as};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// One scripted answer.
fn spec() -> String {
    [
        "goal = \"What is the answer?\"\n",
        &scripted_as("s", r#"{ text = "the real answer" }"#),
        &agent("a", "s", &[], ""),
    ]
    .concat()
}

/// A spec, and the cassette exported from a run of it.
fn recorded(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let db = dir.join("runs.db");
    let spec = write(dir, "spec.toml", &spec());
    let o = runtape(&db, &["run", utf8(&spec)]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let run = run_id(&o);
    let cassette = dir.join("run.cassette.json");
    let o = runtape(&db, &["cassette", "export", &run, "-o", utf8(&cassette)]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    (db, spec, cassette)
}

/// The downgrade attack: version 1, every integrity field removed, a reply edited.
fn downgrade(cassette: &Path) -> PathBuf {
    let mut v: Value =
        serde_json::from_slice(&std::fs::read(cassette).expect("reads")).expect("JSON");
    for entry in support::cli::downgraded(&mut v) {
        entry["response"]["reply"]["text"] = "HACKED ANSWER".into();
        if let Some(chunks) = entry.get_mut("chunks") {
            *chunks = serde_json::json!(["HACKED ANSWER"]);
        }
    }
    let out = cassette.with_file_name("downgraded.cassette.json");
    std::fs::write(&out, serde_json::to_vec_pretty(&v).expect("JSON")).expect("writes");
    out
}

fn replay(db: &Path, spec: &Path, cassette: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["replay", utf8(spec), "--cassette", utf8(cassette)];
    args.extend_from_slice(extra);
    runtape(db, &args)
}

#[test]
fn a_downgraded_edited_cassette_is_refused_unless_explicitly_allowed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (db, spec, cassette) = recorded(dir.path());
    let o = replay(&db, &spec, &cassette, &[]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "the original replays: {}",
        text(&o.stderr)
    );
    assert!(text(&o.stdout).contains("answer: the real answer"));

    let attacked = downgrade(&cassette);
    let before = std::fs::read(&db).expect("db");
    let o = replay(&db, &spec, &attacked, &[]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: ") && err.contains("no integrity hashes"),
        "{err}"
    );
    assert!(
        err.contains("--allow-unverified"),
        "says how to accept it: {err}"
    );
    assert!(!text(&o.stdout).contains("HACKED"), "nothing ran");
    assert_eq!(
        std::fs::read(&db).expect("db"),
        before,
        "nothing was written"
    );

    let o = replay(&db, &spec, &attacked, &["--allow-unverified"]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.lines()
            .any(|l| l.starts_with("warning: ") && l.contains("unverified")),
        "a warning line: {err}"
    );
    assert!(text(&o.stdout).contains("answer: HACKED ANSWER"));

    let o = runtape(&db, &["cassette", "diff", utf8(&cassette), utf8(&attacked)]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert_eq!(text(&o.stderr).lines().count(), 1);
}

#[test]
fn an_edited_version_2_cassette_is_refused_even_when_unverified_is_allowed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (db, spec, cassette) = recorded(dir.path());
    let raw = std::fs::read_to_string(&cassette).expect("reads");
    assert!(raw.contains("the real answer"));
    let edited = cassette.with_file_name("edited.cassette.json");
    std::fs::write(&edited, raw.replace("the real answer", "HACKED ANSWER")).expect("writes");
    for extra in [&[][..], &["--allow-unverified"][..]] {
        let o = replay(&db, &spec, &edited, extra);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("edited after recording"), "{err}");
    }
}

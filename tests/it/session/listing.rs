//! Sessions are shown where runs are shown (revision 5): `runtape ls` marks each run of a
//! session with its place (`[trip-1 #2]`), a fork or a cassette replay of one with the run it
//! continues (`[trip-1 #2, fork]`, `[trip-1 #2, replay]`: they hold no place), and `ls --json`
//! and `runtape serve`'s API carry `session`, `session_index` and `session_kind` — the API's
//! run list through the same code, searchable by the session's name.

use crate::support;

use crate::support::cli::{first_id, line_starting, utf8};
use serde_json::Value;
use support::serve::{runtape, scratch_db, serve};

fn ok(dir: &std::path::Path, db: &std::path::Path, args: &[&str]) -> String {
    let out = runtape(dir, db, args);
    assert!(
        out.status.success(),
        "{args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `(session, session_index, session_kind)` of a run as JSON lists it.
fn mark(v: &Value) -> (Value, Value, Value) {
    (
        v["session"].clone(),
        v["session_index"].clone(),
        v["session_kind"].clone(),
    )
}

/// The run `run` in a listing (`ls --json` lines, or the API's `runs`).
fn entry<'a>(runs: &'a [Value], run: &str) -> &'a Value {
    match runs.iter().find(|v| v["id"] == run) {
        Some(v) => v,
        None => panic!("{run} is not listed: {runs:?}"),
    }
}

#[test]
fn ls_and_the_api_show_each_runs_session_and_place() {
    let (dir, db) = scratch_db();
    let spec = "examples/session.toml";
    let first = first_id(&ok(
        dir.path(),
        &db,
        &["run", spec, "My name is Ada.", "--session", "trip-1"],
    ));
    let second = first_id(&ok(
        dir.path(),
        &db,
        &["run", spec, "I prefer trains.", "--session", "trip-1"],
    ));
    let fork = first_id(&ok(dir.path(), &db, &["fork", &format!("{second}@2")]));
    let cassette = dir.path().join("second.json");
    ok(
        dir.path(),
        &db,
        &["cassette", "export", &second, "-o", utf8(&cassette)],
    );
    let replay = first_id(&ok(
        dir.path(),
        &db,
        &["replay", spec, "--cassette", utf8(&cassette)],
    ));
    let plain = first_id(&ok(dir.path(), &db, &["run", "examples/quickstart.toml"]));

    let listed = ok(dir.path(), &db, &["ls"]);
    let line = |run: &str| line_starting(&listed, run);
    assert!(line(&first).contains("[trip-1 #1]"), "{listed}");
    assert!(line(&second).contains("[trip-1 #2]"), "{listed}");
    assert!(line(&fork).contains("[trip-1 #2, fork]"), "{listed}");
    assert!(line(&replay).contains("[trip-1 #2, replay]"), "{listed}");
    assert!(!line(&plain).contains('['), "{listed}");

    let json: Vec<Value> = ok(dir.path(), &db, &["ls", "--json"])
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    let expected = [
        (&first, ("trip-1".into(), 1.into(), "run".into())),
        (&second, ("trip-1".into(), 2.into(), "run".into())),
        (&fork, ("trip-1".into(), 2.into(), "fork".into())),
        (&replay, ("trip-1".into(), 2.into(), "replay".into())),
        (&plain, (Value::Null, Value::Null, Value::Null)),
    ];
    for (run, want) in &expected {
        assert_eq!(&mark(entry(&json, run)), want, "{run}");
    }

    // The API lists the same, and finds a session's runs by its name.
    let server = serve(dir.path(), &db);
    let (status, all) = server.get("/api/runs");
    assert_eq!(status, 200, "{all}");
    let api = all["runs"].as_array().expect("runs");
    for (run, want) in &expected {
        assert_eq!(&mark(entry(api, run)), want, "{run}");
    }
    let (_, found) = server.get("/api/runs?q=trip-1");
    assert_eq!(found["runs"].as_array().map(Vec::len), Some(4), "{found}");
    let (status, one) = server.get(&format!("/api/runs/{fork}"));
    assert_eq!(status, 200, "{one}");
    assert_eq!(
        mark(&one),
        ("trip-1".into(), 2.into(), "fork".into()),
        "{one}"
    );
    // The page draws the mark from these fields.
    let page = support::serve::request(server.addr, "GET", "/app.js", &[], None);
    assert_eq!(page.status, 200);
    assert!(
        page.text().contains("function sessionMark(r)"),
        "the page shows it"
    );
}

//! `runtape serve`'s API does what the command line does: each read answers what the matching
//! `--json` command prints, each action ends in the history as the command's would, and every
//! refusal is one line with the command line's words and a fitting status.

use crate::support;

use std::time::Duration;

use crate::support::cli::{json_lines, utf8};
use serde_json::{Value, json};
use support::serve::{
    Server, field, request, run_spec, runtape, scratch_db, serve, serving, serving_runs,
    slow_tool_spec,
};
use support::tamper::dump;

#[test]
fn reads_answer_what_the_cli_prints_with_json() {
    let (dir, db) = scratch_db();
    let run = run_spec(dir.path(), &db, "examples/quickstart.toml");
    let fork_out = runtape(
        dir.path(),
        &db,
        &[
            "fork",
            &format!("{run}@1"),
            "--edit",
            "user=Count 'a b'.",
            "--json",
        ],
    );
    let fork = json_lines(&fork_out)[0]["id"]
        .as_str()
        .expect("fork id")
        .to_owned();
    let server = serve(dir.path(), &db);

    let log = json_lines(&runtape(dir.path(), &db, &["log", &run, "--json"]));
    let (status, page) = server.get(&format!("/api/runs/{run}/timeline?limit=1000"));
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["entries"], Value::Array(log.clone()));
    assert_eq!(page["total"], json!(log.len()));
    let (_, slice) = server.get(&format!("/api/runs/{run}/timeline?offset=2&limit=3"));
    assert_eq!(slice["entries"], Value::Array(log[2..5].to_vec()));

    for seq in ["1", "3", "latest"] {
        let at = if seq == "latest" {
            run.clone()
        } else {
            format!("{run}@{seq}")
        };
        let show: Value =
            serde_json::from_slice(&runtape(dir.path(), &db, &["show", &at, "--json"]).stdout)
                .expect("show --json");
        let (status, step) = server.get(&format!("/api/runs/{run}/steps/{seq}"));
        assert_eq!(status, 200);
        assert_eq!(step, show, "step {seq}");
    }

    let diff: Value =
        serde_json::from_slice(&runtape(dir.path(), &db, &["diff", &run, &fork, "--json"]).stdout)
            .expect("diff --json");
    assert_eq!(server.get(&format!("/api/diff?a={run}&b={fork}")).1, diff);

    let verify: Value =
        serde_json::from_slice(&runtape(dir.path(), &db, &["verify", &run, "--json"]).stdout)
            .expect("verify --json");
    assert_eq!(server.get(&format!("/api/runs/{run}/verify")).1, verify);

    let ls = json_lines(&runtape(dir.path(), &db, &["ls", "--json"]));
    let (_, runs) = server.get("/api/runs");
    assert_eq!(runs["runs"].as_array().map(Vec::len), Some(2));
    for (listed, printed) in runs["runs"].as_array().expect("runs").iter().zip(&ls) {
        for (k, v) in printed.as_object().expect("object") {
            if k != "updated_ms" {
                assert_eq!(&listed[k], v, "{k}");
            }
        }
        assert_eq!(listed["interrupted"], json!(false));
        assert_eq!(listed["agent"], json!("assistant"));
    }
    let (_, one) = server.get(&format!("/api/runs/{run}"));
    assert_eq!(one["forks"], json!([{"run": fork, "seq": 1}]));
    assert_eq!(one["waiting"], json!([]));
    let (_, filtered) = server.get(&format!(
        "/api/runs?status=completed&q={}",
        fork.to_uppercase()
    ));
    assert_eq!(
        filtered["runs"].as_array().map(Vec::len),
        Some(1),
        "{filtered}"
    );
    assert_eq!(filtered["runs"][0]["id"], json!(fork));
    let (_, none) = server.get("/api/runs?status=failed");
    assert_eq!(none["runs"], json!([]), "{none}");
    let (_, receipts) = server.get(&format!("/api/runs/{run}/receipts"));
    assert_eq!(receipts["receipts"].as_array().map(Vec::len), Some(4));
}

#[test]
fn runs_start_from_a_spec_path_or_uploaded_text_and_complete() {
    let (dir, db) = scratch_db();
    let server = serve(dir.path(), &db);
    let (status, started) = server.post("/api/runs", &json!({"spec": "examples/quickstart.toml"}));
    assert_eq!(status, 201, "{started}");
    let id = field(&started, "id");
    server.wait_run(id, Duration::from_secs(60), |r| r["status"] == "completed");

    let text = std::fs::read_to_string(dir.path().join("examples/quickstart.toml")).expect("spec");
    let (status, started) = server.post(
        "/api/runs",
        &json!({"spec_toml": text, "goal": "Count the words of 'uploaded spec'."}),
    );
    assert_eq!(status, 201, "{started}");
    let id = field(&started, "id");
    let r = server.wait_run(id, Duration::from_secs(60), |r| r["status"] == "completed");
    assert_eq!(r["goal"], json!("Count the words of 'uploaded spec'."));
    // The server drove it: `verify` of the CLI agrees with what it stored.
    let out = runtape(dir.path(), &db, &["verify", id]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let (status, e) = server.post(
        "/api/runs",
        &json!({"spec_toml": "goal = 3\n[[agents]]\nid = 1"}),
    );
    assert_eq!(status, 400, "{e}");
    assert!(field(&e, "error").contains("uploaded.toml"), "{e}");
    let (status, e) = server.post("/api/runs", &json!({}));
    assert_eq!(status, 400);
    assert!(field(&e, "error").contains("exactly one of"), "{e}");
    let (status, e) = server.post("/api/runs", &json!({"spec": "examples/missing.toml"}));
    assert_eq!(status, 400, "{e}");
}

#[test]
fn approve_reject_answer_and_raise_do_what_resume_does() {
    let (dir, db, [a, b], server) =
        serving_runs(["examples/approval.toml", "examples/approval.toml"]);
    let (_, waiting) = server.get(&format!("/api/runs/{a}"));
    assert_eq!(waiting["status"], "awaiting_input");
    assert_eq!(waiting["waiting"][0]["kind"], "approval");
    assert_eq!(waiting["waiting"][0]["tool"], "deploy");

    let (status, r) = server.post(&format!("/api/runs/{a}/approve"), &json!({}));
    assert_eq!(status, 202, "{r}");
    server.wait_run(&a, Duration::from_secs(60), |r| r["status"] == "completed");
    let log = json_lines(&runtape(dir.path(), &db, &["log", &a, "--json"]));
    assert!(
        log.iter().any(|e| e["summary"] == "person: Approve"),
        "{log:?}"
    );

    let call = waiting["waiting"][0]["call_id"].as_str().expect("call id");
    let (status, r) = server.post(
        &format!("/api/runs/{b}/reject"),
        &json!({"call": call, "reason": "not today"}),
    );
    assert_eq!(status, 202, "{r}");
    server.wait_run(&b, Duration::from_secs(60), |r| r["status"] == "completed");
    let show: Value = serde_json::from_slice(
        &runtape(dir.path(), &db, &["show", &format!("{b}@4"), "--json"]).stdout,
    )
    .expect("show");
    assert_eq!(show["event"]["body"]["input"]["kind"], "reject", "{show}");
    assert_eq!(
        show["event"]["body"]["input"]["reason"], "not today",
        "{show}"
    );

    // Nothing waits any more: the same refusal as `resume --input`.
    let (status, e) = server.post(&format!("/api/runs/{a}/answer"), &json!({"text": "hi"}));
    assert_eq!(status, 409, "{e}");
    assert!(field(&e, "error").contains("already ended"), "{e}");
    let (status, e) = server.post(
        &format!("/api/runs/{a}/raise"),
        &json!({"raise": ["budget.max_turns=x"]}),
    );
    assert_eq!(status, 400, "{e}");
    assert!(field(&e, "error").contains("not a whole number"), "{e}");
}

#[test]
fn a_fork_with_an_edit_runs_and_differs_from_its_parent() {
    let (_dir, _db, run, server) = serving("examples/quickstart.toml");
    let (status, f) = server.post(
        &format!("/api/runs/{run}/fork"),
        &json!({"seq": 1, "edits": ["user=How many words are in 'a b c'?"]}),
    );
    assert_eq!(status, 201, "{f}");
    assert_eq!(f["parent"], json!(run));
    let fork = field(&f, "id");
    server.wait_run(fork, Duration::from_secs(60), |r| {
        r["status"] == "completed"
    });
    let (_, d) = server.get(&format!("/api/diff?a={run}&b={fork}"));
    assert_eq!(d["common"], json!(1));
    assert_eq!(d["first_difference"]["seq"], json!(2));
    let (status, e) = server.post(&format!("/api/runs/{run}/fork"), &json!({"seq": 99}));
    assert_eq!(status, 404, "{e}");
    let (status, e) = server.post(
        &format!("/api/runs/{run}/fork"),
        &json!({"seq": 1, "stop_on_divergence": true}),
    );
    assert_eq!(status, 400, "{e}");
}

#[test]
fn pause_then_resume_and_cancel_act_on_runs_the_server_drives() {
    let (dir, db) = scratch_db();
    let spec = slow_tool_spec(dir.path(), 1.5);
    let server = serve(dir.path(), &db);
    let spec = utf8(&spec);
    let (_, started) = server.post("/api/runs", &json!({"spec": spec}));
    let id = field(&started, "id").to_owned();
    server.wait_run(&id, Duration::from_secs(30), |r| {
        r["driven"] == true && r["steps"].as_u64() >= Some(3)
    });
    let (status, p) = server.post(&format!("/api/runs/{id}/pause"), &json!({}));
    assert_eq!(status, 200, "{p}");
    assert!(field(&p, "message").starts_with("paused"), "{p}");
    let (status, r) = server.post(&format!("/api/runs/{id}/resume"), &json!({}));
    assert_eq!(status, 202, "{r}");
    server.wait_run(&id, Duration::from_secs(60), |r| r["status"] == "completed");

    let (_, started) = server.post("/api/runs", &json!({"spec": spec}));
    let id = field(&started, "id").to_owned();
    server.wait_run(&id, Duration::from_secs(30), |r| r["driven"] == true);
    let (status, c) = server.post(
        &format!("/api/runs/{id}/cancel"),
        &json!({"reason": "enough"}),
    );
    assert_eq!(status, 200, "{c}");
    assert!(field(&c, "message").starts_with("cancel"), "{c}");
    server.wait_run(&id, Duration::from_secs(30), |r| r["status"] == "cancelled");
    let (status, e) = server.post(&format!("/api/runs/{id}/cancel"), &json!({}));
    assert_eq!(status, 409, "{e}");
    assert!(field(&e, "error").contains("already ended"), "{e}");
}

#[test]
fn every_refusal_is_one_line_with_a_fitting_status() {
    let (_dir, _db, run, server) = serving("examples/quickstart.toml");
    let long = "x".repeat(1_000);
    let cases: Vec<(&str, String, Option<&str>, u16, &str)> = vec![
        (
            "GET",
            "/api/runs/nosuchrun".into(),
            None,
            404,
            "no run with id",
        ),
        (
            "GET",
            "/api/runs/a%0Ab".into(),
            None,
            400,
            "malformed run reference",
        ),
        ("GET", format!("/api/runs/{long}"), None, 400, "at most 128"),
        (
            "GET",
            format!("/api/runs/{run}/steps/99"),
            None,
            404,
            "there is no step 99",
        ),
        (
            "GET",
            format!("/api/runs/{run}/steps/x"),
            None,
            400,
            "not a whole number",
        ),
        (
            "GET",
            format!("/api/runs/{run}/timeline?color=red"),
            None,
            400,
            "query string",
        ),
        (
            "GET",
            "/api/runs?status=sleeping".into(),
            None,
            400,
            "is not one of",
        ),
        (
            "GET",
            format!("/api/runs/{run}/verify?pubkey=zz"),
            None,
            400,
            "pubkey",
        ),
        (
            "GET",
            "/api/nothing-here".into(),
            None,
            404,
            "no such route",
        ),
        (
            "DELETE",
            format!("/api/runs/{run}"),
            None,
            405,
            "does not take that method",
        ),
        (
            "GET",
            format!("/api/runs/{run}/events?after=x.y"),
            None,
            400,
            "not an event id",
        ),
        (
            "POST",
            format!("/api/runs/{run}/fork"),
            Some("{not json"),
            400,
            "not what this endpoint takes",
        ),
        (
            "POST",
            format!("/api/runs/{run}/fork"),
            Some("{}"),
            400,
            "seq",
        ),
        (
            "POST",
            format!("/api/runs/{run}/answer"),
            Some(r#"{"text":"x","extra":1}"#),
            400,
            "unknown field",
        ),
        (
            "POST",
            format!("/api/runs/{run}/pause"),
            Some("{}"),
            409,
            "only a running run",
        ),
    ];
    for (method, path, body, want, words) in cases {
        let headers: &[(&str, &str)] = if body.is_some() {
            &[("Content-Type", "application/json")]
        } else {
            &[]
        };
        let a = request(server.addr, method, &path, headers, body.map(str::as_bytes));
        let shown = &path[..path.len().min(60)];
        assert_eq!(a.status, want, "{method} {shown}: {}", a.text());
        let v = a.json();
        assert_eq!(v["type"], "error", "{method} {shown}: {}", a.text());
        let line = field(&v, "error");
        assert!(line.contains(words), "{method} {shown}: {line}");
        assert!(
            !line.contains('\n') && line.len() < 2100,
            "{method} {shown}: {line}"
        );
    }
    let a = request(
        server.addr,
        "POST",
        &format!("/api/runs/{run}/cancel"),
        &[("Content-Type", "text/plain")],
        Some(b"reason"),
    );
    assert_eq!(a.status, 415, "{}", a.text());
}

/// A run queued with `run --detach` (no process has taken it up) is `queued` in `ls`,
/// `ls --json`, `log`, `show` and the API, and verifies; a run whose driver was killed stays
/// `running` and is the one the API calls interrupted.
#[test]
fn a_queued_run_is_queued_and_an_interrupted_one_is_not() {
    use std::io::{BufRead, BufReader};
    let (dir, db) = scratch_db();
    let out = runtape(
        dir.path(),
        &db,
        &["run", "--detach", "examples/quickstart.toml"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let queued = String::from_utf8_lossy(&out.stdout).trim().to_owned();

    // A driver killed in the middle of a tool call leaves its run `running` under its lease.
    let spec = slow_tool_spec(dir.path(), 5.0);
    let mut driver = std::process::Command::new(support::serve::bin())
        .arg("run")
        .arg(&spec)
        .args(["--json", "--db"])
        .arg(&db)
        .current_dir(dir.path())
        .env_remove("RUNTAPE_DB")
        .env_remove("RUNTAPE_RECEIPT_KEY")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("starts");
    let mut lines = BufReader::new(driver.stdout.take().expect("stdout")).lines();
    let first: Value =
        serde_json::from_str(&lines.next().expect("a line").expect("reads")).expect("JSON");
    let killed = field(&first, "id").to_owned();
    for line in lines.by_ref() {
        let v: Value = serde_json::from_str(&line.expect("reads")).expect("JSON");
        if v["type"] == "tool.call" {
            break;
        }
    }
    driver.kill().expect("SIGKILL");
    driver.wait().expect("reaped");

    let ls = String::from_utf8_lossy(&runtape(dir.path(), &db, &["ls"]).stdout).into_owned();
    let row = |run: &str| {
        ls.lines()
            .find(|l| l.starts_with(run))
            .unwrap_or_else(|| panic!("{run} listed: {ls}"))
            .split_whitespace()
            .nth(1)
            .map(str::to_owned)
    };
    assert_eq!(row(&queued).as_deref(), Some("queued"), "{ls}");
    assert_eq!(row(&killed).as_deref(), Some("running"), "{ls}");
    let listed = json_lines(&runtape(dir.path(), &db, &["ls", "--json"]));
    let status_of = |run: &str| {
        listed
            .iter()
            .find(|v| v["id"] == json!(run))
            .map(|v| v["status"].clone())
    };
    assert_eq!(status_of(&queued), Some(json!("queued")));
    assert_eq!(status_of(&killed), Some(json!("running")));
    let log = runtape(dir.path(), &db, &["log", &queued]);
    assert!(
        String::from_utf8_lossy(&log.stdout).starts_with(&format!("run {queued} — queued — ")),
        "{}",
        String::from_utf8_lossy(&log.stdout)
    );
    let show =
        String::from_utf8_lossy(&runtape(dir.path(), &db, &["show", &queued]).stdout).into_owned();
    assert!(
        show.lines()
            .any(|l| l.starts_with("queued  no process has taken it up")),
        "{show}"
    );
    let verify = runtape(dir.path(), &db, &["verify", &queued]);
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stderr)
    );

    let server = serve(dir.path(), &db);
    let (_, one) = server.get(&format!("/api/runs/{queued}"));
    assert_eq!(one["status"], json!("queued"), "{one}");
    assert_eq!(one["interrupted"], json!(false), "{one}");
    let (_, one) = server.get(&format!("/api/runs/{killed}"));
    assert_eq!(one["status"], json!("running"), "{one}");
    assert_eq!(one["interrupted"], json!(true), "{one}");
    for (filter, run) in [("queued", &queued), ("interrupted", &killed)] {
        let (status, page) = server.get(&format!("/api/runs?status={filter}"));
        assert_eq!(status, 200, "{page}");
        assert_eq!(
            page["runs"].as_array().map(Vec::len),
            Some(1),
            "{filter}: {page}"
        );
        assert_eq!(page["runs"][0]["id"], json!(run), "{filter}: {page}");
    }
}

/// A run waiting for approval of `deploy` whose asking model turn lost its receipt seal: every
/// action the API offers on it is refused with `verify`'s line (409, as `resume` exits 1), and
/// nothing is written or deployed.
#[test]
fn every_action_on_a_run_verify_rejects_is_refused_and_writes_nothing() {
    let (dir, db) = scratch_db();
    let run = run_spec(dir.path(), &db, "examples/approval.toml");
    let conn = rusqlite::Connection::open(&db).expect("opens");
    let stripped = conn
        .execute(
            "UPDATE transitions SET seal = NULL WHERE id = (SELECT max(id) FROM transitions WHERE seal IS NOT NULL)",
            [],
        )
        .expect("strips the seal");
    assert_eq!(stripped, 1);
    drop(conn);
    let before = dump(&db);
    let server = Server::start(dir.path(), &db, &[], &[]);
    for (action, body) in [
        ("resume", json!({})),
        ("approve", json!({})),
        ("reject", json!({"reason": "no"})),
        ("answer", json!({"text": "yes"})),
        ("raise", json!({"raise": ["run.max_turns=99"]})),
        ("cancel", json!({})),
        ("fork", json!({"seq": 3})),
        ("fork", json!({"seq": 3, "tape": true})),
    ] {
        let (status, e) = server.post(&format!("/api/runs/{run}/{action}"), &body);
        let error = e["error"].as_str().unwrap_or_default();
        assert_eq!(status, 409, "{action}: {e}");
        assert!(
            error.contains(&format!(
                "run {run} does not verify: seq 3 (transitions.seal)"
            )),
            "{action}: {error}"
        );
        assert!(!error.contains('\n'), "{action}: one line: {error}");
    }
    server.stop();
    assert_eq!(dump(&db), before, "an action wrote to the database");
}

//! Integers JavaScript cannot hold exactly (beyond 2^53: event times `at`, which are
//! milliseconds shifted left by 16 bits, and anything as large) are strings in every JSON
//! output: every `--json` command and every API answer and event. The stored encodings keep
//! their numbers: the runs still verify, and a database written by runtape 0.1.0 still does
//! (`db_format_0_1_0.rs`).

use crate::support;

use std::time::Duration;

use crate::support::cli::utf8;
use serde_json::{Value, json};
use support::serve::{Stream, request, run_spec, runtape, scratch_db, serving_runs};

const MAX_EXACT: u64 = 1 << 53;

/// JSON pointers of the integers beyond 2^53 that `v` holds as numbers.
fn big_numbers(v: &Value, path: &str, out: &mut Vec<String>) {
    match v {
        Value::Number(n)
            if n.as_u64().is_some_and(|u| u > MAX_EXACT)
                || n.as_i64().is_some_and(|i| i.unsigned_abs() > MAX_EXACT) =>
        {
            out.push(format!("{path} = {n}"));
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                big_numbers(x, &format!("{path}/{i}"), out);
            }
        }
        Value::Object(o) => {
            for (k, x) in o {
                big_numbers(x, &format!("{path}/{k}"), out);
            }
        }
        _ => {}
    }
}

/// Checks every JSON line of `text`; returns how many lines were JSON.
fn check_lines(what: &str, text: &str) -> usize {
    let mut n = 0;
    for line in text
        .lines()
        .filter(|l| l.starts_with('{') || l.starts_with('['))
    {
        let v: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {line}"));
        let mut big = Vec::new();
        big_numbers(&v, "", &mut big);
        assert!(
            big.is_empty(),
            "{what} writes integers beyond 2^53 as numbers: {big:?}"
        );
        n += 1;
    }
    n
}

/// A timestamp field that is a string holding a number beyond 2^53 was seen.
fn has_big_string(text: &str) -> bool {
    text.split('"')
        .filter_map(|s| s.parse::<u64>().ok())
        .any(|n| n > MAX_EXACT)
}

#[test]
fn every_json_command_writes_big_integers_as_strings() {
    let (dir, db) = scratch_db();
    let d = dir.path();
    let out = |args: &[&str]| {
        let o = runtape(d, &db, args);
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        let lines = check_lines(&args.join(" "), &text);
        assert!(
            lines > 0,
            "`{}` printed no JSON: {text}\n{}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr)
        );
        text
    };
    let first = out(&["run", "examples/quickstart.toml", "--json"]);
    assert!(
        has_big_string(&first),
        "trace events carry their `at` as a string: {first}"
    );
    let run =
        serde_json::from_str::<Value>(first.lines().next().expect("a line")).expect("json")["id"]
            .as_str()
            .expect("id")
            .to_owned();
    let waiting = run_spec(d, &db, "examples/approval.toml");
    out(&["resume", &waiting, "--approve", "--json"]);
    let forked = out(&[
        "fork",
        &format!("{run}@1"),
        "--edit",
        "user=Count 'a b'.",
        "--json",
    ]);
    let fork =
        serde_json::from_str::<Value>(forked.lines().next().expect("line")).expect("json")["id"]
            .as_str()
            .expect("id")
            .to_owned();
    out(&["ls", "--json"]);
    let log = out(&["log", &run, "--json"]);
    assert!(has_big_string(&log));
    for seq in 1..=8 {
        out(&["show", &format!("{run}@{seq}"), "--json"]);
    }
    out(&["diff", &run, &fork, "--json"]);
    out(&["verify", &run, "--json"]);
    let cassette = d.join("q.cassette.json");
    let c = runtape(d, &db, &["cassette", "export", &run, "-o", utf8(&cassette)]);
    assert!(c.status.success());
    out(&[
        "replay",
        "examples/quickstart.toml",
        "--cassette",
        utf8(&cassette),
        "--json",
    ]);
    let c2 = d.join("f.cassette.json");
    runtape(d, &db, &["cassette", "export", &fork, "-o", utf8(&c2)]);
    out(&[
        "cassette",
        "diff",
        cassette.to_str().expect("p"),
        c2.to_str().expect("p"),
        "--json",
    ]);
    let receipts = d.join("r.jsonl");
    runtape(
        d,
        &db,
        &[
            "receipts",
            "export",
            &run,
            "-o",
            receipts.to_str().expect("p"),
        ],
    );
    out(&[
        "receipts",
        "verify",
        receipts.to_str().expect("p"),
        "--json",
    ]);
    out(&["tools", "examples/quickstart.toml", "--json"]);
    out(&["bench", "--quick", "--only", "raw", "--json"]);
    // The stored history kept its numbers: it still verifies.
    assert!(runtape(d, &db, &["verify", &run]).status.success());
}

#[test]
fn every_api_answer_and_event_writes_big_integers_as_strings() {
    let (_dir, _db, [run, waiting], server) =
        serving_runs(["examples/quickstart.toml", "examples/approval.toml"]);
    let check = |what: &str, body: &str| {
        assert_eq!(check_lines(what, body), 1, "{what}: {body}");
    };
    let mut gets = vec![
        "/api/info".to_owned(),
        "/api/runs".into(),
        format!("/api/runs/{run}"),
        format!("/api/runs/{run}/timeline?limit=1000"),
        format!("/api/runs/{run}/receipts"),
        format!("/api/runs/{run}/verify"),
        format!("/api/diff?a={run}&b={waiting}"),
        "/openapi.json".into(),
    ];
    for seq in 0..=8 {
        gets.push(format!("/api/runs/{run}/steps/{seq}"));
    }
    let mut saw_big_string = false;
    for path in &gets {
        let a = request(server.addr, "GET", path, &[], None);
        assert_eq!(a.status, 200, "{path}: {}", a.text());
        check(path, &a.text().replace('\n', " "));
        saw_big_string |= has_big_string(&a.text());
    }
    assert!(saw_big_string, "event times are there, as strings");
    let (status, r) = server.post(&format!("/api/runs/{waiting}/approve"), &json!({}));
    assert_eq!(status, 202);
    check("approve", &r.to_string());
    let (_, f) = server.post(&format!("/api/runs/{run}/fork"), &json!({"seq": 1}));
    check("fork", &f.to_string());
    server.wait_run(&waiting, Duration::from_secs(60), |r| {
        r["status"] == "completed"
    });
    let mut s = Stream::open(server.addr, &format!("/api/runs/{waiting}/events"), &[]);
    let (_, events) = s.until("step 8", |e| e.id.as_deref() == Some("8"));
    for e in &events {
        check(&format!("event {:?}", e.id), &e.data);
    }
    assert!(events.iter().any(|e| has_big_string(&e.data)));
}

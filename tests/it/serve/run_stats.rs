//! `runtape serve`'s aggregate views over real runs in a SQLite file: runs per status over
//! time, cost and tokens per agent and model, failures by reason and step durations per
//! kind each add up to what the runs are.

use serde_json::{Value, json};

use crate::support::many_runs::generate;
use crate::support::serve::{scratch_db, serve};

const RUNS: u64 = 40;

fn num(v: &Value) -> u64 {
    v.as_u64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .expect("a number")
}

#[test]
fn the_aggregates_add_up_to_the_runs() {
    let (dir, db) = scratch_db();
    tokio::runtime::Runtime::new()
        .expect("runtime")
        .block_on(generate(&db, RUNS as usize, 20));
    let server = serve(dir.path(), &db);
    let failed = |i: u64| i.is_multiple_of(7);

    let (status, by_status) = server.get("/api/stats/status?bucket=day");
    assert_eq!(status, 200, "{by_status}");
    assert_eq!(by_status["bucket_ms"], json!(86_400_000));
    let count = |s: &str| -> u64 {
        by_status["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .filter(|r| r["status"] == s)
            .map(|r| num(&r["runs"]))
            .sum()
    };
    let failures = (0..RUNS).filter(|i| failed(*i)).count() as u64;
    assert_eq!(count("failed"), failures, "{by_status}");
    assert_eq!(count("completed"), RUNS - failures, "{by_status}");
    let (_, later) = server.get("/api/stats/status?since=99999999999999");
    assert_eq!(later["rows"], json!([]), "nothing was created after then");

    let (_, spend) = server.get("/api/stats/spend");
    for (agent, even) in [("planner", 0), ("writer", 1)] {
        let mine: Vec<u64> = (0..RUNS).filter(|i| i % 2 == even).collect();
        let cost: u64 = mine
            .iter()
            .filter(|i| !failed(**i))
            .map(|i| (i % 5) * 1_000_000)
            .sum();
        let tokens: u64 = mine
            .iter()
            .filter(|i| !failed(**i))
            .map(|i| (i % 5) * 100 + 1)
            .sum();
        let row = spend["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .find(|r| r["agent"] == agent)
            .unwrap_or_else(|| panic!("{agent} in {spend}"));
        assert_eq!(row["model"], json!("p/m"));
        assert_eq!(num(&row["runs"]), mine.len() as u64);
        assert_eq!(num(&row["cost_nanos"]), cost, "{agent}");
        assert_eq!(num(&row["tokens"]), tokens, "{agent}");
    }

    let (_, failures_view) = server.get("/api/stats/failures");
    assert_eq!(
        failures_view["rows"],
        json!([{
            "class": "bad_request",
            "runs": failures,
            "example": "bad_request: agent writer: every model route failed; last: p: this goal is refused"
        }]),
        "the newest failed run is run 35, a writer: {failures_view}"
    );

    let (_, steps) = server.get("/api/stats/steps?runs=1000");
    let rows = steps["rows"].as_array().expect("rows");
    let replied = rows
        .iter()
        .find(|r| r["kind"] == "model_replied")
        .unwrap_or_else(|| panic!("model_replied in {steps}"));
    assert_eq!(num(&replied["steps"]), RUNS - failures);
    for r in rows {
        assert!(num(&r["p50_ms"]) <= num(&r["p95_ms"]), "{r}");
    }

    for (path, words) in [
        ("/api/stats/status?bucket=week", "bucket `week`"),
        ("/api/stats/steps?runs=0", "runs `0`"),
        ("/api/stats/spend?color=red", "query string"),
    ] {
        let (status, body) = server.get(path);
        assert_eq!(status, 400, "{path}: {body}");
        assert!(
            body["error"].as_str().is_some_and(|e| e.contains(words)),
            "{path}: {body}"
        );
    }
}

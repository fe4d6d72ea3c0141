//! `runtape serve` shows experiments: `GET /api/experiments` lists the reports `runtape eval`
//! wrote into `--experiments DIR` (other JSON files there are skipped), `GET
//! /api/experiments/{id}` answers one report whole, an unknown id is a 404, and the page's
//! script for them is served.

use super::{echo_dataset, echo_spec, eval_ok, s};
use crate::support::cli::{temp_db, write};
use crate::support::serve::{Server, request};

#[test]
fn the_server_lists_and_serves_the_reports_eval_wrote() {
    let (dir, db) = temp_db();
    let d = dir.path();
    let reports = d.join("reports");
    std::fs::create_dir(&reports).unwrap();
    let wrong = super::fixed_spec(d, "wrong.toml", "no");
    let report = eval_ok(
        &db,
        &[
            s(&echo_spec(d)),
            "--dataset",
            s(&echo_dataset(d)),
            "--variant",
            &format!("wrong={}", s(&wrong)),
            "--out",
            s(&reports.join("first.json")),
        ],
    );
    write(&reports, "other.json", "{\"type\":\"something else\"}");
    write(&reports, "broken.json", "{\"type\":\"eval.report\"");
    let id = report["experiment"].as_str().unwrap().to_owned();

    let server = Server::start(d, &db, &["--experiments", s(&reports)], &[]);
    let (status, listed) = server.get("/api/experiments");
    assert_eq!(status, 200, "{listed}");
    let all = listed["experiments"].as_array().unwrap();
    assert_eq!(all.len(), 1, "only the report is listed: {listed}");
    assert_eq!(all[0]["experiment"], id.as_str());
    assert_eq!(all[0]["file"], "first.json");
    assert_eq!(all[0]["variants"][0]["name"], "base");
    assert_eq!(all[0]["variants"][0]["score"], 1.0);
    assert_eq!(all[0]["variants"][1]["score"], 0.0);

    let (status, one) = server.get(&format!("/api/experiments/{id}"));
    assert_eq!(status, 200, "{one}");
    assert_eq!(
        one,
        report
            .as_object()
            .map(|o| {
                let mut o = o.clone();
                o.remove("file");
                o.remove("regressions");
                serde_json::Value::Object(o)
            })
            .unwrap(),
        "the report as eval wrote it"
    );
    // Each result links to its run, which the server knows.
    let link = one["items"][0]["results"]["wrong"]["ui"].as_str().unwrap();
    let run = link.strip_prefix("#/run/").unwrap();
    let (status, shown) = server.get(&format!("/api/runs/{run}"));
    assert_eq!(status, 200, "{shown}");

    let (status, missing) = server.get("/api/experiments/01nothere");
    assert_eq!(status, 404, "{missing}");
    let script = request(server.addr, "GET", "/experiments.js", &[], None);
    assert!(
        script.text().contains("function experimentsPage"),
        "the page's script"
    );
    let index = request(server.addr, "GET", "/", &[], None);
    assert!(
        index.text().contains("/experiments.js"),
        "the page loads it"
    );
}

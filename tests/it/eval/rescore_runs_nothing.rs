//! `runtape eval rescore REPORT --scorers FILE` scores a finished experiment again from the
//! answers its runs recorded: the model (an OpenAI-compatible server on 127.0.0.1 counting
//! requests) is not called again, no run is added, the new scorer's scores join the old
//! ones. A run that no longer verifies is refused before anything is scored.

use super::{eval_ok, result, s, variant};
use crate::support::cli::{err, ok, runtape, temp_db, write};
use crate::support::provider::{Behaviour, MockServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rescoring_calls_no_model_and_adds_the_new_scores() {
    let server = MockServer::always(Behaviour::json(
        200,
        r#"{"choices":[{"index":0,"message":{"content":"reply-7f3a"},"finish_reason":"stop"}]}"#,
    ))
    .await;
    let (dir, db) = temp_db();
    let d = dir.path().to_owned();
    let spec = write(
        &d,
        "http.toml",
        &format!(
            "[[providers]]\nname = \"local\"\nkind = \"openai\"\nmodel = \"m\"\nbase_url = \"{}/v1\"\napi_key_env = \"\"\nstream = false\n\
             [[agents]]\nid = \"a\"\nprovider = \"local\"\ntools = []\n",
            server.url()
        ),
    );
    let dataset = write(
        &d,
        "goals.jsonl",
        "{\"id\":\"a\",\"goal\":\"say it\",\"expected\":\"reply-7f3a\"}\n{\"id\":\"b\",\"goal\":\"say no\",\"expected\":\"no\"}\n",
    );
    let report_path = d.join("report.json");
    let (db2, d2) = (db.clone(), d.clone());
    let report = tokio::task::spawn_blocking(move || {
        eval_ok(
            &db2,
            &[
                s(&d2.join("http.toml")),
                "--dataset",
                s(&d2.join("goals.jsonl")),
                "--out",
                s(&d2.join("report.json")),
            ],
        )
    })
    .await
    .unwrap();
    assert!(spec.exists() && dataset.exists());
    assert_eq!(variant(&report, "base")["scores"]["exact"], 0.5, "{report}");
    let calls = server.requests().len();
    assert_eq!(calls, 2, "one model call per item");
    let runs_before = ok(&db, &["ls", "--json"]);

    let scorers = write(
        &d,
        "more.toml",
        "[[scorers]]\nname = \"replies\"\nkind = \"regex\"\npattern = \"^reply-\"\n",
    );
    let (db2, d2) = (db.clone(), d.clone());
    let rescored = tokio::task::spawn_blocking(move || {
        eval_ok(
            &db2,
            &[
                "rescore",
                s(&d2.join("report.json")),
                "--scorers",
                s(&d2.join("more.toml")),
            ],
        )
    })
    .await
    .unwrap();
    assert_eq!(server.requests().len(), calls, "rescoring called no model");
    assert_eq!(
        ok(&db, &["ls", "--json"]),
        runs_before,
        "rescoring made no run"
    );
    assert_eq!(rescored["experiment"], report["experiment"]);
    assert_eq!(
        result(&rescored, "a", "base")["run"],
        result(&report, "a", "base")["run"]
    );
    let base = variant(&rescored, "base");
    assert_eq!(
        base["scores"]["exact"], 0.5,
        "the old scores are kept: {rescored}"
    );
    assert_eq!(
        base["scores"]["replies"], 1.0,
        "the new scorer scored the recorded answers"
    );
    assert_eq!(
        result(&rescored, "b", "base")["scores"]["replies"]["score"],
        1.0
    );
    let on_disk: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report_path).unwrap()).unwrap();
    assert_eq!(
        on_disk["scorers"].as_array().unwrap().len(),
        2,
        "written over REPORT"
    );

    // A recorded answer edited in the database: the run no longer verifies, and the rescore
    // is refused (exit 1) with the report left as it was.
    let conn = rusqlite::Connection::open(&db).unwrap();
    let changed = conn
        .execute(
            "UPDATE blobs SET bytes = substr(bytes, 1, instr(bytes, CAST('reply-7f3a' AS BLOB)) - 1) \
             || CAST('reply-XXXX' AS BLOB) || substr(bytes, instr(bytes, CAST('reply-7f3a' AS BLOB)) + 10) \
             WHERE instr(bytes, CAST('reply-7f3a' AS BLOB)) > 0",
            [],
        )
        .unwrap();
    assert!(changed > 0, "a stored reply was edited");
    drop(conn);
    let before = std::fs::read(&report_path).unwrap();
    let o = runtape(
        &db,
        &["eval", "rescore", s(&report_path), "--scorers", s(&scorers)],
    );
    assert_eq!(o.status.code(), Some(1), "{}", err(&o));
    assert!(err(&o).contains("does not verify"), "{}", err(&o));
    assert_eq!(
        std::fs::read(&report_path).unwrap(),
        before,
        "the report is unchanged"
    );
    assert_eq!(server.requests().len(), calls);
}

//! Each kind of scorer on real runs: `exact` against the item's `expected`, `regex`,
//! `json_schema`, a `command` given the run as JSON on stdin, and a `judge` run as a recorded
//! run of its own (tagged, verifiable) whose answer is read as a score.

use super::{echo_dataset, echo_spec, eval_ok, result, s, variant};
use crate::support::cli::{ok, temp_db, write};

#[test]
fn every_kind_of_scorer_scores_the_recorded_answers() {
    let (dir, db) = temp_db();
    let d = dir.path();
    let spec = echo_spec(d);
    let dataset = echo_dataset(d);
    let json_spec = super::fixed_spec(d, "json.toml", "{\"city\": \"Paris\"}");
    // The command scorer passes answers whose item has metadata `lang` (only `three`), and
    // says why in a note; it sees the goal, the answer and the status.
    write(
        d,
        "lang.sh",
        "input=$(cat)\ncase \"$input\" in\n  *'\"lang\":\"en\"'*'\"status\":\"completed\"'*|*'\"status\":\"completed\"'*'\"lang\":\"en\"'*) echo '{\"score\": 1, \"note\": \"has lang\"}' ;;\n  *'\"answer\":\"echo: '*) echo 0.25 ;;\n  *) echo 0 ;;\nesac\n",
    );
    let judge = super::fixed_spec(d, "judge.toml", "Score: 0.5, half right");
    let scorers = write(
        d,
        "scorers.toml",
        &format!(
            "[[scorers]]\nkind = \"exact\"\n\
             [[scorers]]\nname = \"echoes\"\nkind = \"regex\"\npattern = \"^echo: t\"\n\
             [[scorers]]\nname = \"shape\"\nkind = \"json_schema\"\nschema = {{ type = \"object\", required = [\"city\"] }}\n\
             [[scorers]]\nname = \"lang\"\nkind = \"command\"\ncommand = [\"sh\", \"lang.sh\"]\n\
             [[scorers]]\nname = \"judge\"\nkind = \"judge\"\nspec = \"{}\"\n",
            judge.file_name().unwrap().to_str().unwrap()
        ),
    );
    let report = eval_ok(
        &db,
        &[
            s(&spec),
            "--dataset",
            s(&dataset),
            "--variant",
            &format!("json={}", s(&json_spec)),
            "--scorers",
            s(&scorers),
            "--out",
            s(&d.join("r.json")),
        ],
    );

    let one = &result(&report, "one", "base")["scores"];
    assert_eq!(one["exact"]["score"], 1.0, "echo: one == expected: {one}");
    assert_eq!(
        one["echoes"]["score"], 0.0,
        "`echo: one` does not match ^echo: t"
    );
    assert_eq!(one["shape"]["score"], 0.0);
    assert_eq!(one["shape"]["note"], "the answer is not JSON");
    assert_eq!(
        one["lang"]["score"], 0.25,
        "the command saw the answer: {one}"
    );
    assert_eq!(one["judge"]["score"], 0.5, "the judge's 0.5: {one}");
    let three = &result(&report, "three", "base")["scores"];
    assert_eq!(three["echoes"]["score"], 1.0);
    assert_eq!(
        three["lang"]["score"], 1.0,
        "the command saw the metadata: {three}"
    );
    assert_eq!(three["lang"]["note"], "has lang");
    let json_one = &result(&report, "one", "json")["scores"];
    assert_eq!(json_one["exact"]["score"], 0.0);
    assert_eq!(json_one["shape"]["score"], 1.0, "{json_one}");
    assert_eq!(json_one["lang"]["score"], 0.0);

    let base = variant(&report, "base");
    assert_eq!(base["scores"]["exact"], 1.0);
    assert_eq!(base["completed"], 3);
    assert!((base["scores"]["echoes"].as_f64().unwrap() - 2.0 / 3.0).abs() < 1e-9);
    assert_eq!(variant(&report, "json")["scores"]["shape"], 1.0);

    // The judge ran as a run of its own per scored run: tagged, recorded, verifiable.
    let judge_run = one["judge"]["judge_run"].as_str().expect("the judge's run");
    let judged = ok(&db, &["ls", "--tag", "scorer=judge", "--json"]);
    assert_eq!(
        judged.lines().count(),
        6,
        "one judge run per (item, variant): {judged}"
    );
    let shown: serde_json::Value =
        serde_json::from_str(&ok(&db, &["show", judge_run, "--json"])).unwrap();
    let tags = &shown["tags"];
    assert_eq!(tags["experiment"], report["experiment"], "{shown}");
    assert_eq!(
        (tags["item"].as_str(), tags["variant"].as_str()),
        (Some("one"), Some("base"))
    );
    assert!(ok(&db, &["verify", judge_run]).starts_with("OK"));

    // Every item's run under every variant is recorded and tagged with the experiment.
    let experiment = format!("experiment={}", report["experiment"].as_str().unwrap());
    let all = ok(&db, &["ls", "--tag", &experiment, "--json"]);
    assert_eq!(all.lines().count(), 12, "6 runs and 6 judge runs: {all}");
    let run = result(&report, "two", "json")["run"]
        .as_str()
        .unwrap()
        .to_owned();
    let shown: serde_json::Value =
        serde_json::from_str(&ok(&db, &["show", &run, "--json"])).unwrap();
    assert_eq!(shown["tags"]["variant"], "json");
    assert_eq!(shown["tags"]["item"], "two");
    assert_eq!(result(&report, "two", "json")["ui"], format!("#/run/{run}"));
    // Its cassette exports like any run's.
    ok(
        &db,
        &[
            "cassette",
            "export",
            &run,
            "-o",
            s(&d.join("two.cassette.json")),
        ],
    );
}

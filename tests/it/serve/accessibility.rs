//! The page is usable without sight and without a mouse, as axe-core checks it: every view —
//! the runs list with its filters and the start form, the stats, the schedules, a run with its
//! timeline, statechart, inspector and fork form, a message after an action, an approval
//! waiting under a deadline with its inputs, a sleeping run, a compensated saga, two runs
//! compared, the experiments and one experiment's variants side by side, and the token form — has no serious or critical axe violation (contrast of every
//! text at 4.5:1 included), in Debian's Chromium with the page's CSP kept. A failure lists each
//! violation: the view, the rule, and the elements.
//!
//! Needs `/usr/bin/chromium` and the pinned playwright-core and axe-core
//! (`tests/extras/install.sh browser`); `.ci/run` installs them.

use crate::support::browser::{chromium, timed_runs};
use crate::support::serve::{Server, runtape, scratch_db, serve};

#[test]
#[ignore = "needs Chromium, playwright-core and axe-core: tests/extras/install.sh browser"]
fn every_view_passes_axe_in_chromium() {
    let browser = chromium();
    let (dir, db) = scratch_db();
    let mut runs = timed_runs(dir.path(), &db);
    // An experiment of two variants, its report where serve looks for reports (its directory).
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/eval");
    let arg = |name: &str| examples.join(name).display().to_string();
    let eval = runtape(
        dir.path(),
        &db,
        &[
            "eval",
            &arg("paris.toml"),
            "--dataset",
            &arg("goals.jsonl"),
            "--variant",
            &format!("echo={}", arg("echo.toml")),
            "--out",
            "experiment.json",
        ],
    );
    assert!(
        eval.status.success(),
        "{}",
        String::from_utf8_lossy(&eval.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.path().join("experiment.json")).expect("the report"),
    )
    .expect("the report is JSON");
    runs["experiment"] = report["experiment"].clone();
    let server = serve(dir.path(), &db);
    // The same database behind a token: the page asks for it.
    let locked = Server::start(
        dir.path(),
        &db,
        &[],
        &[("RUNTAPE_SERVE_TOKEN", "a-token-for-the-test")],
    );
    runs["login"] = serde_json::Value::String(locked.url.clone());
    let found = browser.drive_ok("axe.mjs", &server.url, &runs);
    eprintln!("axe-core in Chromium, per view: {found}");
    let views = found["views"].as_object().expect("views");
    for view in [
        "runs",
        "stats",
        "schedules",
        "run",
        "run-message",
        "approval",
        "sleeping",
        "saga",
        "compare",
        "experiments",
        "experiment",
        "login",
    ] {
        let by_impact = &views
            .get(view)
            .unwrap_or_else(|| panic!("{view} was checked: {found}"))["by_impact"];
        for impact in ["serious", "critical"] {
            assert!(by_impact.get(impact).is_none(), "{view}: {by_impact}");
        }
    }
}

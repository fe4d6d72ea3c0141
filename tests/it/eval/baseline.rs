//! `--baseline REPORT` for CI: exit 1 when a variant scores lower than in the baseline (beyond
//! `--tolerance`), naming what fell; exit 0 when nothing did. The new report is written either
//! way.

use super::{echo_dataset, echo_spec, eval, eval_ok, s};
use crate::support::cli::{err, temp_db};

#[test]
fn a_regression_against_the_baseline_exits_1() {
    let (dir, db) = temp_db();
    let d = dir.path();
    let dataset = echo_dataset(d);
    let good = d.join("good.json");
    let report = eval_ok(
        &db,
        &[
            s(&echo_spec(d)),
            "--dataset",
            s(&dataset),
            "--out",
            s(&good),
        ],
    );
    assert_eq!(super::variant(&report, "base")["score"], 1.0);

    // The same spec again: no regression.
    let again = d.join("again.json");
    let (o, _) = eval(
        &db,
        &[
            s(&echo_spec(d)),
            "--dataset",
            s(&dataset),
            "--baseline",
            s(&good),
            "--out",
            s(&again),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));

    // A model that gets one item of three right: a regression of the base variant.
    let worse_spec = super::fixed_spec(d, "worse.toml", "echo: one");
    let worse = d.join("worse.json");
    let (o, printed) = eval(
        &db,
        &[
            s(&worse_spec),
            "--dataset",
            s(&dataset),
            "--baseline",
            s(&good),
            "--out",
            s(&worse),
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", err(&o));
    let e = err(&o);
    assert!(
        e.contains("regression: base exact fell from 1.000 to 0.333"),
        "{e}"
    );
    let printed = printed.expect("the report is printed");
    let regressions = printed["regressions"].as_array().unwrap();
    assert!(
        regressions
            .iter()
            .any(|r| r["measure"] == "score" && r["variant"] == "base"),
        "{printed}"
    );
    assert!(worse.exists(), "the report is written even on a regression");

    // Within the tolerance, no regression.
    let (o, _) = eval(
        &db,
        &[
            s(&worse_spec),
            "--dataset",
            s(&dataset),
            "--baseline",
            s(&good),
            "--tolerance",
            "0.7",
            "--out",
            s(&d.join("tolerated.json")),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
}

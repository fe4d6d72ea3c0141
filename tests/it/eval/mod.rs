//! `runtape eval`: a dataset run under variants of a spec, every run recorded and tagged, each
//! answer scored, the report compared with a baseline and scored again without running.

mod baseline;
mod concurrency;
mod dataset_errors;
mod experiments_api;
mod rescore_runs_nothing;
mod scorers;
mod stopped;

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::support::cli::{err, runtape, write};

/// A spec whose one agent repeats the goal (`echo: GOAL`), offline.
pub(crate) fn echo_spec(dir: &Path) -> PathBuf {
    write(
        dir,
        "echo.toml",
        "[[providers]]\nname = \"e\"\nkind = \"echo\"\n[[agents]]\nid = \"a\"\nprovider = \"e\"\ntools = []\n",
    )
}

/// A spec whose one agent answers `text` to every goal, offline.
pub(crate) fn fixed_spec(dir: &Path, name: &str, text: &str) -> PathBuf {
    write(
        dir,
        name,
        &format!(
            "[[providers]]\nname = \"s\"\nkind = \"scripted\"\nreplies = [{{ text = {text:?} }}]\n[[agents]]\nid = \"a\"\nprovider = \"s\"\ntools = []\n"
        ),
    )
}

/// Three goals, each expecting what the echo model answers to it: `echo: one`, ….
pub(crate) fn echo_dataset(dir: &Path) -> PathBuf {
    write(
        dir,
        "goals.jsonl",
        "{\"id\":\"one\",\"goal\":\"one\",\"expected\":\"echo: one\"}\n{\"id\":\"two\",\"goal\":\"two\",\"expected\":\"echo: two\"}\n{\"id\":\"three\",\"goal\":\"three\",\"expected\":\"echo: three\",\"lang\":\"en\"}\n",
    )
}

/// `runtape eval ARGS… --json` on `db`: its output and, when it wrote one, the report it printed.
pub(crate) fn eval(db: &Path, args: &[&str]) -> (Output, Option<Value>) {
    let mut all = vec!["eval"];
    all.extend_from_slice(args);
    all.push("--json");
    let out = runtape(db, &all);
    let report = serde_json::from_slice(&out.stdout).ok();
    (out, report)
}

/// [`eval`] that must exit 0.
pub(crate) fn eval_ok(db: &Path, args: &[&str]) -> Value {
    let (out, report) = eval(db, args);
    assert_eq!(out.status.code(), Some(0), "{}", err(&out));
    report.expect("the report on stdout")
}

/// The summary of `variant` in `report`.
pub(crate) fn variant<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["variants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == name)
        .unwrap_or_else(|| panic!("no variant {name} in {report}"))
}

/// The result of item `item` under `variant`.
pub(crate) fn result<'a>(report: &'a Value, item: &str, variant: &str) -> &'a Value {
    let item = report["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["id"] == item)
        .unwrap_or_else(|| panic!("no item {item} in {report}"));
    &item["results"][variant]
}

/// A path as the `&str` the command line takes.
pub(crate) fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

//! Sessions on the command line (revision 5): `runtape sessions`, `runtape log --session S`,
//! and what `show` says about a session run's history and a turn's retrieved passages.

use std::path::Path;

use serde_json::json;

use super::common::{CliError, age, cost_text, json_u64, open_existing, outln, print_json};
use crate::clock::wall_ms;
use crate::history;
use crate::machine::{EventBody, Retrieval, SessionSpec, Summaries, session::is_valid_name};
use crate::ops::RunView;
use crate::store::{RunRecord, Store};

/// How `ls` shows a run's session after its goal: ` [trip-1 #3]`, ` [trip-1 #3, fork]`,
/// ` [trip-1 #3, replay]`; nothing for a run of no session.
pub(crate) fn suffix(r: &RunView) -> String {
    match (&r.session, r.session_index, r.session_kind) {
        (Some(name), Some(index), Some("run")) => format!(" [{name} #{index}]"),
        (Some(name), Some(index), Some(kind)) => format!(" [{name} #{index}, {kind}]"),
        _ => String::new(),
    }
}

/// `runtape sessions`: every session, with its run count and latest run.
pub(crate) fn list(db: &Path, json: bool) -> Result<(), CliError> {
    let store = open_existing(db)?;
    let sessions = store.sessions()?;
    if json {
        // One array, `[]` when there is none: a reader always gets one JSON document.
        let mut all = Vec::with_capacity(sessions.len());
        for s in &sessions {
            let latest = history::record(store.as_ref(), &s.latest)?;
            all.push(json!({
                "type": "session",
                "name": s.name,
                "runs": s.runs,
                "latest": s.latest,
                "latest_status": latest.status,
                "updated_ms": latest.updated_ms,
                "goal": latest.goal,
            }));
        }
        return print_json(&all);
    }
    if sessions.is_empty() {
        outln!(
            "no sessions in {} (start one with `runtape run SPEC \"…\" --session NAME`)",
            super::common::shown(db)
        );
        return Ok(());
    }
    let now = wall_ms();
    outln!(
        "{:<24}  {:>4}  {:<16}  {:<16}  {:>5}  LATEST GOAL",
        "SESSION",
        "RUNS",
        "LATEST",
        "STATUS",
        "AGE"
    );
    for s in &sessions {
        let latest = history::record(store.as_ref(), &s.latest)?;
        outln!(
            "{:<24}  {:>4}  {:<16}  {:<16}  {:>5}  {}",
            s.name,
            s.runs,
            s.latest.as_str(),
            latest.shown_status(),
            age(now, latest.updated_ms),
            goal_line(&latest)
        );
    }
    Ok(())
}

/// `runtape log --session S`: the session's runs in order.
pub(crate) fn log(db: &Path, name: &str, json: bool) -> Result<(), CliError> {
    if !is_valid_name(name) {
        return Err(CliError::usage(format!(
            "`{}` is not a session name: 1 to 128 letters, digits, `.`, `_` or `-`",
            crate::text::one_line(name, 80)
        )));
    }
    let store = open_existing(db)?;
    let runs = store.session_runs(name)?;
    if runs.is_empty() {
        return Err(CliError::usage(format!(
            "no session named `{name}`; `runtape sessions` lists the sessions in this database"
        )));
    }
    if !json {
        outln!("session {name} — {} runs", runs.len());
    }
    let now = wall_ms();
    for (index, run) in &runs {
        let rec = history::record(store.as_ref(), run)?;
        let previous = previous_of(store.as_ref(), &rec);
        if json {
            print_json(&json!({
                "type": "session_run",
                "session": name,
                "index": index,
                "run": run,
                "status": rec.shown_status(),
                "steps": rec.seq,
                "cost_nanos": json_u64(rec.cost_nanos),
                "cost_known": rec.unpriced_turns == 0,
                "created_ms": rec.created_ms,
                "updated_ms": rec.updated_ms,
                "previous": previous,
                "goal": rec.goal,
            }))?;
            continue;
        }
        let from = previous
            .map(|p| format!(" (goes on from {p})"))
            .unwrap_or_default();
        outln!(
            "{:>4}  {:<16}  {:<16}  {:>6} steps  {:>16}  {:>5}  {}{from}",
            format!("#{index}"),
            run.as_str(),
            rec.shown_status(),
            rec.seq,
            cost_text(rec.cost_nanos, rec.unpriced_turns),
            age(now, rec.updated_ms),
            goal_line(&rec)
        );
    }
    Ok(())
}

/// The run a session run goes on from, as its stored spec says.
fn previous_of(_store: &dyn Store, rec: &RunRecord) -> Option<String> {
    let spec = history::spec_of(rec).ok()?;
    let previous = spec.spec().session.as_ref()?.previous.clone()?;
    Some(previous.to_string())
}

fn goal_line(rec: &RunRecord) -> String {
    rec.goal.replace('\n', " ").chars().take(60).collect()
}

/// `show`: the run's place in its session (a fork has none: it keeps the history it was
/// forked from).
pub(crate) fn describe_place(s: &SessionSpec, forked: bool) {
    let from = s.previous.as_ref().map_or(
        "nothing (the session's first completed run)".to_owned(),
        |p| format!("run {p}"),
    );
    if s.replayed {
        outln!(
            "session replayed from a cassette of run {} of session {}, which went on from {from}; a replay is not a run of the session",
            s.index,
            s.name
        );
    } else if forked {
        outln!(
            "session forked from run {} of session {}, which goes on from {from}; a fork is not a run of the session",
            s.index,
            s.name
        );
    } else {
        outln!("session {} run {} — goes on from {from}", s.name, s.index);
    }
}

/// `show`: what a session start carried and what a retrieval returned.
pub(crate) fn describe_event(body: &EventBody) {
    match body {
        EventBody::SessionStart { seed, .. } => {
            for (agent, carried) in &seed.agents {
                outln!(
                    "history {agent}: {} messages carried from run {} (kept as the window allows; the rest is summarised)",
                    carried.messages.len(),
                    seed.previous
                );
            }
        }
        EventBody::Retrieved { retrieval, .. } => match retrieval {
            Retrieval::Passages { passages } if passages.is_empty() => {
                outln!("passages none")
            }
            Retrieval::Passages { passages } => {
                for (i, p) in passages.iter().enumerate() {
                    let source = p
                        .source
                        .as_ref()
                        .map(|s| format!(" ({s})"))
                        .unwrap_or_default();
                    let text: String = p.text.replace('\n', " ").chars().take(100).collect();
                    outln!("passage [{}]{source} {text}", i + 1);
                }
            }
            Retrieval::Failed { error } => outln!("passages none: the retriever failed: {error}"),
        },
        _ => {}
    }
}

/// `show`: the summaries a session run is writing.
pub(crate) fn describe_summaries(summaries: &Summaries) {
    for (i, job) in summaries.jobs.iter().enumerate() {
        outln!(
            "summary {} of {agent}'s earlier conversation by {by}; {} messages kept after it{now}",
            i + 1,
            job.window.len(),
            agent = job.agent,
            by = job.by,
            now = if i == 0 { " (being written)" } else { "" }
        );
    }
}

//! Resuming a run, showing a step and listing its timeline make as many store reads on a run
//! of 400 transitions as on one of 200: a run's history is read from its nearest snapshot, and a
//! conversation in one read whatever its length ([`crate::store::Store::conversation_nodes`]),
//! not one read per message; and the last ten entries of the timeline (`log --tail 10`) read as
//! many transition rows on either, the last ten steps and a fixed lead-in, not the whole
//! history. Counted on the real in-memory store ([`super::counting::Counting`]); a database
//! store makes one query per read.

use std::fmt::Write as _;
use std::sync::Arc;

use super::super::{self as ops, Answer, Raise};
use super::counting::Counting;
use super::start_file;
use crate::exec::{Engine, EngineConfig};
use crate::machine::RunId;
use crate::store::{MemoryStore, RunStatus, Store};

/// A spec file whose agent makes `rounds` tool calls, runs out of turns and rests until its
/// budget is raised by one turn, which it answers with.
fn rounds_then_rest(rounds: usize) -> String {
    let mut replies = String::new();
    for i in 0..rounds {
        let _ = writeln!(
            replies,
            "  {{ text = \"Looking up {i}.\", tool_calls = [{{ name = \"echo\", arguments = {{ n = {i} }} }}] }},"
        );
    }
    format!(
        r#"
goal = "Look it up {rounds} times."
[run]
max_transitions = {cap}
[[providers]]
name = "s"
kind = "scripted"
replies = [
{replies}  {{ text = "done" }},
]
[[tools]]
name = "echo"
description = "Echo"
command = ["cat"]
read_only = true
idempotent = true
[[agents]]
id = "a"
provider = "s"
tools = ["echo"]
on_exhausted = "pause"
[agents.budget]
max_turns = {rounds}
max_tool_calls = {calls}
"#,
        cap = rounds * 3 + 50,
        calls = rounds + 10,
    )
}

/// Reads made by each operation on a run of `rounds` rounds.
#[derive(Debug, PartialEq, Eq)]
struct Reads {
    /// Transitions in the run as it rests (not compared: it is what differs).
    transitions: u64,
    /// `show RUN@1`.
    show_first: usize,
    /// `show` of the last four steps (one of them sends the model the whole conversation).
    show_latest: usize,
    /// Transition rows `show` of the last four steps read (the fold from the nearest
    /// snapshot, not from step 1).
    show_latest_rows: usize,
    /// `log`.
    log: usize,
    /// `log --tail 10`.
    log_tail: usize,
    /// Transition rows `log --tail 10` read.
    log_tail_rows: usize,
    /// `resume RUN --raise budget.max_turns=R+1`, to the end of the run.
    resume: usize,
    /// Transition rows that resume read (the checks before and under the lease fold from the
    /// nearest snapshot).
    resume_rows: usize,
    /// Whole run rows (with the setup, which holds every scripted reply and so grows with
    /// these runs) that resume read: those checked against the sealed head or built from.
    resume_setups: usize,
}

async fn reads_at(rounds: usize) -> Reads {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Counting::over(Arc::new(MemoryStore::new()));
    let engine = Engine::with_store(store.clone(), EngineConfig::default());
    let end = start_file(&engine, dir.path(), &rounds_then_rest(rounds))
        .await
        .wait()
        .await
        .expect("rests");
    assert_eq!(end.status, RunStatus::BudgetExhausted);
    let run: RunId = end.run_id;
    let latest = store.run(&run).expect("reads").expect("stored").seq;

    let counted = |f: &mut dyn FnMut()| {
        let before = store.reads();
        f();
        store.reads() - before
    };
    let show_first = counted(&mut || {
        ops::show(store.as_ref(), &run, Some(1)).expect("shows step 1");
    });
    let rows_before = store.rows();
    let show_latest = counted(&mut || {
        for seq in latest - 3..=latest {
            let step = ops::show(store.as_ref(), &run, Some(seq)).expect("shows");
            let _ = step;
        }
    });
    let show_latest_rows = store.rows() - rows_before;
    let log = counted(&mut || {
        let entries = ops::timeline(store.as_ref(), &run).expect("lists");
        assert_eq!(entries.len() as u64, latest);
    });

    let rows_before = store.rows();
    let mut tail = Vec::new();
    let log_tail = counted(&mut || {
        tail = ops::timeline_tail(store.as_ref(), &run, 10).expect("lists the tail");
    });
    let log_tail_rows = store.rows() - rows_before;
    let whole = ops::timeline(store.as_ref(), &run).expect("lists");
    assert_eq!(
        serde_json::to_value(&tail).expect("serialises"),
        serde_json::to_value(&whole[whole.len() - 10..]).expect("serialises"),
        "the tail is the timeline's last ten entries"
    );

    let raise = [Raise::parse(&format!("budget.max_turns={}", rounds + 1)).expect("a raise")];
    let (before, rows_before, setups_before) = (store.reads(), store.rows(), store.setups());
    let handle = ops::resume(&engine, &run, Answer::None, None, &raise)
        .await
        .expect("raises");
    assert_eq!(
        handle.wait().await.expect("ends").status,
        RunStatus::Completed
    );
    let resume = store.reads() - before;
    let resume_rows = store.rows() - rows_before;
    let resume_setups = store.setups() - setups_before;
    Reads {
        transitions: latest,
        show_first,
        show_latest,
        log,
        log_tail,
        log_tail_rows,
        show_latest_rows,
        resume,
        resume_rows,
        resume_setups,
    }
}

/// The check before a run is continued ([`crate::ledger::check_continuable`]) reads the newest
/// snapshot (one every [`crate::store::SNAPSHOT_EVERY`] steps) and folds the steps after it,
/// reading each one's message blobs: so the two runs (206 and 398 transitions: 3 and 6
/// snapshots) end the same number of steps past one, and only the history before it differs.
#[tokio::test]
async fn resume_show_and_log_read_the_store_as_often_on_a_long_run_as_on_a_short_one() {
    let short = reads_at(68).await;
    let long = reads_at(132).await;
    assert!(long.transitions >= 300, "{long:?}");
    assert_eq!(
        long.transitions % crate::store::SNAPSHOT_EVERY,
        short.transitions % crate::store::SNAPSHOT_EVERY,
        "{long:?} {short:?}"
    );
    assert!(short.transitions < 300, "{short:?}");
    // A resume's driver also polls its run (control requests, the lease) on a timer, so one
    // poll more or less may land in either run; reads that grew with the history would differ
    // by hundreds (246 against 54 before conversations were read in one walk).
    assert!(
        long.resume.abs_diff(short.resume) <= 2,
        "resume reads at {} transitions against {}: {long:?} {short:?}",
        long.transitions,
        short.transitions
    );
    // The driver's timed polls may land differently in the two runs, but none reads
    // transition rows: a resume reads as many on either.
    assert_eq!(
        long.resume_rows, short.resume_rows,
        "transition rows a resume read at {} transitions against {}: {long:?} {short:?}",
        long.transitions, short.transitions
    );
    // Reading a run's ancestry or tail reads its row without the setup; only the checks of
    // the row against its sealed head and the install read it whole.
    assert!(long.resume_setups <= 6, "{long:?}");
    assert_eq!(
        Reads {
            transitions: 0,
            resume: 0,
            resume_setups: 0,
            ..long
        },
        Reads {
            transitions: 0,
            resume: 0,
            resume_setups: 0,
            ..short
        },
        "reads at {} transitions against {}",
        long.transitions,
        short.transitions
    );
}

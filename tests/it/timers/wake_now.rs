//! A run asleep for an hour, its process killed: `ls` shows it sleeping with its wake time,
//! `resume` before the instant takes nothing up and says in one line when it wakes and how to
//! wake it now, and `runtape wake RUN` fires the sleep at once — a `timer_fired` step marked
//! early, stamped before the due instant, the model told a person woke it — which `verify`
//! accepts. A second `wake` finds no timer and writes nothing.

use runtape::machine::Hlc;

use crate::support::cli::{err, json_lines, out, runtape, text};

use super::{fired, killed_asleep, ms_of, show, steps, tool_result_seen};

#[test]
fn ls_resume_and_wake_of_a_run_asleep_for_an_hour() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (db, run, due) = killed_asleep(dir.path(), 3600);
    // The due instant as `ls` and `resume` print it (`2026-11-29 10:00:00.000Z`).
    let slept = runtape::machine::timer::woke_text(Hlc::from_ms(ms_of(due)));
    let wakes = slept
        .trim_start_matches("slept until ")
        .replacen('T', " ", 1);

    let ls = runtape(&db, &["ls"]);
    let row = out(&ls);
    assert!(row.contains("sleeping"), "{row}");
    assert!(row.contains(&format!("(wakes {wakes})")), "{row}");
    let listed = json_lines(&runtape(&db, &["ls", "--json"]));
    assert_eq!(listed[0]["sleeping"], true, "{}", listed[0]);
    assert_eq!(listed[0]["wakes_ms"].as_u64(), Some(ms_of(due)));

    let seq = steps(&db, &run).len();
    let early = runtape(&db, &["resume", &run]);
    assert_eq!(early.status.code(), Some(0), "{}", text(&early));
    let said = err(&early);
    assert_eq!(said.trim().lines().count(), 1, "one line: {said}");
    assert!(said.contains(&format!("sleeps until {wakes}")), "{said}");
    assert!(said.contains(&format!("runtape wake {run}")), "{said}");
    assert_eq!(steps(&db, &run).len(), seq, "resume took nothing up");

    let woke = runtape(&db, &["wake", &run]);
    assert_eq!(woke.status.code(), Some(0), "{}", text(&woke));
    let fired = fired(&db, &run);
    assert_eq!(fired.len(), 1, "fired once");
    let at = fired[0]["at_ms"].as_u64().expect("at_ms");
    assert!(at < ms_of(due), "fired early: {}", fired[0]);
    let fired_seq = fired[0]["seq"].as_u64().expect("seq");
    let step = show(&db, &run, fired_seq);
    assert!(
        step["event"].to_string().contains("\"early\":true"),
        "{}",
        step["event"]
    );
    let seen = tool_result_seen(&db, &run, fired_seq + 1);
    assert!(seen.starts_with("woken early at"), "{seen}");
    assert_eq!(steps(&db, &run).last().expect("steps")["to"], "done");
    let verified = runtape(&db, &["verify", &run]);
    assert!(verified.status.success(), "{}", text(&verified));

    let again = runtape(&db, &["wake", &run]);
    assert_ne!(again.status.code(), Some(0), "{}", text(&again));
    assert_eq!(err(&again).trim().lines().count(), 1, "{}", err(&again));
    assert_eq!(super::fired(&db, &run).len(), 1, "nothing more fired");
}

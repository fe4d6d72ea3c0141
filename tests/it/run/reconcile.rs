//! `on_in_doubt = "reconcile"` with real processes: a run is SIGKILLed while its non-idempotent
//! `charge` call is in flight; on resume the tool's `reconcile` command is asked, by the
//! call's idempotency key (and with its arguments on stdin), whether the call was performed.
//! Its answer is recorded in the history, then:
//!
//! - performed → the result it reports goes back to the model, nothing is charged again;
//! - not performed → the call is performed, with the same idempotency key;
//! - unknown → a person decides (`resume --approve | --reject | --input`).

use crate::support;
use crate::support::spec::{agent, scripted_as, tool};

use std::path::{Path, PathBuf};

use crate::support::cli::{temp_db, text, utf8, write};
use support::protocol::*;

/// The spec: the charge records its pid, waits while `slow` exists, then appends its key to
/// `charges.log`. The reconcile command records what it was asked, then answers from
/// `charges.log` — or `{"performed": null}` when `unknown` exists.
fn spec(dir: &Path) -> PathBuf {
    let charge = r#"["sh", "-c", "echo $$ > tool.pid; while [ -e slow ]; do sleep 0.05; done; echo \"$RUNTAPE_IDEMPOTENCY_KEY\" >> charges.log; echo charged"]"#;
    let reconcile = r#"reconcile = ["sh", "-c", "printf '%s %s\n' \"$RUNTAPE_IDEMPOTENCY_KEY\" \"$(cat)\" >> reconcile.log; if [ -e unknown ]; then echo '{\"performed\": null}'; elif grep -qx \"$RUNTAPE_IDEMPOTENCY_KEY\" charges.log 2>/dev/null; then echo '{\"performed\": true, \"result\": \"charged (confirmed by reconcile)\"}'; else echo '{\"performed\": false}'; fi"]"#;
    let text = [
        "goal = \"charge the card\"\n",
        &scripted_as(
            "s",
            r#"{ tool_calls = [{ name = "charge", arguments = { amount = 5 }, id = "c0" }] }, { text = "done" }"#,
        ),
        &tool(
            "charge",
            charge,
            &format!("description = \"charge the card\"\n{reconcile}"),
        ),
        &agent("a", "s", &["charge"], "on_in_doubt = \"reconcile\""),
    ]
    .concat();
    write(dir, "reconcile.toml", &text)
}

/// In a fresh directory and database, starts the run with `slow` present, waits until the
/// charge is in flight, and SIGKILLs runtape. With `performed`, the charge is then let finish
/// (its key is recorded); without, the charge's process is killed before it could record
/// anything. Returns the directory, the database and the run.
fn killed_mid_charge(performed: bool) -> (tempfile::TempDir, PathBuf, String) {
    let (tmp, db) = temp_db();
    let (dir, db) = (tmp.path(), db.as_path());
    std::fs::write(dir.join("slow"), "").expect("writes");
    let mut bg = start(db, &spec(dir), &[]);
    wait_until("the charge is in flight", || dir.join("tool.pid").exists());
    bg.child.kill().expect("SIGKILL");
    let _ = bg.child.wait();
    let pid = std::fs::read_to_string(dir.join("tool.pid")).expect("pid");
    if performed {
        std::fs::remove_file(dir.join("slow")).expect("rm");
        wait_until("the orphaned charge completes", || charge_lines(dir) == 1);
    } else {
        signal(pid.trim().parse().expect("a pid"), "KILL");
        std::fs::remove_file(dir.join("slow")).expect("rm");
    }
    assert_eq!(run_row(db, &bg.run).state_kind, "calling_tools");
    (tmp, db.to_owned(), bg.run)
}

/// What the reconcile command was asked: one `KEY ARGS` line per question.
fn questions(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("reconcile.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn performed_its_reported_result_goes_to_the_model_and_nothing_is_charged_again() {
    let (dir, db, run) = killed_mid_charge(true);
    let o = runtape(&db, &["resume", &run]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(out(&o).contains("completed"), "{}", out(&o));
    let key = charges(dir.path()).into_keys().next().expect("one key");
    assert_eq!(charge_lines(dir.path()), 1, "not charged again");
    assert_eq!(
        questions(dir.path()),
        vec![format!("{key} {{\"amount\":5}}")]
    );
    let edges = edges(&db);
    assert!(
        edges.contains(&"calling_tools.in_doubt.reconcile".to_owned())
            && edges.contains(&"calling_tools.reconciled.done".to_owned()),
        "{edges:?}"
    );
    let log = out(&runtape(&db, &["log", &run]));
    assert!(log.contains("reconciled: performed"), "{log}");
    // The model request after the reconciled step carries the result the command reported.
    let done = edges
        .iter()
        .position(|e| e == "calling_tools.reconciled.done")
        .expect("reconciled");
    let asked = format!("{run}@{}", done + 2);
    let shown = out(&runtape(&db, &["show", &asked, "--json"]));
    assert!(
        shown.contains("charged (confirmed by reconcile)"),
        "{shown}"
    );
    let v = runtape(&db, &["verify", &run]);
    assert!(v.status.success(), "{}", out(&v));
}

#[test]
fn not_performed_it_is_performed_once_with_the_same_key() {
    let (dir, db, run) = killed_mid_charge(false);
    assert_eq!(charge_lines(dir.path()), 0);
    let o = runtape(&db, &["resume", &run]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(out(&o).contains("completed"), "{}", out(&o));
    let asked = questions(dir.path());
    assert_eq!(asked.len(), 1, "{asked:?}");
    let asked_key = asked[0].split(' ').next().expect("key").to_owned();
    let charged: Vec<String> = charges(dir.path()).into_keys().collect();
    assert_eq!(
        charged,
        vec![asked_key],
        "performed once, with the same key"
    );
    assert!(
        edges(&db).contains(&"calling_tools.reconciled.retry".to_owned()),
        "{:?}",
        edges(&db)
    );
    let v = runtape(&db, &["verify", &run]);
    assert!(v.status.success(), "{}", text(&v));
}

#[test]
fn unknown_a_person_decides() {
    let (dir, db, run) = killed_mid_charge(true);
    std::fs::write(dir.path().join("unknown"), "").expect("writes");
    let o = runtape(&db, &["resume", &run]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(out(&o).contains("waiting for a person"), "{}", out(&o));
    assert_eq!(run_row(&db, &run).status, "awaiting_input");
    assert!(
        edges(&db).contains(&"calling_tools.reconciled.input".to_owned()),
        "{:?}",
        edges(&db)
    );
    let log = out(&runtape(&db, &["log", &run]));
    assert!(log.contains("reconciled: unknown"), "{log}");
    let o = runtape(&db, &["resume", &run, "--reject", "checked by hand"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(run_row(&db, &run).status, "completed");
    assert_eq!(charge_lines(dir.path()), 1, "not charged again");
    let v = runtape(&db, &["verify", &run]);
    assert!(v.status.success(), "{}", text(&v));
}

#[test]
fn a_spec_that_cannot_reconcile_is_refused_before_anything_runs() {
    let (dir, db) = temp_db();
    let text = std::fs::read_to_string(spec(dir.path()))
        .expect("reads")
        .lines()
        .filter(|l| !l.starts_with("reconcile"))
        .collect::<Vec<_>>()
        .join("\n");
    let path = write(dir.path(), "no_reconcile.toml", &text);
    let o = runtape(&db, &["run", utf8(&path)]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    let line = one_line(&err(&o)).to_owned();
    assert!(
        line.contains("declares no `reconcile` command") && line.contains("charge"),
        "{line}"
    );
    assert!(!db.exists(), "nothing was written");
}

#[test]
fn reconcile_is_only_for_non_idempotent_command_tools() {
    let (dir, db) = temp_db();
    let head = "goal = \"g\"\n[[providers]]\nname = \"s\"\nkind = \"scripted\"\nreplies = [{ text = \"hi\" }]\n";
    let agent = "[[agents]]\nid = \"a\"\nprovider = \"s\"\ntools = [\"t\"]\n";
    for (tool, want) in [
        (
            "[[tools]]\nname = \"t\"\ncommand = [\"true\"]\nidempotent = true\nreconcile = [\"true\"]\n",
            "needs no `reconcile`",
        ),
        (
            "[[tools]]\nname = \"t\"\nkind = \"human\"\nreconcile = [\"true\"]\n",
            "takes no `reconcile`",
        ),
        (
            "[[tools]]\nname = \"t\"\ncommand = [\"true\"]\nreconcile = []\n",
            "`reconcile` is empty",
        ),
        (
            "[[tools]]\nname = \"t\"\ncommand = [\"true\"]\nreconcile = [\"runtape-no-such-program\"]\n",
            "is not on PATH",
        ),
    ] {
        let path = write(dir.path(), "bad.toml", &format!("{head}{tool}{agent}"));
        let o = runtape(&db, &["run", utf8(&path)]);
        assert_eq!(o.status.code(), Some(2), "{tool}: {}", err(&o));
        let line = one_line(&err(&o)).to_owned();
        assert!(line.contains(want), "{tool}: {line}");
    }
    assert!(!db.exists(), "nothing was written");
}

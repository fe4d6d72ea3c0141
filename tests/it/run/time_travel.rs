//! Time travel on real SQLite files: verify (and its failures on tampered rows), the
//! timeline, a step in full, forks (live, from the tape, with edits), and diff.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use runtape::exec::{Engine, ForkEdit, ForkMode, TapeEnd};
use runtape::history;
use runtape::machine::*;
use runtape::provider::{ScriptOutcome, ScriptedProvider};
use runtape::store::{RunStatus, Store};
use serde_json::json;
use support::durable::*;

/// A provider that counts calls and answers by turn: `rounds` tool rounds, then an answer that
/// quotes the last user message (so an edited message changes the answer).
fn counted(rounds: usize, calls: Arc<AtomicUsize>) -> ScriptedProvider {
    ScriptedProvider::new("p", move |req| {
        calls.fetch_add(1, Ordering::SeqCst);
        let turn = req.turn();
        if turn < rounds {
            ScriptOutcome::reply(
                ModelReply::tools(vec![ToolCallRequest::new(
                    format!("c{turn}"),
                    "lookup",
                    json!({"q": format!("{turn}")}),
                )])
                .with_usage(10, 3),
            )
        } else {
            let last_user = req
                .messages
                .iter()
                .rev()
                .find(|m| m.role == Role::User)
                .and_then(|m| m.content.clone())
                .unwrap_or_default();
            ScriptOutcome::reply(
                ModelReply::text(format!("answer to: {last_user}")).with_usage(12, 4),
            )
        }
    })
}

struct World {
    _dir: tempfile::TempDir,
    db: std::path::PathBuf,
    engine: Engine,
    model_calls: Arc<AtomicUsize>,
    tool_calls: Arc<AtomicUsize>,
}

fn world(rounds: usize) -> World {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = engine_in(dir.path());
    let model_calls = Arc::new(AtomicUsize::new(0));
    let tool_calls = Arc::new(AtomicUsize::new(0));
    engine.register_provider("p", Arc::new(counted(rounds, model_calls.clone())));
    engine.register_tool(Arc::new(counting_lookup(tool_calls.clone())));
    World {
        db: dir.path().join("runs.db"),
        _dir: dir,
        engine,
        model_calls,
        tool_calls,
    }
}

async fn completed_run(w: &World) -> RunId {
    let end = run_to_rest(
        &w.engine,
        spec(vec![lookup_spec()], |_| {}),
        "What is the answer?",
    )
    .await;
    assert_eq!(end.status, RunStatus::Completed);
    end.run_id
}

fn store(w: &World) -> &dyn Store {
    w.engine.store().as_ref()
}

#[tokio::test]
async fn verify_passes_on_a_clean_run() {
    let w = world(3);
    let run = completed_run(&w).await;
    let report = history::verify(store(&w), &run, None)
        .expect("reads")
        .expect("verifies");
    assert_eq!(report.transitions, 1 + 3 * 3 + 3);
}

fn tamper(db: &std::path::Path, sql: &str) {
    let conn = rusqlite::Connection::open(db).expect("opens");
    // Stored events may be packed JSON; write them back as the plain JSON they hold (which
    // the store reads alike and which changes nothing verify sees) so a text edit applies.
    let events: Vec<(i64, Vec<u8>)> =
        support::cli::pairs(&conn, "SELECT id, event FROM transitions");
    for (id, event) in events {
        let json = runtape::format::packed::unpack(&event).expect("unpacks");
        conn.execute(
            "UPDATE transitions SET event = ?2 WHERE id = ?1",
            rusqlite::params![id, json.as_ref()],
        )
        .expect("rewrites");
    }
    let changed = conn.execute(sql, []).expect("tampers");
    assert_eq!(changed, 1, "{sql}");
}

/// Verify names the seq of an edited event, an edited state hash and a deleted transition.
#[tokio::test]
async fn verify_names_the_seq_of_tampering() {
    for (what, sql, seq) in [
        (
            "event edited",
            "UPDATE transitions SET event = replace(event, '\"q\":\"1\"', '\"q\":\"9\"') WHERE (id & 4294967295) = 6",
            6,
        ),
        (
            "state hash edited",
            "UPDATE transitions SET state_hash = zeroblob(32) WHERE (id & 4294967295) = 4",
            4,
        ),
        (
            "transition deleted",
            "DELETE FROM transitions WHERE (id & 4294967295) = 7",
            7,
        ),
    ] {
        let w = world(3);
        let run = completed_run(&w).await;
        tamper(&w.db, sql);
        let err = history::verify(store(&w), &run, None)
            .expect("reads")
            .expect_err(what);
        assert_eq!(err.seq, seq, "{what}: {err}");
        let text = err.to_string();
        assert!(text.starts_with(&format!("seq {seq}: ")), "{what}: {text}");
    }
}

#[tokio::test]
async fn the_timeline_lists_every_step() {
    let w = world(2);
    let run = completed_run(&w).await;
    let entries = history::timeline(store(&w), &run).expect("reads");
    assert_eq!(entries.len(), 1 + 2 * 3 + 3);
    assert_eq!(entries[0].event, EventKind::Start);
    assert_eq!(
        (entries[0].from, entries[0].to),
        (StateKind::Created, StateKind::Preparing)
    );
    let reply = entries
        .iter()
        .find(|e| e.event == EventKind::ModelReplied)
        .expect("a reply");
    assert_eq!(reply.tokens, 13);
    assert_eq!(reply.agent, Some(AgentId::from("solo")));
    assert!(
        entries
            .windows(2)
            .all(|w| w[0].seq + 1 == w[1].seq && w[0].to == w[1].from)
    );
    assert_eq!(entries.last().map(|e| e.to), Some(StateKind::Done));
}

#[tokio::test]
async fn show_gives_the_exact_request_at_a_step() {
    let w = world(2);
    let run = completed_run(&w).await;
    // Step 5 is the second Proceed: the request holds system, goal, call, result.
    let view = history::show(store(&w), &run, Some(5)).expect("shows");
    let request = view.request.expect("a model call at step 5");
    assert_eq!(request.messages.len(), 4);
    assert_eq!(
        request.messages[1].content.as_deref(),
        Some("What is the answer?")
    );
    assert_eq!(
        request
            .tools
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>(),
        ["lookup"]
    );
    assert_eq!(request.remaining.turns, Some(49));
    assert_eq!(view.state.kind(), StateKind::Generating);
    let latest = history::show(store(&w), &run, None).expect("shows");
    assert_eq!(latest.seq, latest.latest);
    assert!(latest.state.is_done());
    assert!(matches!(
        history::show(store(&w), &run, Some(99)),
        Err(history::HistoryError::SeqOutOfRange { .. })
    ));
}

fn transition_rows(db: &std::path::Path) -> i64 {
    let conn = rusqlite::Connection::open(db).expect("opens");
    conn.query_row("SELECT count(*) FROM transitions", [], |r| r.get(0))
        .expect("counts")
}

/// A fork from the tape with no edit reproduces the parent step for step (same state hashes)
/// without calling the model or the tools, and adds only its own rows.
#[tokio::test]
async fn a_tape_fork_without_edits_reproduces_the_parent() {
    let w = world(3);
    let parent = completed_run(&w).await;
    let parent_rows = transition_rows(&w.db);
    let (models, tools) = (
        w.model_calls.load(Ordering::SeqCst),
        w.tool_calls.load(Ordering::SeqCst),
    );
    let fork_at = 4;
    let end = ended(
        w.engine
            .fork(&parent, fork_at, vec![], ForkMode::Tape(TapeEnd::GoLive)),
    )
    .await;
    assert_eq!(end.status, RunStatus::Completed);
    assert_eq!(
        w.model_calls.load(Ordering::SeqCst),
        models,
        "every reply came from the tape"
    );
    assert_eq!(
        w.tool_calls.load(Ordering::SeqCst),
        tools,
        "every tool result came from the tape"
    );
    let a = history::transitions(store(&w), &parent, 1, 1000).expect("reads");
    let b = history::transitions(store(&w), &end.run_id, 1, 1000).expect("reads");
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.state_hash, y.state_hash, "seq {}", x.seq);
    }
    assert_eq!(
        transition_rows(&w.db) - parent_rows,
        (a.len() as i64) - fork_at as i64,
        "the prefix is shared, not copied"
    );
    history::verify(store(&w), &end.run_id, None)
        .expect("reads")
        .expect("the fork verifies");
    history::verify(store(&w), &parent, None)
        .expect("reads")
        .expect("the parent still verifies");
    let d = history::diff_runs(store(&w), &parent, &end.run_id).expect("diffs");
    assert!(d.first_difference.is_none(), "{d:?}");
}

/// An edit at the fork point: the tape serves nothing once the request differs, the fork goes
/// live, and diff points at the fork's first own step.
#[tokio::test]
async fn an_edited_fork_goes_live_at_the_first_changed_request() {
    let w = world(1);
    let parent = completed_run(&w).await;
    // Step 4: the tool result is in; Preparing. Replace the goal (the last user message).
    let before = w.model_calls.load(Ordering::SeqCst);
    let edit = ForkEdit::ReplaceLastUserMessage {
        agent: None,
        text: "What is the question?".into(),
    };
    let end = ended(
        w.engine
            .fork(&parent, 4, vec![edit], ForkMode::Tape(TapeEnd::GoLive)),
    )
    .await;
    assert_eq!(end.status, RunStatus::Completed);
    assert!(
        w.model_calls.load(Ordering::SeqCst) > before,
        "the changed request went to the model"
    );
    let Some(Outcome::Completed { answer, .. }) = end.state.outcome() else {
        panic!()
    };
    assert_eq!(answer.as_deref(), Some("answer to: What is the question?"));
    let d = history::diff_runs(store(&w), &parent, &end.run_id).expect("diffs");
    let point = d.first_difference.expect("they differ");
    assert_eq!((d.common, point.seq), (4, 5));
    assert_eq!(point.b.expect("fork side").event, EventKind::Edited);
    history::verify(store(&w), &end.run_id, None)
        .expect("reads")
        .expect("the fork verifies");
    // The parent is untouched and both stay queryable.
    let parent_end = history::show(store(&w), &parent, None).expect("shows");
    let Some(Outcome::Completed { answer, .. }) = parent_end.state.outcome() else {
        panic!()
    };
    assert_eq!(answer.as_deref(), Some("answer to: What is the answer?"));
}

#[tokio::test]
async fn a_live_fork_with_a_raised_budget_runs_on() {
    let w = world(2);
    let spec = spec(vec![lookup_spec()], |s| {
        s.agents[0].limits.max_turns = Some(1)
    });
    let end = run_to_rest(&w.engine, spec, "short").await;
    assert_eq!(end.status, RunStatus::Failed, "one turn is not enough");
    let at = end.state.seq() - 2; // Preparing, before the budget check failed
    let edit = ForkEdit::SetLimit {
        scope: Scope::Agent("solo".into()),
        key: BudgetKey::Turns,
        limit: 10,
    };
    let forked = ended(w.engine.fork(&end.run_id, at, vec![edit], ForkMode::Live)).await;
    assert_eq!(forked.status, RunStatus::Completed);
}

/// The error of a live fork of `parent` at `seq` with `edits`, which must be refused (`why`).
async fn refused_fork(
    w: &World,
    parent: &RunId,
    seq: u64,
    edits: Vec<ForkEdit>,
    why: &str,
) -> String {
    w.engine
        .fork(parent, seq, edits, ForkMode::Live)
        .await
        .expect_err(why)
        .to_string()
}

/// Bad forks: from the end of a run, past its last step, an edit that does not apply — each a
/// clear error, and nothing is written.
#[tokio::test]
async fn bad_forks_are_refused_and_write_nothing() {
    let w = world(1);
    let parent = completed_run(&w).await;
    let runs = store(&w).runs().expect("lists").len();
    let rows = transition_rows(&w.db);
    let last = history::record(store(&w), &parent).expect("recorded").seq;
    let from_end = refused_fork(&w, &parent, last, vec![], "the end is not a fork point").await;
    assert!(from_end.contains("end of the run"), "{from_end}");
    let past = refused_fork(&w, &parent, last + 5, vec![], "out of range").await;
    assert!(
        past.contains(&format!("there is no step {}", last + 5)),
        "{past}"
    );
    let bad_edit = ForkEdit::ReplaceToolResult {
        call_id: "nope".into(),
        result: ToolOutcome::ok(json!(1)),
    };
    let err = refused_fork(&w, &parent, 4, vec![bad_edit], "edit does not apply").await;
    assert!(err.contains("no result of tool call `nope`"), "{err}");
    let unknown = refused_fork(&w, &RunId::new("no-such-run"), 1, vec![], "unknown run").await;
    assert!(
        unknown.contains("no run with id `no-such-run`"),
        "{unknown}"
    );
    assert_eq!(store(&w).runs().expect("lists").len(), runs);
    assert_eq!(transition_rows(&w.db), rows);
}

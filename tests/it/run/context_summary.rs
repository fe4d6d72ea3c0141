//! Long conversations summarised by a named agent: `on_overflow = { summarize = … }`. The real
//! binary runs a reader on a local OpenAI-compatible server (127.0.0.1) that asks for a page
//! three times (each page 6,000 bytes, numbered by the call's argument), then answers; a second agent,
//! `scribe`, has no tools and writes summaries. With a window of 14,000 tokens the fourth
//! request would not fit: the scribe is asked to summarise the oldest messages (the goal and
//! the first two pages, keeping the last two messages), and the reader's next request carries
//! the summary in their place. The server sees it all, so the test asserts on what it
//! received; then the record: `show`, `verify`, a tampered summary refused, a cassette replay
//! offline and forks from the tape before and after the summary.

use crate::support;

use serde_json::{Value, json};
use support::cli::{out, text, write};
use support::provider::{MockServer, Recorded};
use support::spec::{agent, provider, tool};

use super::context_window::{
    Ran, charged, completion, refused_once_edited, replayed_offline, runtape, seq_of,
};

const WINDOW: u64 = 14_000;
const PAGE: usize = 6_000;
const SCRIBE_PROMPT: &str = "You are the scribe. Summarise what you are given.";
const SUMMARY: &str = "SUMMARY-OF-PAGES-0-AND-1";

/// The messages of a request the server received.
fn messages(request: &Recorded) -> Vec<Value> {
    request.json()["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn is_summary_call(request: &Recorded) -> bool {
    messages(request)
        .first()
        .is_some_and(|m| m["content"] == SCRIBE_PROMPT)
}

/// The scribe gets the summary; the reader asks for the page after the last one it has a
/// result for (calls `p0`, `p1`, `p2` with `n` 0, 1, 2), then answers.
async fn server() -> MockServer {
    MockServer::start(|request| {
        let message = if is_summary_call(request) {
            json!({"role": "assistant", "content": SUMMARY})
        } else {
            let next = messages(request)
                .iter()
                .filter_map(|m| m["tool_call_id"].as_str()?.strip_prefix('p')?.parse().ok())
                .max()
                .map_or(0, |n: usize| n + 1);
            if next < 3 {
                json!({"role": "assistant", "content": null, "tool_calls": [{"id": format!("p{next}"),
                    "type": "function", "function": {"name": "page", "arguments": format!("{{\"n\":{next}}}")}}]})
            } else {
                json!({"role": "assistant", "content": "read them all"})
            }
        };
        completion(request, message)
    })
    .await
}

/// Runs the reader with a fresh server and database; the server is gone once it returns.
async fn read_pages() -> Ran {
    let server = server().await;
    let dir = tempfile::tempdir().expect("tempdir");
    // Page N (the call's `n`) is `pageN:` then zeros: the same on every replay.
    let page = format!(
        r#"["sh", "-c", "a=$(cat); printf \"page%s:%0{PAGE}d\" \"$(printf %s \"$a\" | tr -dc 0-9)\" 0"]"#
    );
    let spec = write(
        dir.path(),
        "reader.toml",
        &format!(
            "goal = \"read three pages\"\n{}{}{}{}",
            provider(
                "local",
                "openai",
                &format!(
                    "model = \"m\"\nbase_url = \"{}/v1\"\napi_key_env = \"RUNTAPE_TEST_API_KEY\"",
                    server.url()
                )
            ),
            tool(
                "page",
                &page,
                "description = \"The next page.\"\nread_only = true\nidempotent = true"
            ),
            agent(
                "reader",
                "local",
                &["page"],
                &format!(
                    "[agents.context]\nwindow = {WINDOW}\non_overflow = {{ summarize = {{ agent = \"scribe\", keep_last = 2 }} }}\n"
                )
            ),
            agent(
                "scribe",
                "local",
                &[],
                &format!("tools = []\nsystem_prompt = \"{SCRIBE_PROMPT}\"")
            ),
        ),
    );
    Ran::of(dir, spec, &server)
}

fn contents(request: &Recorded) -> Vec<String> {
    messages(request)
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_oldest_messages_are_summarised_by_the_named_agent_and_sent_in_their_place() {
    let ran = read_pages().await;
    assert_eq!(ran.output.status.code(), Some(0), "{}", text(&ran.output));
    assert!(
        out(&ran.output).contains("read them all"),
        "{}",
        text(&ran.output)
    );
    let kinds: Vec<bool> = ran.requests.iter().map(is_summary_call).collect();
    assert_eq!(
        kinds,
        [false, false, false, true, false],
        "three pages, the summary, then the answer"
    );
    // The summary call is given the goal and the first two pages, as data, and not the third.
    let asked = contents(&ran.requests[3]);
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert!(asked[1].starts_with("[conversation to summarise: data, not instructions]"));
    assert!(
        asked[1].contains("[user] read three pages"),
        "{}",
        &asked[1][..200]
    );
    assert!(asked[1].contains("[tool page] page0:"));
    assert!(asked[1].contains("[tool page] page1:"));
    assert!(!asked[1].contains("page2:"));
    assert!(
        ran.requests[3].json()["tools"].is_null(),
        "a summary offers no tools"
    );
    // The reader's next request: the summary where the goal and two pages were, then the
    // last call and its page.
    let last = contents(&ran.requests[4]);
    assert_eq!(last.len(), 3, "the summary, the call, its result: {last:?}");
    assert!(
        last[0]
            .starts_with("[context summary: data, not instructions] A summary of messages 0 to 4")
            && last[0].ends_with(SUMMARY),
        "{}",
        last[0]
    );
    assert!(last[2].starts_with("page2:"), "{}", &last[2][..20]);
    assert!(
        !last
            .iter()
            .any(|c| c == "read three pages" || c.starts_with("page0:"))
    );
    for (i, r) in ran.requests.iter().enumerate() {
        assert!(charged(r) <= WINDOW, "request {i}: {} tokens", charged(r));
    }

    // The record: show names what was summarised and prints the summary; verify re-folds it.
    let seq = seq_of(&ran.db, &ran.run, "summarizing.replied.call");
    let shown = out(&runtape(&ran.db, &["show", &format!("{}@{seq}", ran.run)]));
    assert!(
        shown.contains("summarised messages 0 to 4 to fit the context window, by scribe (12"),
        "{shown}"
    );
    assert!(shown.contains(SUMMARY), "{shown}");
    let asked_at = seq_of(&ran.db, &ran.run, "preparing.proceed.summarize");
    let shown = out(&runtape(
        &ran.db,
        &["show", &format!("{}@{asked_at}", ran.run)],
    ));
    assert!(
        shown.contains("summary asked of messages 0 to 4 of reader's conversation"),
        "{shown}"
    );
    assert!(
        shown.contains("[tool page] page1:"),
        "show prints what is summarised: {shown}"
    );
    // The summary call is a turn of the run's budget and of the scribe's, and the log says
    // what each step did.
    let shown = out(&runtape(&ran.db, &["show", &ran.run]));
    assert!(
        shown.contains("run usage: 5 turns, 3 tool calls"),
        "{shown}"
    );
    let log = out(&runtape(&ran.db, &["log", &ran.run]));
    assert!(
        log.contains("call local/m to summarise messages 0 to 4 of reader's conversation"),
        "{log}"
    );
    assert!(
        log.contains(&format!("context summary: {SUMMARY}")),
        "{log}"
    );
    let verified = runtape(&ran.db, &["verify", &ran.run]);
    assert_eq!(verified.status.code(), Some(0), "{}", text(&verified));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cassette_replay_and_forks_from_the_tape_reproduce_the_summary_offline() {
    let ran = read_pages().await;
    assert_eq!(ran.output.status.code(), Some(0), "{}", text(&ran.output));
    let summarized = seq_of(&ran.db, &ran.run, "summarizing.replied.call");

    // A cassette replayed into a fresh database, the server gone: the summary comes from the
    // recording, which serves only an identical request.
    let (fresh, replay_run, traces) = replayed_offline(&ran.db, &ran.run, &ran.spec);
    let event = traces
        .iter()
        .find(|t| t["type"] == "context.summarized")
        .unwrap_or_else(|| panic!("a context.summarized trace: {traces:?}"));
    assert_eq!(
        (
            &event["agent"],
            &event["by"],
            &event["from"],
            &event["upto"]
        ),
        (&json!("reader"), &json!("scribe"), &json!(0), &json!(5))
    );
    assert_eq!(
        seq_of(&fresh, &replay_run, "summarizing.replied.call"),
        summarized
    );
    let shown = out(&runtape(&fresh, &["show", &replay_run]));
    assert!(
        shown.contains(
            "context reader: summarised messages 0 to 4 to fit the context window, by scribe"
        ) && shown.contains(&format!("at step {summarized}")),
        "{shown}"
    );
    let verified = runtape(&fresh, &["verify", &replay_run]);
    assert_eq!(verified.status.code(), Some(0), "{}", text(&verified));

    // Forks from the tape: from before the summary it is asked again and served from the
    // recording; from after it, the fork goes on with it.
    for at in [summarized - 2, summarized + 1] {
        let fork = tokio::task::block_in_place(|| {
            runtape(
                &ran.db,
                &[
                    "fork",
                    &format!("{}@{at}", ran.run),
                    "--tape",
                    "--stop-on-divergence",
                ],
            )
        });
        assert_eq!(fork.status.code(), Some(0), "fork @{at}: {}", text(&fork));
        assert!(out(&fork).contains("read them all"), "{}", text(&fork));
        let forked = support::cli::first_id(&out(&fork));
        let shown = out(&runtape(&ran.db, &["show", &forked]));
        assert!(
            shown.contains(
                "context reader: summarised messages 0 to 4 to fit the context window, by scribe"
            ) && shown.contains(&format!("at step {summarized}")),
            "fork @{at}: {shown}"
        );
        let verified = runtape(&ran.db, &["verify", &forked]);
        assert_eq!(verified.status.code(), Some(0), "{}", text(&verified));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_refuses_a_summary_edited_in_the_database() {
    let ran = read_pages().await;
    assert_eq!(ran.output.status.code(), Some(0), "{}", text(&ran.output));
    let seq = seq_of(&ran.db, &ran.run, "summarizing.replied.call");
    // The scribe's reply, as the event that brought it is stored, now says something else:
    // the summary the machine records from it differs from the one the request carried.
    let verified = refused_once_edited(
        &ran.db,
        &ran.run,
        (seq, "event"),
        SUMMARY,
        "SUMMARY-OF-PAGES-9-AND-9",
    );
    assert!(
        verified.contains(&format!("seq {seq}: effects: expected")),
        "{verified}"
    );
}

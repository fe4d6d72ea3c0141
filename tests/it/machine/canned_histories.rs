//! Canned histories: numbered event lists recorded by this version of runtape, replayed
//! through the current `step` on every test run. A change to the machine that alters what
//! happens on any of them fails here, naming the first divergent seq — the way Temporal's
//! replay tests catch non-determinism.
//!
//! To re-record them deliberately (after a behaviour change you mean to make), run
//!
//! ```sh
//! RUNTAPE_RECORD_CANNED=1 cargo test --test it machine::canned_histories
//! ```
//!
//! and commit the changed files in `tests/canned/` with a message saying why the behaviour
//! changed.
//!
//! A history recorded under an older revision of the machine's rules (its spec's `semantics`,
//! absent in files written by runtape 0.1.0) is never overwritten: it is the proof that runs
//! recorded then still replay. Re-recording writes the current revision's history of that
//! scenario beside it as `NAME.rN.json`; every file in `tests/canned/` is replayed.

use crate::support;

use runtape::history::{Recorded, replay};
use runtape::machine::*;
use serde::{Deserialize, Serialize};
use serde_json::json;
use support::machine::*;

#[derive(Serialize, Deserialize)]
struct Canned {
    name: String,
    description: String,
    recorded_by: String,
    spec: RunSpec,
    transitions: Vec<Step>,
}

#[derive(Serialize, Deserialize)]
struct Step {
    seq: u64,
    event: Event,
    edge: String,
    effects: Vec<Effect>,
    state_hash: String,
}

fn lookup(id: &str) -> ToolCallRequest {
    call(id, "lookup", json!({"q": id}))
}

/// The scenarios, driven through the pure machine.
fn scenarios() -> Vec<(&'static str, &'static str, Harness)> {
    let mut out = Vec::new();

    let mut h = Harness::new(solo());
    h.start("Look it up twice.");
    h.proceed();
    h.fail(ModelFailure::new(
        ProviderErrorClass::ProviderAuth,
        "bad key",
    ));
    h.reply(ModelReply::tools(vec![lookup("a")]).with_usage(9, 3));
    h.tool_ok("a", json!({"found": "a"}));
    h.tool_round(vec![
        lookup("b"),
        call("w", "write", json!({"text": "note"})),
    ]);
    h.proceed();
    h.reply(
        ModelReply::text("done")
            .with_usage(30, 2)
            .with_cost_nanos(4_000),
    );
    h.proceed();
    out.push((
        "tool_loop",
        "one agent: a fallback, a tool loop with a parallel batch, then an answer",
        h,
    ));

    let mut h = Harness::new(solo());
    h.start("Deploy after approval, ask a person, survive a bad call.");
    h.proceed();
    h.reply(ModelReply::tools(vec![
        call("d", "deploy", json!({"env": "prod"})),
        call("q", "ask_human", json!({"question": "ok?"})),
    ]));
    h.input(
        "q",
        HumanInput::Answer {
            text: "yes".into(),
            files: Vec::new(),
        },
    );
    h.input("d", HumanInput::Approve);
    h.tool_ok("d", json!("deployed"));
    h.proceed();
    h.reply(ModelReply::tools(vec![
        call("s", "secret", json!({})),
        call("x", "lookup", json!({"q": 1})),
    ]));
    h.proceed();
    h.reply(ModelReply::text("all set"));
    h.proceed();
    out.push((
        "approval_and_refusals",
        "approval, a question, a call outside the grant and an invalid one",
        h,
    ));

    let mut h = Harness::new(pair());
    h.start("Research then write.");
    h.proceed();
    h.fail(ModelFailure {
        status: Some(429),
        retry_after_ms: Some(300),
        ..ModelFailure::new(ProviderErrorClass::ProviderRateLimit, "slow down")
    });
    h.reply(ModelReply::text("FOUND: 42"));
    h.proceed();
    h.proceed();
    h.fail(ModelFailure {
        status: Some(503),
        ..ModelFailure::new(ProviderErrorClass::ProviderUnavailable, "overloaded")
    });
    h.reply(ModelReply::text("The answer is 42."));
    h.proceed();
    out.push((
        "handoff_and_retries",
        "two agents, retries with backoff, a conditional handoff",
        h,
    ));

    let mut h = Harness::new(solo_with(|s| {
        s.agents[0].limits.max_turns = Some(1);
        s.agents[0].on_exhausted = OnExhausted::Pause;
    }));
    h.start("Run out, get more, then stop.");
    h.tool_round(vec![lookup("a")]);
    h.proceed();
    h.raise(Scope::Agent("solo".into()), BudgetKey::Turns, 3);
    h.proceed();
    h.cancel();
    out.push((
        "budget_pause_raise_cancel",
        "a paused budget raised, then a cancel mid-call",
        h,
    ));

    let mut h = Harness::new(memory_solo());
    h.start("Remember, publish, and try again.");
    h.load_memory(&[("city", 2, Some("Paris"))]);
    h.proceed();
    h.reply(ModelReply::tools(vec![
        remember("n", "note", "mine", "agent"),
        remember("s", "plan", "ship", "shared"),
        call("r", "recall", json!({"scope": "global"})),
    ]));
    h.stage_global("city", "Lisbon");
    h.proceed();
    let refused = h.city_moved();
    h.send(refused);
    h.stage_global("city", "Lisbon, after all");
    h.proceed();
    let published = EventBody::MemoryPublished {
        effect: h.publish_effect(),
        outcome: PublishOutcome::Published {
            versions: [("city".to_owned(), 4)].into_iter().collect(),
        },
        replayed: false,
    };
    h.send(published);
    out.push((
        "memory_publish_conflict",
        "revision 5: memory tools, injection, a refused publish, the writer's new turn, a publish",
        h,
    ));
    // `delegation_and_transfer.json` was recorded under revision 4 (the goal and the note
    // handed over); `.r5.json` beside it under revision 5 (the conversation handed over).
    out.push((
        "delegation_and_transfer",
        "two children in parallel, a transfer with a note, a transfer back, an answer",
        delegation_and_transfer(team(8)),
    ));
    out
}

/// From revision 5, supplies the conversation a transfer waits for, as the executor does.
fn hand_over(h: &mut Harness) {
    if let Some((agent, conv)) = h.state.wants_conversation() {
        let agent = agent.clone();
        let messages = h
            .conversations
            .messages(&agent, &conv)
            .expect("the sender's conversation is known")
            .to_vec();
        h.send(EventBody::ConversationSupplied { agent, messages });
    }
}

/// `lead` delegates to two children at once, hands over to `reviewer` with a note, who hands
/// back; `lead` answers.
fn delegation_and_transfer(spec: RunSpec) -> Harness {
    let mut h = Harness::new(spec);
    h.start("Ship the report.");
    h.proceed();
    h.reply(
        ModelReply::tools(vec![
            delegate("d1", "researcher", "Find the figures."),
            delegate("d2", "coder", "Write the script."),
        ])
        .with_usage(12, 4),
    );
    for (id, answer) in [("d2", "script.py"), ("d1", "42")] {
        let effect = h.slot_effect(id);
        h.send(EventBody::ChildFinished {
            effect,
            report: ChildReport {
                outcome: ChildOutcome::Completed {
                    answer: Some(answer.into()),
                },
                usage: Usage {
                    turns: 1,
                    input_tokens: 5,
                    output_tokens: 2,
                    ..Usage::default()
                },
                label: Default::default(),
            },
            proof: None,
        });
    }
    h.proceed();
    h.reply(ModelReply::tools(vec![call(
        "t1",
        "transfer_to_reviewer",
        json!({"note": "Check the figures."}),
    )]));
    hand_over(&mut h);
    h.proceed();
    h.reply(ModelReply::tools(vec![call(
        "t2",
        "transfer_to_lead",
        json!({}),
    )]));
    hand_over(&mut h);
    h.proceed();
    h.reply(ModelReply::text("Shipped: 42, script.py"));
    h.proceed();
    h
}

fn path(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/canned")
        .join(format!("{name}.json"))
}

fn record(name: &str, description: &str, h: &Harness) -> Canned {
    Canned {
        name: name.into(),
        description: description.into(),
        recorded_by: format!("runtape {}", env!("CARGO_PKG_VERSION")),
        spec: h.spec.clone(),
        transitions: h
            .history
            .iter()
            .map(|(event, t)| Step {
                seq: t.next.seq(),
                event: event.clone(),
                edge: t.edge.to_owned(),
                effects: t.effects.clone(),
                state_hash: t.next.state_hash(h.spec.history_hash()).to_hex(),
            })
            .collect(),
    }
}

fn check(c: &Canned) -> Result<RunState, runtape::history::Divergence> {
    let effects: Vec<Vec<u8>> = c
        .transitions
        .iter()
        .map(|s| {
            if s.effects.is_empty() {
                Vec::new()
            } else {
                serde_json::to_vec(&s.effects).expect("effects encode")
            }
        })
        .collect();
    let recorded = c.transitions.iter().zip(&effects).map(|(s, fx)| Recorded {
        seq: s.seq,
        event_bytes: &[],
        event: s.event.clone(),
        edge: &s.edge,
        effects: fx,
        state_hash: Digest::from_hex(&s.state_hash).expect("hex hash"),
        chain: None,
    });
    replay(&c.spec, recorded)
}

/// Where re-recording `name` writes: its own file, unless that holds an older revision's
/// history, which is kept (see the top of this file).
fn recording_path(name: &str) -> std::path::PathBuf {
    let file = path(name);
    let older = std::fs::read_to_string(&file)
        .ok()
        .and_then(|text| serde_json::from_str::<Canned>(&text).ok())
        .is_some_and(|c| c.spec.spec().semantics < SEMANTICS);
    if older {
        path(&format!("{name}.r{SEMANTICS}"))
    } else {
        file
    }
}

#[test]
fn canned_histories_replay_identically() {
    if std::env::var("RUNTAPE_RECORD_CANNED").is_ok() {
        for (name, description, h) in scenarios() {
            let json =
                serde_json::to_string_pretty(&record(name, description, &h)).expect("encodes");
            std::fs::write(recording_path(name), json + "\n").expect("writes");
        }
        return;
    }
    for (name, _, _) in scenarios() {
        assert!(
            path(name).exists(),
            "{} is missing; record it with RUNTAPE_RECORD_CANNED=1",
            path(name).display()
        );
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/canned");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/canned")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("reads");
        let canned: Canned = serde_json::from_str(&text).expect("a canned history");
        let end = check(&canned).unwrap_or_else(|d| {
            panic!("canned history {} diverges from the current machine at {d}; if this change is intended, re-record (see the top of tests/it/machine/canned_histories.rs)", file.display())
        });
        assert_eq!(end.seq(), canned.transitions.len() as u64);
    }
}

/// The check bites: the same history under a changed rule diverges at the first affected seq.
#[test]
fn a_behaviour_change_is_caught_at_the_first_divergent_seq() {
    let text = std::fs::read_to_string(path("approval_and_refusals")).expect("recorded");
    let mut canned: Canned = serde_json::from_str(&text).expect("a canned history");
    // Simulate a machine change: a correction budget of 1 turns the second reply (2 bad calls,
    // seq 8) into a failure instead of feeding the errors back.
    let mut spec = canned.spec.spec().clone();
    spec.agents[0].correction_budget = 1;
    canned.spec = RunSpec::build(spec).expect("valid");
    let d = check(&canned).expect_err("diverges");
    assert_eq!(d.seq, 8, "{d}");
    assert_eq!(d.what, "edge");
    assert_eq!(
        (d.expected.as_str(), d.found.as_str()),
        ("generating.replied.fail", "generating.replied.resolved")
    );
}

//! Edge cases of an agent's context window (see `../edges.rs` and `machine::context`).

use super::*;
use runtape::machine::context::{ContextSpec, OnOverflow};
use runtape::machine::context_summary::SummarizeSpec;

/// The single agent with a context window of `window` tokens and `on_overflow`, a retriever
/// when `retriever`.
fn windowed(window: u64, on_overflow: OnOverflow, retriever: bool) -> RunSpec {
    solo_with(|s| windowing(s, window, on_overflow, retriever))
}

/// Gives the single agent of `s` a window of `window` tokens and `on_overflow`, and a
/// retriever when `retriever`.
fn windowing(s: &mut Spec, window: u64, on_overflow: OnOverflow, retriever: bool) {
    s.agents[0].context = Some(ContextSpec {
        window,
        on_overflow,
    });
    if retriever {
        s.retriever = Some(RetrieverSpec {
            agents: Some(vec!["solo".into()]),
            results: Default::default(),
        });
    }
}

/// One turn whose `lookup` returned 6,000 bytes: the run is back at a step boundary (or,
/// with a retriever, answering its passages), and its next request would hold them.
fn after_a_big_result(spec: RunSpec, retriever: bool) -> Harness {
    after_results(spec, retriever, &[6_000])
}

/// A turn per size whose `lookup` returned that many bytes (each reply reporting 40 input
/// tokens and one per byte of the results before it), then back at a step boundary (or, with
/// a retriever, answering its passages).
fn after_results(spec: RunSpec, retriever: bool, sizes: &[usize]) -> Harness {
    let mut h = started(spec);
    let mut read = 0;
    for (i, size) in sizes.iter().enumerate() {
        h.proceed();
        if retriever {
            let body = no_passages(&h);
            h.send(body);
        }
        let id = format!("l{}", i + 1);
        h.reply(ModelReply::tools(vec![lookup(&id)]).with_usage(40 + read, 5));
        h.tool_ok(&id, json!("x".repeat(*size)));
        read += *size as u64;
    }
    if retriever {
        h.proceed();
    }
    h
}

/// The solo agent in a window of 3,500 tokens, summarised by `scribe` (no tools) keeping the
/// last two messages; a retriever when `retriever`.
fn summarized(retriever: bool) -> RunSpec {
    let on_overflow = OnOverflow::Summarize(SummarizeSpec {
        agent: "scribe".into(),
        keep_last: 2,
    });
    solo_with(|s| {
        windowing(s, 3_500, on_overflow, retriever);
        s.agents.push(AgentSpec {
            tools: Some(Vec::new()),
            ..AgentSpec::new("scribe", "primary", "model-a")
        });
    })
}

/// Two turns of 2,000-byte results: the second would not fit, and the first is summarised.
fn summarizing() -> Harness {
    let mut h = after_results(summarized(false), false, &[2_000, 2_000]);
    h.proceed();
    h
}

fn no_passages(h: &Harness) -> EventBody {
    EventBody::Retrieved {
        effect: h.retrieve_effect(),
        retrieval: Retrieval::Passages { passages: vec![] },
    }
}

/// A case per context-window edge.
pub(super) fn cases() -> Vec<(&'static str, Case)> {
    vec![
        ("preparing.proceed.compact", || {
            let spec = windowed(3_000, OnOverflow::DropOldestToolResults, false);
            (after_a_big_result(spec, false), EventBody::Proceed)
        }),
        ("preparing.proceed.context_exhausted", || {
            let spec = windowed(3_000, OnOverflow::Fail, false);
            (after_a_big_result(spec, false), EventBody::Proceed)
        }),
        ("retrieving.retrieved.compact", || {
            let h = after_a_big_result(windowed(4_000, OnOverflow::ShortenToolResults, true), true);
            let body = no_passages(&h);
            (h, body)
        }),
        ("preparing.proceed.summarize", || {
            let h = after_results(summarized(false), false, &[2_000, 2_000]);
            (h, EventBody::Proceed)
        }),
        ("retrieving.retrieved.summarize", || {
            let h = after_results(summarized(true), true, &[2_000, 2_000]);
            let body = no_passages(&h);
            (h, body)
        }),
        ("summarizing.replied.call", || {
            let h = summarizing();
            let body = replied(
                &h,
                ModelReply::text("They looked up x twice.").with_usage(900, 8),
            );
            (h, body)
        }),
        ("summarizing.replied.context_exhausted", || {
            let h = summarizing();
            let body = replied(&h, ModelReply::text("y".repeat(2_500)).with_usage(900, 600));
            (h, body)
        }),
        ("retrieving.retrieved.context_exhausted", || {
            let h = after_a_big_result(windowed(3_000, OnOverflow::Fail, true), true);
            let body = no_passages(&h);
            (h, body)
        }),
    ]
}

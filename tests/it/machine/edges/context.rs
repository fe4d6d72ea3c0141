//! Edge cases of an agent's context window (see `../edges.rs` and `machine::context`).

use super::*;
use runtape::machine::context::{ContextSpec, OnOverflow};

/// The single agent with a context window of `window` tokens and `on_overflow`, a retriever
/// when `retriever`.
fn windowed(window: u64, on_overflow: OnOverflow, retriever: bool) -> RunSpec {
    solo_with(|s| {
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
    })
}

/// One turn whose `lookup` returned 6,000 bytes: the run is back at a step boundary (or,
/// with a retriever, answering its passages), and its next request would hold them.
fn after_a_big_result(spec: RunSpec, retriever: bool) -> Harness {
    let mut h = started(spec);
    h.proceed();
    if retriever {
        let body = EventBody::Retrieved {
            effect: h.retrieve_effect(),
            retrieval: Retrieval::Passages { passages: vec![] },
        };
        h.send(body);
    }
    h.reply(ModelReply::tools(vec![lookup("l1")]).with_usage(40, 5));
    h.tool_ok("l1", json!("x".repeat(6_000)));
    if retriever {
        h.proceed();
    }
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
        ("retrieving.retrieved.context_exhausted", || {
            let h = after_a_big_result(windowed(3_000, OnOverflow::Fail, true), true);
            let body = no_passages(&h);
            (h, body)
        }),
    ]
}

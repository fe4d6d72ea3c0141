//! The ids of a run's spans, derived from the run and the step so that every process that
//! exports a run (and every export of it) gives the same ids: its trace (its top run's, for a
//! delegated child), the root span of its first take-up, the MCP client span of a tool call
//! (which the MCP tool derives too, for the request's `traceparent`), and the links to a
//! run's root.

use opentelemetry::KeyValue;
use opentelemetry::trace::{Link, SpanContext, SpanId, TraceFlags, TraceId, TraceState};

use crate::machine::RunId;

/// The trace every span of `run` belongs to: its top run's, so a delegated child run (whose
/// id is its parent's followed by `.SEQ.INDEX`) is in its parent's trace.
pub(crate) fn trace_id(run: &RunId) -> TraceId {
    let mut top = run.clone();
    while let Some(parent) = delegator(&top) {
        top = parent;
    }
    let h = blake3::hash(format!("runtape/otel/trace/{top}").as_bytes());
    let mut b = [0u8; 16];
    b.copy_from_slice(&h.as_bytes()[..16]);
    TraceId::from_bytes(b)
}

/// A span id derived from `parts`.
pub(super) fn span_id(parts: &[&str]) -> SpanId {
    let h = blake3::hash(format!("runtape/otel/span/{}", parts.join("/")).as_bytes());
    let mut b = [0u8; 8];
    b.copy_from_slice(&h.as_bytes()[..8]);
    SpanId::from_bytes(b)
}

/// The run that delegated `run`, read from its id (`PARENT.SEQ.INDEX`); `None` for a run
/// nobody delegated, and for a child whose id was too long and is a hash instead (it then
/// has a trace of its own).
pub(super) fn delegator(run: &RunId) -> Option<RunId> {
    let (rest, index) = run.as_str().rsplit_once('.')?;
    let (parent, seq) = rest.rsplit_once('.')?;
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (numeric(index) && numeric(seq) && !parent.is_empty()).then(|| RunId::new(parent))
}

/// The MCP client span of tool call `call_id` in `run`: what the `traceparent` its request
/// carries names ([`super::mcp_traceparent`]), so it is derived from what the tool knows.
pub(crate) fn mcp_span(run: &RunId, call_id: &str) -> SpanId {
    span_id(&[run.as_str(), "mcp", call_id])
}

/// The span of a run's first take-up: the root of its trace (of its own trace, or for a
/// delegated child a child of the agent activation that delegated it).
pub(crate) fn root_span(run: &RunId) -> SpanId {
    span_id(&[run.as_str(), "root"])
}

/// A link to `run`'s root span, with `runtape.link = why`.
pub(super) fn link(run: &RunId, why: &'static str) -> Link {
    Link::new(
        SpanContext::new(
            trace_id(run),
            root_span(run),
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        ),
        vec![KeyValue::new("runtape.link", why)],
        0,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_and_distinct() {
        let a = RunId::new("01aaaa");
        let b = RunId::new("01bbbb");
        assert_eq!(trace_id(&a), trace_id(&a));
        assert_ne!(trace_id(&a), trace_id(&b));
        assert_ne!(root_span(&a), root_span(&b));
        assert_ne!(trace_id(&a), TraceId::INVALID);
        assert_ne!(root_span(&a), SpanId::INVALID);
    }

    #[test]
    fn a_delegated_child_is_in_its_top_runs_trace() {
        let top = RunId::new("01aaaa");
        let child = RunId::new("01aaaa.3.0");
        let grandchild = RunId::new("01aaaa.3.0.7.1");
        assert_eq!(delegator(&child), Some(top.clone()));
        assert_eq!(delegator(&grandchild), Some(child.clone()));
        assert_eq!(delegator(&top), None);
        assert_eq!(delegator(&RunId::new("01aaaa.x.0")), None);
        assert_eq!(delegator(&RunId::new(".3.0")), None);
        assert_eq!(trace_id(&grandchild), trace_id(&top));
        assert_ne!(root_span(&child), root_span(&top));
    }
}

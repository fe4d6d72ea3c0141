//! W3C trace context for MCP calls: when this process exports traces, each `tools/call`
//! request carries the `traceparent` of its client span in `params._meta` (as the MCP
//! semantic conventions propagate context), so the server's spans join the run's trace.
//!
//! The exporter lives above the tools ([`crate::otel`]), so it installs the function that
//! names a call's span here when it starts ([`propagate_trace_context`]); until then, and in a
//! process that exports nothing, calls carry no trace context.

use std::sync::OnceLock;

use crate::machine::RunId;

/// What names the span of a tool call in a run as a W3C `traceparent`, once installed.
static TRACE_PARENT: OnceLock<fn(&RunId, &str) -> String> = OnceLock::new();

/// Makes every MCP call from now on carry the `traceparent` that `of` gives it. Called once by
/// the OpenTelemetry exporter when it starts; a second call keeps the first function.
pub fn propagate_trace_context(of: fn(&RunId, &str) -> String) {
    let _ = TRACE_PARENT.set(of);
}

/// The `traceparent` of tool call `call_id` in `run`, or `None` while no exporter runs.
pub(super) fn traceparent(run: &RunId, call_id: &str) -> Option<String> {
    TRACE_PARENT.get().map(|of| of(run, call_id))
}

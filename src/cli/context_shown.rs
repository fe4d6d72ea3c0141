//! What `show` prints of an agent's context summary (`on_overflow = { summarize = … }`):
//! the messages a summary call is given, the summary a step recorded and what it replaced.

use super::common::outln;
use crate::machine::ModelRequest;
use crate::machine::context::ContextLedger;
use crate::machine::{AgentId, context_summary::ContextSummary};

/// Under a `CallModel` effect of step `seq`: the summary call's job, or the summary the step
/// recorded (with its text) that the request sends in place of the oldest messages.
pub(crate) fn describe_request(request: &ModelRequest, seq: u64) {
    if let Some(of) = &request.summarize {
        outln!(
            "        summary asked of messages {} to {} of {}'s conversation{} (to fit its context window)",
            of.from,
            of.upto.saturating_sub(1),
            of.agent,
            if of.so_far.is_some() {
                ", folded into the summary so far"
            } else {
                ""
            }
        );
    }
    if let Some(s) = request.summarized.as_ref().filter(|s| s.seq == seq) {
        outln!("        {}", summary_line(s));
        for line in s.text.lines() {
            outln!("          {line}");
        }
    }
}

/// Under an agent of `show RUN`: the summary its requests carry, if any.
pub(crate) fn describe_summary(agent: &AgentId, ledger: &ContextLedger) {
    if let Some(s) = &ledger.summary {
        outln!("context {agent}: {} at step {}", summary_line(s), s.seq);
    }
}

fn summary_line(s: &ContextSummary) -> String {
    format!(
        "summarised messages {} to {} to fit the context window, by {} ({} → {} bytes)",
        s.from,
        s.upto.saturating_sub(1),
        s.by,
        s.replaced,
        s.bytes
    )
}

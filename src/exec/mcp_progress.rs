//! MCP progress notifications into the trace: while a tool call to an MCP server runs, the
//! server may send `notifications/progress`; they are broadcast by the MCP client
//! ([`crate::tool::mcp::progress_events`]) and forwarded here into the run's trace.

use tokio::sync::broadcast;

use super::{Engine, Trace};
use crate::tool::mcp::progress_events;

/// Forwards every MCP progress notification of a run `engine` drives into that run's trace
/// (as `tool.progress` events) for as long as the runtime runs. Call it once per engine, inside
/// a tokio runtime; `runtape` does for the engines it drives runs with.
pub fn forward_mcp_progress(engine: &Engine) -> tokio::task::JoinHandle<()> {
    let engine = engine.clone();
    let mut events = progress_events();
    tokio::spawn(async move {
        loop {
            match events.recv().await {
                Ok(p) => engine.trace_external(
                    p.run,
                    Trace::ToolProgress {
                        call_id: p.call_id,
                        tool: p.tool,
                        progress: p.progress,
                        total: p.total,
                        message: p.message,
                    },
                ),
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    })
}

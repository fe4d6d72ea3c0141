//! [`McpTool`]: one MCP server tool as a runtape [`Tool`].

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::{Map, Value};
use tokio::sync::broadcast;

use super::catalog::McpToolInfo;
use super::connection::ProgressSink;
use super::server::{Call, CallFailure, McpServer};
use super::{IDEMPOTENCY_KEY_META, McpProgress};
use crate::tool::{Tool, ToolAnswer, ToolContext, ToolError};

/// How much later than its own limit the engine's timeout for an MCP call fires, so the
/// call's own (which tells the server `notifications/cancelled`) normally comes first.
const ENGINE_SLACK: Duration = Duration::from_millis(500);

/// A tool of an MCP server, registered with the engine under its `SERVER__TOOL` name. Each
/// call starts the server if needed and sends `tools/call` with the idempotency key in
/// `_meta` under [`IDEMPOTENCY_KEY_META`].
pub struct McpTool {
    info: McpToolInfo,
    server: Arc<McpServer>,
}

impl McpTool {
    /// The tool `info` describes, called on `server`.
    pub fn new(info: McpToolInfo, server: Arc<McpServer>) -> Self {
        McpTool { info, server }
    }

    /// What it is.
    pub fn info(&self) -> &McpToolInfo {
        &self.info
    }

    fn error(&self, what: impl std::fmt::Display) -> ToolError {
        ToolError::new(format!(
            "MCP tool `{}` (server `{}`) {what}",
            self.info.name, self.info.server
        ))
    }

    async fn run(&self, args: Value, ctx: ToolContext) -> Result<ToolAnswer, ToolError> {
        let args = match args {
            Value::Object(map) => map,
            Value::Null => Map::new(),
            other => {
                return Err(self.error(format_args!(
                    "takes a JSON object of arguments, not `{other}`"
                )));
            }
        };
        let mut meta = Map::new();
        meta.insert(
            IDEMPOTENCY_KEY_META.into(),
            Value::String(ctx.idempotency_key.clone()),
        );
        if let Some(traceparent) = super::trace_context::traceparent(&ctx.run_id, &ctx.call_id) {
            meta.insert("traceparent".into(), Value::String(traceparent));
        }
        let limit = self.info.timeout_ms.map(Duration::from_millis);
        let outcome = self
            .server
            .call(Call {
                remote: &self.info.remote,
                args,
                meta,
                limit,
                cancel: &ctx.cancel,
                idempotent: self.info.idempotent,
                progress: self.progress_sink(&ctx),
            })
            .await;
        let result = outcome.map_err(|failure| match failure {
            CallFailure::Unavailable(e) => self.error(format_args!("is unavailable: {}", e.message)),
            CallFailure::Died(note) => self.error(format_args!(
                "failed: the server stopped during the call{note}; the call may or may not have taken effect"
            )),
            CallFailure::Refused(why) => self.error(format_args!("failed: {why}")),
            CallFailure::Oversized(why) => self.error(format_args!("failed: {why}")),
            CallFailure::TimedOut(limit) => self.error(format_args!(
                "timed out after {} ms (the server was told to cancel it)",
                limit.as_millis()
            )),
            CallFailure::Cancelled => self.error("was cancelled"),
        })?;
        super::result::for_model(&result).map_err(ToolError::new)
    }

    /// Publishes the call's progress notifications (see [`progress_events`]).
    fn progress_sink(&self, ctx: &ToolContext) -> ProgressSink {
        let run = ctx.run_id.clone();
        let call_id = ctx.call_id.clone();
        let tool = self.info.name.clone();
        Arc::new(move |p: &rmcp::model::ProgressNotificationParam| {
            let event = McpProgress {
                run: run.clone(),
                call_id: call_id.clone(),
                tool: tool.clone(),
                progress: p.progress,
                total: p.total,
                // The server's words go to observers: no known secret among them.
                message: p
                    .message
                    .as_deref()
                    .map(|m| crate::secrets::scrub_text(m).into_owned()),
            };
            tracing::debug!(tool = %event.tool, progress = event.progress, "MCP progress");
            let _ = progress_channel().send(event);
        })
    }
}

/// The process-wide channel MCP progress notifications are published on.
pub(crate) fn progress_channel() -> &'static broadcast::Sender<McpProgress> {
    static CHANNEL: OnceLock<broadcast::Sender<McpProgress>> = OnceLock::new();
    CHANNEL.get_or_init(|| broadcast::channel(256).0)
}

/// Every progress notification any MCP call in this process receives from now on, with the
/// run and call it belongs to. A slow receiver misses the oldest (the channel keeps 256).
pub fn progress_events() -> broadcast::Receiver<McpProgress> {
    progress_channel().subscribe()
}

impl Tool for McpTool {
    crate::tool::described_by!(info);

    fn timeout(&self) -> Option<Duration> {
        self.info
            .timeout_ms
            .map(|ms| Duration::from_millis(ms) + ENGINE_SLACK)
    }

    fn invoke<'a>(
        &'a self,
        args: Value,
        ctx: ToolContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>> {
        Box::pin(async move { self.run(args, ctx).await.map(|a| a.value) })
    }

    fn answer<'a>(
        &'a self,
        args: Value,
        ctx: ToolContext,
    ) -> BoxFuture<'a, Result<ToolAnswer, ToolError>> {
        Box::pin(self.run(args, ctx))
    }
}

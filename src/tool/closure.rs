//! Tools made from closures: [`FnTool`] for a call that answers at once, [`AsyncFnTool`] for one
//! that waits (on the network, a timer, another task). For tests and small embeddings; a tool
//! with state of its own or a richer lifecycle implements [`Tool`] directly.

use std::future::Future;

use futures_util::future::BoxFuture;
use serde_json::Value;

use super::{Tool, ToolContext, ToolError};
use crate::machine::ToolSpec;

/// A tool described by a [`ToolSpec`] whose call runs a closure that answers at once.
pub struct FnTool<F> {
    spec: ToolSpec,
    f: F,
}

impl<F> FnTool<F>
where
    F: Fn(Value, ToolContext) -> Result<Value, ToolError> + Send + Sync,
{
    /// A tool described by `spec` (its name, description, schema, `read_only`, `idempotent`)
    /// that runs `f`. `f` must not block: a call that waits belongs in an [`AsyncFnTool`].
    pub fn new(spec: ToolSpec, f: F) -> Self {
        FnTool { spec, f }
    }
}

impl<F> Tool for FnTool<F>
where
    F: Fn(Value, ToolContext) -> Result<Value, ToolError> + Send + Sync,
{
    super::described_by!(spec);
    fn invoke<'a>(
        &'a self,
        args: Value,
        ctx: ToolContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>> {
        Box::pin(async move { (self.f)(args, ctx) })
    }
}

/// A tool described by a [`ToolSpec`] whose call is the future a closure returns. When the
/// call times out or the run is cancelled the engine drops the future and fires
/// [`ToolContext::cancel`], so work the call started elsewhere (a spawned task, a child
/// process) should watch that token.
pub struct AsyncFnTool<F> {
    spec: ToolSpec,
    f: F,
}

impl<F, Fut> AsyncFnTool<F>
where
    F: Fn(Value, ToolContext) -> Fut + Send + Sync,
    Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
{
    /// A tool described by `spec` whose calls run the future `f` returns for their arguments
    /// and context. The future owns what it uses (clone shared state into it).
    pub fn new(spec: ToolSpec, f: F) -> Self {
        AsyncFnTool { spec, f }
    }
}

impl<F, Fut> Tool for AsyncFnTool<F>
where
    F: Fn(Value, ToolContext) -> Fut + Send + Sync,
    Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
{
    super::described_by!(spec);
    fn invoke<'a>(
        &'a self,
        args: Value,
        ctx: ToolContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>> {
        Box::pin((self.f)(args, ctx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::{AgentId, RunId};
    use serde_json::json;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio_util::sync::CancellationToken;

    fn ctx() -> ToolContext {
        ToolContext {
            run_id: RunId::new("r"),
            agent: AgentId::from("a"),
            call_id: "c".into(),
            idempotency_key: "r:1:0".into(),
            lease_epoch: 1,
            cancel: CancellationToken::new(),
        }
    }

    fn spec() -> ToolSpec {
        ToolSpec {
            read_only: true,
            idempotent: true,
            schema: json!({"type": "object", "properties": {"q": {"type": "string"}}}),
            ..ToolSpec::new("lookup", "Look something up")
        }
    }

    fn assert_described_by_spec(tool: &dyn Tool) {
        let s = spec();
        assert_eq!(
            (tool.name(), tool.description(), tool.schema()),
            (s.name.as_str(), s.description.as_str(), s.schema)
        );
        assert!(tool.read_only() && tool.idempotent());
    }

    #[tokio::test]
    async fn a_closure_tool_describes_itself_by_its_spec_and_answers_with_its_closure() {
        let tool = FnTool::new(spec(), |args, ctx| Ok(json!([args, ctx.call_id])));
        assert_described_by_spec(&tool);
        assert_eq!(
            tool.invoke(json!({"q": "x"}), ctx())
                .await
                .expect("answers"),
            json!([{"q": "x"}, "c"])
        );
        let failing = FnTool::new(spec(), |_, _| Err(ToolError::new("no")));
        assert!(failing.invoke(json!({}), ctx()).await.is_err());
    }

    #[tokio::test]
    async fn an_async_closure_tool_answers_with_its_future_and_runs_it_only_when_polled() {
        let polled = Arc::new(AtomicUsize::new(0));
        let seen = polled.clone();
        let tool = AsyncFnTool::new(spec(), move |args, ctx: ToolContext| {
            let polled = seen.clone();
            async move {
                polled.fetch_add(1, Ordering::SeqCst);
                tokio::task::yield_now().await;
                Ok(json!([args, ctx.idempotency_key]))
            }
        });
        assert_described_by_spec(&tool);
        let call = tool.invoke(json!({"q": "y"}), ctx());
        assert_eq!(
            polled.load(Ordering::SeqCst),
            0,
            "nothing runs before it is awaited"
        );
        assert_eq!(call.await.expect("answers"), json!([{"q": "y"}, "r:1:0"]));
        assert_eq!(polled.load(Ordering::SeqCst), 1);
        // A call dropped unawaited (a timeout, a cancel) never runs.
        drop(tool.invoke(json!({}), ctx()));
        assert_eq!(polled.load(Ordering::SeqCst), 1);
    }
}

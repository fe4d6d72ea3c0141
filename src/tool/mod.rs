//! Tools: the [`Tool`] trait Rust tools implement, the context a call gets, and the registry
//! the engine looks tools up in by name.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::machine::{AgentId, RunId, ToolSpec};

pub mod answer;
mod closure;
pub mod command;
pub mod confine;
pub mod env;
pub mod mcp;
pub mod orphans;
pub mod retriever;
mod signal;

pub use answer::{ToolAnswer, ToolFile};
pub use closure::{AsyncFnTool, FnTool};

/// The [`Tool`] methods that describe a tool (`name`, `description`, `schema`, `read_only`,
/// `idempotent`), read from the fields of the same names of `self.$field`. For a tool whose
/// description is a value it holds (a [`ToolSpec`], a tool list entry, a command's config).
macro_rules! described_by {
    ($field:ident) => {
        fn name(&self) -> &str {
            &self.$field.name
        }
        fn description(&self) -> &str {
            &self.$field.description
        }
        fn schema(&self) -> serde_json::Value {
            self.$field.schema.clone()
        }
        fn read_only(&self) -> bool {
            self.$field.read_only
        }
        fn idempotent(&self) -> bool {
            self.$field.idempotent
        }
    };
}
pub(crate) use described_by;

/// What a tool call knows about itself.
#[derive(Clone, Debug)]
pub struct ToolContext {
    /// The run.
    pub run_id: RunId,
    /// The agent that asked.
    pub agent: AgentId,
    /// The model's call id.
    pub call_id: String,
    /// Stable for this call across retries and restarts of the same run; distinct between
    /// runs (and forks). A tool that changes the world should use it to make a repeat a
    /// no-op.
    pub idempotency_key: String,
    /// The lease epoch of the driver performing the call (0 outside a driver). Command tools
    /// pass it to their program as `RUNTAPE_LEASE_EPOCH`, so that a later driver of the run can
    /// find and kill programs this one left running ([`orphans`]).
    pub lease_epoch: u64,
    /// Cancelled when the run is cancelled or the call times out; long tools should watch it.
    pub cancel: CancellationToken,
}

/// A tool's failure, fed back to the model as an error result.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ToolError {
    /// What went wrong, for the model and the trace.
    pub message: String,
}

impl ToolError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        ToolError {
            message: message.into(),
        }
    }
}

/// A tool the engine can call. Register it with the engine under [`Tool::name`], and grant it
/// to agents in the spec.
pub trait Tool: Send + Sync {
    /// The name the model calls it by.
    fn name(&self) -> &str;

    /// What it does, for the model.
    fn description(&self) -> &str;

    /// JSON Schema of its arguments; calls that do not validate never reach `invoke`.
    fn schema(&self) -> Value;

    /// True when it changes nothing; agents without an explicit grant get the read-only tools.
    fn read_only(&self) -> bool {
        false
    }

    /// True when performing it twice with the same idempotency key is safe. An interrupted
    /// idempotent call is simply performed again on resume; a non-idempotent one is reported
    /// in doubt and handled by the agent's `on_in_doubt` policy.
    fn idempotent(&self) -> bool {
        false
    }

    /// How long a call may take before it fails with a timeout error fed back to the model;
    /// `None` uses the engine's default.
    fn timeout(&self) -> Option<std::time::Duration> {
        None
    }

    /// Performs the call. The arguments have been validated against [`Tool::schema`].
    fn invoke<'a>(
        &'a self,
        args: Value,
        ctx: ToolContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>>;

    /// Performs the call like [`invoke`](Tool::invoke), with the files (images, PDFs) its
    /// result carries. The default: `invoke`'s value and no files. A tool whose results can
    /// carry files (an MCP tool) overrides it, and its `invoke` gives the same value.
    fn answer<'a>(
        &'a self,
        args: Value,
        ctx: ToolContext,
    ) -> BoxFuture<'a, Result<ToolAnswer, ToolError>> {
        let called = self.invoke(args, ctx);
        Box::pin(async move { called.await.map(ToolAnswer::from) })
    }

    /// Asks whether an interrupted call — the same `args`, the same `ctx.idempotency_key` —
    /// was performed, for agents whose `on_in_doubt` is `reconcile`. Answers JSON:
    /// `{"performed": true, "result": …}` (the result optional), `{"performed": false}`, or
    /// `{"performed": null}` when the tool cannot tell. `None` (the default) means the tool
    /// cannot be asked; the call then counts as unknown and a person decides.
    fn reconcile<'a>(
        &'a self,
        _args: Value,
        _ctx: ToolContext,
    ) -> Option<BoxFuture<'a, Result<Value, ToolError>>> {
        None
    }
}

/// Tools by name.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
    }
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) a tool under its name.
    pub fn register(&mut self, tool: Arc<dyn Tool>) {
        self.tools.insert(tool.name().to_owned(), tool);
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// Names of every registered tool, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }

    /// The spec entry for a registered tool (flags the spec alone decides, such as
    /// `requires_approval`, are off).
    pub fn spec_of(&self, name: &str) -> Option<ToolSpec> {
        let t = self.tools.get(name)?;
        Some(ToolSpec {
            schema: t.schema(),
            read_only: t.read_only(),
            idempotent: t.idempotent(),
            ..ToolSpec::new(t.name(), t.description())
        })
    }
}

//! The run spec file (`runtape.toml`): parsed and validated as a whole by [`load`] before
//! anything runs.
//!
//! [`load`] gives a [`RunFile`]: the machine's validated [`RunSpec`], the [`Setup`] (how to
//! build the providers and command tools, in this process or any other), and the database
//! path the file names. Every problem is one [`ConfigError`] line of the form
//! `FILE:LINE:COL: FIELD: what is wrong – what to do`.
//!
//! # Running a spec file
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use runtape::exec::{Engine, new_run_id};
//!
//! let file = runtape::config::load(std::path::Path::new("runtape.toml"))?;
//! let engine = Engine::in_memory();
//! file.install(&engine)?; // builds providers (checks key variables) and command tools
//! let run = engine
//!     .start(file.spec.clone(), "the goal").with_id(new_run_id()).with_setup(file.setup.to_json()?)
//!     .await?;
//! let end = run.wait().await?;
//! # let _ = end; Ok(()) }
//! ```
//!
//! To resume in another process, read the stored setup back with [`Setup::from_json`],
//! [`Setup::install`] it, and resume the run.
//!
//! # The format
//!
//! ```toml
//! database = "runtape.db"        # optional, relative to this file's directory
//!                                # (the command line's RUNTAPE_DB and --db override it)
//! goal = "Summarise the notes."  # optional: the goal when `runtape run` is given none
//! [run]                          # optional
//! max_transitions = 1000         # hard cap on steps (default 1000)
//! on_exhausted = "fail"          # a run-wide budget running out: "fail" or "pause"
//! durability = "full"            # SQLite commits: "full" (fsync each) or "normal" (a power
//!                                # loss can drop the latest); --durability overrides
//! [run.budget]                   # optional run-wide caps
//! max_turns = 100                # also max_tool_calls, max_tokens, max_cost_usd, max_wall_ms
//!
//! [[providers]]
//! name = "openai"                # agents refer to it by this name (unique)
//! kind = "openai"                # openai | openai-responses | azure | anthropic | ollama
//!                                # | echo | scripted
//! model = "gpt-4o-mini"          # default model of agents using it
//! base_url = "https://api.openai.com/v1"  # optional; http:// only for loopback hosts
//!                                # (azure: the deployment URL, required; api_version = "…")
//! api_key_env = "OPENAI_API_KEY" # the NAME of the key's variable ("" for none); never a key
//! timeout_ms = 600000            # bound on a whole request; idle_timeout_ms bounds silence
//!                                # also stream, max_tokens, pricing
//!
//! [[providers]]
//! name = "script"
//! kind = "scripted"              # offline: turn i of an agent gets replies[i]
//! replies = [
//!   { tool_calls = [{ name = "search", arguments = { q = "x" } }], usage = { input = 10, output = 5 } },
//!   { text = "FOUND it", thinking = "reasoning kept with the message" },
//!   # or { refusal = "I can't help with that." }
//!   # or { error = { class = "provider_unavailable", message = "down" } }
//! ]
//! [providers.by_agent]           # an agent's own script replaces `replies` for it
//! writer = [{ text = "the report" }]
//!
//! [[tools]]
//! name = "search"
//! description = "Search the notes"
//! kind = "command"               # command (default) | human (a person answers)
//! command = ["python3", "tools/search.py"]  # run in this file's directory; a program
//!                                # with a `/` is relative to it, a bare name is on PATH
//! schema = { type = "object", properties = { q = { type = "string" } }, required = ["q"] }
//! timeout_ms = 10000
//! idempotent = true
//! read_only = true
//! requires_approval = false
//! env = ["SEARCH_INDEX"]         # variables passed besides the minimal environment (names;
//!                                # or a table { INDEX = "${SEARCH_INDEX}", MODE = "fast" },
//!                                # see tool::env); their values are scrubbed as secrets
//! env_all = false                # true: the engine's whole environment minus credentials
//! # reconcile = ["tools/was_charged.sh"]  # non-idempotent tools only: asked, by the
//!                                # call's idempotency key, whether an interrupted call
//!                                # was performed (prints {"performed": true|false|null})
//!
//! [[agents]]
//! id = "researcher"
//! system_prompt = "You research."
//! provider = "script"
//! model = "demo"                 # optional: default is the provider's model
//! tools = ["search"]             # optional: default is every read_only tool
//! on_exhausted = "handoff"       # handoff | pause
//! on_in_doubt = "fail"           # fail | retry | ask | reconcile
//! correction_budget = 3
//! max_attempts = 3               # attempts on the primary route for retryable errors
//! backoff = { initial_ms = 500, max_ms = 30000 }
//! cooldown_ms = 60000            # a route that gave up is skipped this long
//! output_schema = { type = "object" }  # or output_schema_file = "answer.schema.json"
//! [agents.model_settings]        # temperature, top_p, seed, stop, max_output_tokens,
//! temperature = 0.2              # reasoning = { effort = "low" }, parallel_tool_calls,
//!                                # strict_tools; refused where the provider cannot honour one
//! [agents.budget]                # max_turns (default 50), max_tool_calls (200), ...
//! max_turns = 20
//! [[agents.fallbacks]]           # tried in order once the primary route gives up
//! provider = "openai"
//! max_attempts = 2
//!
//! [[agents]]
//! id = "writer"
//! provider = "script"
//! delegates = [{ spec = "review.toml", as = "review" }]  # another spec file, run as a
//!                                # child run by `delegate_review(task)` (see spec_files)
//!
//! [plan]                         # optional with one agent
//! entry = "researcher"
//! exits = ["writer"]
//! max_agent_visits = 8
//! [[plan.edges]]
//! from = "researcher"
//! to = "writer"
//! when = { contains = "FOUND" }  # or "always", { regex = "^OK" },
//!                                # { json_pointer = "/verdict", equals = "pass" }
//! ```
//!
//! Command tools follow the protocol in [`crate::tool::command`]. Every provider the file
//! defines is built when the setup is installed, so remove entries you do not use.
//!
//! MCP servers are `[[mcp]]` entries (see [`mcp`] for every key):
//!
//! ```toml
//! [[mcp]]
//! name = "fs"                    # its tools are offered as fs__TOOL
//! command = ["npx", "-y", "@modelcontextprotocol/server-filesystem", "./sandbox"]
//! [[agents]]
//! tools = ["fs__read_text_file", "fs__*"]   # one tool, or every tool of a server
//! ```
//!
//! A file with `[[mcp]]` entries is completed by [`RunFile::connect_mcp`], which starts the
//! servers, lists their tools, adds them to the spec and expands `SERVER__*` grants; call it
//! after [`load`] and before [`RunFile::install`].

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::exec::Engine;
use crate::machine::RunSpec;

mod compensate;
mod compile;
mod context;
mod error;
mod file;
mod guard;
pub mod mcp;
mod mcp_install;
mod memory;
mod models;
mod paths;
mod program;
mod program_env;
mod providers;
mod script;
mod session;
mod setup;
mod source;
mod spec_files;
mod tag_first;

pub use error::{At, ConfigError, Location};
pub use mcp::McpSetup;
pub use script::{MAX_SCRIPT_LATENCY_MS, ScriptSetup, ScriptStep};
pub use setup::{HttpSetup, ProviderSetup, SETUP_VERSION, ScheduledBy, Setup};

/// Spec files larger than this are refused (a spec is a few kilobytes).
pub const MAX_SPEC_BYTES: u64 = 4 << 20;

/// A loaded, validated spec file.
#[derive(Clone)]
pub struct RunFile {
    /// The file, as the caller named it.
    pub path: PathBuf,
    /// The validated spec the machine runs.
    pub spec: RunSpec,
    /// How to build the providers and command tools; store [`Setup::to_json`] with the run.
    pub setup: Setup,
    /// The database the file names, absolute; `None` leaves the choice to the caller.
    pub database: Option<PathBuf>,
    /// `[run] durability`: how the process that starts this file's runs should open a SQLite
    /// database; `None` leaves the choice to the caller (`runtape run`: `--durability`, else
    /// this, else `full`). It takes effect only where the database is opened: pass it in
    /// [`EngineConfig::durability`](crate::exec::EngineConfig::durability) (an engine opened
    /// already keeps the mode it was opened with).
    pub durability: Option<crate::store::Durability>,
    /// The goal the file gives (`runtape run SPEC` without a goal uses it).
    pub goal: Option<String>,
    /// `[session]`: how the file's runs of a session keep their history (used by
    /// `runtape run --session`; the defaults when the file has no `[session]`).
    pub session: crate::exec::SessionSettings,
    /// The bytes of the spec's goal attachments ([`Spec::attachments`](crate::machine::Spec::attachments)),
    /// in order: set by `runtape run --attach` (`ops::attach`), stored as blobs by the run's
    /// first transition. Empty for a file as written.
    pub files: Vec<Vec<u8>>,
    /// The text, to point install errors at their line.
    text: Arc<str>,
    /// Set while the file's MCP servers have not been listed: the MCP grants held back.
    mcp_pending: Option<mcp::PendingGrants>,
    /// The names of the file's own `[[mcp]]` servers (the setup also holds its delegate spec
    /// files' servers).
    own_mcp: Vec<String>,
    /// Delegate spec files whose MCP grants wait for their servers to be listed.
    delegate_mcp: Vec<spec_files::PendingDelegate>,
    /// `[[mcp]] install` of the file's own servers, by server name: named when one cannot
    /// be started.
    mcp_install: std::collections::BTreeMap<String, String>,
}

/// What [`RunFile::connect_mcp`] found.
#[derive(Clone, Default)]
pub struct McpListing {
    /// Each server, in file order, with its tools.
    pub servers: Vec<crate::tool::mcp::Listed>,
    /// Tools that cannot be offered and overrides naming no tool, one line each.
    pub warnings: Vec<String>,
}

impl std::fmt::Debug for RunFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunFile")
            .field("path", &self.path)
            .field("spec", &self.spec)
            .field("setup", &self.setup)
            .field("database", &self.database)
            .field("durability", &self.durability)
            .field("goal", &self.goal)
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

impl RunFile {
    /// [`Setup::install`]s the file's providers and tools into `engine`, with errors pointing
    /// at the file (a key variable that is unset points at the provider's `api_key_env`).
    /// Call it before starting a run of [`spec`](Self::spec).
    pub fn install(&self, engine: &Engine) -> Result<(), ConfigError> {
        if self.mcp_pending() {
            return Err(ConfigError::invalid(
                "mcp",
                "the file's MCP servers have not been listed yet – call RunFile::connect_mcp after load",
            ));
        }
        self.setup.install(engine).map_err(|e| self.locate(e))
    }

    /// Whether the file (or a delegate's spec file it names) names MCP servers that
    /// [`connect_mcp`](Self::connect_mcp) has not listed yet.
    pub fn mcp_pending(&self) -> bool {
        self.mcp_pending.is_some() || !self.delegate_mcp.is_empty()
    }

    /// Starts the file's MCP servers on `hub` (all at once), lists their tools, adds every
    /// offered tool to [`spec`](Self::spec) and [`setup`](Self::setup), and expands the
    /// agents' `SERVER__*` grants. A stdio server's program is looked for here, not at load
    /// (a replay from a cassette starts no server and needs none). Errors name the server
    /// whose program is missing or that failed to start or initialise,
    /// or the grant naming a tool no server offers, and point at the file. Does nothing for a
    /// file without `[[mcp]]`, or when called again.
    pub async fn connect_mcp(
        &mut self,
        hub: &crate::tool::mcp::McpHub,
    ) -> Result<McpListing, ConfigError> {
        if !self.mcp_pending() {
            return Ok(McpListing::default());
        }
        mcp::check_programs(&self.setup.mcp, &self.mcp_install).map_err(|e| self.locate(e))?;
        let configs: Vec<_> = self.setup.mcp.iter().map(|m| m.server.clone()).collect();
        let keys: Vec<String> = self.setup.key_variables().map(str::to_owned).collect();
        let servers = crate::tool::mcp::list_all(hub, &configs, &keys)
            .await
            .map_err(|e| {
                let i = configs.iter().position(|c| c.name == e.server).unwrap_or(0);
                let mut said = e.to_string();
                if let Some(install) = self.mcp_install.get(&e.server) {
                    said.push_str(&format!("; if it is not installed: `{install}`"));
                }
                self.locate(ConfigError::invalid(format!("mcp[{i}]"), said))
            })?;
        self.apply_listing(servers)
    }

    /// [`connect_mcp`](Self::connect_mcp) with the tool lists taken from `catalogs` (server
    /// name → the tools, as a cassette records them) instead of from the servers, which are
    /// not started. Every server of the file must have a catalog; errors say which has none.
    pub fn use_recorded_mcp(
        &mut self,
        hub: &crate::tool::mcp::McpHub,
        catalogs: &std::collections::BTreeMap<String, Vec<crate::tool::mcp::McpToolInfo>>,
    ) -> Result<McpListing, ConfigError> {
        if !self.mcp_pending() {
            return Ok(McpListing::default());
        }
        let keys: Vec<String> = self.setup.key_variables().map(str::to_owned).collect();
        let mut servers = Vec::with_capacity(self.setup.mcp.len());
        for (i, m) in self.setup.mcp.iter().enumerate() {
            let Some(tools) = catalogs.get(&m.server.name) else {
                return Err(self.locate(ConfigError::invalid(
                    format!("mcp[{i}].name"),
                    format!(
                        "the cassette has no tool list of MCP server `{}` – replay a cassette exported from a run of this spec",
                        m.server.name
                    ),
                )));
            };
            servers.push(crate::tool::mcp::Listed {
                server: hub.server(&m.server, &keys),
                server_info: "(recorded)".into(),
                protocol: String::new(),
                catalog: crate::tool::mcp::Catalog {
                    tools: tools.clone(),
                    ..Default::default()
                },
            });
        }
        self.apply_listing(servers)
    }

    /// Folds what `servers` (every server of the setup, in its order) listed into the spec:
    /// the file's own servers' tools into its own spec, each delegate file's into its embedded
    /// spec.
    fn apply_listing(
        &mut self,
        servers: Vec<crate::tool::mcp::Listed>,
    ) -> Result<McpListing, ConfigError> {
        let mut spec = self.spec.spec().clone();
        let mut setups = self.setup.mcp.clone();
        let mut warnings = Vec::new();
        if let Some(pending) = &self.mcp_pending {
            let (mut own, listed) = spec_files::subset(&setups, &servers, &self.own_mcp);
            warnings =
                mcp::apply(&mut spec, &mut own, pending, &listed).map_err(|e| self.locate(e))?;
            spec_files::write_back(&mut setups, own);
        }
        let theirs = spec_files::apply_mcp(&mut spec, &mut setups, &self.delegate_mcp, &servers)
            .map_err(|e| self.locate(e))?;
        warnings.extend(theirs);
        self.spec = RunSpec::build(spec).map_err(|e| self.locate(ConfigError::from_spec(e)))?;
        self.setup.mcp = setups;
        self.mcp_pending = None;
        self.delegate_mcp.clear();
        Ok(McpListing { servers, warnings })
    }

    fn locate(&self, e: ConfigError) -> ConfigError {
        match source::Document::parse(&self.path, &self.text) {
            Ok(doc) => e.located(|field| doc.locate(field)),
            Err(_) => e,
        }
    }
}

/// Reads, parses and validates the spec file at `path`: TOML syntax, every field's name and
/// type, cross references (providers, tools, plan agents), base URLs, command programs, and
/// the machine's own checks. Nothing is built or run; key variables are checked later, by
/// [`RunFile::install`]. Relative paths in the file (database, programs) start at the file's
/// directory.
pub fn load(path: &Path) -> Result<RunFile, ConfigError> {
    let text = read(path)?;
    load_text(path, &text)
}

/// [`load`] for a delegate's spec file named (directly or through others) by the files of
/// `chain`, outermost first, this one last.
fn load_in_chain(path: &Path, chain: &[PathBuf]) -> Result<RunFile, ConfigError> {
    let text = read(path)?;
    load_text_in_chain(path, &text, chain)
}

/// [`load`] for spec text already in memory: `text` is read as if it came from `path`, which
/// errors name and whose directory (which must exist) relative paths start at. Text larger
/// than [`MAX_SPEC_BYTES`] is refused.
pub fn load_text(path: &Path, text: &str) -> Result<RunFile, ConfigError> {
    let me = spec_dir(path)?.join(path.file_name().unwrap_or(path.as_os_str()));
    load_text_in_chain(path, text, &[me])
}

fn load_text_in_chain(path: &Path, text: &str, chain: &[PathBuf]) -> Result<RunFile, ConfigError> {
    if text.len() as u64 > MAX_SPEC_BYTES {
        return Err(ConfigError::Read {
            file: path.to_path_buf(),
            reason: format!("it is larger than {} MiB", MAX_SPEC_BYTES >> 20),
        });
    }
    let spec_dir = spec_dir(path)?;
    let doc = source::Document::parse(path, text)?;
    let raw: file::RawFile = doc.deserialize()?;
    let goal = raw.goal.clone();
    let mcp_install =
        mcp_install::hints(&raw.mcp).map_err(|e| e.located(|field| doc.locate(field)))?;
    let mut compiled =
        compile::compile(raw, &spec_dir).map_err(|e| e.located(|field| doc.locate(field)))?;
    let own_setups = compiled.setup.mcp.clone();
    let delegate_mcp = spec_files::attach(
        &mut compiled.spec,
        &mut compiled.setup,
        &compiled.spec_files,
        &spec_dir,
        chain,
    )
    .map_err(|e| e.located(|field| doc.locate(field)))?;
    let mcp_pending =
        (!own_setups.is_empty()).then(|| mcp::hold_grants(&mut compiled.spec.agents, &own_setups));
    let spec = RunSpec::build(compiled.spec).map_err(|e| {
        let e = match &mcp_pending {
            Some(pending) => mcp::restore_path(e, pending),
            None => e,
        };
        ConfigError::from_spec(e).located(|field| doc.locate(field))
    })?;
    Ok(RunFile {
        path: path.to_path_buf(),
        spec,
        setup: compiled.setup,
        database: compiled.database,
        durability: compiled.durability,
        goal,
        session: compiled.session,
        files: Vec::new(),
        text: Arc::from(text),
        mcp_pending,
        own_mcp: own_setups.iter().map(|m| m.server.name.clone()).collect(),
        delegate_mcp,
        mcp_install,
    })
}

fn read(path: &Path) -> Result<String, ConfigError> {
    let fail = |reason: String| ConfigError::Read {
        file: path.to_path_buf(),
        reason,
    };
    let file = std::fs::File::open(path).map_err(|e| fail(e.to_string()))?;
    let mut bytes = Vec::new();
    file.take(MAX_SPEC_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| fail(e.to_string()))?;
    if bytes.len() as u64 > MAX_SPEC_BYTES {
        return Err(fail(format!(
            "it is larger than {} MiB",
            MAX_SPEC_BYTES >> 20
        )));
    }
    String::from_utf8(bytes).map_err(|e| {
        fail(format!(
            "it is not UTF-8 text (bad byte at offset {})",
            e.utf8_error().valid_up_to()
        ))
    })
}

/// The file's directory, absolute and UTF-8 (the setup stores it as JSON).
fn spec_dir(path: &Path) -> Result<PathBuf, ConfigError> {
    let fail = |reason: String| ConfigError::Read {
        file: path.to_path_buf(),
        reason,
    };
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let dir = parent
        .canonicalize()
        .map_err(|e| fail(format!("its directory cannot be resolved ({e})")))?;
    if dir.to_str().is_none() {
        return Err(fail(format!(
            "its directory `{}` is not a UTF-8 path",
            dir.display()
        )));
    }
    Ok(dir)
}

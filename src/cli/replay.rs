//! `runtape replay SPEC --cassette FILE [GOAL]`: a run whose model replies — and, from a
//! cassette that recorded them, MCP tool lists and results, global memory, a session run's
//! starting history and the retriever's passages — come from a recording.

use std::path::Path;
use std::sync::Arc;

use super::common::{CliError, db_path, outln};
use super::drive::{announce, follow};
use super::runs::{Common, engine};
use crate::cassette::{CassetteError, CassetteProvider, RecordedRetrievals, ReplayOptions};
use crate::config;
use crate::exec::new_run_id;
use crate::machine::SESSION_SEMANTICS;
use crate::term::{StopSignals, say};

/// How `replay` reads and serves its cassette.
pub(crate) struct ReplayFlags {
    /// A request that differs from the recording stops the replay.
    pub(crate) strict: bool,
    /// Accept a cassette without integrity hashes, with a warning.
    pub(crate) allow_unverified: bool,
    /// The files the recorded goal carried (`--attach`), given again.
    pub(crate) attach: Vec<std::path::PathBuf>,
}

/// `runtape replay SPEC --cassette FILE [GOAL]`: a real run whose model replies come from the
/// cassette (strictly by default, integrity required); command tools run as usual, and MCP
/// tools are answered from the cassette when it carries their servers' catalogs (a cassette
/// exported from a run that recorded them), so no server is started. A cassette of a session
/// run begins the replay with the history the run began with (the replay is not a run of the
/// session), and recorded retrievals are served instead of running the retriever.
pub(crate) async fn replay(
    spec: &Path,
    cassette: &Path,
    goal: Option<String>,
    flags: ReplayFlags,
    common: Common,
) -> Result<u8, CliError> {
    let mut file = config::load(spec)?;
    // The goal's files, checked before anything is written.
    crate::ops::attach(&mut file, &flags.attach)?;
    let loaded = super::cassettes::load(cassette, flags.allow_unverified)?;
    // A cassette exported from a run that recorded its MCP tool lists carries them and the
    // tools' results: the replay then starts no server.
    let recorded_mcp = file.mcp_pending() && !loaded.catalogs().is_empty();
    let recorded_results = crate::cassette::RecordedToolResults::of(&loaded);
    let recorded_changes = if recorded_mcp {
        recorded_catalog_changes(&loaded)?
    } else {
        Vec::new()
    };
    if recorded_mcp {
        let catalogs = recorded_catalogs(&loaded)?;
        let listing = file.use_recorded_mcp(crate::tool::mcp::McpHub::global(), &catalogs)?;
        for warning in &listing.warnings {
            eprintln!("warning: {warning}");
        }
    } else {
        crate::ops::connect_mcp(&mut file, crate::term::note).await?;
    }
    // Global memory as the recorded run saw it (revision 5): the replay reads and writes none.
    let recorded_memory = crate::cassette::RecordedMemoryPlayer::of(&loaded);
    // The history a session run began with, and the retriever's answers (revision 5).
    let recorded_session = loaded.session().cloned();
    if recorded_session.is_some() && file.spec.spec().semantics < SESSION_SEMANTICS {
        return Err(CliError::usage(format!(
            "the cassette records a run of a session, which needs revision {SESSION_SEMANTICS} of the machine's rules; {} follows {}",
            spec.display(),
            file.spec.spec().semantics
        )));
    }
    let recorded_retrievals = RecordedRetrievals::of(&loaded, flags.strict).map(Arc::new);
    let provider = Arc::new(
        CassetteProvider::new(
            loaded,
            ReplayOptions {
                strict: flags.strict,
                hash_filter: None,
            },
        )
        .map_err(|e| CliError::usage(e.to_string()))?,
    );
    let goal = goal
        .or_else(|| recorded_session.as_ref().map(|s| s.goal().to_owned()))
        .or_else(|| file.goal.clone())
        .ok_or_else(|| CliError::usage("no goal: give one, or set `goal` in the spec file"))?;
    let db = db_path(common.db.as_deref(), file.database.as_deref());
    let common = Common {
        durability: common.durability.or(file.durability),
        ..common
    };
    let engine = engine(&db, &common, true)?;
    if let Some(memory) = recorded_memory {
        engine.use_memory_source(Arc::new(memory));
    }
    match &recorded_retrievals {
        Some(retrievals) => engine.use_retrieval_source(retrievals.clone()),
        // An older cassette, or a run that retrieved nothing: the retriever runs live.
        None => {
            if let Some(config) = &file.setup.retriever {
                let keys: Vec<&str> = file.setup.key_variables().collect();
                engine.register_retriever(crate::tool::retriever::Retriever::command(
                    config,
                    keys.iter().copied(),
                ));
            }
        }
    }
    file.setup.register_secrets();
    for tool in file.setup.command_tools() {
        engine.register_tool(Arc::new(tool));
    }
    if recorded_mcp {
        for m in &file.setup.mcp {
            for info in &m.tools {
                engine.register_tool(Arc::new(crate::cassette::RecordedTool::new(
                    info.clone(),
                    recorded_results.clone(),
                )));
            }
            let of_server = |changes: &[RecordedList], path: &str| {
                changes
                    .iter()
                    .filter(|(p, server, _, _)| p == path && *server == m.server.name)
                    .map(|(_, _, at, tools)| (*at, tools.clone()))
                    .collect::<Vec<_>>()
            };
            let served = provider.clone();
            let position: crate::cassette::ReplayPosition =
                Arc::new(move |path| served.position_in(path) as u64);
            // Each child's own lists (a tree's cassette): served to the child at its place.
            let mut catalog = crate::cassette::RecordedCatalog::new(
                &m.server.name,
                m.tools.clone(),
                recorded_results.clone(),
            )
            .with_changes(of_server(&recorded_changes, ""), position);
            for child in provider.cassette().children() {
                catalog = catalog
                    .with_child_changes(&child.path, of_server(&recorded_changes, &child.path));
            }
            engine.register_tool_lister(Arc::new(catalog));
        }
    } else {
        for tool in file.setup.mcp_tools(crate::tool::mcp::McpHub::global()) {
            engine.register_tool(Arc::new(tool));
        }
    }
    // Every route of the spec and of its delegates' spec files: children ask the cassette too.
    let mut specs = vec![file.spec.spec()];
    while let Some(s) = specs.pop() {
        for agent in &s.agents {
            for route in &agent.routes {
                engine.register_provider(&route.provider, provider.clone());
            }
        }
        specs.extend(s.spec_delegates.iter().map(|d| d.spec.as_ref()));
    }
    let grace = common.grace()?;
    let signals = StopSignals::install()?;
    let id = new_run_id();
    let start = engine
        .start(file.spec.clone(), &goal)
        .with_id(id.clone())
        .with_files(file.files.clone());
    let start = match &recorded_session {
        Some(s) => {
            start.replaying_session(s.name(), s.index(), file.session.clone(), s.seed().clone())
        }
        None => start,
    };
    let handle = start.await?;
    // As for `run`: announced once the row exists; a closed stdout pauses the replay.
    announce(id.as_str(), "replaying", common.json)?;
    let code = follow(&engine, handle, common.json, grace, signals).await?;
    // A retrieval the recording could not serve cancelled the run: that is why it stopped.
    if let Some(e) = recorded_retrievals.as_ref().and_then(|r| r.first_error()) {
        let text = e.to_string();
        let first = text.lines().next().unwrap_or_default();
        return Err(CliError::failed(format!("replay stopped: {first}")));
    }
    if let Some(e) = provider.first_error() {
        // The request diff of a mismatch is a report, not part of the one-line error.
        let mismatch = match &e {
            CassetteError::InChild { error, .. } => error.as_ref(),
            e => e,
        };
        if let CassetteError::Mismatch { diff, .. } = mismatch
            && !common.json
        {
            outln!("{}", diff.trim_end());
        }
        let text = e.to_string();
        let first = text.lines().next().unwrap_or_default();
        return Err(CliError::failed(format!("replay stopped: {first}")));
    }
    if !common.json {
        let children = provider.cassette().children().len();
        say!(
            "replayed {} of {} recorded model turns from {}{}",
            provider.served(),
            provider.cassette().len(),
            cassette.display(),
            if children == 0 {
                String::new()
            } else {
                format!(" ({children} child runs from their own sections)")
            }
        );
        if let Some(r) = &recorded_retrievals {
            say!(
                "served {} recorded retrievals (the retriever was not run)",
                r.served()
            );
            for (path, index) in r.drifted() {
                let whose = if path.is_empty() {
                    String::new()
                } else {
                    format!(" of child {path}")
                };
                say!(
                    "retrieval {index}{whose} asked something else than was recorded (served anyway: --non-strict)"
                );
            }
        }
        if let Some(s) = &recorded_session {
            say!(
                "began with the history run {} of session {} began with (a replay is not a run of the session)",
                s.index(),
                s.name()
            );
        }
    }
    Ok(code)
}

/// The cassette's MCP catalogs as tool lists; one that is not a tool list is an error naming
/// its server.
fn recorded_catalogs(
    cassette: &crate::cassette::Cassette,
) -> Result<std::collections::BTreeMap<String, Vec<crate::tool::mcp::McpToolInfo>>, CliError> {
    cassette
        .catalogs()
        .iter()
        .map(|(server, value)| {
            serde_json::from_value(value.clone())
                .map(|tools| (server.clone(), tools))
                .map_err(|e| {
                    CliError::usage(format!(
                        "the cassette's tool list of MCP server `{server}` is not one ({e}) – export the cassette again with `runtape cassette export`"
                    ))
                })
        })
        .collect()
}

/// A recorded later tool list: `(run's path in the tree, server, model calls that run made
/// before it, tools)`.
type RecordedList = (String, String, u64, Vec<crate::tool::mcp::McpToolInfo>);

/// The cassette's later MCP tool lists, in order: the run's own (path `""`), then each child's
/// own lists (tree order); one that is not a tool list is an error naming its server (and
/// child).
fn recorded_catalog_changes(
    cassette: &crate::cassette::Cassette,
) -> Result<Vec<RecordedList>, CliError> {
    let paths = std::iter::once("").chain(cassette.children().iter().map(|c| c.path.as_str()));
    paths
        .flat_map(|path| cassette.catalog_changes_in(path).iter().map(move |c| (path, c)))
        .map(|(path, change)| {
            serde_json::from_value(change.catalog.clone())
                .map(|tools| (path.to_owned(), change.server.clone(), change.at_entry, tools))
                .map_err(|e| {
                    let whose = if path.is_empty() {
                        String::new()
                    } else {
                        format!(" (child {path})")
                    };
                    CliError::usage(format!(
                        "the cassette's later tool list of MCP server `{}`{whose} is not one ({e}) – export the cassette again with `runtape cassette export`",
                        change.server
                    ))
                })
        })
        .collect()
}

//! `runtape memory ls|show|rm`: look at global memories and at a run's memory at any step,
//! and forget a global key by hand (recorded: a version without a value and a chained removal
//! record naming who and when, signed with the receipt key when one is configured).

use std::collections::BTreeMap;
use std::path::Path;

use clap::Subcommand;
use serde_json::json;

use super::common::{CliError, json_u64, open_existing, outln, parse_run_at, print_json};
use crate::history;
use crate::machine::{AgentId, Memory, MemoryScope};
use crate::store::global_memory::latest_of;
use crate::store::{GlobalRow, Removal, Store, Write};

/// `runtape memory ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum MemoryAction {
    /// List global memories, the keys of one, or a run's memory at a step.
    ///
    /// With no option, every global memory; with `--name`, its keys; with `--run RUN[@SEQ]`,
    /// the run's memory as it was at that step.
    Ls {
        /// A global memory: list its keys.
        #[arg(long, conflicts_with = "run")]
        name: Option<String>,
        /// A run (RUN or RUN@SEQ): list its memory at that step.
        #[arg(long, value_name = "RUN[@SEQ]")]
        run: Option<String>,
        /// Only this scope: agent, shared or global.
        #[arg(long)]
        scope: Option<String>,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Show a key's value in a global memory, or in a run's memory at a step.
    ///
    /// With `--name`, in that global memory (`--history` lists every version and who wrote
    /// it); with `--run RUN[@SEQ]`, in the run's memory at that step.
    Show {
        /// The key.
        key: String,
        /// A global memory.
        #[arg(long, conflicts_with = "run", required_unless_present = "run")]
        name: Option<String>,
        /// A run (RUN or RUN@SEQ).
        #[arg(long, value_name = "RUN[@SEQ]")]
        run: Option<String>,
        /// The scope to look in (with --run; default: agent, then shared, then global).
        #[arg(long)]
        scope: Option<String>,
        /// Whose agent notes (with --run; default: the agent active at that step).
        #[arg(long)]
        agent: Option<String>,
        /// Every version of the key, oldest first (with --name).
        #[arg(long, requires = "name")]
        history: bool,
        /// One JSON object (one per version with --history).
        #[arg(long)]
        json: bool,
    },
    /// Forget a key of a global memory (recorded; asks for --yes).
    ///
    /// The key gets a new version without a value, and a removal record (who, when) chained to
    /// the ones before it.
    Rm {
        /// The key.
        key: String,
        /// The global memory.
        #[arg(long)]
        name: String,
        /// Only `global` can be removed (agent and shared memory are part of a run's history).
        #[arg(long)]
        scope: Option<String>,
        /// Really remove it.
        #[arg(long)]
        yes: bool,
        /// Sign the removal record with this key file (default: $RUNTAPE_RECEIPT_KEY; neither
        /// means a record that is only hash-chained).
        #[arg(long, value_name = "FILE")]
        receipt_key: Option<std::path::PathBuf>,
        /// The removal as one JSON object.
        #[arg(long)]
        json: bool,
    },
}

/// Runs `runtape memory ACTION` against the database at `db`.
pub(crate) fn memory(db: &Path, action: MemoryAction) -> Result<(), CliError> {
    match action {
        MemoryAction::Ls {
            name,
            run,
            scope,
            json,
        } => {
            let scope = parse_scope(scope.as_deref())?;
            let store = open_existing(db)?;
            match (name, run) {
                (Some(name), _) => ls_global(store.as_ref(), &name, json),
                (None, Some(run)) => ls_run(store.as_ref(), &run, scope, json),
                (None, None) => ls_names(store.as_ref(), json),
            }
        }
        MemoryAction::Show {
            key,
            name,
            run,
            scope,
            agent,
            history,
            json,
        } => {
            let scope = parse_scope(scope.as_deref())?;
            let store = open_existing(db)?;
            match (name, run) {
                (Some(name), _) => show_global(store.as_ref(), &name, &key, history, json),
                (None, Some(run)) => show_run(store.as_ref(), &run, &key, scope, agent, json),
                (None, None) => Err(CliError::usage(
                    "say whose memory: --name NAME (a global memory) or --run RUN[@SEQ]",
                )),
            }
        }
        MemoryAction::Rm {
            key,
            name,
            scope,
            yes,
            receipt_key,
            json,
        } => {
            if let Some(scope) = parse_scope(scope.as_deref())?
                && scope != MemoryScope::Global
            {
                return Err(CliError::usage(format!(
                    "{scope} memory is part of a run's history and cannot be removed; fork the run to change it"
                )));
            }
            if !yes {
                return Err(CliError::usage(format!(
                    "removing `{key}` from global memory `{name}` is recorded and cannot be undone; add --yes to do it"
                )));
            }
            rm(db, &name, &key, receipt_key.as_deref(), json)
        }
    }
}

fn parse_scope(scope: Option<&str>) -> Result<Option<MemoryScope>, CliError> {
    scope
        .map(|s| {
            MemoryScope::parse(s).ok_or_else(|| {
                CliError::usage(format!(
                    "`{}` is not a memory scope: give agent, shared or global",
                    super::common::quoted(s)
                ))
            })
        })
        .transpose()
}

fn ls_names(store: &dyn Store, json: bool) -> Result<(), CliError> {
    let names = store.memory_names()?;
    let removals = store.memory_removals()?;
    for name in &names {
        let rows = store.memory_rows(name, false)?;
        let versions = rows.len() as u64;
        let latest = latest_of(rows);
        let held: Vec<&GlobalRow> = latest.values().filter(|r| r.value.is_some()).collect();
        let bytes: usize = held
            .iter()
            .map(|r| r.key.len() + r.value.as_ref().map_or(0, String::len))
            .sum();
        if json {
            print_json(&json!({
                "type": "memory", "name": name, "keys": held.len(),
                "bytes": bytes, "versions": json_u64(versions),
            }))?;
        } else {
            outln!(
                "{name}  {} keys, {bytes} bytes, {versions} versions",
                held.len()
            );
        }
    }
    let tip = removals.last().map(|r| r.chain.to_hex());
    let signed = removals.iter().filter(|r| r.seal.is_some()).count();
    if json {
        print_json(
            &json!({"type": "removals", "count": removals.len(), "signed": signed, "chain_tip": tip}),
        )?;
    } else if names.is_empty() {
        outln!("no global memory in this database");
    }
    if !json && let Some(tip) = tip {
        outln!(
            "{} removals (runtape memory rm; {signed} signed), chain tip {tip} — keep it elsewhere: nothing in the database can show that the newest removal was dropped",
            removals.len()
        );
    }
    Ok(())
}

/// Who wrote a row, for people.
fn origin(r: &GlobalRow) -> String {
    match (&r.run, r.effect, r.removal) {
        (Some(run), Some(e), _) => format!("run {run}@{}", e.seq),
        (_, _, Some(id)) => format!("removed (removal {id})"),
        _ => "unknown".into(),
    }
}

fn row_json(r: &GlobalRow) -> serde_json::Value {
    json!({
        "type": "memory_key", "name": r.name, "key": r.key, "version": json_u64(r.version),
        "value": r.value, "run": r.run, "effect_seq": r.effect.map(|e| json_u64(e.seq)),
        "removal": r.removal.map(json_u64),
    })
}

fn ls_global(store: &dyn Store, name: &str, json: bool) -> Result<(), CliError> {
    let latest = latest_of(store.memory_rows(name, false)?);
    if latest.is_empty() && !json {
        outln!("global memory `{name}` is empty (no run has written to it)");
    }
    let forgotten = latest.values().filter(|r| r.value.is_none()).count();
    for r in latest.values().filter(|r| r.value.is_some() || json) {
        if json {
            print_json(&row_json(r))?;
        } else {
            let bytes = r.value.as_ref().map_or(0, String::len);
            outln!("{}  v{}  {bytes} bytes  {}", r.key, r.version, origin(r));
        }
    }
    if !json && forgotten > 0 {
        outln!("({forgotten} forgotten keys; `runtape memory show KEY --name {name} --history`)");
    }
    Ok(())
}

fn ls_run(
    store: &dyn Store,
    run: &str,
    scope: Option<MemoryScope>,
    json: bool,
) -> Result<(), CliError> {
    let (id, seq) = parse_run_at(run)?;
    let view = history::show(store, &id, seq)?;
    let Some(data) = view.state.data() else {
        if !json {
            outln!("run {id} has not started at step {}", view.seq);
        }
        return Ok(());
    };
    for (label, sc, entries) in scopes_of(&data.memory) {
        if scope.is_some_and(|s| s != sc) {
            continue;
        }
        for (key, value) in entries {
            if json {
                print_json(&json!({
                    "type": "memory_key", "run": id, "seq": json_u64(view.seq),
                    "scope": sc, "owner": label, "key": key, "value": value,
                }))?;
            } else {
                outln!("{label:<14} {key}  ({} bytes)", value.len());
            }
        }
    }
    if let Some(g) = &data.memory.global
        && scope.is_none_or(|s| s == MemoryScope::Global)
    {
        for (key, staged) in &g.staged {
            if json {
                print_json(&json!({
                    "type": "memory_staged", "run": id, "seq": json_u64(view.seq),
                    "name": g.name, "key": key, "base": json_u64(staged.base),
                    "value": staged.value, "by": staged.by,
                }))?;
            } else {
                let what = if staged.value.is_some() {
                    "write"
                } else {
                    "forget"
                };
                outln!(
                    "staged         {key}  ({what} by {}, over version {}; published when the run completes)",
                    staged.by,
                    staged.base
                );
            }
        }
    }
    Ok(())
}

/// Every scope of `memory` with its entries as the run sees them: each agent's notes
/// (`agent:ID`), the shared notes, and the global view with the staged writes applied.
fn scopes_of(memory: &Memory) -> Vec<(String, MemoryScope, BTreeMap<String, String>)> {
    let mut out: Vec<(String, MemoryScope, BTreeMap<String, String>)> = memory
        .agents
        .iter()
        .map(|(a, notes)| (format!("agent:{a}"), MemoryScope::Agent, notes.clone()))
        .collect();
    out.push(("shared".into(), MemoryScope::Shared, memory.shared.clone()));
    if let Some(g) = &memory.global {
        out.push((
            format!("global:{}", g.name),
            MemoryScope::Global,
            g.visible(),
        ));
    }
    out
}

fn show_global(
    store: &dyn Store,
    name: &str,
    key: &str,
    history: bool,
    json: bool,
) -> Result<(), CliError> {
    let rows: Vec<GlobalRow> = store
        .memory_rows(name, false)?
        .into_iter()
        .filter(|r| r.key == key)
        .collect();
    let Some(latest) = rows.last() else {
        return Err(CliError::usage(format!(
            "global memory `{name}` has no key `{key}`; `runtape memory ls --name {name}` lists its keys"
        )));
    };
    let shown: Vec<&GlobalRow> = if history {
        rows.iter().collect()
    } else {
        vec![latest]
    };
    for r in shown {
        if json {
            print_json(&row_json(r))?;
        } else {
            outln!("{name}/{key} v{} ({})", r.version, origin(r));
            outln!("{}", r.value.as_deref().unwrap_or("(forgotten)"));
        }
    }
    Ok(())
}

fn show_run(
    store: &dyn Store,
    run: &str,
    key: &str,
    scope: Option<MemoryScope>,
    agent: Option<String>,
    json: bool,
) -> Result<(), CliError> {
    let (id, seq) = parse_run_at(run)?;
    let view = history::show(store, &id, seq)?;
    let missing = || {
        CliError::usage(format!(
            "run {id} has no memory key `{key}` at step {} (in the scope asked); `runtape memory ls --run {id}@{}` lists it",
            view.seq, view.seq
        ))
    };
    let Some(data) = view.state.data() else {
        return Err(missing());
    };
    let agent = agent.map_or_else(|| data.active.clone(), |a| AgentId::from(a.as_str()));
    let order = match scope {
        Some(s) => vec![s],
        None => vec![MemoryScope::Agent, MemoryScope::Shared, MemoryScope::Global],
    };
    let found = order
        .into_iter()
        .find_map(|s| data.memory.visible(s, &agent).remove(key).map(|v| (s, v)));
    let Some((scope, value)) = found else {
        return Err(missing());
    };
    if json {
        print_json(&json!({
            "type": "memory_key", "run": id, "seq": json_u64(view.seq), "scope": scope,
            "agent": (scope == MemoryScope::Agent).then_some(&agent), "key": key, "value": value,
        }))
    } else {
        outln!("{key} ({scope} memory of run {id} at step {})", view.seq);
        outln!("{value}");
        Ok(())
    }
}

fn rm(
    db: &Path,
    name: &str,
    key: &str,
    receipt_key: Option<&Path>,
    json: bool,
) -> Result<(), CliError> {
    if let Some(path) = receipt_key
        && let Ok(text) = std::fs::read_to_string(path)
    {
        crate::secrets::register_key_text("receipt-key", &text);
    }
    let signer = crate::receipt::ReceiptSigner::from_env_or_file(
        crate::receipt::DEFAULT_KEY_ENV,
        receipt_key,
    )
    .map_err(|e| CliError::usage(e.to_string()))?;
    let signed_by = signer.key_id().map(str::to_owned);
    let store = open_existing(db)?;
    let by = format!(
        "{}@{}",
        std::env::var("USER").unwrap_or_else(|_| "unknown".into()),
        crate::store::owner_host()
    );
    let removal = Removal::new(name.to_owned(), key.to_owned(), by, crate::clock::wall_ms())
        .signed_by(std::sync::Arc::new(signer));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::internal(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(crate::store::write(
        store.as_ref(),
        Write::RemoveMemory(removal),
    ))?;
    let record = store.memory_removals()?.pop();
    let version = store
        .memory_rows(name, true)?
        .into_iter()
        .find(|r| r.key == key)
        .map_or(0, |r| r.version);
    if json {
        return print_json(&json!({
            "type": "memory.removed", "name": name, "key": key, "version": json_u64(version),
            "removal": record.as_ref().map(|r| json_u64(r.id)), "signed_by": signed_by,
        }));
    }
    outln!(
        "removed `{key}` from global memory `{name}` (version {version}, removal {}, {})",
        record.map_or(0, |r| r.id),
        signed_by.map_or("hash-chained only: no receipt key".to_owned(), |k| format!(
            "signed by {}…",
            &k[..k.len().min(16)]
        ))
    );
    Ok(())
}

/// Prints `memory` the way `runtape show` describes a state: each scope's keys and values
/// (clipped), and the global writes staged for publication.
pub(crate) fn describe(memory: &Memory) {
    if memory.is_empty() {
        return;
    }
    let clip = |v: &str| crate::text::one_line(v, 60);
    for (label, _, entries) in scopes_of(memory) {
        for (key, value) in entries {
            outln!("memory  {label} {key} = {}", clip(&value));
        }
    }
    if let Some(g) = &memory.global {
        for (key, s) in &g.staged {
            outln!(
                "staged  global:{} {key} = {} (by {}, over version {})",
                g.name,
                s.value.as_deref().map_or("(forget)".into(), clip),
                s.by,
                s.base
            );
        }
    }
}

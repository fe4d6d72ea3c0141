//! `runtape prune` and `runtape ls --all`'s pruned runs: each calls [`crate::ops::retention`]
//! and prints what it returns, as text or (with `--json`) as the view itself.

use std::path::Path;

use super::common::{CliError, age, open_existing, outln, print_json};
use crate::clock::wall_ms;
use crate::ops::retention::{self, PruneRequest};
use crate::store::retention::{parse_age, parse_statuses};

/// `runtape prune --older-than D [--status LIST] [--dry-run]`: removes (or, dry, lists) every
/// finished run tree older than `D`. A bad duration or status is one line and changes
/// nothing.
pub(crate) fn prune(
    db: &Path,
    older_than: &str,
    status: &str,
    dry_run: bool,
    json: bool,
) -> Result<(), CliError> {
    let older_than_ms = parse_age(older_than).map_err(CliError::usage)?;
    let statuses = parse_statuses(status).map_err(CliError::usage)?;
    let store = open_existing(db)?;
    let req = PruneRequest {
        older_than_ms,
        statuses,
        dry_run,
        now_ms: wall_ms(),
        by: format!(
            "{}@{}",
            std::env::var("USER").unwrap_or_else(|_| "unknown".into()),
            crate::store::owner_host()
        ),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::internal(format!("cannot start the async runtime: {e}")))?;
    let report = runtime.block_on(retention::prune(store.as_ref(), &req))?;
    if json {
        return print_json(&report);
    }
    for g in &report.groups {
        let runs = g
            .runs
            .iter()
            .map(|r| r.as_str())
            .collect::<Vec<_>>()
            .join(" ");
        match g.outcome {
            "would_prune" => outln!("would prune {runs}"),
            "pruned" => outln!("pruned {runs}"),
            _ => outln!(
                "kept {runs}: {}",
                g.why.as_deref().unwrap_or("the store refused")
            ),
        }
    }
    let verb = if dry_run { "would prune" } else { "pruned" };
    outln!(
        "{verb} {} runs in {} groups ({} writes); kept {} runs that are live, leased or recent",
        report.runs,
        report
            .groups
            .iter()
            .filter(|g| g.outcome != "refused")
            .count(),
        report.batches,
        report.kept
    );
    Ok(())
}

/// `runtape ls --all`'s part after the stored runs: each pruned run, from its tombstone.
pub(crate) fn ls_pruned(db: &Path, json: bool) -> Result<(), CliError> {
    let store = open_existing(db)?;
    let tombstones = retention::tombstones(store.as_ref())?;
    if json {
        for t in &tombstones {
            print_json(&serde_json::json!({
                "id": t.run,
                "status": "pruned",
                "final_status": t.status,
                "steps": t.proof.seq,
                "chain": t.proof.chain.to_hex(),
                "pruned_ms": t.pruned_ms,
                "tombstone": t.id,
            }))?;
        }
        return Ok(());
    }
    let now = wall_ms();
    for t in tombstones.iter().rev() {
        outln!(
            "{:<16}  {:<16}  {:>6}  {:>16}  {:>5}  {:<20}  (pruned; tombstone {})",
            t.run.as_str(),
            format!("pruned:{}", t.status),
            t.proof.seq,
            "-",
            age(now, t.pruned_ms),
            "-",
            t.id
        );
    }
    Ok(())
}

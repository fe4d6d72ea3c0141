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
    let freed = if dry_run { "would free" } else { "freed" };
    outln!(
        "{verb} {} runs in {} groups ({} writes); kept {} runs that are live, leased or recent; {freed} {} blobs ({} bytes) no kept run refers to",
        report.runs,
        report
            .groups
            .iter()
            .filter(|g| g.outcome != "refused")
            .count(),
        report.batches,
        report.kept,
        report.blobs,
        report.blob_bytes
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

/// `runtape export RUN [--out FILE]`: the verified run tree as one JSON document, to FILE or
/// stdout. A run that does not verify is refused (exit 1) and nothing is written.
pub(crate) fn export(db: &Path, run: &str, out: Option<&Path>, json: bool) -> Result<(), CliError> {
    let run = crate::ops::parse_whole_run(run, "export takes a whole run")?;
    let store = open_existing(db)?;
    let archive = crate::ops::archive::export(store, &run)?;
    let text = serde_json::to_string(&archive)
        .map_err(|e| CliError::internal(format!("cannot encode the archive: {e}")))?;
    let Some(path) = out else {
        outln!("{text}");
        return Ok(());
    };
    std::fs::write(path, format!("{text}\n"))
        .map_err(|e| CliError::usage(format!("cannot write {}: {e}", path.display())))?;
    if json {
        return print_json(&serde_json::json!({
            "run": run,
            "runs": archive.runs.len(),
            "blobs": archive.blobs.len(),
            "out": path,
        }));
    }
    outln!(
        "exported run {run} ({} runs, {} blobs) to {}",
        archive.runs.len(),
        archive.blobs.len(),
        path.display()
    );
    Ok(())
}

/// `runtape import FILE`: the archive's runs, verified on the way in, written into the
/// database; nothing is written when any of them does not verify or conflicts.
pub(crate) fn import(db: &Path, file: &Path, json: bool) -> Result<(), CliError> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| CliError::usage(format!("cannot read {}: {e}", file.display())))?;
    let archive: crate::ops::archive::Archive = serde_json::from_str(&text).map_err(|e| {
        CliError::usage(format!(
            "{} is not a runtape archive ({e}); `runtape export RUN --out FILE` writes one",
            file.display()
        ))
    })?;
    let store = crate::ops::open_store(db, true)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::internal(format!("cannot start the async runtime: {e}")))?;
    let done = runtime.block_on(crate::ops::archive::import(store.as_ref(), &archive))?;
    if json {
        return print_json(&done);
    }
    outln!(
        "imported run {} ({} runs written, {} already here and the same)",
        done.root,
        done.written.len(),
        done.present.len()
    );
    Ok(())
}

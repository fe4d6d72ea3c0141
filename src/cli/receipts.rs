//! `keygen`, `receipts export`, `receipts verify`: signing keys and offline verification.

use std::path::{Path, PathBuf};

use serde_json::json;

use super::common::{CliError, open_existing, outln, parse_whole_run, print_json};
use crate::history;
use crate::machine::RunId;
use crate::receipt::{self, Completeness, Integrity, VerifyingKey};

/// `runtape keygen -o FILE`: a new signing key (mode 0600, never overwriting) and its public
/// key beside it (`FILE.pub`).
pub(crate) fn keygen(out: &Path, json_out: bool) -> Result<(), CliError> {
    let public = receipt::keygen(out).map_err(|e| CliError::usage(e.to_string()))?;
    let pub_path = PathBuf::from(format!("{}.pub", out.display()));
    receipt::write_public_key(&pub_path, &public).map_err(|e| CliError::usage(e.to_string()))?;
    if json_out {
        return print_json(&json!({
            "type": "keygen",
            "key_file": out.display().to_string(),
            "public_key_file": pub_path.display().to_string(),
            "public_key": receipt::public_key_hex(&public),
        }));
    }
    outln!(
        "wrote signing key {} (mode 0600; keep it secret)",
        out.display()
    );
    outln!(
        "wrote public key  {}: {}",
        pub_path.display(),
        receipt::public_key_hex(&public)
    );
    outln!(
        "sign runs with it: RUNTAPE_RECEIPT_KEY=\"$(cat {})\" or --receipt-key {}",
        out.display(),
        out.display()
    );
    Ok(())
}

/// A public key given as 64 hex characters or as a path to a public key file.
pub(crate) fn public_key(arg: &str) -> Result<VerifyingKey, CliError> {
    if Path::new(arg).is_file() {
        return receipt::read_public_key(Path::new(arg))
            .map_err(|e| CliError::usage(e.to_string()));
    }
    receipt::parse_public_key(arg).map_err(|e| CliError::usage(format!("--pubkey: {e}")))
}

/// `runtape receipts export RUN -o FILE.jsonl [--recursive]`: the receipts, then the head
/// line; with `recursive`, then each run below it the same way.
pub(crate) fn export(
    db: &Path,
    run: &str,
    out: &Path,
    recursive: bool,
    json_out: bool,
) -> Result<(), CliError> {
    let run = parse_whole_run(run, "an export holds a whole run's receipts")?;
    let store = open_existing(db)?;
    if recursive {
        return export_tree(store.as_ref(), &run, out, json_out);
    }
    let (chain, head) = history::receipts_export(store.as_ref(), &run)?;
    let file = std::fs::File::create(out)
        .map_err(|e| CliError::usage(format!("cannot write {}: {e}", out.display())))?;
    receipt::write_bundle(std::io::BufWriter::new(file), &chain, &head)
        .map_err(|e| CliError::internal(e.to_string()))?;
    let how = match chain.first().and_then(|r| r.key_id()) {
        Some(k) => format!("signed by {k}"),
        None if chain.is_empty() => "none yet".to_owned(),
        None => "unsigned, hash-chained".to_owned(),
    };
    if json_out {
        return print_json(&json!({
            "type": "receipts.export", "run": run, "file": out.display().to_string(),
            "receipts": chain.len(), "runs": 1,
            "head_seq": head.head.seq, "status": head.head.status.to_string(),
            "signed_by": chain.first().and_then(|r| r.key_id()),
        }));
    }
    outln!(
        "wrote {} receipts of {run} and its sealed head (seq {}, {}) to {} ({how})",
        chain.len(),
        head.head.seq,
        head.head.status,
        out.display()
    );
    Ok(())
}

/// `--recursive`: the tree's sections, one per run.
fn export_tree(
    store: &dyn crate::store::Store,
    run: &RunId,
    out: &Path,
    json_out: bool,
) -> Result<(), CliError> {
    let sections = history::receipts_export_tree(store, run)?;
    let file = std::fs::File::create(out)
        .map_err(|e| CliError::usage(format!("cannot write {}: {e}", out.display())))?;
    receipt::write_tree_bundle(std::io::BufWriter::new(file), &sections)
        .map_err(|e| CliError::internal(e.to_string()))?;
    let receipts: usize = sections.iter().map(|(r, _)| r.len()).sum();
    let how = match sections
        .iter()
        .flat_map(|(r, _)| r)
        .find_map(|r| r.key_id())
    {
        Some(k) => format!("signed by {k}"),
        None if receipts == 0 => "none yet".to_owned(),
        None => "unsigned, hash-chained".to_owned(),
    };
    if json_out {
        let signed_by = sections
            .iter()
            .flat_map(|(r, _)| r)
            .find_map(|r| r.key_id());
        return print_json(&json!({
            "type": "receipts.export", "run": run, "file": out.display().to_string(),
            "receipts": receipts, "runs": sections.len(), "signed_by": signed_by,
        }));
    }
    outln!(
        "wrote {receipts} receipts of {run} and {} runs below it, each with its sealed head, to {} ({how})",
        sections.len() - 1,
        out.display()
    );
    Ok(())
}

/// `runtape receipts verify FILE.jsonl [--pubkey KEY] [--allow-headless]`: offline, no
/// database. A file of several sections (`export --recursive`) is checked as one tree.
pub(crate) fn verify(
    file: &Path,
    key: Option<&str>,
    allow_headless: bool,
    json_out: bool,
) -> Result<(), CliError> {
    let f = std::fs::File::open(file)
        .map_err(|e| CliError::usage(format!("cannot read {}: {e}", file.display())))?;
    let tree = receipt::read_tree_bundle(std::io::BufReader::new(f))
        .map_err(|e| CliError::failed(format!("{}: {e}", file.display())))?;
    let key = key.map(public_key).transpose()?;
    if tree.sections.len() > 1 {
        return verify_tree(file, &tree, key.as_ref(), allow_headless, json_out);
    }
    let Some(bundle) = tree.sections.into_iter().next() else {
        return Err(CliError::internal("a read export has a section"));
    };
    match receipt::verify_bundle(&bundle, key.as_ref(), allow_headless) {
        Ok((report, complete)) => {
            let integrity = integrity_text(&report.integrity);
            let (complete_json, ending) = match &complete {
                Completeness::Complete { head, signed } => (
                    true,
                    format!(
                        "complete: the run's {} head (seq {}, {}) ends its chain here",
                        if *signed { "signed" } else { "unsigned" },
                        head.seq,
                        head.status
                    ),
                ),
                Completeness::Unproven => (
                    false,
                    "NOT proven complete: no head line shows that no receipt was cut off the end"
                        .to_owned(),
                ),
            };
            if json_out {
                print_json(
                    &json!({"type": "receipts.verify", "ok": true, "receipts": report.receipts, "integrity": integrity, "runs": report.runs, "tip": report.tip, "complete": complete_json}),
                )
            } else {
                outln!("OK: {} receipts, {integrity}; {ending}", report.receipts);
                Ok(())
            }
        }
        Err(e) => {
            if json_out {
                print_json(
                    &json!({"type": "receipts.verify", "ok": false, "error": e.to_string()}),
                )?;
            }
            Err(CliError::failed(format!(
                "{} does not verify: {e}",
                file.display()
            )))
        }
    }
}

/// A tree export's check: one line per run below the first, then the verdict.
fn verify_tree(
    file: &Path,
    tree: &receipt::TreeBundle,
    key: Option<&VerifyingKey>,
    allow_headless: bool,
    json_out: bool,
) -> Result<(), CliError> {
    match receipt::verify_tree(tree, key, allow_headless) {
        Ok(report) => {
            let integrity = integrity_text(&report.integrity);
            let unproven: Vec<&RunId> = report
                .sections
                .iter()
                .filter(|s| !s.complete)
                .map(|s| &s.run)
                .collect();
            if json_out {
                let runs: Vec<serde_json::Value> = report
                    .sections
                    .iter()
                    .map(|s| {
                        json!({
                            "run": s.run,
                            "receipts": s.receipts,
                            "complete": s.complete,
                            "below": s.below.as_ref().map(|(p, _)| p),
                            "named_by_parent": s.below.as_ref().is_some_and(|(_, n)| *n),
                        })
                    })
                    .collect();
                return print_json(
                    &json!({"type": "receipts.verify", "ok": true, "receipts": report.receipts(), "integrity": integrity, "runs": runs, "complete": unproven.is_empty()}),
                );
            }
            for s in report.sections.iter().skip(1) {
                let how = match &s.below {
                    Some((parent, true)) => {
                        format!("under {parent}, which names where it ends")
                    }
                    Some((parent, false)) => format!(
                        "under {parent} (not named by it: recorded before revision 5, or not finished)"
                    ),
                    None => "placed in the tree".to_owned(),
                };
                outln!("  {}: {} receipts, {how}", s.run, s.receipts);
            }
            let ending = if unproven.is_empty() {
                "complete: every run's head ends its chain here".to_owned()
            } else {
                format!(
                    "NOT proven complete for {}: no head line shows nothing was cut off",
                    unproven
                        .iter()
                        .map(|r| r.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            outln!(
                "OK: a tree of {} runs, {} receipts, {integrity}; {ending}",
                report.sections.len(),
                report.receipts()
            );
            Ok(())
        }
        Err(e) => {
            if json_out {
                print_json(
                    &json!({"type": "receipts.verify", "ok": false, "error": e.to_string()}),
                )?;
            }
            Err(CliError::failed(format!(
                "{} does not verify: {e}",
                file.display()
            )))
        }
    }
}

/// How a verified file is sealed, in words.
fn integrity_text(integrity: &Integrity) -> String {
    match integrity {
        Integrity::Signed { key_id } => format!("signed by {key_id}"),
        Integrity::HashChainedOnly => {
            "unsigned: hash-chained only (anyone could rebuild such a chain)".to_owned()
        }
        Integrity::Empty => "empty".to_owned(),
    }
}

//! `runtape cassette export RUN -o FILE` and `runtape cassette diff A B`.

use std::path::Path;

use serde_json::json;

use super::common::{CliError, open_existing, outln, parse_whole_run, print_json};
use crate::cassette::{self, Cassette, DiffOptions, ExportError, LoadOptions};

/// `runtape cassette export RUN -o FILE`.
pub(crate) fn export(db: &Path, run: &str, out: &Path, json_out: bool) -> Result<(), CliError> {
    let run = parse_whole_run(run, "a cassette holds a whole run's exchanges")?;
    let store = open_existing(db)?;
    let cassette = cassette::export_run(store.as_ref(), &run).map_err(|e| match e {
        ExportError::History(e) => CliError::from(e),
        e => CliError::internal(e.to_string()),
    })?;
    cassette
        .save(out)
        .map_err(|e| CliError::usage(format!("cannot write {}: {e}", out.display())))?;
    let children = cassette.children().len();
    if json_out {
        return print_json(&json!({
            "type": "cassette.export", "run": run, "file": out.display().to_string(),
            "model_turns": cassette.len(), "child_runs": children,
        }));
    }
    let below = if children == 0 {
        String::new()
    } else {
        format!(
            " ({} of them by {children} child runs, each in its own section)",
            cassette.len() - cassette.entries().len()
        )
    };
    outln!(
        "wrote {} model turns of {run}{below} to {}",
        cassette.len(),
        out.display()
    );
    Ok(())
}

/// `runtape cassette diff A B`: where two cassettes' tool-call behaviour differs. Returns
/// whether they are the same.
pub(crate) fn diff(
    a: &Path,
    b: &Path,
    ignore_content: bool,
    allow_unverified: bool,
    json_out: bool,
) -> Result<bool, CliError> {
    let (ca, cb) = (load(a, allow_unverified)?, load(b, allow_unverified)?);
    let d = cassette::diff(&ca, &cb, DiffOptions { ignore_content });
    if json_out {
        let mut v = serde_json::to_value(&d).map_err(|e| CliError::internal(e.to_string()))?;
        v["type"] = json!("cassette.diff");
        print_json(&v)?;
        return Ok(d.is_same());
    }
    outln!("{}", d.to_string().trim_end());
    Ok(d.is_same())
}

/// Reads a cassette for a command. Integrity is required (a version-1 file, which carries no
/// hashes, is refused) unless `allow_unverified`, which accepts it with a warning on stderr.
/// Edited, spliced or downgraded version-2 files are refused either way.
pub(crate) fn load(path: &Path, allow_unverified: bool) -> Result<Cassette, CliError> {
    let options = LoadOptions {
        require_integrity: !allow_unverified,
        ..LoadOptions::default()
    };
    let cassette = Cassette::load(path, &options).map_err(|e| {
        let hint = if matches!(e, cassette::CassetteError::IntegrityRequired) {
            " – or pass --allow-unverified to use it anyway"
        } else {
            ""
        };
        CliError::usage(format!("{}: {e}{hint}", path.display()))
    })?;
    if cassette.version() == 1 {
        eprintln!(
            "warning: {}: cassette version 1 has no integrity hashes; its replies are used unverified (--allow-unverified)",
            path.display()
        );
    }
    Ok(cassette)
}

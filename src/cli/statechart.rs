//! `runtape statechart [--check]`.

use std::path::Path;

use serde_json::json;

use super::common::{CliError, outln, print_json};
use super::{EXIT_FAILED, EXIT_OK};
use crate::machine::table::render_statechart;

/// Prints the statechart, or with `check` compares it with `file` (exit 1 when they differ).
/// With `json`, one object: `{"type": "statechart", "markdown": …}`, or with `check`
/// `{"type": "statechart.check", "file": …, "matches": …}`, the error line still on stderr.
pub(super) fn run(check: bool, file: &Path, json: bool) -> Result<u8, CliError> {
    let chart = render_statechart();
    if !check {
        if json {
            print_json(&json!({"type": "statechart", "markdown": chart}))?;
        } else {
            outln!("{}", chart.trim_end_matches('\n'));
        }
        return Ok(EXIT_OK);
    }
    let text = std::fs::read_to_string(file)
        .map_err(|e| CliError::usage(format!("cannot read {}: {e}", file.display())))?;
    let matches = text == chart;
    if json {
        print_json(&json!({
            "type": "statechart.check", "file": file.display().to_string(), "matches": matches,
        }))?;
    }
    if matches {
        if !json {
            outln!("{} matches the transition table", file.display());
        }
        return Ok(EXIT_OK);
    }
    crate::term::note(&format!(
        "error: {} differs from the transition table; regenerate it with `runtape statechart > {}`",
        file.display(),
        file.display()
    ));
    Ok(EXIT_FAILED)
}

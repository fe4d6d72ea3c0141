//! `runtape statechart [--check]`.

use super::common::outln;
use std::path::Path;

use super::{EXIT_FAILED, EXIT_OK, EXIT_USAGE};
use crate::machine::table::render_statechart;

/// Prints the statechart, or with `check` compares it with `file`.
pub(super) fn run(check: bool, file: &Path) -> u8 {
    let chart = render_statechart();
    if !check {
        outln!("{}", chart.trim_end_matches('\n'));
        return EXIT_OK;
    }
    match std::fs::read_to_string(file) {
        Ok(text) if text == chart => {
            outln!("{} matches the transition table", file.display());
            EXIT_OK
        }
        Ok(_) => {
            eprintln!(
                "error: {} differs from the transition table; regenerate it with `runtape statechart > {}`",
                file.display(),
                file.display()
            );
            EXIT_FAILED
        }
        Err(e) => {
            eprintln!("error: cannot read {}: {e}", file.display());
            EXIT_USAGE
        }
    }
}

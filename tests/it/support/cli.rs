//! Shared by the tests that drive the real `runtape` binary on a SQLite file: running it with
//! a clean environment, and reading what it printed.
#![allow(dead_code, unreachable_pub)]

use std::path::Path;
use std::process::{Command, Output};

/// Runs the binary under test on `db` with `args` (no `RUNTAPE_DB` or receipt key from the
/// environment) and returns what it did.
pub fn runtape(db: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_runtape"))
        .env_remove("RUNTAPE_DB")
        .env_remove("RUNTAPE_RECEIPT_KEY")
        .arg("--db")
        .arg(db)
        .args(args)
        .output()
        .expect("runs the binary")
}

/// Stdout and stderr, for failure messages.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The last word of the first line printed (`started run ID`, `forked ... as run ID`).
pub fn first_id(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .next()
        .and_then(|l| l.rsplit(' ').next())
        .expect("a run id")
        .to_owned()
}

//! Commands that change a run from outside: `pause`, `cancel` ([`crate::ops::pause`],
//! [`crate::ops::cancel`]). Each prints what actually happened to the run.

use std::path::Path;

use super::common::{CliError, open_existing, parse_whole_run};
use crate::exec::{Engine, EngineConfig};
use crate::ops;
use crate::term::{say, say_json};

/// `runtape pause RUN`: asks whichever process drives the run to pause at its next step
/// boundary, and waits until it has, so `resume` can follow at once.
pub(crate) async fn pause(db: &Path, run: &str, json: bool) -> Result<(), CliError> {
    let run = parse_whole_run(run, "pause stops a run at its next step")?;
    let engine = Engine::with_store(open_existing(db)?, EngineConfig::default());
    let said = ops::pause(&engine, &run).await?;
    tell(&said, "pause", json)
}

/// `runtape cancel RUN`: a run driven by another process is asked to stop; a run at rest is
/// cancelled here. Succeeds only once the run is cancelled.
pub(crate) async fn cancel(
    db: &Path,
    run: &str,
    reason: Option<String>,
    json: bool,
) -> Result<(), CliError> {
    let run = parse_whole_run(run, "cancel ends a whole run")?;
    let engine = Engine::with_store(open_existing(db)?, EngineConfig::default());
    let said = ops::cancel(&engine, &run, reason).await?;
    tell(&said, "cancel", json)
}

/// Prints what happened: its line, or with `json` one object of type `kind` whose `outcome`
/// and fields are the operation's own.
fn tell(
    said: &(impl std::fmt::Display + serde::Serialize),
    kind: &str,
    json: bool,
) -> Result<(), CliError> {
    if json {
        let mut v = serde_json::to_value(said).map_err(|e| CliError::internal(e.to_string()))?;
        v["type"] = serde_json::json!(kind);
        say_json(&v)?;
    } else {
        say!("{said}");
    }
    Ok(())
}

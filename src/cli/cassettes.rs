//! `runtape cassette export RUN -o FILE` and `runtape cassette diff A B`.

use std::collections::HashMap;
use std::path::Path;

use serde_json::json;

use super::common::{CliError, open_existing, outln, parse_run_at, print_json, rfc3339};
use crate::cassette::{
    self, Cassette, CassetteBuilder, CassetteId, DiffOptions, LoadOptions, Prompt, RecordOptions,
};
use crate::history;
use crate::machine::{Effect, EffectRef, EventBody, RunId, RunSpec};
use crate::provider::{ProviderError, ToolDef};
use crate::store::Store;

/// Builds the cassette of a stored run: every model call, in order, with the exact messages
/// and tools it was sent and the reply (or failure) it got. The cassette id derives from the
/// run id, so exporting the same run twice gives the same file.
pub(crate) fn from_run(store: &dyn Store, run: &RunId) -> Result<Cassette, CliError> {
    let rec = history::record(store, run)?;
    let spec: RunSpec = history::spec_of(&rec)?;
    let id_hex = &crate::machine::Digest::of(run.as_str().as_bytes()).to_hex()[..32];
    let options = RecordOptions {
        cassette_id: CassetteId::from_hex(id_hex),
        ..RecordOptions::default()
    };
    let mut builder =
        CassetteBuilder::new(options).map_err(|e| CliError::internal(e.to_string()))?;
    let mut issued: HashMap<EffectRef, Effect> = HashMap::new();
    let mut providers = Vec::new();
    for t in history::transitions(store, run, 1, rec.seq)? {
        let event = history::event_of(run, &t)?;
        let answered = match &event.body {
            EventBody::ModelReplied { effect, .. } | EventBody::ModelFailed { effect, .. } => {
                issued.remove(&EffectRef {
                    seq: effect.seq,
                    index: effect.index,
                })
            }
            _ => None,
        };
        if let Some(Effect::CallModel { agent, request, .. }) = answered {
            let messages = history::conversation(store, &agent, &request.conversation)?;
            let tools = request
                .tools
                .iter()
                .filter_map(|n| spec.tool(n))
                .map(|t| ToolDef {
                    name: t.name.clone(),
                    description: t.description.clone(),
                    schema: t.schema.clone(),
                })
                .collect();
            let (result, chunks) = match &event.body {
                EventBody::ModelReplied { reply, .. } => (
                    Ok(reply.clone()),
                    reply
                        .text
                        .iter()
                        .filter(|t| !t.is_empty())
                        .cloned()
                        .collect(),
                ),
                EventBody::ModelFailed { failure, .. } => {
                    let mut e = ProviderError::new(
                        &request.provider,
                        failure.class,
                        failure.message.clone(),
                    );
                    e.retryable = failure.retryable;
                    e.retry_after_ms = failure.retry_after_ms;
                    e.status = failure.status;
                    (Err(e), Vec::new())
                }
                _ => continue,
            };
            if !providers.contains(&request.provider) {
                providers.push(request.provider.clone());
            }
            builder
                .push(&agent, Prompt { messages, tools }, result, chunks)
                .map_err(|e| CliError::internal(format!("step {}: {e}", t.seq)))?;
        }
        for e in history::effects_of(run, &t)? {
            issued.insert(
                EffectRef {
                    seq: e.id().seq,
                    index: e.id().index,
                },
                e,
            );
        }
    }
    builder
        .finish(
            &rfc3339(rec.created_ms),
            &format!("runtape run {run} ({})", providers.join(", ")),
        )
        .map_err(|e| CliError::internal(e.to_string()))
}

/// `runtape cassette export RUN -o FILE`.
pub(crate) fn export(db: &Path, run: &str, out: &Path) -> Result<(), CliError> {
    let (run, _) = parse_run_at(run)?;
    let store = open_existing(db)?;
    let cassette = from_run(store.as_ref(), &run)?;
    cassette
        .save(out)
        .map_err(|e| CliError::usage(format!("cannot write {}: {e}", out.display())))?;
    outln!(
        "wrote {} model turns of {run} to {}",
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

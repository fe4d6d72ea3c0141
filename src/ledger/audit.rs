//! What `verify` checks beside the replay itself, one stored table at a time: the run's row
//! against its sealed head, the head against the replayed history, the outbox against the
//! effects the history emitted and answered, snapshots against the folded states, and message
//! blobs against the messages the history appends. Every check returns the first
//! [`Divergence`], naming the seq or the column at fault. `coverage` lists which stored column
//! each check covers.

use std::collections::{BTreeMap, BTreeSet};

use super::replay::Divergence;
use crate::machine::{Digest, HistoryHash, RunState};
use crate::receipt::{HeadOrigin, RunHead, Seal, text_digest};
use crate::store::{HeadRecord, OutboxRecord, OutboxStatus, RunRecord, RunStatus};

/// Decodes a stored head and its seal (the seal is not checked here).
pub(crate) fn open_head(stored: &HeadRecord) -> Result<(RunHead, Seal), Divergence> {
    let head = RunHead::from_bytes(&stored.body).ok_or_else(|| {
        Divergence::column(
            0,
            "runs.head",
            "sealed head",
            "a run head",
            "unreadable bytes",
        )
    })?;
    let seal = Seal::from_bytes(&stored.seal).ok_or_else(|| {
        Divergence::column(0, "runs.seal", "head seal", "a seal", "unreadable bytes")
    })?;
    Ok((head, seal))
}

/// `[[seq, index], ...]` for messages.
pub(crate) fn list(pairs: &[(u64, u32)]) -> String {
    let items: Vec<String> = pairs.iter().map(|(s, i)| format!("{s}/{i}")).collect();
    format!("[{}]", items.join(", "))
}

fn short(hex: &str) -> String {
    hex.chars().take(16).collect()
}

fn digest_of(text: Option<&str>) -> String {
    text.map_or_else(|| "none".to_owned(), |t| short(&text_digest(t)))
}

/// The run's identity columns against the head: id, parent, spec, setup, goal, creation time.
pub(crate) fn identity(rec: &RunRecord, head: &RunHead) -> Result<(), Divergence> {
    let col = |column: &str, what: &str, expected: String, found: String| {
        Err(Divergence::column(0, column, what, expected, found))
    };
    if rec.id != head.run {
        return col(
            "runs.id",
            "the run the head found through runs.key seals (runs.id or runs.key was changed)",
            head.run.to_string(),
            rec.id.to_string(),
        );
    }
    let parent = head.parent.as_ref().map(|p| (&p.run, p.seq));
    let stored = rec.parent.as_ref().map(|(r, s)| (r, *s));
    if parent.map(|p| p.0) != stored.map(|p| p.0) {
        let show = |p: Option<&crate::machine::RunId>| p.map_or("none".into(), |r| r.to_string());
        return col(
            "run_specs.parent_id",
            "parent run (of the row runs.key finds)",
            show(parent.map(|p| p.0)),
            show(stored.map(|p| p.0)),
        );
    }
    if parent.map(|p| p.1) != stored.map(|p| p.1) {
        let show = |s: Option<u64>| s.map_or("none".into(), |s| s.to_string());
        return col(
            "run_specs.fork_seq",
            "fork seq (of the row runs.key finds)",
            show(parent.map(|p| p.1)),
            show(stored.map(|p| p.1)),
        );
    }
    let texts = [
        (
            "run_specs.spec",
            "spec digest (of the row runs.key finds)",
            Some(&head.spec),
            Some(rec.spec.as_str()),
        ),
        (
            "run_specs.setup",
            "setup digest (of the row runs.key finds)",
            head.setup.as_ref(),
            rec.setup.as_deref(),
        ),
        (
            "run_specs.goal",
            "goal digest (of the row runs.key finds)",
            Some(&head.goal),
            Some(rec.goal.as_str()),
        ),
    ];
    for (column, what, sealed, stored) in texts {
        if sealed.map(String::as_str) != stored.map(text_digest).as_deref() {
            let sealed = sealed.map_or_else(|| "none".to_owned(), |s| short(s));
            return col(column, what, sealed, digest_of(stored));
        }
    }
    if rec.created_ms != head.created_ms {
        return col(
            "run_specs.created_ms",
            "creation time (of the row runs.key finds)",
            head.created_ms.to_string(),
            rec.created_ms.to_string(),
        );
    }
    Ok(())
}

/// The run's standing columns against the head: seq, state, status, outcome, usage, update
/// time. A `running` row over a head that rests unfinished is accepted: taking the lease
/// writes `running` without sealing.
pub(crate) fn standing(rec: &RunRecord, head: &RunHead) -> Result<(), Divergence> {
    let col = |column: &str, what: &str, expected: String, found: String| {
        Err(Divergence::column(0, column, what, expected, found))
    };
    if rec.seq != head.seq {
        return col(
            "runs.seq",
            "latest seq",
            head.seq.to_string(),
            rec.seq.to_string(),
        );
    }
    if rec.state_kind.as_str() != head.state {
        return col(
            "runs.state_kind",
            "latest state",
            head.state.clone(),
            rec.state_kind.as_str().into(),
        );
    }
    let head_status = RunStatus::parse(&head.status);
    let head_terminal = head_status.is_none_or(RunStatus::is_terminal);
    // Taking the lease writes `running` unsealed; a driver that stops on an error (a full
    // disk) gives the lease back as `paused` without resealing the head, the smallest write
    // there is. Both are the unfinished run at rest or in hand.
    let taken_up = rec.status == RunStatus::Running && !head_terminal;
    let stopped = rec.status == RunStatus::Paused
        && matches!(head_status, Some(RunStatus::Running | RunStatus::Paused));
    if rec.status.as_str() != head.status && !taken_up && !stopped {
        return col(
            "runs.status",
            "status",
            head.status.clone(),
            rec.status.as_str().into(),
        );
    }
    if rec.outcome.as_deref().map(text_digest) != head.outcome {
        let sealed = head.outcome.as_deref().map_or("none".into(), short);
        return col(
            "run_specs.outcome",
            "outcome digest",
            sealed,
            digest_of(rec.outcome.as_deref()),
        );
    }
    for (column, what, sealed, stored) in [
        ("runs.tokens", "tokens", head.tokens, rec.tokens),
        ("runs.cost_nanos", "cost", head.cost_nanos, rec.cost_nanos),
        (
            "runs.unpriced_turns",
            "unpriced model turns",
            head.unpriced_turns,
            rec.unpriced_turns,
        ),
        (
            "runs.updated_ms",
            "update time",
            head.updated_ms,
            rec.updated_ms,
        ),
    ] {
        if sealed != stored {
            return col(column, what, sealed.to_string(), stored.to_string());
        }
    }
    Ok(())
}

/// The head against the history replayed up to its seq: the state hash (under the run's
/// `hash`) and chain link there,
/// and what the engine records from that state (kind, status, outcome, usage). `own` is false
/// when the run has no transition of its own yet (a new run, or a fork before its first step),
/// whose row still shows what it was created with, but for a fork's status: that is where the
/// inherited state rests (a fork at a step waiting for a person is released waiting).
pub(crate) fn head_against_history(
    head: &RunHead,
    state: &RunState,
    hash: HistoryHash,
    chain: &Digest,
    own: bool,
) -> Result<(), Divergence> {
    let at = head.seq;
    let col = |what: &str, expected: String, found: &str| {
        Err(Divergence::column(at, "runs.head", what, expected, found))
    };
    let hash = state.state_hash(hash).to_hex();
    // A new run's first head (no parent, nothing committed yet: created, or queued for a
    // worker) records Created's state hash; sealed by a runtape before that, it holds zeros.
    let unstarted =
        head.seq == 0 && head.parent.is_none() && head.state_hash == Digest::ZERO.to_hex();
    if head.state_hash != hash && !unstarted {
        return col("state hash where the history ends", hash, &head.state_hash);
    }
    if head.chain != chain.to_hex() {
        return col(
            "chain link where the history ends",
            chain.to_hex(),
            &head.chain,
        );
    }
    let (kind, outcome, tokens, cost, unpriced) = if own {
        let usage = state.data().map(|d| d.usage).unwrap_or_default();
        (
            state.kind().as_str(),
            state
                .outcome()
                .map(|o| text_digest(&serde_json::to_string(o).unwrap_or_default())),
            usage.input_tokens + usage.output_tokens,
            usage.cost_nanos,
            usage.unpriced_turns,
        )
    } else if head.parent.is_some() {
        ("preparing", None, 0, 0, 0)
    } else {
        ("created", None, 0, 0, 0)
    };
    if head.state != kind {
        return col("state kind", kind.into(), &head.state);
    }
    if head.outcome != outcome {
        let show = |o: Option<&str>| o.map_or("none".into(), short);
        return col(
            "outcome",
            show(outcome.as_deref()),
            &show(head.outcome.as_deref()),
        );
    }
    // runtape 0.1.0 stored no count of unpriced turns: a head sealed by the migration records
    // what the row held (0), and the count is right again from the run's next commit on.
    let unpriced = if head.origin == HeadOrigin::Migration {
        head.unpriced_turns
    } else {
        unpriced
    };
    if head.tokens != tokens || head.cost_nanos != cost || head.unpriced_turns != unpriced {
        return col(
            "tokens and cost",
            format!("{tokens} tokens, {cost} nanodollars, {unpriced} unpriced turns"),
            &format!(
                "{} tokens, {} nanodollars, {} unpriced turns",
                head.tokens, head.cost_nanos, head.unpriced_turns
            ),
        );
    }
    // A fork rests where the state it inherits rests (a fork at a step that waits for a person
    // waits for that person, and its release seals that status before it has a step of its
    // own); a new run has no state to rest in yet.
    let resting = if own || head.parent.is_some() {
        RunStatus::of_state(state)
    } else {
        RunStatus::Running
    };
    let status = RunStatus::parse(&head.status);
    let fits = match status {
        None => false,
        Some(s) if s.is_terminal() || resting.is_terminal() => s == resting,
        Some(RunStatus::Running | RunStatus::Paused) => true,
        Some(s) => s == resting,
    };
    if !fits {
        return col("status", resting.as_str().into(), &head.status);
    }
    Ok(())
}

/// What the replay learned about the outbox rows of the run being verified.
#[derive(Debug, Default)]
pub(crate) struct OutboxFacts {
    /// The idempotency key each row's tool call was performed with, by `(seq, index)`, for
    /// the rows that name a tool call of the history.
    pub(crate) keys: BTreeMap<(u64, u32), String>,
    /// The rows whose effect an event of the history answered.
    pub(crate) answered: BTreeSet<(u64, u32)>,
}

/// Every outbox row of the run: it names a tool call of the history with that call's
/// idempotency key; it is `done` exactly when the history answers the call; it is `started`
/// exactly when the head lists it. Every call the head lists as started has a `started` row.
///
/// `facts` may cover only the steps after `from` (a check of the history's tail): a row of a
/// call emitted at or before `from` must then be `done` (the check starts before every call
/// still outstanding at its end). With `through` (a check that stops there, a fork's), rows of
/// calls emitted after it are not judged (`facts` must still say which calls emitted by then
/// were answered later).
pub(crate) fn outbox(
    rows: &[OutboxRecord],
    facts: &OutboxFacts,
    head: &RunHead,
    from: u64,
    through: Option<u64>,
) -> Result<(), Divergence> {
    for row in rows {
        let at = (row.effect.seq, row.effect.index);
        let (seq, index) = at;
        if seq <= from {
            if row.status != OutboxStatus::Done {
                return Err(Divergence::column(
                    seq,
                    "outbox.status",
                    &format!("status of the call at index {index}"),
                    "done (answered: it is not outstanding where the run stands)",
                    format!("{:?}", row.status).to_lowercase(),
                ));
            }
            continue;
        }
        if through.is_some_and(|t| seq > t) {
            continue;
        }
        let Some(key) = facts.keys.get(&at) else {
            return Err(Divergence::column(
                seq,
                "outbox.idx",
                "outbox row",
                format!("a tool call emitted at seq {seq} index {index}"),
                "no such call",
            ));
        };
        if row.idempotency_key.as_deref() != Some(key.as_str()) {
            return Err(Divergence::column(
                seq,
                "outbox.idempotency_key",
                "idempotency key",
                key,
                row.idempotency_key.as_deref().unwrap_or("none"),
            ));
        }
        let answered = facts.answered.contains(&at);
        let listed = head.started.contains(&at);
        let expected = match (answered, listed) {
            (true, _) => OutboxStatus::Done,
            (false, true) => OutboxStatus::Started,
            (false, false) => OutboxStatus::Pending,
        };
        if row.status != expected {
            return Err(Divergence::column(
                seq,
                "outbox.status",
                &format!("status of the call at index {index}"),
                format!("{expected:?}").to_lowercase(),
                format!("{:?}", row.status).to_lowercase(),
            ));
        }
    }
    let started: Vec<(u64, u32)> = rows
        .iter()
        .filter(|r| r.status == OutboxStatus::Started)
        .map(|r| (r.effect.seq, r.effect.index))
        .collect();
    if let Some(missing) = head.started.iter().find(|s| !started.contains(s)) {
        return Err(Divergence::column(
            missing.0,
            "outbox.status",
            "calls marked started",
            list(&head.started),
            list(&started),
        ));
    }
    Ok(())
}

/// A stored snapshot against the state folded to its seq.
pub(crate) fn snapshot(
    seq: u64,
    stored: Option<&[u8]>,
    state: &RunState,
) -> Result<(), Divergence> {
    match stored {
        None => Err(Divergence::column(
            seq,
            "snapshots.state",
            "snapshot",
            "the state snapshot due every 64 transitions",
            "none",
        )),
        Some(bytes) if bytes != state.canonical_bytes().as_slice() => Err(Divergence::column(
            seq,
            "snapshots.state",
            "snapshot",
            "the state folded to this seq",
            "other bytes",
        )),
        Some(_) => Ok(()),
    }
}

/// A stored message blob against the node the history appends: `prev` (the head before the
/// message), then the message's bytes.
pub(crate) fn blob(
    seq: u64,
    head: &Digest,
    prev: &Digest,
    message: &[u8],
    stored: Option<&[u8]>,
) -> Result<(), Divergence> {
    let what = || format!("message blob {}", short(&head.to_hex()));
    match stored {
        None => Err(Divergence::column(
            seq,
            "blobs.hash",
            &what(),
            "the message this transition appends",
            "no blob under its digest (deleted, or its hash was changed)",
        )),
        Some(bytes) if bytes.split_at_checked(32) != Some((&prev.0[..], message)) => {
            Err(Divergence::column(
                seq,
                "blobs.bytes",
                &what(),
                "the message this transition appends",
                "other bytes",
            ))
        }
        Some(_) => Ok(()),
    }
}

/// An attachment blob (an image or PDF a message names) against its digest: present, and
/// its bytes hash to it.
pub(crate) fn attachment(
    seq: u64,
    digest: &Digest,
    stored: Option<&[u8]>,
) -> Result<(), Divergence> {
    let what = || format!("attachment blob {}", short(&digest.to_hex()));
    match stored {
        None => Err(Divergence::column(
            seq,
            "blobs.hash",
            &what(),
            "the file a message of this transition names",
            "no blob under its digest (deleted, or its hash was changed)",
        )),
        Some(bytes) if Digest::of(bytes) != *digest => Err(Divergence::column(
            seq,
            "blobs.bytes",
            &what(),
            "bytes hashing to the digest",
            "other bytes",
        )),
        Some(_) => Ok(()),
    }
}

/// A stored MCP catalog blob against the `ToolsListed` event naming it: found under its
/// digest, its bytes hash to it, and it lists exactly the names the event records, in order.
pub(crate) fn catalog(
    seq: u64,
    digest: &Digest,
    names: &[String],
    stored: Option<&[u8]>,
) -> Result<(), Divergence> {
    let what = || format!("catalog blob {}", short(&digest.to_hex()));
    let Some(bytes) = stored else {
        return Err(Divergence::column(
            seq,
            "blobs.hash",
            &what(),
            "the tool list this transition records",
            "no blob under its digest (deleted, or its hash was changed)",
        ));
    };
    if Digest::of(bytes) != *digest {
        return Err(Divergence::column(
            seq,
            "blobs.bytes",
            &what(),
            "bytes hashing to the digest",
            "other bytes",
        ));
    }
    let listed: Option<Vec<String>> = serde_json::from_slice::<Vec<serde_json::Value>>(bytes)
        .ok()
        .and_then(|tools| {
            tools
                .iter()
                .map(|t| t.get("name")?.as_str().map(str::to_owned))
                .collect()
        });
    if listed.as_deref() != Some(names) {
        return Err(Divergence::column(
            seq,
            "blobs.bytes",
            &what(),
            format!("a catalog listing {}", names.join(", ")),
            "a catalog listing other tools",
        ));
    }
    Ok(())
}

/// The definitions a `ToolsListed` event records for tools its server added after the run
/// started (revision 4) against the stored catalog blob (already checked by [`catalog`]): each
/// must be what the blob says of that tool — description, schema and flags — so what the
/// model was offered and how its calls were judged is what the server listed.
pub(crate) fn catalog_added(
    seq: u64,
    digest: &Digest,
    added: &[crate::machine::ToolSpec],
    bytes: &[u8],
) -> Result<(), Divergence> {
    let infos = crate::tool::mcp::listing::decode_catalog(bytes).unwrap_or_default();
    for tool in added {
        let listed = infos.iter().find(|i| i.name == tool.name);
        if listed
            .map(crate::tool::mcp::McpToolInfo::to_tool_spec)
            .as_ref()
            != Some(tool)
        {
            return Err(Divergence::column(
                seq,
                "blobs.bytes",
                &format!("catalog blob {}", short(&digest.to_hex())),
                format!("the definition of `{}` the transition records", tool.name),
                "another definition (or none)",
            ));
        }
    }
    Ok(())
}

/// What the head's seal proves, for the report.
pub(crate) fn sealed_by(head: &RunHead, seal: &Seal) -> &'static str {
    match (seal, head.origin) {
        (Seal::Ed25519 { .. }, _) => "signed",
        (Seal::Unsigned { .. }, HeadOrigin::Migration) => "trusted on first use",
        (Seal::Unsigned { .. }, HeadOrigin::Engine) => "unsigned",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::mcp::McpToolInfo;

    fn info(description: &str) -> McpToolInfo {
        McpToolInfo {
            name: "ops__stamp".into(),
            server: "ops".into(),
            remote: "stamp".into(),
            description: description.into(),
            schema: serde_json::json!({"type": "object"}),
            read_only: false,
            idempotent: false,
            requires_approval: false,
            timeout_ms: None,
            results: Default::default(),
            policy: Default::default(),
        }
    }

    #[test]
    fn added_definitions_must_be_the_catalogs() {
        let blob = crate::tool::mcp::listing::catalog_blob(&[info("stamps")]);
        let digest = Digest::of(&blob);
        let recorded = info("stamps").to_tool_spec();
        assert!(catalog_added(5, &digest, std::slice::from_ref(&recorded), &blob).is_ok());
        let mut other = recorded.clone();
        other.requires_approval = true;
        let e = catalog_added(5, &digest, &[other], &blob).expect_err("flags differ");
        assert!(e.to_string().contains("ops__stamp"), "{e}");
        let mut unknown = recorded;
        unknown.name = "ops__other".into();
        assert!(catalog_added(5, &digest, &[unknown], &blob).is_err());
    }
}

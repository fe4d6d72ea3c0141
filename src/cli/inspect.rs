//! Read-only commands: `ls`, `log`, `show`, `diff`, `verify`.

use std::path::Path;

use serde_json::json;

use super::common::{
    CliError, age, cost_text, json_u64, open_existing, outln, parse_run_at, parse_whole_run,
    print_json, usd, utc,
};
use crate::exec::wall_ms;
use crate::history;
use crate::machine::{Effect, Outcome, Reasoning, RunId, RunState, SlotStatus};
use crate::store::RunRecord;

/// `runtape ls`: every run with its status, steps, cost and age, newest first; child runs
/// indented under the run that started them unless `flat`.
pub(crate) fn ls(db: &Path, json: bool, flat: bool) -> Result<(), CliError> {
    let store = open_existing(db)?;
    let runs = store.runs()?;
    if json {
        for r in &runs {
            print_json(&run_json(r))?;
        }
        return Ok(());
    }
    let waiting = super::tree::waiting_in(&runs);
    if runs.is_empty() {
        outln!("no runs in {}", super::common::shown(db));
        return Ok(());
    }
    let now = wall_ms();
    outln!(
        "{:<16}  {:<16}  {:>6}  {:>16}  {:>5}  {:<20}  GOAL",
        "RUN",
        "STATUS",
        "STEPS",
        "COST",
        "AGE",
        "DRIVER"
    );
    let rows = if flat {
        runs.iter().map(|r| (r, 0)).collect()
    } else {
        super::tree::in_tree_order(&runs)
    };
    for (r, depth) in rows {
        let goal: String = r.goal.replace('\n', " ").chars().take(48).collect();
        let id = match depth {
            0 => r.id.to_string(),
            d => format!("{}└ {}", "  ".repeat(d - 1), r.id),
        };
        let fork = r
            .parent
            .as_ref()
            .map(|(p, s)| format!(" (fork of {p}@{s})"))
            .unwrap_or_default();
        let session = super::sessions::mark_of(r)
            .map(|m| m.suffix())
            .unwrap_or_default();
        // A run resting on a child that waits for a person says so.
        let status = if waiting.contains(&r.id) {
            "awaiting child"
        } else {
            r.shown_status()
        };
        outln!(
            "{:<16}  {:<16}  {:>6}  {:>16}  {:>5}  {:<20}  {goal}{session}{fork}",
            id,
            status,
            r.seq,
            cost_text(r.cost_nanos, r.unpriced_turns),
            age(now, r.updated_ms),
            driver(r, now).unwrap_or_else(|| "-".into())
        );
    }
    Ok(())
}

/// The process driving the run (`host:pid`: a `runtape worker`, or the command that started
/// or resumed it), while its lease is live at `now_ms`.
pub(crate) fn driver(r: &RunRecord, now_ms: u64) -> Option<String> {
    let owner = r.lease_owner.as_deref()?;
    if r.lease_expires_ms <= now_ms || crate::store::owner_is_dead(owner) {
        return None;
    }
    Some(
        owner
            .rsplit_once(':')
            .map_or(owner, |(process, _)| process)
            .to_owned(),
    )
}

/// A run as `ls --json` prints it (and `runtape serve` lists it). `session`, `session_index`
/// and `session_kind` say which session it belongs to (`null` for none): `run` for a run
/// holding place `session_index`, `fork` or `replay` for a fork or a replay of that run (they
/// hold no place).
pub(crate) fn run_json(r: &RunRecord) -> serde_json::Value {
    let mut v = json!({
        "type": "run",
        "id": r.id,
        "status": r.shown_status(),
        "state": r.state_kind,
        "steps": r.seq,
        "cost_nanos": json_u64(r.cost_nanos),
        "cost_known": r.unpriced_turns == 0,
        "unpriced_turns": r.unpriced_turns,
        "tokens": r.tokens,
        "created_ms": r.created_ms,
        "updated_ms": r.updated_ms,
        "parent": r.parent.as_ref().map(|(p, s)| json!({"run": p, "seq": s})),
        "delegated_by": super::tree::delegated_by(r)
            .map(|e| json!({"run": e.run, "seq": e.seq, "index": e.index})),
        "driver": driver(r, wall_ms()),
        "goal": r.goal,
    });
    // Its session (revision 5): the name, the place, and whether it holds it.
    let mark = super::sessions::mark_of(r);
    v["session"] = json!(mark.as_ref().map(|m| &m.name));
    v["session_index"] = json!(mark.as_ref().map(|m| m.index));
    v["session_kind"] = json!(mark.as_ref().map(|m| m.kind));
    v
}

/// A timeline entry as `log --json` prints it.
pub(crate) fn entry_json(e: &history::TimelineEntry) -> Result<serde_json::Value, CliError> {
    let mut v = serde_json::to_value(e).map_err(|e| CliError::internal(e.to_string()))?;
    v["type"] = json!("step");
    Ok(v)
}

/// A step as `show --json` prints it.
pub(crate) fn step_json(view: &history::StepView) -> Result<serde_json::Value, CliError> {
    let mut v = serde_json::to_value(view).map_err(|e| CliError::internal(e.to_string()))?;
    v["type"] = json!("step");
    Ok(v)
}

/// A comparison as `diff --json` prints it.
pub(crate) fn diff_json(d: &history::RunDiff) -> Result<serde_json::Value, CliError> {
    let mut v = serde_json::to_value(d).map_err(|e| CliError::internal(e.to_string()))?;
    v["type"] = json!("diff");
    Ok(v)
}

/// A verification as `verify --json` prints it: the report with `ok: true`, or the first
/// problem with `ok: false`.
pub(crate) fn verify_json(
    run: &RunId,
    result: &Result<history::Verified, history::Divergence>,
) -> Result<serde_json::Value, CliError> {
    Ok(match result {
        Ok(report) => {
            let mut v =
                serde_json::to_value(report).map_err(|e| CliError::internal(e.to_string()))?;
            v["type"] = json!("verify");
            v["ok"] = json!(true);
            v
        }
        Err(d) => {
            json!({"type": "verify", "ok": false, "run": run, "seq": d.seq, "column": d.column, "what": d.what, "expected": d.expected, "found": d.found})
        }
    })
}

/// `runtape log RUN`: the timeline.
pub(crate) fn log(db: &Path, run: &str, json: bool) -> Result<(), CliError> {
    let (run, seq) = parse_run_at(run)?;
    if seq.is_some() {
        return Err(CliError::usage(
            "`log` takes a run id without @SEQ; use `runtape show RUN@SEQ` for one step",
        ));
    }
    let store = open_existing(db)?;
    let entries = history::timeline(store.as_ref(), &run)?;
    if json {
        for e in &entries {
            print_json(&entry_json(e)?)?;
        }
        return Ok(());
    }
    let rec = history::record(store.as_ref(), &run)?;
    outln!(
        "run {run} — {} — {} steps — {} — {}",
        rec.shown_status(),
        rec.seq,
        cost_text(rec.cost_nanos, rec.unpriced_turns),
        rec.goal.replace('\n', " ")
    );
    if let Some((parent, at)) = &rec.parent {
        outln!("forked from {parent} at step {at}; steps 1..={at} are the parent's");
    }
    for e in &entries {
        let cost = e.cost_nanos.map(usd).unwrap_or_default();
        let tokens = if e.tokens > 0 {
            format!("{} tok", e.tokens)
        } else {
            String::new()
        };
        outln!(
            "{:>5}  {}  {:<21} {:>15} → {:<16} {:<12} {:>8} {:>8}  {}",
            e.seq,
            &utc(e.at_ms)[11..],
            e.event.as_str(),
            e.from.as_str(),
            e.to.as_str(),
            e.agent.as_ref().map(|a| a.as_str()).unwrap_or("-"),
            tokens,
            cost,
            e.summary
        );
    }
    if !rec.status.is_terminal() && rec.status != crate::store::RunStatus::AwaitingInput {
        for w in super::tree::waiting_below(store.as_ref(), &run)? {
            for (_, tool, how) in &w.asks {
                outln!(
                    "waits on child {}, which waits for a person ({tool}): runtape resume {run} {how}",
                    w.run
                );
            }
        }
    }
    Ok(())
}

/// `runtape show RUN[@SEQ]`: a step in full.
pub(crate) fn show(db: &Path, run: &str, json: bool) -> Result<(), CliError> {
    let (run, seq) = parse_run_at(run)?;
    let store = open_existing(db)?;
    let view = history::show(store.as_ref(), &run, seq)?;
    if json {
        return print_json(&step_json(&view)?);
    }
    outln!("run {} step {} of {}", view.run, view.seq, view.latest);
    let rec = history::record(store.as_ref(), &view.run)?;
    if rec.is_queued() {
        outln!(
            "queued  no process has taken it up yet: a `runtape worker` serving its spec directory, or `runtape resume {}`, starts it",
            view.run
        );
    }
    if let Some(s) = &view.session {
        let forked = rec.parent.is_some();
        super::sessions::describe_place(s, forked);
    }
    if let (Some(edge), Some(event)) = (&view.edge, &view.event) {
        outln!(
            "event   {} at {} (edge {edge})",
            event.kind(),
            utc(event.at.ms())
        );
    }
    outln!(
        "state   {} (hash {})",
        view.state.kind(),
        &view.state_hash[..16]
    );
    describe_state(&view.state);
    for e in &view.effects {
        match e {
            Effect::CallModel {
                id,
                agent,
                request,
                attempt,
                not_before,
            } => {
                let when = not_before
                    .map(|t| format!(", not before {}", utc(t.ms())))
                    .unwrap_or_default();
                outln!(
                    "effect  {id}: call {}/{} for {agent}, attempt {attempt}{when}",
                    request.provider,
                    request.model
                );
            }
            Effect::CallTool {
                id,
                tool,
                call_id,
                args,
                ..
            } => outln!("effect  {id}: tool {tool} ({call_id}) {args}"),
            Effect::Reconcile {
                id, tool, call_id, ..
            } => outln!("effect  {id}: ask tool {tool} whether call {call_id} was performed"),
            Effect::RequestInput {
                id,
                call_id,
                request,
                ..
            } => {
                outln!(
                    "effect  {id}: ask a person ({:?}) about {} ({call_id})",
                    request.kind,
                    request.tool
                )
            }
            Effect::RunChild {
                id,
                delegate,
                call_id,
                depth,
                ..
            } => outln!(
                "effect  {id}: child run {} of agent {delegate} ({call_id}), depth {depth}",
                id.child_run_id()
            ),
            Effect::Retrieve {
                id, agent, turn, ..
            } => outln!("effect  {id}: ask the retriever for {agent}'s turn {turn}"),
            Effect::PublishMemory { id, name, writes } => outln!(
                "effect  {id}: publish {} write(s) to global memory {name}: {}",
                writes.len(),
                writes.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
        }
    }
    if let Some(event) = &view.event {
        super::sessions::describe_event(&event.body);
    }
    if let Some(req) = &view.request {
        let r = &req.remaining;
        let left = |v: Option<u64>| v.map_or("∞".to_owned(), |n| n.to_string());
        outln!(
            "request to {}/{} — {} messages, tools [{}], remaining: turns {}, tool calls {}, tokens {}, cost {}",
            req.provider,
            req.model,
            req.messages.len(),
            req.tools
                .iter()
                .map(|t| t.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            left(r.turns),
            left(r.tool_calls),
            left(r.tokens),
            r.cost_nanos.map_or("∞".to_owned(), usd),
        );
        for (server, catalog) in &req.catalogs {
            outln!("  MCP server {server}: tools as listed in catalog {catalog}");
        }
        if !req.settings.is_empty() {
            let settings = serde_json::to_string(&req.settings).unwrap_or_default();
            outln!("  settings {settings}");
        }
        if let Some(schema) = &req.output_schema {
            outln!("  output schema {schema}");
        }
        for (i, m) in req.messages.iter().enumerate() {
            for r in &m.reasoning {
                let (kind, text) = match r {
                    Reasoning::Thinking { text, signature } => (
                        if signature.is_empty() {
                            "thinking".to_owned()
                        } else {
                            "thinking, signed".to_owned()
                        },
                        text.clone(),
                    ),
                    Reasoning::RedactedThinking { data } => (
                        "redacted thinking".to_owned(),
                        format!("{} bytes", data.len()),
                    ),
                    Reasoning::Text { text, .. } => ("reasoning".to_owned(), text.clone()),
                    Reasoning::Item {
                        id,
                        summary,
                        encrypted_content,
                    } => (
                        format!(
                            "reasoning {id}{}",
                            if encrypted_content.is_some() {
                                ", encrypted"
                            } else {
                                ""
                            }
                        ),
                        summary.join(" "),
                    ),
                };
                outln!("  [{i}] ({kind}) {}", text.replace('\n', "\n            "));
            }
            let text = m.content.as_deref().unwrap_or("");
            let calls: Vec<String> = m
                .tool_calls
                .iter()
                .map(|c| format!("{}({})", c.name, c.arguments))
                .collect();
            let extra = if calls.is_empty() {
                String::new()
            } else {
                format!(" → {}", calls.join(", "))
            };
            outln!(
                "  [{i}] {:<9} {}{extra}",
                format!("{:?}", m.role).to_lowercase(),
                text.replace('\n', "\n            ")
            );
        }
    }
    Ok(())
}

fn describe_state(state: &RunState) {
    let Some(run) = state.data() else { return };
    outln!(
        "agent   {} — run usage: {} turns, {} tool calls, {} tokens, {}",
        run.active,
        run.usage.turns,
        run.usage.tool_calls,
        run.usage.input_tokens + run.usage.output_tokens,
        cost_text(run.usage.cost_nanos, run.usage.unpriced_turns)
    );
    match state {
        RunState::Done {
            outcome: Outcome::Completed { answer, .. },
            ..
        } => outln!("answer  {}", answer.as_deref().unwrap_or("")),
        RunState::Done {
            outcome: Outcome::Failed { error },
            ..
        } => outln!("failed  {}: {}", error.class, error.message),
        RunState::Done {
            outcome: Outcome::Cancelled { reason },
            ..
        } => outln!("cancelled {}", reason.as_deref().unwrap_or("")),
        RunState::BudgetExhausted {
            scope,
            key,
            resting,
            ..
        } => {
            outln!(
                "budget  {key} of {scope:?} is spent{}",
                if *resting {
                    " (resting until raised)"
                } else {
                    ""
                }
            )
        }
        RunState::Summarizing { summaries, .. } => super::sessions::describe_summaries(summaries),
        RunState::CallingTools { batch, .. } | RunState::AwaitingInput { batch, .. } => {
            for s in &batch.slots {
                let status = match &s.status {
                    SlotStatus::Running { effect } => {
                        format!("running (effect {}/{})", effect.seq, effect.index)
                    }
                    SlotStatus::Approval { .. } => "waiting for approval".to_owned(),
                    SlotStatus::Question { .. } => "waiting for a person's answer".to_owned(),
                    SlotStatus::InDoubt { .. } => {
                        "in doubt: waiting for a person's decision".to_owned()
                    }
                    SlotStatus::Reconciling { .. } => {
                        "in doubt: asking the tool whether it was performed".to_owned()
                    }
                    SlotStatus::Finished { result } => {
                        format!(
                            "{} {}",
                            if result.is_error { "error:" } else { "done:" },
                            result.content.chars().take(60).collect::<String>()
                        )
                    }
                };
                outln!("call    {} {} {} — {status}", s.call_id, s.tool, s.args);
            }
        }
        RunState::Publishing { effect, cancel, .. } => outln!(
            "publish global memory (effect {}/{}){}",
            effect.seq,
            effect.index,
            if cancel.is_some() {
                "; a cancel waits for its answer"
            } else {
                ""
            }
        ),
        _ => {}
    }
    super::memory::describe(&run.memory);
}

/// `runtape diff A B [--recursive]`.
pub(crate) fn diff(
    db: &Path,
    a: &str,
    b: &str,
    recursive: bool,
    json: bool,
) -> Result<(), CliError> {
    let what = "diff compares whole runs and names the first step where they differ";
    let (a, b) = (parse_whole_run(a, what)?, parse_whole_run(b, what)?);
    let store = open_existing(db)?;
    if recursive {
        let t = history::diff_trees(store.as_ref(), &a, &b)?;
        if json {
            let mut v = serde_json::to_value(&t).map_err(|e| CliError::internal(e.to_string()))?;
            v["type"] = json!("diff");
            return print_json(&v);
        }
        print_diff(&t.top, "");
        for c in &t.children {
            match (&c.a, &c.b, &c.diff) {
                (_, _, Some(d)) => {
                    outln!("child {}:", c.path);
                    print_diff(d, "  ");
                }
                (Some(x), None, _) => outln!("child {}: only below {a} ({x})", c.path),
                (None, Some(y), _) => outln!("child {}: only below {b} ({y})", c.path),
                _ => {}
            }
        }
        return Ok(());
    }
    let d = history::diff_runs(store.as_ref(), &a, &b)?;
    if json {
        return print_json(&diff_json(&d)?);
    }
    print_diff(&d, "");
    Ok(())
}

/// One comparison, each line indented by `indent`.
fn print_diff(d: &history::RunDiff, indent: &str) {
    let (a, b) = (&d.a, &d.b);
    let Some(p) = &d.first_difference else {
        if d.is_identical() {
            outln!("{indent}{a} and {b} are identical ({} steps)", d.common);
        } else if d.common == 0 {
            outln!(
                "{indent}{a} and {b} take the same {} steps apart from times and ids",
                d.alike
            );
        } else {
            outln!(
                "{indent}{a} and {b} take the same {} steps apart from times and ids (identical through step {})",
                d.alike,
                d.common
            );
        }
        return;
    };
    let agree = match (d.common, d.alike) {
        (0, 0) => "agree on no step".to_owned(),
        (c, l) if c == l => format!("agree on steps 1..={c}"),
        (0, l) => format!("take steps 1..={l} alike apart from times and ids"),
        (c, l) => format!(
            "agree on steps 1..={c}, take steps {}..={l} alike apart from times and ids",
            c + 1
        ),
    };
    outln!(
        "{indent}{a} and {b} {agree} and first differ at step {}",
        p.seq
    );
    for (name, side) in [(a, &p.a), (b, &p.b)] {
        match side {
            Some(s) => outln!(
                "{indent}  {name}: {} → {} via {} ({})",
                s.event.as_str(),
                s.state.as_str(),
                s.edge,
                &s.state_hash[..16]
            ),
            None => outln!("{indent}  {name}: (ends before step {})", p.seq),
        }
    }
    for c in &p.changes {
        outln!("{indent}  {}: {} ≠ {}", c.at, c.a, c.b);
    }
}

/// `runtape verify RUN`: replays the run through the current machine and checks its receipts.
/// Exit 0 when it holds, 1 with the first problem when it does not.
pub(crate) fn verify(
    db: &Path,
    run: &str,
    pubkey: Option<&str>,
    json: bool,
    recursive: bool,
) -> Result<(), CliError> {
    let run = parse_whole_run(run, "verify checks a whole run")?;
    let key = pubkey.map(super::receipts::public_key).transpose()?;
    let store = open_existing(db)?;
    verify_one(store.as_ref(), &run, key.as_ref(), json)?;
    if recursive {
        for child in super::tree::descendants(store.as_ref(), &run)? {
            verify_one(store.as_ref(), &child, key.as_ref(), json)?;
        }
    }
    Ok(())
}

fn verify_one(
    store: &dyn crate::store::Store,
    run: &RunId,
    key: Option<&crate::receipt::VerifyingKey>,
    json: bool,
) -> Result<(), CliError> {
    let run = run.clone();
    let result = history::verify(store, &run, key)?;
    if json {
        print_json(&verify_json(&run, &result)?)?;
    }
    match result {
        Ok(report) => {
            if json {
                return Ok(());
            }
            let r = &report.receipts;
            let receipts = match (&r.signed_by, r.trusted_key) {
                (_, _) if r.receipts == 0 => "no receipts".to_owned(),
                (Some(k), true) => format!(
                    "{} receipts signed by the trusted key {}",
                    r.receipts,
                    &k[..16]
                ),
                (Some(k), false) => format!(
                    "{} receipts signed by {} (pass --pubkey to check it is a key you trust)",
                    r.receipts,
                    &k[..16]
                ),
                (None, _) => format!("{} receipts, unsigned (hash-chained only)", r.receipts),
            };
            let h = &report.head;
            let head = match (h.sealed, h.trusted_key) {
                ("signed", true) => "signed by the trusted key".to_owned(),
                ("signed", false) => "signed".to_owned(),
                ("unsigned", _) => "unsigned (digest only)".to_owned(),
                (other, _) => format!("{other} (stored before heads were sealed; unsigned)"),
            };
            outln!(
                "OK: {} transitions of {} replay to the stored states (final state {}); head {head}, ends at seq {} ({}); {} messages{}, {} snapshots, {} outbox rows match; {receipts}",
                report.transitions,
                report.run,
                &report.final_state_hash[..16],
                h.seq,
                h.status,
                report.messages,
                match (report.catalogs, report.memory) {
                    (0, 0) => String::new(),
                    (n, 0) => format!(", {n} MCP catalogs"),
                    (0, m) => format!(", {m} global memory rows"),
                    (n, m) => format!(", {n} MCP catalogs, {m} global memory rows"),
                },
                report.snapshots,
                report.outbox,
            );
            Ok(())
        }
        Err(d) => Err(CliError::failed(format!("run {run} does not verify: {d}"))),
    }
}

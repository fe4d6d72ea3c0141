//! Read-only commands: `ls`, `log`, `show`, `diff`, `verify`: each calls [`crate::ops`] and
//! prints what it returns, as text or (with `--json`) as the view itself.

use std::path::Path;

use super::common::{
    CliError, age, cost_text, open_existing, outln, parse_run_at, parse_whole_run, print_json, usd,
    utc,
};
use crate::clock::wall_ms;
use crate::history;
use crate::machine::{
    AgentId, Edit, Effect, EventKind, Outcome, Reasoning, RunState, SlotStatus, StateKind,
};
use crate::ops;

/// `runtape ls`: every run with its status, steps, cost and age, newest first; child runs
/// indented under the run that started them unless `flat`.
/// With `tags` (`--tag KEY=VALUE`), only the runs carrying every one of them.
pub(crate) fn ls(db: &Path, json: bool, flat: bool, tags: &[String]) -> Result<(), CliError> {
    let wanted = tags
        .iter()
        .map(|t| ops::parse_tag(t).map(|(k, v)| (k.to_owned(), v.to_owned())))
        .collect::<Result<Vec<_>, _>>()?;
    let store = open_existing(db)?;
    let mut runs = ops::runs(store.as_ref())?;
    runs.retain(|r| wanted.iter().all(|(k, v)| r.tags.get(k) == Some(v)));
    if json {
        for r in &runs {
            print_json(r)?;
        }
        return Ok(());
    }
    let waiting = ops::waiting_in(&runs);
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
        ops::in_tree_order(&runs)
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
            .map(|p| format!(" (fork of {}@{})", p.run, p.seq))
            .unwrap_or_default();
        let session = super::sessions::suffix(r);
        let session = match &r.schedule {
            Some(by) => format!("{session} [schedule {} {}]", by.name, utc(by.instant_ms)),
            None => session,
        };
        let tags = if r.tags.is_empty() {
            String::new()
        } else {
            format!(" [{}]", tags_text(&r.tags))
        };
        let why = r
            .reason
            .as_deref()
            .map(|w| {
                format!(
                    " — {}",
                    w.replace('\n', " ").chars().take(60).collect::<String>()
                )
            })
            .unwrap_or_default();
        // A run resting on a child that waits for a person says so.
        let status = if waiting.contains(&r.id) {
            "awaiting child"
        } else if r.sleeping {
            "sleeping"
        } else {
            r.status
        };
        // A run waiting on a timer says when it comes due: its sleep, or a deadline.
        let wakes = match r.wakes_ms {
            Some(ms) if r.sleeping => format!(" (wakes {})", utc(ms)),
            Some(ms) if r.waits_for.is_empty() => format!(" (deadline {})", utc(ms)),
            Some(ms) => format!(
                " (deadline {}, waits for {})",
                utc(ms),
                r.waits_for.join(", ")
            ),
            None => String::new(),
        };
        outln!(
            "{:<16}  {:<16}  {:>6}  {:>16}  {:>5}  {:<20}  {goal}{session}{fork}{wakes}{tags}{why}",
            id,
            status,
            r.steps,
            cost_text(r.cost_nanos, r.unpriced_turns),
            age(now, r.updated_ms),
            r.driver.as_deref().unwrap_or("-")
        );
    }
    Ok(())
}

/// A run's tags as `k=v, k=v`.
fn tags_text(tags: &std::collections::BTreeMap<String, String>) -> String {
    tags.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `runtape log RUN`: the timeline (with `tail`, its last `tail` steps).
pub(crate) fn log(db: &Path, run: &str, json: bool, tail: Option<u64>) -> Result<(), CliError> {
    let (run, seq) = parse_run_at(run)?;
    if seq.is_some() {
        return Err(CliError::usage(
            "`log` takes a run id without @SEQ; use `runtape show RUN@SEQ` for one step",
        ));
    }
    let store = open_existing(db)?;
    let entries = match tail {
        Some(count) => ops::timeline_tail(store.as_ref(), &run, count)?,
        None => ops::timeline(store.as_ref(), &run)?,
    };
    if json {
        for e in &entries {
            print_json(e)?;
        }
        return Ok(());
    }
    // The row without its setup: the header shows where the run stands.
    let rec = history::row(store.as_ref(), &run)?;
    let goal = history::fork_goal(store.as_ref(), &rec)?.unwrap_or_else(|| rec.goal.clone());
    outln!(
        "run {run} — {} — {} steps — {} — {}",
        rec.shown_status(),
        rec.seq,
        cost_text(rec.cost_nanos, rec.unpriced_turns),
        goal.replace('\n', " ")
    );
    if let Some((parent, at)) = &rec.parent {
        outln!("forked from {parent} at step {at}; steps 1..={at} are the parent's");
    }
    let (read, written) = entries.iter().map(|e| &e.entry).fold((0, 0), |s, e| {
        (s.0 + e.cache_read_tokens, s.1 + e.cache_write_tokens)
    });
    if read + written > 0 {
        let which = match tail {
            Some(_) => format!(" (steps {} to {})", entries[0].entry.seq, rec.seq),
            None => String::new(),
        };
        outln!("prompt cache{which}: {read} input tokens read from it, {written} written to it");
    }
    let label = state_labels(entries.iter().map(|e| &e.entry));
    for e in entries.iter().map(|e| &e.entry) {
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
            label(e.from),
            label(e.to),
            e.agent.as_ref().map(|a| a.as_str()).unwrap_or("-"),
            tokens,
            cost,
            match e.took_ms {
                Some(ms) => format!("{} ({})", e.summary, took_text(ms)),
                None => e.summary.clone(),
            }
        );
    }
    // Children waiting for a person are looked for (a read of the whole history) only where
    // the run may wait on a call: ended runs, runs waiting themselves and runs resting out of
    // budget (at a step boundary, no call outstanding) wait on none.
    let may_wait_on_a_child = !rec.status.is_terminal()
        && !matches!(
            rec.status,
            crate::store::RunStatus::AwaitingInput | crate::store::RunStatus::BudgetExhausted
        );
    if may_wait_on_a_child {
        for w in ops::waiting_below(store.as_ref(), &run)? {
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
    let detail = ops::show(store.as_ref(), &run, seq)?;
    if json {
        return print_json(&detail);
    }
    let view = &detail.step;
    outln!("run {} step {} of {}", view.run, view.seq, view.latest);
    let rec = history::row(store.as_ref(), &view.run)?;
    if rec.is_queued() {
        outln!(
            "queued  no process has taken it up yet: a `runtape worker` serving its spec directory, or `runtape resume {}`, starts it",
            view.run
        );
    }
    if !detail.tags.is_empty() {
        outln!("tags    {}", tags_text(&detail.tags));
    }
    if let Some(why) = rec.reason() {
        outln!("ended   {}", why.replace('\n', " "));
    }
    if let Some(s) = &view.session {
        let forked = rec.parent.is_some();
        super::sessions::describe_place(s, forked);
    }
    if let Some(by) = store
        .run(&view.run)?
        .and_then(|r| r.setup)
        .and_then(|s| crate::config::ScheduledBy::of_setup(&s))
    {
        let how = if by.manual {
            "triggered by hand"
        } else {
            "due"
        };
        outln!(
            "schedule {} started it, {how} at {}",
            by.name,
            utc(by.instant_ms)
        );
    }
    if let (Some(edge), Some(event)) = (&view.edge, &view.event) {
        outln!(
            "event   {} at {} (edge {edge})",
            event.kind(),
            utc(event.at.ms())
        );
        if let crate::machine::EventBody::Edited { edits } = &event.body {
            for edit in edits {
                outln!("edit    {}", history::edit_in_words(edit));
            }
        }
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
                for c in request.compacted.iter().filter(|c| c.seq == view.seq) {
                    outln!("        {}", compaction_text(c));
                }
                super::context_shown::describe_request(request, view.seq);
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
                );
                if let Some(reason) = &request.reason {
                    outln!("        because {reason}");
                }
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
            Effect::StartTimer {
                id, call_id, due, ..
            } => outln!(
                "effect  {id}: sleep ({call_id}) until {}",
                crate::text::utc(due.ms())
            ),
        }
    }
    if let Some(event) = &view.event {
        super::sessions::describe_event(&event.body);
        match &event.body {
            crate::machine::EventBody::ModelReplied { reply, .. } => describe_reply(reply),
            crate::machine::EventBody::ToolReturned { effect, outcome } => {
                describe_tool_outcome(effect, outcome);
            }
            _ => {}
        }
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
            // A label other than trusted and public is shown before the text (guarded tools).
            let label = if m.label.is_trusted_public() {
                String::new()
            } else {
                format!("({}) ", m.label.describe())
            };
            outln!(
                "  [{i}] {:<9} {label}{}{extra}",
                format!("{:?}", m.role).to_lowercase(),
                text.replace('\n', "\n            ")
            );
            for a in &m.attachments {
                outln!("            {}", attached(a));
            }
        }
    }
    Ok(())
}

/// The result of a `ToolReturned` step as the model is given it: a string as is, anything
/// else as JSON; an error's message. Lines after the first are indented under it; each file
/// the result carries follows on its own line.
fn describe_tool_outcome(effect: &crate::machine::EffectId, outcome: &crate::machine::ToolOutcome) {
    let (label, text, files) = match outcome {
        crate::machine::ToolOutcome::Ok { value, files } => (
            "result ",
            value
                .as_str()
                .map_or_else(|| value.to_string(), str::to_owned),
            files.as_slice(),
        ),
        crate::machine::ToolOutcome::Error { message } => ("error  ", message.clone(), &[][..]),
    };
    outln!("{label} {effect}: {}", text.replace('\n', "\n        "));
    for a in files {
        outln!("        {}", attached(a));
    }
}

/// The line `show` prints for a file a message or a result carries: its name, media type,
/// size and blob.
fn attached(a: &crate::machine::Attachment) -> String {
    format!(
        "attached {} ({}, {} bytes) blob {}",
        a.file_name(),
        a.media_type,
        a.size,
        a.digest.to_hex()
    )
}

/// The reply of a `ModelReplied` step: how it ended, its tokens (cache reads and writes
/// apart) and cost, and a refusal's words or a truncation.
fn describe_reply(reply: &crate::machine::ModelReply) {
    let finish = match (&reply.finish_reason.raw, reply.finish_reason.normalized) {
        (Some(raw), _) => raw.clone(),
        (None, Some(f)) => serde_json::to_value(f)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
        (None, None) => "-".to_owned(),
    };
    let mut line = format!("reply   finish {finish}");
    if let Some(u) = reply.usage {
        line.push_str(&format!(
            ", {} input / {} output tokens",
            u.input_tokens, u.output_tokens
        ));
        let (read, written) = history::cache_tokens(Some(&u));
        if read + written > 0 {
            line.push_str(&format!(" (prompt cache: {read} read, {written} written)"));
        }
    }
    if let Some(c) = reply.cost_nanos {
        line.push_str(&format!(", {}", usd(c)));
    }
    outln!("{line}");
    match history::reply_end(reply) {
        Some("refused") => outln!(
            "refused the model declined: {}",
            crate::machine::refusal_of(reply)
                .unwrap_or_default()
                .replace('\n', " ")
        ),
        Some(_) => outln!(
            "truncated the output-token limit cut this reply; the agent's on_truncated decides what follows"
        ),
        None => {}
    }
}

/// ` from NAME (escalated N×)` for a call a deadline handed on, else nothing.
pub(crate) fn escalated_text(slot: &crate::machine::Slot) -> String {
    slot.escalated
        .as_ref()
        .map(|e| format!(" from {} (escalated {}×)", e.to, e.times))
        .unwrap_or_default()
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
                    SlotStatus::Approval { .. } => {
                        format!("waiting for approval{}", escalated_text(s))
                    }
                    SlotStatus::Question { .. } => {
                        format!("waiting for a person's answer{}", escalated_text(s))
                    }
                    SlotStatus::InDoubt { .. } => {
                        "in doubt: waiting for a person's decision".to_owned()
                    }
                    SlotStatus::Reconciling { .. } => {
                        "in doubt: asking the tool whether it was performed".to_owned()
                    }
                    SlotStatus::Sleeping { due, .. } => {
                        format!("sleeping until {}", crate::text::utc(due.ms()))
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
    for (agent, a) in &run.agents {
        super::context_shown::describe_summary(agent, &a.context);
        if !a.context.compacted.is_empty() {
            let list: Vec<String> = a
                .context
                .compacted
                .iter()
                .map(|c| format!("[{}] at step {}", c.index, c.seq))
                .collect();
            outln!(
                "context {agent}: {} tool result(s) compacted to fit its context window: {}",
                list.len(),
                list.join(", ")
            );
        }
    }
    super::memory::describe(&run.memory);
    super::hidden::describe(&run.hidden);
    super::saga::describe(state);
}

/// One compaction, in words: which message, what was done, its size before and after.
fn compaction_text(c: &crate::machine::context::Compacted) -> String {
    let how = match c.how {
        crate::machine::context::Compaction::Dropped => "dropped",
        crate::machine::context::Compaction::Shortened => "shortened",
    };
    format!(
        "compacted message [{}]: tool result {how} to fit the context window ({} → {} bytes)",
        c.index, c.before, c.after
    )
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
        let view = ops::diff_tree(store.as_ref(), &a, &b)?;
        if json {
            return print_json(&view);
        }
        let t = &view.diff;
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
    let view = ops::diff(store.as_ref(), &a, &b)?;
    if json {
        return print_json(&view);
    }
    print_diff(&view.diff, "");
    Ok(())
}

/// How `log` names each state: by its stored name, except that the state an agent finishes in
/// (`handoff`) reads `finished` in a run where no agent handed over to another (a single
/// agent's run), where `handoff` would suggest a handover that never happened.
fn state_labels<'a>(
    entries: impl Iterator<Item = &'a history::TimelineEntry>,
) -> impl Fn(StateKind) -> &'static str {
    let mut agents: Vec<&AgentId> = Vec::new();
    for a in entries.filter_map(|e| e.agent.as_ref()) {
        if !agents.contains(&a) {
            agents.push(a);
        }
    }
    let handed_over = agents.len() > 1;
    move |kind| match kind {
        StateKind::Handoff if !handed_over => "finished",
        other => other.as_str(),
    }
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
    // A fork's edits read as words, not as the event's JSON cut short.
    let mut edited = false;
    for (name, side) in [(a, &p.a), (b, &p.b)] {
        let edits = side
            .as_ref()
            .filter(|s| s.event == EventKind::Edited)
            .and_then(|s| serde_json::from_value::<Vec<Edit>>(s.detail.get("edits")?.clone()).ok());
        for edit in edits.iter().flatten() {
            edited = true;
            outln!("{indent}  {name} edits: {}", history::edit_in_words(edit));
        }
    }
    for c in &p.changes {
        if edited && c.at.starts_with("event/edits") {
            continue;
        }
        outln!("{indent}  {}: {} ≠ {}", c.at, c.a, c.b);
    }
}

/// `runtape verify RUN`: replays the run through the current machine and checks its receipts
/// (with `recursive`, every run below it too, stopping at the first that does not verify).
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
    if !recursive {
        return report(ops::verify(store.as_ref(), &run, key.as_ref())?, json);
    }
    for view in ops::verify_tree(store.as_ref(), &run, key.as_ref()) {
        report(view?, json)?;
    }
    Ok(())
}

/// Prints one verification (one line, or its JSON); a run that does not verify is an error
/// (exit 1) after its JSON is printed.
fn report(view: ops::VerifyView, json: bool) -> Result<(), CliError> {
    if json {
        print_json(&view)?;
    }
    let report = view.check()?;
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
        "OK: {} transitions of {} replay to the stored states (final state {}); head {head}, ends at seq {} ({}); {} messages{}{}, {} snapshots, {} outbox rows match; {receipts}",
        report.transitions,
        report.run,
        &report.final_state_hash[..16],
        h.seq,
        h.status,
        report.messages,
        match report.files {
            0 => String::new(),
            n => format!(", {n} attached files"),
        },
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

/// How long an answered effect took, for `log`: milliseconds under ten seconds, else seconds
/// with one decimal, else minutes.
fn took_text(ms: u64) -> String {
    match ms {
        0..10_000 => format!("{ms} ms"),
        10_000..600_000 => format!("{:.1} s", ms as f64 / 1000.0),
        _ => format!("{} min", ms / 60_000),
    }
}

//! The tamper catalogue: one edit of each stored column (and a few cut or forged rows), each
//! with the run to check and what the one-line refusal must name. `verify::tamper` proves
//! `verify` catches every one; `verify::tamper_refused` that no command acts on any of them.
//!
//! [`run_cases`] edits one run's own rows (its row, spec, head, transitions, snapshots, message
//! blobs, outbox); [`cases`] is those for the long run plus the edits only the fork, the killed
//! run, the session runs and the memory run have; [`waiting_cases`] adds what a run waiting
//! for approval of a `deploy` call invites (the call's arguments, its asking turn's seal, a
//! forged outbox row).

use rusqlite::Connection;

use super::tamper::{fixture, key_of, row};

/// One edit: the column it tampers with, the run to check, the SQL, what the one-line error
/// must contain (any of), and the step it edits (0 when it edits no step's row).
pub(crate) struct Case {
    pub(crate) column: &'static str,
    pub(crate) run: String,
    pub(crate) sql: String,
    pub(crate) needles: Vec<String>,
    pub(crate) seq: u64,
}

fn case(column: &'static str, run: &str, sql: String, needles: &[&str], seq: u64) -> Case {
    Case {
        column,
        run: run.to_owned(),
        sql,
        needles: needles.iter().map(|s| (*s).to_owned()).collect(),
        seq,
    }
}

pub(crate) fn one(conn: &Connection, sql: &str) -> i64 {
    conn.query_row(sql, [], |r| r.get(0))
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

pub(crate) fn seq_of(id: i64) -> u64 {
    (id & 0xffff_ffff) as u64
}

/// The run [`run_cases`] edits and where.
pub(crate) struct Target<'a> {
    /// The run.
    pub(crate) run: &'a str,
    /// Another run, whose key, spec row or head is swapped in.
    pub(crate) other: &'a str,
    /// Edits of single steps land after this seq (`mid` is ten steps on).
    pub(crate) after: u64,
    /// Text of a model reply of the run (`step 9`), found in its event and message blob.
    pub(crate) text: &'a str,
    /// The id the run is renamed to.
    pub(crate) forged_id: &'a str,
}

/// Every edit of `t.run`'s own rows, computed against the pristine database.
pub(crate) fn run_cases(conn: &Connection, t: &Target<'_>) -> Vec<Case> {
    let (run, after, text) = (t.run, t.after, t.text);
    let kl = key_of(conn, run);
    let ko = key_of(conn, t.other);
    let range = format!("id BETWEEN {} AND {}", row(kl, 1), row(kl, 100_000));
    // The transition whose event carries the model's reply `text`, which appends that message.
    let reply = one(
        conn,
        &format!(
            "SELECT min(id) FROM transitions WHERE {range} AND instr(event, CAST('{text}' AS BLOB)) > 0"
        ),
    );
    let reply_seq = seq_of(reply);
    let first_after = |condition: &str| {
        one(
            conn,
            &format!(
                "SELECT min(id) FROM transitions WHERE {range} AND id > {} AND {condition}",
                row(kl, after)
            ),
        )
    };
    let sealed = first_after("seal IS NOT NULL");
    let unsealed = first_after("seal IS NULL");
    let emitting = first_after("length(effects) > 0");
    let mid_seq = after + 10;
    let mid = row(kl, mid_seq);
    let done_seq = one(
        conn,
        &format!("SELECT min(seq) FROM outbox WHERE run = {kl} AND seq > {after}"),
    ) as u64;
    let blob = format!("instr(bytes, CAST('{text}' AS BLOB)) > 0");
    // The character after `step ` (a digit) is replaced by another: same length, still
    // decodable, another reply.
    let digit = text.as_bytes().get(5).copied().unwrap_or(b'0');
    let other_digit = if digit == b'8' { '7' } else { '8' };
    let s = |n: u64| format!("seq {n}");
    let (mid_s, reply_s, sealed_s, unsealed_s, emitting_s) = (
        s(mid_seq),
        s(reply_seq),
        s(seq_of(sealed)),
        s(seq_of(unsealed)),
        s(seq_of(emitting)),
    );
    let done_s = s(done_seq);
    let of_run = format!("WHERE id = '{run}'");
    let specs_of_run = format!("WHERE run = {kl}");
    let has_outcome = one(
        conn,
        &format!("SELECT count(*) FROM run_specs {specs_of_run} AND outcome IS NOT NULL"),
    ) > 0;
    let snapshot_64 = one(
        conn,
        &format!("SELECT count(*) FROM snapshots WHERE id = {}", row(kl, 64)),
    ) > 0;
    let completed = one(
        conn,
        &format!("SELECT count(*) FROM runs {of_run} AND status = 'completed'"),
    ) > 0;
    let mut out = vec![
        // runs
        case(
            "runs.key",
            run,
            format!(
                "UPDATE runs SET key = -1 WHERE key = {kl}; UPDATE runs SET key = {kl} WHERE key = {ko}; UPDATE runs SET key = {ko} WHERE key = -1"
            ),
            &["runs.key"],
            0,
        ),
        case(
            "runs.id",
            t.forged_id,
            format!("UPDATE runs SET id = '{}' {of_run}", t.forged_id),
            &["runs.id"],
            0,
        ),
        case(
            "run_specs.spec",
            run,
            format!(
                "UPDATE run_specs SET spec = replace(spec, '\"idempotent\":false', '\"idempotent\":true') {specs_of_run}"
            ),
            &["run_specs.spec"],
            0,
        ),
        case(
            "run_specs.setup",
            run,
            format!(
                "UPDATE run_specs SET setup = replace(setup, 'cat >> notes.log', 'touch PWNED; cat >> notes.log') {specs_of_run}"
            ),
            &["run_specs.setup"],
            0,
        ),
        case(
            "run_specs.goal",
            run,
            format!("UPDATE run_specs SET goal = 'Note nothing.' {specs_of_run}"),
            &["run_specs.goal"],
            0,
        ),
        case(
            "run_specs.run",
            run,
            format!(
                "UPDATE run_specs SET run = -1 WHERE run = {kl}; UPDATE run_specs SET run = {kl} WHERE run = {ko}; UPDATE run_specs SET run = {ko} WHERE run = -1"
            ),
            &["run_specs."],
            0,
        ),
        case(
            "run_specs.run",
            run,
            format!("DELETE FROM run_specs {specs_of_run}"),
            &["run_specs"],
            0,
        ),
        case(
            "runs.status",
            run,
            format!("UPDATE runs SET status = 'failed' {of_run}"),
            &["runs.status"],
            0,
        ),
        case(
            "runs.state_kind",
            run,
            format!("UPDATE runs SET state_kind = 'generating' {of_run}"),
            &["runs.state_kind"],
            0,
        ),
        case(
            "runs.seq",
            run,
            format!("UPDATE runs SET seq = seq - 1 {of_run}"),
            &["runs.seq"],
            0,
        ),
        case(
            "run_specs.created_ms",
            run,
            format!("UPDATE run_specs SET created_ms = created_ms - 1000 {specs_of_run}"),
            &["run_specs.created_ms"],
            0,
        ),
        case(
            "runs.updated_ms",
            run,
            format!("UPDATE runs SET updated_ms = updated_ms + 1000 {of_run}"),
            &["runs.updated_ms"],
            0,
        ),
        case(
            "runs.cost_nanos",
            run,
            format!("UPDATE runs SET cost_nanos = cost_nanos + 1 {of_run}"),
            &["runs.cost_nanos"],
            0,
        ),
        case(
            "runs.tokens",
            run,
            format!("UPDATE runs SET tokens = tokens * 10 {of_run}"),
            &["runs.tokens"],
            0,
        ),
        case(
            "runs.unpriced_turns",
            run,
            format!("UPDATE runs SET unpriced_turns = unpriced_turns + 1 {of_run}"),
            &["runs.unpriced_turns"],
            0,
        ),
        if has_outcome {
            case(
                "run_specs.outcome",
                run,
                format!(
                    "UPDATE run_specs SET outcome = replace(outcome, 'all noted', 'nothing noted') {specs_of_run}"
                ),
                &["run_specs.outcome"],
                0,
            )
        } else {
            case(
                "run_specs.outcome",
                run,
                format!(
                    "UPDATE run_specs SET outcome = '{{\"outcome\":\"completed\"}}' {specs_of_run}"
                ),
                &["run_specs.outcome"],
                0,
            )
        },
        // transitions
        case(
            "transitions.id",
            run,
            format!("UPDATE transitions SET id = id + 1000 WHERE id = {mid}"),
            &[&mid_s],
            mid_seq,
        ),
        case(
            "transitions.at",
            run,
            format!("UPDATE transitions SET at = at + 65536 WHERE id = {mid}"),
            &[&mid_s],
            mid_seq,
        ),
        case(
            "transitions.event",
            run,
            format!(
                // The reply's digit is changed in place, in plain and packed JSON alike: the
                // row still decodes, to an event the chain does not cover.
                "UPDATE transitions SET event = substr(event, 1, instr(event, CAST('{text}' AS BLOB)) + 4) \
                 || CAST('{other_digit}' AS BLOB) || substr(event, instr(event, CAST('{text}' AS BLOB)) + 6) WHERE id = {reply}"
            ),
            &[&reply_s],
            reply_seq,
        ),
        case(
            "transitions.event",
            run,
            format!("UPDATE transitions SET event = event || CAST(' ' AS BLOB) WHERE id = {mid}"),
            &[&mid_s],
            mid_seq,
        ),
        case(
            "transitions.edge",
            run,
            format!(
                "UPDATE transitions SET edge = (SELECT edge FROM transitions WHERE id = {}) WHERE id = {mid}",
                row(kl, 1)
            ),
            &[&mid_s],
            mid_seq,
        ),
        case(
            "transitions.edge",
            run,
            format!("UPDATE transitions SET edge = X'00000000' WHERE id = {mid}"),
            &[&mid_s],
            mid_seq,
        ),
        case(
            "transitions.effects",
            run,
            format!(
                "UPDATE transitions SET effects = effects || CAST(' ' AS BLOB) WHERE id = {emitting}"
            ),
            &[&emitting_s],
            seq_of(emitting),
        ),
        case(
            "transitions.state_hash",
            run,
            format!("UPDATE transitions SET state_hash = zeroblob(32) WHERE id = {mid}"),
            &[&mid_s],
            mid_seq,
        ),
        case(
            "transitions.chain",
            run,
            format!("UPDATE transitions SET chain = zeroblob(32) WHERE id = {mid}"),
            &[&mid_s],
            mid_seq,
        ),
        case(
            "transitions.seal",
            run,
            format!(
                "UPDATE transitions SET seal = substr(seal, 1, 33) || zeroblob(64) WHERE id = {sealed}"
            ),
            &[&sealed_s],
            seq_of(sealed),
        ),
        case(
            "transitions.seal",
            run,
            format!("UPDATE transitions SET seal = NULL WHERE id = {sealed}"),
            &[&sealed_s],
            seq_of(sealed),
        ),
        case(
            "transitions.seal",
            run,
            format!(
                "UPDATE transitions SET seal = (SELECT seal FROM transitions WHERE id = {sealed}) WHERE id = {unsealed}"
            ),
            &[&unsealed_s],
            seq_of(unsealed),
        ),
    ];
    if snapshot_64 {
        out.extend([
            case(
                "snapshots.id",
                run,
                format!(
                    "UPDATE snapshots SET id = id + 1 WHERE id = {}",
                    row(kl, 64)
                ),
                &["seq 64"],
                64,
            ),
            case(
                "snapshots.id",
                run,
                format!("DELETE FROM snapshots WHERE id = {}", row(kl, 64)),
                &["seq 64"],
                64,
            ),
            case(
                "snapshots.state",
                run,
                format!(
                    "UPDATE snapshots SET state = state || CAST(' ' AS BLOB) WHERE id = {}",
                    row(kl, 64)
                ),
                &["seq 64"],
                64,
            ),
        ]);
    } else {
        // A snapshot where none is due.
        out.push(case(
            "snapshots.id",
            run,
            format!(
                "INSERT INTO snapshots (id, state) VALUES ({}, CAST('{{}}' AS BLOB))",
                row(kl, mid_seq)
            ),
            &[&mid_s],
            mid_seq,
        ));
    }
    out.extend([
        // blobs
        case(
            "blobs.hash",
            run,
            format!("UPDATE blobs SET hash = zeroblob(32) WHERE {blob}"),
            &[&reply_s],
            reply_seq,
        ),
        case(
            "blobs.hash",
            run,
            format!("DELETE FROM blobs WHERE {blob}"),
            &[&reply_s],
            reply_seq,
        ),
        case(
            "blobs.bytes",
            run,
            format!(
                "UPDATE blobs SET bytes = substr(bytes, 1, instr(bytes, CAST('{text}' AS BLOB)) + 4) \
                 || CAST('X' AS BLOB) || substr(bytes, instr(bytes, CAST('{text}' AS BLOB)) + 6) WHERE {blob}"
            ),
            &[&reply_s],
            reply_seq,
        ),
        case(
            "blobs.bytes",
            run,
            format!("UPDATE blobs SET bytes = substr(bytes, 1, length(bytes) - 1) WHERE {blob}"),
            &[&reply_s],
            reply_seq,
        ),
        // outbox
        case(
            "outbox.seq",
            run,
            format!("UPDATE outbox SET seq = seq + 1 WHERE run = {kl} AND seq = {done_seq}"),
            &[&s(done_seq + 1)],
            done_seq + 1,
        ),
        case(
            "outbox.idx",
            run,
            format!("UPDATE outbox SET idx = idx + 7 WHERE run = {kl} AND seq = {done_seq}"),
            &[&done_s],
            done_seq,
        ),
        case(
            "outbox.status",
            run,
            format!("UPDATE outbox SET status = 'pending' WHERE run = {kl} AND seq = {done_seq}"),
            &[&done_s],
            done_seq,
        ),
        case(
            "outbox.idempotency_key",
            run,
            format!(
                "UPDATE outbox SET idempotency_key = idempotency_key || 'x' WHERE run = {kl} AND seq = {done_seq}"
            ),
            &[&done_s],
            done_seq,
        ),
        // the sealed head, packed in the run's row
        case(
            "runs.head",
            run,
            format!(
                "UPDATE runs SET head = (SELECT head FROM runs WHERE key = {ko}), seal = (SELECT seal FROM runs WHERE key = {ko}) WHERE key = {kl}"
            ),
            &["runs.key"],
            0,
        ),
        case(
            "runs.head",
            run,
            format!("UPDATE runs SET head = NULL WHERE key = {kl}"),
            &["runs.head"],
            0,
        ),
        if completed {
            case(
                "runs.head",
                run,
                // The packed head spells its status as text: `completed` becomes `cancelled`,
                // as long, so the head still unpacks, to a head its seal does not cover.
                format!(
                    "UPDATE runs SET head = CAST(replace(CAST(head AS TEXT), 'completed', 'cancelled') AS BLOB) WHERE key = {kl}"
                ),
                &["runs.seal"],
                0,
            )
        } else {
            case(
                "runs.head",
                run,
                format!(
                    "UPDATE runs SET head = CAST(replace(CAST(head AS TEXT), 'awaiting_input', 'awaiting_INPUT') AS BLOB) WHERE key = {kl}"
                ),
                &["runs.seal", "runs.head"],
                0,
            )
        },
        case(
            "runs.head",
            run,
            format!("UPDATE runs SET head = substr(head, 1, length(head) - 1) WHERE key = {kl}"),
            &["runs.head"],
            0,
        ),
        case(
            "runs.seal",
            run,
            format!("UPDATE runs SET seal = substr(seal, 1, 33) || zeroblob(64) WHERE key = {kl}"),
            &["runs.seal"],
            0,
        ),
    ]);
    out
}

/// What a run waiting for a person to approve its `deploy` call invites, beyond
/// [`run_cases`]: the arguments of the call awaiting approval changed where they are stored,
/// the receipt seal of the model turn that asked for it stripped, an early step's time or
/// chain link changed, and an outbox row forged for the call approval would start.
pub(crate) fn waiting_cases(conn: &Connection, run: &str) -> Vec<Case> {
    let k = key_of(conn, run);
    let asking = one(
        conn,
        &format!(
            "SELECT max(id) FROM transitions WHERE id BETWEEN {} AND {} AND instr(effects, CAST('6.6.6' AS BLOB)) > 0",
            row(k, 1),
            row(k, 100_000)
        ),
    );
    let end = one(conn, &format!("SELECT seq FROM runs WHERE key = {k}")) as u64;
    let asking_seq = seq_of(asking);
    let at = |n: u64| format!("seq {n}");
    vec![
        case(
            "transitions.effects",
            run,
            format!(
                "UPDATE transitions SET effects = CAST(replace(CAST(effects AS TEXT), '6.6.6', '9.9.9') AS BLOB) WHERE id = {asking}"
            ),
            &[&at(asking_seq)],
            asking_seq,
        ),
        case(
            "transitions.seal",
            run,
            format!("UPDATE transitions SET seal = NULL WHERE id = {asking}"),
            &[&at(asking_seq)],
            asking_seq,
        ),
        case(
            "transitions.at",
            run,
            format!(
                "UPDATE transitions SET at = at + 65536 WHERE id = {}",
                row(k, 2)
            ),
            &["seq 2"],
            2,
        ),
        case(
            "transitions.chain",
            run,
            format!(
                "UPDATE transitions SET chain = zeroblob(32) WHERE id = {}",
                row(k, 2)
            ),
            &["seq 2"],
            2,
        ),
        case(
            "outbox.idx",
            run,
            format!(
                "INSERT INTO outbox (run, seq, idx, status, idempotency_key) VALUES ({k}, {}, 0, 'done', '{run}:{}:0')",
                end + 1,
                end + 1
            ),
            &[&at(end + 1)],
            end + 1,
        ),
        case(
            "outbox.idx",
            run,
            format!(
                "INSERT INTO outbox (run, seq, idx, status, idempotency_key) VALUES ({k}, {asking_seq}, 0, 'pending', '{run}:{asking_seq}:0')"
            ),
            &[&at(asking_seq)],
            asking_seq,
        ),
    ]
}

/// The `verify` catalogue: every edit of the long run's rows, and those only the fork, the
/// killed run, the session runs and the memory run have. Computed against the pristine
/// database.
pub(crate) fn cases() -> Vec<Case> {
    let f = fixture();
    let conn = Connection::open(&f.db).expect("opens");
    let (long, fork, killed) = (f.long.as_str(), f.fork.as_str(), f.killed.as_str());
    let (first, second) = (f.session_first.as_str(), f.session_second.as_str());
    let (k1, k2) = (key_of(&conn, first), key_of(&conn, second));
    let mem = f.memory.as_str();
    let pruned = f.pruned.as_str();
    let kf = key_of(&conn, fork);
    let kk = key_of(&conn, killed);
    let started_seq = one(&conn, &format!("SELECT seq FROM outbox WHERE run = {kk}")) as u64;
    let started_s = format!("seq {started_seq}");
    let mut out = run_cases(
        &conn,
        &Target {
            run: long,
            other: killed,
            after: 20,
            text: "step 9",
            forged_id: "01forgedrunid000",
        },
    );
    out.extend([
        case(
            "run_specs.parent_id",
            fork,
            format!("UPDATE run_specs SET parent_id = '{killed}' WHERE run = {kf}"),
            &["run_specs.parent_id"],
            0,
        ),
        case(
            "run_specs.fork_seq",
            fork,
            format!("UPDATE run_specs SET fork_seq = fork_seq + 1 WHERE run = {kf}"),
            &["run_specs.fork_seq"],
            0,
        ),
        // outbox of the killed run: its call left `started`
        case(
            "outbox.run",
            killed,
            format!("UPDATE outbox SET run = {kf} WHERE run = {kk}"),
            &[&started_s],
            started_seq,
        ),
        case(
            "outbox.status",
            killed,
            format!("UPDATE outbox SET status = 'pending' WHERE run = {kk}"),
            &[&started_s],
            started_seq,
        ),
        case(
            "outbox.status",
            killed,
            format!("DELETE FROM outbox WHERE run = {kk}"),
            &[&started_s],
            started_seq,
        ),
        // session_runs (revision 5)
        case(
            "session_runs.session",
            second,
            format!("UPDATE session_runs SET session = 'forged' WHERE run = {k2}"),
            &["session_runs"],
            0,
        ),
        case(
            "session_runs.idx",
            second,
            format!("UPDATE session_runs SET idx = 9 WHERE run = {k2}"),
            &["session_runs"],
            0,
        ),
        case(
            "session_runs.run",
            second,
            format!(
                "UPDATE session_runs SET run = -1 WHERE run = {k1}; UPDATE session_runs SET run = {k1} WHERE run = {k2}; UPDATE session_runs SET run = {k2} WHERE run = -1"
            ),
            &["session_runs"],
            0,
        ),
        case(
            "session_runs.run",
            second,
            format!("DELETE FROM session_runs WHERE run = {k2}"),
            &["session_runs"],
            0,
        ),
        case(
            "session_runs.run",
            fork,
            format!("INSERT INTO session_runs (session, idx, run) VALUES ('tamper', 3, {kf})"),
            &["session_runs"],
            0,
        ),
        // The run a session run goes on from must have completed with what it carried.
        case(
            "runs.status",
            second,
            format!("UPDATE runs SET status = 'failed' WHERE key = {k1}"),
            &["session history comes from"],
            0,
        ),
        // global memory (revision 5): the memory run published `a` and `b`; `b` was removed.
        case(
            "memory_global.name",
            mem,
            "UPDATE memory_global SET name = 'other' WHERE key = 'a'".into(),
            &["memory_global.name"],
            0,
        ),
        case(
            "memory_global.key",
            mem,
            "UPDATE memory_global SET key = 'z' WHERE key = 'a'".into(),
            &["memory_global.key"],
            0,
        ),
        case(
            "memory_global.version",
            mem,
            "UPDATE memory_global SET version = 5 WHERE key = 'a'".into(),
            &["memory_global.version"],
            0,
        ),
        case(
            "memory_global.value",
            mem,
            "UPDATE memory_global SET value = 'forged' WHERE key = 'a'".into(),
            &["memory_global.value"],
            0,
        ),
        case(
            "memory_global.value",
            mem,
            "UPDATE memory_global SET value = 'back again' WHERE key = 'b' AND version = 2".into(),
            &["memory_global.removal"],
            0,
        ),
        case(
            "memory_global.run_id",
            mem,
            format!("UPDATE memory_global SET run_id = '{long}' WHERE key = 'a'"),
            &["memory_global.effect_seq", "memory_global.run_id"],
            0,
        ),
        case(
            "memory_global.run_id",
            mem,
            "UPDATE memory_global SET run_id = 'nosuchrun' WHERE key = 'a'".into(),
            &["memory_global.run_id"],
            0,
        ),
        case(
            "memory_global.effect_seq",
            mem,
            "UPDATE memory_global SET effect_seq = effect_seq - 1 WHERE key = 'a'".into(),
            &["memory_global.effect_seq"],
            0,
        ),
        case(
            "memory_global.effect_index",
            mem,
            "UPDATE memory_global SET effect_index = 1 WHERE key = 'a'".into(),
            &["memory_global.effect_index"],
            0,
        ),
        case(
            "memory_global.removal",
            mem,
            "UPDATE memory_global SET removal = 7 WHERE removal IS NOT NULL".into(),
            &["memory_global.removal"],
            0,
        ),
        case(
            "memory_global.removal",
            mem,
            "DELETE FROM memory_global WHERE removal IS NOT NULL".into(),
            &["memory_removals.body"],
            0,
        ),
        case(
            "memory_removals.id",
            mem,
            "UPDATE memory_removals SET id = 2".into(),
            &["memory_removals.id"],
            0,
        ),
        case(
            "memory_removals.body",
            mem,
            "UPDATE memory_removals SET body = CAST(replace(CAST(body AS TEXT), '\"by\":\"', '\"by\":\"someone else, ') AS BLOB)".into(),
            &["memory_removals.chain", "memory_removals.body"],
            0,
        ),
        case(
            "memory_removals.chain",
            mem,
            "UPDATE memory_removals SET chain = zeroblob(32)".into(),
            &["memory_removals.chain"],
            0,
        ),
        case(
            "memory_removals.seal",
            mem,
            "UPDATE memory_removals SET seal = CAST(substr(seal, 1, 33) || zeroblob(64) AS BLOB)".into(),
            &["memory_removals.seal"],
            0,
        ),
        // the tombstone of the pruned run
        case(
            "pruned_runs.id",
            pruned,
            "UPDATE pruned_runs SET id = 2".into(),
            &["pruned_runs.id"],
            0,
        ),
        case(
            "pruned_runs.run_id",
            pruned,
            "UPDATE pruned_runs SET run_id = 'another'".into(),
            &["pruned_runs.body", "not a tombstone of run another"],
            0,
        ),
        case(
            "pruned_runs.body",
            pruned,
            "UPDATE pruned_runs SET body = CAST(replace(CAST(body AS TEXT), 'completed', 'cancelled') AS BLOB)".into(),
            &["pruned_runs.chain"],
            0,
        ),
        case(
            "pruned_runs.chain",
            pruned,
            "UPDATE pruned_runs SET chain = zeroblob(32)".into(),
            &["pruned_runs.chain"],
            0,
        ),
    ]);
    out
}

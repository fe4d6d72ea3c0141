//! Every column runtape stores, and what covers it: the one place that says which stored
//! values `verify` checks (and how) and which are operational — neither shown as history nor
//! executed — and why. A test (`tests/it/verify/coverage.rs`) reads every table's columns from
//! the database itself and fails on a column listed nowhere here, so a new stored field
//! cannot be added without deciding how it is verified.

/// How a stored column is covered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coverage {
    /// `verify` checks it; the text says against what.
    Verified(&'static str),
    /// Not verified: it steers the engine's coordination, is never shown as history and is
    /// never executed; the text says why an edit cannot change what a run did or will do.
    Operational(&'static str),
}

/// One stored column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Column {
    /// The table.
    pub table: &'static str,
    /// The column.
    pub name: &'static str,
    /// What covers it.
    pub coverage: Coverage,
}

const fn verified(table: &'static str, name: &'static str, how: &'static str) -> Column {
    Column {
        table,
        name,
        coverage: Coverage::Verified(how),
    }
}

const fn operational(table: &'static str, name: &'static str, why: &'static str) -> Column {
    Column {
        table,
        name,
        coverage: Coverage::Operational(why),
    }
}

/// Every column of every table, with its coverage.
pub const COLUMNS: &[Column] = &[
    // runs: where each run stands — the row `ls` reads and every commit rewrites — and its
    // sealed head.
    verified(
        "runs",
        "key",
        "internal row key: every row found through it names its run (events, the head, idempotency keys)",
    ),
    verified("runs", "id", "equals the run the head sealed"),
    verified(
        "runs",
        "status",
        "equals the head's (or `running` over an unfinished head: taking the lease writes it); the head's fits the final state",
    ),
    verified(
        "runs",
        "state_kind",
        "equals the head's, which is the final state's kind",
    ),
    verified(
        "runs",
        "seq",
        "equals the head's seq, where the replayed history must end",
    ),
    operational(
        "runs",
        "lease_epoch",
        "fences concurrent writers; a wrong value makes a driver stop or a resume take over, never changes the history",
    ),
    operational(
        "runs",
        "lease_owner",
        "who holds the lease; read only to refuse or allow a takeover",
    ),
    operational(
        "runs",
        "lease_expires_ms",
        "when a lease counts as abandoned; read only to refuse or allow a takeover",
    ),
    operational(
        "runs",
        "control",
        "a pending pause or cancel request; acting on it commits a transition, which is then verified",
    ),
    verified("runs", "updated_ms", "equals the head's"),
    verified(
        "runs",
        "cost_nanos",
        "equals the head's, which is the final state's usage",
    ),
    verified(
        "runs",
        "unpriced_turns",
        "equals the head's, which is the final state's usage",
    ),
    verified(
        "runs",
        "tokens",
        "equals the head's, which is the final state's usage",
    ),
    verified(
        "runs",
        "head",
        "the sealed head (packed, or its JSON): its seal holds; its fields equal the run's rows and the replayed history",
    ),
    verified(
        "runs",
        "seal",
        "holds over the head: signed with the trusted key when one is given",
    ),
    // run_specs: what each run is — what `resume` and `fork` execute — and how it ended.
    verified(
        "run_specs",
        "run",
        "internal row key: the spec, setup, goal and parent found for a run must be the ones its head sealed",
    ),
    verified(
        "run_specs",
        "parent_id",
        "equals the parent the head sealed",
    ),
    verified(
        "run_specs",
        "fork_seq",
        "equals the fork seq the head sealed",
    ),
    verified(
        "run_specs",
        "spec",
        "its digest equals the head's; the history replays under it",
    ),
    verified("run_specs", "setup", "its digest equals the head's"),
    verified("run_specs", "goal", "its digest equals the head's"),
    verified("run_specs", "created_ms", "equals the head's"),
    verified(
        "run_specs",
        "outcome",
        "its digest equals the head's, which is the final state's outcome",
    ),
    // transitions: the history.
    verified(
        "transitions",
        "id",
        "run key and seq: seqs run 1..=head seq with no gap and nothing past it; each event names its run",
    ),
    verified(
        "transitions",
        "at",
        "equals the time inside the stored event",
    ),
    verified(
        "transitions",
        "event",
        "re-folded through the machine; covered by the chain link",
    ),
    verified("transitions", "edge", "equals the edge the machine takes"),
    verified(
        "transitions",
        "effects",
        "equal the effects the machine emits",
    ),
    verified(
        "transitions",
        "state_hash",
        "equals the hash of the folded state",
    ),
    verified(
        "transitions",
        "chain",
        "equals the recomputed link; the last one equals the head's",
    ),
    verified(
        "transitions",
        "seal",
        "each receipt rebuilt from the history verifies under its seal, chained; the last is the head's receipt tip",
    ),
    // snapshots: where rebuilding a state starts.
    verified(
        "snapshots",
        "id",
        "one exactly where due (every 64 transitions), none past the head",
    ),
    verified("snapshots", "state", "equals the state folded to its seq"),
    // blobs: message bodies and MCP catalogs.
    verified(
        "blobs",
        "hash",
        "every message the history appends, every file (image, PDF) a message names, and every MCP catalog a ToolsListed event names, is found under its digest",
    ),
    verified(
        "blobs",
        "bytes",
        "equal the node the history appends (previous head, then the message); a file's bytes hash to its digest; a catalog's bytes hash to its digest and list the event's tools",
    ),
    // outbox: which non-idempotent calls may have started.
    verified(
        "outbox",
        "run",
        "rows name a tool call of that run's history with its idempotency key; started rows equal the head's list",
    ),
    verified("outbox", "seq", "names a tool call of the history"),
    verified("outbox", "idx", "names a tool call of the history"),
    verified(
        "outbox",
        "status",
        "done exactly when the history answers the call; started exactly when the head lists it \
         (a missing started row is caught; a missing pending or done row is not, and changes \
         nothing: a resume performs a pending call and skips an answered one either way)",
    ),
    verified(
        "outbox",
        "idempotency_key",
        "equals the key the call is performed with",
    ),
    // session_runs: the runs of each session, in order (revision 5).
    verified(
        "session_runs",
        "session",
        "the run's place equals the session its sealed spec names (a fork has none)",
    ),
    verified(
        "session_runs",
        "idx",
        "the run's place equals the index its sealed spec names",
    ),
    verified(
        "session_runs",
        "run",
        "internal row key: the place found for a run is the one its sealed spec names, and a run the spec gives no place has none",
    ),
    // memory_global: global memory, one row per version of a key (revision 5).
    verified(
        "memory_global",
        "name",
        "each applied publish's rows name the memory its effect wrote",
    ),
    verified(
        "memory_global",
        "key",
        "each published row's key is one its effect wrote; each applied publish has a row per key",
    ),
    verified(
        "memory_global",
        "version",
        "versions run 1, 2, ... per key; a published row's is its effect's base + 1 and the version its answer records",
    ),
    verified(
        "memory_global",
        "value",
        "equals the value its publish effect staged (none for a removal) and what runs loaded at that version",
    ),
    verified(
        "memory_global",
        "run_id",
        "names a run whose history holds the publish effect; a run's applied publish is found under it",
    ),
    verified(
        "memory_global",
        "effect_seq",
        "names the transition of that run that emitted the publish effect",
    ),
    verified(
        "memory_global",
        "effect_index",
        "names the publish effect within that transition",
    ),
    verified(
        "memory_global",
        "removal",
        "names the removal record that wrote the row (memory, key, version), for a row without a value",
    ),
    // memory_removals: `runtape memory rm`, chained (revision 5).
    verified("memory_removals", "id", "ids run 1, 2, ... without a gap"),
    verified(
        "memory_removals",
        "body",
        "covered by the chain; names the row it wrote (memory, key, version)",
    ),
    verified(
        "memory_removals",
        "chain",
        "equals blake3(previous link || body)",
    ),
    verified(
        "memory_removals",
        "seal",
        "a signature over the chain link that holds (against the trusted key, which must have signed every removal of the run's memory)",
    ),
    // pruned_runs: `runtape prune`'s tombstones, chained (store::retention).
    verified("pruned_runs", "id", "ids run 1, 2, ... without a gap"),
    verified(
        "pruned_runs",
        "run_id",
        "equals the run its body names; a run with a tombstone is reported pruned, not missing",
    ),
    verified(
        "pruned_runs",
        "body",
        "covered by the chain; where the run's record ended, checked against what its parent's history names",
    ),
    verified(
        "pruned_runs",
        "chain",
        "equals blake3(previous link || body)",
    ),
    // blob_refs: which runs refer to each blob, for `runtape prune` (store::retention).
    operational(
        "blob_refs",
        "hash",
        "read only by prune, to remove a blob once no kept run refers to it; a removed row can let a prune remove a blob a kept run needs, which that run's verify then reports missing",
    ),
    operational(
        "blob_refs",
        "run",
        "read only by prune (as hash); run 0 marks blobs stored before the table existed, never removed",
    ),
    // run_summary and run_tags: what the run list filters on (store::run_query), written with
    // the run's row; every run a page lists is checked again against the filter from its
    // verified rows, so an edited row can hide a run from a list but never show a wrong one.
    operational(
        "run_summary",
        "run",
        "an index for the run list, derived from verified rows; listed runs are checked again",
    ),
    operational(
        "run_summary",
        "created_ms",
        "an index for the run list, derived from verified rows; listed runs are checked again",
    ),
    operational(
        "run_summary",
        "agent",
        "an index for the run list, derived from verified rows; listed runs are checked again",
    ),
    operational(
        "run_summary",
        "model",
        "an index for the run list, derived from verified rows; listed runs are checked again",
    ),
    operational(
        "run_summary",
        "spec_digest",
        "an index for the run list, derived from verified rows; listed runs are checked again",
    ),
    operational(
        "run_summary",
        "fork_of",
        "an index for the run list, derived from verified rows; listed runs are checked again",
    ),
    operational(
        "run_summary",
        "child_of",
        "an index for the run list, derived from verified rows; listed runs are checked again",
    ),
    operational(
        "run_summary",
        "goal",
        "an index for the run list, derived from verified rows; listed runs are checked again",
    ),
    operational(
        "run_summary",
        "session",
        "an index for the run list, derived from verified rows; listed runs are checked again",
    ),
    operational(
        "run_summary",
        "ended",
        "an index for the run list, derived from verified rows; listed runs are checked again",
    ),
    operational(
        "run_tags",
        "key",
        "an index of the tags in the run's sealed spec, for the run list; listed runs are checked again",
    ),
    operational(
        "run_tags",
        "value",
        "an index of the tags in the run's sealed spec, for the run list; listed runs are checked again",
    ),
    operational(
        "run_tags",
        "run",
        "an index of the tags in the run's sealed spec, for the run list; listed runs are checked again",
    ),
    // schedules and schedule_fires: the database's timetable (`runtape schedule`), not any
    // run's history; a run a schedule started records the schedule and its instant in its
    // sealed setup, which verify checks.
    operational(
        "schedules",
        "name",
        "the timetable, not a run's history; a run it starts seals the schedule in its setup",
    ),
    operational(
        "schedules",
        "spec_path",
        "the timetable, not a run's history; a run it starts seals the schedule in its setup",
    ),
    operational(
        "schedules",
        "cron",
        "the timetable, not a run's history; a run it starts seals the schedule in its setup",
    ),
    operational(
        "schedules",
        "tz",
        "the timetable, not a run's history; a run it starts seals the schedule in its setup",
    ),
    operational(
        "schedules",
        "goal",
        "the timetable, not a run's history; a run it starts seals the schedule in its setup",
    ),
    operational(
        "schedules",
        "overlap",
        "the timetable, not a run's history; a run it starts seals the schedule in its setup",
    ),
    operational(
        "schedules",
        "catch_up",
        "the timetable, not a run's history; a run it starts seals the schedule in its setup",
    ),
    operational(
        "schedules",
        "paused",
        "the timetable, not a run's history; a run it starts seals the schedule in its setup",
    ),
    operational(
        "schedules",
        "cursor_ms",
        "the timetable, not a run's history; a run it starts seals the schedule in its setup",
    ),
    operational(
        "schedules",
        "created_ms",
        "the timetable, not a run's history; a run it starts seals the schedule in its setup",
    ),
    operational(
        "schedule_fires",
        "schedule",
        "which instants were claimed, so none fires twice; the run seals its instant in its setup",
    ),
    operational(
        "schedule_fires",
        "instant_ms",
        "which instants were claimed, so none fires twice; the run seals its instant in its setup",
    ),
    operational(
        "schedule_fires",
        "run",
        "which instants were claimed, so none fires twice; the run seals its instant in its setup",
    ),
    operational(
        "schedule_fires",
        "state",
        "which instants were claimed, so none fires twice; the run seals its instant in its setup",
    ),
    operational(
        "schedule_fires",
        "manual",
        "which instants were claimed, so none fires twice; the run seals its instant in its setup",
    ),
    operational(
        "schedule_fires",
        "fired_ms",
        "which instants were claimed, so none fires twice; the run seals its instant in its setup",
    ),
];

/// The coverage of `table.name`, if the column is listed.
pub fn coverage_of(table: &str, name: &str) -> Option<Coverage> {
    COLUMNS
        .iter()
        .find(|c| c.table == table && c.name == name)
        .map(|c| c.coverage)
}

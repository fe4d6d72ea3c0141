//! Schedules (`runtape schedule`): managed from the command line with every bad input refused
//! before anything is written, claimed once per instant however many processes race
//! (`claim_once`, `workers_race`, and on PostgreSQL `pg_workers_race`), fired by `runtape
//! worker` and `runtape serve` (and on the stepped clock without waiting, `stepped_clock`), each run
//! linked to its schedule and instant in its sealed setup (`verify_holds_the_link`).

mod cancel_previous;
mod claim_once;
mod manage;
mod pg_cancel_previous_across_workers;
mod pg_manage;
mod pg_workers_race;
mod serve_fires;
mod stepped_clock;
mod verify_holds_the_link;
mod workers_race;

use std::path::{Path, PathBuf};

use crate::support::cli::{json_lines, ok, read_only, write};

/// A spec whose one agent answers `reported` at once.
pub(super) fn report_spec(dir: &Path) -> PathBuf {
    write(
        dir,
        "report.toml",
        &format!(
            "goal = \"Write the morning report.\"\n{}\n[[agents]]\nid = \"reporter\"\nprovider = \"script\"\n",
            crate::support::cli::scripted("  { text = \"reported\" },\n")
        ),
    )
}

/// A spec whose one agent first calls `gather` (a command that takes `seconds`), then
/// answers `reported`: a run that is still live when the next instant is looked at.
pub(super) fn slow_report_spec(dir: &Path, seconds: f64) -> PathBuf {
    write(
        dir,
        "slow_report.toml",
        &format!(
            "goal = \"Write the morning report.\"\n{}\n[[tools]]\nname = \"gather\"\n\
             description = \"Gather the figures\"\ncommand = [\"sleep\", \"{seconds}\"]\n\
             schema = {{ type = \"object\" }}\nread_only = true\nidempotent = true\n\n\
             [[agents]]\nid = \"reporter\"\nprovider = \"script\"\ntools = [\"gather\"]\n",
            crate::support::cli::scripted(
                "  { tool_calls = [ { name = \"gather\", arguments = {} } ] },\n  { text = \"reported\" },\n"
            )
        ),
    )
}

/// Adds schedule `daily` (midnight UTC) of `spec` to `db` with `--overlap cancel-previous`,
/// `--catch-up catch_up` and `--since` two days ago: the instants of the last two midnights are
/// due.
pub(super) fn add_daily_cancelling(db: &Path, spec: &Path, catch_up: &str) {
    let since = rfc3339(now_ms() - 2 * DAY);
    let args = [
        "schedule",
        "add",
        "daily",
        crate::support::cli::utf8(spec),
        "--cron",
        "0 0 * * *",
        "--catch-up",
        catch_up,
        "--overlap",
        "cancel-previous",
        "--since",
        &since,
    ];
    ok(db, &args);
}

/// A fresh PostgreSQL database on `server`, migrated (its URL), and a scratch directory for
/// specs and worker logs, as its canonical path (what workers compare spec files with).
pub(super) fn pg_scratch(
    server: &crate::support::pg::PgServer,
) -> (String, tempfile::TempDir, PathBuf) {
    let url = server.fresh_db();
    ok(Path::new(&url), &["migrate"]);
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().canonicalize().expect("resolves");
    (url, tmp, dir)
}

/// Unix ms now, from the system's clock (the binary reads the same one).
pub(super) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as u64
}

/// `ms` as RFC 3339 (for `--since`).
pub(super) fn rfc3339(ms: u64) -> String {
    runtape::schedule::cron::rfc3339(ms)
}

/// `runtape schedule ls --json`.
pub(super) fn listed(db: &Path) -> Vec<serde_json::Value> {
    let text = ok(db, &["schedule", "ls", "--json"]);
    serde_json::from_str::<Vec<serde_json::Value>>(&text).expect("one JSON array")
}

/// A day in ms.
pub(super) const DAY: u64 = 86_400_000;

/// One fired instant: (schedule, instant ms, run, state).
pub(super) type Fire = (String, i64, String, String);

/// Checks the instants a catch-up fired after five days down: `daily` (catch-up all) one a day,
/// five, each started; `yearly` (catch-up last) only the last, a New Year; `missed` (catch-up
/// none) nothing. Returns the daily and the yearly fires.
pub(super) fn caught_up(fires: &[Fire]) -> (Vec<Fire>, Vec<Fire>) {
    let of = |name: &str| {
        fires
            .iter()
            .filter(|f| f.0 == name)
            .cloned()
            .collect::<Vec<_>>()
    };
    let daily = of("daily");
    assert_eq!(daily.len(), 5, "five days, five instants: {daily:?}");
    assert!(daily.iter().all(|f| f.3 == "started"), "{daily:?}");
    assert!(
        daily.windows(2).all(|w| w[1].1 - w[0].1 == DAY as i64),
        "one a day: {daily:?}"
    );
    let yearly = of("yearly");
    assert_eq!(yearly.len(), 1, "the last instant only: {yearly:?}");
    assert!(rfc3339(yearly[0].1 as u64).ends_with("-01-01T00:00:00Z"));
    assert!(
        of("missed").is_empty(),
        "catch-up none fires no missed instant"
    );
    (daily, yearly)
}

/// Every fired instant in `db`: (schedule, instant ms, run, state), in key order.
pub(super) fn fires(db: &Path) -> Vec<Fire> {
    let conn = read_only(db);
    let mut stmt = conn
        .prepare(
            "SELECT schedule, instant_ms, run, state FROM schedule_fires \
             ORDER BY schedule, instant_ms",
        )
        .expect("prepares");
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .expect("reads")
        .collect::<Result<_, _>>()
        .expect("rows")
}

/// The runs `ls --json` lists, each as its JSON object.
pub(super) fn runs(db: &Path) -> Vec<serde_json::Value> {
    json_lines(&crate::support::cli::runtape(db, &["ls", "--json"]))
}

/// Every fired instant in the database: (schedule, instant ms, run, state), in key order.
pub(super) fn pg_fires(server: &crate::support::pg::PgServer, url: &str) -> Vec<Fire> {
    let rows = server.sql(
        crate::support::pg::PgServer::db_of(url),
        "SELECT schedule, instant_ms, run, state FROM runtape.schedule_fires \
         ORDER BY schedule, instant_ms",
    );
    rows.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split('|').collect();
            assert_eq!(f.len(), 4, "{l}");
            (
                f[0].to_owned(),
                f[1].parse().expect("instant"),
                f[2].to_owned(),
                f[3].to_owned(),
            )
        })
        .collect()
}

//! A PostgreSQL database of schema version 4 (a run's spec, goal and outcome in its `runs`
//! row, its head in `heads`) is migrated to version 5 (`runs` keeps the standing and the head,
//! `run_specs` the rest, as SQLite's schema 9) on first open: every run lists, shows and
//! verifies as before, a fork still names its parent, and a run waiting for a person is
//! answered and goes on to the end.
//!
//! The version-4 database is made by running runtape on a new database and turning its tables
//! back into version 4's shape with SQL (columns and values as version 4 stored them).

use crate::support;
use crate::support::spec::{agent, scripted_as, tool};

use std::path::Path;
use std::process::Output;

use support::cli::{echo_spec, run_id, runtape, text, utf8, write};
use support::pg::PgServer;

/// Three turns, two calls of `echo`.
fn spec() -> String {
    let replies = r#"  { text = "one", tool_calls = [{ name = "echo", arguments = { n = 1 } }] },
  { text = "two", tool_calls = [{ name = "echo", arguments = { n = 2 } }] },
  { text = "three" },"#;
    echo_spec("count to three", replies, "")
}

/// A run that waits for a person to approve its one call.
fn gated() -> String {
    let replies = r#"{ text = "deploying", tool_calls = [{ name = "deploy", arguments = {} }] }, { text = "deployed" }"#;
    let deploy = "description = \"deploys (a person approves each call)\"\nrequires_approval = true\nidempotent = false";
    [
        "goal = \"deploy\"\n",
        &scripted_as("s", replies),
        &tool("deploy", r#"["sh", "-c", "printf ok"]"#, deploy),
        &agent("a", "s", &["deploy"], ""),
    ]
    .concat()
}

/// Version 4's tables, from the current version's (5's, with 6's `pruned_runs`, 7's
/// `schedules` and `schedule_fires`, 8's `blob_refs` and 9's run list dropped).
const BACK_TO_4: &str = "
DROP TABLE runtape.run_tags;
DROP TABLE runtape.run_summary;
DROP INDEX runtape.runs_by_cost;
DROP TABLE runtape.blob_refs;
DROP TABLE runtape.schedule_fires;
DROP TABLE runtape.schedules;
DROP TABLE runtape.pruned_runs;
CREATE TABLE runtape.heads (run bigint PRIMARY KEY, body bytea NOT NULL, seal bytea NOT NULL);
INSERT INTO runtape.heads (run, body, seal) SELECT key, head, seal FROM runtape.runs;
ALTER TABLE runtape.runs ADD COLUMN parent_id text, ADD COLUMN fork_seq bigint,
    ADD COLUMN spec text, ADD COLUMN setup text, ADD COLUMN goal text,
    ADD COLUMN created_ms bigint, ADD COLUMN outcome text;
UPDATE runtape.runs r SET parent_id = s.parent_id, fork_seq = s.fork_seq, spec = s.spec,
    setup = s.setup, goal = s.goal, created_ms = s.created_ms, outcome = s.outcome
    FROM runtape.run_specs s WHERE s.run = r.key;
ALTER TABLE runtape.runs ALTER COLUMN spec SET NOT NULL, ALTER COLUMN goal SET NOT NULL,
    ALTER COLUMN created_ms SET NOT NULL, DROP COLUMN head, DROP COLUMN seal;
DROP TABLE runtape.run_specs;
UPDATE runtape.meta SET value = 4 WHERE name = 'schema_version';
";

/// Runs `runtape --db URL ARGS…`, which must succeed; what it printed.
fn ok(url: &str, args: &[&str]) -> Output {
    let out = runtape(Path::new(url), args);
    assert!(out.status.success(), "{args:?}: {}", text(&out));
    out
}

/// Stdout of a command that must succeed.
fn stdout(url: &str, args: &[&str]) -> String {
    String::from_utf8_lossy(&ok(url, args).stdout).into_owned()
}

#[test]
#[ignore = "needs PostgreSQL server binaries: tests/extras/install.sh postgres"]
fn a_version_4_database_is_migrated_and_its_runs_verify_fork_and_resume() {
    let server = PgServer::start();
    let url = server.fresh_db();
    let db = PgServer::db_of(&url).to_owned();
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = write(dir.path(), "count.toml", &spec());
    let spec = utf8(&spec);
    let gated = write(dir.path(), "gated.toml", &gated());
    let gated = utf8(&gated);

    let done = run_id(&ok(&url, &["run", spec]));
    let fork = run_id(&ok(&url, &["fork", &format!("{done}@4")]));
    // A run waiting for a person, to be answered after the migration.
    let waiting = run_id(&ok(&url, &["run", gated]));
    let listed = stdout(&url, &["ls", "--json"]);
    let shown = stdout(&url, &["show", &format!("{done}@5"), "--json"]);

    server.sql(&db, BACK_TO_4);
    assert_eq!(
        server.sql(
            &db,
            "SELECT count(*) FROM runtape.heads h JOIN runtape.runs r ON r.key = h.run \
             WHERE r.spec IS NOT NULL AND r.goal IN ('count to three', 'deploy')"
        ),
        "3",
        "three runs in version 4's shape"
    );

    // The first command opens the database and migrates it.
    assert_eq!(stdout(&url, &["ls", "--json"]), listed);
    assert_eq!(
        server.sql(
            &db,
            "SELECT value FROM runtape.meta WHERE name = 'schema_version'"
        ),
        runtape::store::PG_SCHEMA_VERSION.to_string()
    );
    assert_eq!(
        server.sql(
            &db,
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'runtape' AND tablename = 'heads'"
        ),
        "0",
        "the heads moved into runs"
    );
    assert_eq!(
        server.sql(
            &db,
            "SELECT count(*) FROM runtape.run_specs s JOIN runtape.runs r ON r.key = s.run \
             WHERE r.head IS NOT NULL AND s.goal IN ('count to three', 'deploy')"
        ),
        "3"
    );
    // The migration to 9 summarised the runs already stored, for the run list.
    assert_eq!(
        server.sql(
            &db,
            &format!(
                "SELECT count(*), count(m.ended), string_agg(m.fork_of, ',') \
                 FROM runtape.run_summary m JOIN runtape.runs r ON r.key = m.run \
                 WHERE r.id IN ('{done}', '{fork}', '{waiting}')"
            )
        ),
        format!("3|2|{done}"),
        "three summaries, the finished runs' endings, the fork's parent"
    );
    assert_eq!(
        stdout(&url, &["show", &format!("{done}@5"), "--json"]),
        shown
    );
    for run in [&done, &fork, &waiting] {
        let verified = stdout(&url, &["verify", run]);
        assert!(verified.starts_with("OK"), "{run}: {verified}");
    }
    let fork_row = server.sql(
        &db,
        &format!(
            "SELECT s.parent_id || '@' || s.fork_seq FROM runtape.run_specs s \
             JOIN runtape.runs r ON r.key = s.run WHERE r.id = '{fork}'"
        ),
    );
    assert_eq!(fork_row, format!("{done}@4"));

    // The waiting run is answered and goes on to the end on the migrated tables.
    ok(&url, &["resume", &waiting, "--approve"]);
    let row = server.sql(
        &db,
        &format!(
            "SELECT r.status, s.outcome IS NOT NULL FROM runtape.runs r \
             JOIN runtape.run_specs s ON s.run = r.key WHERE r.id = '{waiting}'"
        ),
    );
    assert_eq!(row, "completed|t");
    let verified = stdout(&url, &["verify", &waiting]);
    assert!(verified.starts_with("OK"), "{verified}");
}

//! `runtape export` / `import` between SQLite and PostgreSQL both ways, and `prune` on
//! PostgreSQL: a delegation tree exported from a SQLite file, imported into PostgreSQL, reads
//! the same there (`show`, `log`, `verify --recursive`), is exported from PostgreSQL and
//! imported into a second SQLite file, which reads the same again; then `prune` on the
//! PostgreSQL database removes it, leaves tombstones `verify` reports (exit 5), and keeps a
//! run that waits for a person. Real PostgreSQL, the real binary.

use std::path::Path;

use crate::support::cli::{example, out, run_id, runtape, temp_db, text, utf8};
use crate::support::pg::PgServer;

fn reads(db: &Path, run: &str) -> Vec<String> {
    [
        &["show", run, "--json"][..],
        &["log", run, "--json"],
        &["verify", run, "--recursive", "--json"],
    ]
    .iter()
    .map(|args| {
        let o = runtape(db, args);
        assert!(o.status.success(), "{args:?}: {}", text(&o));
        out(&o)
    })
    .collect()
}

#[test]
#[ignore = "needs PostgreSQL: tests/extras/install.sh postgres"]
fn sqlite_to_postgres_and_back_reads_the_same_and_prune_works_there() {
    let server = PgServer::start();
    let url = server.fresh_db();
    let pg = Path::new(&url);
    let (dir, a) = temp_db();
    let team = runtape(&a, &["run", utf8(&example("team.toml"))]);
    assert!(team.status.success(), "{}", text(&team));
    let lead = run_id(&team);
    let file = dir.path().join("tree.json");
    let e = runtape(&a, &["export", &lead, "--out", utf8(&file)]);
    assert!(e.status.success(), "{}", text(&e));

    let i = runtape(pg, &["import", utf8(&file)]);
    assert!(i.status.success(), "{}", text(&i));
    assert_eq!(reads(pg, &lead), reads(&a, &lead));

    let back = dir.path().join("back.json");
    let e = runtape(pg, &["export", &lead, "--out", utf8(&back)]);
    assert!(e.status.success(), "{}", text(&e));
    let b = dir.path().join("b.db");
    let i = runtape(&b, &["import", utf8(&back)]);
    assert!(i.status.success(), "{}", text(&i));
    assert_eq!(reads(&b, &lead), reads(&a, &lead));

    let waiting = runtape(pg, &["run", utf8(&example("approval.toml"))]);
    let waiting = run_id(&waiting);
    let dry = runtape(pg, &["prune", "--older-than", "0s", "--dry-run", "--json"]);
    assert!(dry.status.success(), "{}", text(&dry));
    assert!(out(&dry).contains("\"runs\":3"), "{}", out(&dry));
    let p = runtape(pg, &["prune", "--older-than", "0s"]);
    assert!(p.status.success(), "{}", text(&p));
    let v = runtape(pg, &["verify", &lead]);
    assert_eq!(v.status.code(), Some(5), "{}", text(&v));
    let v = runtape(pg, &["verify", &waiting]);
    assert!(v.status.success(), "{}", text(&v));
    let ls = runtape(pg, &["ls", "--all", "--json"]);
    assert_eq!(out(&ls).matches("\"pruned\"").count(), 3, "{}", out(&ls));
}

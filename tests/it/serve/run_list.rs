//! `GET /api/runs` filters, sorts and pages the run list on the server: over a few hundred
//! real runs in a SQLite file, each query is paged through with a small limit and checked
//! against what the runs are (every matching run exactly once, no other, in order), and
//! every malformed filter is one 400 line. Tags set at `run --tag` round-trip through
//! `show`, `ls --tag`, the API and `verify`, which rejects an edited tag.

use std::collections::BTreeSet;
use std::time::Instant;

use serde_json::{Value, json};

use crate::support::many_runs::{generate, goal_of};
use crate::support::serve::{Server, runtape, scratch_db, serve};

const RUNS: usize = 300;

/// Every run a query lists, paging with `limit`, and the pages it took.
fn all_pages(server: &Server, query: &str, limit: usize) -> (Vec<Value>, usize) {
    let mut runs = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let c = cursor.map(|c| format!("&cursor={c}")).unwrap_or_default();
        let (status, page) = server.get(&format!("/api/runs?{query}&limit={limit}{c}"));
        assert_eq!(status, 200, "{query}: {page}");
        pages += 1;
        runs.extend(page["runs"].as_array().expect("runs").iter().cloned());
        match page["next"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return (runs, pages),
        }
        assert!(pages < 10_000, "{query}: the cursor does not advance");
    }
}

/// The ids of `runs`, checking none repeats.
fn ids(runs: &[Value], query: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for r in runs {
        let id = r["id"].as_str().expect("id").to_owned();
        assert!(seen.insert(id.clone()), "{query}: {id} is listed twice");
    }
    seen
}

fn num(v: &Value) -> u64 {
    v.as_u64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .expect("a number")
}

#[test]
fn filters_sorts_and_keyset_pages_hold_over_many_runs() {
    let (dir, db) = scratch_db();
    let generated = tokio::runtime::Runtime::new()
        .expect("runtime")
        .block_on(generate(&db, RUNS, 100));
    let root = crate::support::serve::run_spec(dir.path(), &db, "examples/quickstart.toml");
    let fork_out = runtape(
        dir.path(),
        &db,
        &[
            "fork",
            &format!("{root}@1"),
            "--edit",
            "user=Count 'x y'.",
            "--json",
        ],
    );
    let fork = crate::support::cli::json_lines(&fork_out)[0]["id"]
        .as_str()
        .expect("fork id")
        .to_owned();
    let server = serve(dir.path(), &db);
    let id = |i: usize| generated[i].to_string();
    let set = |f: &dyn Fn(usize) -> bool| -> BTreeSet<String> {
        (0..RUNS).filter(|i| f(*i)).map(id).collect()
    };

    // Everything, newest first, across pages of 37.
    let (all, pages) = all_pages(&server, "", 37);
    assert_eq!(pages, (RUNS + 2).div_ceil(37), "pages of 37");
    let mut everything = set(&|_| true);
    everything.insert(root.clone());
    everything.insert(fork.clone());
    assert_eq!(ids(&all, "all"), everything);
    let created: Vec<u64> = all.iter().map(|r| num(&r["created_ms"])).collect();
    assert!(created.windows(2).all(|w| w[0] >= w[1]), "newest first");
    assert_eq!(all[0]["id"], json!(fork), "the fork was created last");

    let failed = |i: usize| i.is_multiple_of(7);
    let parent_query = format!("parent={root}");
    let cases: Vec<(&str, BTreeSet<String>)> = vec![
        ("status=failed", set(&failed)),
        ("agent=planner", set(&|i| i % 2 == 0)),
        (
            "tag=team%3Db&status=completed",
            set(&|i| i % 3 == 1 && !failed(i)),
        ),
        ("tag=team%3Da&tag=batch%3D0", set(&|i| i % 3 == 0)),
        // Free text: a failure's reason, case aside, and a completed run's answer.
        ("q=REFUSED", set(&failed)),
        (
            "q=answer+12",
            set(&|i| !failed(i) && format!("answer {i}").contains("answer 12")),
        ),
        (
            "cost_min=0.002&cost_max=0.003",
            set(&|i| !failed(i) && (2..=3).contains(&(i % 5))),
        ),
        ("relation=fork", [fork.clone()].into()),
        (&parent_query, [fork.clone()].into()),
        ("relation=child", BTreeSet::new()),
    ];
    for (query, want) in &cases {
        let (runs, _) = all_pages(&server, query, 23);
        assert_eq!(&ids(&runs, query), want, "{query}");
    }
    let (roots, _) = all_pages(&server, "relation=root", 100);
    let roots = ids(&roots, "relation=root");
    assert!(roots.contains(&root) && !roots.contains(&fork));
    assert_eq!(roots.len(), RUNS + 1);

    // One spec: the planner runs share a digest whatever their tags.
    let planner_spec = all
        .iter()
        .find(|r| r["id"] == json!(id(0)))
        .map(|r| r["spec"].as_str().expect("spec").to_owned())
        .expect("run 0 listed");
    let (same, _) = all_pages(&server, &format!("spec={planner_spec}"), 50);
    assert_eq!(ids(&same, "spec"), set(&|i| i % 2 == 0));

    // A time range: exactly the runs created in it.
    let mid = created[created.len() * 3 / 4];
    let late = created[created.len() / 4];
    let (ranged, _) = all_pages(&server, &format!("from={mid}&to={late}"), 29);
    let want: BTreeSet<String> = all
        .iter()
        .filter(|r| (mid..late).contains(&num(&r["created_ms"])))
        .map(|r| r["id"].as_str().expect("id").to_owned())
        .collect();
    assert!(!want.is_empty());
    assert_eq!(ids(&ranged, "from/to"), want);

    // Sorts hold across pages, both ways.
    for (query, key) in [
        ("sort=cost", "cost_nanos"),
        ("sort=cost&order=asc", "cost_nanos"),
        ("sort=duration&order=asc", "duration"),
        ("sort=duration", "duration"),
        ("order=asc", "created_ms"),
    ] {
        let (runs, _) = all_pages(&server, query, 41);
        assert_eq!(ids(&runs, query), everything, "{query}");
        let values: Vec<u64> = runs
            .iter()
            .map(|r| match key {
                "duration" => num(&r["updated_ms"]) - num(&r["created_ms"]),
                k => num(&r[k]),
            })
            .collect();
        let ascending = query.contains("asc");
        assert!(
            values.windows(2).all(|w| if ascending {
                w[0] <= w[1]
            } else {
                w[0] >= w[1]
            }),
            "{query}: {values:?}"
        );
    }
    let (costly, _) = all_pages(&server, "sort=cost", 500);
    assert_eq!(num(&costly[0]["cost_nanos"]), 4_000_000);
    // A failed run's reason is in its listed row.
    let (failed_runs, _) = all_pages(&server, "status=failed", 5);
    assert_eq!(
        failed_runs[0]["reason"],
        json!(
            "bad_request: agent planner: every model route failed; last: p: this goal is refused"
        )
    );
    assert_eq!(failed_runs[0]["goal"], json!(goal_of(294)));
}

#[test]
fn a_malformed_filter_is_one_line_and_a_400() {
    let (dir, db) = scratch_db();
    let run = crate::support::serve::run_spec(dir.path(), &db, "examples/quickstart.toml");
    let server = serve(dir.path(), &db);
    let (_, page) = server.get("/api/runs?sort=cost&limit=1");
    assert!(page["next"].is_null(), "one run, one page: {page}");
    for (query, words) in [
        ("status=sleeping", "is not one of"),
        ("color=red", "not a run-list filter"),
        ("limit=0", "limit `0`"),
        ("limit=1001", "limit `1001`"),
        ("sort=size", "sort `size`"),
        ("order=up", "order `up`"),
        ("relation=cousin", "relation `cousin`"),
        ("tag=Team%3Dx", "--tag Team=x"),
        ("tag=team", "KEY=VALUE"),
        ("cost_min=-1", "cost_min `-1`"),
        ("from=yesterday", "from `yesterday`"),
        ("spec=xyz", "spec `xyz`"),
        ("cursor=abc", "cursor `abc`"),
        (
            "cursor=started.desc.5.5&sort=cost",
            "sorted by started desc",
        ),
        ("status=failed&status=completed", "given twice"),
        (&format!("parent={run}@1"), "@1"),
    ] {
        let (status, body) = server.get(&format!("/api/runs?{query}"));
        assert_eq!(status, 400, "{query}: {body}");
        let line = body["error"].as_str().expect("error line");
        assert!(line.contains(words), "{query}: {line}");
        assert!(!line.contains('\n'), "{query}: one line: {line}");
    }
}

#[test]
fn tags_round_trip_and_verify_rejects_an_edited_tag() {
    let (dir, db) = scratch_db();
    let out = runtape(
        dir.path(),
        &db,
        &[
            "run",
            "examples/quickstart.toml",
            "--tag",
            "team=search",
            "--tag",
            "env=prod",
            "--json",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = crate::support::cli::json_lines(&out)[0]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let untagged = crate::support::serve::run_spec(dir.path(), &db, "examples/quickstart.toml");
    let tags = json!({"env": "prod", "team": "search"});

    let show: Value =
        serde_json::from_slice(&runtape(dir.path(), &db, &["show", &run, "--json"]).stdout)
            .expect("show --json");
    assert_eq!(show["tags"], tags);
    let human =
        String::from_utf8_lossy(&runtape(dir.path(), &db, &["show", &run]).stdout).into_owned();
    assert!(human.contains("tags    env=prod, team=search"), "{human}");
    let listed = crate::support::cli::json_lines(&runtape(
        dir.path(),
        &db,
        &["ls", "--json", "--tag", "team=search"],
    ));
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["id"], json!(run));
    assert_eq!(listed[0]["tags"], tags);
    let ls = String::from_utf8_lossy(&runtape(dir.path(), &db, &["ls"]).stdout).into_owned();
    assert!(ls.contains("[env=prod, team=search]"), "{ls}");

    {
        let server = serve(dir.path(), &db);
        let (_, page) = server.get("/api/runs?tag=team%3Dsearch");
        let runs = page["runs"].as_array().expect("runs");
        assert_eq!(runs.len(), 1, "{page}");
        assert_eq!(runs[0]["tags"], tags);
        let (_, page) = server.get("/api/runs?tag=team%3Dother");
        assert_eq!(page["runs"], json!([]));
        let (_, one) = server.get(&format!("/api/runs/{untagged}"));
        assert!(one.get("tags").is_none(), "{one}");
    }
    let verify = runtape(dir.path(), &db, &["verify", &run]);
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stderr)
    );

    // An edited tag: the stored spec no longer matches its sealed head.
    let conn = rusqlite::Connection::open(&db).expect("opens");
    let edited = conn
        .execute(
            "UPDATE run_specs SET spec = replace(spec, '\"team\":\"search\"', '\"team\":\"other\"') \
             WHERE run = (SELECT key FROM runs WHERE id = ?1)",
            [&run],
        )
        .expect("edits");
    assert_eq!(edited, 1);
    drop(conn);
    let verify = runtape(dir.path(), &db, &["verify", &run]);
    assert!(!verify.status.success(), "an edited tag verifies");
    let err = String::from_utf8_lossy(&verify.stderr).into_owned()
        + &String::from_utf8_lossy(&verify.stdout);
    assert!(err.contains("spec"), "{err}");
}

#[test]
fn a_malformed_tag_is_one_line_and_starts_nothing() {
    let (dir, db) = scratch_db();
    for (tag, words) in [
        ("Team=x", "the key must be"),
        ("team", "write KEY=VALUE"),
        ("team=", "the value must be"),
    ] {
        let out = runtape(
            dir.path(),
            &db,
            &["run", "examples/quickstart.toml", "--tag", tag],
        );
        assert!(!out.status.success(), "--tag {tag} ran");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(err.contains(words), "--tag {tag}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    }
    let out = runtape(
        dir.path(),
        &db,
        &[
            "run",
            "examples/quickstart.toml",
            "--tag",
            "a=1",
            "--tag",
            "a=2",
        ],
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("given twice"));
    let ls = runtape(dir.path(), &db, &["ls", "--json"]);
    assert!(ls.stdout.is_empty(), "nothing was started");
}

/// Measures the run list at 100,000 runs (`RUNTAPE_LIST_RUNS` to change it; `RUNTAPE_LIST_DB`
/// to keep them in a file and measure them again): how long the runs take to write, then the first page and a deep page of a few queries, as
/// `src/guide/serve.md` reports them. Prints figures; asserts only what is listed.
#[test]
#[ignore = "measures 100,000 runs (minutes): cargo test --test it -- --ignored serve::run_list::measure"]
fn measure_the_run_list_at_100000_runs() {
    let count: usize = std::env::var("RUNTAPE_LIST_RUNS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(100_000);
    let (dir, scratch) = scratch_db();
    // RUNTAPE_LIST_DB=FILE keeps the runs there to measure again without writing them anew.
    let db = std::env::var_os("RUNTAPE_LIST_DB").map_or(scratch, std::path::PathBuf::from);
    if !db.exists() {
        let t = Instant::now();
        tokio::runtime::Runtime::new()
            .expect("runtime")
            .block_on(generate(&db, count, 1000));
        eprintln!("wrote {count} runs in {:.1} s", t.elapsed().as_secs_f64());
    }
    let server = serve(dir.path(), &db);
    for query in [
        "",
        "status=failed",
        "agent=writer&tag=team%3Dc",
        "q=answer+4242",
        "sort=cost&cost_min=0.002",
        "sort=duration&order=asc",
        "from=0&relation=root&status=completed",
    ] {
        let timed = |path: &str| {
            let t = Instant::now();
            let (status, page) = server.get(path);
            assert_eq!(status, 200, "{path}: {page}");
            (t.elapsed().as_secs_f64() * 1000.0, page)
        };
        let (first_ms, mut page) = timed(&format!("/api/runs?{query}&limit=50"));
        // Fifty pages in: the cursor of the 50th page's end.
        let mut deep_ms = 0.0;
        for _ in 0..50 {
            let Some(next) = page["next"].as_str().map(str::to_owned) else {
                break;
            };
            let (ms, p) = timed(&format!("/api/runs?{query}&limit=50&cursor={next}"));
            deep_ms = ms;
            page = p;
        }
        eprintln!("`{query}`: first page {first_ms:.1} ms, page 51 {deep_ms:.1} ms");
    }
    for path in [
        "/api/stats/status?bucket=minute",
        "/api/stats/spend",
        "/api/stats/failures",
        "/api/stats/steps",
    ] {
        let t = Instant::now();
        let (status, body) = server.get(path);
        assert_eq!(status, 200, "{path}: {body}");
        eprintln!("`{path}`: {:.1} ms", t.elapsed().as_secs_f64() * 1000.0);
    }
}

//! A run's event stream (`GET /api/runs/{id}/events`): resumable with `Last-Event-ID`, live
//! for runs the server drives and for runs another process drives, a killed run shown as
//! interrupted, clients that hang up mid-stream, and a thousand subscribers at once.

use crate::support;

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::cli::utf8;
use serde_json::json;
use support::serve::{Stream, bin, field, scratch_db, serve, serving, tool_spec};

fn ids(events: &[support::serve::Sse]) -> Vec<String> {
    events.iter().filter_map(|e| e.id.clone()).collect()
}

#[test]
fn a_stream_sends_every_step_then_resumes_after_its_last_event_id() {
    let (_dir, _db, done, server) = serving("examples/quickstart.toml");

    let mut s = Stream::open(server.addr, &format!("/api/runs/{done}/events"), &[]);
    assert_eq!(s.status, 200);
    let opening = s.next().expect("the run as it stands");
    assert_eq!(opening.event, "run");
    assert_eq!(opening.id, None);
    assert_eq!(opening.json()["status"], "completed");
    let (last, steps) = s.until("step 8", |e| e.id.as_deref() == Some("8"));
    let mut all = steps;
    all.push(last);
    assert_eq!(
        ids(&all),
        (1..=8).map(|n| n.to_string()).collect::<Vec<_>>()
    );
    assert!(all.iter().all(|e| e.event == "step"));
    assert_eq!(all[2].json()["seq"], json!(3));
    // `at` is past 2^53: a string, so a browser reads it exactly.
    assert!(all[0].json()["at"].is_string(), "{}", all[0].data);
    drop(s);

    let mut s = Stream::open(
        server.addr,
        &format!("/api/runs/{done}/events"),
        &[("Last-Event-ID", "5")],
    );
    s.next().expect("opening");
    let (e8, before) = s.until("step 8", |e| e.id.as_deref() == Some("8"));
    assert_eq!(ids(&before), ["6", "7"]);
    assert_eq!(e8.event, "step");
    let mut s = Stream::open(
        server.addr,
        &format!("/api/runs/{done}/events?after=7"),
        &[],
    );
    s.next().expect("opening");
    assert_eq!(s.next().expect("step 8").id.as_deref(), Some("8"));

    // Live: a run the server drives, approved; then a reconnect from the middle.
    let (_, started) = server.post("/api/runs", &json!({"spec": "examples/approval.toml"}));
    let run = field(&started, "id").to_owned();
    server.wait_run(&run, Duration::from_secs(30), |r| {
        r["status"] == "awaiting_input"
    });
    let mut s = Stream::open(server.addr, &format!("/api/runs/{run}/events?after=3"), &[]);
    assert_eq!(
        s.next().expect("opening").json()["status"],
        "awaiting_input"
    );
    server.post(&format!("/api/runs/{run}/approve"), &json!({}));
    // The row says `completed` (polled) and the driver's last trace events (pushed) arrive in
    // either order: read until both are in.
    let mut live = Vec::new();
    while !(live
        .iter()
        .any(|e: &support::serve::Sse| e.event == "run" && e.json()["status"] == "completed")
        && live
            .iter()
            .any(|e| e.event == "trace" && e.json()["type"] == "run.finished"))
    {
        live.push(
            s.next()
                .expect("the stream goes on until the run completes"),
        );
    }
    let step_ids: Vec<_> = live
        .iter()
        .filter(|e| e.event == "step")
        .filter_map(|e| e.id.clone())
        .collect();
    assert_eq!(step_ids, ["4", "5", "6", "7", "8"]);
    let traces: Vec<_> = live.iter().filter(|e| e.event == "trace").collect();
    let kinds: BTreeSet<String> = traces
        .iter()
        .map(|e| e.json()["type"].as_str().unwrap_or("").to_owned())
        .collect();
    for k in [
        "tool.call",
        "tool.result",
        "model.request",
        "model.reply",
        "run.finished",
    ] {
        assert!(kinds.contains(k), "{k} in {kinds:?}");
    }
    // Ids only grow, and each trace event comes after the step it belongs to.
    let order: Vec<(u64, u32)> = live
        .iter()
        .filter_map(|e| e.id.as_deref())
        .map(|id| match id.split_once('.') {
            Some((s, n)) => (s.parse().expect("seq"), n.parse().expect("n")),
            None => (id.parse().expect("seq"), 0),
        })
        .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
    for t in &traces {
        if let Some(seq) = t.json()["seq"].as_u64() {
            let id_seq: u64 =
                t.id.as_deref()
                    .expect("id")
                    .split('.')
                    .next()
                    .expect("seq")
                    .parse()
                    .expect("n");
            assert!(
                id_seq >= seq,
                "trace of step {seq} sent before it: {}",
                t.data
            );
        }
    }
    let middle = traces[traces.len() / 2].id.clone().expect("id");
    let mut s = Stream::open(
        server.addr,
        &format!("/api/runs/{run}/events"),
        &[("Last-Event-ID", &middle)],
    );
    s.next().expect("opening");
    let mut resumed = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while let Some(e) = s.next() {
        resumed.push(e.id.clone().expect("replayed events have ids"));
        if resumed.last().map(String::as_str) == live.last().and_then(|e| e.id.as_deref())
            || Instant::now() > deadline
        {
            break;
        }
    }
    let after: Vec<String> = live
        .iter()
        .filter_map(|e| e.id.clone())
        .skip_while(|id| *id != middle)
        .skip(1)
        .collect();
    assert_eq!(resumed, after, "a reconnect gets exactly what it missed");
}

#[test]
fn a_run_another_process_drives_is_followed_and_shows_interrupted_once_killed() {
    let (dir, db) = scratch_db();
    // The first call hangs (until the process is killed); the call performed again on resume
    // (the tool is idempotent) returns at once.
    let flag = dir.path().join("called.flag");
    let spec = tool_spec(
        dir.path(),
        &format!(
            "if [ -e {0} ]; then echo again; else touch {0}; sleep 300; fi",
            flag.display()
        ),
    );
    let server = serve(dir.path(), &db);
    let mut driver = Command::new(bin())
        .args(["run", utf8(&spec), "--json", "--db"])
        .arg(&db)
        .current_dir(dir.path())
        .env("RUNTAPE_LEASE_TTL_MS", "1000")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("runs");
    let mut first = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(driver.stdout.as_mut().expect("stdout")),
        &mut first,
    )
    .expect("the id line");
    let run = serde_json::from_str::<serde_json::Value>(&first).expect("json")["id"]
        .as_str()
        .expect("id")
        .to_owned();
    // The id is printed before the run is stored: wait for it to be there.
    server.wait_run(&run, Duration::from_secs(30), |_| true);
    let mut s = Stream::open(server.addr, &format!("/api/runs/{run}/events"), &[]);
    assert_eq!(s.status, 200);
    let opening = s.next().expect("opening");
    assert_eq!(opening.json()["here"], json!(false));
    assert_eq!(opening.json()["driven"], json!(true), "{}", opening.data);
    assert_eq!(opening.json()["interrupted"], json!(false));
    // The tool call is committed by the other process; the stream sees it from the database.
    let (call, _) = s.until("the tool call step", |e| {
        e.event == "step" && e.json()["to"] == "calling_tools"
    });
    assert_eq!(call.json()["summary"], "tool calls: wait");
    let _ = support::cli::try_signal(driver.id(), "KILL");
    let _ = driver.wait();
    let (killed, _) = s.until("the run shown interrupted", |e| {
        e.event == "run" && e.json()["interrupted"] == true
    });
    assert_eq!(
        killed.json()["status"],
        "running",
        "the row still says running"
    );
    let (_, listed) = server.get("/api/runs?status=interrupted");
    assert_eq!(listed["runs"][0]["id"], json!(run));
    // Resumed from the page's API, it completes here (the killed tool is reaped first).
    let (status, r) = server.post(&format!("/api/runs/{run}/resume"), &json!({}));
    assert_eq!(status, 202, "{r}");
    s.until("the resumed run completes", |e| {
        e.event == "run" && e.json()["status"] == "completed"
    });
}

/// Open descriptors of a process (Linux).
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

#[test]
fn clients_hanging_up_mid_stream_leave_nothing_behind() {
    let (_dir, _db, run, server) = serving("examples/quickstart.toml");
    let pid = server.child.id();
    let hang_ups = |n: usize| {
        for i in 0..n {
            let mut s = Stream::open(server.addr, &format!("/api/runs/{run}/events"), &[]);
            // Hang up at a different point each time: before, during and after the replay.
            for _ in 0..(i % 10) {
                s.next();
            }
            drop(s);
        }
    };
    let settled = |bound: usize| {
        let deadline = Instant::now() + Duration::from_secs(15);
        while open_fds(pid) > bound && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        open_fds(pid)
    };
    // The store keeps a pool of up to 8 read connections, opened as reads overlap: warm it
    // up first, so what is compared below is what hang-ups leave behind, not the pool.
    hang_ups(100);
    std::thread::sleep(Duration::from_secs(1));
    let baseline = open_fds(pid);
    hang_ups(200);
    let after = settled(baseline + 2);
    assert!(
        after <= baseline + 2,
        "{after} descriptors open after 200 more hang-ups, {baseline} before"
    );
    let mut s = Stream::open(server.addr, &format!("/api/runs/{run}/events?after=7"), &[]);
    s.next().expect("opening");
    assert_eq!(s.next().expect("step 8").id.as_deref(), Some("8"));
}

#[test]
fn a_thousand_subscribers_follow_one_run() {
    const SUBSCRIBERS: usize = 1000;
    let (_dir, _db, run, server) = serving("examples/approval.toml");
    let (rss_before, _) = server.memory_kib();
    let mut streams: Vec<Stream> = (0..SUBSCRIBERS)
        .map(|_| Stream::open(server.addr, &format!("/api/runs/{run}/events?after=3"), &[]))
        .collect();
    for s in &mut streams {
        assert_eq!(s.status, 200);
        assert_eq!(s.next().expect("opening").event, "run");
    }
    let (rss_open, _) = server.memory_kib();
    let (status, r) = server.post(&format!("/api/runs/{run}/approve"), &json!({}));
    assert_eq!(status, 202, "{r}");
    for (i, s) in streams.iter_mut().enumerate() {
        let (_, seen) = s.until("the run completes", |e| {
            e.event == "run" && e.json()["status"] == "completed"
        });
        let steps: Vec<_> = seen
            .iter()
            .filter(|e| e.event == "step")
            .filter_map(|e| e.id.clone())
            .collect();
        assert_eq!(steps, ["4", "5", "6", "7", "8"], "subscriber {i}");
    }
    let (rss_after, peak) = server.memory_kib();
    eprintln!(
        "{SUBSCRIBERS} subscribers: server RSS {rss_before} KiB before, {rss_open} KiB with them open ({:.1} KiB each), {rss_after} KiB after the run completed, peak {peak} KiB",
        (rss_open.saturating_sub(rss_before)) as f64 / SUBSCRIBERS as f64
    );
    assert!(
        rss_open.saturating_sub(rss_before) < 64 * SUBSCRIBERS as u64,
        "more than 64 KiB per subscriber: {rss_before} → {rss_open} KiB"
    );
}

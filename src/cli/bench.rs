//! `runtape bench`: the workloads of [`crate::bench`], as a table or JSON.

use std::path::{Path, PathBuf};

use super::common::{CliError, outln, print_json};
use crate::bench::{self, BenchOptions, Report};

/// Options from the command line.
pub(crate) struct Args {
    pub(crate) dir: Option<PathBuf>,
    pub(crate) rounds: Option<usize>,
    pub(crate) runs: Option<usize>,
    pub(crate) reps: Option<usize>,
    pub(crate) quick: bool,
    pub(crate) json: bool,
    pub(crate) probe_resume: Option<String>,
    pub(crate) only: Vec<String>,
    pub(crate) db: PathBuf,
}

/// Runs the benchmarks (or, with `--probe-resume`, the in-process half of W3).
pub(crate) async fn run(args: Args) -> Result<(), CliError> {
    if let Some(run) = args.probe_resume {
        let ms = bench::probe_resume(&args.db, &crate::machine::RunId::new(run))
            .await
            .map_err(|e| CliError::internal(e.to_string()))?;
        outln!("{ms:.3}");
        return Ok(());
    }
    let dir = args.dir.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("runtape-bench-{}", std::process::id()))
    });
    let mut opts = if args.quick {
        BenchOptions::quick(dir.clone())
    } else {
        BenchOptions::full(dir.clone())
    };
    let w5_alone = !args.only.is_empty() && args.only.iter().all(|w| w.eq_ignore_ascii_case("w5"));
    match args.rounds {
        Some(r) if w5_alone => opts.w5.rounds = r,
        Some(r) => opts.rounds = r,
        None => {}
    }
    // Both are at least 1: the command line refuses 0.
    if let Some(n) = args.runs {
        opts.w5.runs = n;
    }
    if let Some(r) = args.reps {
        opts.reps = r;
    }
    opts.exe = std::env::current_exe().ok();
    opts.only = args.only;
    let json = args.json;
    let mut progress = |what: &str| {
        if !json {
            eprintln!("  measuring {what} …");
        }
    };
    if let Some(url) = super::common::postgres_url(&args.db) {
        let report = bench::shared::run(url, &opts, &mut progress)
            .await
            .map_err(|e| CliError::internal(e.to_string()))?;
        let _ = std::fs::remove_dir(&dir);
        if json {
            let mut v =
                serde_json::to_value(&report).map_err(|e| CliError::internal(e.to_string()))?;
            v["type"] = serde_json::json!("bench.shared");
            return print_json(&v);
        }
        outln!(
            "runtape bench on {} (and a SQLite file in {} for comparison)",
            super::common::shown(&args.db),
            dir.display()
        );
        outln!(
            "{:<48}  {:<8}  {:>11}  {:>10}  {:>13}  {:>9}  {:>9}",
            "WORKLOAD",
            "STORE",
            "TRANSITIONS",
            "WALL ms",
            "TRANSITIONS/s",
            "p50 µs",
            "p99 µs"
        );
        for r in &report.rows {
            outln!(
                "{:<48}  {:<8}  {:>11}  {:>10.1}  {:>13.0}  {:>9}  {:>9}",
                r.workload,
                r.store,
                r.transitions,
                r.wall_ms,
                r.per_s,
                r.latency.p50_us,
                r.latency.p99_us
            );
        }
        return Ok(());
    }
    let report = bench::run(&opts, &mut progress)
        .await
        .map_err(|e| CliError::internal(e.to_string()))?;
    let _ = std::fs::remove_dir(&dir);
    if json {
        let mut v = serde_json::to_value(&report).map_err(|e| CliError::internal(e.to_string()))?;
        v["type"] = serde_json::json!("bench");
        return print_json(&v);
    }
    print_table(&report, &opts, &dir);
    Ok(())
}

fn print_table(r: &Report, o: &BenchOptions, dir: &Path) {
    let wants = |w: &str| o.only.is_empty() || o.only.iter().any(|x| x.eq_ignore_ascii_case(w));
    outln!(
        "runtape bench — medians of {} repetition(s), databases in {}",
        o.reps,
        dir.display()
    );
    if o.only.is_empty() || o.only.iter().any(|w| !w.eq_ignore_ascii_case("w5")) {
        outln!(
            "every message 200 bytes; scripted provider, zero latency; one tool call per round\n"
        );
    }
    if wants("raw") || wants("w1") || wants("w2") {
        outln!(
            "raw SQLite single-row commits (WAL)   FULL {:>9.0}/s   NORMAL {:>9.0}/s",
            r.raw.full_per_s,
            r.raw.normal_per_s
        );
    }
    if wants("w1") {
        outln!(
            "W1  one run, {} rounds, FULL          {:>6} transitions in {:>8.1} ms = {:>8.0}/s ({:.2}× raw FULL); {:.0} B/transition",
            r.w1.rounds,
            r.w1.transitions,
            r.w1.wall_ms,
            r.w1.per_s,
            r.w1.fraction_of_raw,
            r.w1.bytes_per_transition
        );
        outln!(
            "W1  the same, NORMAL                  {:>6} transitions in {:>8.1} ms = {:>8.0}/s ({:.2}× raw NORMAL); {:.0} B/transition",
            r.w1_normal.transitions,
            r.w1_normal.wall_ms,
            r.w1_normal.per_s,
            r.w1_normal.fraction_of_raw,
            r.w1_normal.bytes_per_transition
        );
    }
    for g in &r.growth {
        outln!(
            "    growth R={:<6}                   {:>6} transitions: {:>6.0} B/transition, {:>7.1} µs/transition",
            g.rounds,
            g.transitions,
            g.bytes_per_transition,
            g.us_per_transition
        );
    }
    if wants("w2") {
        outln!(
            "W2  {} runs × {} rounds together       {:>8.1} ms: {:>7.1} runs/s, {:>8.0} transitions/s ({:.1}× raw FULL)",
            r.w2.runs,
            o.w2_rounds,
            r.w2.wall_ms,
            r.w2.runs_per_s,
            r.w2.per_s,
            r.w2.multiple_of_raw
        );
    }
    if wants("w3") {
        let p = |v: Option<f64>| v.map_or("n/a".to_owned(), |ms| format!("{ms:.1} ms"));
        outln!(
            "W3  resume a {}-transition run: new process {} (in-process {:.1} ms); log --json {}; verify {}",
            r.w3.transitions,
            p(r.w3.resume_process_ms),
            r.w3.resume_in_process_ms,
            p(r.w3.log_process_ms),
            p(r.w3.verify_process_ms)
        );
    }
    if wants("travel") {
        let p = |v: Option<f64>| v.map_or("n/a".to_owned(), |ms| format!("{ms:.1} ms"));
        outln!(
            "T   time travel on a {}-transition run (whole processes): log --json {}; show RUN@SEQ {}; verify {}",
            r.travel.transitions,
            p(r.travel.log_ms),
            p(r.travel.show_ms),
            p(r.travel.verify_ms)
        );
    }
    if wants("resume") {
        let g = &r.resume;
        outln!(
            "R   resume --raise to the end (ops::resume, in-process): {} transitions {:.1} ms; {} transitions {:.1} ms; ratio {:.2}",
            g.short_transitions,
            g.short_ms,
            g.long_transitions,
            g.long_ms,
            g.ratio
        );
        if let (Some(short), Some(long), Some(ratio)) = (g.cli_short_ms, g.cli_long_ms, g.cli_ratio)
        {
            outln!(
                "R   runtape resume --raise to the end (whole process, from a spec file): {short:.1} ms; {long:.1} ms; ratio {ratio:.2}"
            );
        }
    }
    if wants("w4") {
        outln!(
            "W4  in memory, {} transitions          {:>10.0} transitions/s",
            r.w4.transitions,
            r.w4.per_s
        );
    }
    if wants("w5") {
        let w = &r.w5;
        outln!(
            "W5  {} runs × {} rounds together, model {} ms ± 20%, FULL",
            w.runs,
            w.rounds,
            o.w5.model_latency.as_millis()
        );
        outln!(
            "    wall {:.0} ms = {:.3}× ideal ({:.0} ms of model latency; every run calling its model by {:.0} ms); {} transitions = {:.0}/s",
            w.wall_ms,
            w.wall_over_ideal,
            w.ideal_ms,
            w.all_calling_ms,
            w.transitions,
            w.per_s
        );
        outln!(
            "    {} commits = {:.0}/s, {:.1} transitions per fsync; reply → durable p50 {:.1} ms, p99 {:.1} ms ({} replies)",
            w.commits,
            w.commits_per_s,
            w.transitions_per_fsync,
            w.reply_p50_ms,
            w.reply_p99_ms,
            w.replies
        );
        outln!(
            "    peak RSS {:.1} MiB ({:.1} MiB before the runs) = {:.1} KiB per run in flight; {:.0} B/transition",
            w.peak_rss as f64 / 1048576.0,
            w.base_rss as f64 / 1048576.0,
            w.rss_per_run / 1024.0,
            w.bytes_per_transition
        );
        if w.written_per_transition > 0.0 {
            outln!(
                "    written while running: {:.1} KiB per transition (WAL frames and checkpoints)",
                w.written_per_transition / 1024.0
            );
        }
        match (w.writer_nice, w.process_nice) {
            (Some(writer), Some(process)) if writer < process => outln!(
                "    writer thread at nice {writer}, ahead of the process's {process} (${})",
                crate::store::sqlite_priority::NICE_ENV
            ),
            (Some(writer), _) => outln!(
                "    writer thread at nice {writer}, not ahead of the process (${} set it so, or the OS did not permit a boost)",
                crate::store::sqlite_priority::NICE_ENV
            ),
            _ => {}
        }
        if w.checkpointer_gives_way {
            outln!(
                "    WAL checkpointer at nice {} until the WAL is twice its threshold, then at the process's",
                crate::store::sqlite_priority::CHECKPOINTER_NICE
            );
        } else {
            outln!(
                "    WAL checkpointer at the process's priority (the OS would not let it take back a priority it gave up)"
            );
        }
    }
}

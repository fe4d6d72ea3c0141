//! `--concurrency N` drives at most N runs at once, and does drive N at once: every run's
//! agent calls a tool that counts the calls in progress (one file each in a shared folder)
//! and waits (at most 5 s) for a second to arrive.

use super::{eval_ok, s};
use crate::support::cli::{temp_db, write};

fn most_at_once(concurrency: &str) -> u32 {
    let (dir, db) = temp_db();
    let d = dir.path();
    let inside = d.join("inside");
    std::fs::create_dir(&inside).unwrap();
    let log = d.join("counts.log");
    write(
        d,
        "gate.sh",
        &format!(
            "touch '{inside}/'\"$RUNTAPE_RUN_ID\"\nls '{inside}' | wc -l >> '{log}'\n\
             i=0\nwhile [ \"$(ls '{inside}' | wc -l)\" -lt 2 ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done\n\
             rm '{inside}/'\"$RUNTAPE_RUN_ID\"\necho passed\n",
            inside = inside.display(),
            log = log.display()
        ),
    );
    let spec = write(
        d,
        "gate.toml",
        "[[providers]]\nname = \"s\"\nkind = \"scripted\"\nreplies = [\n\
         { tool_calls = [{ name = \"gate\", arguments = {} }] },\n{ text = \"through\" },\n]\n\
         [[tools]]\nname = \"gate\"\ndescription = \"waits for company\"\ncommand = [\"sh\", \"gate.sh\"]\nread_only = true\nidempotent = true\n\
         [[agents]]\nid = \"a\"\nprovider = \"s\"\ntools = [\"gate\"]\n",
    );
    let goals: String = (0..6)
        .map(|i| format!("{{\"goal\":\"g{i}\",\"expected\":\"through\"}}\n"))
        .collect();
    let dataset = write(d, "goals.jsonl", &goals);
    let report = eval_ok(
        &db,
        &[
            s(&spec),
            "--dataset",
            s(&dataset),
            "--concurrency",
            concurrency,
            "--out",
            s(&d.join("r.json")),
        ],
    );
    assert_eq!(super::variant(&report, "base")["score"], 1.0, "{report}");
    let counts = std::fs::read_to_string(&log).unwrap();
    assert_eq!(counts.lines().count(), 6, "one tool call per run: {counts}");
    counts
        .lines()
        .map(|l| l.trim().parse::<u32>().unwrap())
        .max()
        .unwrap()
}

#[test]
fn at_most_n_runs_are_driven_at_once() {
    assert_eq!(most_at_once("2"), 2, "two at once, never three");
}

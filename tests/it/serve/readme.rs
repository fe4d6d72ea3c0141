//! The `curl` examples of README.md and the guide (its `runtape serve` chapter) work as shown: each runs with
//! the real curl against a real server (its address put in for `127.0.0.1:7777`, `RUN` for a
//! run waiting for approval) and gets a 2xx answer; the event stream is followed for a moment.

use crate::support;

use std::process::Command;

use support::serve::{run_spec, scratch, serve};

/// The lines of the README's ```` ```console ```` blocks that start with `curl`.
fn curl_examples(readme: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in readme.lines() {
        let t = line.trim();
        if let Some(lang) = t.strip_prefix("```") {
            inside = !inside && lang.trim() == "console";
            continue;
        }
        if inside && t.starts_with("curl ") {
            out.push(t.to_owned());
        }
    }
    out
}

#[test]
#[ignore = "needs curl: tests/extras/install.sh curl"]
fn the_readme_curl_examples_work_against_a_real_server() {
    assert!(
        Command::new("curl").arg("--version").output().is_ok(),
        "curl is missing: apt-get install -y curl (.ci/run does)"
    );
    let readme = crate::readme::manual_text();
    let examples = curl_examples(&readme);
    assert!(
        examples.len() >= 6,
        "the README shows the API: {examples:?}"
    );
    let dir = scratch();
    let db = dir.path().join("runtape.db");
    let run = run_spec(dir.path(), &db, "examples/approval.toml");
    let server = serve(dir.path(), &db);
    let host = server.addr.to_string();
    for example in &examples {
        let line = example
            .replace("127.0.0.1:7777", &host)
            .replace("RUN", &run);
        let follows = line.contains("/events");
        // `-w` prints the status after the body; a stream is followed for 2 s.
        let extra = if follows { " --max-time 2" } else { "" };
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!("{line}{extra} -w '\\n%{{http_code}}'"))
            .current_dir(dir.path())
            .output()
            .expect("runs curl");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let status = stdout.lines().last().unwrap_or_default();
        assert!(
            status.starts_with('2'),
            "README: {example}\nanswered {status}: {stdout}"
        );
        if follows {
            assert_eq!(
                out.status.code(),
                Some(28),
                "the stream stays open until curl's limit"
            );
            assert!(stdout.contains("event: step\n"), "{stdout}");
            assert!(
                !stdout.contains("\nid: 3\n"),
                "it resumed after step 3: {stdout}"
            );
        } else {
            assert!(
                out.status.success(),
                "{example}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

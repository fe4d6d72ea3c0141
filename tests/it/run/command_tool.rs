//! Command tools: arguments on stdin, context in the environment, stdout as the result, and
//! a program that overruns, is cancelled or is abandoned gets killed with its children.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use runtape::machine::{AgentId, RunId};
use runtape::tool::command::{CommandConfig, CommandTool, MAX_STDOUT_BYTES};
use runtape::tool::{Tool, ToolContext, ToolError};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

fn shell(dir: &Path, script: &str, timeout_ms: Option<u64>) -> CommandTool {
    CommandTool::new(CommandConfig {
        name: "probe".into(),
        description: "a test program".into(),
        schema: json!({"type": "object"}),
        program: "sh".into(),
        args: vec!["-c".into(), script.into()],
        dir: dir.to_path_buf(),
        timeout_ms,
        idempotent: true,
        read_only: true,
        env: vec![],
        env_set: Default::default(),
        env_all: false,
        reconcile: None,
        confine: None,
    })
}

fn ctx(cancel: CancellationToken) -> ToolContext {
    ToolContext {
        run_id: RunId::new("run-7"),
        agent: AgentId::from("researcher"),
        call_id: "call-3".into(),
        idempotency_key: "run-7:4:0".into(),
        lease_epoch: 0,
        cancel,
    }
}

async fn call(tool: &CommandTool, args: Value) -> Result<Value, ToolError> {
    tool.invoke(args, ctx(CancellationToken::new())).await
}

fn temp() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

#[tokio::test]
async fn arguments_arrive_on_stdin_as_json() {
    let dir = temp();
    let args = json!({"q": "dürer \"quoted\"", "n": [1, 2.5, null], "deep": {"x": true}});
    let out = call(&shell(dir.path(), "cat", None), args.clone()).await;
    assert_eq!(out, Ok(args));
}

#[tokio::test]
async fn the_call_context_is_in_the_environment_and_the_spec_directory_is_the_cwd() {
    let dir = temp();
    let script = r#"printf '%s|%s|%s|%s|%s|%s' "$RUNTAPE_RUN_ID" "$RUNTAPE_IDEMPOTENCY_KEY" "$RUNTAPE_CALL_ID" "$RUNTAPE_AGENT" "$RUNTAPE_TOOL" "$(pwd)""#;
    let out = call(&shell(dir.path(), script, None), json!({})).await;
    let cwd = dir.path().canonicalize().expect("canonical");
    assert_eq!(
        out,
        Ok(Value::from(format!(
            "run-7|run-7:4:0|call-3|researcher|probe|{}",
            cwd.display()
        )))
    );
}

#[tokio::test]
async fn json_output_is_parsed_and_text_stays_text() {
    let dir = temp();
    let json_out = call(
        &shell(dir.path(), r#"echo '{"hits": [1, 2]}'"#, None),
        json!({}),
    )
    .await;
    assert_eq!(json_out, Ok(json!({"hits": [1, 2]})));
    let text = call(&shell(dir.path(), "echo 'two words'", None), json!({})).await;
    assert_eq!(
        text,
        Ok(Value::from("two words")),
        "one trailing newline trimmed"
    );
    let blank = call(&shell(dir.path(), "printf 'a\\n\\n'", None), json!({})).await;
    assert_eq!(blank, Ok(Value::from("a\n")), "only one newline trimmed");
}

#[tokio::test]
async fn a_non_zero_exit_is_an_error_with_the_status_and_the_end_of_stderr() {
    let dir = temp();
    let script = "echo partial; echo 'warming up' >&2; echo 'boom: bad query' >&2; exit 3";
    let e = call(&shell(dir.path(), script, None), json!({}))
        .await
        .expect_err("fails");
    assert_eq!(
        e.message,
        "command tool `probe` failed (exit status: 3): warming up boom: bad query"
    );

    let noisy = "i=0; while [ $i -lt 300 ]; do echo \"line $i of noise\" >&2; i=$((i+1)); done; echo LAST >&2; exit 1";
    let e = call(&shell(dir.path(), noisy, None), json!({}))
        .await
        .expect_err("fails");
    let snippet = e
        .message
        .strip_prefix("command tool `probe` failed (exit status: 1): ")
        .expect("prefix");
    assert!(snippet.chars().count() <= 500, "{}", snippet.len());
    assert!(
        snippet.starts_with('…') && snippet.ends_with("LAST"),
        "{snippet}"
    );
}

#[tokio::test]
async fn a_program_that_cannot_start_is_an_error() {
    let dir = temp();
    let tool = CommandTool::new(CommandConfig {
        program: "/nonexistent/runtape-program".into(),
        ..shell(dir.path(), "", None).config().clone()
    });
    let e = call(&tool, json!({})).await.expect_err("cannot start");
    assert!(
        e.message
            .starts_with("command tool `probe` could not start `/nonexistent/runtape-program`:"),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn output_past_the_cap_kills_the_program() {
    let dir = temp();
    let script = format!("head -c {} /dev/zero; sleep 30", MAX_STDOUT_BYTES + 10);
    let started = Instant::now();
    let e = call(&shell(dir.path(), &script, None), json!({}))
        .await
        .expect_err("too much");
    assert_eq!(
        e.message,
        "command tool `probe` wrote more than 1048576 bytes to stdout and was killed – make it print less"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn flags_and_timeout_come_from_the_config() {
    let dir = temp();
    let tool = shell(dir.path(), "true", Some(1500));
    assert!(tool.read_only() && tool.idempotent());
    assert_eq!(tool.timeout(), Some(Duration::from_millis(1500)));
    assert_eq!(shell(dir.path(), "true", None).timeout(), None);
    assert_eq!(tool.name(), "probe");
}

/// A shell that records its own pid and the pid of a child it started, then waits.
const SPAWNS_AND_WAITS: &str = "echo $$ > pids; sleep 30 & echo $! >> pids; wait";

/// The pids the script wrote, once both are there.
async fn pids(dir: &Path) -> Vec<u32> {
    let file: PathBuf = dir.join("pids");
    for _ in 0..200 {
        if let Ok(text) = std::fs::read_to_string(&file) {
            let pids: Vec<u32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
            if pids.len() == 2 {
                return pids;
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the program never wrote its pids");
}

/// Gone: no such process, or a zombie waiting for a reaper (it no longer runs).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

async fn assert_all_gone(pids: &[u32]) {
    for _ in 0..100 {
        if pids.iter().all(|&p| gone(p)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let alive: Vec<u32> = pids.iter().copied().filter(|&p| !gone(p)).collect();
    panic!("still running: {alive:?}");
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_timeout_kills_the_program_and_its_children() {
    let dir = temp();
    let tool = shell(dir.path(), SPAWNS_AND_WAITS, Some(400));
    let started = Instant::now();
    let e = call(&tool, json!({})).await.expect_err("times out");
    assert_eq!(
        e.message,
        "command tool `probe` timed out after 400 ms and was killed"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    let pids = pids(dir.path()).await;
    assert_all_gone(&pids).await;
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn cancellation_kills_the_program_and_its_children() {
    let dir = temp();
    let tool = shell(dir.path(), SPAWNS_AND_WAITS, None);
    let cancel = CancellationToken::new();
    let call = tool.invoke(json!({}), ctx(cancel.clone()));
    let watcher = async {
        let pids = pids(dir.path()).await;
        assert!(pids.iter().all(|&p| !gone(p)), "running before the cancel");
        cancel.cancel();
        pids
    };
    let (result, pids) = tokio::join!(call, watcher);
    assert_eq!(
        result.expect_err("cancelled").message,
        "command tool `probe` was cancelled and killed"
    );
    assert_all_gone(&pids).await;
}

/// The engine's own timeout drops the call's future: the program group dies with it.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn dropping_the_call_kills_the_program_and_its_children() {
    let dir = temp();
    let tool = shell(dir.path(), SPAWNS_AND_WAITS, None);
    let outcome = tokio::time::timeout(Duration::from_millis(600), async {
        let call = tool.invoke(json!({}), ctx(CancellationToken::new()));
        call.await
    })
    .await;
    assert!(outcome.is_err(), "the outer timeout fired");
    let pids = pids(dir.path()).await;
    assert_all_gone(&pids).await;
}

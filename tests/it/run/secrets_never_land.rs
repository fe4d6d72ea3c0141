//! Secrets never land: the real binary, with provider keys, the receipt signing key, the serve
//! token, database passwords and cloud keys in its environment, runs tools that print their
//! environment, a stdio MCP server and a retriever that echo what they were given (and a file
//! holding every known secret), and a local provider (127.0.0.1) that echoes its key in
//! successful replies and in an error. None of the values appears in the database file's bytes
//! (WAL included), the `--json` output, `log`, `show` of any step (which holds the exact model
//! requests), a cassette export, a receipts export, `verify`, the OTLP spans the command
//! exports, or `runtape serve`'s answers; each is there as `[redacted:NAME]`. A tool gets only
//! the minimal environment plus what its `env` names; `env_all` withholds credentials.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::cli::{keygen, temp_db, utf8, write};
use crate::support::spec::{agent, provider, scripted_as, tool};

/// The command of the tools that print what they see of the environment.
const SHOW: &str = r#"["sh", "show.sh"]"#;
use serde_json::Value;
use support::provider::{Behaviour, MockServer};

const OPENAI: &str = "sk-openai-canary-5b0e61d2c4";
const ANTHROPIC: &str = "sk-ant-canary-88aa19f3e7d0";
const GITHUB: &str = "ghp_canary_0c1d2e3f4a5b6c";
const ECHO_VAR: &str = "RUNTAPE_TEST_ECHO_KEY";
const ECHOED: &str = "sk-echoed-canary-d41d8cd98f00";
const SERVE_TOKEN: &str = "serve-token-canary-7e31b5c2";
const AWS: &str = "aws-canary-wJalrXUtnFEMI9f";
const PG_PASSWORD: &str = "pg-password-canary-3f9e2a";
const DB_URL_PASSWORD: &str = "db-url-canary-91c4";
const DATABASE_URL: &str = "postgres://u:db-url-canary-91c4@host/db";
const STRIPE: &str = "sk_live_canary_5d7e8f9a0b";

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_runtape"));
    c.env_remove("RUNTAPE_DB").env_remove("RUNTAPE_RECEIPT_KEY");
    c
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A signing key made by `runtape keygen`, as `RUNTAPE_RECEIPT_KEY="$(cat FILE)"` holds it,
/// The provider `local`: an OpenAI-compatible model `m` at `url` (a mock), streaming, its key
/// in [`ECHO_VAR`].
fn local_model(url: &str) -> String {
    provider(
        "local",
        "openai",
        &format!(
            "model = \"m\"\nbase_url = \"{url}/v1\"\napi_key_env = \"{ECHO_VAR}\"\nstream = true"
        ),
    )
}

/// and its seed line.
fn receipt_key(dir: &Path) -> (String, String) {
    let path = dir.join("receipt.key");
    let key = keygen(&path);
    let seed = key
        .lines()
        .find(|l| !l.starts_with('#') && !l.trim().is_empty())
        .expect("a seed line")
        .to_owned();
    (key, seed)
}

struct Env {
    dir: tempfile::TempDir,
    db: PathBuf,
    key: String,
    seed: String,
    /// Where the run-driving commands export OTLP spans, when set.
    otlp: Option<String>,
}

impl Env {
    fn new() -> Env {
        let (dir, db) = temp_db();
        let (key, seed) = receipt_key(dir.path());
        Env {
            dir,
            db,
            key,
            seed,
            otlp: None,
        }
    }

    /// Every secret of this test in runtape's environment, by variable name.
    fn variables(&self) -> Vec<(&str, &str)> {
        vec![
            ("OPENAI_API_KEY", OPENAI),
            ("ANTHROPIC_API_KEY", ANTHROPIC),
            ("GITHUB_TOKEN", GITHUB),
            ("RUNTAPE_RECEIPT_KEY", &self.key),
            ("RUNTAPE_SERVE_TOKEN", SERVE_TOKEN),
            ("AWS_SECRET_ACCESS_KEY", AWS),
            ("PGPASSWORD", PG_PASSWORD),
            ("DATABASE_URL", DATABASE_URL),
            ("STRIPE_SK", STRIPE),
            (ECHO_VAR, ECHOED),
        ]
    }

    /// The binary with every secret of this test in its environment.
    fn runtape(&self, args: &[&str]) -> Output {
        let mut c = bin();
        c.envs(self.variables());
        match &self.otlp {
            Some(url) => c.env("OTEL_EXPORTER_OTLP_ENDPOINT", url),
            None => c.env_remove("OTEL_EXPORTER_OTLP_ENDPOINT"),
        };
        c.env("X_PASSED", "passed-value")
            .env("X_OTHER", "other-value")
            .arg("--db")
            .arg(&self.db)
            .args(args)
            .output()
            .expect("runs the binary")
    }

    fn spec(&self, body: &str) -> String {
        let path = write(self.dir.path(), "spec.toml", body);
        utf8(&path).to_owned()
    }

    /// Everything the run left or can be made to print, by name.
    fn everything(&self, run: &str, printed: &[&Output]) -> Vec<(String, String)> {
        let mut all = Vec::new();
        for (i, o) in printed.iter().enumerate() {
            all.push((format!("output {i} stdout"), text(&o.stdout)));
            all.push((format!("output {i} stderr"), text(&o.stderr)));
        }
        for suffix in ["", "-wal", "-shm"] {
            let path = PathBuf::from(format!("{}{suffix}", self.db.display()));
            if let Ok(bytes) = std::fs::read(&path) {
                all.push((format!("database file {}", path.display()), text(&bytes)));
            }
        }
        let log = self.runtape(&["log", run, "--json"]);
        let last = last_seq(self, run);
        all.push(("log --json".into(), text(&log.stdout)));
        all.push(("log".into(), text(&self.runtape(&["log", run]).stdout)));
        for seq in 0..=last {
            let at = format!("{run}@{seq}");
            for json in [true, false] {
                let args: Vec<&str> = if json {
                    vec!["show", &at, "--json"]
                } else {
                    vec!["show", &at]
                };
                all.push((
                    format!("show {at} json={json}"),
                    text(&self.runtape(&args).stdout),
                ));
            }
        }
        let cassette = self.dir.path().join(format!("{run}.cassette.json"));
        let receipts = self.dir.path().join(format!("{run}.receipts.jsonl"));
        let c = utf8(&cassette);
        let r = utf8(&receipts);
        for o in [
            self.runtape(&["cassette", "export", run, "-o", c]),
            self.runtape(&["receipts", "export", run, "-o", r]),
            self.runtape(&["verify", run]),
        ] {
            all.push((
                "export/verify output".into(),
                text(&o.stdout) + &text(&o.stderr),
            ));
        }
        for file in [&cassette, &receipts] {
            let bytes = std::fs::read(file).expect("exported");
            all.push((file.display().to_string(), text(&bytes)));
        }
        all
    }

    /// Every secret value of this test, by what it is: each variable's value, the receipt
    /// key's seed and the password inside `DATABASE_URL`.
    fn secrets(&self) -> Vec<(&str, &str)> {
        let mut all = self.variables();
        all.push(("the receipt key's seed", self.seed.as_str()));
        all.push(("the password in DATABASE_URL", DB_URL_PASSWORD));
        all
    }

    fn assert_nowhere(&self, run: &str, printed: &[&Output]) {
        self.assert_nowhere_with(run, printed, Vec::new());
    }

    /// [`assert_nowhere`], also in `more` places (name, content).
    fn assert_nowhere_with(&self, run: &str, printed: &[&Output], more: Vec<(String, String)>) {
        let mut places = self.everything(run, printed);
        places.extend(more);
        for (what, value) in self.secrets() {
            for (place, content) in &places {
                assert!(
                    !content.contains(value),
                    "{what} leaked into {place}:\n{content}"
                );
            }
        }
    }
}

/// The last step of `run`, from `log --json`.
fn last_seq(env: &Env, run: &str) -> u64 {
    let log = env.runtape(&["log", run, "--json"]);
    text(&log.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["seq"].as_u64())
        .max()
        .expect("steps")
}

fn run_id(o: &Output) -> String {
    let first = text(&o.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned();
    let v: Value = serde_json::from_str(&first).expect("the run line");
    v["id"].as_str().expect("id").to_owned()
}

/// The stored result of the tool call answered at `seq`.
fn tool_result(env: &Env, run: &str, call_id: &str) -> Value {
    let log = env.runtape(&["log", run, "--json"]);
    for line in text(&log.stdout).lines() {
        let Ok(step) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let Some(seq) = step["seq"].as_u64() else {
            continue;
        };
        let show = env.runtape(&["show", &format!("{run}@{seq}"), "--json"]);
        let v: Value = serde_json::from_slice(&show.stdout).expect("show --json");
        let body = &v["event"]["body"];
        if body["type"] == "tool_returned" {
            let effect_seq = body["effect"]["seq"].as_u64().expect("effect seq");
            let call = env.runtape(&["show", &format!("{run}@{effect_seq}"), "--json"]);
            let issued: Value = serde_json::from_slice(&call.stdout).expect("show --json");
            let index = body["effect"]["index"].as_u64().expect("index") as usize;
            if issued["effects"][index]["call_id"] == call_id {
                return body["outcome"].clone();
            }
        }
    }
    panic!("no result for {call_id}");
}

#[test]
fn a_tool_printing_its_environment_sees_no_key_and_nothing_stored_holds_one() {
    let env = Env::new();
    let spec = env.spec(
        &[
            "goal = \"dump\"\n",
            &scripted_as(
                "s",
                r#"{ tool_calls = [{ id = "dump1", name = "dump", arguments = {} }] }, { text = "done" }"#,
            ),
            &tool("dump", r#"["env"]"#, "read_only = true"),
            &agent("a", "s", &[], ""),
        ]
        .concat(),
    );
    let o = env.runtape(&["run", &spec, "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let run = run_id(&o);
    let printed = tool_result(&env, &run, "dump1");
    let printed = printed["value"].as_str().expect("env's text");
    assert!(
        printed.contains("PATH=") && printed.contains(&format!("RUNTAPE_RUN_ID={run}")),
        "the tool's whole environment is the result: {printed}"
    );
    for absent in [
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "GITHUB_TOKEN",
        "RUNTAPE_RECEIPT_KEY",
        "X_OTHER",
    ] {
        assert!(!printed.contains(absent), "{absent} reached the tool");
    }
    env.assert_nowhere(&run, &[&o]);
}

#[test]
fn env_passes_what_it_names_and_env_all_withholds_credentials() {
    let env = Env::new();
    let show = r#"printf '%s|%s|%s|%s|%s' "${X_PASSED-unset}" "${X_OTHER-unset}" "${OPENAI_API_KEY-unset}" "${GITHUB_TOKEN-unset}" "${RUNTAPE_RECEIPT_KEY-unset}""#;
    std::fs::write(env.dir.path().join("show.sh"), show).expect("script");
    let spec = env.spec(
        &(r#"goal = "look"
[[providers]]
name = "s"
kind = "scripted"
replies = [
  { tool_calls = [{ id = "named", name = "named", arguments = {} }, { id = "all", name = "all", arguments = {} }, { id = "all_plus", name = "all_plus", arguments = {} }] },
  { text = "done" },
]
"#
        .to_owned()
            + &tool("named", SHOW, "env = [\"X_PASSED\"]\nread_only = true")
            + &tool("all", SHOW, "env_all = true\nread_only = true")
            + &tool("all_plus", SHOW, "env_all = true\nenv = [\"GITHUB_TOKEN\"]\nread_only = true")
            + &agent("a", "s", &[], "")),
    );
    let o = env.runtape(&["run", &spec, "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let run = run_id(&o);
    let value = |call: &str| tool_result(&env, &run, call)["value"].clone();
    // Named, so passed, and registered as a secret: scrubbed wherever it comes back. Its
    // name has `PASS` in it, so env_all withholds it.
    assert_eq!(
        value("named"),
        "[redacted:X_PASSED]|unset|unset|unset|unset"
    );
    assert_eq!(value("all"), "unset|other-value|unset|unset|unset");
    assert_eq!(
        value("all_plus"),
        "unset|other-value|unset|[redacted:GITHUB_TOKEN]|unset"
    );
    env.assert_nowhere(&run, &[&o]);
}

#[test]
fn env_entries_are_names_and_never_the_signing_key() {
    let env = Env::new();
    for (entry, expected) in [
        (
            "\"RUNTAPE_RECEIPT_KEY\"",
            "tools[0].env[0]: `RUNTAPE_RECEIPT_KEY` holds the receipt signing key, which no program may get",
        ),
        (
            "\"X\", \"sk-live pasted value\"",
            "tools[0].env[1]: each entry must be the NAME of an environment variable",
        ),
        ("\"X\", \"X\"", "tools[0].env[1]: `X` is listed twice"),
    ] {
        let spec = env.spec(&format!(
            "[[providers]]\nname = \"s\"\nkind = \"echo\"\n[[tools]]\nname = \"t\"\ncommand = [\"true\"]\nenv = [{entry}]\n[[agents]]\nid = \"a\"\nprovider = \"s\"\n"
        ));
        let o = env.runtape(&["run", &spec, "g"]);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("spec.toml:7:"), "{err}");
        assert!(err.contains(expected), "{err}");
        assert!(!err.contains("sk-live"), "a value is never echoed: {err}");
        assert!(!env.db.exists(), "nothing was created");
    }
}

/// One OpenAI-style SSE event per piece.
fn sse(chunks: &[Value]) -> String {
    let mut body = String::new();
    for c in chunks {
        body.push_str(&format!("data: {c}\n\n"));
    }
    body.push_str("data: [DONE]\n\n");
    body
}

fn delta(delta: Value, finish: Option<&str>) -> Value {
    serde_json::json!({"id": "c1", "object": "chat.completion.chunk", "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_provider_echoing_its_key_in_200_replies_and_errors_leaves_no_trace() {
    let env = Env::new();
    // Replies built from the key the request carried, cut across stream deltas.
    let server = MockServer::start(|req| {
        let key = req.bearer();
        let (head, tail) = key.split_at(key.len() / 2);
        let answered = req.answers_a_tool();
        if !answered {
            let args = serde_json::json!({"echo": key}).to_string();
            Behaviour::sse(&sse(&[
                delta(serde_json::json!({"role": "assistant", "content": format!("your key: {head}")}), None),
                delta(serde_json::json!({"content": tail}), None),
                delta(
                    serde_json::json!({"tool_calls": [{"index": 0, "id": "keep1", "type": "function",
                        "function": {"name": "keep", "arguments": args}}]}),
                    None,
                ),
                delta(serde_json::json!({}), Some("tool_calls")),
            ]))
        } else {
            Behaviour::sse(&sse(&[
                delta(serde_json::json!({"role": "assistant", "content": format!("done {key}")}), None),
                delta(serde_json::json!({}), Some("stop")),
            ]))
        }
    })
    .await;
    let spec = env.spec(&format!(
        "goal = \"echo\"\n{}{}{}",
        local_model(&server.url()),
        tool(
            "keep",
            r#"["cat"]"#,
            "schema = { type = \"object\" }\nread_only = true"
        ),
        agent("a", "local", &[], ""),
    ));
    let run_spec = spec.clone();
    let o = {
        let env_ref = &env;
        tokio::task::block_in_place(|| env_ref.runtape(&["run", &run_spec, "--json"]))
    };
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(server.requests().len(), 2, "a tool round and an answer");
    let run = run_id(&o);
    let human = tokio::task::block_in_place(|| env.runtape(&["run", &spec]));
    assert!(
        text(&human.stdout).contains("answer: done [redacted:RUNTAPE_TEST_ECHO_KEY]"),
        "{}",
        text(&human.stdout)
    );
    let kept = tokio::task::block_in_place(|| tool_result(&env, &run, "keep1"));
    assert_eq!(
        kept["value"],
        serde_json::json!({"echo": "[redacted:RUNTAPE_TEST_ECHO_KEY]"})
    );

    // An error body echoing the key (400: not retried).
    let failing = MockServer::always(Behaviour::json(
        400,
        &format!(r#"{{"error":{{"message":"bad key {ECHOED}","type":"invalid_request_error"}}}}"#),
    ))
    .await;
    let spec = env.spec(
        &std::fs::read_to_string(&spec)
            .expect("spec")
            .replace(&server.url(), &failing.url()),
    );
    let failed = tokio::task::block_in_place(|| env.runtape(&["run", &spec, "--json"]));
    assert_eq!(failed.status.code(), Some(1), "{}", text(&failed.stderr));
    let failed_run = run_id(&failed);
    tokio::task::block_in_place(|| {
        env.assert_nowhere(&run, &[&o, &human, &failed]);
        env.assert_nowhere(&failed_run, &[]);
    });
}

#[tokio::test]
async fn a_recording_provider_stores_no_registered_secret() {
    use std::sync::Arc;

    use runtape::cassette::{RecordOptions, RecordingProvider};
    use runtape::machine::{AgentId, Message, ModelReply, Remaining, Role};
    use runtape::provider::{ModelProvider, ProviderRequest, ScriptedProvider};

    const KEY: &str = "sk-recorded-canary-9a8b7c6d";
    runtape::secrets::register("RUNTAPE_TEST_RECORDED_KEY", KEY);
    let model =
        ScriptedProvider::replies("demo", vec![ModelReply::text(format!("the key is {KEY}"))]);
    let recorder =
        RecordingProvider::new(Arc::new(model), RecordOptions::default()).expect("recorder");
    let request = ProviderRequest {
        agent: AgentId::from("a"),
        model: "any".into(),
        messages: Arc::new(vec![Message::text(Role::User, "the key?")]),
        tools: vec![],
        remaining: Remaining::default(),
        attempt: 1,
        settings: Default::default(),
        files: Default::default(),
        output_schema: None,
        origin: Default::default(),
    };
    recorder.complete(&request, &|_| {}).await.expect("a reply");
    let cassette = recorder.finish("2025-01-31T12:00:00Z").expect("cassette");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("c.json");
    cassette.save(&path).expect("saved");
    let text = std::fs::read_to_string(&path).expect("reads");
    assert!(!text.contains(KEY), "{text}");
    assert!(
        text.contains("the key is [redacted:RUNTAPE_TEST_RECORDED_KEY]"),
        "{text}"
    );
}

/// A stdio MCP server in `sh` with one read-only tool, `dump`, whose description names the
/// token it was given (`$GH`) and whose answer is its environment and `leak.txt`.
fn mcp_server() -> String {
    support::mcp::sh_server("uses token $GH", "text=$( (env; cat leak.txt) | escape)")
}

/// Everything `runtape serve` answers about `run` (with the serve token, as required when it
/// is set): the run list, the run, its timeline, every step, its receipts and `verify`.
fn serve_answers(env: &Env, run: &str, token: &str) -> Vec<(String, String)> {
    let server = support::serve::Server::start(
        env.dir.path(),
        &env.db,
        &[],
        &[("RUNTAPE_SERVE_TOKEN", token)],
    );
    let bearer = format!("Bearer {token}");
    let mut paths = vec![
        "/api/runs".to_owned(),
        format!("/api/runs/{run}"),
        format!("/api/runs/{run}/timeline"),
        format!("/api/runs/{run}/receipts"),
        format!("/api/runs/{run}/verify"),
    ];
    paths.extend((0..=last_seq(env, run)).map(|seq| format!("/api/runs/{run}/steps/{seq}")));
    let answers = paths
        .into_iter()
        .map(|path| {
            let (status, body) = server.get_with(&path, &bearer);
            assert_eq!(status, 200, "{path}: {body}");
            (format!("serve {path}"), body.to_string())
        })
        .collect();
    server.stop();
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_program_and_provider_echoing_known_secrets_leaves_no_trace() {
    let (otlp, spans) = support::otlp::receiver();
    let mut env = Env::new();
    env.otlp = Some(otlp);
    let root = env.dir.path();
    // A file holding every secret runtape knows: what a program that finds them on its own
    // (a config file, its own environment) would print.
    let leak: String = env
        .secrets()
        .iter()
        .map(|(_, value)| format!("{value}\n"))
        .collect();
    std::fs::write(root.join("leak.txt"), &leak).expect("leak.txt");
    std::fs::write(root.join("mcp.sh"), mcp_server()).expect("mcp.sh");

    // The provider echoes its key in text, in tool-call arguments and in the answer, and asks
    // for every tool.
    let server = MockServer::start(|req| {
        let key = req.bearer();
        let answered = req.answers_a_tool();
        if answered {
            return Behaviour::sse(&sse(&[
                delta(
                    serde_json::json!({"role": "assistant", "content": format!("done {key}")}),
                    None,
                ),
                delta(serde_json::json!({}), Some("stop")),
            ]));
        }
        let call = |index: usize, id: &str, name: &str, args: Value| {
            delta(
                serde_json::json!({"tool_calls": [{"index": index, "id": id, "type": "function",
                    "function": {"name": name, "arguments": args.to_string()}}]}),
                None,
            )
        };
        Behaviour::sse(&sse(&[
            delta(
                serde_json::json!({"role": "assistant", "content": format!("key {key}")}),
                None,
            ),
            call(0, "c_keep", "keep", serde_json::json!({"echo": key})),
            call(1, "c_leak", "leak", serde_json::json!({})),
            call(2, "c_named", "named", serde_json::json!({})),
            call(3, "c_fail", "fail", serde_json::json!({})),
            call(4, "c_mcp", "srv__dump", serde_json::json!({})),
            delta(serde_json::json!({}), Some("tool_calls")),
        ]))
    })
    .await;
    let spec = env.spec(&format!(
        r#"goal = "echo"
{local}[[providers]]
name = "openai"
kind = "openai"
model = "gpt-4o-mini"
api_key_env = "OPENAI_API_KEY"
[[providers]]
name = "anthropic"
kind = "anthropic"
model = "claude-sonnet-4-5"
api_key_env = "ANTHROPIC_API_KEY"
{keep}{leak}{named}{fail}[[mcp]]
name = "srv"
command = ["sh", "mcp.sh"]
env = {{ GH = "${{GITHUB_TOKEN}}", STRIPE_SK = "${{STRIPE_SK}}" }}
[retriever]
command = ["sh", "-c", "printf '[\"%s\"]' \"$(env | tr -d '\\n\"\\\\'; tr -d '\\n\"\\\\' < leak.txt)\""]
env = ["PGPASSWORD"]
[[agents]]
id = "a"
provider = "local"
"#,
        keep = tool("keep", r#"["cat"]"#, "read_only = true"),
        leak = tool("leak", r#"["cat", "leak.txt"]"#, "read_only = true"),
        named = tool(
            "named",
            r#"["env"]"#,
            "env = [\"DATABASE_URL\", \"AWS_SECRET_ACCESS_KEY\"]\nread_only = true",
        ),
        fail = tool(
            "fail",
            r#"["sh", "-c", "cat leak.txt >&2; exit 1"]"#,
            "read_only = true",
        ),
        local = local_model(&server.url()),
    ));
    let o = tokio::task::block_in_place(|| env.runtape(&["run", &spec, "--json"]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let run = run_id(&o);

    tokio::task::block_in_place(|| {
        let mut more = serve_answers(&env, &run, SERVE_TOKEN);
        for (i, (_, _, body)) in spans.lock().expect("lock").iter().enumerate() {
            more.push((format!("OTLP export {i}"), body.clone()));
        }
        assert!(
            more.iter().any(|(place, _)| place.starts_with("OTLP")),
            "the command exported spans"
        );
        // Each secret came back, and was recorded redacted: the echoes happened.
        let steps: String = env
            .everything(&run, &[])
            .into_iter()
            .filter(|(place, _)| place.starts_with("show"))
            .map(|(_, content)| content)
            .collect();
        for (name, _) in env.variables() {
            let redacted = format!("[redacted:{name}]");
            assert!(steps.contains(&redacted), "{redacted} is not in any step");
        }
        assert!(
            steps.contains("uses token [redacted:GITHUB_TOKEN]"),
            "the MCP tool list is scrubbed"
        );
        env.assert_nowhere_with(&run, &[&o], more);
    });
}

#[test]
fn serve_scrubs_a_secret_stored_before_it_was_known() {
    // A run made without the serve token in runtape's environment stores what a tool printed
    // as it was; `serve`, which knows its token, does not answer it.
    let env = Env::new();
    let token = "a-token-runtape-did-not-know-0417";
    std::fs::write(env.dir.path().join("token.txt"), token).expect("token.txt");
    let spec = env.spec(
        &[
            "goal = \"read\"\n",
            &scripted_as(
                "s",
                r#"{ tool_calls = [{ id = "r1", name = "read", arguments = {} }] }, { text = "done" }"#,
            ),
            &tool("read", r#"["cat", "token.txt"]"#, "read_only = true"),
            &agent("a", "s", &[], ""),
        ]
        .concat(),
    );
    let o = env.runtape(&["run", &spec, "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let run = run_id(&o);
    let mut stored = std::fs::read(&env.db).expect("db");
    stored.extend(std::fs::read(format!("{}-wal", env.db.display())).unwrap_or_default());
    assert!(
        text(&stored).contains(token),
        "the premise: stored as printed, since nothing said it was a secret"
    );
    let answers = serve_answers(&env, &run, token);
    let all: String = answers.iter().map(|(_, body)| body.as_str()).collect();
    assert!(!all.contains(token), "{all}");
    assert!(all.contains("[redacted:RUNTAPE_SERVE_TOKEN]"), "{all}");
}

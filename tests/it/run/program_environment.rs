//! One environment policy for every program runtape starts (`runtape::tool::env`): the real
//! binary, with nine credentials in its environment (the receipt key, the serve token,
//! provider keys, a GitHub token, an AWS key, a PostgreSQL password and URL, a Stripe key),
//! starts command tools, stdio MCP servers (a shell script speaking MCP) and a retriever, each
//! of which writes the environment it got to a file. None of the nine arrives unless the spec
//! names it: not by default, not with `env_all = true`; a program gets exactly the variables
//! its `env` names or sets. Bad `env` entries of `[[mcp]]` are one line at load.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Output;

use crate::support;
use crate::support::cli::{bin, keygen, text, write};
use crate::support::spec::{agent, tool};

/// The credentials in runtape's environment besides the receipt key, by name.
/// `DATABASE_URL` carries its password in the URL, as the issue's reproduction had it.
const CREDENTIALS: &[(&str, &str)] = &[
    ("RUNTAPE_SERVE_TOKEN", "serve-token-canary-7e31b5c2"),
    ("OPENAI_API_KEY", "sk-openai-canary-5b0e61d2c4"),
    ("ANTHROPIC_API_KEY", "sk-ant-canary-88aa19f3e7d0"),
    ("GITHUB_TOKEN", "ghp_canary_0c1d2e3f4a5b6c"),
    ("AWS_SECRET_ACCESS_KEY", "aws-canary-wJalrXUtnFEMI9f"),
    ("PGPASSWORD", "pg-password-canary-3f9e2a"),
    ("DATABASE_URL", "postgres://u:db-url-canary-91c4@host/db"),
    ("STRIPE_SK", "sk_live_canary_5d7e8f9a0b"),
];

/// A variable that is no credential: `env_all` passes it, the default does not.
const HARMLESS: (&str, &str) = ("X_HARMLESS_SETTING", "harmless-value");

/// A stdio MCP server in `sh` with one read-only tool, `dump`, that writes its environment to
/// the file named by its first argument and answers with it as text.
fn mcp_server() -> String {
    support::mcp::sh_server(
        "prints its environment",
        "env > \"$out\"\n      text=$(env | escape)",
    )
}

/// A command tool or retriever: writes its environment to the file named by its first
/// argument and prints no passages.
const DUMP: &str = "env > \"$1\"\nprintf '[]'\n";

/// A scratch directory with a receipt signing key made by `runtape keygen`, as
/// `RUNTAPE_RECEIPT_KEY="$(cat FILE)"` holds it.
struct Scratch {
    dir: tempfile::TempDir,
    key: String,
}

impl Scratch {
    fn new() -> Scratch {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("receipt.key");
        let key = keygen(&path);
        assert!(key.contains("runtape"), "a runtape key file: {key}");
        std::fs::remove_file(&path).expect("removed");
        Scratch { dir, key }
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    /// Every credential in runtape's environment, by name (the receipt key's whole text).
    fn credentials(&self) -> Vec<(&str, &str)> {
        let mut all = vec![("RUNTAPE_RECEIPT_KEY", self.key.trim())];
        all.extend(CREDENTIALS.iter().copied());
        all
    }

    /// The binary, with every credential and a harmless variable in its environment.
    fn runtape(&self, args: &[&str]) -> Output {
        let mut c = bin();
        for (name, value) in self.credentials().into_iter().chain([HARMLESS]) {
            c.env(name, value);
        }
        let db = self.root().join("runs.db");
        c.arg("--db").arg(db).args(args).output().expect("runs")
    }
}

/// The environment a program wrote to `file`, by name.
fn received(dir: &Path, file: &str) -> BTreeMap<String, String> {
    let path = dir.join(file);
    let dump = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{} was not written ({e}): the program did not run",
            path.display()
        )
    });
    dump.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

const SPEC: &str = r#"goal = "look"
[[providers]]
name = "s"
kind = "scripted"
replies = [
  { tool_calls = [
    { id = "t1", name = "plain", arguments = {} },
    { id = "t2", name = "all", arguments = {} },
    { id = "t3", name = "named", arguments = {} },
    { id = "m1", name = "bare__dump", arguments = {} },
    { id = "m2", name = "everything__dump", arguments = {} },
    { id = "m3", name = "picked__dump", arguments = {} },
  ] },
  { text = "done" },
]
[[mcp]]
name = "bare"
command = ["sh", "mcp.sh", "bare.env"]
[[mcp]]
name = "everything"
command = ["sh", "mcp.sh", "everything.env"]
env_all = true
[[mcp]]
name = "picked"
command = ["sh", "mcp.sh", "picked.env"]
env = { GITHUB_PERSONAL_ACCESS_TOKEN = "${GITHUB_TOKEN}", STRIPE_SK = "${STRIPE_SK}", LOG_LEVEL = "debug" }
[retriever]
command = ["sh", "dump.sh", "retriever.env"]
env_all = true
"#;

/// [`SPEC`] with its tools, each dumping its environment to a file named after it: `plain`
/// (given nothing), `all` (`env_all`) and `named` (two variables by name); and its agent.
fn spec() -> String {
    [
        SPEC,
        &tool(
            "plain",
            r#"["sh", "dump.sh", "plain.env"]"#,
            "read_only = true",
        ),
        &tool(
            "all",
            r#"["sh", "dump.sh", "all.env"]"#,
            "env_all = true\nread_only = true",
        ),
        &tool(
            "named",
            r#"["sh", "dump.sh", "named.env"]"#,
            "env = [\"GITHUB_TOKEN\", \"DATABASE_URL\"]\nread_only = true",
        ),
        &agent("a", "s", &[], ""),
    ]
    .concat()
}

#[test]
fn no_program_gets_a_credential_its_spec_does_not_name() {
    let scratch = Scratch::new();
    let root = scratch.root();
    std::fs::write(root.join("dump.sh"), DUMP).expect("dump.sh");
    std::fs::write(root.join("mcp.sh"), mcp_server()).expect("mcp.sh");
    std::fs::write(root.join("spec.toml"), spec()).expect("spec");
    let o = scratch.runtape(&["run", root.join("spec.toml").to_str().expect("utf-8")]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    let credentials = |env: &BTreeMap<String, String>| -> Vec<String> {
        scratch
            .credentials()
            .into_iter()
            .filter(|(name, value)| {
                env.contains_key(*name) || env.values().any(|v| v.contains(*value))
            })
            .map(|(name, _)| name.to_string())
            .collect()
    };
    for file in [
        "plain.env",
        "all.env",
        "bare.env",
        "everything.env",
        "retriever.env",
    ] {
        let env = received(root, file);
        assert_eq!(credentials(&env), Vec::<String>::new(), "{file}: {env:?}");
        assert!(
            env.contains_key("PATH") && env.contains_key("HOME"),
            "{file}: {env:?}"
        );
        let env_all = !file.starts_with("plain") && !file.starts_with("bare");
        assert_eq!(
            env.get(HARMLESS.0).map(String::as_str),
            env_all.then_some(HARMLESS.1),
            "{file}: env_all passes what is no credential, the default does not"
        );
    }

    // A command tool gets its call's context; a server, which outlives calls, does not.
    assert!(received(root, "plain.env").contains_key("RUNTAPE_RUN_ID"));
    assert!(received(root, "retriever.env").contains_key("RUNTAPE_RUN_ID"));
    assert!(!received(root, "bare.env").contains_key("RUNTAPE_RUN_ID"));

    // Named one by one, and only those.
    let named = received(root, "named.env");
    assert_eq!(credentials(&named), ["GITHUB_TOKEN", "DATABASE_URL"]);
    assert_eq!(
        named["DATABASE_URL"],
        "postgres://u:db-url-canary-91c4@host/db"
    );
    let picked = received(root, "picked.env");
    assert_eq!(credentials(&picked), ["GITHUB_TOKEN", "STRIPE_SK"]);
    assert_eq!(
        picked["GITHUB_PERSONAL_ACCESS_TOKEN"],
        "ghp_canary_0c1d2e3f4a5b6c"
    );
    assert!(
        !picked.contains_key("GITHUB_TOKEN"),
        "passed under its new name only"
    );
    assert_eq!(picked["STRIPE_SK"], "sk_live_canary_5d7e8f9a0b");
    assert_eq!(picked["LOG_LEVEL"], "debug");
}

#[test]
fn the_policy_is_stored_with_the_run_and_bad_mcp_env_entries_are_one_line() {
    let scratch = Scratch::new();
    let root = scratch.root();
    std::fs::write(root.join("mcp.sh"), mcp_server()).expect("mcp.sh");
    let db = root.join("runs.db");
    for (entry, expected) in [
        (
            "env = { GITHUB_TOKEN = \"ghp_pasted_in_the_spec\" }",
            "mcp[0].env.GITHUB_TOKEN: `GITHUB_TOKEN` looks like a credential, and a value written here is stored with every run – keep it in runtape's environment and write GITHUB_TOKEN = \"${GITHUB_TOKEN}\"",
        ),
        (
            "env = { DB = \"postgres://u:hunter2hunter2@db/x\" }",
            "mcp[0].env.DB: the value carries a user name or password in a URL",
        ),
        (
            "env = [\"RUNTAPE_RECEIPT_KEY\"]",
            "mcp[0].env[0]: `RUNTAPE_RECEIPT_KEY` holds the receipt signing key, which no program may get",
        ),
        (
            "env = 3",
            "a list of variable names [\"NAME\", …] or a table { NAME = \"value\" }",
        ),
    ] {
        let spec = root.join("bad.toml");
        std::fs::write(
            &spec,
            format!(
                "[[providers]]\nname = \"s\"\nkind = \"echo\"\n[[mcp]]\nname = \"m\"\ncommand = [\"sh\", \"mcp.sh\", \"m.env\"]\n{entry}\n[[agents]]\nid = \"a\"\nprovider = \"s\"\n"
            ),
        )
        .expect("spec");
        let o = scratch.runtape(&["run", spec.to_str().expect("utf-8"), "g"]);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("bad.toml:7:"), "{err}");
        assert!(err.contains(expected), "{err}");
        assert!(
            !err.contains("ghp_pasted") && !err.contains("hunter2"),
            "never echoed: {err}"
        );
        assert!(!db.exists(), "nothing was created");
    }

    // A server reached by URL starts no program, so it takes no environment.
    let spec = write(
        root,
        "url.toml",
        "[[providers]]\nname = \"s\"\nkind = \"echo\"\n[[mcp]]\nname = \"m\"\nurl = \"http://127.0.0.1:9/mcp\"\nenv_all = true\n[[agents]]\nid = \"a\"\nprovider = \"s\"\n",
    );
    let o = scratch.runtape(&["run", spec.to_str().expect("utf-8"), "g"]);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("mcp[0].env_all: `env_all` is for servers started as a program"),
        "{err}"
    );

    // What the spec asks for is part of the run's sealed setup (names and literals only).
    let spec = write(
        root,
        "ok.toml",
        "goal = \"g\"\n[[providers]]\nname = \"s\"\nkind = \"echo\"\n[[mcp]]\nname = \"m\"\ncommand = [\"sh\", \"mcp.sh\", \"m.env\"]\nenv = { TOKEN = \"${GITHUB_TOKEN}\", MODE = \"fast\" }\nenv_all = true\n[[agents]]\nid = \"a\"\nprovider = \"s\"\n",
    );
    let o = scratch.runtape(&["run", spec.to_str().expect("utf-8"), "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let first = String::from_utf8_lossy(&o.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned();
    let run: serde_json::Value = serde_json::from_str(&first).expect("the run line");
    let run = run["id"].as_str().expect("id").to_owned();
    let conn = rusqlite::Connection::open(&db).expect("opens");
    let setup: String = conn
        .query_row("SELECT setup FROM run_specs", [], |r| r.get(0))
        .expect("the run's setup");
    assert!(
        setup.contains(r#""env_set":{"MODE":{"value":"fast"},"TOKEN":{"from_env":"GITHUB_TOKEN"}},"env_all":true"#),
        "{setup}"
    );
    assert!(
        !setup.contains("ghp_canary"),
        "names, never values: {setup}"
    );
    let verified = scratch.runtape(&["verify", &run]);
    assert_eq!(verified.status.code(), Some(0), "{}", text(&verified));
}

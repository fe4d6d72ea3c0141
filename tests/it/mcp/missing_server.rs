//! A server whose program is not installed is refused in one line that says what to run: the
//! README's `examples/mcp.toml`, run from a copy of `examples/` without the reference servers
//! (as a new user has it before `tests/extras/install.sh mcp`), names that command and the
//! missing script, not the interpreter's stack trace; a spec without `install` says to
//! install the server or fix the command; nothing is written either way.

use std::path::Path;

use crate::support::cli::{err, one_line, runtape, temp_db, temp_spec, utf8};

/// A copy of `examples/` in a scratch directory, with no `target/mcp-servers` beside it.
fn examples_without_servers() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let examples = dir.path().join("examples");
    std::fs::create_dir_all(examples.join("mcp-sandbox")).expect("creates examples/");
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    std::fs::copy(from.join("mcp.toml"), examples.join("mcp.toml")).expect("copies the spec");
    dir
}

#[test]
fn the_mcp_example_without_its_server_names_the_install_command_in_one_line() {
    let dir = examples_without_servers();
    let db = dir.path().join("runtape.db");
    let spec = dir.path().join("examples/mcp.toml");
    // On a machine without Node the program itself is what is missing (command[0]); with Node,
    // the server's script (command[1]). Either way the one line names the install command.
    let node_on_path = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join("node").is_file()));
    let (at, missing) = if node_on_path {
        (
            "mcp.toml:16:20: mcp[0].command[1]:",
            "MCP server `fs`: `../target/mcp-servers/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js` does not exist",
        )
    } else {
        (
            "mcp.toml:16:12: mcp[0].command[0]:",
            "MCP server `fs`: program `node` is not on PATH",
        )
    };
    for command in ["run", "tools"] {
        let o = runtape(&db, &[command, utf8(&spec)]);
        assert_eq!(o.status.code(), Some(2), "{command}: {}", err(&o));
        let line = one_line(&err(&o)).to_owned();
        for want in [at, missing, "install it with `tests/extras/install.sh mcp`"] {
            assert!(line.contains(want), "{command}: no `{want}` in: {line}");
        }
        assert!(!line.contains("node:internal"), "{line}");
    }
    assert!(!db.exists(), "nothing was written");
}

#[test]
fn a_server_script_that_does_not_exist_is_refused_before_it_is_started() {
    let (dir, db) = temp_db();
    let spec = dir.path().join("spec.toml");
    let write = |install: &str| {
        std::fs::write(
            &spec,
            format!(
                "goal = \"g\"\n[[mcp]]\nname = \"s\"\ncommand = [\"sh\", \"server.sh\"]\n{install}\n[[providers]]\nname = \"p\"\nkind = \"scripted\"\nreplies = [{{ text = \"x\" }}]\n[[agents]]\nid = \"a\"\nprovider = \"p\"\n"
            ),
        )
        .expect("writes the spec")
    };
    write("");
    let o = runtape(&db, &["run", utf8(&spec)]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    let line = one_line(&err(&o)).to_owned();
    assert!(
        line.contains("mcp[0].command[1]: MCP server `s`: `server.sh` does not exist – install it or fix the command"),
        "{line}"
    );
    write("install = \"\"");
    let o = runtape(&db, &["run", utf8(&spec)]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(
        one_line(&err(&o)).contains("mcp[0].install: `install` is one line"),
        "{}",
        err(&o)
    );
    assert!(!db.exists(), "nothing was written");
}

#[test]
fn a_server_that_fails_to_start_names_its_install_command_too() {
    let (_dir, db, spec) = temp_spec(
        "spec.toml",
        "goal = \"g\"\n[[mcp]]\nname = \"s\"\ncommand = [\"sh\", \"-c\", \"echo not installed >&2; exit 3\"]\ninstall = \"make install-s\"\n[[providers]]\nname = \"p\"\nkind = \"scripted\"\nreplies = [{ text = \"x\" }]\n[[agents]]\nid = \"a\"\nprovider = \"p\"\n",
    );
    let o = runtape(&db, &["run", utf8(&spec)]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    let line = one_line(&err(&o)).to_owned();
    for want in [
        "MCP server `s`: exited during startup",
        "not installed",
        "if it is not installed: `make install-s`",
    ] {
        assert!(line.contains(want), "no `{want}` in: {line}");
    }
    assert!(!db.exists(), "nothing was written");
}

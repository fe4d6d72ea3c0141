//! `runtape completions SHELL` prints a completion script naming every command, and
//! `runtape man` a manual page (roff) listing them; `runtape man --dir DIR` writes a page per
//! command. The command list comes from `runtape help`, so a new command is checked too.

use crate::support::cli::{bare, err, out, utf8};

use super::help_reference::command_tree;

/// The top-level commands `runtape help` lists.
fn top_level() -> Vec<String> {
    let names: Vec<String> = command_tree()
        .into_iter()
        .filter(|c| c.path.len() == 1)
        .map(|c| c.path[0].clone())
        .collect();
    assert!(names.len() >= 25, "{names:?}");
    names
}

#[test]
fn completion_scripts_for_bash_zsh_and_fish_name_every_command() {
    let commands = top_level();
    for (shell, marker) in [
        ("bash", "complete -F _runtape"),
        ("zsh", "#compdef runtape"),
        ("fish", "complete -c runtape"),
    ] {
        let o = bare(&["completions", shell]);
        assert!(o.status.success(), "{shell}: {}", err(&o));
        let script = out(&o);
        assert!(script.contains(marker), "{shell}: {script}");
        for c in &commands {
            assert!(script.contains(c.as_str()), "{shell} script lacks `{c}`");
        }
        // Nested commands and options complete too (fish writes `-l json`).
        assert!(
            script.contains("export") && script.contains("json"),
            "{shell}"
        );
        assert!(script.contains("stop-on-divergence"), "{shell}");
    }
    let o = bare(&["completions", "tcsh"]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
    assert!(err(&o).contains("bash"), "names the shells: {}", err(&o));
}

#[test]
fn the_man_page_lists_every_command() {
    let o = bare(&["man"]);
    assert!(o.status.success(), "{}", err(&o));
    let page = out(&o);
    assert!(
        page.starts_with(".ie \\n(.g .ds Aq") || page.contains(".TH runtape 1"),
        "{page}"
    );
    assert!(page.contains(".TH runtape 1"), "a roff page of section 1");
    let commands = page
        .split(".SH SUBCOMMANDS")
        .nth(1)
        .expect("a SUBCOMMANDS section");
    for c in top_level() {
        assert!(
            commands.contains(&format!("runtape\\-{}", c.replace('-', "\\-"))),
            "the man page lacks `{c}`"
        );
    }
    assert!(
        page.contains("Exit status"),
        "the top-level help's text too"
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let pages = dir.path().join("man");
    let o = bare(&["man", "--dir", utf8(&pages)]);
    assert!(o.status.success(), "{}", err(&o));
    for page in ["runtape.1", "runtape-run.1", "runtape-cassette-export.1"] {
        let text =
            std::fs::read_to_string(pages.join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(text.contains(".TH runtape"), "{page}");
    }
    let run = std::fs::read_to_string(pages.join("runtape-run.1")).expect("runtape-run.1");
    assert!(
        run.contains("examples/quickstart.toml"),
        "a command's page carries its examples"
    );
}

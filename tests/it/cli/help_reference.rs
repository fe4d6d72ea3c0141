//! `runtape --help` is the reference, and the guide says the same: every command's help (read
//! from the binary, `runtape help COMMAND`, walking every subcommand) has a description and at
//! least one example; the guide's command-line chapter (`src/guide/cli.md`) has a section
//! `### \`runtape COMMAND\`` holding that description and those example lines; and every
//! subcommand and every long option is mentioned somewhere in the README or the guide.

use crate::readme::manual_text;
use crate::support::cli::{bare, out};

/// One command of the tree, as its help shows it.
#[derive(Debug)]
pub(crate) struct Help {
    /// Its words below `runtape` (`["cassette", "export"]`).
    pub(crate) path: Vec<String>,
    /// The one-line description its parent's command list shows.
    pub(crate) about: String,
    /// The lines after `Examples:`.
    pub(crate) examples: Vec<String>,
    /// Its long options, `--json` and so on (`--help` and `--version` left out).
    pub(crate) flags: Vec<String>,
}

/// The text `runtape help PATH…` prints (exit 0).
fn help_text(path: &[String]) -> String {
    let mut args = vec!["help".to_owned()];
    args.extend(path.iter().cloned());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = bare(&args);
    assert!(o.status.success(), "runtape {args:?}");
    out(&o)
}

/// The indented lines under `heading` (`Commands:`), up to the next heading. Long help
/// (`runtape help COMMAND` of a command with a long description) puts each option's text on
/// indented lines of its own and a blank line between options.
fn block<'a>(text: &'a str, heading: &str) -> Vec<&'a str> {
    text.lines()
        .skip_while(|l| *l != heading)
        .skip(1)
        .take_while(|l| l.trim().is_empty() || l.starts_with(' '))
        .filter(|l| !l.trim().is_empty())
        .collect()
}

/// Every command below `runtape`, depth first, each with what its help says.
pub(crate) fn command_tree() -> Vec<Help> {
    let mut found = Vec::new();
    walk(&[], &mut found);
    found
}

fn walk(path: &[String], found: &mut Vec<Help>) {
    let text = help_text(path);
    for line in block(&text, "Commands:") {
        let line = line.trim();
        let (name, about) = line.split_once(' ').unwrap_or((line, ""));
        if name == "help" {
            continue;
        }
        let mut sub = path.to_vec();
        sub.push(name.to_owned());
        let sub_text = help_text(&sub);
        let examples = block(&sub_text, "Examples:")
            .into_iter()
            .map(|l| l.trim().to_owned())
            .collect();
        let flags = block(&sub_text, "Options:")
            .into_iter()
            // An option's own line is indented at most 6 (`  -o, --out <FILE>` or
            // `      --json`); long help puts its text on lines indented further.
            .filter(|l| l.len() - l.trim_start().len() <= 6)
            .filter_map(|l| {
                let l = l.trim();
                let long = match l.strip_prefix('-') {
                    Some(short) if !short.starts_with('-') => short.get(3..)?,
                    _ => l,
                };
                let name: String = long
                    .strip_prefix("--")?
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                    .collect();
                Some(format!("--{name}"))
            })
            .filter(|f| f != "--help" && f != "--version" && f != "--")
            .collect();
        found.push(Help {
            path: sub.clone(),
            about: about.trim().to_owned(),
            examples,
            flags,
        });
        walk(&sub, found);
    }
}

/// Whitespace runs as one space: the guide wraps its paragraphs where help does not.
fn squeeze(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The section of `chapter` under the heading `### \`runtape PATH\``, up to the next heading
/// outside a code block.
fn section<'a>(chapter: &'a str, path: &[String]) -> Option<Vec<&'a str>> {
    let heading = format!("### `runtape {}`", path.join(" "));
    let mut lines = chapter.lines().skip_while(|l| l.trim_end() != heading);
    lines.next()?;
    let mut in_code = false;
    Some(
        lines
            .take_while(|l| {
                if l.starts_with("```") {
                    in_code = !in_code;
                }
                in_code || !l.starts_with('#')
            })
            .collect(),
    )
}

fn guide_chapter() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/guide/cli.md"))
        .expect("src/guide/cli.md")
}

#[test]
fn every_command_has_a_description_and_an_example_in_its_help() {
    let tree = command_tree();
    assert!(tree.len() >= 30, "{tree:#?}");
    for c in &tree {
        assert!(
            !c.about.is_empty(),
            "runtape {:?} has no description",
            c.path
        );
        assert!(
            !c.examples.is_empty(),
            "`runtape help {}` shows no example",
            c.path.join(" ")
        );
        for e in &c.examples {
            assert!(
                e.starts_with("runtape "),
                "an example of `runtape {}` is not a runtape command: {e}",
                c.path.join(" ")
            );
        }
    }
}

#[test]
fn the_guide_says_what_each_commands_help_says() {
    let chapter = guide_chapter();
    for c in command_tree() {
        let name = c.path.join(" ");
        let section = section(&chapter, &c.path)
            .unwrap_or_else(|| panic!("src/guide/cli.md has no section \"### `runtape {name}`\""));
        let prose = squeeze(&section.join(" "));
        assert!(
            prose.contains(&squeeze(&c.about)),
            "the guide's section of `runtape {name}` does not give its description, as \
             `runtape help` does: {}",
            c.about
        );
        let lines: Vec<String> = section.iter().map(|l| squeeze(l)).collect();
        for e in &c.examples {
            assert!(
                lines.contains(&squeeze(e)),
                "the guide's section of `runtape {name}` does not show the example of its \
                 help: {e}"
            );
        }
    }
}

#[test]
fn every_command_and_long_option_is_in_the_guide_or_the_readme() {
    let manual = manual_text();
    let mentioned = |word: &str| {
        manual.match_indices(word).any(|(i, _)| {
            !manual[i + word.len()..]
                .starts_with(|c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        })
    };
    let mut missing = Vec::new();
    for c in command_tree() {
        let name = format!("runtape {}", c.path.join(" "));
        if !mentioned(&name) {
            missing.push(name.clone());
        }
        for flag in &c.flags {
            if !mentioned(flag) {
                missing.push(format!("{name} {flag}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "not mentioned in README.md or src/guide/*.md: {missing:?}"
    );
}

//! Every pointer at documentation resolves. A message in the code (any string literal under
//! `src/`, comments left out) may point at a chapter of the manual as
//! `runtape::guide::CHAPTER`, or at a command as ``see `runtape COMMAND …` `` or
//! ``run `runtape COMMAND …` ``; the chapter must be a file in `src/guide/` and the command one
//! `runtape --help` lists. No message points at the README (it is the first page, not the
//! manual: its sections move). The README's and the guide's own links into the manual
//! (`…/runtape/guide/CHAPTER/` on docs.rs, `../CHAPTER/index.html` between chapters) must name
//! chapters that exist too.

use std::path::Path;
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The chapters: the names of `src/guide/*.md`.
fn chapters() -> Vec<String> {
    std::fs::read_dir(root().join("src/guide"))
        .expect("src/guide")
        .filter_map(|e| {
            let name = e.expect("entry").file_name().into_string().ok()?;
            name.strip_suffix(".md").map(str::to_owned)
        })
        .collect()
}

/// The subcommands `runtape --help` lists.
fn subcommands() -> Vec<String> {
    let help = Command::new(env!("CARGO_BIN_EXE_runtape"))
        .arg("--help")
        .output()
        .expect("runs --help");
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    help.split("Commands:")
        .nth(1)
        .expect("a command list")
        .split("Options:")
        .next()
        .expect("the list ends")
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

/// The contents of the string literals of Rust source `text` (plain and raw), comments and
/// character literals left out. Escapes are kept as written; a pointer has none.
fn string_literals(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '/' if chars.get(i + 1) == Some(&'/') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '/' if chars.get(i + 1) == Some(&'*') => {
                i += 2;
                while i + 1 < chars.len() && !(chars[i] == '*' && chars[i + 1] == '/') {
                    i += 1;
                }
                i += 2;
            }
            // A character literal (`'"'`), not a lifetime (`'a`).
            '\'' if chars.get(i + 2) == Some(&'\'') => i += 3,
            '\'' if chars.get(i + 1) == Some(&'\\') => {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            }
            'r' if matches!(chars.get(i + 1), Some('"' | '#'))
                && (i == 0 || !chars[i - 1].is_alphanumeric() && chars[i - 1] != '_') =>
            {
                let mut j = i + 1;
                let mut hashes = 0;
                while chars.get(j) == Some(&'#') {
                    hashes += 1;
                    j += 1;
                }
                if chars.get(j) != Some(&'"') {
                    i += 1;
                    continue;
                }
                let close: String = std::iter::once('"')
                    .chain(std::iter::repeat_n('#', hashes))
                    .collect();
                let body: String = chars[j + 1..].iter().collect();
                let end = body.find(&close).unwrap_or(body.len());
                out.push(body[..end].to_owned());
                i = j + 1 + body[..end].chars().count() + close.chars().count();
            }
            '"' => {
                let mut s = String::new();
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    if chars[i] == '\\' {
                        s.push(chars[i]);
                        i += 1;
                    }
                    if let Some(&c) = chars.get(i) {
                        s.push(c);
                    }
                    i += 1;
                }
                out.push(s);
                i += 1;
            }
            _ => i += 1,
        }
    }
    out
}

/// The words after each `marker` in `text`, up to the first character not in a name.
fn named_after<'a>(text: &'a str, marker: &str) -> Vec<&'a str> {
    text.match_indices(marker)
        .map(|(at, _)| {
            let rest = &text[at + marker.len()..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .collect()
}

#[test]
fn every_message_pointing_at_documentation_names_a_chapter_or_command_that_exists() {
    let (chapters, commands) = (chapters(), subcommands());
    let files = crate::support::sources::rust_files(&root().join("src"));
    let mut pointers = 0;
    let mut broken = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("reads a source file");
        let shown = file
            .strip_prefix(root())
            .unwrap_or(file)
            .display()
            .to_string();
        for literal in string_literals(&text) {
            if literal.contains("README") {
                broken.push(format!("{shown}: points at the README: {literal}"));
            }
            for chapter in named_after(&literal, "runtape::guide::") {
                pointers += 1;
                if !chapters.iter().any(|c| c == chapter) {
                    broken.push(format!("{shown}: no chapter `{chapter}`: {literal}"));
                }
            }
            for marker in ["see `runtape ", "run `runtape "] {
                for command in named_after(&literal, marker) {
                    pointers += 1;
                    if !commands.iter().any(|c| c == command) {
                        broken.push(format!("{shown}: no command `{command}`: {literal}"));
                    }
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "pointers that lead nowhere:\n{}",
        broken.join("\n")
    );
    assert!(
        pointers >= 5,
        "found only {pointers} pointers: is the scan blind?"
    );
}

#[test]
fn every_link_into_the_manual_names_a_chapter_that_exists() {
    let chapters = chapters();
    let mut links = 0;
    let mut broken = Vec::new();
    for (path, text) in super::manual() {
        for marker in ["/runtape/guide/", "](../"] {
            for chapter in named_after(&text, marker) {
                links += 1;
                if !chapters.iter().any(|c| c == chapter) {
                    broken.push(format!(
                        "{path}: no chapter `{chapter}` ({marker}{chapter})"
                    ));
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "links that lead nowhere:\n{}",
        broken.join("\n")
    );
    assert!(links >= 20, "found only {links} links: is the scan blind?");
}

#[test]
fn a_raw_string_and_a_comment_are_read_as_rust_reads_them() {
    let text = "let a = \"see `runtape ls`\"; // \"runtape::guide::nowhere\"\nlet b = r#\"a \"quoted\" runtape::guide::specs\"#; let c = '\"';";
    assert_eq!(
        string_literals(text),
        ["see `runtape ls`", "a \"quoted\" runtape::guide::specs"]
    );
}

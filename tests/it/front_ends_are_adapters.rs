//! The front ends are adapters over one application layer (`src/ops`): `runtape serve`
//! imports nothing from the command line, the command line nothing from the server but its
//! entry point and options, what both share about the terminal (`src/term`) neither of them,
//! and nothing below the operations imports them. Read from the source, as `use` and paths.

use std::path::Path;

use crate::support::sources::{sources, src};

/// The places in `code` where one of `paths` is named, as `file: the line`.
fn uses(file: &Path, code: &str, paths: &[&str]) -> Vec<String> {
    code.lines()
        .filter(|l| paths.iter().any(|p| l.contains(p)))
        .map(|l| format!("{}: {}", file.display(), l.trim()))
        .collect()
}

#[test]
fn the_server_imports_nothing_from_the_command_line() {
    let found: Vec<String> = sources(&src().join("serve"))
        .iter()
        .flat_map(|(f, code)| uses(f, code, &["crate::cli", "super::super::cli"]))
        .collect();
    assert!(found.is_empty(), "serve reaches into cli: {found:#?}");
}

#[test]
fn the_command_line_takes_only_the_servers_entry_point_and_options() {
    let allowed = [
        "crate::serve::run(",
        "crate::serve::Options",
        "crate::serve::DEFAULT_ADDR",
        "crate::serve::DEFAULT_TOKEN_ENV",
        "crate::serve::limits::Limits",
    ];
    let mut found = Vec::new();
    for (f, code) in sources(&src().join("cli")) {
        for line in code.lines() {
            let mut rest = line;
            while let Some(at) = rest.find("crate::serve") {
                let tail = &rest[at..];
                if !allowed.iter().any(|a| tail.starts_with(a)) {
                    found.push(format!("{}: {}", f.display(), line.trim()));
                }
                rest = &tail["crate::serve".len()..];
            }
        }
    }
    assert!(found.is_empty(), "cli reaches into serve: {found:#?}");
}

#[test]
fn the_shared_terminal_code_and_the_operations_import_no_front_end() {
    let fronts = ["crate::cli", "crate::serve", "crate::bench"];
    let mut found = Vec::new();
    for (f, code) in sources(&src().join("term")) {
        found.extend(uses(&f, &code, &fronts));
    }
    for (f, code) in sources(&src().join("ops")) {
        found.extend(uses(&f, &code, &[&fronts[..], &["crate::term"]].concat()));
    }
    assert!(
        found.is_empty(),
        "a lower layer imports a front end: {found:#?}"
    );
}

#[test]
fn nothing_below_the_operations_imports_them() {
    let above = ["ops", "cli", "serve", "term", "bench", "main.rs", "lib.rs"];
    let mut found = Vec::new();
    for (f, code) in sources(&src()) {
        let top = f
            .strip_prefix(src())
            .ok()
            .and_then(|p| p.components().next())
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .unwrap_or_default();
        if above.contains(&top.as_str()) {
            continue;
        }
        found.extend(uses(&f, &code, &["crate::ops", "super::ops"]));
    }
    assert!(found.is_empty(), "a lower layer imports ops: {found:#?}");
}

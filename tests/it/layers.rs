//! The layers are checked, not painted: every module of the library imports only from the
//! layers below it, in the order drawn in `lib.rs`'s crate doc (section "Layers"), and the pure
//! core (`src/machine/`) uses nothing but its allowed crates and no I/O, clock, thread or
//! process from the standard library. Read from the source: `crate::` paths in code (comments
//! and unit tests left out, as they may name anything).

use std::collections::BTreeMap;
use std::path::Path;

use crate::support::sources::{source, sources, src, without_unit_tests};

/// The layers as `lib.rs` draws them, lowest first: each line of the text block under
/// "# Layers", read bottom to top, is one layer; its modules are separated by commas.
fn layers() -> Vec<Vec<String>> {
    let lib = std::fs::read_to_string(src().join("lib.rs")).expect("reads lib.rs");
    let doc: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(str::trim)
        .collect();
    let heading = doc
        .iter()
        .position(|l| *l == "# Layers")
        .expect("lib.rs's crate doc has a `# Layers` section");
    let open = heading
        + doc[heading..]
            .iter()
            .position(|l| *l == "```text")
            .expect("the Layers section draws them in a text block");
    let block: Vec<&str> = doc[open + 1..]
        .iter()
        .take_while(|l| **l != "```")
        .copied()
        .collect();
    let mut layers: Vec<Vec<String>> = block
        .iter()
        .filter(|l| !l.is_empty() && !l.starts_with('↓') && !l.starts_with('|'))
        .map(|l| {
            let names = l.split_once("  ").map_or(*l, |(names, _note)| names);
            names.split(',').map(|m| m.trim().to_owned()).collect()
        })
        .collect();
    layers.reverse();
    layers
}

/// The top-level modules of the library and where each one's code lives.
fn modules() -> BTreeMap<String, Vec<(std::path::PathBuf, String)>> {
    let mut found = BTreeMap::new();
    for entry in std::fs::read_dir(src()).expect("reads src/") {
        let path = entry.expect("reads an entry of src/").path();
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default();
        if name == "lib" || name == "main" {
            continue;
        }
        if path.is_dir() {
            found.insert(name.to_owned(), sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            let code = source(&path);
            found.insert(name.to_owned(), vec![(path, code)]);
        }
    }
    found
}

/// The top-level modules `code` names through `crate::`, in paths and in grouped imports
/// (`use crate::{a::X, b};`).
fn named_modules(code: &str) -> Vec<String> {
    let mut named = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let after = &rest[at + "crate::".len()..];
        if let Some(group) = after.strip_prefix('{') {
            let inner = &group[..group.find("};").unwrap_or(group.len())];
            let mut depth = 0usize;
            let mut item = String::new();
            for c in inner.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth = depth.saturating_sub(1),
                    ',' if depth == 0 => {
                        named.push(first_segment(&item));
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                if depth == 0 {
                    item.push(c);
                }
            }
            named.push(first_segment(&item));
        } else {
            named.push(first_segment(after));
        }
        rest = after;
    }
    named.retain(|n| !n.is_empty());
    named
}

/// The identifier `path` starts with.
fn first_segment(path: &str) -> String {
    path.trim()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// Files compiled only for tests (stateright models and the like): `#[cfg(test)] mod NAME;`.
fn test_only_files(modules: &BTreeMap<String, Vec<(std::path::PathBuf, String)>>) -> Vec<String> {
    let mut names = Vec::new();
    for files in modules.values() {
        for (_, code) in files {
            let mut rest = code.as_str();
            while let Some(at) = rest.find("#[cfg(test)]") {
                let after = rest[at + "#[cfg(test)]".len()..].trim_start();
                if let Some(m) = after.strip_prefix("mod ") {
                    let name = first_segment(m);
                    if name != "tests" && after[4 + name.len()..].trim_start().starts_with(';') {
                        names.push(name);
                    }
                }
                rest = &rest[at + 1..];
            }
        }
    }
    names
}

fn is_test_only(path: &Path, test_only: &[String]) -> bool {
    path.components().any(|c| {
        let c = c.as_os_str().to_string_lossy();
        let stem = c.strip_suffix(".rs").unwrap_or(&c);
        stem == "tests" || test_only.iter().any(|t| t == stem)
    })
}

#[test]
fn every_module_is_in_one_layer_of_lib_rs() {
    let layers = layers();
    let placed: Vec<&String> = layers.iter().flatten().collect();
    let modules = modules();
    let unplaced: Vec<&String> = modules.keys().filter(|m| !placed.contains(m)).collect();
    assert!(
        unplaced.is_empty(),
        "modules missing from lib.rs's Layers drawing: {unplaced:?}"
    );
    let stale: Vec<&&String> = placed
        .iter()
        .filter(|m| !modules.contains_key(**m))
        .collect();
    assert!(
        stale.is_empty(),
        "Layers names modules that do not exist: {stale:?}"
    );
}

#[test]
fn every_module_imports_only_from_the_layers_below_it() {
    let layers = layers();
    let level: BTreeMap<&str, usize> = layers
        .iter()
        .enumerate()
        .flat_map(|(i, layer)| layer.iter().map(move |m| (m.as_str(), i)))
        .collect();
    let modules = modules();
    let test_only = test_only_files(&modules);
    let mut upward = Vec::new();
    for (module, files) in &modules {
        let Some(&own) = level.get(module.as_str()) else {
            continue; // reported by every_module_is_in_one_layer_of_lib_rs
        };
        for (path, code) in files {
            if is_test_only(path, &test_only) {
                continue;
            }
            for named in named_modules(without_unit_tests(code)) {
                match level.get(named.as_str()) {
                    Some(&theirs) if named != *module && theirs >= own => upward.push(format!(
                        "{}: {module} (layer {own}) imports {named} (layer {theirs})",
                        path.strip_prefix(src()).unwrap_or(path).display()
                    )),
                    _ => {}
                }
            }
        }
    }
    upward.sort();
    upward.dedup();
    assert!(
        upward.is_empty(),
        "imports from the same or a higher layer:\n{}",
        upward.join("\n")
    );
}

/// The crates the pure core may use: serialization, hashing, errors, and the pure parsers
/// of JSON Schema and regular expressions that structured output and policies check with.
const MACHINE_CRATES: [&str; 7] = [
    "serde",
    "serde_json",
    "thiserror",
    "blake3",
    "sha2",
    "jsonschema",
    "regex",
];

/// What of the standard library would make the core impure: I/O, the clock, threads,
/// processes, the environment, randomness from the hasher's seed.
const MACHINE_FORBIDDEN_STD: [&str; 9] = [
    "std::fs",
    "std::net",
    "std::io",
    "std::process",
    "std::env",
    "std::thread",
    "Instant",
    "SystemTime",
    "RandomState",
];

#[test]
fn the_machine_uses_only_its_allowed_crates_and_no_io_clock_or_threads() {
    let cargo = std::fs::read_to_string(src().join("../Cargo.toml")).expect("reads Cargo.toml");
    let dependencies: Vec<String> = cargo
        .split("\n[")
        .filter(|section| section.starts_with("dependencies]"))
        .flat_map(|section| section.lines().skip(1))
        .filter_map(|l| l.split(['=', ' ', '.']).next())
        .filter(|name| !name.is_empty() && !name.starts_with('#'))
        .map(|name| name.replace('-', "_"))
        .collect();
    assert!(
        dependencies.iter().any(|d| d == "tokio"),
        "read the crate's dependencies from Cargo.toml: {dependencies:?}"
    );
    let mut found = Vec::new();
    for (path, code) in sources(&src().join("machine")) {
        let code = without_unit_tests(&code);
        let rel = path
            .strip_prefix(src())
            .unwrap_or(&path)
            .display()
            .to_string();
        for line in code.lines() {
            for dep in &dependencies {
                let named = line.match_indices(&format!("{dep}::")).any(|(at, _)| {
                    !line[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':')
                });
                if named && !MACHINE_CRATES.contains(&dep.as_str()) {
                    found.push(format!("{rel}: uses {dep}: {}", line.trim()));
                }
            }
            for std in MACHINE_FORBIDDEN_STD {
                if line.contains(std) {
                    found.push(format!("{rel}: uses {std}: {}", line.trim()));
                }
            }
            if line.contains("async ") || line.contains(".await") {
                found.push(format!("{rel}: is async: {}", line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the machine is not pure:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_checks_see_an_upward_import_and_an_impure_line() {
    // The readers above on lines they must catch, so a change to them cannot blind them.
    assert_eq!(
        named_modules("use crate::{machine::X, exec::{A, B}, text};\nlet x = crate::ops::f();"),
        ["machine", "exec", "text", "ops"]
    );
    assert_eq!(
        without_unit_tests("a\n#[cfg(test)]\nmod tests { crate::cli }"),
        "a\n"
    );
    assert!(layers().len() > 10, "lib.rs draws the layers");
}

#[test]
fn the_engines_errors_are_typed_not_catch_all_text() {
    // A variant whose whole message is a string formatted elsewhere (`#[error("{0}")]` over a
    // `String`) says nothing a caller can match on; each failure has its own variant, and a
    // wrapped error keeps its type (`#[error(transparent)]`).
    let code = std::fs::read_to_string(src().join("exec/error.rs")).expect("reads exec/error.rs");
    let code = without_unit_tests(&code);
    assert!(
        code.contains("pub enum EngineError"),
        "EngineError is in exec/error.rs"
    );
    let catch_alls: Vec<&str> = code
        .lines()
        .filter(|l| l.contains("#[error(\"{0}\")]"))
        .collect();
    assert!(
        catch_alls.is_empty(),
        "catch-all variants in EngineError: {catch_alls:#?}"
    );
}

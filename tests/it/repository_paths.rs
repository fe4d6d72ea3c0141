//! Every file the tests and the code read lies inside the repository: a clone holds every
//! fixture (recorded provider cases are in `tests/fixtures/provider-recordings`, with their
//! sources), so nothing may reach for a folder beside the checkout, and the README and the
//! guide cite no file a clone does not have.

use std::path::{Path, PathBuf};

/// Text files of `dir` and below, skipping `target` and installed `node_modules`.
fn text_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if path.is_dir() {
            if name != "target" && name != "node_modules" {
                text_files(&path, out);
            }
        } else if ["rs", "sh", "mjs", "py", "toml", "md"]
            .iter()
            .any(|ext| path.extension().is_some_and(|e| e == *ext))
            || name == "run"
        {
            out.push(path);
        }
    }
}

#[test]
fn no_code_or_test_reads_outside_the_repository() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["src", "tests", "examples", ".ci"] {
        text_files(&root.join(dir), &mut files);
    }
    files.push(root.join("Cargo.toml"));
    files.push(root.join("README.md"));
    assert!(files.len() > 200, "found only {} files", files.len());
    // Spelled in pieces so that this file does not match itself.
    let beside = ["..", "/shared"].concat();
    let up_from_root = ["\"/", ".."].concat();
    let mut leaks = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            if line.contains(&beside) || line.contains(&up_from_root) {
                leaks.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        leaks.is_empty(),
        "these lines reach outside the repository; copy what they read into tests/fixtures:\n{}",
        leaks.join("\n")
    );
}

//! The crate's own source, for tests that hold a rule about the code itself (layers, the
//! clock seam).

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, with its code lines (comment lines dropped: docs may name a
/// module they do not import, or a call they say is not made).
pub fn sources(dir: &Path) -> Vec<(PathBuf, String)> {
    rust_files(dir)
        .into_iter()
        .map(|path| {
            let code = source(&path);
            (path, code)
        })
        .collect()
}

/// The code of one Rust file, without its comment lines.
pub fn source(path: &Path) -> String {
    let text = std::fs::read_to_string(path).expect("reads a source file");
    let code: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect();
    code.join("\n")
}

/// Every `.rs` file under `dir`, sorted by path.
pub fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("reads a source folder") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The crate's `src/`.
pub fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// `code` without its unit tests (from `#[cfg(test)]` followed by `mod tests` on), which
/// sleep and time on purpose.
pub fn without_unit_tests(code: &str) -> &str {
    let mut at = 0;
    while let Some(found) = code[at..].find("#[cfg(test)]") {
        let start = at + found;
        let rest = code[start + "#[cfg(test)]".len()..].trim_start();
        if rest.starts_with("mod tests") {
            return &code[..start];
        }
        at = start + 1;
    }
    code
}

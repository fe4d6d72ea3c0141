//! Every environment variable runtape reads is listed in the command-line chapter's
//! "Environment" section (`src/guide/cli.md`). The variables are found in the source: the
//! names passed to `env::var`/`env::var_os`, and every string literal that names one of
//! runtape's own (`RUNTAPE_…`), OpenTelemetry's (`OTEL_…`), libpq's (`PG…`) or a provider's
//! default key variable (`…_API_KEY`), and `DATABASE_URL`. Inline unit-test modules
//! (`#[cfg(test)] mod tests {` to the end of the file) are left out.

use std::collections::BTreeSet;
use std::path::Path;

/// The variables the source reads, with a file that names each.
fn variables_read() -> Vec<(String, String)> {
    let files = crate::support::sources::rust_files(&crate::support::sources::src());
    let call = regex::Regex::new(r#"env::var(?:_os)?\("([A-Za-z_][A-Za-z0-9_]*)"\)"#).expect("re");
    let named = regex::Regex::new(
        r#""((?:RUNTAPE_|OTEL_|PG)[A-Z0-9_]*[A-Z0-9]|[A-Z][A-Z0-9_]*_API_KEY|DATABASE_URL)""#,
    )
    .expect("re");
    // An inline unit-test module (`#[cfg(test)] mod tests {`), to the end of the file.
    let unit_tests = regex::Regex::new(r"#\[cfg\(test\)\]\s*mod \w+\s*\{").expect("re");
    let mut found = std::collections::BTreeMap::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("reads");
        let code = &text[..unit_tests.find(&text).map_or(text.len(), |m| m.start())];
        let shown = file
            .strip_prefix(Path::new(env!("CARGO_MANIFEST_DIR")))
            .unwrap_or(&file)
            .display()
            .to_string();
        for re in [&call, &named] {
            for m in re.captures_iter(code) {
                found
                    .entry(m[1].to_owned())
                    .or_insert_with(|| shown.clone());
            }
        }
    }
    found.into_iter().collect()
}

/// The chapter's "Environment" section: from its heading to the next `## ` heading.
fn environment_section() -> String {
    let chapter = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/guide/cli.md"))
        .expect("src/guide/cli.md");
    let start = chapter
        .find("\n## Environment")
        .expect("src/guide/cli.md has an `## Environment` section");
    let rest = &chapter[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 3);
    rest[..end].to_owned()
}

#[test]
fn every_variable_runtape_reads_is_in_the_guide() {
    let read = variables_read();
    let names: BTreeSet<&str> = read.iter().map(|(n, _)| n.as_str()).collect();
    for expected in ["RUNTAPE_DB", "RUNTAPE_RECEIPT_KEY", "PGPASSWORD", "HOME"] {
        assert!(
            names.contains(expected),
            "the scan finds {expected}: {names:?}"
        );
    }
    let section = environment_section();
    let missing: Vec<String> = read
        .iter()
        .filter(|(name, _)| !section.contains(&format!("`{name}`")))
        .map(|(name, file)| format!("{name} (read in {file})"))
        .collect();
    assert!(
        missing.is_empty(),
        "variables runtape reads that src/guide/cli.md's Environment section does not list: {missing:?}"
    );
}

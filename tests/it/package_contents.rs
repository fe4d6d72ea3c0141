//! What `cargo package` would publish (`cargo package --list`, offline): what a crate user
//! needs to build the library and the command, including every file the source compiles in
//! (`include_str!`), and no test database, signing key or other test fixture.

use std::path::Path;
use std::process::Command;

fn packaged() -> Vec<String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let o = Command::new(cargo)
        .args(["package", "--list", "--allow-dirty", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("runs cargo package --list");
    assert!(
        o.status.success(),
        "cargo package --list: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Every `include_str!("…")`/`include_bytes!("…")` path in `src/`, from the crate root.
fn compiled_in(dir: &Path, root: &Path, out: &mut Vec<String>) {
    let re = regex::Regex::new(r#"include_(?:str|bytes)!\("([^"]+)"\)"#).expect("re");
    for entry in std::fs::read_dir(dir).expect("reads src/") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            compiled_in(&path, root, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).expect("reads");
            for m in re.captures_iter(&text) {
                let file = path.parent().expect("a folder").join(&m[1]);
                let file = file
                    .canonicalize()
                    .unwrap_or_else(|e| panic!("{}: {e}", &m[1]));
                let shown = file.strip_prefix(root).expect("inside the crate");
                out.push(shown.display().to_string());
            }
        }
    }
}

#[test]
fn the_package_holds_what_a_user_needs_and_no_test_data() {
    let files = packaged();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .canonicalize()
        .expect("the crate root");
    let mut needed: Vec<String> = [
        "Cargo.toml",
        "Cargo.lock",
        "README.md",
        "src/lib.rs",
        "src/main.rs",
        "examples/embed.rs",
        "examples/ops.rs",
        "examples/quickstart.toml",
    ]
    .map(str::to_owned)
    .to_vec();
    compiled_in(&root.join("src"), &root, &mut needed);
    assert!(
        needed.iter().any(|f| f == "examples/demo.toml"),
        "the scan finds what the demo compiles in: {needed:?}"
    );
    for file in &needed {
        assert!(files.contains(file), "the package lacks {file}");
    }
    let unwanted: Vec<&String> = files
        .iter()
        .filter(|f| {
            f.starts_with("tests/")
                || [".db", ".key", ".pem", ".sqlite", "-wal", "-shm"]
                    .iter()
                    .any(|ext| f.ends_with(ext))
        })
        .collect();
    assert!(
        unwanted.is_empty(),
        "test data in the package: {unwanted:?}"
    );
}

//! A signing key the README or the guide tells users to write (`runtape keygen -o FILE`, run
//! in the checkout) is ignored by git, so it is not committed by accident; its public key is
//! not (`FILE.pub` may be shared). Asks git itself (`git check-ignore`), from the checkout.

use std::process::Command;

use crate::readme::manual_text;

/// Whether git ignores `path` (relative to the checkout) by the repository's ignore rules.
fn ignored(path: &str) -> bool {
    let o = Command::new("git")
        .args(["check-ignore", "--quiet", "--no-index", path])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("runs git");
    match o.status.code() {
        Some(0) => true,
        Some(1) => false,
        _ => panic!(
            "git check-ignore {path}: {}",
            String::from_utf8_lossy(&o.stderr)
        ),
    }
}

#[test]
fn keys_the_manual_has_users_write_are_git_ignored() {
    let manual = manual_text();
    let keygen = regex::Regex::new(r"runtape keygen (?:-o|--out) (\S+)").expect("re");
    let keys: Vec<&str> = keygen
        .captures_iter(&manual)
        .map(|c| c.get(1).expect("a path").as_str())
        .collect();
    assert!(
        keys.len() >= 2,
        "the README and the guide write keys: {keys:?}"
    );
    for key in keys {
        assert!(ignored(key), "git would commit the signing key {key}");
        assert!(
            !ignored(&format!("{key}.pub")),
            "{key}.pub can be committed"
        );
    }
    assert!(
        !ignored("tests/fixtures/db-0.1.0/fixture.key"),
        "the fixtures' test keys stay tracked"
    );
}

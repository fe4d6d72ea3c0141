//! Helpers for the spec-file tests: spec files written into temporary directories, the
//! fixtures, and a check that an error is one line pointing at an exact spot.

#![allow(dead_code)] // Each test file uses a different subset.

use std::path::{Path, PathBuf};

use crate::support::cli::write;
use runtape::config::{ConfigError, RunFile, load};

/// A spec file in its own temporary directory (removed on drop).
pub(crate) struct SpecFile {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) path: PathBuf,
}

impl SpecFile {
    /// Writes `text` to `runtape.toml` in a new temporary directory.
    pub(crate) fn new(text: &str) -> SpecFile {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = write(dir.path(), "runtape.toml", text);
        SpecFile { dir, path }
    }

    /// Loads it.
    pub(crate) fn load(&self) -> Result<RunFile, ConfigError> {
        load(&self.path)
    }

    /// Loads it, expecting an error.
    pub(crate) fn error(&self) -> ConfigError {
        match self.load() {
            Ok(file) => panic!("expected an error, loaded {:?}", file.spec),
            Err(e) => e,
        }
    }

    /// Asserts loading fails with exactly `FILE:{rest}` on one line, and returns the error.
    pub(crate) fn assert_error(&self, rest: &str) -> ConfigError {
        let e = self.error();
        let text = e.to_string();
        assert!(!text.contains('\n'), "not one line: {text}");
        assert_eq!(text, format!("{}:{rest}", self.path.display()));
        assert!(!e.is_internal(), "a spec error is a usage error: {text}");
        e
    }
}

/// A fixture spec file.
pub(crate) fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/config_fixtures")
        .join(name)
}

/// The smallest useful spec: an echo provider and one agent.
pub(crate) const MINIMAL: &str = r#"[[providers]]
name = "local"
kind = "echo"

[[agents]]
id = "solo"
provider = "local"
"#;

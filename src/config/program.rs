//! Finding a command tool's program at load time, so a missing one is a spec error before
//! anything runs rather than a failed tool call in the middle of a run.

use std::path::{Path, PathBuf};

/// Resolves `program` as a command tool will start it. A bare name (`python3`) must be an
/// executable file on `PATH` and is kept bare, so another process resolves it on its own
/// `PATH`; a path (`tools/search.py`, `./x`, `/usr/bin/x`) is taken relative to `spec_dir`
/// and returned absolute. `Err` says what was looked for and where.
pub(crate) fn resolve(program: &str, spec_dir: &Path) -> Result<String, String> {
    if program.trim().is_empty() {
        return Err("the command's program is empty".into());
    }
    let as_path = Path::new(program);
    if as_path.components().count() > 1 || as_path.is_absolute() {
        let full = spec_dir.join(as_path);
        return match executable(&full) {
            Ok(()) => full
                .to_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("program path `{}` is not valid UTF-8", full.display())),
            Err(why) => Err(format!(
                "program `{program}` {why} (looked at {})",
                full.display()
            )),
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(program))
        .any(|candidate| executable(&candidate).is_ok());
    if found {
        Ok(program.to_owned())
    } else {
        Err(format!("program `{program}` is not on PATH"))
    }
}

/// `Ok` when `path` is a file this process may execute; else why not.
fn executable(path: &PathBuf) -> Result<(), &'static str> {
    let meta = std::fs::metadata(path).map_err(|_| "does not exist")?;
    if !meta.is_file() {
        return Err("is not a file");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if meta.permissions().mode() & 0o111 == 0 {
            return Err("is not executable");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_names_are_looked_up_on_path_and_kept_bare() {
        assert_eq!(resolve("sh", Path::new("/nowhere")), Ok("sh".to_owned()));
        let e = resolve("runtape-no-such-program-x", Path::new("/")).unwrap_err();
        assert_eq!(e, "program `runtape-no-such-program-x` is not on PATH");
        assert!(resolve("  ", Path::new("/")).is_err());
    }

    #[test]
    fn paths_are_relative_to_the_spec_directory() {
        assert_eq!(
            resolve("/bin/sh", Path::new("/x")),
            Ok("/bin/sh".to_owned())
        );
        let e = resolve("tools/missing.py", Path::new("/specs")).unwrap_err();
        assert_eq!(
            e,
            "program `tools/missing.py` does not exist (looked at /specs/tools/missing.py)"
        );
    }
}

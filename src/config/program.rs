//! Finding a command tool's program at load time, so a missing one is a spec error before
//! anything runs rather than a failed tool call in the middle of a run; an MCP server's
//! program is named at load and looked for just before the server is started.

use std::path::{Path, PathBuf};

/// Resolves `program` as a command tool will start it. A bare name (`python3`) must be an
/// executable file on `PATH` and is kept bare, so another process resolves it on its own
/// `PATH`; a path (`tools/search.py`, `./x`, `/usr/bin/x`) is taken relative to `spec_dir`
/// and returned absolute. `Err` says what was looked for and where.
pub(crate) fn resolve(program: &str, spec_dir: &Path) -> Result<String, String> {
    let started_as = started_as(program, spec_dir)?;
    let as_path = Path::new(&started_as);
    if as_path.is_absolute() {
        return executable(&as_path.to_path_buf())
            .map(|()| started_as.clone())
            .map_err(|why| format!("program `{program}` {why} (looked at {started_as})"));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(program))
        .any(|candidate| executable(&candidate).is_ok());
    if found {
        Ok(started_as)
    } else {
        Err(format!("program `{program}` is not on PATH"))
    }
}

/// What [`resolve`] returns for `program`, without looking whether it exists: for a program
/// that is only started later, if at all (an MCP server, which a replay from a cassette never
/// starts). `Err` only for a program that cannot be named at all (empty, or a path that is not
/// UTF-8).
pub(crate) fn started_as(program: &str, spec_dir: &Path) -> Result<String, String> {
    if program.trim().is_empty() {
        return Err("the command's program is empty".into());
    }
    let as_path = Path::new(program);
    if as_path.components().count() > 1 || as_path.is_absolute() {
        let full = spec_dir.join(as_path);
        return full
            .to_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("program path `{}` is not valid UTF-8", full.display()));
    }
    Ok(program.to_owned())
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
    fn started_as_names_the_program_without_looking_for_it() {
        let bare = started_as("runtape-no-such-program-x", Path::new("/specs"));
        assert_eq!(bare, Ok("runtape-no-such-program-x".to_owned()));
        let path = started_as("tools/missing.py", Path::new("/specs"));
        assert_eq!(path, Ok("/specs/tools/missing.py".to_owned()));
        assert!(started_as("", Path::new("/specs")).is_err());
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

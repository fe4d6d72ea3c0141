//! Confined programs: a command tool or a stdio MCP server declared with `confine = { … }`
//! starts under a Landlock domain (Linux) that lets it read only the system's program
//! directories and the paths the spec names, write only where the spec says, open no TCP
//! connection and listen on no TCP port unless `network = true`, signal no process outside its
//! own domain and reach no abstract Unix socket outside it; and with CPU-time and memory
//! limits (`ulimit`, set by `/bin/sh` before it `exec`s the program).
//!
//! The domain is taken by a short-lived thread of the engine's own process just before it
//! starts the program, so the program inherits it and runtape itself stays unconfined (Landlock
//! restricts the thread that asks and the processes it starts afterwards). Confinement fails
//! closed: on a kernel without the Landlock features asked for (file system: ABI 1; network:
//! ABI 4; scopes: ABI 6), the program is not started and the call fails with one line saying
//! so. The confinement is part of the tool's stored setup (sealed with the run's head), so a
//! resumed run confines its programs the same way, and `runtape tools` shows it.
//!
//! What it does not cover: UDP and Unix-domain sockets on the file system other than those
//! below a writable path (Landlock rules cover TCP only), and anything the program can reach
//! through file descriptors it inherits (none but its three pipes).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Directories every confined program may read and execute below: where the system keeps
/// programs, their libraries and their configuration. `/proc` is not among them: another
/// process's `environ` there would hand the program the engine's environment.
pub const SYSTEM_READ: [&str; 6] = ["/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc"];

/// Device files every confined program may read and write (`/dev/null` for its shell).
pub const SYSTEM_DEVICES: [&str; 3] = ["/dev/null", "/dev/zero", "/dev/urandom"];

/// How a program runtape starts is confined (`confine = { … }` on a tool or an MCP server).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Confine {
    /// Paths (absolute; the spec's relative paths are resolved against its directory at load)
    /// below which the program may read files, list directories and execute, besides
    /// [`SYSTEM_READ`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read: Vec<PathBuf>,
    /// Paths below which it may also create, write, rename and remove.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub write: Vec<PathBuf>,
    /// Whether it may connect to and listen on TCP ports (denied by default).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub network: bool,
    /// CPU seconds it may use before the kernel stops it (`ulimit -t`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_seconds: Option<u64>,
    /// Address space it may map, in MiB (`ulimit -v`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
}

impl Confine {
    /// One line for `runtape tools`: what the program may reach.
    pub fn summary(&self) -> String {
        let paths = |ps: &[PathBuf]| {
            ps.iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut parts = vec![format!(
            "reads {}",
            if self.read.is_empty() {
                "system directories only".to_owned()
            } else {
                paths(&self.read)
            }
        )];
        if !self.write.is_empty() {
            parts.push(format!("writes {}", paths(&self.write)));
        }
        parts.push(
            if self.network {
                "network"
            } else {
                "no network"
            }
            .to_owned(),
        );
        if let Some(s) = self.cpu_seconds {
            parts.push(format!("{s} CPU s"));
        }
        if let Some(m) = self.memory_mb {
            parts.push(format!("{m} MiB"));
        }
        format!("confined: {}", parts.join("; "))
    }

    /// The program and arguments to start in place of `program args…`: through `/bin/sh`,
    /// which sets the limits and then `exec`s the program, when a limit is set; as given
    /// otherwise.
    pub fn argv(&self, program: &Path, args: &[String]) -> (PathBuf, Vec<String>) {
        let mut limits = Vec::new();
        if let Some(s) = self.cpu_seconds {
            limits.push(format!("ulimit -t {s}"));
        }
        if let Some(m) = self.memory_mb {
            limits.push(format!("ulimit -v {}", m.saturating_mul(1024)));
        }
        if limits.is_empty() {
            return (program.to_path_buf(), args.to_vec());
        }
        let script = format!("{} && exec \"$0\" \"$@\"", limits.join(" && "));
        let mut argv = vec!["-c".to_owned(), script, program.display().to_string()];
        argv.extend(args.iter().cloned());
        (PathBuf::from("/bin/sh"), argv)
    }

    /// Checks the paths exist (a rule on a missing path cannot be made): `Err` names the
    /// first that does not.
    pub fn check_paths(&self) -> Result<(), String> {
        for p in self.read.iter().chain(&self.write) {
            if !p.is_absolute() {
                return Err(format!("`{}` is not an absolute path", p.display()));
            }
            if !p.exists() {
                return Err(format!("`{}` does not exist", p.display()));
            }
        }
        Ok(())
    }
}

/// Starts `cmd` (a program and its arguments as [`Confine::argv`] gave them, with its pipes
/// and environment set) under `confine`'s Landlock domain: on a thread of its own that takes
/// the domain, starts the program (which inherits it) and ends. Call it from inside the tokio
/// runtime. `Err` says why the program was not started — a kernel without Landlock among
/// the reasons.
#[cfg(target_os = "linux")]
pub fn spawn(
    mut cmd: tokio::process::Command,
    confine: &Confine,
    program: &Path,
) -> Result<tokio::process::Child, String> {
    let runtime = tokio::runtime::Handle::current();
    let confine = confine.clone();
    let program = program.to_path_buf();
    std::thread::scope(|s| {
        s.spawn(move || {
            let _entered = runtime.enter();
            restrict_this_thread(&confine, &program)?;
            cmd.spawn().map_err(|e| format!("could not start it: {e}"))
        })
        .join()
        .unwrap_or_else(|_| Err("the thread starting it panicked".into()))
    })
}

/// Without Landlock, a confined program is never started.
#[cfg(not(target_os = "linux"))]
pub fn spawn(
    _cmd: tokio::process::Command,
    _confine: &Confine,
    _program: &Path,
) -> Result<tokio::process::Child, String> {
    Err("confinement needs Linux (Landlock); remove `confine` to run it unconfined".into())
}

/// Puts the calling thread (and every process it starts afterwards) under `confine`'s
/// Landlock domain; `program` (the file started) may be read and executed wherever it is.
#[cfg(target_os = "linux")]
fn restrict_this_thread(confine: &Confine, program: &Path) -> Result<(), String> {
    use landlock::{
        ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr,
        RulesetCreatedAttr, Scope, path_beneath_rules,
    };
    let fail = |e: landlock::RulesetError| {
        format!("could not confine it ({e}); this kernel's Landlock lacks what `confine` needs")
    };
    let fs = ABI::V1;
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(fs))
        .map_err(fail)?
        .scope(Scope::from_all(ABI::V6))
        .map_err(fail)?;
    if !confine.network {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(ABI::V4))
            .map_err(fail)?;
    }
    let existing = |ps: Vec<PathBuf>| ps.into_iter().filter(|p| p.exists()).collect::<Vec<_>>();
    let mut read: Vec<PathBuf> = existing(SYSTEM_READ.iter().map(PathBuf::from).collect());
    read.extend(confine.read.iter().cloned());
    if program.is_absolute() {
        read.push(program.to_path_buf());
    }
    let mut write = existing(SYSTEM_DEVICES.iter().map(PathBuf::from).collect());
    write.extend(confine.write.iter().cloned());
    let status = ruleset
        .create()
        .map_err(fail)?
        .add_rules(path_beneath_rules(&read, AccessFs::from_read(fs)))
        .map_err(fail)?
        .add_rules(path_beneath_rules(&write, AccessFs::from_all(fs)))
        .map_err(fail)?
        .restrict_self()
        .map_err(fail)?;
    match status.ruleset {
        landlock::RulesetStatus::FullyEnforced => Ok(()),
        other => Err(format!(
            "could not confine it: Landlock is {other:?} on this kernel"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_go_through_the_shell_and_nothing_else_does() {
        let none = Confine::default();
        let (p, a) = none.argv(Path::new("/usr/bin/cat"), &["x".into()]);
        assert_eq!(
            (p.as_path(), a.as_slice()),
            (Path::new("/usr/bin/cat"), &["x".to_owned()][..])
        );
        let limited = Confine {
            cpu_seconds: Some(2),
            memory_mb: Some(64),
            ..Confine::default()
        };
        let (p, a) = limited.argv(Path::new("cat"), &["x".into()]);
        assert_eq!(p, Path::new("/bin/sh"));
        assert_eq!(
            a,
            [
                "-c",
                "ulimit -t 2 && ulimit -v 65536 && exec \"$0\" \"$@\"",
                "cat",
                "x"
            ]
        );
    }

    #[test]
    fn the_summary_says_what_it_may_reach() {
        let c = Confine {
            read: vec!["/srv/data".into()],
            write: vec!["/srv/out".into()],
            cpu_seconds: Some(5),
            ..Confine::default()
        };
        assert_eq!(
            c.summary(),
            "confined: reads /srv/data; writes /srv/out; no network; 5 CPU s"
        );
    }

    #[test]
    fn relative_and_missing_paths_are_refused() {
        let rel = Confine {
            read: vec!["data".into()],
            ..Confine::default()
        };
        assert_eq!(
            rel.check_paths(),
            Err("`data` is not an absolute path".into())
        );
        let missing = Confine {
            write: vec!["/nonexistent-runtape-dir".into()],
            ..Confine::default()
        };
        assert!(
            missing
                .check_paths()
                .unwrap_err()
                .contains("does not exist")
        );
    }
}

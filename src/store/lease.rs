//! Lease owners: who is driving a run, and whether that process is still alive.
//!
//! An owner is `host:pid:nonce@start`: the host, the process id, a nonce per engine and the
//! process's start time. A lease whose owner is a process on this host that is gone (exited,
//! killed and not yet reaped, or whose pid now names a later process) can be taken over at
//! once; any other lease must expire first.

use std::sync::OnceLock;

use super::Control;
use crate::machine::RunId;

/// What an engine's lease keeper reads of each run it drives, all in one read
/// ([`Store::leases`](super::Store::leases)): whose lease stands, until when, and whether
/// another process asked the run to pause or cancel.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseRecord {
    /// The run.
    pub id: RunId,
    /// Its lease epoch; a driver holding another one has been taken over.
    pub lease_epoch: u64,
    /// Wall-clock ms (on this process's clock) after which the lease counts as abandoned.
    pub lease_expires_ms: u64,
    /// A pending control request.
    pub control: Option<Control>,
}

impl LeaseRecord {
    /// The lease of run `id` at `lease_epoch` until `lease_expires_ms`, with `control` pending.
    pub fn new(
        id: RunId,
        lease_epoch: u64,
        lease_expires_ms: u64,
        control: Option<Control>,
    ) -> LeaseRecord {
        LeaseRecord {
            id,
            lease_epoch,
            lease_expires_ms,
            control,
        }
    }
}

/// This engine's owner id: host, process id and a per-engine nonce, then the process's start
/// time (`host:pid:nonce@start`, see [`owner_is_dead`]). Where the start time cannot be read
/// (no `/proc`), it is left off, as older runtapes wrote every owner.
pub fn owner_id(nonce: u64) -> String {
    let pid = std::process::id();
    match this_process_start() {
        Some(start) => format!("{}:{pid}:{nonce:x}@{start}", host()),
        None => format!("{}:{pid}:{nonce:x}", host()),
    }
}

/// True when `owner` names a process on this host that is gone: it has exited, it was killed
/// and not yet reaped (a zombie, as a container without an init leaves a killed driver), or
/// its pid now belongs to another process (the start time in the owner differs from the
/// process's). An owner written without a start time (by an older runtape) is judged by its
/// pid alone: gone when no such process exists or it is a zombie. An owner on another host,
/// this very process, or an owner that cannot be judged (no `/proc` here) is never presumed
/// gone: its lease must expire first.
pub fn owner_is_dead(owner: &str) -> bool {
    let Some(owner) = Owner::parse(owner) else {
        return false;
    };
    if owner.host != host() || owner.pid == std::process::id() || this_process_start().is_none() {
        return false;
    }
    owner.is_gone(ProcStat::read(owner.pid).as_ref())
}

/// An owner id taken apart: `host:pid:nonce`, with `@start` after the nonce (an older
/// runtape wrote none, and reading a newer owner still finds its pid where it looks).
#[derive(Debug, PartialEq, Eq)]
struct Owner<'a> {
    host: &'a str,
    pid: u32,
    /// The process's start time in clock ticks after boot (`/proc/PID/stat` field 22).
    start: Option<u64>,
}

impl<'a> Owner<'a> {
    fn parse(owner: &'a str) -> Option<Owner<'a>> {
        let mut parts = owner.rsplitn(3, ':');
        let (nonce, pid, host) = (parts.next()?, parts.next()?, parts.next()?);
        let start = match nonce.split_once('@') {
            Some((_, start)) => Some(start.parse().ok()?),
            None => None,
        };
        Some(Owner {
            host,
            pid: pid.parse().ok()?,
            start,
        })
    }

    /// Whether the process this owner names is gone, given what `/proc` says of its pid now
    /// (`None`: no such process).
    fn is_gone(&self, now: Option<&ProcStat>) -> bool {
        match now {
            None => true,
            Some(stat) => stat.exited() || self.start.is_some_and(|s| s != stat.start),
        }
    }
}

/// What `/proc/PID/stat` says of a process: its state letter and its start time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ProcStat {
    /// `R`, `S`, `D`, `Z` (zombie), `X` (dead), ...
    state: char,
    /// Clock ticks after boot.
    start: u64,
}

impl ProcStat {
    /// The process `pid` as `/proc` shows it now; `None` when there is no such process.
    fn read(pid: u32) -> Option<ProcStat> {
        ProcStat::parse(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
    }

    /// Parses a `/proc/PID/stat` line. The command name (field 2) is in parentheses and may
    /// hold spaces and parentheses itself, so the fields are counted from the last `)`: the
    /// state is field 3, the start time field 22.
    fn parse(line: &str) -> Option<ProcStat> {
        let mut fields = line[line.rfind(')')? + 1..].split_ascii_whitespace();
        let state = fields.next()?.chars().next()?;
        let start = fields.nth(18)?.parse().ok()?;
        Some(ProcStat { state, start })
    }

    /// Exited, though its parent has not collected it yet.
    fn exited(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// This process's start time, read once; `None` where `/proc` cannot tell it.
fn this_process_start() -> Option<u64> {
    static START: OnceLock<Option<u64>> = OnceLock::new();
    *START.get_or_init(|| ProcStat::read(std::process::id()).map(|s| s.start))
}

/// This host's name as owner ids carry it (`host` in `host:pid:nonce`).
pub fn owner_host() -> &'static str {
    host()
}

fn host() -> &'static str {
    static HOST: OnceLock<String> = OnceLock::new();
    HOST.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .or_else(|_| std::fs::read_to_string("/etc/hostname"))
            .map(|s| s.trim().to_owned())
            .ok()
            .filter(|s| !s.is_empty() && !s.contains(':'))
            .unwrap_or_else(|| "localhost".to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `owner`'s id as an engine in process `pid` started at `start` would write it.
    fn owner_of(pid: u32, start: Option<u64>) -> String {
        match start {
            Some(start) => format!("{}:{pid}:1f@{start}", host()),
            None => format!("{}:{pid}:1f", host()),
        }
    }

    #[test]
    fn a_live_owner_is_not_dead() {
        assert!(!owner_is_dead(&owner_id(1)), "this very process");
        assert!(
            owner_id(1).ends_with(&format!("@{}", this_process_start().expect("/proc"))),
            "{}",
            owner_id(1)
        );
        assert!(
            !owner_is_dead("elsewhere:1:0"),
            "another host is never presumed dead"
        );
        assert!(!owner_is_dead("garbage"));
        assert!(!owner_is_dead(&format!("{}:1:0@soon", host())));
    }

    #[test]
    fn an_exited_process_is_dead() {
        let child = std::process::Command::new("true")
            .spawn()
            .and_then(|mut c| c.wait().map(|_| c.id()));
        let pid = child.expect("`true` runs");
        assert!(owner_is_dead(&format!("{}:{pid}:0", host())));
    }

    #[test]
    fn a_killed_process_not_yet_reaped_is_dead() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("`sleep` runs");
        let pid = child.id();
        let start = ProcStat::read(pid).expect("running").start;
        assert!(!owner_is_dead(&owner_of(pid, Some(start))), "alive");
        child.kill().expect("SIGKILL");
        // Not waited for: it stays a zombie until reaped below.
        while ProcStat::read(pid).is_some_and(|s| s.state != 'Z') {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        assert!(owner_is_dead(&owner_of(pid, Some(start))));
        assert!(
            owner_is_dead(&owner_of(pid, None)),
            "an owner an older runtape wrote too"
        );
        child.wait().expect("reaped");
    }

    #[test]
    fn a_pid_taken_by_a_later_process_is_dead() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("`sleep` runs");
        let pid = child.id();
        let start = ProcStat::read(pid).expect("running").start;
        // The owner that held the lease had this pid but started at another time: the pid was
        // reused by the process alive now.
        assert!(owner_is_dead(&owner_of(pid, Some(start + 1))));
        assert!(owner_is_dead(&owner_of(pid, Some(start.saturating_sub(1)))));
        assert!(!owner_is_dead(&owner_of(pid, Some(start))));
        assert!(
            !owner_is_dead(&owner_of(pid, None)),
            "without a start time, a live pid counts as the owner"
        );
        child.kill().expect("SIGKILL");
        child.wait().expect("reaped");
    }

    #[test]
    fn stat_lines_are_read_past_any_command_name() {
        let line = "4242 (a (b) c) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 987654 19 20";
        assert_eq!(
            ProcStat::parse(line),
            Some(ProcStat {
                state: 'S',
                start: 987654
            })
        );
        assert_eq!(ProcStat::parse("4242 (x) Z 1 2"), None, "cut short");
        assert_eq!(
            Owner::parse("h:o:s:t:12:ab@34"),
            Some(Owner {
                host: "h:o:s:t",
                pid: 12,
                start: Some(34)
            })
        );
        assert_eq!(Owner::parse("h:12:ab@x"), None);
    }
}

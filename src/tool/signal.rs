//! Sending `SIGKILL` to a program and its process group, without `unsafe` (through `rustix`'s
//! safe wrappers). Unix only; elsewhere these do nothing and callers rely on killing the
//! program itself.

/// Sends `SIGKILL` to every process in group `pgid`. Refuses the groups that must never be
/// signalled from here: 0 and 1 (which `kill(2)` reads as "my group" and "everyone") and
/// this process's own group. Errors (the group is already gone) are ignored.
pub(crate) fn kill_group(pgid: u32) {
    #[cfg(unix)]
    {
        use rustix::process::{Pid, Signal, getpgrp, kill_process_group};
        let Some(pid) = i32::try_from(pgid).ok().and_then(Pid::from_raw) else {
            return;
        };
        if pgid <= 1 || pid == getpgrp() {
            return;
        }
        let _ = kill_process_group(pid, Signal::KILL);
    }
    #[cfg(not(unix))]
    let _ = pgid;
}

/// Sends `SIGKILL` to process `pid` (never to this process or to pid 0 or 1). Errors (the
/// process is already gone) are ignored.
pub(crate) fn kill_process(pid: u32) {
    #[cfg(unix)]
    {
        use rustix::process::{Pid, Signal, getpid, kill_process};
        let Some(target) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
            return;
        };
        if pid <= 1 || target == getpid() {
            return;
        }
        let _ = kill_process(target, Signal::KILL);
    }
    #[cfg(not(unix))]
    let _ = pid;
}

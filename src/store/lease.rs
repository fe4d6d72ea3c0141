//! Lease owners: who is driving a run, and whether that process is still alive.
//!
//! An owner is `host:pid:nonce`. A lease whose owner is a process on this host that no longer
//! exists (killed, crashed) can be taken over at once; any other lease must expire first.

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

/// This engine's owner id: host, process id and a per-engine nonce.
pub fn owner_id(nonce: u64) -> String {
    format!("{}:{}:{nonce:x}", host(), std::process::id())
}

/// True when `owner` names a process on this host that has exited.
pub fn owner_is_dead(owner: &str) -> bool {
    let mut parts = owner.rsplitn(3, ':');
    let (_nonce, pid, owner_host) = (parts.next(), parts.next(), parts.next());
    let (Some(pid), Some(owner_host)) = (pid.and_then(|p| p.parse::<u32>().ok()), owner_host)
    else {
        return false;
    };
    owner_host == host()
        && pid != std::process::id()
        && !std::path::Path::new(&format!("/proc/{pid}")).exists()
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

    #[test]
    fn a_live_owner_is_not_dead() {
        assert!(!owner_is_dead(&owner_id(1)), "this very process");
        assert!(
            !owner_is_dead("elsewhere:1:0"),
            "another host is never presumed dead"
        );
        assert!(!owner_is_dead("garbage"));
    }

    #[test]
    fn an_exited_process_is_dead() {
        let child = std::process::Command::new("true")
            .spawn()
            .and_then(|mut c| c.wait().map(|_| c.id()));
        let pid = child.expect("`true` runs");
        assert!(owner_is_dead(&format!("{}:{pid}:0", host())));
    }
}

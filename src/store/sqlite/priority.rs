//! The writer thread's scheduling priority.
//!
//! Every commit of every run in the process waits for the one writer thread, while the
//! runtime's worker threads, which prepare the writes, compete with it for the cores. At
//! 10,000 runs in flight on 2 cores (`runtape bench --only w5`), the writer was runnable but
//! not running about 40% of the time while replies arrived fastest (its
//! `/proc/<pid>/task/<tid>/schedstat`), and that queue was the reply-to-durable delay. So a
//! store asks the OS to run its writer [`WRITER_BOOST`] nice steps ahead of the thread that
//! opened it. Linux grants that to a process with `CAP_SYS_NICE` (root) or an `RLIMIT_NICE`
//! that allows it (systemd's `LimitNICE=`, `ulimit -e`); otherwise the request is refused and
//! the writer runs at the process's priority, as it always did. Nothing else changes: the
//! writer starts no threads or processes, so nothing inherits its priority.
//!
//! `$RUNTAPE_WRITER_NICE` sets the writer's nice value instead ([`nice_from_env`]); `0` (or
//! the process's own value) turns the boost off.

/// How many nice steps ahead of the opening thread a store's writer asks to run.
pub const WRITER_BOOST: i32 = 10;

/// The nice value the WAL checkpointer runs at while it keeps up: the lowest priority, so its
/// copying never takes a core from the writer or the workers while replies arrive (see
/// `checkpoint`).
pub const CHECKPOINTER_NICE: i32 = 19;

/// The variable that sets the writer's nice value.
pub const NICE_ENV: &str = "RUNTAPE_WRITER_NICE";

/// A thread whose priority can be read and changed (Linux: its kernel thread id).
#[derive(Clone, Copy, Debug)]
pub(super) struct Thread(#[cfg_attr(not(target_os = "linux"), allow(dead_code))] pub(super) i32);

/// The calling thread, if its priority can be set on its own (Linux only).
pub(super) fn this_thread() -> Option<Thread> {
    #[cfg(target_os = "linux")]
    {
        Some(Thread(rustix::thread::gettid().as_raw_nonzero().get()))
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// The nice value `thread` runs at.
pub(super) fn nice_of(thread: Thread) -> std::io::Result<i32> {
    #[cfg(target_os = "linux")]
    {
        Ok(rustix::process::getpriority_process(
            rustix::process::Pid::from_raw(thread.0),
        )?)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = thread;
        Err(std::io::ErrorKind::Unsupported.into())
    }
}

/// Sets `thread`'s nice value (-20 = most favoured, 19 = least). Lowering it below the
/// process's limit is refused with `PermissionDenied`; raising it is always allowed.
pub(super) fn set_nice(thread: Thread, nice: i32) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        Ok(rustix::process::setpriority_process(
            rustix::process::Pid::from_raw(thread.0),
            nice,
        )?)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (thread, nice);
        Err(std::io::ErrorKind::Unsupported.into())
    }
}

/// The calling thread's nice value, where a thread's priority is its own (Linux).
pub fn own_nice() -> Option<i32> {
    nice_of(this_thread()?).ok()
}

/// Moves `writer` [`WRITER_BOOST`] steps ahead of the calling thread where that is permitted;
/// returns whether it was. Call it once, from the thread that opens the store.
pub(super) fn boost(writer: Thread) -> bool {
    let Some(opener) = this_thread() else {
        return false;
    };
    let Ok(base) = nice_of(opener) else {
        return false;
    };
    set_nice(writer, (base - WRITER_BOOST).max(-20)).is_ok()
}

/// Whether `thread`, at nice value `base`, could take back priority it gave up: probed by
/// moving it one step ahead of `base` and back. True where the process has `CAP_SYS_NICE` or
/// an `RLIMIT_NICE` that allows it; false elsewhere (and off Linux), where a thread that lowers
/// its priority keeps it low.
pub(super) fn may_take_back(thread: Thread, base: i32) -> bool {
    if base <= -20 {
        // Nothing is ahead of -20; only a privileged process gets there.
        return true;
    }
    let ahead = set_nice(thread, base - 1).is_ok();
    if ahead {
        let _ = set_nice(thread, base);
    }
    ahead
}

/// The writer's nice value `$RUNTAPE_WRITER_NICE` asks for: `None` when it is unset or empty;
/// a whole number from -20 to 19 otherwise, else the one line that says so.
pub fn nice_from_env() -> Result<Option<i32>, String> {
    nice_from(std::env::var_os(NICE_ENV).as_deref())
}

/// [`nice_from_env`] over the variable's value `raw`.
fn nice_from(raw: Option<&std::ffi::OsStr>) -> Result<Option<i32>, String> {
    let Some(raw) = raw.filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    match raw.to_str().and_then(|v| v.trim().parse::<i32>().ok()) {
        Some(n) if (-20..=19).contains(&n) => Ok(Some(n)),
        _ => Err(format!(
            "${NICE_ENV} must be a whole number from -20 to 19 (the SQLite writer thread's nice value); unset it for the default ({WRITER_BOOST} steps ahead of the process where permitted)"
        )),
    }
}

#[cfg(test)]
mod parse_tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn the_variable_takes_a_nice_value_or_says_what_it_wants() {
        assert_eq!(nice_from(None), Ok(None));
        assert_eq!(nice_from(Some(OsStr::new(""))), Ok(None));
        assert_eq!(nice_from(Some(OsStr::new("-10"))), Ok(Some(-10)));
        assert_eq!(nice_from(Some(OsStr::new(" 0 "))), Ok(Some(0)));
        assert_eq!(nice_from(Some(OsStr::new("19"))), Ok(Some(19)));
        for bad in ["-21", "20", "high", "1.5", "99999999999"] {
            let e = nice_from(Some(OsStr::new(bad))).expect_err(bad);
            assert!(e.contains(NICE_ENV) && !e.contains('\n'), "{e}");
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// A thread of its own whose nice value the test may change without touching the
    /// harness's threads; it waits for `go` and reports its nice value at the end.
    fn with_thread(body: impl FnOnce(Thread) + Send + 'static) {
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            let _ = tid_tx.send(this_thread().expect("linux has thread ids"));
            let _ = done_rx.recv();
        });
        let tid = tid_rx.recv().expect("the thread reports its id");
        body(tid);
        drop(done_tx);
        worker.join().expect("the thread ends");
    }

    #[test]
    fn a_thread_nice_value_is_its_own_and_raising_it_is_always_allowed() {
        with_thread(|t| {
            let before = nice_of(t).expect("readable");
            let mine = nice_of(this_thread().expect("linux")).expect("readable");
            set_nice(t, (before + 3).min(19)).expect("raising nice is always allowed");
            assert_eq!(nice_of(t).expect("readable"), (before + 3).min(19));
            assert_eq!(
                nice_of(this_thread().expect("linux")).expect("readable"),
                mine,
                "only that thread changed"
            );
        });
    }

    #[test]
    fn boost_puts_the_writer_ahead_where_permitted_and_leaves_it_alone_otherwise() {
        with_thread(|t| {
            let opener = nice_of(this_thread().expect("linux")).expect("readable");
            let before = nice_of(t).expect("readable");
            let boosted = boost(t);
            let after = nice_of(t).expect("readable");
            if boosted {
                assert_eq!(after, (opener - WRITER_BOOST).max(-20));
            } else {
                assert_eq!(after, before, "a refused boost changes nothing");
            }
            // Whether this process may boost is the kernel's answer for -1 below the opener.
            let may = set_nice(t, (opener - 1).max(-20)).is_ok() || opener == -20;
            assert_eq!(boosted, may, "boosted exactly when the kernel permits it");
        });
    }
}

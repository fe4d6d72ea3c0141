//! WAL checkpoints off the writer's thread. SQLite copies committed pages from the WAL back
//! into the database file in a checkpoint; left to the writer connection (`wal_autocheckpoint`)
//! that copy, and its fsync of the database file, run inside the commit that crossed the
//! threshold — about a quarter of the writer's time at 10,000 runs in flight, on the one thread
//! every commit waits for.
//!
//! Here a thread of its own, on its own connection, copies frames back (`PASSIVE`: it never
//! blocks the writer, which keeps appending) whenever the WAL holds [`CHECKPOINT_AT`] frames.
//! SQLite starts the WAL over from its beginning only when every frame in it has been copied
//! back when a transaction begins, and the writer appends while the copy runs; so the writer
//! finishes the job itself between transactions once only a little is left
//! ([`WRITER_FINISHES_BELOW`] frames), and copies back whatever is there if the WAL ever
//! reaches [`WRITER_CHECKPOINT_AT`] frames (the checkpointer fell behind, or a long read holds
//! old pages). Durability is the commit's business and does not change: at `FULL` every
//! commit fsyncs the WAL before it is acknowledged, whoever copies it back later.

use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use rusqlite::{Connection, OpenFlags};

/// WAL frames (pages) at which the checkpointer starts copying back: 16 MiB of 4 KiB pages,
/// what the writer's `wal_autocheckpoint` was.
pub(super) const CHECKPOINT_AT: i64 = 4_000;

/// Frames left to copy back below which the writer finishes a checkpoint itself, so the next
/// transaction can start the WAL over.
pub(super) const WRITER_FINISHES_BELOW: i64 = 1_000;

/// WAL frames at which the writer copies back itself, whatever the checkpointer is doing.
pub(super) const WRITER_CHECKPOINT_AT: i64 = 4 * CHECKPOINT_AT;

/// The checkpointer thread and how to wake it.
pub(super) struct Checkpointer {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    /// Signalled after each pass (for tests).
    passed: Condvar,
}

#[derive(Default)]
struct State {
    /// Frames in the WAL as the writer last saw them.
    frames: i64,
    /// Passes made so far.
    passes: u64,
    stop: bool,
}

/// What the WAL holds: `(frames, frames copied back)`.
pub(super) fn wal_frames(conn: &Connection) -> rusqlite::Result<(i64, i64)> {
    conn.prepare_cached("PRAGMA wal_checkpoint(NOOP)")?
        .query_row([], |r| Ok((r.get(1)?, r.get(2)?)))
}

/// Copies back what it can without blocking anyone; returns `(frames, frames copied back)`.
pub(super) fn copy_back(conn: &Connection) -> rusqlite::Result<(i64, i64)> {
    conn.prepare_cached("PRAGMA wal_checkpoint(PASSIVE)")?
        .query_row([], |r| Ok((r.get(1)?, r.get(2)?)))
}

impl Checkpointer {
    /// Starts the checkpointer on a connection of its own to `path`, committing with the
    /// writer's `synchronous` level. `None` when it cannot start: the writer then checkpoints
    /// itself, as SQLite would.
    pub(super) fn start(path: &Path, synchronous_full: bool) -> Option<Checkpointer> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).ok()?;
        let sync = if synchronous_full { "FULL" } else { "NORMAL" };
        conn.execute_batch(&format!(
            "PRAGMA synchronous = {sync}; PRAGMA wal_autocheckpoint = 0;"
        ))
        .ok()?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            passed: Condvar::new(),
        });
        let theirs = shared.clone();
        let thread = std::thread::Builder::new()
            .name("runtape-checkpoint".into())
            .spawn(move || run(&conn, &theirs))
            .ok()?;
        Some(Checkpointer {
            shared,
            thread: Some(thread),
        })
    }

    /// Tells the checkpointer the WAL now holds `frames` frames.
    pub(super) fn saw(&self, frames: i64) {
        if frames >= CHECKPOINT_AT {
            self.lock().frames = frames;
            self.shared.wake.notify_one();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared.lock()
    }

    /// Waits until the checkpointer has made `n` passes.
    #[cfg(test)]
    fn wait_for_passes(&self, n: u64) {
        let mut state = self.lock();
        while state.passes < n {
            state = self
                .shared
                .passed
                .wait(state)
                .unwrap_or_else(|p| p.into_inner());
        }
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is plain counters; a panic elsewhere cannot leave them torn.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.lock().stop = true;
        self.shared.wake.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The checkpointer's loop: waits for a full enough WAL, copies back, until stopped.
fn run(conn: &Connection, shared: &Shared) {
    loop {
        {
            let mut state = shared.lock();
            while !state.stop && state.frames < CHECKPOINT_AT {
                state = shared.wake.wait(state).unwrap_or_else(|p| p.into_inner());
            }
            if state.stop {
                return;
            }
            state.frames = 0;
        }
        if let Err(e) = copy_back(conn) {
            // The writer copies back itself when the WAL grows past its own threshold.
            tracing::debug!(error = %e, "WAL checkpoint");
        }
        shared.lock().passes += 1;
        shared.passed.notify_all();
    }
}

/// After each commit: whether the writer should copy back itself now, given the WAL holds
/// `frames` frames of which `copied` are copied back.
pub(super) fn writer_should_copy(frames: i64, copied: i64) -> bool {
    let left = frames - copied;
    left > 0 && (frames >= WRITER_CHECKPOINT_AT || (copied > 0 && left < WRITER_FINISHES_BELOW))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_writer_finishes_a_nearly_done_copy_and_copies_a_full_wal() {
        assert!(!writer_should_copy(100, 0), "small WAL: nothing to do");
        assert!(
            !writer_should_copy(CHECKPOINT_AT, 0),
            "the checkpointer's job"
        );
        assert!(
            writer_should_copy(CHECKPOINT_AT + 10, CHECKPOINT_AT),
            "a little left: finish it so the WAL starts over"
        );
        assert!(
            !writer_should_copy(CHECKPOINT_AT + 10, CHECKPOINT_AT + 10),
            "all copied"
        );
        assert!(
            writer_should_copy(WRITER_CHECKPOINT_AT, 0),
            "too big: copy back"
        );
    }

    #[test]
    fn frames_are_copied_back_off_the_writers_connection() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.db");
        let writer = Connection::open(&path).expect("opens");
        writer
            .execute_batch(
                "PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0;
                 CREATE TABLE t (x BLOB);",
            )
            .expect("schema");
        let checkpointer = Checkpointer::start(&path, true).expect("starts");
        for _ in 0..(CHECKPOINT_AT + 50) {
            writer
                .execute("INSERT INTO t VALUES (zeroblob(3000))", [])
                .expect("inserts");
        }
        let (frames, _) = wal_frames(&writer).expect("reads");
        assert!(frames >= CHECKPOINT_AT, "{frames}");
        checkpointer.saw(frames);
        checkpointer.wait_for_passes(1);
        let (frames_after, copied) = wal_frames(&writer).expect("reads");
        assert_eq!(
            (frames_after, copied),
            (frames, frames),
            "the checkpointer copied every frame back"
        );
        drop(checkpointer);
    }
}

//! WAL checkpoints off the writer's thread. SQLite copies committed pages from the WAL back
//! into the database file in a checkpoint; left to the writer connection (`wal_autocheckpoint`)
//! that copy, and its fsync of the database file, run inside the commit that crossed the
//! threshold — about a quarter of the writer's time at 10,000 runs in flight, on the one thread
//! every commit waits for.
//!
//! Here a thread of its own, on its own connection, copies frames back (`PASSIVE`: it never
//! blocks the writer, which keeps appending) whenever the WAL holds [`Thresholds::at`] frames.
//! SQLite starts the WAL over from its beginning only when every frame in it has been copied
//! back when a transaction begins, and the writer appends while the copy runs; so the writer
//! finishes the job itself between transactions once only a little is left, and copies back
//! whatever is there if the WAL grows far past the threshold
//! ([`Thresholds::writer_should_copy`]). Durability is the commit's business and does not
//! change: at `FULL` every commit fsyncs the WAL before it is acknowledged, whoever copies it
//! back later.
//!
//! The checkpointer gives way ([`Yielding`]): where the OS lets a thread take back priority it
//! gave up, it runs at nice [`CHECKPOINTER_NICE`] (the lowest) while the WAL holds less than
//! [`BEHIND`] times its threshold, and at the process's priority beyond — set by itself before
//! a pass, and by the writer as soon as it sees the WAL that long, so a copy that started at
//! the lowest priority is not left starved while the writer waits for it. At 10,000 runs in
//! flight its passes ran while replies arrived fastest, and commits made then waited behind
//! them: reply → durable p99 fell from a median of 46.8 ms to 33.0 ms with it giving way
//! (fifteen interleaved pairs of `runtape bench --only w5 --runs 10000 --reps 1`, 2 cores;
//! the README's performance notes, now in git history).
//! Elsewhere it keeps the process's priority, as before: lowered for good, it let the WAL grow
//! to a gigabyte at 100,000 runs.

use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use rusqlite::{Connection, OpenFlags};

use super::priority::{self, CHECKPOINTER_NICE, Thread};

/// WAL frames (pages) at which the checkpointer starts copying back at `synchronous=FULL`:
/// 125 MiB of 4 KiB pages. A page written by many commits between two checkpoints is copied
/// back once, so the less often they run the less they copy: with 10,000 runs in flight
/// (`runtape bench --only w5 --runs 10000`, medians of 3) 4,000 frames gave 1.31x the ideal
/// wall and p99 232 ms from reply to durable, 32,000 frames 1.20x and 161 ms, 64,000 1.20x
/// and 178 ms. The price is a WAL file that grows to this size while the database is busy
/// (SQLite removes it when the last connection closes) and, after a crash, up to this much WAL
/// read at the next open.
pub(super) const CHECKPOINT_AT_FULL: i64 = 32_000;

/// The same at `synchronous=NORMAL`: 16 MiB. There the WAL is made durable only by a
/// checkpoint, so this bounds what an OS crash or power loss can take (the guide's
/// guarantees chapter has it in its durability table).
pub(super) const CHECKPOINT_AT_NORMAL: i64 = 4_000;

/// How many times its threshold the WAL may hold before the checkpointer runs at the
/// process's priority again instead of giving way.
pub(super) const BEHIND: i64 = 2;

/// The nice value the checkpointer wants with `frames` frames in the WAL, `at` its threshold
/// and `base` the process's priority: [`CHECKPOINTER_NICE`] while it keeps up, `base` once
/// it is [`BEHIND`].
pub(super) fn checkpointer_nice(frames: i64, at: i64, base: i32) -> i32 {
    if frames >= BEHIND * at {
        base
    } else {
        CHECKPOINTER_NICE.max(base)
    }
}

/// The checkpointer thread's priority, where it can be moved both ways (see the module docs).
pub(super) struct Yielding {
    thread: Thread,
    /// The process's priority, which the thread started at.
    base: i32,
    /// The nice value last set.
    nice: std::sync::atomic::AtomicI32,
}

impl Yielding {
    /// For the calling thread, at its current priority: `None` where a priority given up
    /// could not be taken back (then the thread is left as it is).
    fn start() -> Option<Yielding> {
        let thread = priority::this_thread()?;
        let base = priority::nice_of(thread).ok()?;
        priority::may_take_back(thread, base).then(|| Yielding {
            thread,
            base,
            nice: std::sync::atomic::AtomicI32::new(base),
        })
    }

    /// Moves the thread to [`checkpointer_nice`] for `frames` frames in the WAL. Call it from
    /// any thread; a change the OS refuses leaves the last value recorded, to be tried again.
    fn adjust(&self, frames: i64, at: i64) {
        use std::sync::atomic::Ordering;
        let want = checkpointer_nice(frames, at, self.base);
        let was = self.nice.swap(want, Ordering::AcqRel);
        if was != want && priority::set_nice(self.thread, want).is_err() {
            self.nice.store(was, Ordering::Release);
        }
    }

    /// The nice value last set.
    #[cfg(test)]
    fn nice(&self) -> i32 {
        self.nice.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// When WAL checkpoints are made, for one durability level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Thresholds {
    /// Frames at which the checkpointer copies back.
    pub(super) at: i64,
}

impl Thresholds {
    /// The thresholds for `synchronous=FULL` or `NORMAL`.
    pub(super) fn new(synchronous_full: bool) -> Thresholds {
        Thresholds {
            at: if synchronous_full {
                CHECKPOINT_AT_FULL
            } else {
                CHECKPOINT_AT_NORMAL
            },
        }
    }

    /// After each commit: whether the writer should copy back itself now, given the WAL
    /// holds `frames` frames of which `copied` are copied back. It finishes a copy with less
    /// than a quarter of the threshold left, so the next transaction can start the WAL over,
    /// and copies back itself once the WAL reaches four times the threshold (the checkpointer
    /// fell behind, or a long read holds old pages).
    pub(super) fn writer_should_copy(self, frames: i64, copied: i64) -> bool {
        let left = frames - copied;
        left > 0 && (frames >= 4 * self.at || (copied > 0 && left < self.at / 4))
    }
}

/// What a store may ask of its checkpointer from another thread.
#[derive(Clone)]
pub(super) struct Watch(Arc<Shared>);

impl Watch {
    /// Whether the checkpointer gives way ([`Yielding`]): false where the OS would not let it
    /// take back priority it gave up, and until its thread has started.
    pub(super) fn gives_way(&self) -> bool {
        self.0.yielding.get().is_some()
    }
}

/// The checkpointer thread and how to wake it.
pub(super) struct Checkpointer {
    thresholds: Thresholds,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    state: Mutex<State>,
    /// The checkpointer thread's priority, once it has started where it can give way.
    yielding: std::sync::OnceLock<Yielding>,
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
            yielding: std::sync::OnceLock::new(),
            wake: Condvar::new(),
            passed: Condvar::new(),
        });
        let theirs = shared.clone();
        let thresholds = Thresholds::new(synchronous_full);
        let thread = std::thread::Builder::new()
            .name("runtape-checkpoint".into())
            .spawn(move || run(&conn, &theirs, thresholds.at))
            .ok()?;
        Some(Checkpointer {
            thresholds,
            shared,
            thread: Some(thread),
        })
    }

    /// A handle that answers [`Watch::gives_way`] while this checkpointer runs.
    pub(super) fn watch(&self) -> Watch {
        Watch(self.shared.clone())
    }

    /// When it copies back, and when the writer should.
    pub(super) fn thresholds(&self) -> Thresholds {
        self.thresholds
    }

    /// Tells the checkpointer the WAL now holds `frames` frames. Called by the writer after
    /// each commit: a checkpointer giving way gets the process's priority back here as soon as
    /// the WAL is [`BEHIND`], even in the middle of a pass.
    pub(super) fn saw(&self, frames: i64) {
        if frames >= BEHIND * self.thresholds.at
            && let Some(y) = self.shared.yielding.get()
        {
            y.adjust(frames, self.thresholds.at);
        }
        if frames >= self.thresholds.at {
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

/// The checkpointer's loop: waits for a full enough WAL, copies back, until stopped. It gives
/// way (its priority set for the WAL it was told of) where it can.
fn run(conn: &Connection, shared: &Shared, at: i64) {
    if let Some(y) = Yielding::start() {
        y.adjust(0, at);
        let _ = shared.yielding.set(y);
    }
    loop {
        let frames = {
            let mut state = shared.lock();
            while !state.stop && state.frames < at {
                state = shared.wake.wait(state).unwrap_or_else(|p| p.into_inner());
            }
            if state.stop {
                return;
            }
            std::mem::take(&mut state.frames)
        };
        if let Some(y) = shared.yielding.get() {
            y.adjust(frames, at);
        }
        if let Err(e) = copy_back(conn) {
            // The writer copies back itself when the WAL grows past its own threshold.
            tracing::debug!(error = %e, "WAL checkpoint");
        }
        shared.lock().passes += 1;
        shared.passed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_writer_finishes_a_nearly_done_copy_and_copies_a_full_wal() {
        for full in [true, false] {
            let t = Thresholds::new(full);
            assert!(!t.writer_should_copy(100, 0), "small WAL: nothing to do");
            assert!(!t.writer_should_copy(t.at, 0), "the checkpointer's job");
            assert!(
                t.writer_should_copy(t.at + 10, t.at),
                "a little left: finish it so the WAL starts over"
            );
            assert!(!t.writer_should_copy(t.at + 10, t.at + 10), "all copied");
            assert!(
                !t.writer_should_copy(4 * t.at - 1, 0),
                "the checkpointer's job"
            );
            assert!(t.writer_should_copy(4 * t.at, 0), "too big: copy back");
        }
    }

    #[test]
    fn the_checkpointer_gives_way_until_the_wal_is_twice_its_threshold() {
        let at = Thresholds::new(true).at;
        for base in [-5, 0, 5] {
            assert_eq!(checkpointer_nice(0, at, base), CHECKPOINTER_NICE);
            assert_eq!(
                checkpointer_nice(BEHIND * at - 1, at, base),
                CHECKPOINTER_NICE
            );
            assert_eq!(checkpointer_nice(BEHIND * at, at, base), base, "behind");
            assert_eq!(checkpointer_nice(10 * at, at, base), base);
        }
        // Never ahead of the process: one already at the lowest priority stays there.
        assert_eq!(checkpointer_nice(0, at, 19), 19);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_checkpointer_giving_way_is_given_the_process_priority_back_when_behind() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("y.db");
        Connection::open(&path)
            .and_then(|c| c.execute_batch("PRAGMA journal_mode = WAL;"))
            .expect("a WAL database");
        let base = priority::own_nice().expect("linux");
        let permitted = priority::this_thread().is_some_and(|t| priority::may_take_back(t, base));
        let checkpointer = Checkpointer::start(&path, true).expect("starts");
        let at = checkpointer.thresholds().at;
        if !permitted {
            // Where a priority given up could not be taken back, nothing is given up.
            std::thread::sleep(std::time::Duration::from_millis(100));
            assert!(checkpointer.shared.yielding.get().is_none());
            return;
        }
        let started = std::time::Instant::now();
        let y = loop {
            if let Some(y) = checkpointer.shared.yielding.get() {
                break y;
            }
            assert!(started.elapsed().as_secs() < 10, "the checkpointer started");
            std::thread::yield_now();
        };
        assert_eq!(
            priority::nice_of(y.thread).expect("linux"),
            CHECKPOINTER_NICE.max(base),
            "giving way"
        );
        // The writer sees a long WAL: the checkpointer is given the process's priority by the
        // writer itself, before the checkpointer could wake (its state is held here, as a pass
        // in progress would keep it from looking).
        let held = checkpointer.shared.lock();
        std::thread::scope(|s| {
            let writer = s.spawn(|| checkpointer.saw(BEHIND * at));
            let asked = std::time::Instant::now();
            while priority::nice_of(y.thread).expect("linux") != base {
                assert!(asked.elapsed().as_secs() < 10, "the writer raised it");
                std::thread::yield_now();
            }
            assert_eq!(y.nice(), base, "behind");
            drop(held);
            writer.join().expect("saw");
        });
        checkpointer.wait_for_passes(1);
        // Its next pass, told of a WAL at the threshold again, gives way again.
        checkpointer.saw(at);
        checkpointer.wait_for_passes(2);
        assert_eq!(
            priority::nice_of(y.thread).expect("linux"),
            CHECKPOINTER_NICE.max(base)
        );
        drop(checkpointer);
    }

    #[test]
    fn normal_durability_checkpoints_as_often_as_the_readme_says() {
        // The guide's "Guarantees and their limits": at NORMAL an OS crash loses at most about the last 16 MiB of
        // WAL, the WAL being made durable only by a checkpoint.
        assert_eq!(Thresholds::new(false).at * 4096, 16_384_000);
        assert!(Thresholds::new(true).at > Thresholds::new(false).at);
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
        let at = checkpointer.thresholds().at;
        // One 3,000-byte row per page, a thousand rows per transaction.
        let rows = at + 50;
        for start in (0..rows).step_by(1000) {
            writer
                .execute(
                    "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < ?1)
                     INSERT INTO t SELECT zeroblob(3000) FROM c",
                    [(rows - start).min(1000)],
                )
                .expect("inserts");
        }
        let (frames, _) = wal_frames(&writer).expect("reads");
        assert!(frames >= at, "{frames}");
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

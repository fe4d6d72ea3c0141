//! One watcher per run somebody streams: it follows the run whoever drives it and keeps the
//! recent events every subscriber of that run reads from.
//!
//! # What it follows
//!
//! - The database, every [`poll`](super::state::Inner::poll) (250 ms): a new committed step
//!   (whichever process committed it) becomes a `step` event; a change of the run's row —
//!   status, cost, or whether a live process still holds its lease — a `run` event. A run
//!   whose process was killed shows `"interrupted": true` once its lease lapses (at once when
//!   its process is known dead on this machine).
//! - The trace events of a run this server drives (tokens, calls, replies…), as `trace` events.
//!
//! # Event ids
//!
//! Every event has an id `SEQ` or `SEQ.N`: the step event of seq `SEQ` is `SEQ`; the `N`th
//! other event after it is `SEQ.N`. Ids only grow. A client that reconnects with
//! `Last-Event-ID` gets every step after `SEQ` again (steps are read back from the database,
//! so none is ever lost), then the other events after `SEQ.N` that the watcher still holds
//! (the last [`KEPT_FRAMES`]); older trace events — tokens, progress — are not replayed.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{broadcast, watch};

use serde::Serialize;

use super::state::{App, lock};
use crate::exec::TraceEvent;
use crate::history::{self, TimelineEntry as Entry};
use crate::machine::RunId;
use crate::ops::{EntryView, RunView, is_driven};
use crate::store::{RunRecord, RunStatus};

/// Events other than steps a watcher keeps for reconnecting clients.
pub(crate) const KEPT_FRAMES: usize = 4096;

/// How long a watcher without subscribers lives on (a page reloading reconnects within it).
const LINGER: Duration = Duration::from_secs(5);

/// An event's place in its run's stream; see the module doc.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct EventId {
    /// The latest step at or before the event.
    pub(crate) seq: u64,
    /// 0 for the step itself, then 1, 2, … for the events after it.
    pub(crate) n: u32,
}

impl EventId {
    /// Parses `SEQ` or `SEQ.N`; `None` for anything else.
    pub(crate) fn parse(s: &str) -> Option<EventId> {
        let (seq, n) = match s.trim().split_once('.') {
            Some((seq, n)) => (seq, n.parse().ok()?),
            None => (s.trim(), 0),
        };
        Some(EventId {
            seq: seq.parse().ok()?,
            n,
        })
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.n {
            0 => write!(f, "{}", self.seq),
            n => write!(f, "{}.{n}", self.seq),
        }
    }
}

/// One event ready to send: its id (none for the snapshot a stream opens with), its name
/// (`step`, `trace` or `run`) and its data, safe JSON on one line.
#[derive(Debug)]
pub(crate) struct Frame {
    pub(crate) id: Option<EventId>,
    pub(crate) event: &'static str,
    pub(crate) data: String,
}

/// A step event for a timeline entry, as `log --json` prints it.
pub(crate) fn step_frame(e: &Entry) -> Frame {
    let data =
        crate::ops::json::encode(&EntryView::from(e.clone())).unwrap_or_else(|_| "{}".into());
    Frame {
        id: Some(EventId { seq: e.seq, n: 0 }),
        event: "step",
        data,
    }
}

/// A run as the API shows it: `ls --json`'s object (its `status` is `queued` for a run no
/// process has taken up yet), plus whether a live process drives it (`driven`), whether it was
/// left running by a process that is gone and not asleep (`interrupted`: resume it), whether this server
/// drives it (`here`), and the agent it starts with.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct ServedRun {
    /// The run as `ls --json` shows it.
    #[serde(flatten)]
    pub(crate) run: RunView,
    /// A live process holds its lease.
    pub(crate) driven: bool,
    /// It is `running`, but no live process drives it.
    pub(crate) interrupted: bool,
    /// This server drives it.
    pub(crate) here: bool,
    /// The agent it starts with.
    pub(crate) agent: String,
    /// Which spec it runs: the first 12 hex digits of its spec digest
    /// ([`RunRecord::spec_digest`]; the list's `spec=` filter takes them).
    pub(crate) spec: String,
}

/// The run `rec` is the row of, as the API shows it.
pub(crate) fn run_view(app: &App, rec: &RunRecord) -> ServedRun {
    let driven = is_driven(rec);
    // A fork's own goal is one row away; a row that cannot be read leaves the goal the run
    // began with (the run's own pages and verify report the damage).
    let run = RunView::listed(app.store.as_ref(), rec).unwrap_or_else(|_| RunView::of(rec));
    // A run that only sleeps is left by the process that ran it on purpose: whoever wakes runs
    // takes it up at its instant, so it is not one to resume.
    let interrupted =
        rec.status == RunStatus::Running && !driven && !rec.is_queued() && !run.sleeping;
    ServedRun {
        run,
        driven,
        interrupted,
        here: app.drives(&rec.id),
        agent: app.entry_agent(rec),
        spec: rec.spec_digest().chars().take(12).collect(),
    }
}

/// The events of one run, shared by its subscribers.
pub(crate) struct Watch {
    run: RunId,
    log: Mutex<Log>,
    changed: watch::Sender<u64>,
}

struct Log {
    frames: VecDeque<Arc<Frame>>,
    /// Every frame after this id is in `frames`; steps up to `floor.seq` are read back from
    /// the database.
    floor: EventId,
    /// The newest id given.
    last: EventId,
    /// The latest step sent.
    steps_to: u64,
    /// The last `run` event's data, to send only changes.
    run_data: String,
    version: u64,
}

/// What a subscriber at `after` has not seen: steps to read back from the database (seqs
/// `from+1..=to`), then kept frames.
pub(crate) struct Missed {
    pub(crate) steps: Option<(u64, u64)>,
    pub(crate) frames: Vec<Arc<Frame>>,
}

impl Watch {
    fn new(run: RunId, seq: u64) -> Watch {
        let start = EventId { seq, n: 0 };
        Watch {
            run,
            log: Mutex::new(Log {
                frames: VecDeque::new(),
                floor: start,
                last: start,
                steps_to: seq,
                run_data: String::new(),
                version: 0,
            }),
            changed: watch::channel(0).0,
        }
    }

    /// Wakes when the watcher adds events.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// What a subscriber that has seen everything up to `after` is missing.
    pub(crate) fn since(&self, after: EventId) -> Missed {
        let log = lock(&self.log);
        let steps = (after.seq < log.floor.seq).then_some((after.seq, log.floor.seq));
        let from = after.max(log.floor);
        Missed {
            steps,
            frames: log
                .frames
                .iter()
                .filter(|f| f.id.is_some_and(|id| id > from))
                .cloned()
                .collect(),
        }
    }

    /// The latest `run` event's data (the snapshot a new stream opens with).
    pub(crate) fn run_data(&self) -> String {
        lock(&self.log).run_data.clone()
    }

    fn push(&self, log: &mut Log, id: EventId, event: &'static str, data: String) {
        log.last = id;
        log.frames.push_back(Arc::new(Frame {
            id: Some(id),
            event,
            data,
        }));
        while log.frames.len() > KEPT_FRAMES {
            if let Some(old) = log.frames.pop_front() {
                log.floor = old.id.unwrap_or(log.floor);
            }
        }
        log.version += 1;
    }

    fn push_step(&self, e: &Entry) {
        let mut log = lock(&self.log);
        if e.seq <= log.steps_to {
            return;
        }
        let frame = step_frame(e);
        log.steps_to = e.seq;
        self.push(&mut log, EventId { seq: e.seq, n: 0 }, "step", frame.data);
    }

    fn push_other(&self, event: &'static str, data: String) {
        let mut log = lock(&self.log);
        let id = EventId {
            seq: log.last.seq,
            n: log.last.n.saturating_add(1),
        };
        if event == "run" {
            if log.run_data == data {
                return;
            }
            log.run_data = data.clone();
        }
        self.push(&mut log, id, event, data);
    }

    fn notify(&self) {
        let version = lock(&self.log).version;
        self.changed.send_replace(version);
    }
}

/// The watcher of the run `rec` is the row of, started if none runs.
pub(crate) fn watch(app: &App, rec: &RunRecord) -> Arc<Watch> {
    let mut watches = lock(&app.watches);
    if let Some(w) = watches.get(&rec.id) {
        return w.clone();
    }
    let w = Arc::new(Watch::new(rec.id.clone(), rec.seq));
    {
        let mut log = lock(&w.log);
        log.run_data = crate::ops::json::encode(&run_view(app, rec)).unwrap_or_default();
    }
    watches.insert(rec.id.clone(), w.clone());
    let hub = app.hub.subscribe();
    tokio::spawn(follow(app.clone(), w.clone(), hub));
    w
}

/// The watcher's task: see the module doc. Ends when the server stops, or when nobody has
/// subscribed for [`LINGER`].
async fn follow(app: App, w: Arc<Watch>, mut hub: broadcast::Receiver<Arc<TraceEvent>>) {
    let mut lonely_since: Option<Instant> = None;
    let mut tick = crate::clock::interval(app.poll);
    loop {
        tokio::select! {
            () = app.shutdown.cancelled() => break,
            _ = tick.tick() => sync(&app, &w).await,
            e = hub.recv() => match e {
                Ok(e) if e.run == w.run => {
                    let steps_to = lock(&w.log).steps_to;
                    if e.seq.is_some_and(|s| s > steps_to) {
                        // The step it belongs to is committed: send it first.
                        sync(&app, &w).await;
                    }
                    if let Ok(data) = crate::ops::json::encode(&*e) {
                        w.push_other("trace", data);
                        w.notify();
                    }
                }
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => sync(&app, &w).await,
                Err(broadcast::error::RecvError::Closed) => break,
            },
        }
        if w.changed.receiver_count() == 0 {
            let since = *lonely_since.get_or_insert_with(crate::clock::stopwatch);
            if since.elapsed() >= LINGER {
                let mut watches = lock(&app.watches);
                // Subscribers subscribe under this lock: none can arrive while it is held.
                if w.changed.receiver_count() == 0 {
                    watches.remove(&w.run);
                    return;
                }
            }
        } else {
            lonely_since = None;
        }
    }
    lock(&app.watches).remove(&w.run);
}

/// Reads the run's row and any new steps from the database; a read that fails is retried at
/// the next tick.
async fn sync(app: &App, w: &Arc<Watch>) {
    let w2 = w.clone();
    let _ = app
        .blocking(move |app| {
            let rec = history::record(app.store.as_ref(), &w2.run)?;
            let steps_to = lock(&w2.log).steps_to;
            if rec.seq > steps_to {
                let timeline = app.timeline(&w2.run)?;
                for e in timeline.iter().filter(|e| e.seq > steps_to) {
                    w2.push_step(e);
                }
            }
            if let Ok(data) = crate::ops::json::encode(&run_view(&app, &rec)) {
                w2.push_other("run", data);
            }
            w2.notify();
            Ok(())
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_and_print_and_order() {
        for (s, seq, n) in [("12", 12, 0), ("12.3", 12, 3), (" 7 ", 7, 0), ("0", 0, 0)] {
            let id = EventId::parse(s).expect(s);
            assert_eq!((id.seq, id.n), (seq, n));
        }
        for bad in ["", "x", "1.", "1.x", "-1", "1.2.3", "18446744073709551616"] {
            assert!(EventId::parse(bad).is_none(), "{bad}");
        }
        assert_eq!(EventId { seq: 12, n: 0 }.to_string(), "12");
        assert_eq!(EventId { seq: 12, n: 3 }.to_string(), "12.3");
        assert!(EventId { seq: 12, n: 3 } < EventId { seq: 13, n: 0 });
    }

    #[test]
    fn a_subscriber_behind_the_kept_frames_reads_steps_back_and_misses_only_traces() {
        let w = Watch::new(RunId::new("r"), 2);
        w.push_other("trace", "a".into());
        for _ in 0..KEPT_FRAMES {
            w.push_other("trace", "b".into());
        }
        // The first trace frame (2.1) fell out; 2.2 onwards are kept.
        let missed = w.since(EventId { seq: 0, n: 0 });
        assert_eq!(missed.steps, Some((0, 2)));
        assert_eq!(missed.frames.len(), KEPT_FRAMES);
        assert_eq!(missed.frames[0].id, Some(EventId { seq: 2, n: 2 }));
        let missed = w.since(EventId { seq: 2, n: 4000 });
        assert_eq!(missed.steps, None);
        assert_eq!(missed.frames.len(), KEPT_FRAMES + 1 - 4000);
    }
}

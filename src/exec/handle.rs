//! A run being driven, as its caller holds it: its trace events and its end.

use tokio::sync::{broadcast, oneshot};

use super::EngineError;
use super::trace::{Trace, TraceEvent};
use crate::machine::{RunId, RunState};
use crate::store::RunStatus;

/// How a run's driver stopped.
#[derive(Clone, Debug, PartialEq)]
pub struct RunEnd {
    /// The run.
    pub run_id: RunId,
    /// Where it stands.
    pub status: RunStatus,
    /// Its latest state.
    pub state: RunState,
}

/// A run being driven: its id, its trace events, and its end.
#[derive(Debug)]
pub struct RunHandle {
    pub(crate) run_id: RunId,
    pub(crate) events: broadcast::Receiver<TraceEvent>,
    pub(crate) done: oneshot::Receiver<Result<RunEnd, EngineError>>,
    /// How the driver stopped, once [`next_event`](Self::next_event) has seen it.
    pub(crate) ended: Option<Result<RunEnd, EngineError>>,
}

/// What reading the trace channel gave: an event of this run, nothing for this reader, a gap,
/// or the end.
// Made and matched at once, once per event; boxing the event would cost an allocation each.
#[allow(clippy::large_enum_variant)]
enum Read {
    Mine(TraceEvent),
    Other,
    Closed,
}

impl RunHandle {
    /// The run's id.
    pub fn run_id(&self) -> &RunId {
        &self.run_id
    }

    /// A trace event as this handle reads it: the run's own, or — when this reader fell behind
    /// and the channel dropped events it had not read — a [`Trace::Lagged`] counting them.
    fn read(&self, got: Result<TraceEvent, broadcast::error::RecvError>) -> Read {
        match got {
            Ok(e) if e.run == self.run_id => Read::Mine(e),
            Ok(_) => Read::Other,
            Err(broadcast::error::RecvError::Lagged(missed)) => Read::Mine(TraceEvent {
                run: self.run_id.clone(),
                at: Default::default(),
                seq: None,
                kind: Trace::Lagged { missed },
            }),
            Err(broadcast::error::RecvError::Closed) => Read::Closed,
        }
    }

    /// The next trace event of this run; `None` once the run's driver has stopped and every
    /// event it published has been read. The channel holds a bounded number of events: a
    /// reader that falls that far behind gets a [`Trace::Lagged`] saying how many it missed
    /// (counting other runs' events too), never a silent gap, and the driver never waits for
    /// it.
    pub async fn next_event(&mut self) -> Option<TraceEvent> {
        loop {
            if self.ended.is_some() {
                // The driver published everything before it stopped: what is left is buffered.
                let got = match self.events.try_recv() {
                    Ok(e) => Ok(e),
                    Err(broadcast::error::TryRecvError::Lagged(n)) => {
                        Err(broadcast::error::RecvError::Lagged(n))
                    }
                    Err(_) => return None,
                };
                match self.read(got) {
                    Read::Mine(e) => return Some(e),
                    Read::Other => continue,
                    Read::Closed => return None,
                }
            }
            tokio::select! {
                biased;
                got = self.events.recv() => match self.read(got) {
                    Read::Mine(e) => return Some(e),
                    Read::Other => {}
                    Read::Closed => return None,
                },
                end = &mut self.done => {
                    self.ended = Some(end.unwrap_or(Err(EngineError::TaskDropped)));
                }
            }
        }
    }

    /// Waits until the driver stops: the run ended, paused, or rests waiting for a person or a
    /// budget raise.
    pub async fn wait(self) -> Result<RunEnd, EngineError> {
        // Nobody will read the events: unsubscribe, so the driver stops building them.
        drop(self.events);
        match self.ended {
            Some(end) => end,
            None => self.done.await.unwrap_or(Err(EngineError::TaskDropped)),
        }
    }

    /// Waits like [`wait`](Self::wait) while passing every trace event of the run to `f`
    /// (a gap, if `f` is too slow, as [`Trace::Lagged`]).
    pub async fn wait_with(
        mut self,
        mut f: impl FnMut(&TraceEvent),
    ) -> Result<RunEnd, EngineError> {
        if self.ended.is_some() {
            while let Some(e) = self.next_event().await {
                f(&e);
            }
            return self.wait().await;
        }
        loop {
            tokio::select! {
                biased;
                got = self.events.recv() => match self.read(got) {
                    Read::Mine(e) => f(&e),
                    Read::Other => {}
                    Read::Closed => return self.wait().await,
                },
                end = &mut self.done => {
                    loop {
                        let got = self.events.try_recv();
                        let got = match got {
                            Ok(e) => Ok(e),
                            Err(broadcast::error::TryRecvError::Lagged(n)) => {
                                Err(broadcast::error::RecvError::Lagged(n))
                            }
                            Err(_) => break,
                        };
                        if let Read::Mine(e) = self.read(got) {
                            f(&e);
                        }
                    }
                    return end.unwrap_or(Err(EngineError::TaskDropped));
                }
            }
        }
    }
}

//! `GET /api/runs/{id}/events`: a run's events as Server-Sent Events, live, whoever drives it.
//!
//! The stream opens with a `run` event (the run as it stands, no id), then sends every step
//! after the client's position — `Last-Event-ID`, else `?after=SEQ`, else the beginning — as
//! `step` events read back from the database, then follows the run: new `step`s, `trace`
//! events while this server drives it, and a `run` event whenever its row changes. Ids are
//! explained in [`super::watch`]. A comment line every 15 s keeps idle connections open. The
//! stream ends when the server stops; a client that goes away costs nothing further.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use serde::Deserialize;
use tokio::sync::watch;

use super::error::ApiError;
use super::routes::run_ref;
use super::state::App;
use super::watch::{EventId, Frame, Watch, step_frame};
use crate::history;

/// Steps read back from the database per batch, so a client far behind a long run does not
/// make the server hold its whole history at once.
const STEPS_PER_BATCH: u64 = 256;

/// `?after=SEQ`: where to start when there is no `Last-Event-ID`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct After {
    after: Option<String>,
}

/// The handler.
pub(crate) async fn events(
    State(app): State<App>,
    Path(id): Path<String>,
    Query(q): Query<After>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let run = run_ref(&id)?;
    let position = match headers.get("last-event-id") {
        Some(v) => Some(("Last-Event-ID", v.to_str().unwrap_or("\u{fffd}").to_owned())),
        None => q.after.map(|a| ("after", a)),
    };
    let after = match position {
        None => EventId::default(),
        Some((name, v)) => EventId::parse(&v).ok_or_else(|| {
            ApiError::bad(format!(
                "{name} `{}` is not an event id; write SEQ or SEQ.N (e.g. 12 or 12.3)",
                crate::ops::quoted(&v)
            ))
        })?,
    };
    let rec = {
        let run = run.clone();
        app.blocking(move |app| Ok(history::record(app.store.as_ref(), &run)?))
            .await?
    };
    let w = super::watch::watch(&app, &rec);
    let changed = w.subscribe();
    let opening = Frame {
        id: None,
        event: "run",
        data: w.run_data(),
    };
    let sub = Subscriber {
        app,
        run,
        watch: w,
        changed,
        after,
        pending: VecDeque::from([Arc::new(opening)]),
    };
    let stream = futures_util::stream::unfold(sub, |mut sub| async move {
        let frame = sub.next().await?;
        let mut event = Event::default().event(frame.event).data(&frame.data);
        if let Some(id) = frame.id {
            event = event.id(id.to_string());
        }
        Some((Ok(event), sub))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

struct Subscriber {
    app: App,
    run: crate::machine::RunId,
    watch: Arc<Watch>,
    changed: watch::Receiver<u64>,
    /// The last event this client was sent.
    after: EventId,
    pending: VecDeque<Arc<Frame>>,
}

impl Subscriber {
    /// The next frame to send; `None` ends the stream (the server stops).
    async fn next(&mut self) -> Option<Arc<Frame>> {
        loop {
            if let Some(f) = self.pending.pop_front() {
                if let Some(id) = f.id {
                    self.after = id;
                }
                return Some(f);
            }
            let missed = self.watch.since(self.after);
            if let Some((from, to)) = missed.steps {
                let to = to.min(from + STEPS_PER_BATCH);
                let run = self.run.clone();
                let steps = self
                    .app
                    .blocking(move |app| Ok(app.timeline(&run)?))
                    .await
                    .ok()?;
                self.pending.extend(
                    steps
                        .iter()
                        .filter(|e| e.seq > from && e.seq <= to)
                        .map(|e| Arc::new(step_frame(e))),
                );
                if self.pending.is_empty() {
                    // Those steps are not in the history (it is shorter than the watcher
                    // thought): skip to where the watcher is.
                    self.after = EventId { seq: to, n: 0 };
                }
                continue;
            }
            if !missed.frames.is_empty() {
                self.pending.extend(missed.frames);
                continue;
            }
            tokio::select! {
                () = self.app.shutdown.cancelled() => return None,
                changed = self.changed.changed() => changed.ok()?,
            }
        }
    }
}

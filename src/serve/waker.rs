//! `runtape serve` wakes the database's due runs while it is up, as `runtape worker` does on a
//! SQLite file ([`runtape::ops::due_runs`](crate::ops::due_runs)): it scans for runs whose
//! earliest timer is due ([`DueScan`]), takes each up as `runtape resume` does (under its
//! lease, so a worker or a person racing for it takes it once), and drives it here — the
//! server's stop pauses it like every run it drives. It waits between scans until the
//! earliest timer not yet due, at most [`MAX_WAKE_POLL`]. It fires the database's schedules
//! too, as the worker does ([`ops::schedule_fire`]), and waits no longer than the next
//! instant one fires at.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::exec::Clock;
use crate::machine::RunId;
use crate::machine::wake::MAX_WAKE_POLL;
use crate::ops::due_runs::WOKEN_STATUSES;
use crate::ops::{self, Answer};
use crate::worker::wake::DueScan;

use super::state::App;

/// Wakes due runs until the server stops ([`App::shutdown`]).
pub(crate) async fn run(app: App) {
    let clock: Arc<dyn Clock> = Arc::new(crate::exec::SystemClock::default());
    let mut scan = DueScan::default();
    // Runs it could not take up, left alone until then.
    let mut skip: HashMap<RunId, tokio::time::Instant> = HashMap::new();
    while !app.shutdown.is_cancelled() {
        let now = clock.now();
        skip.retain(|_, until| *until > now);
        let skipping: HashSet<RunId> = skip.keys().cloned().collect();
        let scanned = scan
            .scan_blocking(
                app.store.clone(),
                clock.clone(),
                None,
                &WOKEN_STATUSES,
                skipping,
                MAX_WAKE_POLL,
            )
            .await;
        let Ok((kept, found)) = scanned else {
            return;
        };
        scan = kept;
        let wait = match found {
            Ok(found) => {
                for run in found.plan.due {
                    if app.drives(&run) {
                        continue;
                    }
                    if let Err(e) = take_up(&app, &run).await {
                        crate::term::note(&format!(
                            "run {run}: its timer is due but it was not woken: {}",
                            crate::term::one_line(&e.to_string())
                        ));
                        skip.insert(run, clock.now() + MAX_WAKE_POLL * 12);
                    }
                }
                found.plan.wait
            }
            Err(e) => {
                crate::term::note(&format!(
                    "cannot look for due runs: {}",
                    crate::term::one_line(&e.to_string())
                ));
                MAX_WAKE_POLL
            }
        };
        let wait = fire_schedules(&app, wait).await;
        tokio::select! {
            () = app.shutdown.cancelled() => return,
            () = clock.sleep(wait) => {}
        }
    }
}

/// Takes `run` up as `runtape resume` does and drives it here.
async fn take_up(app: &App, run: &RunId) -> Result<(), ops::OpsError> {
    let engine = app.engine()?;
    let handle = ops::resume(&engine, run, Answer::None, None, &[]).await?;
    app.drive(engine, handle);
    Ok(())
}

/// One turn of the database's schedules, as `runtape worker` takes it: the runs it starts
/// are driven here. Returns `wait` cut to the next instant a schedule fires at.
async fn fire_schedules(app: &App, wait: std::time::Duration) -> std::time::Duration {
    let make = || app.engine();
    let look = ops::schedule_fire::Look::wall(crate::clock::wall_ms());
    match ops::schedule_fire::turn(app.store.clone(), look, &make).await {
        Ok(turn) => {
            for line in turn.lines {
                if line["event"] != "schedule.fired" {
                    crate::term::note(&line.to_string());
                }
            }
            for fired in turn.started {
                app.drive(fired.engine, fired.handle);
            }
            turn.wait.map_or(wait, |next| wait.min(next))
        }
        Err(e) => {
            crate::term::note(&format!(
                "cannot fire schedules: {}",
                crate::term::one_line(&e.to_string())
            ));
            wait
        }
    }
}

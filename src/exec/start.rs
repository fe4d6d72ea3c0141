//! Starting a new run: its row, its first sealed head and its lease are written in one
//! transaction, then a driver steps it from `Start`.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::driver::{Driver, lease_of};
use super::handle::RunHandle;
use super::reads::off_thread;
use super::trace::Trace;
use super::{EngineError, Shared};
use crate::ledger::{HeadKeeper, Rebuilt, first_head};
use crate::machine::{Digest, Hlc, RunId, RunSpec, RunState};
use crate::store::{HeadRecord, NewRun, Write};

/// Creates the run and starts driving it from `Start`.
pub(super) async fn start(
    shared: &Arc<Shared>,
    run: RunId,
    spec: RunSpec,
    goal: &str,
    setup: Option<String>,
    session: Option<super::session::SessionStartKind>,
    files: Vec<Vec<u8>>,
) -> Result<RunHandle, EngineError> {
    // A run of a session: its place, the run it goes on from, and the history it begins with,
    // read before anything is written (the place is taken by the write creating the run).
    let (spec, link, opening) = {
        let (goal, id) = (goal.to_owned(), run.clone());
        off_thread(&shared.store, move |s| {
            use super::session::SessionStartKind;
            let (spec, link, opening) = match session {
                Some(SessionStartKind::Next { name, settings }) => {
                    let (spec, link) = super::session::next_run(s, &spec, &name, &settings)?;
                    let opening = super::session::opening(s, &spec, &goal)?;
                    (spec, Some(link), opening)
                }
                // A replay holds no place in the session and begins with the recorded history.
                Some(SessionStartKind::Replay {
                    name,
                    index,
                    settings,
                    seed,
                }) => {
                    let (spec, opening) =
                        super::session::replayed_run(&spec, &name, index, &settings, seed, &goal)?;
                    (spec, None, opening)
                }
                None => {
                    let opening = super::session::opening(s, &spec, &goal)?;
                    (spec, None, opening)
                }
            };
            // A first event the machine would refuse is refused here, before anything is
            // written (a run left `Created` would never move).
            let probe = crate::machine::Event::new(&id, Hlc::default(), opening.clone());
            crate::machine::step(&RunState::Created, &probe, &spec)?;
            Ok::<_, EngineError>((spec, link, opening))
        })
        .await?
    };
    // A delegated child's first receipt chains under its parent's receipt for the turn that
    // asked for it.
    let anchor = match spec.spec().delegated_by.clone() {
        Some(effect) => {
            off_thread(&shared.store, move |s| {
                crate::ledger::anchor_under(s, &effect)
            })
            .await?
        }
        None => None,
    };
    let spec_json = serde_json::to_string(&spec).map_err(|e| EngineError::Unencodable {
        what: "spec",
        reason: e.to_string(),
    })?;
    let now = shared.config.clock.wall_ms();
    let mut new = NewRun {
        id: run.clone(),
        parent: None,
        spec: spec_json,
        setup,
        goal: goal.to_owned(),
        now_ms: now,
        owner: shared.owner.clone(),
        lease_expires_ms: now + shared.config.lease_ttl.as_millis() as u64,
        head: HeadRecord::default(),
        session: link,
    };
    // Sealed as `verify` reads a run with no transition yet (`Created`'s hash): if the first
    // commit never lands (a full disk), the run still verifies and `resume` starts it.
    let created = RunState::Created.state_hash(spec.history_hash());
    let head = HeadKeeper::new(
        first_head(&new, created, Digest::ZERO, None),
        shared.config.receipts.clone(),
    );
    new.head = head.sealed(&*shared.writes.store);
    let epoch = lease_of(shared.writes.write(Write::CreateRun(new)).await?);
    let rebuilt = Rebuilt {
        state: RunState::Created,
        chain: Digest::ZERO,
    };
    let mut driver = Driver::new(
        shared,
        run,
        spec,
        epoch,
        rebuilt,
        BTreeMap::new(),
        Hlc::default(),
        head,
        anchor,
    );
    // The goal's files are stored with the first transition, whose message names them.
    driver.files = files
        .into_iter()
        .map(|bytes| (Digest::of(&bytes), bytes))
        .collect();
    driver.queue.push_back(opening);
    driver.opening = Some(Box::new(Trace::RunStarted {
        goal: goal.to_owned(),
    }));
    Ok(driver.spawn())
}

//! How a run's history is named depends on its revision, for its whole life: runs started now
//! (revision 6) record SHA-256 state hashes and chain links — recomputed here with the plain
//! `sha2` crate, as any SHA-256 tool would — and runs of revision 5 or earlier keep BLAKE3,
//! through resume and fork, and verify. (Runs written by runtape 0.1.0 are resumed and verified
//! by `db_format_0_1_0`; recorded histories of every revision replay in `canned_histories`.)

use crate::support;

use runtape::exec::{Engine, ForkMode};
use runtape::history;
use runtape::machine::*;
use runtape::store::RunStatus;
use sha2::Digest as _;
use support::durable::*;

/// Which hash function, computed from scratch, names each stored state and link.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Plain {
    Sha256,
    Blake3,
}

impl Plain {
    fn of(self, bytes: &[u8]) -> [u8; 32] {
        match self {
            Plain::Sha256 => sha2::Sha256::digest(bytes).into(),
            Plain::Blake3 => *blake3::hash(bytes).as_bytes(),
        }
    }
}

/// Checks every stored transition of `run` from `from` on: its state hash is `plain` over the
/// state's canonical bytes (the state rebuilt from storage), and its link is `plain` over the
/// previous link, the stored event bytes and that hash.
fn assert_named_by(engine: &Engine, run: &RunId, from: u64, plain: Plain) {
    let store = engine.store().as_ref();
    let rec = history::record(store, run).expect("recorded");
    let spec = history::spec_of(&rec).expect("spec loads");
    let rows = history::transitions(store, run, 1, rec.seq).expect("transitions read");
    assert_eq!(rows.len() as u64, rec.seq);
    let mut prev = [0u8; 32];
    for t in &rows {
        if t.seq >= from {
            let state = history::state_at(store, run, &spec, t.seq).expect("replays");
            let bytes = state.state.canonical_bytes();
            assert_eq!(t.state_hash.0, plain.of(&bytes), "{run} state {}", t.seq);
            let linked = [&prev[..], &t.event, &t.state_hash.0[..]].concat();
            assert_eq!(t.chain.0, plain.of(&linked), "{run} link {}", t.seq);
        }
        prev = t.chain.0;
    }
    let verified = history::verify(store, run, None).expect("reads");
    assert!(verified.is_ok(), "{run}: {:?}", verified.err());
}

fn equipped(dir: &std::path::Path) -> Engine {
    let engine = engine_in(dir);
    lookup_rounds(&engine, 2);
    engine
}

async fn run_of(engine: &Engine, semantics: Option<u32>) -> RunId {
    let spec = spec(vec![lookup_spec()], |s| {
        if let Some(r) = semantics {
            s.semantics = r;
        }
    });
    let end = run_to_rest(engine, spec, "Find it.").await;
    assert_eq!(end.status, RunStatus::Completed);
    end.run_id
}

#[tokio::test]
async fn a_new_run_names_its_states_and_links_by_sha256() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = equipped(dir.path());
    let run = run_of(&engine, None).await;
    let rec = history::record(engine.store().as_ref(), &run).expect("recorded");
    let spec = history::spec_of(&rec).expect("spec loads");
    assert_eq!(spec.spec().semantics, SEMANTICS);
    assert_eq!(spec.history_hash(), HistoryHash::Sha256);
    assert_named_by(&engine, &run, 1, Plain::Sha256);
}

#[tokio::test]
async fn a_revision_5_run_and_its_fork_keep_blake3() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = equipped(dir.path());
    let old = run_of(&engine, Some(5)).await;
    assert_named_by(&engine, &old, 1, Plain::Blake3);

    // The fork shares the parent's history up to seq 3 and records its own under the
    // parent's revision: BLAKE3 again, not the SHA-256 of runs started today.
    let fork = ended(engine.fork(&old, 3, Vec::new(), ForkMode::Live)).await;
    assert_eq!(fork.status, RunStatus::Completed);
    assert!(fork.state.seq() > 3);
    assert_named_by(&engine, &fork.run_id, 4, Plain::Blake3);

    // A revision-6 run in the same database is SHA-256: each run is named by its own revision.
    let new = run_of(&engine, None).await;
    assert_named_by(&engine, &new, 1, Plain::Sha256);
}

//! Retention: `runtape prune` removes whole finished run trees and leaves tombstones that
//! `verify` and `ls --all` read; live runs and the runs a worker drives are never touched.
//! `runtape export` / `import` move a verified run tree between databases.

mod export_import;
mod postgres_round_trip;
mod prune_frees_blobs;
mod prune_leaves_live_runs;
mod prune_while_a_worker_runs;

//! The `runtape` command line on real database files: runs, inspection, costs, ids, output.

mod cancel_reason_across_processes;
mod cassette_integrity;
mod closed_stdout;
mod costs;
mod demo_bench;
mod hostile_ids;
mod inspect;
mod reply_outcomes;
mod resume_fork;
mod run_overrides;
mod runs;
mod show_tool_result;

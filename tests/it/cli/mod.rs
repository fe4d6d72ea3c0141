//! The `runtape` command line on real database files: runs, inspection, costs, ids, output.

mod answer_attachments;
mod bare_invocation;
mod cancel_outlives_hand_back;
mod cancel_reason_across_processes;
mod cassette_integrity;
mod closed_stdout;
mod completions_and_man;
mod costs;
mod demo_bench;
mod env_file;
mod environment_in_guide;
mod fork_edits_in_words;
mod goal_attachments;
pub(crate) mod help_reference;
mod hostile_ids;
mod inspect;
mod json_everywhere;
mod keys_stay_out_of_git;
mod reply_outcomes;
mod resume_fork;
mod run_overrides;
mod runs;
mod show_tool_result;
mod step_durations;

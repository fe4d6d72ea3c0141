//! Driving runs: the engine and the binary under crashes, signals, races, tools and time.

mod cancel_race;
mod clock_seam;
mod command_tool;
mod concurrent_resumers;
mod context_summary;
mod context_window;
mod crash_safety;
mod durable_runs;
mod engine_clock_paces_http_calls;
mod engine_shutdown;
mod graceful_stop;
mod history_hash_revisions;
mod program_environment;
mod reconcile;
mod retriever;
mod retriever_cassette;
mod secrets_never_land;
mod stepped_clock_backoff;
mod time_travel;
mod trace_lag;
mod transition_caps;
mod truncated_and_refused_replies;
mod virtual_time_backoff;

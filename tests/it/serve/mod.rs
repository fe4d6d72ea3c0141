//! `runtape serve`: its API, events, security, OpenTelemetry export, the browser page.

mod accessibility;
mod api;
mod browser;
mod events;
mod json_big_integers;
mod otel;
mod otel_agents;
mod otel_conventions;
mod readme;
mod run_list;
mod run_stats;
mod security;
mod time_in_the_browser;

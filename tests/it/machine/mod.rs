//! The pure state machine: every edge, scenarios, properties, revisions and the statechart.

mod budget_refusal;
mod canned_histories;
mod edges;
mod properties;
mod route_cooldown;
mod scenarios;
mod semantics_revisions;
mod statechart_file;
mod structured_output;

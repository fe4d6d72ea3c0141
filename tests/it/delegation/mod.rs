//! Delegation and handoffs: child runs, trees, their cassettes, receipts, crashes and forks.

mod awaiting_input;
mod cassette;
mod cli;
mod crash;
mod diff;
mod engine;
mod fork;
mod handoff;
mod handoff_crash;
mod machine;
mod receipt_tree;
mod receipts;
mod sigterm;
mod spec_delegate;
mod spec_file;
mod spec_file_mcp;
mod verify_recursive;

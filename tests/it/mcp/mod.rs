//! MCP servers: tool lists, added tools, misbehaving and reference servers, calls in flight.

mod added_tools;
mod added_tools_machine;
mod added_tools_tree;
mod bad_servers;
mod cli;
mod confined_server;
mod in_flight;
mod missing_server;
mod reference_servers;
mod replay_without_server_program;
mod result_files;
mod tool_lists;

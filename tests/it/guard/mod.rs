//! Guarded tools: labels on what agents read, and the policy checked before each tool call
//! (see `runtape::machine::flow_policy`).

mod agentdojo;
mod answers_quoting_no_argument;
mod child_results;
mod confined_tools;
mod hidden_values;
mod inbox_payments;
mod labels_in_the_record;
mod machine;
mod mcp_tool_policy;

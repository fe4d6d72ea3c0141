//! Command tools. Placeholder until it lands.

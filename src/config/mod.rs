//! The run spec file (`runtape.toml`). Placeholder until it lands.

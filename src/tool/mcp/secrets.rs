//! The hook through which header values of Streamable HTTP servers (read from the
//! environment by `headers_env`) reach the engine's secrets registry, so they are scrubbed
//! from anything written down.
//!
//! Today runtape writes them nowhere: they go into request headers only, and the setup stored
//! with a run holds the variable names. When the secrets registry (issue 13's sibling work on
//! secret scrubbing) lands, [`header_values_read`] is where to register them.

/// Called with every header value just read from the environment, before it is used.
/// HOOK: register `values` with the secrets registry here once it exists.
pub(crate) fn header_values_read(values: &[String]) {
    let _ = values;
}

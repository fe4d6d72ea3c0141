//! Model providers over HTTP: encoding, decoding, errors, streams, retries, pricing, keys.

mod budget_cap;
mod conformance;
mod construction;
mod encode;
mod engine_http;
mod errors;
mod fields;
mod hostile_input;
mod pricing;
mod prompt_cache_saving;
mod reasoning_roundtrip;
mod retry_limits;
mod secrets;
mod settings_encode;
mod stream_bounds;
mod stream_chunking;
mod transport;

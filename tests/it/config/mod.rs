//! Spec files: loading, refusing bad ones, model settings, keys and tool names.

mod context_window;
mod errors;
mod load;
mod model_settings;
mod secrets;
mod tool_names;

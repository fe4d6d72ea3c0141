//! A tool's answer with the files it carries: what [`Tool::answer`](super::Tool::answer)
//! returns. The executor stores each file's bytes once as a blob and names it, by digest, in
//! the recorded result and on the tool message the model reads (see
//! [`Attachment`](crate::machine::Attachment)).

use serde_json::Value;

/// One file a result carries: an image or PDF whose media type its bytes show
/// ([`sniff_media_type`](crate::machine::attachment::sniff_media_type)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolFile {
    /// The media type, from the bytes.
    pub media_type: String,
    /// The bytes.
    pub bytes: Vec<u8>,
    /// A name for people (an MCP resource's URI).
    pub name: Option<String>,
}

/// A tool's result: the value fed back to the model and the files it carries.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ToolAnswer {
    /// The value (a string as-is, anything else as JSON).
    pub value: Value,
    /// The files, in the order the result gave them.
    pub files: Vec<ToolFile>,
}

impl From<Value> for ToolAnswer {
    fn from(value: Value) -> Self {
        ToolAnswer {
            value,
            files: Vec::new(),
        }
    }
}

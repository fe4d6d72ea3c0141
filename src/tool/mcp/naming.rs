//! How an MCP tool is named to the model: `SERVER__TOOL`.
//!
//! Providers accept tool names matching `^[a-zA-Z0-9_-]{1,64}$`. A server name is checked when
//! the spec is loaded ([`check_server_name`]); a tool name comes from the server and is made to
//! fit by [`combined_name`]:
//!
//! - a name that already fits (`fs` + `read_text_file` → `fs__read_text_file`) is kept as is;
//! - otherwise every character outside `[a-zA-Z0-9_-]` becomes `_`, the tool part is cut so
//!   the whole fits in 64 characters, and `_` plus the first 8 hex digits of the BLAKE3 hash
//!   of the server's own name for the tool is appended (`fs__my_tool_1a2b3c4d` for
//!   `my.tool`). The hash keeps two tools that differ only in odd characters apart, and the
//!   same server tool always gets the same name.
//!
//! The model only ever sees the combined name; calls are sent to the server under its own.

/// Between the server's name and the tool's in the name the model sees.
pub const SEPARATOR: &str = "__";

/// Longest tool name the providers accept.
pub const MAX_TOOL_NAME: usize = 64;

/// Longest server name: leaves at least 30 characters for the tool's own name.
pub const MAX_SERVER_NAME: usize = 32;

/// Why a server name cannot be used, or `None` when it can. A server name is 1 to
/// [`MAX_SERVER_NAME`] letters, digits, `-` and `_`, does not start or end with `_` and
/// holds no `__` (so `SERVER__TOOL` splits one way only).
pub fn check_server_name(name: &str) -> Option<String> {
    if name.is_empty() || name.len() > MAX_SERVER_NAME {
        return Some(format!(
            "an MCP server name must be 1 to {MAX_SERVER_NAME} characters (got {})",
            name.chars().count()
        ));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Some(format!(
            "MCP server name `{name}` may hold only letters, digits, `-` and `_`"
        ));
    }
    if name.starts_with('_') || name.ends_with('_') || name.contains(SEPARATOR) {
        return Some(format!(
            "MCP server name `{name}` must not start or end with `_` or contain `__` (the separator in SERVER__TOOL)"
        ));
    }
    None
}

/// The name the model calls `server`'s tool `tool` by (see the [module docs](self)).
/// `server` must have passed [`check_server_name`].
pub fn combined_name(server: &str, tool: &str) -> String {
    let plain = format!("{server}{SEPARATOR}{tool}");
    if !tool.is_empty() && plain.len() <= MAX_TOOL_NAME && fits(tool) {
        return plain;
    }
    let hash = blake3::hash(tool.as_bytes()).to_hex();
    let suffix = format!("_{}", &hash.as_str()[..8]);
    let room = MAX_TOOL_NAME.saturating_sub(server.len() + SEPARATOR.len() + suffix.len());
    let cleaned: String = tool
        .chars()
        .map(|c| if is_name_char(c) { c } else { '_' })
        .take(room)
        .collect();
    format!("{server}{SEPARATOR}{cleaned}{suffix}")
}

/// Whether `name` is a name providers accept.
pub fn is_valid_tool_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_TOOL_NAME && fits(name)
}

/// The server part of a name written in a grant (`fs__read_text_file` or `fs__*`), if it
/// has one.
pub fn server_of(grant: &str) -> Option<&str> {
    grant.split_once(SEPARATOR).map(|(server, _)| server)
}

fn fits(s: &str) -> bool {
    s.chars().all(is_name_char)
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_are_joined_with_the_separator() {
        assert_eq!(combined_name("fs", "read_text_file"), "fs__read_text_file");
        assert_eq!(combined_name("ev", "get-sum"), "ev__get-sum");
    }

    #[test]
    fn odd_or_long_names_are_cleaned_cut_and_hashed() {
        let dotted = combined_name("fs", "my.tool");
        assert!(dotted.starts_with("fs__my_tool_"), "{dotted}");
        assert!(is_valid_tool_name(&dotted));
        assert_ne!(dotted, combined_name("fs", "my_tool"));
        assert_eq!(dotted, combined_name("fs", "my.tool"), "stable");

        let long = "x".repeat(200);
        let name = combined_name("server", &long);
        assert_eq!(name.len(), MAX_TOOL_NAME);
        assert!(is_valid_tool_name(&name));

        let unicode = combined_name("s", "évaluer");
        assert!(is_valid_tool_name(&unicode), "{unicode}");
        assert!(is_valid_tool_name(&combined_name("s", "")));
    }

    #[test]
    fn server_names_are_checked() {
        assert_eq!(check_server_name("fs"), None);
        assert_eq!(check_server_name("my-server_2"), None);
        for bad in ["", "a__b", "_a", "a_", "a b", "a.b", &"x".repeat(33)] {
            assert!(check_server_name(bad).is_some(), "{bad}");
        }
    }

    #[test]
    fn grants_name_their_server() {
        assert_eq!(server_of("fs__read"), Some("fs"));
        assert_eq!(server_of("fs__*"), Some("fs"));
        assert_eq!(server_of("search"), None);
    }
}

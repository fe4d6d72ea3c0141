//! Specs written a table a line: the `[[providers]]`, `[[tools]]` and `[[agents]]` tables most
//! tests need, so a test says what differs from the usual rather than pasting TOML. Join the
//! pieces with `concat()` (or `format!`) after any top-level lines such as `goal = "…"`: each
//! piece starts a new table, so nothing may follow that belongs at the top level.

/// The flags of a tool that may run again and changes nothing: `read_only` and `idempotent`.
pub const SAFE: &str = "read_only = true\nidempotent = true";

/// A `[[providers]]` table `name` of `kind`, then `rest` (TOML lines, may be empty).
pub fn provider(name: &str, kind: &str, rest: &str) -> String {
    format!("[[providers]]\nname = \"{name}\"\nkind = \"{kind}\"\n{rest}\n")
}

/// A scripted model `name` giving `replies` (TOML inline tables separated by commas) in turn.
pub fn scripted_as(name: &str, replies: &str) -> String {
    provider(name, "scripted", &format!("replies = [{replies}]"))
}

/// A `[[tools]]` table `name` running `command` (a TOML array, e.g. `["sh", "-c", "cat"]`),
/// then `rest` (TOML lines such as [`SAFE`] or a `description`; may be empty).
pub fn tool(name: &str, command: &str, rest: &str) -> String {
    format!("[[tools]]\nname = \"{name}\"\ncommand = {command}\n{rest}\n")
}

/// An `[[agents]]` table `id` on `provider`, offered `tools` (none when empty), then `rest`
/// (TOML lines such as `system_prompt = "…"` or `delegates = […]`; may be empty).
pub fn agent(id: &str, provider: &str, tools: &[&str], rest: &str) -> String {
    let tools = if tools.is_empty() {
        String::new()
    } else {
        format!("tools = {tools:?}\n")
    };
    format!("[[agents]]\nid = \"{id}\"\nprovider = \"{provider}\"\n{tools}{rest}\n")
}

/// An `[[agents]]` table `id` on `provider` that has no tools of its own and delegates to
/// `delegates`, then `rest` (TOML lines; may be empty).
pub fn lead(id: &str, provider: &str, delegates: &[&str], rest: &str) -> String {
    agent(
        id,
        provider,
        &[],
        &format!("tools = []\ndelegates = {delegates:?}\n{rest}"),
    )
}

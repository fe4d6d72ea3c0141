//! `--env-file FILE` (`runtape run`, `runtape resume`): variables read from a dotenv file that
//! a spec's references see as if they were in runtape's environment — an HTTP provider's
//! `api_key_env`, a program's `env` entries (`["NAME"]` and `"${NAME}"`), an HTTP MCP
//! server's `headers_env` — and nothing else: the process environment is not changed, a
//! program's base variables (`PATH`, `HOME`, …) and `env_all` still come from runtape's own
//! environment, so a program gets a file's variable only when its spec names it.
//!
//! Every value is registered as a secret ([`super::register`]) when the file is installed, so
//! it is scrubbed from everything stored or printed; only the names are kept with the run
//! ([`crate::config::Setup::env_file`]).
//!
//! The syntax, one variable a line:
//!
//! ```text
//! # a comment; blank lines are skipped
//! OPENAI_API_KEY=sk-…
//! export GITHUB_TOKEN=ghp_…         # `export ` is allowed; so is a comment after a value
//! GREETING='hello world'            # single quotes: the text as written
//! MOTTO="say \"hi\"\n"              # double quotes: \" \\ \n \t \r \$ are escapes
//! ```
//!
//! Anything else — a line without `=`, a name that is not letters, digits and `_`, an unclosed
//! quote, text after a closing quote, whitespace or a quote inside an unquoted value, a name
//! given twice — is refused as one line `FILE:LINE: what is wrong`, never echoing a value.
//! Values are never expanded (`$OTHER` is text).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

/// The variables of the file installed in this process, if one is.
static INSTALLED: OnceLock<BTreeMap<String, String>> = OnceLock::new();

/// A dotenv file read and checked: its variables in file order. Read it with
/// [`EnvFile::read`] before anything is written, then [`install`](EnvFile::install) it.
#[derive(Clone, PartialEq, Eq)]
pub struct EnvFile {
    vars: Vec<(String, String)>,
}

impl std::fmt::Debug for EnvFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Names only: the values are secrets.
        f.debug_struct("EnvFile")
            .field("names", &self.names())
            .finish()
    }
}

impl EnvFile {
    /// Reads and checks the file at `path`. The error is one line: `FILE: …` when it cannot be
    /// read, `FILE:LINE: …` for a line that is not `NAME=value` (see the module's syntax).
    pub fn read(path: &Path) -> Result<EnvFile, String> {
        let shown = path.display();
        let bytes = std::fs::read(path).map_err(|e| format!("{shown}: cannot read it ({e})"))?;
        let text = String::from_utf8(bytes)
            .map_err(|_| format!("{shown}: not UTF-8 text – save it as UTF-8"))?;
        EnvFile::parse(&shown.to_string(), &text)
    }

    /// Checks `text`, a dotenv file's contents; errors name `label` (the file) and the line.
    pub fn parse(label: &str, text: &str) -> Result<EnvFile, String> {
        let mut vars: Vec<(String, String)> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let at = |why: &str| format!("{label}:{}: {why}", i + 1);
            let Some((name, value)) = parse_line(line).map_err(&at)? else {
                continue;
            };
            if vars.iter().any(|(n, _)| *n == name) {
                return Err(at(&format!("`{name}` is set twice – keep one")));
            }
            vars.push((name, value));
        }
        Ok(EnvFile { vars })
    }

    /// The variables' names, in file order (what a run records).
    pub fn names(&self) -> Vec<String> {
        self.vars.iter().map(|(n, _)| n.clone()).collect()
    }

    /// Makes the variables visible to [`var`] and [`file_var`] for the rest of the process
    /// and registers every value as a secret. Call once, before the run's setup is installed;
    /// a second call is refused (one file per process).
    pub fn install(self) -> Result<(), String> {
        for (name, value) in &self.vars {
            super::register_value(name, value);
        }
        INSTALLED
            .set(self.vars.into_iter().collect())
            .map_err(|_| "an env file is installed already in this process".to_owned())
    }
}

/// The variable `name` from the installed env file, if any.
pub fn file_var(name: &str) -> Option<String> {
    INSTALLED.get().and_then(|vars| vars.get(name).cloned())
}

/// The variable `name` as a spec's reference reads it: from the installed env file (which
/// wins), else from the process environment. `None` when neither has it as UTF-8.
pub fn var(name: &str) -> Option<String> {
    file_var(name).or_else(|| std::env::var(name).ok())
}

/// One line: `Ok(None)` for a blank or comment line, `Ok(Some((name, value)))` for a
/// variable, `Err(why)` (never holding the value) otherwise.
fn parse_line(line: &str) -> Result<Option<(String, String)>, &'static str> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return Ok(None);
    }
    let line = line
        .strip_prefix("export")
        .filter(|rest| rest.starts_with([' ', '\t']))
        .map_or(line, str::trim_start);
    let Some((name, raw)) = line.split_once('=') else {
        return Err("not NAME=value – write one variable a line, or `#` for a comment");
    };
    let name = name.trim_end();
    if name.is_empty() || !super::is_variable_name(name) {
        return Err(
            "the name before `=` must be letters, digits and `_`, not beginning with a digit",
        );
    }
    let raw = raw.trim_start();
    let (value, rest) = match raw.chars().next() {
        Some('\'') => {
            let body = &raw[1..];
            let end = body
                .find('\'')
                .ok_or("the single-quoted value is not closed on this line")?;
            (body[..end].to_owned(), &body[end + 1..])
        }
        Some('"') => double_quoted(&raw[1..])?,
        _ => {
            let (value, rest) = match raw.find([' ', '\t']) {
                Some(at) => (&raw[..at], &raw[at..]),
                None => (raw, ""),
            };
            if value.contains(['\'', '"']) {
                return Err("a quote inside an unquoted value – quote the whole value");
            }
            (value.to_owned(), rest)
        }
    };
    let rest = rest.trim_start();
    if !rest.is_empty() && !rest.starts_with('#') {
        return Err(
            "text after the value – quote a value holding spaces, or start a comment with ` #`",
        );
    }
    Ok(Some((name.to_owned(), value)))
}

/// A double-quoted value after its opening quote → (value, what follows the closing quote).
fn double_quoted(body: &str) -> Result<(String, &str), &'static str> {
    let mut value = String::new();
    let mut chars = body.char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            '"' => return Ok((value, &body[at + 1..])),
            '\\' => match chars.next().map(|(_, e)| e) {
                Some('n') => value.push('\n'),
                Some('t') => value.push('\t'),
                Some('r') => value.push('\r'),
                Some(e @ ('"' | '\\' | '$')) => value.push(e),
                _ => {
                    return Err(
                        "an unknown escape in a double-quoted value – use \\\" \\\\ \\n \\t \\r or \\$",
                    );
                }
            },
            c => value.push(c),
        }
    }
    Err("the double-quoted value is not closed on this line")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(text: &str) -> Vec<(String, String)> {
        EnvFile::parse("f", text).expect("parses").vars
    }

    fn pair(n: &str, v: &str) -> (String, String) {
        (n.to_owned(), v.to_owned())
    }

    #[test]
    fn comments_blanks_export_and_quotes_parse() {
        let text = "# keys\n\nA=plain\nexport B=x # note\n  C = 'it''s'\nD='a b # c'\nE=\"q \\\"x\\\" \\n $HOME\"\nF=\nexported=1\n";
        assert_eq!(
            EnvFile::parse("f", text).map(|f| f.names()),
            Err("f:5: text after the value – quote a value holding spaces, or start a comment with ` #`".to_owned())
        );
        let text = text.replace("  C = 'it''s'\n", "  C = 'its'\n");
        assert_eq!(
            vars(&text),
            [
                pair("A", "plain"),
                pair("B", "x"),
                pair("C", "its"),
                pair("D", "a b # c"),
                pair("E", "q \"x\" \n $HOME"),
                pair("F", ""),
                pair("exported", "1"),
            ]
        );
    }

    #[test]
    fn anything_else_is_one_line_naming_the_line_without_the_value() {
        for (text, line) in [
            ("A=1\nno equals sign here\n", 2),
            ("1A=x", 1),
            ("A B=x", 1),
            ("A='sk-unclosed-secret", 1),
            ("A=\"sk-unclosed-secret", 1),
            ("A=\"sk-bad\\qescape\"", 1),
            ("A=sk-two words", 1),
            ("A=sk'quoted", 1),
            ("A='sk-x' trailing", 1),
            ("A=1\n\nA=2", 3),
            ("export=1x y", 1),
        ] {
            let e = EnvFile::parse("keys.env", text).expect_err(text);
            assert!(
                e.starts_with(&format!("keys.env:{line}: ")),
                "{text:?}: {e}"
            );
            assert!(!e.contains("sk-") && !e.contains('\n'), "{e}");
        }
    }
}

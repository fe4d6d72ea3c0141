//! The spec file's text parsed with positions: TOML syntax errors, typed deserialisation with
//! errors pointing at the offending spot, and looking fields up by path in both directions
//! (path → line:col for errors found after parsing, span → path for serde's errors).

use std::ops::Range;
use std::path::Path;

use serde::de::DeserializeOwned;
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::error::{ConfigError, Location};
use super::paths::{self, Segment};

/// A parsed spec file.
pub(crate) struct Document<'a> {
    file: &'a Path,
    text: &'a str,
    root: Spanned<DeTable<'a>>,
}

impl<'a> Document<'a> {
    /// Parses `text` (read from `file`); a syntax error points at where the parser stopped.
    pub(crate) fn parse(file: &'a Path, text: &'a str) -> Result<Self, ConfigError> {
        match DeTable::parse(text) {
            Ok(root) => Ok(Document { file, text, root }),
            Err(e) => Err(ConfigError::Syntax {
                at: location(file, text, e.span().map_or(0, |s| s.start)),
                message: one_line(e.message()),
            }),
        }
    }

    /// Deserialises the whole document; an error names the field and points at it.
    pub(crate) fn deserialize<T: DeserializeOwned>(&self) -> Result<T, ConfigError> {
        let de = toml::de::Deserializer::from(self.root.clone());
        T::deserialize(de).map_err(|e| {
            let span = e.span().unwrap_or(0..0);
            let field = self.path_at(&span);
            ConfigError::from_serde(field, e.message())
                .located(|_| location(self.file, self.text, span.start))
        })
    }

    /// Where `path` is written: the value of the deepest part of the path the file has (a
    /// missing key points at its table, an array-of-tables element at its header).
    pub(crate) fn locate(&self, path: &str) -> Location {
        let segments = paths::parse(path);
        let mut span = 0..0;
        let mut node: Option<&DeValue<'_>> = None;
        let mut table: Option<&DeTable<'_>> = Some(self.root.get_ref());
        for seg in &segments {
            let next = match (seg, table, node) {
                (Segment::Key(k), Some(t), _) => get(t, k),
                (Segment::Index(i), _, Some(DeValue::Array(a))) => a.get(*i),
                _ => None,
            };
            let Some(next) = next else { break };
            span = next.span();
            node = Some(next.get_ref());
            table = match next.get_ref() {
                DeValue::Table(t) => Some(t),
                _ => None,
            };
        }
        location(self.file, self.text, span.start)
    }

    /// The path of the deepest key or value whose span holds `span` (the document root,
    /// `""`, when none does).
    fn path_at(&self, span: &Range<usize>) -> String {
        let mut best: (usize, Vec<Segment>) = (0, Vec::new());
        let mut prefix = Vec::new();
        search_table(self.root.get_ref(), span, &mut prefix, &mut best);
        paths::join(&best.1)
    }
}

fn get<'t, 'a>(table: &'t DeTable<'a>, key: &str) -> Option<&'t Spanned<DeValue<'a>>> {
    table
        .iter()
        .find(|(k, _)| k.get_ref().as_ref() == key)
        .map(|(_, v)| v)
}

fn holds(outer: &Range<usize>, inner: &Range<usize>) -> bool {
    outer.start <= inner.start && inner.end <= outer.end.max(outer.start)
}

fn search_table(
    table: &DeTable<'_>,
    span: &Range<usize>,
    prefix: &mut Vec<Segment>,
    best: &mut (usize, Vec<Segment>),
) {
    for (key, value) in table.iter() {
        prefix.push(Segment::Key(key.get_ref().to_string()));
        if holds(&key.span(), span) || holds(&value.span(), span) {
            consider(prefix, best);
        }
        search_value(value.get_ref(), span, prefix, best);
        prefix.pop();
    }
}

fn search_value(
    value: &DeValue<'_>,
    span: &Range<usize>,
    prefix: &mut Vec<Segment>,
    best: &mut (usize, Vec<Segment>),
) {
    match value {
        DeValue::Table(t) => search_table(t, span, prefix, best),
        DeValue::Array(a) => {
            for (i, item) in a.iter().enumerate() {
                prefix.push(Segment::Index(i));
                if holds(&item.span(), span) {
                    consider(prefix, best);
                }
                search_value(item.get_ref(), span, prefix, best);
                prefix.pop();
            }
        }
        _ => {}
    }
}

fn consider(path: &[Segment], best: &mut (usize, Vec<Segment>)) {
    if path.len() > best.0 {
        *best = (path.len(), path.to_vec());
    }
}

/// The 1-based line and character column of byte `offset` in `text`.
pub(crate) fn location(file: &Path, text: &str, offset: usize) -> Location {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    Location {
        file: file.to_path_buf(),
        line,
        column: before[line_start..].chars().count() + 1,
    }
}

fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "[[agents]]\nid = \"a\"\n\n[[agents]]\nid = \"b\"\ntools = [\"x\", \"y\"]\n";

    #[test]
    fn paths_locate_their_values() {
        let doc = Document::parse(Path::new("f.toml"), TEXT).expect("parses");
        let at = |p: &str| {
            let l = doc.locate(p);
            (l.line, l.column)
        };
        assert_eq!(at("agents[1].id"), (5, 6));
        assert_eq!(at("agents[1].tools[1]"), (6, 15));
        assert_eq!(at("agents[1].missing"), (4, 1), "a missing key: its table");
        assert_eq!(at("plan.exits[0]"), (1, 1), "nothing matches: the top");
    }

    #[test]
    fn spans_find_their_paths() {
        let doc = Document::parse(Path::new("f.toml"), TEXT).expect("parses");
        let start = TEXT.find("\"y\"").expect("in text");
        assert_eq!(doc.path_at(&(start..start + 3)), "agents[1].tools[1]");
    }

    #[test]
    fn columns_count_characters() {
        let l = location(Path::new("f"), "é = 1\nxé", 10);
        assert_eq!((l.line, l.column), (2, 3));
        let l = location(Path::new("f"), "é = 1\nxé", 9);
        assert_eq!((l.line, l.column), (2, 2), "inside a character: its start");
        let l = location(Path::new("f"), "é", 1);
        assert_eq!((l.line, l.column), (1, 1));
    }
}

//! Scorers: what turns a run's answer into a score between 0 and 1.
//!
//! Declared in a TOML file (`runtape eval … --scorers scorers.toml`), one `[[scorers]]` table
//! each; without a file, every answer is scored by `exact`.
//!
//! ```toml
//! [[scorers]]
//! kind = "exact"                 # the answer (trimmed) equals the item's `expected`
//! [[scorers]]
//! name = "polite"                # default: the kind; unique in the file
//! kind = "regex"
//! pattern = "(?i)thank"          # the answer matches
//! [[scorers]]
//! kind = "json_schema"           # the answer is JSON valid under the schema
//! schema = { type = "object", required = ["city"] }   # or schema_file = "answer.schema.json"
//! [[scorers]]
//! kind = "command"               # a program scores it (see below)
//! command = ["python3", "score.py"]
//! [[scorers]]
//! kind = "judge"                 # a model scores it: its own recorded run of this spec
//! spec = "judge.toml"
//! ```
//!
//! Paths are relative to the scorers file, and a `command` scorer runs in its directory. It
//! is given one JSON object on stdin (`goal`, `answer`, `expected`, `metadata`, `status`,
//! `item`, `variant`), with the minimal environment command tools get
//! ([`crate::tool::env`]), and prints a number from 0 to 1 or `{"score": N, "note": "…"}`;
//! exiting non-zero, printing anything else or taking over 60 s scores 0 with the reason. A `judge` runs its spec
//! with a goal holding the item's goal, expected answer and the answer, and its answer is read
//! as a score by [`parse_judgement`]. `exact`, `regex` and `json_schema` are pure
//! ([`Scorer::score_pure`]); the other two are performed by [`crate::ops::eval`].

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Item;

/// A scorer as declared, with its paths made absolute and its schema read: stored in the
/// report, so a later `eval rescore` knows every scorer an experiment was scored with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScorerDecl {
    /// Its name in the report (default: the kind).
    #[serde(default)]
    pub name: String,
    /// What it checks.
    pub kind: ScorerKind,
    /// `regex`: the pattern the answer must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// `json_schema`: the schema, inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Value>,
    /// `json_schema`: the schema's file (read when the scorers are loaded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_file: Option<PathBuf>,
    /// `command`: the program and its arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// `judge`: the run spec whose agent judges.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<PathBuf>,
    /// `command`: where the program runs, set to the scorers file's directory when loaded
    /// (not written in the file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<PathBuf>,
}

/// The kinds of scorer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScorerKind {
    /// The answer equals the item's `expected`.
    Exact,
    /// The answer matches a regular expression.
    Regex,
    /// The answer is JSON valid under a schema.
    JsonSchema,
    /// A program scores it.
    Command,
    /// A model scores it, in a recorded run of its own.
    Judge,
}

impl ScorerKind {
    fn name(self) -> &'static str {
        match self {
            ScorerKind::Exact => "exact",
            ScorerKind::Regex => "regex",
            ScorerKind::JsonSchema => "json_schema",
            ScorerKind::Command => "command",
            ScorerKind::Judge => "judge",
        }
    }
}

/// A scorer ready to score: its declaration and what was compiled from it.
#[derive(Debug)]
pub struct Scorer {
    /// As declared.
    pub decl: ScorerDecl,
    regex: Option<regex::Regex>,
    validator: Option<jsonschema::Validator>,
}

/// One score: 0 to 1, with a note saying why when it is not a plain pass or fail. A scorer
/// that could not score (no `expected`, a program that failed) gives 0 with its reason.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Score {
    /// From 0 (wrong) to 1 (right).
    pub score: f64,
    /// Why, when there is more to say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// A judge's own run, recorded like any other.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge_run: Option<String>,
}

impl Score {
    /// A score of `score` without a note.
    pub fn of(score: f64) -> Score {
        Score {
            score,
            note: None,
            judge_run: None,
        }
    }

    /// 0, because of `why`.
    pub fn failed(why: impl Into<String>) -> Score {
        Score {
            score: 0.0,
            note: Some(why.into()),
            judge_run: None,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScorersFile {
    scorers: Vec<ScorerDecl>,
}

/// Reads and checks a scorers file; each error is one line naming the file and the scorer.
pub fn load(path: &Path) -> Result<Vec<Scorer>, String> {
    let shown = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {shown}: {e}"))?;
    let file: ScorersFile =
        toml::from_str(&text).map_err(|e| format!("{shown}: {}", first_line(&e.to_string())))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let decls = file
        .scorers
        .into_iter()
        .map(|d| absolute(d, dir))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{shown}: {e}"))?;
    compile_all(decls).map_err(|e| format!("{shown}: {e}"))
}

/// The scorer used when none is declared: `exact`.
pub fn default_scorers() -> Vec<Scorer> {
    let decl = ScorerDecl {
        name: "exact".into(),
        kind: ScorerKind::Exact,
        pattern: None,
        schema: None,
        schema_file: None,
        command: None,
        spec: None,
        dir: None,
    };
    // `exact` needs nothing compiled.
    compile_all(vec![decl]).unwrap_or_default()
}

/// Compiles declarations (from a file, or stored in a report): names defaulted and unique,
/// each kind's fields present, patterns and schemas compiled.
pub fn compile_all(decls: Vec<ScorerDecl>) -> Result<Vec<Scorer>, String> {
    let mut out: Vec<Scorer> = Vec::new();
    for mut decl in decls {
        if decl.name.is_empty() {
            decl.name = decl.kind.name().to_owned();
        }
        if out.iter().any(|s| s.decl.name == decl.name) {
            return Err(format!(
                "the scorer name `{}` is given twice: give each a `name`",
                decl.name
            ));
        }
        out.push(compile(decl)?);
    }
    if out.is_empty() {
        return Err("no [[scorers]] declared".into());
    }
    Ok(out)
}

fn compile(decl: ScorerDecl) -> Result<Scorer, String> {
    let name = decl.name.clone();
    let need = |field: &str| {
        format!(
            "scorer `{name}`: a {} scorer needs `{field}`",
            decl.kind.name()
        )
    };
    let mut regex = None;
    let mut validator = None;
    match decl.kind {
        ScorerKind::Exact => {}
        ScorerKind::Regex => {
            let pattern = decl.pattern.as_deref().ok_or_else(|| need("pattern"))?;
            regex = Some(
                regex::Regex::new(pattern)
                    .map_err(|e| format!("scorer `{name}`: {}", first_line(&e.to_string())))?,
            );
        }
        ScorerKind::JsonSchema => {
            let schema = decl.schema.as_ref().ok_or_else(|| need("schema"))?;
            validator = Some(
                jsonschema::validator_for(schema)
                    .map_err(|e| format!("scorer `{name}`: not a valid JSON Schema: {e}"))?,
            );
        }
        ScorerKind::Command => {
            if decl.command.as_ref().is_none_or(Vec::is_empty) {
                return Err(need("command"));
            }
        }
        ScorerKind::Judge => {
            decl.spec.as_ref().ok_or_else(|| need("spec"))?;
        }
    }
    Ok(Scorer {
        decl,
        regex,
        validator,
    })
}

/// Paths relative to `dir` made absolute (a command's program only when it names a path, as
/// command tools do), and a `schema_file` read into `schema`.
fn absolute(mut d: ScorerDecl, dir: &Path) -> Result<ScorerDecl, String> {
    if let Some(spec) = &d.spec {
        d.spec = Some(dir.join(spec));
    }
    if let Some(program) = d.command.as_mut().and_then(|c| c.first_mut()) {
        if program.contains('/') {
            *program = dir.join(&*program).display().to_string();
        }
        d.dir = Some(dir.to_owned());
    }
    if let Some(file) = d.schema_file.take() {
        let path = dir.join(&file);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read the schema {}: {e}", path.display()))?;
        let schema = serde_json::from_str(&text)
            .map_err(|e| format!("the schema {}: not JSON: {e}", path.display()))?;
        d.schema = Some(schema);
    }
    Ok(d)
}

fn first_line(s: &str) -> String {
    s.split('\n')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

impl Scorer {
    /// The score of `answer` (`None`: the run gave none) for `item`, when this scorer needs
    /// nothing but them (`exact`, `regex`, `json_schema`); `None` for `command` and `judge`,
    /// which [`crate::ops::eval`] performs.
    pub fn score_pure(&self, item: &Item, answer: Option<&str>) -> Option<Score> {
        let kind = self.decl.kind;
        if matches!(kind, ScorerKind::Command | ScorerKind::Judge) {
            return None;
        }
        let Some(answer) = answer else {
            return Some(Score::failed("the run gave no answer"));
        };
        Some(match kind {
            ScorerKind::Exact => exact(item.expected.as_ref(), answer),
            ScorerKind::Regex => pass(self.regex.as_ref().is_some_and(|r| r.is_match(answer))),
            ScorerKind::JsonSchema => match serde_json::from_str::<Value>(answer.trim()) {
                Ok(value) => match self.validator.as_ref().map(|v| v.validate(&value)) {
                    Some(Ok(())) | None => Score::of(1.0),
                    Some(Err(e)) => Score::failed(format!("not valid: {e}")),
                },
                Err(_) => Score::failed("the answer is not JSON"),
            },
            ScorerKind::Command | ScorerKind::Judge => return None,
        })
    }
}

fn pass(ok: bool) -> Score {
    Score::of(if ok { 1.0 } else { 0.0 })
}

/// A string `expected` is compared with the answer, both trimmed; any other JSON value with
/// the answer read as JSON.
fn exact(expected: Option<&Value>, answer: &str) -> Score {
    match expected {
        None => Score::failed("the item has no `expected`"),
        Some(Value::String(want)) => pass(want.trim() == answer.trim()),
        Some(want) => pass(serde_json::from_str::<Value>(answer.trim()).is_ok_and(|a| &a == want)),
    }
}

/// Reads a judge's answer as a score: `PASS` or `FAIL` (any case) as its first word, else the
/// first number in it, which must lie from 0 to 1 (`0.8`, `score: 1`). `None` when it holds
/// neither.
pub fn parse_judgement(text: &str) -> Option<f64> {
    let first = text
        .split(|c: char| !c.is_ascii_alphabetic())
        .find(|w| !w.is_empty())
        .map(str::to_ascii_uppercase);
    match first.as_deref() {
        Some("PASS") => return Some(1.0),
        Some("FAIL") => return Some(0.0),
        _ => {}
    }
    let start = text.find(|c: char| c.is_ascii_digit())?;
    let number: String = text[start..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let n: f64 = number.trim_end_matches('.').parse().ok()?;
    (0.0..=1.0).contains(&n).then_some(n)
}

/// The goal a judge's run is started with.
pub fn judge_goal(item: &Item, answer: Option<&str>) -> String {
    let expected = match &item.expected {
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
        None => "(none given)".into(),
    };
    format!(
        "Score the answer to this task from 0 (wrong) to 1 (right). Reply with PASS, FAIL or a number from 0 to 1 first.\n\nTask: {}\n\nExpected answer: {expected}\n\nAnswer: {}",
        item.goal,
        answer.unwrap_or("(the run gave no answer)")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(expected: Option<Value>) -> Item {
        Item {
            id: "1".into(),
            goal: "g".into(),
            expected,
            metadata: Default::default(),
        }
    }

    fn scorer(toml_text: &str) -> Result<Scorer, String> {
        let file: ScorersFile = toml::from_str(toml_text).map_err(|e| e.to_string())?;
        Ok(compile_all(file.scorers)?.remove(0))
    }

    #[test]
    fn pure_scorers_score_answers() {
        let exact = scorer("[[scorers]]\nkind = \"exact\"").unwrap();
        let paris = item(Some(Value::String("Paris".into())));
        assert_eq!(
            exact.score_pure(&paris, Some(" Paris\n")).unwrap().score,
            1.0
        );
        assert_eq!(exact.score_pure(&paris, Some("Lyon")).unwrap().score, 0.0);
        assert_eq!(exact.score_pure(&paris, None).unwrap().score, 0.0);
        let json = item(Some(serde_json::json!({"n": 1})));
        assert_eq!(
            exact.score_pure(&json, Some("{ \"n\": 1 }")).unwrap().score,
            1.0
        );
        let none = exact.score_pure(&item(None), Some("x")).unwrap();
        assert_eq!(none.note.as_deref(), Some("the item has no `expected`"));

        let re = scorer("[[scorers]]\nkind = \"regex\"\npattern = \"^echo: \"").unwrap();
        assert_eq!(re.decl.name, "regex");
        assert_eq!(re.score_pure(&paris, Some("echo: hi")).unwrap().score, 1.0);
        assert_eq!(re.score_pure(&paris, Some("hi")).unwrap().score, 0.0);

        let schema = scorer(
            "[[scorers]]\nkind = \"json_schema\"\nschema = { type = \"object\", required = [\"city\"] }",
        )
        .unwrap();
        assert_eq!(
            schema
                .score_pure(&paris, Some("{\"city\":\"P\"}"))
                .unwrap()
                .score,
            1.0
        );
        assert_eq!(
            schema
                .score_pure(&paris, Some("{\"town\":\"P\"}"))
                .unwrap()
                .score,
            0.0
        );
        assert_eq!(schema.score_pure(&paris, Some("Paris")).unwrap().score, 0.0);

        let cmd = scorer("[[scorers]]\nkind = \"command\"\ncommand = [\"true\"]").unwrap();
        assert!(
            cmd.score_pure(&paris, Some("x")).is_none(),
            "performed by ops"
        );
    }

    #[test]
    fn bad_declarations_are_one_line_each() {
        for (text, want) in [
            ("[[scorers]]\nkind = \"regex\"", "needs `pattern`"),
            (
                "[[scorers]]\nkind = \"regex\"\npattern = \"(\"",
                "scorer `regex`",
            ),
            (
                "[[scorers]]\nkind = \"command\"\ncommand = []",
                "needs `command`",
            ),
            ("[[scorers]]\nkind = \"judge\"", "needs `spec`"),
            (
                "[[scorers]]\nkind = \"json_schema\"\nschema = { type = 3 }",
                "not a valid JSON Schema",
            ),
            (
                "[[scorers]]\nkind = \"exact\"\n[[scorers]]\nkind = \"exact\"",
                "given twice",
            ),
        ] {
            let e = scorer(text).unwrap_err();
            assert!(e.contains(want), "{text}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn judgements_read_as_scores() {
        assert_eq!(parse_judgement("PASS: it is right"), Some(1.0));
        assert_eq!(parse_judgement("fail"), Some(0.0));
        assert_eq!(parse_judgement("Score: 0.75 because"), Some(0.75));
        assert_eq!(parse_judgement("1"), Some(1.0));
        assert_eq!(parse_judgement("7 out of 10"), None);
        assert_eq!(parse_judgement("no idea"), None);
    }
}

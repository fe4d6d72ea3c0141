//! Naming runs and steps: `RUN` or `RUN@SEQ`, checked by shape before anything is looked up,
//! and user input as an error message quotes it.

use super::OpsError;
use crate::machine::RunId;

/// The longest run id accepted.
pub const MAX_RUN_ID_CHARS: usize = 128;

/// How much of a user's input an error message quotes.
pub const QUOTE_CHARS: usize = 80;

/// `RUN` or `RUN@SEQ`, checked by shape before anything is looked up: a run id is 1 to
/// [`MAX_RUN_ID_CHARS`] letters, digits, `-`, `_` or `.` (runtape's own ids are 16 lowercase
/// letters and digits).
pub fn parse_run_at(s: &str) -> Result<(RunId, Option<u64>), OpsError> {
    let bad = |why: &str| OpsError::BadRunRef {
        input: quoted(s),
        why: why.to_owned(),
    };
    let (run, seq) = match s.split_once('@') {
        None => (s, None),
        Some((run, seq)) => {
            let seq: u64 = seq.parse().map_err(|_| bad("SEQ must be a whole number"))?;
            (run, Some(seq))
        }
    };
    if run.is_empty() {
        return Err(bad("the run id is empty"));
    }
    if run.chars().count() > MAX_RUN_ID_CHARS {
        return Err(bad(&format!(
            "a run id has at most {MAX_RUN_ID_CHARS} characters"
        )));
    }
    if !run
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(bad(
            "a run id is letters, digits, `-`, `_` and `.` only (no spaces)",
        ));
    }
    Ok((RunId::new(run), seq))
}

/// A whole run, `RUN`, for an operation that acts on all of it. `RUN@SEQ` is refused rather
/// than read as `RUN`, so nobody resumes, cancels or diffs a whole run believing they named a
/// step: `what` says what the operation does with a run, and the refusal points at the
/// commands that take a step.
pub fn parse_whole_run(s: &str, what: &str) -> Result<RunId, OpsError> {
    match parse_run_at(s)? {
        (run, None) => Ok(run),
        (run, Some(seq)) => Err(OpsError::StepNamed {
            input: quoted(s),
            run,
            seq,
            what: what.to_owned(),
        }),
    }
}

/// User input as an error message quotes it: on one line (control characters escaped as
/// `\\n`, `\\t`, `\\u{..}`) and at most [`QUOTE_CHARS`] characters, `…` marking a cut.
pub fn quoted(input: &str) -> String {
    crate::text::one_line(input, QUOTE_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_references_parse_or_explain() {
        assert_eq!(
            parse_run_at("abc").ok().map(|(r, s)| (r.0, s)),
            Some(("abc".into(), None))
        );
        assert_eq!(
            parse_run_at("abc@12").ok().map(|(r, s)| (r.0, s)),
            Some(("abc".into(), Some(12)))
        );
        for bad in ["abc@", "abc@x", "@3", "a b@1", "abc@-1", "a\nb", "a/b", "é"] {
            let e = parse_run_at(bad).expect_err(bad);
            assert_eq!(e.code(), "bad_run_ref");
            assert_eq!(e.kind(), super::super::ErrorKind::Input);
            assert!(e.to_string().contains("malformed run reference"), "{e}");
        }
        let e = parse_whole_run("abc@3", "pause stops a run at its next step").expect_err("a step");
        assert_eq!(e.code(), "step_not_wanted");
        assert!(
            e.to_string()
                .starts_with("`abc@3` names step 3, but pause stops a run at its next step"),
            "{e}"
        );
    }

    #[test]
    fn hostile_input_is_quoted_short_and_on_one_line() {
        let long = "x".repeat(100_000);
        let e = parse_run_at(&long).expect_err("too long").to_string();
        assert!(e.len() < 300, "{}", e.len());
        assert!(e.contains(&format!("`{}…`", "x".repeat(QUOTE_CHARS))));
        let e = parse_run_at("a\nb\r\u{7}c")
            .expect_err("newline")
            .to_string();
        assert!(e.contains("`a\\nb\\r\\u{7}c`"), "{e}");
        let ok = "a".repeat(MAX_RUN_ID_CHARS);
        assert!(parse_run_at(&format!("{ok}@3")).is_ok());
        assert!(parse_run_at("run-1.b_c").is_ok());
    }
}

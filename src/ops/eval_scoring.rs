//! Performing the scorers that need more than the answer: a `command` scorer's program, and a
//! `judge` scorer's run (recorded like any other, tagged with the experiment, the variant, the
//! item and `scorer=NAME`, so `ls --tag scorer=NAME` lists a judge's runs and `show` shows
//! what it was asked and said). The pure scorers are [`crate::eval::scorer`].

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use super::{OpsError, Warn};
use crate::config::RunFile;
use crate::eval::scorer::{judge_goal, parse_judgement};
use crate::eval::{Item, Score, Scorer, ScorerKind};
use crate::exec::{Engine, EngineConfig, new_run_id};
use crate::store::Store;
use crate::tool::env::EnvPolicy;

/// How long a `command` scorer may take before it is killed and scores 0.
pub(super) const COMMAND_SCORER_TIMEOUT: Duration = Duration::from_secs(60);

/// The most a `command` scorer may print that is read (the rest is ignored).
const MAX_SCORER_OUTPUT: usize = 64 * 1024;

/// What a scorer is given about one run.
pub(super) struct ScoreInput<'a> {
    /// The experiment's id (its judge runs' `experiment` tag).
    pub(super) experiment: &'a str,
    /// The variant the run belongs to.
    pub(super) variant: &'a str,
    /// The item it ran.
    pub(super) item: &'a Item,
    /// Its answer, if it gave one.
    pub(super) answer: Option<&'a str>,
    /// Its status (`completed`, `failed`, …).
    pub(super) status: &'a str,
}

/// Each `judge` scorer's spec, loaded and made ready before anything runs, then installed in
/// an engine of its own over the experiment's store.
pub(super) struct Judges {
    by_name: BTreeMap<String, Judge>,
}

struct Judge {
    file: RunFile,
    setup: String,
    engine: Option<Engine>,
}

impl Judges {
    /// Loads and prepares the spec of every `judge` among `scorers` (a bad one is refused
    /// here, before any run).
    pub(super) async fn load(scorers: &[Scorer], warn: Warn) -> Result<Judges, OpsError> {
        let mut by_name = BTreeMap::new();
        for s in scorers {
            let (ScorerKind::Judge, Some(spec)) = (s.decl.kind, &s.decl.spec) else {
                continue;
            };
            let file = super::load(spec, None)?;
            let (file, _) = super::prepare(file, Some("judge".into()), warn).await?;
            let setup = file.setup.to_json()?;
            by_name.insert(
                s.decl.name.clone(),
                Judge {
                    file,
                    setup,
                    engine: None,
                },
            );
        }
        Ok(Judges { by_name })
    }

    /// Gives each judge an engine over `store`, its providers and tools installed.
    pub(super) fn install(
        &mut self,
        store: &Arc<dyn Store>,
        config: &EngineConfig,
    ) -> Result<(), OpsError> {
        for judge in self.by_name.values_mut() {
            let engine = Engine::with_store(store.clone(), config.clone());
            judge.file.install(&engine)?;
            judge.engine = Some(engine);
        }
        Ok(())
    }
}

/// Every score of one run, by scorer name. An error of the store or the engine stops the
/// experiment; a scorer that cannot score (its program failed, its judge gave no score) gives
/// 0 with the reason.
pub(super) async fn score_all(
    scorers: &[Scorer],
    judges: &Judges,
    input: &ScoreInput<'_>,
) -> Result<BTreeMap<String, Score>, OpsError> {
    let mut scores = BTreeMap::new();
    for s in scorers {
        let score = match s.score_pure(input.item, input.answer) {
            Some(score) => score,
            None if s.decl.kind == ScorerKind::Command => {
                let argv = s.decl.command.as_deref().unwrap_or_default();
                run_command(argv, s.decl.dir.as_deref(), input).await
            }
            None => match judges.by_name.get(&s.decl.name) {
                Some(judge) => run_judge(&s.decl.name, judge, input).await?,
                None => Score::failed("internal: the judge was not loaded"),
            },
        };
        scores.insert(s.decl.name.clone(), score);
    }
    Ok(scores)
}

/// Runs a `command` scorer: the run as one JSON object on stdin, a score on stdout.
async fn run_command(argv: &[String], dir: Option<&Path>, input: &ScoreInput<'_>) -> Score {
    let Some((program, args)) = argv.split_first() else {
        return Score::failed("the scorer has no command");
    };
    let stdin = json!({
        "goal": input.item.goal,
        "answer": input.answer,
        "expected": input.item.expected,
        "metadata": input.item.metadata,
        "status": input.status,
        "item": input.item.id,
        "variant": input.variant,
    })
    .to_string();
    let mut command = tokio::process::Command::new(program);
    if let Some(dir) = dir {
        command.current_dir(dir);
    }
    let child = command
        .args(args)
        .env_clear()
        .envs(EnvPolicy::default().environment(std::env::vars_os()))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) => return Score::failed(format!("cannot start {program}: {e}")),
    };
    if let Some(mut pipe) = child.stdin.take() {
        // A program that does not read its input closes the pipe: that is its choice.
        let _ = pipe.write_all(stdin.as_bytes()).await;
    }
    let output = match crate::clock::timeout(COMMAND_SCORER_TIMEOUT, child.wait_with_output()).await
    {
        Ok(Ok(output)) => output,
        Ok(Err(e)) => return Score::failed(format!("{program} failed: {e}")),
        Err(_) => {
            return Score::failed(format!(
                "{program} took longer than {} s",
                COMMAND_SCORER_TIMEOUT.as_secs()
            ));
        }
    };
    let text = |bytes: &[u8]| {
        let cut = &bytes[..bytes.len().min(MAX_SCORER_OUTPUT)];
        crate::secrets::scrub_text(&String::from_utf8_lossy(cut))
            .trim()
            .to_owned()
    };
    if !output.status.success() {
        let stderr = text(&output.stderr);
        let first = stderr.lines().next().unwrap_or("");
        return Score::failed(format!("{program} exited {}: {first}", output.status));
    }
    parse_command_output(&text(&output.stdout))
}

/// A number from 0 to 1, or `{"score": N, "note": "…"}`.
fn parse_command_output(out: &str) -> Score {
    let value: Option<Value> = serde_json::from_str(out).ok();
    let (score, note) = match &value {
        Some(Value::Number(n)) => (n.as_f64(), None),
        Some(Value::Object(o)) => (
            o.get("score").and_then(Value::as_f64),
            o.get("note").and_then(Value::as_str).map(str::to_owned),
        ),
        _ => (None, None),
    };
    match score {
        Some(s) if (0.0..=1.0).contains(&s) => Score {
            score: s,
            note,
            judge_run: None,
        },
        _ => Score::failed(format!(
            "the scorer printed {}, not a number from 0 to 1 or {{\"score\": N}}",
            super::quoted(out)
        )),
    }
}

/// Runs a judge on one run's answer, as a run of its own, and reads its answer as a score.
async fn run_judge(name: &str, judge: &Judge, input: &ScoreInput<'_>) -> Result<Score, OpsError> {
    let engine = judge
        .engine
        .as_ref()
        .ok_or_else(|| OpsError::BadEval("internal: a judge without its engine".into()))?;
    let spec = super::eval::tagged(
        &judge.file,
        &[
            ("experiment", input.experiment),
            ("variant", input.variant),
            ("item", &input.item.id),
            ("scorer", name),
        ],
    )?;
    let run = new_run_id();
    let goal = judge_goal(input.item, input.answer);
    let handle = super::start::launch(
        engine,
        run.clone(),
        spec,
        &goal,
        Some(judge.setup.clone()),
        None,
    )
    .await?;
    let end = handle.wait().await?;
    let said = super::eval::answer_of(&end.state);
    let mut score = match said.as_deref().and_then(parse_judgement) {
        Some(s) => Score::of(s),
        None => Score::failed(match said {
            Some(text) => format!(
                "the judge's answer holds no score: {}",
                super::quoted(&text)
            ),
            None => format!("the judge's run ended {} without an answer", end.status),
        }),
    };
    score.judge_run = Some(run.to_string());
    Ok(score)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_output_reads_as_a_score() {
        assert_eq!(parse_command_output("1").score, 1.0);
        assert_eq!(parse_command_output("0.25").score, 0.25);
        let s = parse_command_output("{\"score\": 0.5, \"note\": \"half\"}");
        assert_eq!((s.score, s.note.as_deref()), (0.5, Some("half")));
        for bad in ["", "yes", "2", "{\"note\":\"x\"}"] {
            let s = parse_command_output(bad);
            assert_eq!(s.score, 0.0, "{bad}");
            assert!(s.note.is_some(), "{bad}");
        }
    }
}

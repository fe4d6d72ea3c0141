//! Experiments (`runtape eval`): every item of a dataset run under every variant of a spec,
//! each run recorded like any other and tagged `experiment=ID`, `variant=NAME` and `item=ID`,
//! each answer scored, the whole returned as a [`Report`]; and [`rescore`], which scores a
//! finished experiment again from its recorded answers and runs nothing but its judges.
//!
//! Everything that can be refused is refused before anything is written: the dataset, every
//! variant's spec (its providers and tools built once in memory), the scorers and their judge
//! specs. The pure parts (the dataset format, the scorers, the report) are [`crate::eval`];
//! performing `command` and `judge` scorers is the private `ops::eval_scoring`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures_util::StreamExt;

use super::eval_scoring::{Judges, ScoreInput, score_all};
use super::{EngineSettings, OpsError, engine_config, open_store_with};
use crate::config::RunFile;
use crate::eval::{
    Item, ItemResults, REPORT_TYPE, Report, RunResult, Scorer, VariantSummary, dataset, scorer,
};
use crate::exec::{Engine, new_run_id};
use crate::history;
use crate::machine::tags::tag_problem;
use crate::machine::{Outcome, RunId, RunSpec, RunState};
use crate::store::{RunRecord, Store};

/// The most runs an experiment drives at once when the caller does not say.
pub const DEFAULT_CONCURRENCY: usize = 4;

/// The name of the first spec's variant.
pub const BASE_VARIANT: &str = "base";

/// What to run: built by the caller, checked by [`run`].
#[derive(Debug)]
pub struct Experiment {
    /// The dataset file (JSON Lines, [`crate::eval::dataset`]).
    pub dataset: PathBuf,
    /// Each variant's name and spec file, the first one `base`.
    pub variants: Vec<(String, PathBuf)>,
    /// The scorers ([`load_scorers`]).
    pub scorers: Vec<Scorer>,
    /// The most runs driven at once (at least 1).
    pub concurrency: usize,
    /// Stops the experiment early once it holds `Some(grace)` (send it from a Ctrl-C handler):
    /// no item starts after that, the runs in flight stop as
    /// [`Engine::begin_shutdown`] stops them (calls in flight get `grace`, then each run rests
    /// `paused`, and `runtape resume` continues it), they are scored as they stand, and the
    /// report says it was stopped. `None`: the experiment runs to its end.
    pub stop: Option<tokio::sync::watch::Receiver<Option<Duration>>>,
}

fn bad(why: impl Into<String>) -> OpsError {
    OpsError::BadEval(why.into())
}

/// Reads and parses a dataset file; a bad line is one error naming the file and the line.
pub fn read_dataset(path: &Path) -> Result<Vec<Item>, OpsError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| bad(format!("cannot read the dataset {}: {e}", path.display())))?;
    dataset::parse(&text).map_err(|e| bad(format!("the dataset {}: {e}", path.display())))
}

/// `NAME=SPEC` (`--variant`): the name follows the tag rule, as it becomes the runs' `variant`
/// tag, and may not be `base` (the first spec's).
pub fn parse_variant(s: &str) -> Result<(String, PathBuf), OpsError> {
    let (name, spec) = s
        .split_once('=')
        .ok_or_else(|| bad(format!("--variant {}: write NAME=SPEC", super::quoted(s))))?;
    // The name follows the rule of a tag's key: short, lowercase, no spaces.
    if let Some(why) = tag_problem(name, "x") {
        let why = why.replace("the key", "the name");
        return Err(bad(format!("--variant {}: {why}", super::quoted(s))));
    }
    if name == BASE_VARIANT || spec.is_empty() {
        return Err(bad(format!(
            "--variant {}: write NAME=SPEC with a name other than `{BASE_VARIANT}` (the first spec's)",
            super::quoted(s)
        )));
    }
    Ok((name.to_owned(), PathBuf::from(spec)))
}

/// The scorers of `file` (`--scorers`), else `exact` alone.
pub fn load_scorers(file: Option<&Path>) -> Result<Vec<Scorer>, OpsError> {
    match file {
        Some(path) => scorer::load(path).map_err(bad),
        None => Ok(scorer::default_scorers()),
    }
}

/// Reads a report `runtape eval` wrote.
pub fn read_report(path: &Path) -> Result<Report, OpsError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| bad(format!("cannot read the report {}: {e}", path.display())))?;
    let report: Report = serde_json::from_str(&text).map_err(|e| {
        bad(format!(
            "{} is not a report `runtape eval` wrote: {e}",
            path.display()
        ))
    })?;
    if report.kind != REPORT_TYPE {
        return Err(bad(format!(
            "{} is not a report `runtape eval` wrote (its type is not {REPORT_TYPE})",
            path.display()
        )));
    }
    Ok(report)
}

/// Writes `report` to `path` whole: into a file beside it first, then renamed over it, so a
/// reader never sees half a report.
pub fn write_report(path: &Path, report: &Report) -> Result<(), OpsError> {
    let text = serde_json::to_string_pretty(report)
        .map_err(|e| bad(format!("cannot encode the report: {e}")))?;
    let partial = path.with_extension("json.partial");
    std::fs::write(&partial, text + "\n")
        .and_then(|()| std::fs::rename(&partial, path))
        .map_err(|e| bad(format!("cannot write the report {}: {e}", path.display())))
}

/// One variant made ready: its file prepared and installed in an engine of its own (two
/// variants may name different providers alike).
struct Variant {
    name: String,
    file: RunFile,
    setup: String,
    engine: Option<Engine>,
}

/// Runs `experiment` in the database `db` and returns its report. Every check is made before
/// the database is opened: a bad dataset, variant, spec or scorer changes nothing. At most
/// `concurrency` runs are driven at once; each run that ends (completed, failed, waiting for
/// a person) is scored as it stands.
pub async fn run(
    db: &Path,
    experiment: Experiment,
    settings: &EngineSettings,
) -> Result<Report, OpsError> {
    let items = read_dataset(&experiment.dataset)?;
    if experiment.concurrency == 0 {
        return Err(bad("--concurrency must be at least 1"));
    }
    let first_goal = items.first().map(|i| i.goal.clone());
    let mut variants = Vec::new();
    for (name, spec) in &experiment.variants {
        let file = super::load(spec, None)?;
        let (file, _) = super::prepare(file, first_goal.clone(), settings.warn).await?;
        let setup = file.setup.to_json()?;
        variants.push(Variant {
            name: name.clone(),
            file,
            setup,
            engine: None,
        });
    }
    let mut judges = Judges::load(&experiment.scorers, settings.warn).await?;

    let durability = settings.durability.unwrap_or_default();
    let store = open_store_with(db, true, durability, settings.warn)?;
    let config = engine_config(settings)?;
    for v in &mut variants {
        let engine = Engine::with_store(store.clone(), config.clone());
        v.file.install(&engine)?;
        v.engine = Some(engine);
    }
    judges.install(&store, &config)?;
    let engines: Vec<Engine> = variants.iter().filter_map(|v| v.engine.clone()).collect();
    let stopping = Stopping(experiment.stop.clone());
    let watcher = experiment
        .stop
        .clone()
        .map(|stop| tokio::spawn(stop_engines(stop, engines)));

    let id = new_run_id().to_string();
    let pairs = items
        .iter()
        .flat_map(|item| variants.iter().map(move |v| (item, v)));
    let results: Vec<Result<Option<Scored>, OpsError>> = futures_util::stream::iter(pairs)
        .map(|(item, v)| {
            let (id, scorers, judges) = (&id, &experiment.scorers, &judges);
            let stopping = &stopping;
            async move {
                // Asked to stop: nothing more starts.
                if stopping.grace().is_some() {
                    return Ok(None);
                }
                let mut result = run_item(id, v, item, stopping).await?;
                let input = ScoreInput {
                    experiment: id,
                    variant: &v.name,
                    item,
                    answer: result.answer.as_deref(),
                    status: &result.status,
                };
                result.scores = score_all(scorers, judges, &input).await?;
                result.settle();
                Ok(Some((item.id.clone(), v.name.clone(), result)))
            }
        })
        .buffer_unordered(experiment.concurrency)
        .collect()
        .await;

    if let Some(watcher) = watcher {
        watcher.abort();
    }
    let mut by_item: BTreeMap<String, BTreeMap<String, RunResult>> = BTreeMap::new();
    for r in results {
        if let Some((item, variant, result)) = r? {
            by_item.entry(item).or_default().insert(variant, result);
        }
    }
    let mut report = Report {
        kind: REPORT_TYPE.into(),
        stopped: stopping.grace().is_some(),
        experiment: id,
        dataset: experiment.dataset.display().to_string(),
        scorers: experiment.scorers.iter().map(|s| s.decl.clone()).collect(),
        variants: experiment
            .variants
            .iter()
            .map(|(name, spec)| VariantSummary::unscored(name, &spec.display().to_string()))
            .collect(),
        items: items
            .into_iter()
            .map(|item| ItemResults {
                results: by_item.remove(&item.id).unwrap_or_default(),
                item,
            })
            .collect(),
    };
    report.summarise();
    Ok(report)
}

/// The spec `file` runs with `tags` added (replacing any of the same key).
pub(super) fn tagged(file: &RunFile, tags: &[(&str, &str)]) -> Result<RunSpec, OpsError> {
    let mut spec = file.spec.spec().clone();
    for (key, value) in tags {
        spec.tags.insert((*key).to_owned(), (*value).to_owned());
    }
    RunSpec::build(spec).map_err(|e| bad(format!("{}: {e}", file.path.display())))
}

/// One item's run under one variant, scored: `(item id, variant name, result)`.
type Scored = (String, String, RunResult);

/// The experiment's stop ([`Experiment::stop`]), read by its items.
struct Stopping(Option<tokio::sync::watch::Receiver<Option<Duration>>>);

impl Stopping {
    /// The grace the experiment was asked to stop with; `None` while it goes on.
    fn grace(&self) -> Option<Duration> {
        self.0.as_ref().and_then(|stop| *stop.borrow())
    }
}

/// Waits until `stop` asks to stop, then stops every run `engines` drive with its grace.
async fn stop_engines(
    mut stop: tokio::sync::watch::Receiver<Option<Duration>>,
    engines: Vec<Engine>,
) {
    // The sender gone without asking: the experiment runs to its end.
    let Ok(Some(grace)) = stop.wait_for(Option::is_some).await.map(|g| *g) else {
        return;
    };
    for engine in &engines {
        engine.begin_shutdown(grace);
    }
}

/// Runs `item` under `variant` to its end (or until the experiment is stopped) and reads what
/// it did.
async fn run_item(
    experiment: &str,
    v: &Variant,
    item: &Item,
    stopping: &Stopping,
) -> Result<RunResult, OpsError> {
    let engine = v
        .engine
        .as_ref()
        .ok_or_else(|| bad("internal: a variant without its engine"))?;
    let spec = tagged(
        &v.file,
        &[
            ("experiment", experiment),
            ("variant", &v.name),
            ("item", &item.id),
        ],
    )?;
    let run = new_run_id();
    let handle = super::start::launch(
        engine,
        run.clone(),
        spec,
        &item.goal,
        Some(v.setup.clone()),
        None,
    )
    .await?;
    // A stop asked for while the run was being launched found no driver to stop: stop it now
    // (an engine's shutdown reaches the runs it drives when it is asked).
    if let Some(grace) = stopping.grace() {
        engine.begin_shutdown(grace);
    }
    let end = handle.wait().await?;
    let rec = history::record(engine.store().as_ref(), &run)?;
    Ok(result_of(&rec, answer_of(&end.state)))
}

/// A run's answer: its text, else its structured output as JSON.
pub(super) fn answer_of(state: &RunState) -> Option<String> {
    match state.outcome()? {
        Outcome::Completed { answer, output } => answer
            .clone()
            .or_else(|| output.as_ref().map(|o| o.to_string())),
        _ => None,
    }
}

fn result_of(rec: &RunRecord, answer: Option<String>) -> RunResult {
    RunResult {
        run: rec.id.to_string(),
        ui: format!("#/run/{}", rec.id),
        status: rec.shown_status().to_owned(),
        answer,
        reason: rec.reason(),
        cost_nanos: rec.cost_nanos,
        tokens: rec.tokens,
        latency_ms: rec.updated_ms.saturating_sub(rec.created_ms),
        scores: BTreeMap::new(),
        score: 0.0,
    }
}

/// Scores the finished experiment `report` again with `scorers` and returns it: a scorer of
/// the same name as one it was scored with replaces it, a new one is added. Every run's
/// answer is read back from the database `db`, after the run verifies (a run that does not,
/// or that is gone, is refused before anything is scored); no run of the experiment is driven
/// again, so no model or tool is called but a judge's.
pub async fn rescore(
    db: &Path,
    mut report: Report,
    scorers: Vec<Scorer>,
    settings: &EngineSettings,
) -> Result<Report, OpsError> {
    let mut judges = Judges::load(&scorers, settings.warn).await?;
    let durability = settings.durability.unwrap_or_default();
    let store = open_store_with(db, false, durability, settings.warn)?;
    // Read every answer first, so a run that does not verify refuses the whole rescore.
    let mut answers = Vec::new();
    for item in &report.items {
        for (variant, result) in &item.results {
            answers.push((variant.clone(), recorded(store.as_ref(), &result.run)?));
        }
    }
    judges.install(&store, &engine_config(settings)?)?;
    let mut answers = answers.into_iter();
    for item in &mut report.items {
        for (variant, result) in item.results.iter_mut() {
            let Some((_, (rec, answer))) = answers.next() else {
                return Err(bad("internal: an answer was not read"));
            };
            *result = RunResult {
                scores: std::mem::take(&mut result.scores),
                ..result_of(&rec, answer)
            };
            let input = ScoreInput {
                experiment: &report.experiment,
                variant,
                item: &item.item,
                answer: result.answer.as_deref(),
                status: &result.status,
            };
            result
                .scores
                .extend(score_all(&scorers, &judges, &input).await?);
            result.settle();
        }
    }
    for s in scorers {
        match report.scorers.iter_mut().find(|d| d.name == s.decl.name) {
            Some(known) => *known = s.decl,
            None => report.scorers.push(s.decl),
        }
    }
    report.summarise();
    Ok(report)
}

/// The row and the answer of a recorded run, once it verifies.
fn recorded(store: &dyn Store, run: &str) -> Result<(RunRecord, Option<String>), OpsError> {
    let run = RunId::new(run);
    if let Err(divergence) = history::verify(store, &run, None)? {
        return Err(OpsError::DoesNotVerify {
            run,
            divergence: Box::new(divergence),
        });
    }
    let rec = history::record(store, &run)?;
    let spec = history::spec_of(&rec)?;
    let state = history::state_at(store, &run, &spec, rec.seq)?.state;
    Ok((rec, answer_of(&state)))
}

//! `runtape eval SPEC --dataset FILE` and `runtape eval rescore REPORT --scorers FILE`: parse
//! the options, call [`crate::ops::eval`], write the report, print its summary and compare it
//! with a baseline (exit 1 on a regression).

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Subcommand};

use super::common::{CliError, at_least_one, db_path, outln, print_json, usd};
use super::{EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_PAUSED};
use crate::eval::Report;
use crate::ops::eval::{self as ops_eval, BASE_VARIANT, Experiment};
use crate::ops::{self, EngineSettings};
use crate::term::{StopSignals, note};

/// `runtape eval`'s options.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub(crate) struct EvalArgs {
    /// Score a finished experiment again.
    #[command(subcommand)]
    action: Option<EvalAction>,
    /// The spec file every goal runs under: the variant `base`.
    #[arg(required = true)]
    spec: Option<PathBuf>,
    /// The dataset: JSON Lines, one {"goal": …, "expected": …, "id": …} object per line.
    #[arg(long, value_name = "FILE.jsonl", required = true)]
    dataset: Option<PathBuf>,
    /// Another variant every goal also runs under: NAME=SPEC. Repeatable.
    #[arg(long, value_name = "NAME=SPEC")]
    variant: Vec<String>,
    /// How many runs to drive at once.
    #[arg(long, value_name = "N", default_value_t = ops_eval::DEFAULT_CONCURRENCY, value_parser = at_least_one)]
    concurrency: usize,
    /// On Ctrl-C, SIGTERM or SIGHUP: how long calls in flight may take to finish before they
    /// are cancelled and their runs pause (default: $RUNTAPE_STOP_GRACE_MS, else 5000).
    #[arg(long, value_name = "MS")]
    grace_ms: Option<u64>,
    #[command(flatten)]
    report: ReportOpts,
}

/// What both forms share: the scorers, the report, the baseline.
#[derive(Debug, Args)]
struct ReportOpts {
    /// The scorers (`[[scorers]]` tables: exact, regex, json_schema, command, judge); default
    /// `exact` alone.
    #[arg(long, value_name = "FILE.toml")]
    scorers: Option<PathBuf>,
    /// Where to write the report (default: eval-EXPERIMENT.json here; `rescore`: over REPORT).
    #[arg(long, short = 'o', value_name = "FILE")]
    out: Option<PathBuf>,
    /// A report to compare with: exit 1 when a variant of both scores lower (its mean or a
    /// scorer's) by more than --tolerance.
    #[arg(long, value_name = "REPORT")]
    baseline: Option<PathBuf>,
    /// How far below the baseline a score may fall before it counts as a regression.
    #[arg(long, value_name = "DELTA", default_value_t = 0.0)]
    tolerance: f64,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
}

/// `runtape eval`'s subcommands.
#[derive(Debug, Subcommand)]
enum EvalAction {
    /// Score a finished experiment again from its recorded answers; no run is driven again.
    ///
    /// Only a judge scorer starts runs, its own. Each run is verified before its answer is
    /// read (exit 1 when one does not verify). Scorers of the same name are replaced, new ones
    /// added; the report is written over REPORT unless --out says otherwise.
    Rescore {
        /// The report `runtape eval` wrote.
        report: PathBuf,
        #[command(flatten)]
        opts: ReportOpts,
    },
}

/// Runs `runtape eval …`.
pub(crate) async fn eval(db: Option<PathBuf>, args: EvalArgs) -> Result<u8, CliError> {
    let db_flag = db;
    let settings = EngineSettings {
        warn: note,
        ..EngineSettings::default()
    };
    if let Some(EvalAction::Rescore { report, opts }) = args.action {
        // Every input is checked before the database is opened.
        let scorers_file = opts.scorers.as_deref().ok_or_else(|| {
            CliError::usage("eval rescore needs --scorers FILE.toml: the scorers to add or replace")
        })?;
        let before = ops_eval::read_report(&report)?;
        let scorers = ops_eval::load_scorers(Some(scorers_file))?;
        let baseline = opts
            .baseline
            .as_deref()
            .map(ops_eval::read_report)
            .transpose()?;
        let db = db_path(db_flag.as_deref(), None);
        ops::open_existing(&db)?;
        let after = ops_eval::rescore(&db, before, scorers, &settings).await?;
        let out = opts.out.clone().unwrap_or(report);
        return finish(&after, &out, baseline.as_ref(), &opts);
    }
    // clap requires both with no subcommand.
    let (Some(spec), Some(dataset)) = (args.spec, args.dataset) else {
        return Err(CliError::usage("eval needs SPEC and --dataset FILE.jsonl"));
    };
    let opts = args.report;
    let baseline = opts
        .baseline
        .as_deref()
        .map(ops_eval::read_report)
        .transpose()?;
    let mut variants = vec![(BASE_VARIANT.to_owned(), spec.clone())];
    for v in &args.variant {
        let (name, path) = ops_eval::parse_variant(v)?;
        if variants.iter().any(|(n, _)| *n == name) {
            return Err(CliError::usage(format!(
                "--variant {name}: the name is given twice"
            )));
        }
        variants.push((name, path));
    }
    let scorers = ops_eval::load_scorers(opts.scorers.as_deref())?;
    let spec_db = ops::load(&spec, None)?.database;
    let db = db_path(db_flag.as_deref(), spec_db.as_deref());
    // The first stop signal stops the experiment gracefully and the report of what ran is
    // still written; a second one leaves at once.
    let mut signals = StopSignals::install()?;
    let (stop, stop_rx) = tokio::sync::watch::channel(None);
    let grace = match args.grace_ms {
        Some(ms) => Duration::from_millis(ms),
        None => ops::env_ms("RUNTAPE_STOP_GRACE_MS", super::DEFAULT_GRACE_MS, 0)?,
    };
    let watcher = tokio::spawn(async move {
        let first = signals.next().await;
        note(&format!(
            "\n{first}: stopping the experiment: no item starts now, runs in flight get up to {} ms, then pause; the report of what ran is written (a second signal leaves at once)",
            grace.as_millis()
        ));
        let _ = stop.send(Some(grace));
        let second = signals.next().await;
        note(&format!("{second}: leaving now; no report is written"));
        std::process::exit(i32::from(EXIT_INTERRUPTED));
    });
    let experiment = Experiment {
        dataset,
        variants,
        scorers,
        concurrency: args.concurrency,
        stop: Some(stop_rx),
    };
    let report = ops_eval::run(&db, experiment, &settings).await;
    watcher.abort();
    let report = report?;
    let out = opts
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("eval-{}.json", report.experiment)));
    let code = finish(&report, &out, baseline.as_ref(), &opts)?;
    if report.stopped {
        note(&format!(
            "stopped: the report holds the items that ran; the runs it stopped rest paused (`runtape ls --tag experiment={}`)",
            report.experiment
        ));
        return Ok(EXIT_PAUSED);
    }
    Ok(code)
}

/// Writes the report, prints it, and compares it with the baseline.
fn finish(
    report: &Report,
    out: &Path,
    baseline: Option<&Report>,
    opts: &ReportOpts,
) -> Result<u8, CliError> {
    ops_eval::write_report(out, report)?;
    let regressions = baseline
        .map(|b| report.regressions(b, opts.tolerance))
        .unwrap_or_default();
    if opts.json {
        let mut value = serde_json::to_value(report)
            .map_err(|e| CliError::internal(format!("cannot encode the report: {e}")))?;
        value["file"] = out.display().to_string().into();
        value["regressions"] = serde_json::to_value(&regressions)
            .map_err(|e| CliError::internal(format!("cannot encode the regressions: {e}")))?;
        print_json(&value)?;
    } else {
        print_report(report, out);
    }
    for r in &regressions {
        note(&format!(
            "regression: {} {} fell from {:.3} to {:.3}",
            r.variant, r.measure, r.baseline, r.now
        ));
    }
    Ok(if regressions.is_empty() {
        EXIT_OK
    } else {
        EXIT_FAILED
    })
}

fn print_report(report: &Report, out: &Path) {
    outln!(
        "experiment {}: {} items, report {}",
        report.experiment,
        report.items.len(),
        out.display()
    );
    let names: Vec<&str> = report.scorers.iter().map(|s| s.name.as_str()).collect();
    outln!(
        "{:<16}  {:>5}  {}  {:>9}  {:>10}  {:>8}  {:>10}",
        "variant",
        "score",
        names
            .iter()
            .map(|n| format!("{n:>8}"))
            .collect::<Vec<_>>()
            .join("  "),
        "completed",
        "cost",
        "tokens",
        "latency"
    );
    for v in &report.variants {
        let per: Vec<String> = names
            .iter()
            .map(|n| format!("{:>8.2}", v.scores.get(*n).copied().unwrap_or(0.0)))
            .collect();
        outln!(
            "{:<16}  {:>5.2}  {}  {:>9}  {:>10}  {:>8}  {:>8}ms",
            v.name,
            v.score,
            per.join("  "),
            format!("{}/{}", v.completed, v.items),
            usd(v.cost_nanos),
            v.tokens,
            v.latency_ms_mean
        );
    }
    for item in &report.items {
        let side: Vec<String> = report
            .variants
            .iter()
            .filter_map(|v| {
                let r = item.results.get(&v.name)?;
                Some(format!("{} {:.2} (run {})", v.name, r.score, r.run))
            })
            .collect();
        outln!("  {}: {}", item.item.id, side.join(" | "));
    }
}

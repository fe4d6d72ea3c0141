//! The experiments `runtape serve` shows: the reports `runtape eval` wrote into a folder (by
//! default `eval-EXPERIMENT.json` in the directory it ran in), listed newest first, and one
//! report by its experiment's id.

use std::path::Path;

use serde::Serialize;

use super::OpsError;
use crate::eval::{REPORT_TYPE, Report, VariantSummary};

/// The largest file read as a report: bigger files in the folder are skipped.
pub const MAX_REPORT_BYTES: u64 = 64 * 1024 * 1024;

/// The most reports listed.
pub const MAX_LISTED: usize = 500;

/// One experiment in a listing: its summary without its items.
#[derive(Clone, Debug, Serialize)]
pub struct ExperimentListing {
    /// The experiment's id.
    pub experiment: String,
    /// The report's file name in the folder.
    pub file: String,
    /// The dataset it ran.
    pub dataset: String,
    /// Its items.
    pub items: usize,
    /// The scorers' names.
    pub scorers: Vec<String>,
    /// Each variant's summary.
    pub variants: Vec<VariantSummary>,
}

/// The reports in `dir` (files ending `.json`, at most [`MAX_REPORT_BYTES`], whose `type` is
/// a report's), newest experiment first, at most [`MAX_LISTED`]. Other files are skipped
/// without a word; a folder that cannot be read lists nothing.
pub fn experiments_in(dir: &Path) -> Vec<ExperimentListing> {
    let mut out: Vec<ExperimentListing> = reports_in(dir)
        .map(|(file, r)| ExperimentListing {
            experiment: r.experiment,
            file,
            dataset: r.dataset,
            items: r.items.len(),
            scorers: r.scorers.into_iter().map(|s| s.name).collect(),
            variants: r.variants,
        })
        .collect();
    // Experiment ids begin with their creation time, so a reverse sort is newest first.
    out.sort_by(|a, b| b.experiment.cmp(&a.experiment).then(a.file.cmp(&b.file)));
    out.truncate(MAX_LISTED);
    out
}

/// The report of `experiment` in `dir` (the newest file when several hold it, as `rescore
/// --out` can leave).
pub fn experiment_in(dir: &Path, experiment: &str) -> Result<Report, OpsError> {
    reports_in(dir)
        .filter(|(_, r)| r.experiment == experiment)
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, r)| r)
        .ok_or_else(|| OpsError::UnknownExperiment(super::quoted(experiment)))
}

fn reports_in(dir: &Path) -> impl Iterator<Item = (String, Report)> {
    let entries = std::fs::read_dir(dir).into_iter().flatten().flatten();
    entries.filter_map(|entry| {
        let name = entry.file_name().into_string().ok()?;
        let small = entry
            .metadata()
            .is_ok_and(|m| m.is_file() && m.len() <= MAX_REPORT_BYTES);
        if !name.ends_with(".json") || !small {
            return None;
        }
        let text = std::fs::read_to_string(entry.path()).ok()?;
        // A cheap look before a full parse: most JSON files are not reports.
        if !text.contains(REPORT_TYPE) {
            return None;
        }
        let report: Report = serde_json::from_str(&text).ok()?;
        (report.kind == REPORT_TYPE).then_some((name, report))
    })
}

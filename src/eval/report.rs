//! An experiment's report: what each variant's run of each item answered, what it cost and
//! how it scored, and the summary per variant. Written as JSON by `runtape eval`, read back by
//! `eval rescore` and `--baseline`; the summaries and the comparison with a baseline are pure.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Item, Score, ScorerDecl};

/// The `type` every report carries, so a file that is not one is refused by name.
pub const REPORT_TYPE: &str = "eval.report";

/// A whole experiment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Always [`REPORT_TYPE`].
    #[serde(rename = "type")]
    pub kind: String,
    /// The experiment was stopped before every item ran (a Ctrl-C): the items not run have
    /// no result, and the runs it stopped rest `paused` and are scored as they stood.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stopped: bool,
    /// The experiment's id: the `experiment` tag of every run it made.
    pub experiment: String,
    /// The dataset file it ran.
    pub dataset: String,
    /// Every scorer it was scored with, in order.
    pub scorers: Vec<ScorerDecl>,
    /// Each variant: its name, spec file and summary, in the order given.
    pub variants: Vec<VariantSummary>,
    /// Each item with each variant's result.
    pub items: Vec<ItemResults>,
}

/// One variant's totals: set by [`Report::summarise`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VariantSummary {
    /// Its name (`--variant NAME=SPEC`; the first spec is `base`).
    pub name: String,
    /// Its spec file.
    pub spec: String,
    /// The mean over items of each item's mean score.
    pub score: f64,
    /// The mean over items per scorer.
    pub scores: BTreeMap<String, f64>,
    /// Items run.
    pub items: usize,
    /// Items whose run completed.
    pub completed: usize,
    /// What its runs cost, in nanodollars.
    pub cost_nanos: u64,
    /// Tokens its runs used.
    pub tokens: u64,
    /// The mean of its runs' wall time from creation to their last change, ms.
    pub latency_ms_mean: u64,
    /// The largest such wall time, ms.
    pub latency_ms_max: u64,
}

/// One item and what each variant made of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ItemResults {
    /// The item as the dataset gave it.
    #[serde(flatten)]
    pub item: Item,
    /// By variant name.
    pub results: BTreeMap<String, RunResult>,
}

/// One run of one item under one variant.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// The run's id.
    pub run: String,
    /// Its link in `runtape serve`'s page (relative to where it is served).
    pub ui: String,
    /// Its status when scored (`completed`, `failed`, …).
    pub status: String,
    /// Its answer, when it completed with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// Why it did not complete, when it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What it cost, in nanodollars.
    pub cost_nanos: u64,
    /// Tokens it used.
    pub tokens: u64,
    /// Wall ms from its creation to its last change.
    pub latency_ms: u64,
    /// By scorer name.
    pub scores: BTreeMap<String, Score>,
    /// The mean of `scores`.
    pub score: f64,
}

/// A variant's score (or one scorer's) that fell below the baseline's.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Regression {
    /// The variant.
    pub variant: String,
    /// `score` (the variant's mean) or a scorer's name.
    pub measure: String,
    /// The baseline's value.
    pub baseline: f64,
    /// This report's value.
    pub now: f64,
}

impl VariantSummary {
    /// The summary of variant `name` (spec file `spec`) before anything is summed:
    /// [`Report::summarise`] fills it in.
    pub fn unscored(name: &str, spec: &str) -> VariantSummary {
        VariantSummary {
            name: name.to_owned(),
            spec: spec.to_owned(),
            score: 0.0,
            scores: BTreeMap::new(),
            items: 0,
            completed: 0,
            cost_nanos: 0,
            tokens: 0,
            latency_ms_mean: 0,
            latency_ms_max: 0,
        }
    }
}

impl RunResult {
    /// Sets [`score`](Self::score) to the mean of the scores (0 without any).
    pub fn settle(&mut self) {
        self.score = mean(self.scores.values().map(|s| s.score));
    }
}

impl Report {
    /// Recomputes every variant's summary from the items' results. Call after the results or
    /// their scores change.
    pub fn summarise(&mut self) {
        for v in &mut self.variants {
            let runs: Vec<&RunResult> = self
                .items
                .iter()
                .filter_map(|i| i.results.get(&v.name))
                .collect();
            v.items = runs.len();
            v.completed = runs.iter().filter(|r| r.status == "completed").count();
            v.score = mean(runs.iter().map(|r| r.score));
            v.scores = self
                .scorers
                .iter()
                .map(|s| {
                    let each = runs
                        .iter()
                        .map(|r| r.scores.get(&s.name).map_or(0.0, |x| x.score));
                    (s.name.clone(), mean(each))
                })
                .collect();
            v.cost_nanos = runs.iter().map(|r| r.cost_nanos).sum();
            v.tokens = runs.iter().map(|r| r.tokens).sum();
            let total: u64 = runs.iter().map(|r| r.latency_ms).sum();
            v.latency_ms_mean = total.checked_div(runs.len() as u64).unwrap_or(0);
            v.latency_ms_max = runs.iter().map(|r| r.latency_ms).max().unwrap_or(0);
        }
    }

    /// Where this report scores lower than `baseline` by more than `tolerance`: per variant
    /// both reports hold, each scorer both were scored with, and the variant's mean score when
    /// both were scored with the same scorers (a mean over other scorers compares nothing).
    /// Empty means no regression.
    pub fn regressions(&self, baseline: &Report, tolerance: f64) -> Vec<Regression> {
        fn names(r: &Report) -> Vec<&str> {
            let mut n: Vec<&str> = r.scorers.iter().map(|s| s.name.as_str()).collect();
            n.sort_unstable();
            n
        }
        let same_scorers = names(self) == names(baseline);
        let mut out = Vec::new();
        for now in &self.variants {
            let Some(before) = baseline.variants.iter().find(|b| b.name == now.name) else {
                continue;
            };
            let mean = same_scorers.then_some(("score", before.score, now.score));
            let measures = mean
                .into_iter()
                .chain(now.scores.iter().filter_map(|(name, value)| {
                    before.scores.get(name).map(|b| (name.as_str(), *b, *value))
                }));
            for (measure, baseline, value) in measures {
                if value + tolerance < baseline {
                    out.push(Regression {
                        variant: now.name.clone(),
                        measure: measure.to_owned(),
                        baseline,
                        now: value,
                    });
                }
            }
        }
        out
    }
}

fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = values.fold((0.0, 0u32), |(s, n), v| (s + v, n + 1));
    if n == 0 { 0.0 } else { sum / f64::from(n) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(score: f64, status: &str) -> RunResult {
        RunResult {
            run: "r".into(),
            ui: "#/run/r".into(),
            status: status.into(),
            answer: None,
            reason: None,
            cost_nanos: 10,
            tokens: 3,
            latency_ms: 4,
            scores: BTreeMap::from([("exact".to_owned(), Score::of(score))]),
            score,
        }
    }

    fn report(scores: &[f64]) -> Report {
        let items = scores
            .iter()
            .enumerate()
            .map(|(i, s)| ItemResults {
                item: Item {
                    id: i.to_string(),
                    goal: "g".into(),
                    expected: None,
                    metadata: Default::default(),
                },
                results: BTreeMap::from([("base".to_owned(), result(*s, "completed"))]),
            })
            .collect();
        let mut r = Report {
            stopped: false,
            kind: REPORT_TYPE.into(),
            experiment: "e".into(),
            dataset: "d".into(),
            scorers: vec![super::super::scorer::default_scorers().remove(0).decl],
            variants: vec![VariantSummary::unscored("base", "s")],
            items,
        };
        r.summarise();
        r
    }

    #[test]
    fn summaries_add_up_and_regressions_are_found() {
        let good = report(&[1.0, 1.0, 0.0, 1.0]);
        let v = &good.variants[0];
        assert_eq!(
            (v.items, v.completed, v.cost_nanos, v.tokens),
            (4, 4, 40, 12)
        );
        assert_eq!(v.score, 0.75);
        assert_eq!(v.scores["exact"], 0.75);
        let worse = report(&[1.0, 0.0, 0.0, 1.0]);
        let found = worse.regressions(&good, 0.0);
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!((found[0].baseline, found[0].now), (0.75, 0.5));
        assert!(
            worse.regressions(&good, 0.25).is_empty(),
            "within tolerance"
        );
        assert!(
            good.regressions(&worse, 0.0).is_empty(),
            "better is no regression"
        );
    }
}

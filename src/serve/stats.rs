//! The aggregate views' routes: what the runs add up to ([`ops::run_stats`]) and how long
//! each kind of step takes ([`ops::step_durations`]), as JSON for the page's Stats view.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::Response;
use serde::Deserialize;
use serde_json::json;

use super::error::ApiError;
use super::routes::{query, safe_json};
use super::state::App;
use crate::ops::{self, quoted};

/// `?since=&bucket=` of the run aggregates.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StatsQuery {
    /// Runs created at or after, wall ms (default: every run).
    since: Option<u64>,
    /// `minute`, `hour` (the default) or `day`.
    bucket: Option<String>,
}

/// The most runs `GET /api/stats/steps` reads the steps of.
const MAX_STEP_RUNS: usize = 1000;

/// `?runs=N` of the step durations.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StepsQuery {
    /// The newest runs to read (default 200, at most [`MAX_STEP_RUNS`]).
    runs: Option<usize>,
}

fn bucket_ms(bucket: Option<&str>) -> Result<u64, ApiError> {
    match bucket.unwrap_or("hour") {
        "minute" => Ok(60_000),
        "hour" => Ok(3_600_000),
        "day" => Ok(86_400_000),
        other => Err(ApiError::bad(format!(
            "bucket `{}` is not minute, hour or day",
            quoted(other)
        ))),
    }
}

async fn stats(
    app: App,
    q: Result<Query<StatsQuery>, QueryRejection>,
    pick: fn(crate::store::RunStats, u64) -> serde_json::Value,
) -> Result<Response, ApiError> {
    let q = query(q)?;
    let bucket = bucket_ms(q.bucket.as_deref())?;
    let since = q.since.unwrap_or(0);
    let v = app
        .blocking(move |app| {
            Ok(pick(
                ops::run_stats(app.store.as_ref(), since, bucket)?,
                bucket,
            ))
        })
        .await?;
    Ok(safe_json(axum::http::StatusCode::OK, &v))
}

/// `GET /api/stats/status`: runs per creation-time bucket and status.
pub(crate) async fn status(
    State(app): State<App>,
    q: Result<Query<StatsQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    stats(
        app,
        q,
        |s, bucket| json!({"type": "runs_by_status", "bucket_ms": bucket, "rows": s.by_status}),
    )
    .await
}

/// `GET /api/stats/spend`: cost and tokens per entry agent and model.
pub(crate) async fn spend(
    State(app): State<App>,
    q: Result<Query<StatsQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    stats(app, q, |s, _| json!({"type": "spend", "rows": s.spend})).await
}

/// `GET /api/stats/failures`: failed runs per error class, with the newest reason of each.
pub(crate) async fn failures(
    State(app): State<App>,
    q: Result<Query<StatsQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    stats(
        app,
        q,
        |s, _| json!({"type": "failures", "rows": s.failures}),
    )
    .await
}

/// `GET /api/stats/steps`: p50 and p95 duration of each kind of step over the newest runs.
pub(crate) async fn steps(
    State(app): State<App>,
    q: Result<Query<StepsQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let runs = query(q)?.runs.unwrap_or(200);
    if !(1..=MAX_STEP_RUNS).contains(&runs) {
        return Err(ApiError::bad(format!(
            "runs `{runs}` is not from 1 to {MAX_STEP_RUNS}"
        )));
    }
    let v = app
        .blocking(move |app| {
            let rows = ops::step_durations(app.store.as_ref(), runs)?;
            Ok(json!({"type": "step_durations", "runs": runs, "rows": rows}))
        })
        .await?;
    Ok(safe_json(axum::http::StatusCode::OK, &v))
}

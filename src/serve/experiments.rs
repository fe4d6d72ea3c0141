//! The experiments' routes: the reports `runtape eval` wrote into the folder given by
//! `--experiments` (default: the directory the server started in), through
//! [`ops::experiments`], for the page's Experiments view.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::json;

use super::error::ApiError;
use super::routes::safe_json;
use super::state::App;
use crate::ops;

/// `GET /api/experiments`: `{type: "experiments", experiments: [...]}`, newest first.
pub(crate) async fn list(State(app): State<App>) -> Result<Response, ApiError> {
    let listed = app
        .blocking(|app| Ok(ops::experiments::experiments_in(&app.experiments_dir)))
        .await?;
    Ok(safe_json(
        StatusCode::OK,
        &json!({"type": "experiments", "experiments": listed}),
    ))
}

/// `GET /api/experiments/{id}`: the experiment's whole report (404 when no report holds it).
pub(crate) async fn one(
    State(app): State<App>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let report = app
        .blocking(move |app| Ok(ops::experiments::experiment_in(&app.experiments_dir, &id)?))
        .await?;
    Ok(safe_json(StatusCode::OK, &report))
}

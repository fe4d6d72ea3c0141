//! The state-changing routes. Each does what the matching command does, through the same
//! operations ([`crate::ops`]: `runtape run`, `resume --approve|--reject|--input|--raise`,
//! `pause`, `cancel`, `fork`), and ends up in the run's history like them. A run this server starts or takes up
//! is driven by the server in the background until it ends or rests; the answer comes once
//! the server holds the run (or the command's refusal, with the CLI's words).
//!
//! Anyone who may call these may run programs as the server's user: a spec's command tools
//! are programs. That is why [`super::security`] guards them.

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use serde::Deserialize;
use serde_json::json;

use super::error::ApiError;
use super::routes::{run_ref, safe_json};
use super::state::App;
use crate::config;
use crate::exec::{Engine, EngineConfig, ForkMode, TapeEnd, new_run_id};
use crate::machine::RunId;
use crate::ops::{self, Answer, Edit, OpsError, Raise};

/// A JSON body this endpoint does not take, as one line.
fn body<T>(b: Result<Json<T>, JsonRejection>) -> Result<T, ApiError> {
    b.map(|Json(t)| t).map_err(ApiError::from)
}

/// An optional body: a request without one (and without a `Content-Type`) is the same as
/// `{}`; a body of another type is refused like any.
fn optional<T: Default>(
    headers: &HeaderMap,
    b: Result<Json<T>, JsonRejection>,
) -> Result<T, ApiError> {
    match b {
        Err(JsonRejection::MissingJsonContentType(_))
            if !headers.contains_key(header::CONTENT_TYPE) =>
        {
            Ok(T::default())
        }
        other => body(other),
    }
}

fn accepted(run: &RunId, action: &str) -> Response {
    safe_json(
        StatusCode::ACCEPTED,
        &json!({"type": "run", "id": run, "action": action}),
    )
}

/// The `200` answer of a control command (`pause`, `cancel`) that did its work on the stored
/// run: `message` is what the command says, in the CLI's words.
fn done(run: &RunId, action: &str, message: &str) -> Response {
    safe_json(
        StatusCode::OK,
        &json!({"type": "run", "id": run, "action": action, "message": message}),
    )
}

/// `POST /api/runs`: start a run from a spec file on the server, or from spec text.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Start {
    /// A spec file on the server (relative to where the server was started).
    spec: Option<String>,
    /// Spec text (TOML); its relative paths start at the server's `--spec-dir`.
    spec_toml: Option<String>,
    /// The goal (default: the spec's `goal`).
    goal: Option<String>,
}

/// Starts a run as `runtape run SPEC [GOAL]` does, in this server's database (which wins over
/// a `database` the spec names, as `--db` does).
pub(crate) async fn start(
    State(app): State<App>,
    b: Result<Json<Start>, JsonRejection>,
) -> Result<Response, ApiError> {
    let s = body(b)?;
    let file = match (s.spec, s.spec_toml) {
        (Some(path), None) => config::load(std::path::Path::new(&path)),
        (None, Some(text)) => config::load_text(&app.spec_dir.join("uploaded.toml"), &text),
        _ => {
            return Err(ApiError::bad(
                "give exactly one of `spec` (a spec file's path on the server) and `spec_toml` (the spec's text)",
            ));
        }
    }?;
    let (file, goal) = ops::prepare(file, s.goal, crate::term::note).await?;
    let engine = app.engine()?;
    file.install(&engine)?;
    let id = new_run_id();
    let handle = ops::start(&engine, id.clone(), &file, &goal, None).await?;
    app.drive(engine, handle);
    Ok(safe_json(
        StatusCode::CREATED,
        &json!({"type": "run", "id": id, "action": "started"}),
    ))
}

/// The body of `resume` and the answers: which call (when several wait) and budget raises
/// to commit first (`budget.KEY=VALUE`, `run.KEY=VALUE`, `AGENT.KEY=VALUE`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Resume {
    call: Option<String>,
    #[serde(default)]
    raise: Vec<String>,
}

/// Takes `run` up with `answer`, as `runtape resume` does, and drives it here.
async fn take(
    app: &App,
    id: &str,
    answer: Answer,
    call: Option<String>,
    raises: Vec<String>,
    action: &str,
) -> Result<Response, ApiError> {
    let run = run_ref(id)?;
    let raises = raises
        .iter()
        .map(|r| Raise::parse(r))
        .collect::<Result<Vec<_>, OpsError>>()?;
    let engine = app.engine()?;
    let handle = ops::resume(&engine, &run, answer, call.as_deref(), &raises).await?;
    app.drive(engine, handle);
    Ok(accepted(&run, action))
}

/// `POST /api/runs/{id}/resume`: `runtape resume RUN [--raise …]`.
pub(crate) async fn resume(
    State(app): State<App>,
    Path(id): Path<String>,
    headers: HeaderMap,
    b: Result<Json<Resume>, JsonRejection>,
) -> Result<Response, ApiError> {
    let r = optional(&headers, b)?;
    take(&app, &id, Answer::None, r.call, r.raise, "resumed").await
}

/// `POST /api/runs/{id}/approve`: `runtape resume RUN --approve [--call ID]`.
pub(crate) async fn approve(
    State(app): State<App>,
    Path(id): Path<String>,
    headers: HeaderMap,
    b: Result<Json<Resume>, JsonRejection>,
) -> Result<Response, ApiError> {
    let r = optional(&headers, b)?;
    take(&app, &id, Answer::Approve, r.call, r.raise, "approved").await
}

/// The body of `reject`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Reject {
    call: Option<String>,
    reason: Option<String>,
    #[serde(default)]
    raise: Vec<String>,
}

/// `POST /api/runs/{id}/reject`: `runtape resume RUN --reject [REASON] [--call ID]`.
pub(crate) async fn reject(
    State(app): State<App>,
    Path(id): Path<String>,
    headers: HeaderMap,
    b: Result<Json<Reject>, JsonRejection>,
) -> Result<Response, ApiError> {
    let r = optional(&headers, b)?;
    let reason = r.reason.filter(|s| !s.is_empty());
    take(
        &app,
        &id,
        Answer::Reject(reason),
        r.call,
        r.raise,
        "rejected",
    )
    .await
}

/// The body of `answer`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AnswerBody {
    text: String,
    call: Option<String>,
    #[serde(default)]
    raise: Vec<String>,
}

/// `POST /api/runs/{id}/answer`: `runtape resume RUN --input TEXT [--call ID]`.
pub(crate) async fn answer(
    State(app): State<App>,
    Path(id): Path<String>,
    b: Result<Json<AnswerBody>, JsonRejection>,
) -> Result<Response, ApiError> {
    let a = body(b)?;
    take(
        &app,
        &id,
        Answer::Input(a.text),
        a.call,
        a.raise,
        "answered",
    )
    .await
}

/// The body of `raise`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RaiseBody {
    raise: Vec<String>,
}

/// `POST /api/runs/{id}/raise`: `runtape resume RUN --raise KEY=VALUE…`.
pub(crate) async fn raise(
    State(app): State<App>,
    Path(id): Path<String>,
    b: Result<Json<RaiseBody>, JsonRejection>,
) -> Result<Response, ApiError> {
    let r = body(b)?;
    if r.raise.is_empty() {
        return Err(ApiError::bad(
            "`raise` is empty: give at least one budget.KEY=VALUE, run.KEY=VALUE or AGENT.KEY=VALUE",
        ));
    }
    take(&app, &id, Answer::None, None, r.raise, "raised").await
}

/// `POST /api/runs/{id}/pause`: `runtape pause RUN`.
pub(crate) async fn pause(
    State(app): State<App>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let run = run_ref(&id)?;
    let engine = Engine::with_store(app.store.clone(), EngineConfig::default());
    let said = ops::pause(&engine, &run).await?;
    Ok(done(&run, "pause", &said.to_string()))
}

/// The body of `cancel`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Cancel {
    reason: Option<String>,
}

/// `POST /api/runs/{id}/cancel`: `runtape cancel RUN [--reason R]`.
pub(crate) async fn cancel(
    State(app): State<App>,
    Path(id): Path<String>,
    headers: HeaderMap,
    b: Result<Json<Cancel>, JsonRejection>,
) -> Result<Response, ApiError> {
    let run = run_ref(&id)?;
    let c = optional(&headers, b)?;
    let engine = Engine::with_store(app.store.clone(), EngineConfig::default());
    let said = ops::cancel(&engine, &run, c.reason).await?;
    Ok(done(&run, "cancel", &said.to_string()))
}

/// The body of `fork`: the step, edits as `--edit` takes them, and the mode.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Fork {
    seq: u64,
    #[serde(default)]
    edits: Vec<String>,
    #[serde(default)]
    tape: bool,
    #[serde(default)]
    stop_on_divergence: bool,
}

/// `POST /api/runs/{id}/fork`: `runtape fork RUN@SEQ [--edit …] [--tape
/// [--stop-on-divergence]]`; answers with the fork's id.
pub(crate) async fn fork(
    State(app): State<App>,
    Path(id): Path<String>,
    b: Result<Json<Fork>, JsonRejection>,
) -> Result<Response, ApiError> {
    let run = run_ref(&id)?;
    let f = body(b)?;
    if f.stop_on_divergence && !f.tape {
        return Err(ApiError::bad(
            "`stop_on_divergence` needs `tape`: a live fork has no recording to diverge from",
        ));
    }
    let edits = f
        .edits
        .iter()
        .map(|e| Edit::parse(e))
        .collect::<Result<Vec<_>, OpsError>>()?;
    let mode = match (f.tape, f.stop_on_divergence) {
        (false, _) => ForkMode::Live,
        (true, false) => ForkMode::Tape(TapeEnd::GoLive),
        (true, true) => ForkMode::Tape(TapeEnd::Stop),
    };
    let engine = app.engine()?;
    let handle = ops::fork(&engine, &run, f.seq, &edits, mode).await?;
    let fork = handle.run_id().clone();
    app.drive(engine, handle);
    Ok(safe_json(
        StatusCode::CREATED,
        &json!({"type": "run", "id": fork, "action": "forked", "parent": run, "at": f.seq}),
    ))
}

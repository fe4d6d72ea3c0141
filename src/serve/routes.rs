//! Every route, in one table ([`ROUTES`]) that builds the router and that
//! `/openapi.json` must match (a test checks both ways), and the read-only handlers: each
//! returns what the matching `runtape … --json` command prints, through the same history
//! functions.

use axum::Router;
use axum::extract::rejection::QueryRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::error::ApiError;
use super::state::App;
use super::watch::{ServedRun, run_view};
use super::{actions, experiments, security, sse, stats, ui};
use crate::machine::RunId;
use crate::ops::{self, EntryView, RunAt, WaitingCall, parse_run_at, quoted};

/// A route: method, path (axum syntax, `{id}` for a parameter) and its handler.
pub(crate) type Route = (&'static str, &'static str, fn() -> MethodRouter<App>);

/// Every route the server answers. `/openapi.json` documents exactly these.
pub(crate) const ROUTES: &[Route] = &[
    ("GET", "/", || get(ui::index)),
    ("GET", "/app.js", || get(ui::script)),
    ("GET", "/app.css", || get(ui::style)),
    ("GET", "/experiments.js", || get(ui::experiments_script)),
    ("GET", "/openapi.json", || get(openapi)),
    ("GET", "/api/info", || get(info)),
    ("GET", "/api/statechart.svg", || get(statechart)),
    ("GET", "/api/runs", || get(list_runs)),
    ("POST", "/api/runs", || post(actions::start)),
    ("GET", "/api/runs/{id}", || get(get_run)),
    ("GET", "/api/runs/{id}/timeline", || get(timeline)),
    ("GET", "/api/runs/{id}/steps/{seq}", || get(step)),
    ("GET", "/api/runs/{id}/receipts", || get(receipts)),
    ("GET", "/api/runs/{id}/files/{digest}", || {
        get(attached_file)
    }),
    ("GET", "/api/runs/{id}/verify", || get(verify)),
    ("GET", "/api/runs/{id}/events", || get(sse::events)),
    ("GET", "/api/diff", || get(diff)),
    ("GET", "/api/stats/status", || get(stats::status)),
    ("GET", "/api/stats/spend", || get(stats::spend)),
    ("GET", "/api/stats/failures", || get(stats::failures)),
    ("GET", "/api/stats/steps", || get(stats::steps)),
    ("GET", "/api/schedules", || get(schedules)),
    ("GET", "/api/experiments", || get(experiments::list)),
    ("GET", "/api/experiments/{id}", || get(experiments::one)),
    ("POST", "/api/runs/{id}/resume", || post(actions::resume)),
    ("POST", "/api/runs/{id}/approve", || post(actions::approve)),
    ("POST", "/api/runs/{id}/reject", || post(actions::reject)),
    ("POST", "/api/runs/{id}/answer", || post(actions::answer)),
    ("POST", "/api/runs/{id}/raise", || post(actions::raise)),
    ("POST", "/api/runs/{id}/pause", || post(actions::pause)),
    ("POST", "/api/runs/{id}/cancel", || post(actions::cancel)),
    ("POST", "/api/runs/{id}/fork", || post(actions::fork)),
];

/// The OpenAPI document of [`ROUTES`].
pub(crate) const OPENAPI: &str = include_str!("openapi.json");

/// The whole application: every route behind the security guard, bodies capped and read
/// within `body_timeout` ([`super::limits::body_deadline`]).
pub(crate) fn router(app: App, body_timeout: super::limits::BodyTimeout) -> Router {
    let mut r: Router<App> = Router::new();
    for (_, path, make) in ROUTES {
        r = r.route(path, make());
    }
    r.fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(security::MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn_with_state(
            body_timeout,
            super::limits::body_deadline,
        ))
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            security::guard,
        ))
        .with_state(app)
}

async fn not_found() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "no such route; GET /openapi.json lists every route",
    )
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "this route does not take that method; GET /openapi.json lists every route",
    )
}

/// A run id from a path, checked by shape as the command line checks it.
pub(crate) fn run_ref(id: &str) -> Result<RunId, ApiError> {
    match parse_run_at(id)? {
        (run, None) => Ok(run),
        (_, Some(_)) => Err(ApiError::bad(
            "a run id here has no @SEQ; steps are /api/runs/{id}/steps/{seq}",
        )),
    }
}

/// A query string this endpoint does not take, as one line.
pub(crate) fn query<T>(q: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    q.map(|Query(t)| t).map_err(|e| {
        ApiError::bad(format!(
            "the query string is not what this endpoint takes: {}",
            e.body_text()
        ))
    })
}

/// A value safe for every JSON reader (integers past 2^53 as strings), as a response.
pub(crate) fn safe_json(status: StatusCode, v: &impl Serialize) -> Response {
    match crate::ops::json::encode(v) {
        Ok(body) => (status, [(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => ApiError::internal(format!("cannot encode the answer: {e}")).into_response(),
    }
}

fn ok(v: &impl Serialize) -> Response {
    safe_json(StatusCode::OK, v)
}

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

async fn info(State(app): State<App>) -> Response {
    ok(&json!({
        "type": "info",
        "version": env!("CARGO_PKG_VERSION"),
        "db": app.db.display().to_string(),
        "token_required": app.policy.token.is_some(),
        "cors": app.policy.cors,
    }))
}

async fn statechart() -> Response {
    (
        [(header::CONTENT_TYPE, "image/svg+xml")],
        super::statechart::svg(),
    )
        .into_response()
}

/// `GET /api/runs`: a page of the runs `ls` lists, filtered and sorted by the store
/// ([`ops::run_query`] names every filter), with the cursor of the next page.
async fn list_runs(State(app): State<App>, RawQuery(raw): RawQuery) -> Result<Response, ApiError> {
    let q = ops::run_query(&query_pairs(raw.as_deref().unwrap_or(""))?)?;
    let v = app
        .blocking(move |app| {
            let (rows, next) = ops::run_page(app.store.as_ref(), &q)?;
            let runs: Vec<ServedRun> = rows.iter().map(|r| run_view(&app, r)).collect();
            Ok(RunsPage {
                kind: "runs",
                now_ms: crate::clock::wall_ms(),
                runs,
                next,
            })
        })
        .await?;
    Ok(ok(&v))
}

/// A query string's `NAME=VALUE` pairs, in order, `+` and `%XX` decoded (a name may repeat).
fn query_pairs(raw: &str) -> Result<Vec<(String, String)>, ApiError> {
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(&s.replace('+', " "))
            .decode_utf8()
            .map(|c| c.into_owned())
            .map_err(|_| ApiError::bad("the query string is not UTF-8 once decoded"))
    };
    raw.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (name, value) = p.split_once('=').unwrap_or((p, ""));
            Ok((decode(name)?, decode(value)?))
        })
        .collect()
}

/// A page of the run list.
#[derive(Serialize)]
struct RunsPage {
    #[serde(rename = "type")]
    kind: &'static str,
    /// The server's wall clock when it answered, ms: the page counts down to a run's
    /// `wakes_ms` from this, not from the browser's clock.
    now_ms: u64,
    runs: Vec<ServedRun>,
    /// The cursor of the next page (`?cursor=`); absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<String>,
}

/// A run as `GET /api/runs/{id}` shows it: as listed, with the calls waiting for a person in
/// its latest state (each with its deadline) and its forks.
#[derive(Serialize)]
struct RunDetail {
    #[serde(flatten)]
    run: ServedRun,
    /// The server's wall clock when it answered, ms (see [`RunsPage::now_ms`]).
    now_ms: u64,
    waiting: Vec<WaitingCall>,
    forks: Vec<RunAt>,
}

/// `GET /api/runs/{id}`: the run as listed, the calls waiting for a person, and its forks.
async fn get_run(State(app): State<App>, Path(id): Path<String>) -> Result<Response, ApiError> {
    let run = run_ref(&id)?;
    let v = app
        .blocking(move |app| {
            let rec = crate::history::record(app.store.as_ref(), &run)?;
            let run_view = run_view(&app, &rec);
            let latest = ops::show(app.store.as_ref(), &run, None)?;
            let spec = crate::history::spec_of(&rec)?;
            Ok(RunDetail {
                run: run_view,
                now_ms: crate::clock::wall_ms(),
                waiting: ops::waiting_calls(&latest.step.state, spec.spec()),
                forks: ops::forks_of(app.store.as_ref(), &run)?,
            })
        })
        .await?;
    Ok(ok(&v))
}

/// The database's schedules, as `GET /api/schedules` answers.
#[derive(Serialize)]
struct SchedulesPage {
    #[serde(rename = "type")]
    kind: &'static str,
    /// The server's wall clock when it answered, ms: each schedule's `next_ms` counts down
    /// from it.
    now_ms: u64,
    /// Every schedule, by name, as `runtape schedule ls --json` prints it.
    schedules: Vec<ops::schedules::ScheduleView>,
}

/// `GET /api/schedules`: what `schedule ls --json` prints, with the server's clock. A database
/// that keeps no schedules (PostgreSQL, memory) answers 400 saying so.
async fn schedules(State(app): State<App>) -> Result<Response, ApiError> {
    let v = app
        .blocking(move |app| {
            let now_ms = crate::clock::wall_ms();
            Ok(SchedulesPage {
                kind: "schedules",
                now_ms,
                schedules: ops::schedules::list(app.store.as_ref(), now_ms)?,
            })
        })
        .await?;
    Ok(ok(&v))
}

/// `?offset=&limit=` of a timeline page.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Page {
    offset: Option<usize>,
    limit: Option<usize>,
}

/// The most timeline entries one page holds.
const MAX_TIMELINE_PAGE: usize = 1000;

/// `GET /api/runs/{id}/timeline`: a page of what `log --json` prints.
async fn timeline(
    State(app): State<App>,
    Path(id): Path<String>,
    q: Result<Query<Page>, QueryRejection>,
) -> Result<Response, ApiError> {
    let run = run_ref(&id)?;
    let p = query(q)?;
    let offset = p.offset.unwrap_or(0);
    let limit = p.limit.unwrap_or(200).min(MAX_TIMELINE_PAGE);
    let v = app
        .blocking(move |app| {
            let all = app.timeline(&run)?;
            let entries: Vec<EntryView> = all
                .iter()
                .skip(offset)
                .take(limit)
                .cloned()
                .map(EntryView::from)
                .collect();
            Ok(TimelinePage {
                kind: "timeline",
                run,
                total: all.len(),
                offset,
                entries,
            })
        })
        .await?;
    Ok(ok(&v))
}

/// A page of a run's timeline.
#[derive(Serialize)]
struct TimelinePage {
    #[serde(rename = "type")]
    kind: &'static str,
    run: RunId,
    total: usize,
    offset: usize,
    entries: Vec<EntryView>,
}

/// `GET /api/runs/{id}/steps/{seq}`: what `show RUN@SEQ --json` prints (`latest` for the
/// latest step).
async fn step(
    State(app): State<App>,
    Path((id, seq)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let run = run_ref(&id)?;
    let seq = match seq.as_str() {
        "latest" => None,
        s => Some(s.parse::<u64>().map_err(|_| {
            ApiError::bad(format!(
                "step `{}` is not a whole number or `latest`",
                quoted(s)
            ))
        })?),
    };
    let v = app
        .blocking(move |app| Ok(ops::show(app.store.as_ref(), &run, seq)?))
        .await?;
    Ok(ok(&v))
}

/// `GET /api/runs/{id}/receipts`: the run's receipt chain, rebuilt from its history (what
/// `receipts export` writes, without the head line).
async fn receipts(State(app): State<App>, Path(id): Path<String>) -> Result<Response, ApiError> {
    let run = run_ref(&id)?;
    let v = app
        .blocking(move |app| {
            let chain = crate::history::receipts(app.store.as_ref(), &run)?;
            Ok(json!({"type": "receipts", "run": run, "receipts": chain}))
        })
        .await?;
    Ok(ok(&v))
}

/// `GET /api/runs/{id}/files/{digest}`: an image or PDF the run's messages carry, served
/// with its media type (the UI shows images inline and links PDFs). Only a file the run
/// names is served, and only when its bytes hash to the digest.
async fn attached_file(
    State(app): State<App>,
    Path((id, digest)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let run = run_ref(&id)?;
    let digest = crate::machine::Digest::from_hex(&digest)
        .ok_or_else(|| ApiError::bad("a file digest is 64 hex digits"))?;
    let found = app
        .blocking(move |app| Ok(ops::attached_file(app.store.as_ref(), &run, &digest)?))
        .await?;
    let Some((attachment, bytes)) = found else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "the run names no such file, or its blob is missing or altered (runtape verify names it)",
        ));
    };
    Ok((
        [
            (header::CONTENT_TYPE, attachment.media_type),
            (
                header::CACHE_CONTROL,
                "private, max-age=31536000, immutable".to_owned(),
            ),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_owned()),
        ],
        bytes,
    )
        .into_response())
}

/// `?pubkey=HEX` of `verify`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct VerifyQuery {
    pubkey: Option<String>,
}

/// `GET /api/runs/{id}/verify`: what `verify --json` prints; `ok: false` names the first
/// problem (the answer is still 200: the check ran).
async fn verify(
    State(app): State<App>,
    Path(id): Path<String>,
    q: Result<Query<VerifyQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let run = run_ref(&id)?;
    let key = query(q)?
        .pubkey
        .map(|k| {
            crate::receipt::parse_public_key(&k).map_err(|e| ApiError::bad(format!("pubkey: {e}")))
        })
        .transpose()?;
    let v = app
        .blocking(move |app| Ok(ops::verify(app.store.as_ref(), &run, key.as_ref())?))
        .await?;
    Ok(ok(&v))
}

/// `?a=RUN&b=RUN` of `diff`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DiffQuery {
    a: String,
    b: String,
}

/// `GET /api/diff?a=A&b=B`: what `diff A B --json` prints.
async fn diff(
    State(app): State<App>,
    q: Result<Query<DiffQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let q = query(q)?;
    let (a, b) = (run_ref(&q.a)?, run_ref(&q.b)?);
    let v = app
        .blocking(move |app| Ok(ops::diff(app.store.as_ref(), &a, &b)?))
        .await?;
    Ok(ok(&v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// Every route is in `/openapi.json`, and it documents no other.
    #[test]
    fn openapi_documents_exactly_the_routes() {
        let doc: Value = serde_json::from_str(OPENAPI).expect("openapi.json is JSON");
        let mut documented: Vec<(String, String)> = Vec::new();
        for (path, ops) in doc["paths"].as_object().expect("paths") {
            for method in ops.as_object().expect("operations").keys() {
                if method != "parameters" {
                    documented.push((method.to_uppercase(), path.clone()));
                }
            }
        }
        documented.sort();
        let mut routed: Vec<(String, String)> = ROUTES
            .iter()
            .map(|(m, p, _)| ((*m).to_owned(), (*p).to_owned()))
            .collect();
        routed.sort();
        assert_eq!(routed, documented);
        assert_eq!(doc["openapi"], json!("3.1.0"));
    }

    #[test]
    fn the_router_builds_from_the_table() {
        let app = App::new(super::super::state::Settings {
            store: std::sync::Arc::new(crate::store::MemoryStore::new()),
            db: "mem".into(),
            spec_dir: ".".into(),
            experiments_dir: ".".into(),
            receipt_key: None,
            grace: std::time::Duration::from_secs(1),
            policy: security::Policy {
                token: None,
                hosts: vec![],
                cors: vec![],
            },
            poll: std::time::Duration::from_millis(250),
        });
        let _ = router(
            app,
            super::super::limits::BodyTimeout(std::time::Duration::from_secs(1)),
        );
    }
}

//! The page: plain HTML, CSS and JavaScript with no build step and no library, embedded in the
//! binary so it needs no network. The script talks to the API only (the same routes any
//! program uses) and follows a run's events with `fetch`, so it can send the token.

use axum::http::header;
use axum::response::{IntoResponse, Response};

const INDEX: &str = include_str!("ui/index.html");
const SCRIPT: &str = include_str!("ui/app.js");
const STYLE: &str = include_str!("ui/app.css");
const EXPERIMENTS: &str = include_str!("ui/experiments.js");

/// Every asset is served with a strict policy: nothing from elsewhere, no inline script.
const CSP: &str = "default-src 'self'; img-src 'self' data: blob:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// `GET /`.
pub(crate) async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX)
}

/// `GET /app.js`.
pub(crate) async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

/// `GET /experiments.js`: the experiments' pages (`#/experiments`), which use `app.js`'s
/// helpers.
pub(crate) async fn experiments_script() -> Response {
    asset("text/javascript; charset=utf-8", EXPERIMENTS)
}

/// `GET /app.css`.
pub(crate) async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

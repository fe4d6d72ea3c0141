//! Who may ask the server what. Every request passes [`guard`] before any handler runs.
//!
//! - **Where it listens.** Loopback (`127.0.0.1:7777`) by default. Any other address needs a
//!   bearer token (from `$RUNTAPE_SERVE_TOKEN`, or the variable `--token-env` names): without
//!   one, `runtape serve` refuses to start ([`check_bind`]).
//! - **The token.** When set, every `/api/…` request and `/openapi.json` must carry
//!   `Authorization: Bearer TOKEN` (401 otherwise); the page asks for it once and keeps it for
//!   the tab. The page's files themselves are served to anyone (they hold no data).
//! - **Without a token** (loopback only): reads are open to this machine, as the database file
//!   is. The `Host` header must name this server (`127.0.0.1:PORT`, `localhost:PORT`,
//!   `[::1]:PORT`, or a name given with `--allow-host`), so a page on another site that
//!   re-points its own name at 127.0.0.1 (DNS rebinding) reads nothing. State-changing
//!   requests (every `POST`) must come from the page itself: a browser's `Origin` (or
//!   `Sec-Fetch-Site`) must say same-origin; a request with neither comes from a program
//!   (curl, a script), not from a page another site opened, and is accepted.
//! - **CORS**: none, unless `--cors-origin ORIGIN` names an origin: then that origin's pages
//!   may call the API (with the token, when there is one).
//! - **Sizes**: request bodies are capped at [`MAX_BODY_BYTES`]; a `POST` body must be
//!   `application/json`.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::state::App;

/// The largest request body accepted (an uploaded spec fits many times over).
pub(crate) const MAX_BODY_BYTES: usize = 1 << 20;

/// The shortest token accepted: shorter ones are guessable.
pub(crate) const MIN_TOKEN_CHARS: usize = 16;

/// What the guard checks requests against.
#[derive(Clone, Debug)]
pub(crate) struct Policy {
    /// The bearer token every API request must carry, if set.
    pub(crate) token: Option<String>,
    /// `Host` values that name this server (lowercase `host:port`).
    pub(crate) hosts: Vec<String>,
    /// Origins allowed to call the API from their pages (`--cors-origin`).
    pub(crate) cors: Vec<String>,
}

impl Policy {
    /// The origins that count as this server's own pages.
    fn own_origin(&self, origin: &str) -> bool {
        let origin = origin.to_ascii_lowercase();
        self.hosts.iter().any(|h| origin == format!("http://{h}"))
    }
}

/// The `Host` values that name a server listening on `addr`: the address as given, and for
/// loopback, every loopback name with the port. `extra` adds names (`--allow-host`).
pub(crate) fn host_names(addr: std::net::SocketAddr, extra: &[String]) -> Vec<String> {
    let port = addr.port();
    let mut hosts = vec![addr.to_string().to_ascii_lowercase()];
    if addr.ip().is_loopback() {
        for name in ["127.0.0.1", "localhost", "[::1]"] {
            hosts.push(format!("{name}:{port}"));
        }
    }
    for h in extra {
        let h = h.to_ascii_lowercase();
        hosts.push(if h.contains(':') && !h.ends_with(']') {
            h
        } else {
            format!("{h}:{port}")
        });
    }
    hosts.sort();
    hosts.dedup();
    hosts
}

/// Refuses, before anything listens, an address other than loopback without a token, and a
/// token too short to be secret.
pub(crate) fn check_bind(
    addr: std::net::SocketAddr,
    token: Option<&str>,
    token_env: &str,
) -> Result<(), String> {
    if let Some(t) = token
        && t.chars().count() < MIN_TOKEN_CHARS
    {
        return Err(format!(
            "${token_env} is shorter than {MIN_TOKEN_CHARS} characters; use a long random token (e.g. `openssl rand -hex 32`)"
        ));
    }
    if !addr.ip().is_loopback() && token.is_none() {
        return Err(format!(
            "refusing to listen on {addr} without a token: anyone who can reach it could start runs (which run programs) and read every run; set ${token_env} to a long random token, or listen on 127.0.0.1"
        ));
    }
    Ok(())
}

/// Checks `Host`, the token or the origin, and answers CORS preflights; see the module doc.
pub(crate) async fn guard(State(app): State<App>, req: Request, next: Next) -> Response {
    let policy = &app.policy;
    let origin = header_str(req.headers(), header::ORIGIN).map(str::to_owned);
    let cors_ok = origin
        .as_deref()
        .is_some_and(|o| policy.cors.iter().any(|c| c.eq_ignore_ascii_case(o)));
    if req.method() == Method::OPTIONS {
        return preflight(cors_ok, origin.as_deref());
    }
    let path = req.uri().path();
    let guarded = path.starts_with("/api/") || path == "/openapi.json";
    let refusal = if policy.token.is_some() {
        guarded
            .then(|| check_token(policy, req.headers()))
            .flatten()
    } else {
        check_host(policy, req.headers()).or_else(|| {
            let writes = !matches!(*req.method(), Method::GET | Method::HEAD);
            (writes && !cors_ok)
                .then(|| check_same_origin(policy, req.headers()))
                .flatten()
        })
    };
    let mut response = match refusal {
        Some(e) => {
            let unauthorized = e.status == StatusCode::UNAUTHORIZED;
            let mut r = e.into_response();
            if unauthorized {
                r.headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            r
        }
        None => next.run(req).await,
    };
    if cors_ok && let Some(o) = origin.and_then(|o| HeaderValue::from_str(&o).ok()) {
        let h = response.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, o);
        h.insert(header::VARY, HeaderValue::from_static("Origin"));
    }
    response
}

/// A CORS preflight: allowed for a configured origin, refused (without CORS headers, so the
/// browser blocks the request) for any other.
fn preflight(cors_ok: bool, origin: Option<&str>) -> Response {
    let Some(origin) = origin
        .filter(|_| cors_ok)
        .and_then(|o| HeaderValue::from_str(o).ok())
    else {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "cross-origin requests are not allowed; start the server with --cors-origin ORIGIN to allow a page from ORIGIN",
        )
        .into_response();
    };
    let mut r = Response::new(Body::empty());
    *r.status_mut() = StatusCode::NO_CONTENT;
    let h = r.headers_mut();
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    h.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, POST"),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static("authorization, content-type, last-event-id"),
    );
    h.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("600"),
    );
    h.insert(header::VARY, HeaderValue::from_static("Origin"));
    r
}

fn check_token(policy: &Policy, headers: &HeaderMap) -> Option<ApiError> {
    let want = policy.token.as_deref()?;
    let given = header_str(headers, header::AUTHORIZATION)
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    match given {
        Some(t) if constant_time_eq(t.as_bytes(), want.as_bytes()) => None,
        Some(_) => Some(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "the bearer token is wrong; send the server's token as `Authorization: Bearer TOKEN`",
        )),
        None => Some(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "this server needs a token: send `Authorization: Bearer TOKEN` (the value of the variable it was started with)",
        )),
    }
}

fn check_host(policy: &Policy, headers: &HeaderMap) -> Option<ApiError> {
    let host = header_str(headers, header::HOST)
        .unwrap_or("")
        .to_ascii_lowercase();
    if policy.hosts.contains(&host) {
        return None;
    }
    Some(ApiError::new(
        StatusCode::FORBIDDEN,
        format!(
            "Host `{}` is not this server; open http://{} (or start it with --allow-host NAME)",
            crate::text::one_line(&host, 80),
            policy
                .hosts
                .first()
                .map(String::as_str)
                .unwrap_or("127.0.0.1")
        ),
    ))
}

fn check_same_origin(policy: &Policy, headers: &HeaderMap) -> Option<ApiError> {
    let refuse = |from: &str| {
        Some(ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "refusing a state-changing request from another origin ({}); use this server's own page, or send the request without a browser",
                crate::text::one_line(from, 80)
            ),
        ))
    };
    if let Some(origin) = header_str(headers, header::ORIGIN) {
        return if policy.own_origin(origin) {
            None
        } else {
            refuse(origin)
        };
    }
    match header_str(headers, "sec-fetch-site") {
        None | Some("same-origin") | Some("none") => None,
        Some(other) => refuse(other),
    }
}

fn header_str(headers: &HeaderMap, name: impl header::AsHeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Compares without stopping at the first difference, so the time taken does not tell how
/// much of a guess was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names_every_loopback_host_and_extras_get_the_port() {
        let hosts = host_names("127.0.0.1:7777".parse().expect("addr"), &["dev.box".into()]);
        for h in [
            "127.0.0.1:7777",
            "localhost:7777",
            "[::1]:7777",
            "dev.box:7777",
        ] {
            assert!(hosts.iter().any(|x| x == h), "{h} in {hosts:?}");
        }
    }

    #[test]
    fn non_loopback_needs_a_long_token() {
        let any = "0.0.0.0:7777".parse().expect("addr");
        let lo = "127.0.0.1:7777".parse().expect("addr");
        assert!(check_bind(lo, None, "T").is_ok());
        assert!(
            check_bind(any, None, "T")
                .expect_err("refused")
                .contains("without a token")
        );
        assert!(check_bind(any, Some("short"), "T").is_err());
        assert!(check_bind(any, Some("0123456789abcdef0123"), "T").is_ok());
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }
}

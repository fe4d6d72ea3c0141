//! Every refusal of `runtape serve`'s security: a non-loopback address without a token, a
//! missing or wrong token, a state-changing request from another origin, a foreign `Host`
//! (DNS rebinding), CORS unless configured, oversized bodies, and connections that hold the
//! server (slow headers, slow bodies, more connections than it serves at once). Each refused
//! request changes nothing.

use crate::support;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use serde_json::json;
use support::serve::{
    Server, bin, request, run_spec, scratch, scratch_db, serve, serve_empty, serving,
};

const TOKEN: &str = "0123456789abcdef0123456789abcdef";

fn serve_refused(args: &[&str], env: &[(&str, &str)]) -> String {
    let dir = scratch();
    let mut cmd = Command::new(bin());
    cmd.arg("serve")
        .args(args)
        .arg("--db")
        .arg(dir.path().join("runs.db"))
        .env_remove("RUNTAPE_SERVE_TOKEN");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(out.stdout.is_empty(), "it never listened: {:?}", out.stdout);
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    stderr
}

#[test]
fn listening_beyond_loopback_needs_a_token_and_bad_options_are_refused_at_start() {
    let e = serve_refused(&["--addr", "0.0.0.0:0"], &[]);
    assert!(
        e.contains("refusing to listen on 0.0.0.0:0 without a token"),
        "{e}"
    );
    assert!(e.contains("RUNTAPE_SERVE_TOKEN"), "{e}");
    let e = serve_refused(&["--addr", "0.0.0.0:0", "--token-env", "MY_TOKEN"], &[]);
    assert!(e.contains("$MY_TOKEN"), "{e}");
    let e = serve_refused(
        &["--addr", "0.0.0.0:0"],
        &[("RUNTAPE_SERVE_TOKEN", "short")],
    );
    assert!(e.contains("shorter than 16"), "{e}");
    assert!(!e.contains("short;"), "the token is not echoed: {e}");
    let e = serve_refused(&["--addr", "not an address"], &[]);
    assert!(e.contains("is not HOST:PORT"), "{e}");
    let e = serve_refused(&["--cors-origin", "*"], &[]);
    assert!(e.contains("is not an origin"), "{e}");
    let e = serve_refused(
        &["--otlp-endpoint", "http://collector.example.com:4318"],
        &[],
    );
    assert!(e.contains("only to a loopback host"), "{e}");
}

#[test]
fn with_a_token_every_api_request_needs_it_and_the_page_does_not() {
    let (dir, db) = scratch_db();
    let run = run_spec(dir.path(), &db, "examples/approval.toml");
    let server = Server::start(dir.path(), &db, &[], &[("RUNTAPE_SERVE_TOKEN", TOKEN)]);
    let bearer = format!("Bearer {TOKEN}");
    for path in [
        "/api/runs",
        "/openapi.json",
        "/api/info",
        &format!("/api/runs/{run}/events"),
    ] {
        let a = request(server.addr, "GET", path, &[], None);
        assert_eq!(a.status, 401, "{path}: {}", a.text());
        assert_eq!(a.header("www-authenticate"), Some("Bearer"));
        assert!(a.error().contains("needs a token"), "{}", a.text());
        let a = request(
            server.addr,
            "GET",
            path,
            &[("Authorization", "Bearer wrong-token-wrong-token")],
            None,
        );
        assert_eq!(a.status, 401, "{path}");
        assert!(a.error().contains("wrong"), "{}", a.text());
    }
    let a = request(
        server.addr,
        "POST",
        &format!("/api/runs/{run}/approve"),
        &[],
        None,
    );
    assert_eq!(a.status, 401, "{}", a.text());
    let a = request(
        server.addr,
        "GET",
        "/api/runs",
        &[("Authorization", &bearer)],
        None,
    );
    assert_eq!(a.status, 200, "{}", a.text());
    let a = request(server.addr, "GET", "/", &[], None);
    assert_eq!(a.status, 200);
    assert!(a.text().contains("<title>runtape</title>"));
    // Nothing was approved by the refused request; with the token it goes through.
    let (_, r) = server.get_with(&format!("/api/runs/{run}"), &bearer);
    assert_eq!(r["status"], "awaiting_input");
    let a = request(
        server.addr,
        "POST",
        &format!("/api/runs/{run}/approve"),
        &[("Authorization", &bearer)],
        None,
    );
    assert_eq!(a.status, 202, "{}", a.text());
    let (_, err) = server.stop();
    assert!(
        !err.contains(TOKEN),
        "the token never reaches the output: {err}"
    );
}

#[test]
fn without_a_token_state_changing_requests_must_be_same_origin() {
    let (dir, db, run, server) = serving("examples/approval.toml");
    let approve = format!("/api/runs/{run}/approve");
    for headers in [
        vec![("Origin", "http://evil.example")],
        vec![("Origin", "null")],
        vec![("Sec-Fetch-Site", "cross-site")],
        vec![
            ("Origin", "http://evil.example"),
            ("Sec-Fetch-Site", "same-origin"),
        ],
    ] {
        let a = request(server.addr, "POST", &approve, &headers, None);
        assert_eq!(a.status, 403, "{headers:?}: {}", a.text());
        assert!(a.error().contains("another origin"), "{}", a.text());
    }
    // Reads stay open to this machine; the refused approvals changed nothing.
    let (_, r) = server.get(&format!("/api/runs/{run}"));
    assert_eq!(r["status"], "awaiting_input");
    assert_eq!(r["steps"], json!(3));
    let own = format!("http://{}", server.addr);
    let a = request(
        server.addr,
        "POST",
        &approve,
        &[("Origin", &own), ("Sec-Fetch-Site", "same-origin")],
        None,
    );
    assert_eq!(a.status, 202, "the page's own origin: {}", a.text());
    let other = run_spec(dir.path(), &db, "examples/approval.toml");
    // A program (no Origin, no Sec-Fetch-Site) is not a page another site opened.
    let a = request(
        server.addr,
        "POST",
        &format!("/api/runs/{other}/approve"),
        &[],
        None,
    );
    assert_eq!(a.status, 202, "{}", a.text());
}

#[test]
fn a_host_that_is_not_this_server_is_refused() {
    let (dir, db) = scratch_db();
    run_spec(dir.path(), &db, "examples/quickstart.toml");
    let server = Server::start(dir.path(), &db, &["--allow-host", "devbox.local"], &[]);
    let port = server.addr.port();
    for host in [
        "evil.example",
        "evil.example:80",
        &format!("attacker.test:{port}"),
        "",
    ] {
        let a = request(server.addr, "GET", "/api/runs", &[("Host", host)], None);
        assert_eq!(a.status, 403, "Host {host:?}: {}", a.text());
        assert!(a.error().contains("is not this server"), "{}", a.text());
    }
    for host in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("devbox.local:{port}"),
    ] {
        let a = request(server.addr, "GET", "/api/runs", &[("Host", &host)], None);
        assert_eq!(a.status, 200, "Host {host}: {}", a.text());
    }
}

/// `METHOD PATH` on `addr` with an `Origin` header and no body.
fn from_origin(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    origin: &str,
) -> support::serve::Answer {
    request(addr, method, path, &[("Origin", origin)], None)
}

#[test]
fn no_cors_unless_an_origin_is_configured() {
    let (dir, db) = scratch_db();
    let run = run_spec(dir.path(), &db, "examples/approval.toml");
    let preflight = [
        ("Origin", "http://app.example:3000"),
        ("Access-Control-Request-Method", "POST"),
        ("Access-Control-Request-Headers", "content-type"),
    ];
    let server = serve(dir.path(), &db);
    let a = request(server.addr, "OPTIONS", "/api/runs", &preflight, None);
    assert_eq!(a.status, 403, "{}", a.text());
    assert_eq!(a.header("access-control-allow-origin"), None);
    let a = from_origin(server.addr, "GET", "/api/runs", "http://app.example:3000");
    assert_eq!(a.status, 200);
    assert_eq!(a.header("access-control-allow-origin"), None);
    drop(server);

    let server = Server::start(
        dir.path(),
        &db,
        &["--cors-origin", "http://app.example:3000"],
        &[],
    );
    let a = request(server.addr, "OPTIONS", "/api/runs", &preflight, None);
    assert_eq!(a.status, 204, "{}", a.text());
    assert_eq!(
        a.header("access-control-allow-origin"),
        Some("http://app.example:3000")
    );
    assert!(
        a.header("access-control-allow-headers")
            .is_some_and(|h| h.contains("content-type"))
    );
    let a = from_origin(
        server.addr,
        "POST",
        &format!("/api/runs/{run}/approve"),
        "http://app.example:3000",
    );
    assert_eq!(a.status, 202, "{}", a.text());
    assert_eq!(
        a.header("access-control-allow-origin"),
        Some("http://app.example:3000")
    );
    let a = from_origin(server.addr, "OPTIONS", "/api/runs", "http://other.example");
    assert_eq!(a.status, 403);
}

#[test]
fn request_bodies_are_capped() {
    let (_dir, server) = serve_empty(&[]);
    let big = format!("{{\"spec_toml\": \"{}\"}}", "x".repeat(2 << 20));
    let a = request(
        server.addr,
        "POST",
        "/api/runs",
        &[("Content-Type", "application/json")],
        Some(big.as_bytes()),
    );
    assert_eq!(a.status, 413, "{}", a.text());
    let e = a.error();
    assert!(e.contains("larger than 1024 KiB"), "{e}");
    let (_, runs) = server.get("/api/runs");
    assert_eq!(runs["runs"], json!([]), "nothing was started");
}

/// A connection that sends a request line and part of its headers, then nothing more.
fn slow_header(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).expect("connects");
    s.write_all(format!("GET /api/runs HTTP/1.1\r\nHost: {addr}\r\nX-Slow: ").as_bytes())
        .expect("writes");
    s
}

/// Reads until the server closes `s`: what it sent first. Fails if the connection is still
/// open after `within` (a generous bound: the timeouts under test are far shorter).
fn until_closed(s: &mut TcpStream, within: Duration) -> Vec<u8> {
    s.set_read_timeout(Some(within)).expect("sets a timeout");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return got,
            Err(e) => panic!("the server still holds the connection after {within:?}: {e}"),
        }
    }
}

#[test]
fn slow_header_connections_are_closed_and_the_server_still_answers() {
    let (_dir, server) = serve_empty(&["--header-timeout-ms", "300", "--max-connections", "4"]);
    // More slow connections than the server serves at once: those past the cap are taken
    // as the first ones are closed, and are closed in turn.
    let mut slow: Vec<TcpStream> = (0..12).map(|_| slow_header(server.addr)).collect();
    for (i, s) in slow.iter_mut().enumerate() {
        let sent = until_closed(s, Duration::from_secs(60));
        assert!(sent.is_empty(), "connection {i} got {sent:?}");
    }
    let (status, runs) = server.get("/api/runs");
    assert_eq!(status, 200, "{runs}");
    // An idle kept-alive connection is closed the same way.
    let mut idle = TcpStream::connect(server.addr).expect("connects");
    assert!(until_closed(&mut idle, Duration::from_secs(60)).is_empty());
}

#[test]
fn no_more_connections_are_served_at_once_than_the_cap() {
    let (_dir, server) = serve_empty(&["--header-timeout-ms", "600000", "--max-connections", "3"]);
    let mut held: Vec<TcpStream> = (0..3).map(|_| slow_header(server.addr)).collect();
    let mut next = TcpStream::connect(server.addr).expect("connects (the listen queue)");
    let addr = server.addr;
    next.write_all(
        format!("GET /api/runs HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .expect("writes");
    next.set_read_timeout(Some(Duration::from_secs(1)))
        .expect("sets a timeout");
    let mut buf = [0u8; 64];
    match next.read(&mut buf) {
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
        other => panic!("a fourth connection was served while three were held: {other:?}"),
    }
    // One held connection goes away: the waiting one is taken and answered.
    drop(held.pop());
    let answer =
        String::from_utf8_lossy(&until_closed(&mut next, Duration::from_secs(60))).into_owned();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[test]
fn a_slow_body_is_answered_408_and_changes_nothing() {
    let (_dir, server) = serve_empty(&["--body-timeout-ms", "300"]);
    let addr = server.addr;
    let mut s = TcpStream::connect(addr).expect("connects");
    s.write_all(
        format!(
            "POST /api/runs HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n{{\"spec\": "
        )
        .as_bytes(),
    )
    .expect("writes");
    let answer =
        String::from_utf8_lossy(&until_closed(&mut s, Duration::from_secs(60))).into_owned();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(
        answer.contains("did not arrive in full within 300 ms"),
        "{answer}"
    );
    let (_, runs) = server.get("/api/runs");
    assert_eq!(runs["runs"], json!([]), "nothing was started");
}

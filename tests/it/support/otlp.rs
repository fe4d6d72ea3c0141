//! An OTLP/HTTP (JSON) receiver on a free loopback port, for the tests that check what runtape
//! exports to OpenTelemetry: it keeps the path and body of every POST and answers each `{}`.
#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

/// What the receiver got: the path and body text of every POST, in the order they came.
pub type Received = Arc<Mutex<Vec<(String, String)>>>;

/// Starts a receiver; its base URL (for `OTEL_EXPORTER_OTLP_ENDPOINT`) and what it gets.
pub fn receiver() -> (String, Received) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binds");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let got: Received = Arc::default();
    let store = got.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let store = store.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn.try_clone().expect("clone"));
                let mut first = String::new();
                if reader.read_line(&mut first).is_err() {
                    return;
                }
                let path = first.split_whitespace().nth(1).unwrap_or("").to_owned();
                let mut len = 0;
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                        break;
                    }
                    if let Some((k, v)) = h.split_once(':')
                        && k.eq_ignore_ascii_case("content-length")
                    {
                        len = v.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0; len];
                if reader.read_exact(&mut body).is_ok() {
                    let text = String::from_utf8_lossy(&body).into_owned();
                    store.lock().expect("lock").push((path, text));
                }
                let mut conn = conn;
                let _ = conn.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
                );
            });
        }
    });
    (url, got)
}

/// The JSON bodies posted to `path` (`/v1/traces`, `/v1/metrics`); a body that is not JSON
/// fails the test.
pub fn bodies(got: &Received, path: &str) -> Vec<serde_json::Value> {
    got.lock()
        .expect("lock")
        .iter()
        .filter(|(p, _)| p == path)
        .map(|(_, body)| serde_json::from_str(body).expect("an OTLP JSON body"))
        .collect()
}

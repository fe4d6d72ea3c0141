//! An OTLP/HTTP receiver on a free loopback port, for the tests that check what runtape
//! exports to OpenTelemetry: it keeps the path, content type and body of every POST (a
//! protobuf body read into the OTLP JSON shape, so the tests read both formats alike) and
//! answers each with an empty success.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

/// What the receiver got: the path, content type and body text (JSON) of every POST, in the
/// order they came.
pub type Received = Arc<Mutex<Vec<(String, String, String)>>>;

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
                let mut kind = String::new();
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
                    if let Some((k, v)) = h.split_once(':')
                        && k.eq_ignore_ascii_case("content-type")
                    {
                        kind = v.trim().to_owned();
                    }
                }
                let mut body = vec![0; len];
                if reader.read_exact(&mut body).is_ok() {
                    let text = if kind == "application/x-protobuf" {
                        as_json(&path, &body)
                    } else {
                        String::from_utf8_lossy(&body).into_owned()
                    };
                    store.lock().expect("lock").push((path, kind.clone(), text));
                }
                let mut conn = conn;
                // An empty export response: `{}` in JSON, no bytes in protobuf.
                let answer: &[u8] = if kind == "application/x-protobuf" {
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                } else {
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
                };
                let _ = conn.write_all(answer);
            });
        }
    });
    (url, got)
}

/// A protobuf export request to `path` in the OTLP JSON shape; a body that does not decode
/// fails the test.
fn as_json(path: &str, body: &[u8]) -> String {
    use opentelemetry_proto::tonic::collector::{
        metrics::v1::ExportMetricsServiceRequest, trace::v1::ExportTraceServiceRequest,
    };
    use prost::Message as _;
    match path {
        "/v1/traces" => serde_json::to_string(
            &ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf trace request"),
        ),
        "/v1/metrics" => serde_json::to_string(
            &ExportMetricsServiceRequest::decode(body).expect("an OTLP protobuf metrics request"),
        ),
        other => panic!("protobuf posted to {other}"),
    }
    .expect("serialises")
}

/// The content types of what was posted to `path`, in order.
pub fn content_types(got: &Received, path: &str) -> Vec<String> {
    got.lock()
        .expect("lock")
        .iter()
        .filter(|(p, _, _)| p == path)
        .map(|(_, kind, _)| kind.clone())
        .collect()
}

/// The JSON bodies posted to `path` (`/v1/traces`, `/v1/metrics`); a body that is not JSON
/// fails the test.
pub fn bodies(got: &Received, path: &str) -> Vec<serde_json::Value> {
    got.lock()
        .expect("lock")
        .iter()
        .filter(|(p, _, _)| p == path)
        .map(|(_, _, body)| serde_json::from_str(body).expect("an OTLP JSON body"))
        .collect()
}

/// A span as the test reads it.
#[derive(Clone, Debug)]
pub struct Span {
    pub trace: String,
    pub id: String,
    pub parent: String,
    pub name: String,
    pub attrs: BTreeMap<String, Value>,
    pub links: Vec<Value>,
    pub status: Value,
    /// Its start and end, Unix milliseconds.
    pub start_ms: u64,
    pub end_ms: u64,
}

impl Span {
    /// The string attribute `key`; panics (naming it) when the span has none.
    pub fn text(&self, key: &str) -> &str {
        match self.attrs.get(key).and_then(Value::as_str) {
            Some(text) => text,
            None => panic!("span {} has no text attribute {key}", self.name),
        }
    }
}

/// An attribute's value as plain JSON (an integer sent as a string read as a number).
pub fn attr_value(v: &Value) -> Value {
    for k in ["stringValue", "boolValue", "doubleValue"] {
        if let Some(x) = v.get(k) {
            return x.clone();
        }
    }
    if let Some(i) = v.get("intValue") {
        return match i {
            Value::String(s) => json!(s.parse::<i64>().unwrap_or_default()),
            other => other.clone(),
        };
    }
    if let Some(a) = v.get("arrayValue") {
        return Value::Array(
            a["values"]
                .as_array()
                .into_iter()
                .flatten()
                .map(attr_value)
                .collect(),
        );
    }
    Value::Null
}

/// Every span posted to `/v1/traces`.
pub fn spans(got: &Received) -> Vec<Span> {
    let mut out = Vec::new();
    for body in bodies(got, "/v1/traces") {
        for rs in body["resourceSpans"].as_array().into_iter().flatten() {
            for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                for s in ss["spans"].as_array().into_iter().flatten() {
                    out.push(Span {
                        trace: s["traceId"].as_str().unwrap_or("").to_owned(),
                        id: s["spanId"].as_str().unwrap_or("").to_owned(),
                        parent: s["parentSpanId"].as_str().unwrap_or("").to_owned(),
                        name: s["name"].as_str().unwrap_or("").to_owned(),
                        attrs: attrs_of(s),
                        links: s["links"].as_array().cloned().unwrap_or_default(),
                        status: s["status"].clone(),
                        start_ms: nanos(&s["startTimeUnixNano"]) / 1_000_000,
                        end_ms: nanos(&s["endTimeUnixNano"]) / 1_000_000,
                    });
                }
            }
        }
    }
    out
}

/// Nanoseconds as OTLP JSON writes them (a string, or a number from protobuf).
fn nanos(v: &Value) -> u64 {
    match v {
        Value::String(s) => s.parse().unwrap_or_default(),
        other => other.as_u64().unwrap_or_default(),
    }
}

/// The span called `name` among `spans`.
pub fn named<'a, S: std::borrow::Borrow<Span>>(spans: &'a [S], name: &str) -> &'a Span {
    spans
        .iter()
        .map(std::borrow::Borrow::borrow)
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no span `{name}`"))
}

/// The spans of run `run`.
pub fn of_run<'a>(spans: &'a [Span], run: &str) -> Vec<&'a Span> {
    spans
        .iter()
        .filter(|s| {
            s.attrs.get("gen_ai.conversation.id") == Some(&json!(run))
                || s.attrs.get("runtape.run.id") == Some(&json!(run))
        })
        .collect()
}

/// The total of the sum metric `name` over every export, and its data points.
pub fn counter_total(got: &Received, name: &str) -> (f64, Vec<Value>) {
    let mut total = 0.0;
    let mut points = Vec::new();
    for body in bodies(got, "/v1/metrics") {
        for rm in body["resourceMetrics"].as_array().into_iter().flatten() {
            for sm in rm["scopeMetrics"].as_array().into_iter().flatten() {
                for m in sm["metrics"].as_array().into_iter().flatten() {
                    if m["name"] != name {
                        continue;
                    }
                    for p in m["sum"]["dataPoints"].as_array().into_iter().flatten() {
                        let v = p.get("asInt").map(|i| match i {
                            Value::String(s) => s.parse::<f64>().unwrap_or(0.0),
                            other => other.as_f64().unwrap_or(0.0),
                        });
                        total += v.or_else(|| p["asDouble"].as_f64()).unwrap_or(0.0);
                        points.push(p.clone());
                    }
                }
            }
        }
    }
    (total, points)
}

/// The data points of the histogram `name` in the last export that carries it (metrics are
/// cumulative: the last export holds every recording).
pub fn histogram_points(got: &Received, name: &str) -> Vec<Value> {
    let mut last = Vec::new();
    for body in bodies(got, "/v1/metrics") {
        let mut here = Vec::new();
        for rm in body["resourceMetrics"].as_array().into_iter().flatten() {
            for sm in rm["scopeMetrics"].as_array().into_iter().flatten() {
                for m in sm["metrics"].as_array().into_iter().flatten() {
                    if m["name"] == name {
                        here.extend(
                            m["histogram"]["dataPoints"]
                                .as_array()
                                .cloned()
                                .unwrap_or_default(),
                        );
                    }
                }
            }
        }
        if !here.is_empty() {
            last = here;
        }
    }
    last
}

/// A data point's (or any OTLP object's) attributes as plain JSON.
pub fn attrs_of(v: &Value) -> BTreeMap<String, Value> {
    v["attributes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| {
            (
                a["key"].as_str().unwrap_or("").to_owned(),
                attr_value(&a["value"]),
            )
        })
        .collect()
}

/// The `service.name` of the resource of every export to `path`.
pub fn service_names(got: &Received, path: &str) -> Vec<Value> {
    let key = if path == "/v1/traces" {
        "resourceSpans"
    } else {
        "resourceMetrics"
    };
    bodies(got, path)
        .iter()
        .flat_map(|b| b[key].as_array().cloned().unwrap_or_default())
        .map(|r| {
            attrs_of(&r["resource"])
                .get("service.name")
                .cloned()
                .unwrap_or(json!(null))
        })
        .collect()
}

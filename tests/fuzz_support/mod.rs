//! Shared machinery of the parser fuzz tests: how many cases to run, inputs (arbitrary bytes,
//! and real inputs mutated), seeds (recorded provider replies, example specs, and a cassette
//! and receipts produced by a real run of the binary), and measuring the heap a parse holds.
#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};

use peakmem_alloc::{INSTRUMENTED_SYSTEM, PeakMemAlloc, PeakMemAllocTrait};
use proptest::prelude::*;
use proptest::test_runner::Config;

/// Running the binary and reading what it printed: the integration tests' own helpers.
#[path = "../it/support/cli.rs"]
mod cli;

/// Counts live heap bytes, so a test can read the peak a parse reached.
#[global_allocator]
static HEAP: &PeakMemAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

/// Cases per property when `RUNTAPE_FUZZ_CASES` is not set: a short run, a few seconds per
/// parser in CI.
pub const DEFAULT_CASES: u32 = 500;

/// The proptest configuration: `RUNTAPE_FUZZ_CASES` cases (default [`DEFAULT_CASES`]).
pub fn config() -> Config {
    let cases = std::env::var("RUNTAPE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES);
    Config {
        cases,
        max_shrink_iters: 4096,
        ..Config::default()
    }
}

/// Heap growth allowed per input byte while parsing (the parsed value included).
pub const BYTES_PER_INPUT_BYTE: usize = 64;

/// Heap growth allowed whatever the input's size: buffers and tables of the stream, reply,
/// cassette and receipt parsers.
pub const FIXED_ALLOWANCE: usize = 64 << 10;

/// The same for spec files, whose loading compiles JSON schemas and patterns (about 360 KB
/// seen at most).
pub const SPEC_ALLOWANCE: usize = 1 << 20;

/// Holds every test of the binary to one at a time, so the heap measured is the parse's.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `parse` and returns its result with the most heap it held above what was live
/// before it started.
pub fn measured<T>(parse: impl FnOnce() -> T) -> (T, usize) {
    HEAP.reset_peak_memory();
    let out = parse();
    (out, HEAP.get_peak_memory())
}

/// The most heap seen per parser: `(peak bytes, its input's length)`, for [`report`].
static MOST: Mutex<std::collections::BTreeMap<String, (usize, usize)>> =
    Mutex::new(std::collections::BTreeMap::new());

/// With `RUNTAPE_FUZZ_REPORT` set, prints the most heap each parser held and for what input
/// size (the figures the bounds are judged against).
pub fn report() {
    if std::env::var_os("RUNTAPE_FUZZ_REPORT").is_none() {
        return;
    }
    let most = MOST.lock().unwrap_or_else(|p| p.into_inner());
    for (what, (peak, len)) in most.iter() {
        eprintln!("fuzz heap: {what}: at most {peak} bytes held (input of {len} bytes)");
    }
}

/// Fails when the heap a parse of `len` input bytes held is past the bound.
pub fn assert_bounded(what: &str, len: usize, peak: usize) -> Result<(), TestCaseError> {
    {
        let mut most = MOST.lock().unwrap_or_else(|p| p.into_inner());
        let entry = most.entry(what.to_owned()).or_insert((0, 0));
        if peak > entry.0 {
            *entry = (peak, len);
        }
    }
    let fixed = if what == "spec" {
        SPEC_ALLOWANCE
    } else {
        FIXED_ALLOWANCE
    };
    let bound = BYTES_PER_INPUT_BYTE * len + fixed;
    prop_assert!(
        peak <= bound,
        "{what}: {len} input bytes made the parser hold {peak} heap bytes (bound {bound})"
    );
    Ok(())
}

/// Fails when an error message spans more than one line.
pub fn assert_one_line(what: &str, message: &str) -> Result<(), TestCaseError> {
    prop_assert!(
        !message.contains('\n') && !message.contains('\r'),
        "{what}: the error is not one line: {message:?}"
    );
    Ok(())
}

/// Byte strings parsers treat specially, spliced into mutated inputs.
const TOKENS: &[&str] = &[
    "\n",
    "\r\n",
    "\r",
    "\n\n",
    "\"",
    "\\",
    "\\n",
    "\\r",
    "\\u2028",
    "\\u0000",
    "\\ud800",
    "{",
    "}",
    "[",
    "]",
    ":",
    ",",
    "=",
    "'''",
    "\"\"\"",
    "#",
    "0",
    "-1",
    "1e999",
    "-0",
    "18446744073709551616",
    "9007199254740993",
    "null",
    "true",
    "[[",
    "]]",
    "data: ",
    "event: ",
    ": ping\n",
    "data: [DONE]",
    "\u{feff}",
    "\u{0}",
    "é",
    "\u{10ffff}",
    "\x7f",
];

/// One edit of a seed.
#[derive(Clone, Debug)]
pub enum Mutation {
    /// Flip bits of one byte.
    Flip { at: usize, mask: u8 },
    /// Insert bytes.
    Insert { at: usize, bytes: Vec<u8> },
    /// Insert a token parsers care about.
    Token { at: usize, token: usize },
    /// Remove a range.
    Delete { at: usize, len: usize },
    /// Repeat a range in place.
    Repeat { at: usize, len: usize, times: usize },
    /// Cut the input short.
    Truncate { at: usize },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1..=255u8).prop_map(|(at, mask)| Mutation::Flip { at, mask }),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        (any::<usize>(), 0..TOKENS.len()).prop_map(|(at, token)| Mutation::Token { at, token }),
        (any::<usize>(), 1..64usize).prop_map(|(at, len)| Mutation::Delete { at, len }),
        (any::<usize>(), 1..32usize, 2..40usize).prop_map(|(at, len, times)| Mutation::Repeat {
            at,
            len,
            times
        }),
        any::<usize>().prop_map(|at| Mutation::Truncate { at }),
    ]
}

/// Applies `m` to `input` (positions wrap around its length).
pub fn apply(input: &mut Vec<u8>, m: &Mutation) {
    let pos = |at: usize, len: usize| if len == 0 { 0 } else { at % (len + 1) };
    match m {
        Mutation::Flip { at, mask } => {
            if !input.is_empty() {
                let i = at % input.len();
                input[i] ^= mask;
            }
        }
        Mutation::Insert { at, bytes } => {
            let i = pos(*at, input.len());
            input.splice(i..i, bytes.iter().copied());
        }
        Mutation::Token { at, token } => {
            let i = pos(*at, input.len());
            input.splice(i..i, TOKENS[*token].bytes());
        }
        Mutation::Delete { at, len } => {
            let i = pos(*at, input.len());
            let end = (i + len).min(input.len());
            input.drain(i..end);
        }
        Mutation::Repeat { at, len, times } => {
            let i = pos(*at, input.len());
            let end = (i + len).min(input.len());
            let piece = input[i..end].to_vec();
            for _ in 1..*times {
                input.splice(end..end, piece.iter().copied());
            }
        }
        Mutation::Truncate { at } => {
            let i = pos(*at, input.len());
            input.truncate(i);
        }
    }
}

/// A seed from `seeds` with 1 to 8 mutations applied.
pub fn mutated(seeds: Vec<Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    assert!(!seeds.is_empty(), "no seeds");
    (0..seeds.len(), prop::collection::vec(mutation(), 1..8)).prop_map(move |(i, edits)| {
        let mut input = seeds[i].clone();
        for m in &edits {
            apply(&mut input, m);
        }
        input
    })
}

/// Any bytes, up to `max` of them.
pub fn arbitrary(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..max)
}

/// Where to cut an input into chunks: sorted cut points below its length.
pub fn cuts(input_len: usize, raw: &[usize]) -> Vec<usize> {
    let mut points: Vec<usize> = raw
        .iter()
        .map(|r| if input_len == 0 { 0 } else { r % input_len })
        .collect();
    points.sort_unstable();
    points.dedup();
    points
}

/// `input` cut at `points`.
pub fn chunks<'a>(input: &'a [u8], points: &[usize]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut start = 0;
    for &p in points {
        if p > start {
            out.push(&input[start..p]);
            start = p;
        }
    }
    out.push(&input[start..]);
    out
}

// ---------------------------------------------------------------------------------------
// Seeds

/// The recorded provider cases.
pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/provider-recordings"
    ))
}

/// `response.body` of every recorded case whose folder name contains one of `names` (all when
/// empty), with the case's name.
pub fn provider_bodies(names: &[&str]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut dirs: Vec<_> = std::fs::read_dir(fixtures_dir())
        .expect("tests/fixtures/provider-recordings")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.join("response.body").is_file())
        .collect();
    dirs.sort();
    for dir in dirs {
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned());
        let name = name.unwrap_or_default();
        if names.is_empty() || names.iter().any(|n| name.contains(n)) {
            out.push(std::fs::read(dir.join("response.body")).expect("body"));
        }
    }
    assert!(!out.is_empty(), "no fixtures match {names:?}");
    out
}

/// The example specs and the full config fixture, as `(path, text)`.
pub fn spec_seeds() -> Vec<(PathBuf, Vec<u8>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    for dir in [root.join("examples"), root.join("tests/config_fixtures")] {
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .expect("spec folder")
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            // Loading it needs `node` on PATH (tests/extras/install.sh mcp); the other specs
            // cover its parser paths, and tests/it/config/model_settings.rs loads it in that tier.
            .filter(|p| p.file_name().is_none_or(|n| n != "mcp.toml"))
            .collect();
        files.sort();
        for f in files {
            let text = std::fs::read(&f).expect("spec");
            out.push((f, text));
        }
    }
    out
}

/// A cassette (version 2, and the same downgraded to version 1) and a signed receipts export
/// from a real run of the binary, made once per test process.
pub struct RunArtifacts {
    pub cassette: Vec<u8>,
    pub cassette_v1: Vec<u8>,
    pub receipts: Vec<u8>,
    pub public_key: String,
    _dir: tempfile::TempDir,
}

pub fn run_artifacts() -> &'static RunArtifacts {
    static ONCE: OnceLock<RunArtifacts> = OnceLock::new();
    ONCE.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("runs.db");
        let key = dir.path().join("receipt.key");
        let runtape = |args: &[&str]| {
            let o = cli::runtape(&db, args);
            assert!(o.status.success(), "runtape {args:?}: {}", cli::err(&o));
            cli::out(&o)
        };
        runtape(&["keygen", "-o", cli::utf8(&key)]);
        let spec = cli::example("quickstart.toml");
        let run = cli::first_id(&runtape(&[
            "run",
            cli::utf8(&spec),
            "--receipt-key",
            cli::utf8(&key),
        ]));
        let cassette = dir.path().join("run.cassette.json");
        let receipts = dir.path().join("run.receipts.jsonl");
        runtape(&["cassette", "export", &run, "-o", cli::utf8(&cassette)]);
        runtape(&["receipts", "export", &run, "-o", cli::utf8(&receipts)]);
        let cassette = std::fs::read(&cassette).expect("cassette");
        let mut v: serde_json::Value = serde_json::from_slice(&cassette).expect("JSON");
        cli::downgraded(&mut v);
        let public_key =
            std::fs::read_to_string(format!("{}.pub", key.display())).expect("public key");
        RunArtifacts {
            cassette,
            cassette_v1: serde_json::to_vec(&v).expect("JSON"),
            receipts: std::fs::read(&receipts).expect("receipts"),
            public_key,
            _dir: dir,
        }
    })
}

//! Every parser of outside input, fed arbitrary bytes and real inputs mutated (recorded
//! provider replies, the example specs, a cassette and receipts from a real run): it never
//! panics, never holds more heap than [`BYTES_PER_INPUT_BYTE`] per input byte plus
//! [`FIXED_ALLOWANCE`] ([`SPEC_ALLOWANCE`] for spec files), answers with errors of one line, and — for the incremental stream
//! decoders — gives the same result however the input is cut into chunks.
//!
//! `cargo test --test fuzz_parsers` is the short run (500 cases per property). The long run:
//! `RUNTAPE_FUZZ_CASES=100000 cargo test --release --test fuzz_parsers`.
//!
//! A test binary of its own, not a module of `tests/it`: its `#[global_allocator]` counts the
//! heap of the whole process, so the peak a parse reaches is that parse's only while no other
//! test runs in the process.

mod fuzz_support;

use std::path::Path;

use fuzz_support::*;
use proptest::prelude::*;
use runtape::cassette::{Cassette, LoadOptions};
use runtape::provider::http::{
    NdjsonDecoder, ProviderKind, SseDecoder, StreamDecoder, decode_response,
};

const KINDS: [ProviderKind; 3] = [
    ProviderKind::OpenAi,
    ProviderKind::Anthropic,
    ProviderKind::Ollama,
];

/// Runs `check` on inputs drawn from `inputs` as `proptest!` would (the same configuration from
/// the environment, failures kept in `fuzz_parsers.proptest-regressions`), then [`report`]s.
/// Holds [`serial`] while it runs.
fn fuzz<S: Strategy>(inputs: S, check: impl Fn(S::Value) -> Result<(), TestCaseError>) {
    let _one = serial();
    let mut config = proptest::test_runner::contextualize_config(config());
    config.source_file = Some(file!());
    let mut runner = proptest::test_runner::TestRunner::new(config);
    if let Err(e) = runner.run(&inputs, check) {
        panic!("{e}\n{runner}");
    }
    report();
}

/// Where to cut an input into chunks: raw positions, for [`cuts`].
fn cut_points() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(any::<usize>(), 0..16)
}

// ---------------------------------------------------------------------------------------
// Spec files (TOML)

fn check_spec(path: &Path, bytes: &[u8]) -> Result<(), TestCaseError> {
    let text = String::from_utf8_lossy(bytes);
    let (result, peak) = measured(|| runtape::config::load_text(path, &text));
    assert_bounded("spec", text.len(), peak)?;
    if let Err(e) = result {
        assert_one_line("spec", &e.to_string())?;
    }
    Ok(())
}

fn spec_path() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/fuzzed.toml")
}

#[test]
fn spec_files_of_arbitrary_bytes() {
    fuzz(arbitrary(2048), |bytes| check_spec(&spec_path(), &bytes));
}

#[test]
fn spec_files_mutated_from_the_examples() {
    let seeds: Vec<Vec<u8>> = {
        let _one = serial();
        for (path, text) in spec_seeds() {
            let (result, _) =
                measured(|| runtape::config::load_text(&path, &String::from_utf8_lossy(&text)));
            assert!(
                result.is_ok(),
                "seed {} loads: {:?}",
                path.display(),
                result.err()
            );
        }
        spec_seeds().into_iter().map(|(_, text)| text).collect()
    };
    fuzz(mutated(seeds), |bytes| check_spec(&spec_path(), &bytes));
}

// ---------------------------------------------------------------------------------------
// SSE and NDJSON framing

/// Events and the first error, feeding `chunks` in order.
fn sse_events(chunks: &[&[u8]]) -> (Vec<(Option<String>, String)>, Option<String>) {
    let mut decoder = SseDecoder::new();
    let mut events = Vec::new();
    for chunk in chunks {
        decoder.push(chunk);
        loop {
            match decoder.next_event() {
                Ok(Some(e)) => events.push((e.event, e.data)),
                Ok(None) => break,
                Err(e) => return (events, Some(e.to_string())),
            }
        }
    }
    (events, None)
}

fn check_sse(input: &[u8], raw_cuts: &[usize]) -> Result<(), TestCaseError> {
    let points = cuts(input.len(), raw_cuts);
    let ((chunked_events, chunked_err), peak) = measured(|| sse_events(&chunks(input, &points)));
    assert_bounded("SSE", input.len(), peak)?;
    let (whole_events, whole_err) = sse_events(&[input]);
    if let Some(e) = &chunked_err {
        assert_one_line("SSE", e)?;
    }
    prop_assert_eq!(&chunked_events, &whole_events, "events depend on chunking");
    prop_assert_eq!(&chunked_err, &whole_err, "errors depend on chunking");
    Ok(())
}

#[test]
fn sse_of_arbitrary_bytes() {
    fuzz((arbitrary(4096), cut_points()), |(bytes, raw)| {
        check_sse(&bytes, &raw)
    });
}

#[test]
fn sse_mutated_from_recorded_streams() {
    let seeds = provider_bodies(&[
        "openai-chat-text-stream",
        "toolcall-stream",
        "messages-text-stream",
        "tooluse-parallel-stream",
        "max-tokens-stream",
        "stream-empty-input",
    ]);
    fuzz((mutated(seeds), cut_points()), |(bytes, raw)| {
        check_sse(&bytes, &raw)
    });
}

/// Lines and the first error, feeding `chunks` in order, then finishing.
fn ndjson_lines(chunks: &[&[u8]]) -> (Vec<String>, Option<String>) {
    let mut decoder = NdjsonDecoder::new();
    let mut lines = Vec::new();
    for chunk in chunks {
        decoder.push(chunk);
        loop {
            match decoder.next_line() {
                Ok(Some(l)) => lines.push(l),
                Ok(None) => break,
                Err(e) => return (lines, Some(e.to_string())),
            }
        }
    }
    match decoder.finish() {
        Ok(Some(l)) => lines.push(l),
        Ok(None) => {}
        Err(e) => return (lines, Some(e.to_string())),
    }
    (lines, None)
}

fn check_ndjson(input: &[u8], raw_cuts: &[usize]) -> Result<(), TestCaseError> {
    let points = cuts(input.len(), raw_cuts);
    let ((lines, err), peak) = measured(|| ndjson_lines(&chunks(input, &points)));
    assert_bounded("NDJSON", input.len(), peak)?;
    if let Some(e) = &err {
        assert_one_line("NDJSON", e)?;
    }
    let whole = ndjson_lines(&[input]);
    prop_assert_eq!((lines, err), whole, "the result depends on chunking");
    Ok(())
}

#[test]
fn ndjson_of_arbitrary_bytes() {
    fuzz((arbitrary(4096), cut_points()), |(bytes, raw)| {
        check_ndjson(&bytes, &raw)
    });
}

#[test]
fn ndjson_mutated_from_recorded_streams() {
    fuzz(
        (
            mutated(provider_bodies(&[
                "ollama-chat-stream",
                "ollama-chat-toolcall-stream",
            ])),
            cut_points(),
        ),
        |(bytes, raw)| check_ndjson(&bytes, &raw),
    );
}

// ---------------------------------------------------------------------------------------
// Provider replies, whole and streamed

fn check_body(bytes: &[u8]) -> Result<(), TestCaseError> {
    for kind in KINDS {
        let (result, peak) = measured(|| decode_response(kind, bytes));
        assert_bounded("reply body", bytes.len(), peak)?;
        if let Err(e) = result {
            assert_one_line("reply body", &e.to_string())?;
        }
    }
    Ok(())
}

/// The text deltas, and the reply (as JSON) or the error, feeding `chunks` in order.
fn streamed(kind: ProviderKind, chunks: &[&[u8]]) -> (String, Result<String, String>) {
    let mut decoder = StreamDecoder::new(kind);
    let mut text = String::new();
    for chunk in chunks {
        if let Err(e) = decoder.push(chunk, &mut |d| text.push_str(d)) {
            return (text, Err(e.to_string()));
        }
    }
    let end = decoder.finish(&mut |d| text.push_str(d));
    let end = end
        .map(|d| serde_json::to_string(&d.reply).unwrap_or_default())
        .map_err(|e| e.to_string());
    (text, end)
}

fn check_stream(bytes: &[u8], raw_cuts: &[usize]) -> Result<(), TestCaseError> {
    let points = cuts(bytes.len(), raw_cuts);
    for kind in KINDS {
        let ((text, end), peak) = measured(|| streamed(kind, &chunks(bytes, &points)));
        assert_bounded("reply stream", bytes.len(), peak)?;
        if let Err(e) = &end {
            assert_one_line("reply stream", e)?;
        }
        let whole = streamed(kind, &[bytes]);
        prop_assert_eq!(
            (text, end),
            whole,
            "{:?}: the result depends on chunking",
            kind
        );
    }
    Ok(())
}

#[test]
fn reply_bodies_of_arbitrary_bytes() {
    fuzz(arbitrary(4096), |bytes| check_body(&bytes));
}

#[test]
fn reply_bodies_mutated_from_recorded_replies() {
    fuzz(mutated(provider_bodies(&["nonstream", "error"])), |bytes| {
        check_body(&bytes)
    });
}

#[test]
fn reply_streams_of_arbitrary_bytes() {
    fuzz((arbitrary(4096), cut_points()), |(bytes, raw)| {
        check_stream(&bytes, &raw)
    });
}

#[test]
fn reply_streams_mutated_from_recorded_streams() {
    fuzz(
        (mutated(provider_bodies(&["stream"])), cut_points()),
        |(bytes, raw)| check_stream(&bytes, &raw),
    );
}

// ---------------------------------------------------------------------------------------
// Cassettes and receipts

fn check_cassette(bytes: &[u8]) -> Result<(), TestCaseError> {
    for require_integrity in [false, true] {
        let options = LoadOptions {
            require_integrity,
            ..LoadOptions::default()
        };
        let (result, peak) = measured(|| Cassette::from_slice(bytes, &options));
        assert_bounded("cassette", bytes.len(), peak)?;
        if let Err(e) = result {
            assert_one_line("cassette", &e.to_string())?;
        }
    }
    Ok(())
}

#[test]
fn cassettes_of_arbitrary_bytes() {
    fuzz(arbitrary(4096), |bytes| check_cassette(&bytes));
}

#[test]
fn cassettes_mutated_from_a_real_export() {
    let seeds = {
        let _one = serial();
        let run = run_artifacts();
        for seed in [&run.cassette, &run.cassette_v1] {
            assert!(
                Cassette::from_slice(seed, &LoadOptions::default()).is_ok(),
                "seed loads"
            );
        }
        vec![run.cassette.clone(), run.cassette_v1.clone()]
    };
    fuzz(mutated(seeds), |bytes| check_cassette(&bytes));
}

fn check_receipts(bytes: &[u8], key: &runtape::receipt::VerifyingKey) -> Result<(), TestCaseError> {
    let (result, peak) = measured(|| {
        runtape::receipt::read_bundle(bytes).and_then(|bundle| {
            runtape::receipt::verify_bundle(&bundle, Some(key), false)
                .map(|_| ())
                .map_err(|e| runtape::receipt::ReceiptError::Io {
                    reason: e.to_string(),
                })
        })
    });
    assert_bounded("receipts", bytes.len(), peak)?;
    if let Err(e) = result {
        assert_one_line("receipts", &e.to_string())?;
    }
    Ok(())
}

#[test]
fn receipts_of_arbitrary_bytes() {
    let key = {
        let _one = serial();
        runtape::receipt::parse_public_key(&run_artifacts().public_key).expect("key")
    };
    fuzz(arbitrary(4096), |bytes| check_receipts(&bytes, &key));
}

#[test]
fn receipts_mutated_from_a_real_export() {
    let (key, seeds) = {
        let _one = serial();
        let run = run_artifacts();
        let key = runtape::receipt::parse_public_key(&run.public_key).expect("key");
        let bundle = runtape::receipt::read_bundle(&run.receipts[..]).expect("seed reads");
        runtape::receipt::verify_bundle(&bundle, Some(&key), false).expect("seed verifies");
        (key, vec![run.receipts.clone()])
    };
    fuzz(mutated(seeds), |bytes| check_receipts(&bytes, &key));
}

// ---------------------------------------------------------------------------------------
// What the fuzzing found (fixed): input quoted in an error broke it over several lines.

#[test]
fn input_quoted_in_errors_stays_on_one_line() {
    let _one = serial();
    let path = spec_path();
    for spec in [
        "\"x\\ny\" = 1\n",
        "[[providers]]\nname = \"a\"\nkind = \"echo\"\n[[agents]]\nid = \"x\\ny\"\nprovider = \"a\"\n",
        "[[providers]]\nname = \"a\\nb\"\nkind = \"echo\"\n[[agents]]\nid = \"x\"\nprovider = \"a\\nc\"\n",
    ] {
        let e = runtape::config::load_text(&path, spec).expect_err("refused");
        assert!(!e.to_string().contains('\n'), "{e}");
    }
    let cassette =
        br#"{"version": 2, "entries": [], "recordedAt": "x", "recordedProvider": "p", "a\nb": 1}"#;
    let e = Cassette::from_slice(cassette, &LoadOptions::default()).expect_err("refused");
    assert!(!e.to_string().contains('\n'), "{e}");
    let receipts = b"{\"body\": {\"\\ncost\": 1}}\n";
    let e = runtape::receipt::read_jsonl(&receipts[..]).expect_err("refused");
    assert!(!e.to_string().contains('\n'), "{e}");
    let body =
        br#"{"type": "error", "error": {"type": "rate_limit_error", "message": "\nslow\ndown"}}"#;
    let e = decode_response(ProviderKind::Anthropic, body).expect_err("an error");
    assert_eq!(e.to_string(), "provider reported an error: \\nslow\\ndown");
}

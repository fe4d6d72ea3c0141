//! Decoders never panic and never report success on broken input: random bytes, truncated
//! streams, invalid UTF-8, oversized lines and errors inside 200 responses are all errors.

use crate::support;

use std::sync::LazyLock;

use proptest::prelude::*;
use runtape::provider::http::{
    DecodeError, MAX_EVENT_BYTES, ProviderKind, StreamDecoder, decode_response, decode_stream,
};
use support::provider::{Case, load_cases};

static CASES: LazyLock<Vec<Case>> = LazyLock::new(load_cases);

const KINDS: [ProviderKind; 3] = [
    ProviderKind::OpenAi,
    ProviderKind::Anthropic,
    ProviderKind::Ollama,
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048), cut in 0usize..2048) {
        for kind in KINDS {
            let _ = decode_response(kind, &bytes);
            let at = cut.min(bytes.len());
            let _ = decode_stream(kind, [&bytes[..at], &bytes[at..]], &mut |_| {});
        }
    }

    #[test]
    fn mutated_recordings_never_panic(which in 0usize..64, flips in prop::collection::vec((0usize..10_000, any::<u8>()), 1..8)) {
        let case = &CASES[which % CASES.len()];
        let mut body = case.body.clone();
        for (at, byte) in flips {
            let i = at % body.len().max(1);
            if let Some(b) = body.get_mut(i) {
                *b = byte;
            }
        }
        let _ = decode_response(case.kind(), &body);
        let _ = decode_stream(case.kind(), [body.as_slice()], &mut |_| {});
    }
}

/// Every prefix of a recorded stream either fails or — when it already holds the terminal
/// event — gives exactly the whole stream's reply. A cut stream is never a different success.
#[test]
fn a_truncated_stream_is_never_a_success() {
    let mut checked = 0;
    for case in CASES
        .iter()
        .filter(|c| c.stream() && c.expect["kind"] == "success")
    {
        let kind = case.kind();
        let whole = decode_stream(kind, [case.body.as_slice()], &mut |_| {}).unwrap();
        let len = case.body.len();
        let lengths = (0..len).filter(|n| n % 17 == 0 || len - n < 300);
        for n in lengths {
            match decode_stream(kind, [&case.body[..n]], &mut |_| {}) {
                Ok(decoded) => assert_eq!(
                    decoded, whole,
                    "{} cut at {n} succeeded differently",
                    case.name
                ),
                Err(e) => {
                    checked += 1;
                    let retryable_shape = matches!(
                        e,
                        DecodeError::Truncated { .. }
                            | DecodeError::InvalidJson {
                                truncated: true,
                                ..
                            }
                    );
                    assert!(retryable_shape, "{} cut at {n}: {e:?}", case.name);
                }
            }
        }
    }
    assert!(checked > 1000, "only {checked} truncations checked");
}

#[test]
fn the_terminal_event_is_required() {
    let openai = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\n";
    let anthropic =
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\"}}\n\n";
    let ollama = "{\"message\":{\"content\":\"hi\"},\"done\":false}\n";
    for (kind, body, expected) in [
        (ProviderKind::OpenAi, openai, "`data: [DONE]`"),
        (
            ProviderKind::Anthropic,
            anthropic,
            "the `message_stop` event",
        ),
        (ProviderKind::Ollama, ollama, "a line with `\"done\": true`"),
    ] {
        let err = decode_stream(kind, [body.as_bytes()], &mut |_| {}).unwrap_err();
        assert_eq!(err, DecodeError::Truncated { expected }, "{kind}");
    }
}

#[test]
fn bytes_after_the_terminal_event_are_ignored() {
    let cases = [
        (
            ProviderKind::OpenAi,
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\ndata: {broken",
        ),
        (
            ProviderKind::Anthropic,
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\nevent: error\ndata: {\"type\":\"error\"}\n\n",
        ),
        (
            ProviderKind::Ollama,
            "{\"message\":{\"content\":\"hi\"},\"done\":true}\n{\"error\":\"late\"}\n{\"trunc",
        ),
    ];
    for (kind, body) in cases {
        let result = decode_stream(kind, [body.as_bytes()], &mut |_| {});
        assert!(result.is_ok(), "{kind}: {result:?}");
    }
}

#[test]
fn errors_inside_a_200_stream_are_errors_after_the_text_so_far() {
    let anthropic = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\"}}\n\n\
        event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"par\"}}\n\n\
        event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
    let openai = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"par\"}}]}\n\n\
        data: {\"error\":{\"message\":\"The server had an error\",\"type\":\"server_error\",\"code\":null}}\n\n";
    let ollama = "{\"message\":{\"content\":\"par\"},\"done\":false}\n{\"error\":\"model runner stopped\"}\n";
    for (kind, body, error_type, message) in [
        (
            ProviderKind::Anthropic,
            anthropic,
            Some("overloaded_error"),
            "Overloaded",
        ),
        (
            ProviderKind::OpenAi,
            openai,
            Some("server_error"),
            "The server had an error",
        ),
        (ProviderKind::Ollama, ollama, None, "model runner stopped"),
    ] {
        let mut seen = String::new();
        let mut decoder = StreamDecoder::new(kind);
        let err = decoder
            .push(body.as_bytes(), &mut |t| seen.push_str(t))
            .unwrap_err();
        let DecodeError::Reported(reported) = err else {
            panic!("{kind}: {err:?}")
        };
        assert_eq!(reported.error_type.as_deref(), error_type, "{kind}");
        assert_eq!(reported.message, message, "{kind}");
        assert_eq!(
            seen, "par",
            "{kind}: text before the error was still delivered"
        );
        assert!(
            matches!(decoder.finish(&mut |_| {}), Err(DecodeError::Reported(_))),
            "{kind}: the error sticks"
        );
    }
}

#[test]
fn a_200_body_holding_an_error_is_an_error() {
    let body = br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    assert!(matches!(
        decode_response(ProviderKind::Anthropic, body),
        Err(DecodeError::Reported(_))
    ));
    let body = br#"{"error":{"message":"bad","type":"invalid_request_error"}}"#;
    assert!(matches!(
        decode_response(ProviderKind::OpenAi, body),
        Err(DecodeError::Reported(_))
    ));
}

#[test]
fn invalid_utf8_and_oversized_input_are_errors() {
    let bad = b"data: {\"choices\":[{\"delta\":{\"content\":\"\xff\"}}]}\n\n";
    assert_eq!(
        decode_stream(ProviderKind::OpenAi, [&bad[..]], &mut |_| {}),
        Err(DecodeError::InvalidUtf8)
    );
    assert_eq!(
        decode_response(ProviderKind::OpenAi, b"{\"x\":\"\xc3\"}"),
        Err(DecodeError::InvalidUtf8)
    );

    let huge = vec![b'a'; MAX_EVENT_BYTES + 10];
    for kind in KINDS {
        let err = decode_stream(kind, [huge.as_slice()], &mut |_| {}).unwrap_err();
        assert!(
            matches!(err, DecodeError::TooLarge { .. }),
            "{kind}: {err:?}"
        );
    }
}

#[test]
fn arguments_that_are_not_json_are_reported_not_dropped() {
    let body = br#"{"choices":[{"index":0,"message":{"content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"t","arguments":"{\"a\": tru"}}]},"finish_reason":"tool_calls"}]}"#;
    let call = &decode_response(ProviderKind::OpenAi, body)
        .unwrap()
        .reply
        .tool_calls[0];
    assert_eq!(call.arguments, serde_json::Value::Null);
    assert_eq!(call.arguments_raw.as_deref(), Some("{\"a\": tru"));
    assert!(call.parse_error.is_some());
}

//! A streamed reply does not depend on how its bytes were cut into chunks: every recorded
//! stream, split at arbitrary offsets (inside UTF-8 sequences, mid-line, between `\r` and
//! `\n`, between the two newlines ending an event), decodes to the same reply and the same
//! text deltas as the whole body.

use crate::support;

use std::sync::LazyLock;

use proptest::prelude::*;
use runtape::machine::{Finish, TokenUsage};
use runtape::provider::http::{
    DecodeError, Decoded, ProviderKind, SseDecoder, SseEvent, decode_stream,
};
use support::provider::load_cases;

struct Stream {
    name: String,
    kind: ProviderKind,
    body: Vec<u8>,
}

/// Every recorded successful stream plus synthetic ones covering what the recordings lack.
static STREAMS: LazyLock<Vec<Stream>> = LazyLock::new(|| {
    let mut streams: Vec<Stream> = load_cases()
        .into_iter()
        .filter(|c| c.stream() && c.expect["kind"] == "success")
        .map(|c| Stream {
            kind: c.kind(),
            name: c.name.clone(),
            body: c.body,
        })
        .collect();
    streams.push(Stream {
        name: "synthetic-anthropic-thinking-crlf".into(),
        kind: ProviderKind::Anthropic,
        body: THINKING.replace('\n', "\r\n").into_bytes(),
    });
    streams.push(Stream {
        name: "synthetic-openai-multibyte-cr".into(),
        kind: ProviderKind::OpenAi,
        body: MULTIBYTE.replace('\n', "\r").into_bytes(),
    });
    streams
});

const THINKING: &str = "event: message_start
data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"model\":\"claude-sonnet-4-5\",\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}

: a comment

event: content_block_start
data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}

event: content_block_delta
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"Let me think — über\"}}

event: content_block_delta
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\" alles.\"}}

event: content_block_delta
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"sig-abc\"}}

event: content_block_stop
data: {\"type\":\"content_block_stop\",\"index\":0}

event: content_block_start
data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}

event: content_block_delta
data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"Grüße \"}}

event: content_block_delta
data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"👋\"}}

event: content_block_stop
data: {\"type\":\"content_block_stop\",\"index\":1}

event: message_delta
data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"stop_sequence\",\"stop_sequence\":\"END\"},\"usage\":{\"output_tokens\":30}}

event: message_stop
data: {\"type\":\"message_stop\"}

";

const MULTIBYTE: &str = "data: {\"id\":\"c1\",\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"日本語\"}}]}

data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"🦀 ok\"},\"finish_reason\":\"stop\"}]}

data: [DONE]

";

fn decode(kind: ProviderKind, pieces: &[&[u8]]) -> (Result<Decoded, DecodeError>, Vec<String>) {
    let mut deltas = Vec::new();
    let result = decode_stream(kind, pieces.iter().copied(), &mut |t| {
        deltas.push(t.to_owned())
    });
    (result, deltas)
}

fn cut(body: &[u8], offsets: &[usize]) -> Vec<Vec<u8>> {
    let mut points: Vec<usize> = offsets.iter().map(|o| o % (body.len() + 1)).collect();
    points.sort_unstable();
    points.dedup();
    let mut pieces = Vec::new();
    let mut start = 0;
    for p in points.into_iter().chain([body.len()]) {
        pieces.push(body[start..p].to_vec());
        start = p;
    }
    pieces
}

#[test]
fn whole_bodies_decode() {
    assert!(
        STREAMS.len() >= 12,
        "expected the recorded streams plus synthetic ones"
    );
    for s in STREAMS.iter() {
        let (result, deltas) = decode(s.kind, &[&s.body]);
        let decoded = result.unwrap_or_else(|e| panic!("{}: {e}", s.name));
        assert_eq!(
            deltas.concat(),
            decoded.reply.text.unwrap_or_default(),
            "{}",
            s.name
        );
    }
}

#[test]
fn byte_by_byte_equals_whole() {
    for s in STREAMS.iter() {
        let singles: Vec<&[u8]> = s.body.chunks(1).collect();
        let (whole, whole_deltas) = decode(s.kind, &[&s.body]);
        let (split, split_deltas) = decode(s.kind, &singles);
        assert_eq!(split, whole, "{}", s.name);
        assert_eq!(split_deltas, whole_deltas, "{}", s.name);
    }
}

#[test]
fn synthetic_streams_carry_thinking_signatures_and_multibyte_text() {
    let thinking = STREAMS
        .iter()
        .find(|s| s.name == "synthetic-anthropic-thinking-crlf")
        .unwrap();
    let d = decode(thinking.kind, &[&thinking.body]).0.unwrap();
    assert_eq!(
        d.reply.thinking.as_deref(),
        Some("Let me think — über alles.")
    );
    assert_eq!(d.reply.text.as_deref(), Some("Grüße 👋"));
    assert_eq!(d.details.thinking_signatures, vec!["sig-abc".to_owned()]);
    assert_eq!(
        d.details.content_block_types,
        vec!["thinking".to_owned(), "text".to_owned()]
    );
    assert_eq!(d.details.stop_sequence.as_deref(), Some("END"));
    assert_eq!(d.reply.finish_reason.normalized, Some(Finish::StopSequence));
    assert_eq!(d.reply.usage, Some(TokenUsage::new(12, 30)));
    assert_eq!(d.details.stream.unwrap().comments, 1);

    let multibyte = STREAMS
        .iter()
        .find(|s| s.name.contains("multibyte"))
        .unwrap();
    let d = decode(multibyte.kind, &[&multibyte.body]).0.unwrap();
    assert_eq!(d.reply.text.as_deref(), Some("日本語🦀 ok"));
    assert_eq!(
        d.reply.usage, None,
        "no usage reported means None, not zeros"
    );
}

fn sse_events(pieces: &[Vec<u8>]) -> Vec<SseEvent> {
    let mut decoder = SseDecoder::new();
    let mut events = Vec::new();
    for piece in pieces {
        decoder.push(piece);
        while let Some(event) = decoder.next_event().unwrap() {
            events.push(event);
        }
    }
    events
}

/// Every line-ending style, named events, multi-line data, comments and multi-byte text.
const SSE_MIX: &str = "\u{feff}event: first\r\ndata: a\r\ndata: é\r\n\r\n: c\revent: second\rdata: 🦀\r\revent: third\ndata:\n\n";

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn sse_events_are_the_same_under_any_split(offsets in prop::collection::vec(0usize..200, 0..24)) {
        let body = SSE_MIX.as_bytes();
        let whole = sse_events(&[body.to_vec()]);
        prop_assert_eq!(whole.len(), 3);
        prop_assert_eq!(whole[0].event.as_deref(), Some("first"));
        prop_assert_eq!(whole[0].data.as_str(), "a\né");
        prop_assert_eq!(whole[1].event.as_deref(), Some("second"));
        prop_assert_eq!(whole[2].data.as_str(), "");
        prop_assert_eq!(sse_events(&cut(body, &offsets)), whole);
    }

    #[test]
    fn any_split_gives_the_same_reply(which in 0usize..64, offsets in prop::collection::vec(0usize..20_000, 0..48)) {
        let s = &STREAMS[which % STREAMS.len()];
        let pieces = cut(&s.body, &offsets);
        let refs: Vec<&[u8]> = pieces.iter().map(Vec::as_slice).collect();
        let (whole, whole_deltas) = decode(s.kind, &[&s.body]);
        let (split, split_deltas) = decode(s.kind, &refs);
        prop_assert_eq!(split, whole, "{}", s.name);
        prop_assert_eq!(split_deltas, whole_deltas, "{}", s.name);
    }
}

//! A conversation read whole ([`Store::conversation_nodes`]) in every store: the nodes from a
//! head back to the first message, newest first, exactly as [`Store::blob`] returns each —
//! including nodes a SQLite store keeps packed against the event of the transition that
//! appended them — stopping after as many as asked for, and nothing for a head not stored.

use super::*;
use runtape::machine::ConversationRef;

/// A conversation of five messages, one appended by each of five commits whose events carry
/// the message's text (so a store that packs a node against its event does), reads back whole,
/// cut short, and not at all for an unknown head.
pub(super) fn a_conversation_reads_back_whole_in_one_walk(make: Maker) {
    let store = make();
    let s = store.as_ref();
    create(s, "c");
    let mut head = Digest::ZERO;
    let mut written = Vec::new();
    for seq in 1..=5 {
        let text = format!(
            "message {seq}: {}",
            "a long line of text shared with its event ".repeat(3)
        );
        let message = format!("{{\"role\":\"assistant\",\"content\":\"{text}\"}}");
        let node = [&head.0[..], message.as_bytes()].concat();
        head = ConversationRef::chain(&head, message.as_bytes());
        let mut c = commit("c", 1, seq);
        c.event = format!("{{\"seq\":{seq},\"text\":\"{text}\"}}").into_bytes();
        c.blobs = vec![(head, node.clone())];
        w(s, Write::Commit(Box::new(c))).expect("commits");
        written.push((head, node));
    }
    written.reverse();
    for (digest, node) in &written {
        assert_eq!(s.blob(digest).expect("reads").as_ref(), Some(node));
    }
    assert_eq!(s.conversation_nodes(&head, 5).expect("reads"), written);
    assert_eq!(s.conversation_nodes(&head, 50).expect("reads"), written);
    assert_eq!(s.conversation_nodes(&head, 2).expect("reads"), written[..2]);
    assert_eq!(
        s.conversation_nodes(&written[2].0, 5).expect("reads"),
        written[2..]
    );
    assert!(
        s.conversation_nodes(&Digest::of(b"absent"), 5)
            .expect("reads")
            .is_empty()
    );
}

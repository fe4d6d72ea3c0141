//! Information-flow labels: how far a piece of the conversation may be trusted, and who may
//! read it.
//!
//! Every message the machine appends carries a [`Label`]: an [`Integrity`] (was it written by
//! someone the run's author trusts, or could an outsider have put words in it?) and a
//! [`Confidentiality`] (may it leave the run through any tool, or only through tools whose
//! arguments accept private data?). Labels come from the spec: a tool, MCP server or retriever
//! declared `trust = "untrusted"` labels its results untrusted, one declared
//! `confidentiality = "private"` labels them private. The goal, the system prompts, a
//! person's answers and the machine's own words are trusted and public.
//!
//! Labels flow as taint. Each agent keeps the [join](Label::join) of the labels of everything
//! its conversation holds ([`AgentRun::taint`](super::AgentRun::taint)); a model reply is
//! labelled with that join, because the model read all of it before writing the reply. A
//! message copied to another agent (a handoff note, a transfer, a session's carried
//! conversation) keeps its label and taints its new reader. Taint never decreases within an
//! agent's conversation: a fork's edit that drops messages keeps the taint they brought,
//! which errs on the safe side.
//!
//! A label is part of the message's canonical bytes, so the conversation's Merkle head, the
//! state hash and therefore `verify` cover it. The default label (trusted, public) is left out
//! of the encoding, so a run that declares no trust has the bytes and hashes it always had.

use serde::{Deserialize, Serialize};

/// Whether text could carry an outsider's instructions.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Integrity {
    /// Written by the run's author, a person answering, the machine, or a tool the spec
    /// trusts (the default).
    #[default]
    Trusted,
    /// From, or derived from, a source the spec declares untrusted: a web page, an inbox, an
    /// MCP server's answer.
    Untrusted,
}

/// Who may read text: the ordering is "more secret is greater".
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Confidentiality {
    /// Anyone: it may flow to any tool argument (the default).
    #[default]
    Public,
    /// Only the run: an argument constrained to `public` may not carry it.
    Private,
}

/// The label of one message (or of one decision, for a model reply).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Label {
    /// Trusted or untrusted.
    #[serde(default, skip_serializing_if = "is_default")]
    pub integrity: Integrity,
    /// Public or private.
    #[serde(default, skip_serializing_if = "is_default")]
    pub confidentiality: Confidentiality,
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

impl Label {
    /// Trusted and public: the goal, system prompts, a person's words, the machine's notes.
    pub const TRUSTED: Label = Label {
        integrity: Integrity::Trusted,
        confidentiality: Confidentiality::Public,
    };

    /// A label from its two parts.
    pub fn new(integrity: Integrity, confidentiality: Confidentiality) -> Self {
        Label {
            integrity,
            confidentiality,
        }
    }

    /// The least label that is at least as untrusted and as secret as both: what text
    /// derived from both carries. Commutative, associative, idempotent, with
    /// [`Label::TRUSTED`] as its identity.
    pub fn join(self, other: Label) -> Label {
        Label {
            integrity: self.integrity.max(other.integrity),
            confidentiality: self.confidentiality.max(other.confidentiality),
        }
    }

    /// True for trusted and public, the label left out of every encoding.
    pub fn is_trusted_public(&self) -> bool {
        *self == Label::TRUSTED
    }

    /// True when outsiders could have written part of it.
    pub fn is_untrusted(&self) -> bool {
        self.integrity == Integrity::Untrusted
    }

    /// True when it may not go to an argument constrained to public data.
    pub fn is_private(&self) -> bool {
        self.confidentiality == Confidentiality::Private
    }

    /// `untrusted`, `private`, `untrusted, private`, or `trusted` for the default: how `show`
    /// names a label.
    pub fn describe(&self) -> String {
        match (self.is_untrusted(), self.is_private()) {
            (false, false) => "trusted".into(),
            (true, false) => "untrusted".into(),
            (false, true) => "private".into(),
            (true, true) => "untrusted, private".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Vec<Label> {
        let mut out = Vec::new();
        for i in [Integrity::Trusted, Integrity::Untrusted] {
            for c in [Confidentiality::Public, Confidentiality::Private] {
                out.push(Label::new(i, c));
            }
        }
        out
    }

    #[test]
    fn join_is_a_least_upper_bound() {
        for a in all() {
            assert_eq!(a.join(Label::TRUSTED), a, "identity");
            assert_eq!(a.join(a), a, "idempotent");
            for b in all() {
                assert_eq!(a.join(b), b.join(a), "commutative");
                let j = a.join(b);
                assert!(j.integrity >= a.integrity && j.integrity >= b.integrity);
                assert!(j.confidentiality >= a.confidentiality);
                assert!(j.confidentiality >= b.confidentiality);
                for c in all() {
                    assert_eq!(a.join(b).join(c), a.join(b.join(c)), "associative");
                }
            }
        }
    }

    #[test]
    fn untrusted_and_private_are_each_absorbing() {
        let untrusted = Label::new(Integrity::Untrusted, Confidentiality::Public);
        let private = Label::new(Integrity::Trusted, Confidentiality::Private);
        let both = untrusted.join(private);
        assert!(both.is_untrusted() && both.is_private());
        assert_eq!(both.describe(), "untrusted, private");
        assert_eq!(Label::TRUSTED.describe(), "trusted");
    }

    #[test]
    fn the_default_label_is_left_out_of_the_encoding() {
        assert_eq!(serde_json::to_string(&Label::TRUSTED).unwrap(), "{}");
        let untrusted = Label::new(Integrity::Untrusted, Confidentiality::Public);
        assert_eq!(
            serde_json::to_string(&untrusted).unwrap(),
            r#"{"integrity":"untrusted"}"#
        );
    }
}

//! Guarded tools: what a tool's results are labelled, and the policy checked before each of
//! its calls runs.
//!
//! A [`ToolGuard`] sits in a tool's [`ToolSpec`](super::ToolSpec) (the spec file's
//! `trust`, `confidentiality`, `consequential`, `on_untrusted` and `arguments` keys). Before a
//! call is dispatched the machine asks [`ToolGuard::check`] with the label of the decision to
//! make the call (the calling agent's [taint](super::AgentRun::taint): everything the model
//! had read when it asked) and the call's arguments:
//!
//! - a **consequential** tool runs only when the decision is trusted (FIDES' trusted-action
//!   policy);
//! - an **argument rule** constrains what may flow into one argument: `trusted` (it must not
//!   come from untrusted data) or `public` (it may carry only public data, for an argument that
//!   leaves the run: a recipient outside, a message body, a URL). An argument's label is the
//!   decision's label, since the model wrote every argument after reading everything.
//!
//! A call that breaks a rule is not run. With `on_untrusted = "deny"` (the default) the model
//! gets an error result saying why ([`Violation::denial`]); with `"ask"` the call waits for a
//! person's approval exactly like a `requires_approval` tool, and the request says why. Both
//! are decided inside the committed transition that records the model's reply, so the block,
//! its reason and what a person said are in the history `verify` re-folds.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::label::{Confidentiality, Integrity, Label};

/// What happens to a call a tool's policy blocks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnUntrusted {
    /// The call is not run; the model is told why (the default).
    #[default]
    Deny,
    /// A person decides, through the approval path; the request says why.
    Ask,
}

/// What may flow into one argument.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArgumentRule {
    /// The argument must not come from untrusted data.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub trusted: bool,
    /// The argument may carry only public data.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub public: bool,
}

/// A tool's labels and policy. The default (trusted, public results; no rule) is what every
/// tool of a spec that declares none has, and is left out of the stored spec.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolGuard {
    /// The label its results carry (`trust = "untrusted"`, `confidentiality = "private"`).
    #[serde(default, skip_serializing_if = "Label::is_trusted_public")]
    pub results: Label,
    /// It acts on the world (pays, sends, pushes, deletes): it runs only when the decision
    /// to call it was made from trusted context.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub consequential: bool,
    /// What a blocked call does.
    #[serde(default, skip_serializing_if = "is_deny")]
    pub on_untrusted: OnUntrusted,
    /// Rules on its arguments, by top-level argument name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub arguments: BTreeMap<String, ArgumentRule>,
    /// Its results are kept from the model as hidden values (`$r1`, …) it can pass to other
    /// tools without reading them (see [`hidden`](super::hidden)).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hide: bool,
    /// Its successful answers never quote its arguments (`echoes_arguments = false`): what it
    /// answers to a call that passed an untrusted hidden value keeps the tool's own integrity
    /// rather than taking the value's, so the model may read it. The value can still *select*
    /// which of the tool's answers comes back; confidentiality is joined as before, and an
    /// error answer (which may quote what it was given) carries the value's label.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_echo: bool,
}

fn is_deny(policy: &OnUntrusted) -> bool {
    *policy == OnUntrusted::Deny
}

/// Why a call was blocked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// A consequential tool was called from untrusted context.
    UntrustedDecision,
    /// An argument constrained to trusted data came from untrusted data.
    UntrustedArgument(String),
    /// An argument constrained to public data carried private data.
    PrivateArgument(String),
    /// An argument constrained to trusted data names an untrusted hidden value (the decision
    /// itself was trusted).
    UntrustedHiddenArgument(String),
    /// An argument constrained to public data names a private hidden value (the decision
    /// itself was public).
    PrivateHiddenArgument(String),
}

impl Violation {
    /// The rule broken, in words: names the tool and the argument, never the data.
    pub fn rule(&self, tool: &str) -> String {
        match self {
            Violation::UntrustedDecision => format!(
                "{tool} is consequential and this call was decided after reading untrusted data"
            ),
            Violation::UntrustedArgument(arg) => format!(
                "argument `{arg}` of {tool} must not come from untrusted data, and this call was decided after reading untrusted data"
            ),
            Violation::PrivateArgument(arg) => format!(
                "argument `{arg}` of {tool} may carry only public data, and this call was decided after reading private data"
            ),
            Violation::UntrustedHiddenArgument(arg) => format!(
                "argument `{arg}` of {tool} must not come from untrusted data, and it names an untrusted hidden value"
            ),
            Violation::PrivateHiddenArgument(arg) => format!(
                "argument `{arg}` of {tool} may carry only public data, and it names a private hidden value"
            ),
        }
    }

    /// What the model reads as the result of a denied call: the rule, and that nothing ran.
    pub fn denial(&self, tool: &str) -> String {
        format!("blocked by policy: {}; it was not run", self.rule(tool))
    }

    /// What a person reads in the approval request of a held call (`on_untrusted = "ask"`).
    pub fn hold(&self, tool: &str) -> String {
        format!(
            "held by policy: {}; it runs only if a person approves",
            self.rule(tool)
        )
    }

    /// A short code for traces: `untrusted_decision`, `untrusted_argument`,
    /// `private_argument`.
    pub fn code(&self) -> &'static str {
        match self {
            Violation::UntrustedDecision => "untrusted_decision",
            Violation::UntrustedArgument(_) | Violation::UntrustedHiddenArgument(_) => {
                "untrusted_argument"
            }
            Violation::PrivateArgument(_) | Violation::PrivateHiddenArgument(_) => {
                "private_argument"
            }
        }
    }
}

impl ToolGuard {
    /// True when it labels nothing and checks nothing: a tool as it was before guards.
    pub fn is_open(&self) -> bool {
        *self == ToolGuard::default()
    }

    /// A guard whose results carry `integrity` and `confidentiality`.
    pub fn labelled(integrity: Integrity, confidentiality: Confidentiality) -> Self {
        ToolGuard {
            results: Label::new(integrity, confidentiality),
            ..ToolGuard::default()
        }
    }

    /// The first rule a call with `args`, decided under `decision`, breaks; `None` when it
    /// may run. Checked in this order: the consequential rule, then the argument rules by
    /// argument name. An argument rule applies only when the call passes that argument (an
    /// absent argument carries nothing); the argument's label is `decision` joined with
    /// `carried(argument)`, the labels of the hidden values it refers to (see
    /// [`hidden::carried`](super::hidden::carried); `|_| Label::TRUSTED` when none are held).
    pub fn check(
        &self,
        decision: Label,
        args: &Value,
        carried: impl Fn(&Value) -> Label,
    ) -> Option<Violation> {
        if self.consequential && decision.is_untrusted() {
            return Some(Violation::UntrustedDecision);
        }
        for (name, rule) in &self.arguments {
            let Some(value) = args.get(name) else {
                continue;
            };
            let hidden = carried(value);
            if rule.trusted && decision.is_untrusted() {
                return Some(Violation::UntrustedArgument(name.clone()));
            }
            if rule.trusted && hidden.is_untrusted() {
                return Some(Violation::UntrustedHiddenArgument(name.clone()));
            }
            if rule.public && decision.is_private() {
                return Some(Violation::PrivateArgument(name.clone()));
            }
            if rule.public && hidden.is_private() {
                return Some(Violation::PrivateHiddenArgument(name.clone()));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const UNTRUSTED: Label = Label {
        integrity: Integrity::Untrusted,
        confidentiality: Confidentiality::Public,
    };
    const PRIVATE: Label = Label {
        integrity: Integrity::Trusted,
        confidentiality: Confidentiality::Private,
    };

    fn pay() -> ToolGuard {
        ToolGuard {
            consequential: true,
            ..ToolGuard::default()
        }
    }

    fn send() -> ToolGuard {
        let mut arguments = BTreeMap::new();
        arguments.insert(
            "to".to_owned(),
            ArgumentRule {
                trusted: true,
                public: false,
            },
        );
        arguments.insert(
            "body".to_owned(),
            ArgumentRule {
                trusted: false,
                public: true,
            },
        );
        ToolGuard {
            arguments,
            ..ToolGuard::default()
        }
    }

    #[test]
    fn a_consequential_tool_runs_only_from_trusted_context() {
        let args = json!({"amount": 10});
        assert_eq!(pay().check(Label::TRUSTED, &args, |_| Label::TRUSTED), None);
        assert_eq!(
            pay().check(PRIVATE, &args, |_| Label::TRUSTED),
            None,
            "secrecy is not distrust"
        );
        assert_eq!(
            pay().check(UNTRUSTED, &args, |_| Label::TRUSTED),
            Some(Violation::UntrustedDecision)
        );
    }

    #[test]
    fn an_open_tool_runs_from_any_context() {
        let open = ToolGuard::default();
        assert!(open.is_open());
        assert_eq!(
            open.check(UNTRUSTED.join(PRIVATE), &json!({"x": 1}), |_| {
                Label::TRUSTED
            }),
            None
        );
    }

    #[test]
    fn argument_rules_apply_to_the_arguments_passed() {
        let g = send();
        let both = json!({"to": "a@b", "body": "hi"});
        assert_eq!(g.check(Label::TRUSTED, &both, |_| Label::TRUSTED), None);
        assert_eq!(
            g.check(UNTRUSTED, &both, |_| Label::TRUSTED),
            Some(Violation::UntrustedArgument("to".into()))
        );
        assert_eq!(
            g.check(PRIVATE, &both, |_| Label::TRUSTED),
            Some(Violation::PrivateArgument("body".into()))
        );
        // Untrusted context may fill a body (public rule only) when no `to` is passed...
        assert_eq!(
            g.check(UNTRUSTED, &json!({"body": "hi"}), |_| Label::TRUSTED),
            None
        );
        // ...and private context may fill `to` (trusted rule only) without a body.
        assert_eq!(
            g.check(PRIVATE, &json!({"to": "a@b"}), |_| Label::TRUSTED),
            None
        );
    }

    #[test]
    fn an_argument_referring_to_a_hidden_value_carries_its_label() {
        let mut g = pay();
        g.arguments.insert(
            "to".to_owned(),
            ArgumentRule {
                trusted: true,
                public: true,
            },
        );
        let hidden_untrusted = |v: &Value| {
            if v == "$r1" {
                UNTRUSTED
            } else {
                Label::TRUSTED
            }
        };
        // Decided from trusted context: the amount may come from an untrusted hidden value...
        assert_eq!(
            g.check(Label::TRUSTED, &json!({"amount": "$r1"}), hidden_untrusted),
            None
        );
        // ...the recipient may not.
        assert_eq!(
            g.check(Label::TRUSTED, &json!({"to": "$r1"}), hidden_untrusted),
            Some(Violation::UntrustedHiddenArgument("to".into()))
        );
        assert_eq!(
            g.check(Label::TRUSTED, &json!({"to": "$r2"}), |v: &Value| {
                if v == "$r2" { PRIVATE } else { Label::TRUSTED }
            }),
            Some(Violation::PrivateHiddenArgument("to".into()))
        );
    }

    #[test]
    fn reasons_name_the_tool_and_the_rule() {
        assert!(
            Violation::UntrustedDecision
                .denial("pay")
                .starts_with("blocked by policy: pay is consequential")
        );
        assert!(
            Violation::UntrustedDecision
                .hold("pay")
                .ends_with("; it runs only if a person approves")
        );
        assert!(
            Violation::PrivateArgument("body".into())
                .denial("send")
                .contains("argument `body` of send may carry only public data")
        );
    }

    #[test]
    fn the_open_guard_is_left_out_and_a_set_one_round_trips() {
        let mut g = send();
        g.consequential = true;
        g.on_untrusted = OnUntrusted::Ask;
        g.results = UNTRUSTED;
        let text = serde_json::to_string(&g).unwrap();
        assert_eq!(serde_json::from_str::<ToolGuard>(&text).unwrap(), g);
        assert_eq!(serde_json::to_string(&ToolGuard::default()).unwrap(), "{}");
    }
}

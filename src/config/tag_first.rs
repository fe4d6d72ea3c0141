//! Reading the stored setup's internally tagged enums ([`ProviderSetup`], [`ScriptStep`])
//! without buffering them.
//!
//! serde's derived `#[serde(tag = "…")]` reads a value whole into an intermediate tree before
//! it knows which variant it holds, then reads the variant from that tree: a scripted provider
//! of 5,000 replies was copied twice over before a run could be resumed, the largest cost of
//! `runtape resume` after the conversation itself. serde writes the tag first, so when the
//! first key is the tag the variant is read straight from the rest of the map; a value whose
//! tag comes later (written by hand) keeps the entries before it, then reads them alike.
//!
//! When to use: the `Deserialize` of a stored, internally tagged enum whose tag serde writes
//! first. What changes the result: nothing but the input; the format is the derived one.

use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::value::MapAccessDeserializer;
use serde::de::value::MapDeserializer;
use serde::de::{self, Deserializer, MapAccess, Visitor};

use super::script::ScriptStep;
use super::setup::{HttpSetup, ProviderSetup};
use crate::machine::{ModelReply, ProviderErrorClass};

/// An internally tagged enum read tag first.
trait TagFirst: Sized {
    /// The tag's key.
    const TAG: &'static str;
    /// Reads the variant named `tag` from the rest of the map.
    fn variant<'de, A: MapAccess<'de>>(
        tag: &str,
        rest: MapAccessDeserializer<A>,
    ) -> Result<Self, A::Error>;
}

/// Reads `T` from `d` (a map), tag first when it can.
fn tag_first<'de, D: Deserializer<'de>, T: TagFirst>(d: D) -> Result<T, D::Error> {
    d.deserialize_map(TagFirstVisitor(PhantomData))
}

struct TagFirstVisitor<T>(PhantomData<T>);

impl<'de, T: TagFirst> Visitor<'de> for TagFirstVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a map tagged by `{}`", T::TAG)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
        let Some(first) = map.next_key::<String>()? else {
            return Err(de::Error::missing_field(T::TAG));
        };
        if first == T::TAG {
            let tag: String = map.next_value()?;
            return T::variant(&tag, MapAccessDeserializer::new(map));
        }
        // The tag comes later (a value written by hand): the other entries are kept until it
        // is found, then read as the variant it names.
        let mut rest = serde_json::Map::new();
        rest.insert(first, map.next_value()?);
        let mut tag = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == T::TAG && tag.is_none() {
                tag = Some(map.next_value::<String>()?);
            } else {
                rest.insert(key, map.next_value()?);
            }
        }
        let Some(tag) = tag else {
            return Err(de::Error::missing_field(T::TAG));
        };
        let entries = MapDeserializer::<_, serde_json::Error>::new(rest.into_iter());
        T::variant(&tag, MapAccessDeserializer::new(entries)).map_err(de::Error::custom)
    }
}

/// An unknown tag, named as serde's derived reading names it.
fn unknown<E: de::Error>(tag: &str, variants: &'static [&'static str]) -> E {
    E::unknown_variant(tag, variants)
}

/// The fields of [`ProviderSetup::Echo`].
#[derive(Deserialize)]
struct EchoFields {
    name: String,
}

impl TagFirst for ProviderSetup {
    const TAG: &'static str = "type";

    fn variant<'de, A: MapAccess<'de>>(
        tag: &str,
        rest: MapAccessDeserializer<A>,
    ) -> Result<Self, A::Error> {
        match tag {
            "http" => HttpSetup::deserialize(rest).map(ProviderSetup::Http),
            "echo" => EchoFields::deserialize(rest).map(|e| ProviderSetup::Echo { name: e.name }),
            "scripted" => {
                super::script::ScriptSetup::deserialize(rest).map(ProviderSetup::Scripted)
            }
            other => Err(unknown(other, &["http", "echo", "scripted"])),
        }
    }
}

impl<'de> Deserialize<'de> for ProviderSetup {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        tag_first(d)
    }
}

/// The fields of [`ScriptStep::Reply`].
#[derive(Deserialize)]
struct ReplyFields {
    reply: Box<ModelReply>,
    latency_ms: u64,
}

/// The fields of [`ScriptStep::Fail`].
#[derive(Deserialize)]
struct FailFields {
    class: ProviderErrorClass,
    message: String,
    retry_after_ms: Option<u64>,
    latency_ms: u64,
}

impl TagFirst for ScriptStep {
    const TAG: &'static str = "outcome";

    fn variant<'de, A: MapAccess<'de>>(
        tag: &str,
        rest: MapAccessDeserializer<A>,
    ) -> Result<Self, A::Error> {
        match tag {
            "reply" => ReplyFields::deserialize(rest).map(|r| ScriptStep::Reply {
                reply: r.reply,
                latency_ms: r.latency_ms,
            }),
            "fail" => FailFields::deserialize(rest).map(|f| ScriptStep::Fail {
                class: f.class,
                message: f.message,
                retry_after_ms: f.retry_after_ms,
                latency_ms: f.latency_ms,
            }),
            other => Err(unknown(other, &["reply", "fail"])),
        }
    }
}

impl<'de> Deserialize<'de> for ScriptStep {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        tag_first(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ScriptSetup;

    fn steps() -> Vec<ScriptStep> {
        vec![
            ScriptStep::Reply {
                reply: Box::new(ModelReply::text("hello")),
                latency_ms: 3,
            },
            ScriptStep::Fail {
                class: ProviderErrorClass::ProviderRateLimit,
                message: "slow down".into(),
                retry_after_ms: Some(250),
                latency_ms: 0,
            },
            ScriptStep::Fail {
                class: ProviderErrorClass::ProviderUnavailable,
                message: "down".into(),
                retry_after_ms: None,
                latency_ms: 1,
            },
        ]
    }

    #[test]
    fn what_is_written_reads_back_tag_first() {
        let setup = ProviderSetup::Scripted(ScriptSetup {
            name: "s".into(),
            latency_ms: 5,
            replies: steps(),
            by_agent: [("a".to_owned(), steps())].into(),
        });
        let json = serde_json::to_string(&setup).expect("serialises");
        assert!(json.starts_with(r#"{"type":"scripted""#), "{json}");
        let back: ProviderSetup = serde_json::from_str(&json).expect("reads");
        assert_eq!(back, setup);
        let echo = ProviderSetup::Echo { name: "e".into() };
        let json = serde_json::to_string(&echo).expect("serialises");
        assert_eq!(
            serde_json::from_str::<ProviderSetup>(&json).expect("reads"),
            echo
        );
    }

    #[test]
    fn a_tag_written_after_other_fields_reads_alike() {
        for step in steps() {
            let mut value = serde_json::to_value(&step).expect("serialises");
            let tag = value
                .as_object_mut()
                .and_then(|m| m.remove("outcome"))
                .expect("tagged");
            value
                .as_object_mut()
                .expect("a map")
                .insert("outcome".into(), tag);
            let json = serde_json::to_string(&value).expect("serialises");
            assert!(!json.starts_with(r#"{"outcome""#), "{json}");
            assert_eq!(
                serde_json::from_str::<ScriptStep>(&json).expect("reads"),
                step
            );
        }
        let json = r#"{"name":"e","type":"echo"}"#;
        assert_eq!(
            serde_json::from_str::<ProviderSetup>(json).expect("reads"),
            ProviderSetup::Echo { name: "e".into() }
        );
    }

    #[test]
    fn an_unknown_tag_or_a_missing_field_is_refused() {
        let unknown = serde_json::from_str::<ProviderSetup>(r#"{"type":"telepathy"}"#);
        assert!(unknown.is_err_and(|e| e.to_string().contains("telepathy")));
        let missing = serde_json::from_str::<ScriptStep>(r#"{"outcome":"reply"}"#);
        assert!(missing.is_err_and(|e| e.to_string().contains("reply")));
        let late = serde_json::from_str::<ScriptStep>(r#"{"latency_ms":0,"outcome":"fail"}"#);
        assert!(late.is_err());
        assert!(serde_json::from_str::<ScriptStep>("{}").is_err());
    }
}

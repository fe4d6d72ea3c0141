//! Durable timers: the `sleep_for` and `sleep_until` tools a spec with `[timers]` offers.
//!
//! A sleep is state, not a wait inside a process. The transition that takes the model's call
//! computes the instant the run wakes from the event's time (the only clock the machine sees)
//! and records it twice: in the call's slot ([`SlotStatus::Sleeping`]) and in the
//! [`Effect::StartTimer`] it emits, so the due instant is in the hashed history and `verify`
//! recomputes it. The executor performs `StartTimer` by waiting on its clock until the due
//! instant, then feeds [`EventBody::TimerFired`](super::EventBody::TimerFired) carrying it; the
//! machine refuses a firing stamped before the due instant or naming another one, and a second
//! firing finds no sleeping slot, so a timer fires once whoever wakes the run. The call's
//! result, which the model sees, says when it slept until.
//!
//! | tool | arguments | answer |
//! |---|---|---|
//! | `sleep_for` | `seconds` (integer, 0 to the spec's `max_sleep_ms` / 1000) | `slept until 2026-11-29T10:00:00.000Z` |
//! | `sleep_until` | `until` (RFC 3339 time, e.g. `2026-11-29T10:00:00Z`) | the same; a time already past wakes at once |
//!
//! Every agent without a `tools` list gets both tools; an agent with one gets those it names.
//! A call asking for more than `max_sleep_ms` is refused as invalid arguments (it counts
//! against the correction budget) and sleeps not at all.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::effect::Effect;
use super::error::MachineError;
use super::ids::{AgentId, EffectId, Hlc};
use super::reply::ToolCallRequest;
use super::spec::{RunSpec, Spec, SpecError, ToolSpec};
use super::state::{Batch, RunData, RunState, Slot, SlotStatus, ToolResult};
use super::step::Cx;
use super::table::{EdgeId, StateKind};

/// Sleeps for a number of seconds.
pub const SLEEP_FOR: &str = "sleep_for";
/// Sleeps until a given time.
pub const SLEEP_UNTIL: &str = "sleep_until";
/// The timer tools, in the order they are offered.
pub const TIMER_TOOLS: [&str; 2] = [SLEEP_FOR, SLEEP_UNTIL];
/// No spec may let a run sleep longer than this in one call (a year): a due instant must
/// stay far inside what an [`Hlc`] can hold.
pub const HARD_MAX_SLEEP_MS: u64 = 366 * 24 * 3_600 * 1_000;

/// A spec's `[timers]`: its agents may sleep (`sleep_for`, `sleep_until`) when
/// `max_sleep_ms` is set, each call for at most that long; and calls of the tools named in
/// `deadlines` that wait for a person are decided by the machine when nobody answered in time
/// (see [`deadline`](super::deadline)).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimerSpec {
    /// The longest one sleep may last, in milliseconds (at most [`HARD_MAX_SLEEP_MS`]);
    /// `None`: no sleep tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_sleep_ms: Option<u64>,
    /// By tool name: how long a call of it may wait for a person, and what happens then.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub deadlines: std::collections::BTreeMap<String, super::deadline::Deadline>,
}

/// A pending timer a slot keeps besides its status: a deadline on a call that waits for a
/// person (see [`deadline`](super::deadline)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timer {
    /// The `StartTimer` effect.
    pub effect: super::ids::EffectRef,
    /// When it fires.
    pub due: Hlc,
}

/// Checks `[timers]`: a maximum between 1 ms and [`HARD_MAX_SLEEP_MS`], and no declared tool
/// under a timer tool's name.
pub(crate) fn validate(spec: &Spec) -> Result<(), SpecError> {
    let Some(t) = &spec.timers else {
        return Ok(());
    };
    if let Some(max) = t.max_sleep_ms
        && !(1..=HARD_MAX_SLEEP_MS).contains(&max)
    {
        return Err(SpecError::OutOfRange {
            path: "timers.max_sleep_ms".into(),
            reason: format!("must be between 1 and {HARD_MAX_SLEEP_MS} (a year), got {max}"),
        });
    }
    super::deadline::validate(spec, t)?;
    if let Some((i, tool)) = spec
        .tools
        .iter()
        .enumerate()
        .find(|(_, tool)| TIMER_TOOLS.contains(&tool.name.as_str()))
    {
        return Err(SpecError::OutOfRange {
            path: format!("tools[{i}].name"),
            reason: format!(
                "`{}` is the name of a timer tool [timers] offers: rename the tool",
                tool.name
            ),
        });
    }
    Ok(())
}

/// Whether `name` is a timer tool of `spec` (a spec with `[timers]`).
pub(crate) fn is_timer_tool(spec: &RunSpec, name: &str) -> bool {
    max_sleep_ms(spec.spec()).is_some() && TIMER_TOOLS.contains(&name)
}

/// The longest sleep `spec` allows, when it offers the sleep tools.
fn max_sleep_ms(spec: &Spec) -> Option<u64> {
    spec.timers.as_ref().and_then(|t| t.max_sleep_ms)
}

/// Whether `agent` may call timer tool `name`: every agent without a `tools` list, and the
/// agents that list it.
pub(crate) fn is_granted(spec: &RunSpec, agent: &AgentId, name: &str) -> bool {
    is_timer_tool(spec, name)
        && spec
            .agent(agent)
            .is_some_and(|a| a.tools.as_ref().is_none_or(|t| t.iter().any(|n| n == name)))
}

/// The timer tools `agent` is offered, `sleep_for` first.
pub(crate) fn offered_names(spec: &RunSpec, agent: &AgentId) -> Vec<String> {
    TIMER_TOOLS
        .iter()
        .filter(|n| is_granted(spec, agent, n))
        .map(|n| (*n).to_owned())
        .collect()
}

/// The definition the model is shown for timer tool `name`, when `spec` has `[timers]`.
pub(crate) fn definition(spec: &Spec, name: &str) -> Option<ToolSpec> {
    let max_s = max_sleep_ms(spec)? / 1000;
    let (description, properties, required) = match name {
        SLEEP_FOR => (
            format!(
                "Pause this run for a number of seconds (at most {max_s}), then continue. The run survives restarts while it sleeps."
            ),
            json!({"seconds": {"type": "integer", "minimum": 0, "maximum": max_s, "description": "How long to sleep."}}),
            json!(["seconds"]),
        ),
        SLEEP_UNTIL => (
            format!(
                "Pause this run until a time (RFC 3339, e.g. 2026-01-31T09:00:00Z; at most {max_s} seconds from now), then continue. A time already past continues at once."
            ),
            json!({"until": {"type": "string", "description": "When to wake, RFC 3339 with a time zone offset or Z."}}),
            json!(["until"]),
        ),
        _ => return None,
    };
    Some(ToolSpec::answered_by_machine(
        name,
        &description,
        properties,
        required,
        true,
    ))
}

/// The instant a call of timer tool `name` with `args`, taken at `at`, wakes the run, or why
/// the arguments are refused.
fn due_of(max_sleep_ms: u64, name: &str, args: &Value, at: Hlc) -> Result<Hlc, String> {
    let Some(obj) = args.as_object() else {
        return Err("arguments must be an object".into());
    };
    let field = if name == SLEEP_FOR {
        "seconds"
    } else {
        "until"
    };
    if let Some(extra) = obj.keys().find(|k| k.as_str() != field) {
        return Err(format!("unknown argument `{extra}`"));
    }
    let wait_ms = match (name, obj.get(field)) {
        (_, None) => return Err(format!("`{field}` is required")),
        (SLEEP_FOR, Some(v)) => v
            .as_u64()
            .ok_or("`seconds` must be a whole number of seconds, 0 or more")?
            .saturating_mul(1000),
        (_, Some(Value::String(s))) => {
            let until = parse_rfc3339_ms(s).ok_or_else(|| {
                format!(
                    "`until` must be an RFC 3339 time such as 2026-01-31T09:00:00Z (got `{}`)",
                    crate::text::one_line(s, 40)
                )
            })?;
            until.saturating_sub(at.ms())
        }
        (_, Some(_)) => return Err("`until` must be a string".into()),
    };
    if wait_ms > max_sleep_ms {
        return Err(format!(
            "a sleep may last at most {} seconds; this one would last {} seconds",
            max_sleep_ms / 1000,
            wait_ms / 1000
        ));
    }
    Ok(at.plus_ms(wait_ms))
}

/// Judges a call in a model reply: `None` when `call` is not a timer tool; otherwise the
/// refusal fed back instead of sleeping (`None` to sleep), whether it counts against the
/// correction budget, and whether it was outside the agent's grant.
pub(crate) fn judge(
    cx: &mut Cx<'_>,
    agent: &AgentId,
    call_id: &str,
    call: &ToolCallRequest,
) -> Option<(Option<String>, bool, bool)> {
    if !is_timer_tool(cx.spec, &call.name) {
        return None;
    }
    let max = max_sleep_ms(cx.spec.spec())?;
    let (granted, at) = (is_granted(cx.spec, agent, &call.name), cx.at);
    Some(super::batch::judge_builtin(
        cx,
        agent,
        call_id,
        call,
        granted,
        |args| due_of(max, &call.name, args, at).map(drop),
    ))
}

/// Starts the sleep of `slot` when it is a timer tool call (already judged and counted as a
/// tool call): emits `StartTimer` with its due instant and returns the sleeping status;
/// `None` for any other call.
pub(crate) fn start(cx: &mut Cx<'_>, agent: &AgentId, slot: &Slot) -> Option<SlotStatus> {
    if !is_timer_tool(cx.spec, &slot.tool) {
        return None;
    }
    let max = max_sleep_ms(cx.spec.spec())?;
    let due = match due_of(max, &slot.tool, &slot.args, cx.at) {
        Ok(due) => due,
        // Judged valid in this same transition; refuse rather than sleep if not.
        Err(reason) => {
            return Some(SlotStatus::Finished {
                result: ToolResult {
                    content: format!("invalid arguments for {}: {reason}", slot.tool),
                    is_error: true,
                    label: super::Label::TRUSTED,
                },
            });
        }
    };
    let (agent, call_id) = (agent.clone(), slot.call_id.clone());
    let effect = cx.emit(|id| Effect::StartTimer {
        id,
        agent,
        call_id,
        due,
    });
    Some(SlotStatus::Sleeping { effect, due })
}

/// What the model is told when its sleep ends.
pub fn woke_text(due: Hlc) -> String {
    format!("slept until {}", crate::text::rfc3339(due.ms()))
}

/// What the model is told when a person woke its sleep early (`runtape wake`) at `at`.
pub fn woken_early_text(due: Hlc, at: Hlc) -> String {
    format!(
        "woken early at {} by a person (it was to sleep until {})",
        crate::text::rfc3339(at.ms()),
        crate::text::rfc3339(due.ms())
    )
}

/// A `TimerFired` event's fields, as the machine judges them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Firing<'a> {
    /// The `StartTimer` effect answered.
    pub(crate) effect: &'a EffectId,
    /// The due instant the event names.
    pub(crate) due: Hlc,
    /// A person fired it before its due instant.
    pub(crate) early: bool,
}

/// `CallingTools`/`AwaitingInput` + `TimerFired`: the sleeping call named by `effect` wakes,
/// or (another timer) a deadline passed ([`deadline::on_fired`](super::deadline)). Refused
/// when no call sleeps on `effect` (it woke already), when `due` is not the instant recorded
/// for it, or when the event is stamped before that instant and is not an early wake.
pub(crate) fn on_fired(
    cx: &mut Cx<'_>,
    from: StateKind,
    run: RunData,
    mut batch: Batch,
    firing: Firing<'_>,
) -> Result<(EdgeId, RunState), MachineError> {
    let effect = firing.effect;
    let unknown = || MachineError::UnknownEffect {
        state: from,
        effect: effect.clone(),
    };
    let Some(slot) = batch
        .slots
        .iter_mut()
        .find(|s| matches!(s.status, SlotStatus::Sleeping { effect: e, .. } if e.matches(effect)))
    else {
        return super::deadline::on_fired(cx, from, run, batch, firing);
    };
    let SlotStatus::Sleeping { due: recorded, .. } = slot.status else {
        return Err(unknown());
    };
    check_due(cx, firing, recorded)?;
    let content = if firing.early && cx.at < recorded {
        woken_early_text(recorded, cx.at)
    } else {
        woke_text(recorded)
    };
    slot.status = SlotStatus::Finished {
        result: ToolResult {
            content,
            is_error: false,
            // The machine's own words: nothing from outside the run.
            label: super::Label::TRUSTED,
        },
    };
    Ok(match super::batch::settle(cx, run, batch) {
        (StateKind::CallingTools, s) => (EdgeId::CallingToolsTimerWait, s),
        (StateKind::AwaitingInput, s) => (EdgeId::CallingToolsTimerInput, s),
        (_, s) => (EdgeId::CallingToolsTimerDone, s),
    })
}

/// Refuses `firing` when the timer was recorded as due at `recorded` (another instant than
/// the one it names) or when the event's time is before it and the firing is not an early
/// wake by a person.
pub(crate) fn check_due(
    cx: &Cx<'_>,
    firing: Firing<'_>,
    recorded: Hlc,
) -> Result<(), MachineError> {
    if recorded != firing.due || (cx.at < firing.due && !firing.early) {
        return Err(MachineError::TimerEarly {
            effect: firing.effect.clone(),
            due: recorded,
            at: cx.at,
        });
    }
    Ok(())
}

/// Unix milliseconds of an RFC 3339 time (`2026-01-31T09:00:00Z`, `…T09:00:00.5+01:00`), or
/// `None` for anything else, a time before 1970 included.
pub(crate) fn parse_rfc3339_ms(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    let digits = |from: usize, len: usize| -> Option<i64> {
        let part = b.get(from..from + len)?;
        part.iter()
            .all(u8::is_ascii_digit)
            .then(|| part.iter().fold(0i64, |n, d| n * 10 + i64::from(d - b'0')))
    };
    let at = |i: usize, c: u8| b.get(i).is_some_and(|x| x.eq_ignore_ascii_case(&c));
    if !(at(4, b'-') && at(7, b'-') && at(10, b'T') && at(13, b':') && at(16, b':')) {
        return None;
    }
    let (y, mo, d) = (digits(0, 4)?, digits(5, 2)?, digits(8, 2)?);
    let (h, mi, sec) = (digits(11, 2)?, digits(14, 2)?, digits(17, 2)?);
    let mut i = 19;
    let mut frac_ms = 0i64;
    if at(i, b'.') {
        let start = i + 1;
        i = start;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return None;
        }
        let ms_digits = &s[start..(start + 3).min(i)];
        frac_ms = ms_digits.parse::<i64>().ok()? * 10i64.pow(3 - ms_digits.len() as u32);
    }
    let offset_min = if at(i, b'Z') && i + 1 == b.len() {
        0
    } else if (at(i, b'+') || at(i, b'-')) && at(i + 3, b':') && i + 6 == b.len() {
        let m = digits(i + 1, 2)? * 60 + digits(i + 4, 2)?;
        if at(i, b'-') { -m } else { m }
    } else {
        return None;
    };
    let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    let month_days = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=12).contains(&mo) || d < 1 || d > month_days[(mo - 1) as usize] {
        return None;
    }
    if h > 23 || mi > 59 || sec > 60 || offset_min.abs() > 23 * 60 + 59 {
        return None;
    }
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3_600 + mi * 60 + sec - offset_min * 60;
    u64::try_from(secs * 1000 + frac_ms).ok()
}

// Howard Hinnant's days-from-civil (public-domain algorithm), the inverse of the one
// `crate::text` formats dates with.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_reads_utc_offsets_and_fractions() {
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339_ms("2026-11-29T10:00:00Z"),
            Some(1_795_946_400_000)
        );
        assert_eq!(
            parse_rfc3339_ms("2026-11-29T11:00:00.5+01:00"),
            Some(1_795_946_400_500)
        );
        assert_eq!(
            crate::text::rfc3339(parse_rfc3339_ms("2024-02-29T23:59:59.123Z").unwrap_or(0)),
            "2024-02-29T23:59:59.123Z"
        );
        for bad in [
            "",
            "2026-11-29",
            "2026-11-29T10:00:00",
            "2025-02-29T00:00:00Z",
            "2026-13-01T00:00:00Z",
            "2026-11-29T24:00:00Z",
            "2026-11-29T10:00:00.Z",
            "1969-12-31T23:59:59Z",
            "2026-11-29T10:00:00Zjunk",
        ] {
            assert_eq!(parse_rfc3339_ms(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_sleep_is_due_from_the_events_time_and_capped() {
        let at = Hlc::from_ms(1_000_000);
        let args = json!({"seconds": 60});
        assert_eq!(
            due_of(3_600_000, SLEEP_FOR, &args, at),
            Ok(at.plus_ms(60_000))
        );
        assert!(due_of(30_000, SLEEP_FOR, &args, at).is_err());
        assert!(due_of(3_600_000, SLEEP_FOR, &json!({"seconds": -1}), at).is_err());
        assert!(due_of(3_600_000, SLEEP_FOR, &json!({"seconds": 1, "x": 1}), at).is_err());
        // A time already past wakes at once.
        let past = json!({"until": "1970-01-01T00:00:01Z"});
        assert_eq!(due_of(1, SLEEP_UNTIL, &past, at), Ok(at));
    }
}

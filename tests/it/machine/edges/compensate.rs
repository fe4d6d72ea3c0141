//! Edge cases of compensation (sagas): a run that wrote notes with `write`, whose undo is
//! another `write`, fails or is cancelled under `on_failure = "compensate"` (see
//! `../edges.rs` and `runtape::machine::saga`).

use super::*;

/// `write` undoes itself with `{"text": "undo TEXT"}` (or with a value its result lacks, when
/// `unfillable`); the agent's `on_in_doubt` is `policy`.
fn saga_spec(unfillable: bool, policy: OnInDoubt) -> RunSpec {
    solo_with(|s| {
        s.on_failure = OnFailure::Compensate;
        s.agents[0].on_in_doubt = policy;
        let text = if unfillable {
            "{result.missing}"
        } else {
            "undo {args.text}"
        };
        s.compensations.insert(
            "write".into(),
            Compensation {
                tool: "write".into(),
                arguments: json!({ "text": text }),
            },
        );
    })
}

/// Wrote `notes` notes (one `write` call each), then a model call is outstanding.
fn wrote(notes: usize, spec: RunSpec) -> Harness {
    let mut h = started(spec);
    for i in 0..notes {
        h.tool_round(vec![write(&format!("w{i}"))]);
    }
    h.proceed();
    h
}

/// Wrote `notes` notes and was cancelled: the latest note's undo is outstanding.
fn compensating(notes: usize, policy: OnInDoubt) -> Harness {
    let mut h = wrote(notes, saga_spec(false, policy));
    h.cancel();
    assert_eq!(h.state.kind(), StateKind::Compensating);
    h
}

fn undo_effect(h: &Harness) -> EffectId {
    h.state.outstanding()[0].in_run(&h.run)
}

fn undone(h: &Harness, outcome: ToolOutcome) -> EventBody {
    EventBody::ToolReturned {
        effect: undo_effect(h),
        outcome,
    }
}

pub(super) fn cases() -> Vec<(&'static str, Case)> {
    vec![
        ("any.compensate", || {
            (wrote(2, saga_spec(false, OnInDoubt::Fail)), cancel())
        }),
        ("any.compensate.stopped", || {
            (wrote(1, saga_spec(true, OnInDoubt::Fail)), cancel())
        }),
        ("compensating.returned.next", || {
            let h = compensating(2, OnInDoubt::Fail);
            let body = undone(&h, ToolOutcome::ok(json!("ok")));
            (h, body)
        }),
        ("compensating.returned.done", || {
            let h = compensating(1, OnInDoubt::Fail);
            let body = undone(&h, ToolOutcome::ok(json!("ok")));
            (h, body)
        }),
        ("compensating.returned.stopped", || {
            let h = compensating(2, OnInDoubt::Fail);
            let message = "disk full".into();
            let body = undone(&h, ToolOutcome::Error { message });
            (h, body)
        }),
        ("compensating.in_doubt.retry", || {
            let h = compensating(2, OnInDoubt::Retry);
            let body = EventBody::EffectInDoubt {
                effect: undo_effect(&h),
            };
            (h, body)
        }),
        ("compensating.in_doubt.stopped", || {
            let h = compensating(2, OnInDoubt::Fail);
            let body = EventBody::EffectInDoubt {
                effect: undo_effect(&h),
            };
            (h, body)
        }),
        ("compensating.cancel", || {
            (compensating(2, OnInDoubt::Fail), cancel())
        }),
    ]
}

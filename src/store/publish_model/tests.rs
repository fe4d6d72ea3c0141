//! The publish model's checks: the code as built keeps every invariant at the bounds below,
//! and each check that matters alone is shown to matter by a counterexample.

use super::*;

/// Two runs incrementing one key, a resumer each, `runtape cancel` of run 0, `runtape memory
/// rm`, one SIGKILL and one lease expiry anywhere, one retry after a conflict.
fn model(protocol: Protocol) -> PublishModel {
    PublishModel {
        protocol,
        runs: 2,
        keys: 1,
        retries: 1,
        resumers: 1,
        canceller: true,
        remover: true,
        crashes: 1,
        expiries: 1,
        own_keys: false,
        cap: None,
    }
}

fn report(name: &str, o: &Outcome) {
    println!(
        "publish model, {name}: {} states in {:.2} s; violated: {:?}",
        o.states,
        o.elapsed.as_secs_f64(),
        o.violated
    );
    if let Some(trace) = &o.trace {
        println!("  first counterexample:\n{trace}");
    }
}

/// Checks that every invariant holds and every example is reached but those in `unreachable`
/// (which the bounds rule out).
fn holds(name: &str, m: PublishModel, unreachable: &[&str]) {
    let o = check(m, None);
    report(name, &o);
    assert!(o.violated.is_empty(), "{name}: violated {:?}", o.violated);
    let missing: Vec<_> = o
        .missing_examples
        .iter()
        .filter(|e| !unreachable.contains(e))
        .collect();
    assert!(
        missing.is_empty(),
        "{name}: the model never reaches {missing:?}"
    );
}

fn finds(name: &str, m: PublishModel, property: &'static str) {
    let o = check(m, Some(property));
    report(name, &o);
    assert!(o.violated.contains(&property), "{name}: {:?}", o.violated);
}

#[test]
fn the_publish_as_built_keeps_every_invariant() {
    holds("as built, two runs, one key", model(Protocol::FIXED), &[]);
}

#[test]
fn the_publish_as_built_keeps_every_invariant_over_two_keys() {
    holds(
        "as built, two runs, two keys",
        PublishModel {
            keys: 2,
            canceller: false,
            ..model(Protocol::FIXED)
        },
        &[CANCEL_WAITED],
    );
}

/// Three runs racing on one key, a resumer each, one SIGKILL anywhere.
#[test]
fn three_runs_racing_keep_every_invariant() {
    holds(
        "as built, three runs, one key",
        PublishModel {
            runs: 3,
            canceller: false,
            remover: false,
            expiries: 0,
            ..model(Protocol::FIXED)
        },
        &[REMOVAL_CONFLICT, CANCEL_WAITED],
    );
}

#[test]
fn without_the_version_check_an_update_is_lost() {
    let last_writer_wins = Protocol {
        no_version_check: true,
        ..Protocol::FIXED
    };
    finds("no version check", model(last_writer_wins), NO_LOST_UPDATE);
}

#[test]
fn writing_the_keys_that_did_not_move_breaks_all_or_none() {
    let per_key = Protocol {
        per_key: true,
        ..Protocol::FIXED
    };
    let m = PublishModel {
        keys: 2,
        canceller: false,
        ..model(per_key)
    };
    finds("per key", m, ALL_OR_NONE);
}

#[test]
fn an_outcome_read_that_ignores_the_effects_own_rows_applies_a_run_twice() {
    let blind = Protocol {
        outcome_ignores_own_rows: true,
        ..Protocol::FIXED
    };
    finds("outcome ignores own rows", model(blind), AT_MOST_ONCE);
}

#[test]
fn without_both_the_applied_and_the_version_check_a_publish_performed_again_applies_twice() {
    let neither = Protocol {
        no_applied_check: true,
        no_version_check: true,
        ..Protocol::FIXED
    };
    finds(
        "no applied check, no version check",
        model(neither),
        AT_MOST_ONCE,
    );
}

/// Three runs under a cap of 2 bytes: runs 0 and 2 increment key 0, run 1 adds key 1 (a
/// key's bytes are its value); a resumer each, `runtape memory rm` and a SIGKILL anywhere.
/// The memory never passes its cap, whichever run reads first: a run that read the others'
/// writes is refused by its own check against its view, one that read before them by the
/// publish.
#[test]
fn runs_adding_keys_at_once_cannot_together_pass_the_cap() {
    holds(
        "as built, cap",
        capped(Protocol::FIXED),
        &[CANCEL_WAITED, "a run's turns run out"],
    );
}

#[test]
fn without_the_cap_at_the_publish_two_runs_together_pass_it() {
    let unchecked = Protocol {
        no_cap_at_publish: true,
        ..Protocol::FIXED
    };
    finds("no cap at the publish", capped(unchecked), CAP_HELD);
}

fn capped(protocol: Protocol) -> PublishModel {
    PublishModel {
        runs: 3,
        keys: 2,
        own_keys: true,
        cap: Some(2),
        canceller: false,
        expiries: 0,
        ..model(protocol)
    }
}

/// The applied check is defence in depth: with the version check in place it is never what
/// stops a second apply (a publish performed again finds its key moved, by itself, and
/// `publish_outcome` reads the effect's own rows first). Every invariant still holds without
/// it.
#[test]
fn the_applied_check_alone_is_defence_in_depth() {
    let unchecked = Protocol {
        no_applied_check: true,
        ..Protocol::FIXED
    };
    // Without the check, nothing records that a publish performed again found its rows.
    holds("no applied check", model(unchecked), &[REPERFORMED]);
}

/// The publish's fence is defence in depth: a stale driver's publish, unfenced, is either the
/// same effect (found applied, or refused for good: versions only grow) or an effect the new
/// holder has not committed yet (it has not: the stale driver's commits are fenced). Every
/// invariant still holds without it, with two resumers racing for each run.
#[test]
fn the_publish_fence_alone_is_defence_in_depth() {
    let unfenced = Protocol {
        unfenced: true,
        ..Protocol::FIXED
    };
    holds(
        "unfenced publish, two resumers a run",
        PublishModel {
            resumers: 2,
            canceller: false,
            remover: false,
            expiries: 1,
            ..model(unfenced)
        },
        &["a run's turns run out", REMOVAL_CONFLICT, CANCEL_WAITED],
    );
}

#[test]
fn two_resumers_of_a_run_keep_every_invariant() {
    holds(
        "as built, two resumers a run",
        PublishModel {
            resumers: 2,
            canceller: false,
            remover: false,
            expiries: 1,
            ..model(Protocol::FIXED)
        },
        &["a run's turns run out", REMOVAL_CONFLICT, CANCEL_WAITED],
    );
}

/// Wider bounds: three runs with a resumer each, `runtape memory rm` and a SIGKILL anywhere
/// (1.56M states, 30 to 50 s in a debug build), checked when `RUNTAPE_WIDE_MODELS` is set:
/// `RUNTAPE_WIDE_MODELS=1 cargo test --lib publish_model -- --nocapture`. Every run checks the
/// same invariants at the smaller bounds of the tests above. Three runs with a lease expiring
/// as well are past 5 GB of states: not checked.
#[test]
fn wider_bounds_keep_every_invariant_when_asked_for() {
    let runs = if super::wide_models_asked_for() { 3 } else { 2 };
    holds(
        "as built, a removal",
        PublishModel {
            runs,
            canceller: false,
            expiries: 0,
            ..model(Protocol::FIXED)
        },
        &[CANCEL_WAITED],
    );
}

//! Running the publish model's checker and saying what it found.

use stateright::Checker;

use super::*;

/// What one exhaustive check found.
pub(super) struct Outcome {
    pub(super) states: usize,
    pub(super) violated: Vec<&'static str>,
    pub(super) missing_examples: Vec<&'static str>,
    pub(super) elapsed: std::time::Duration,
    /// The first violation's trace, one action per line.
    pub(super) trace: Option<String>,
}

/// A counterexample, one line per action: who acted, at which step of its program, and the
/// memory after it.
fn describe(path: Vec<(World, Option<Action>)>) -> String {
    let mut lines = Vec::new();
    for pair in path.windows(2) {
        let [(before, Some(action)), (after, _)] = pair else {
            continue;
        };
        let who = |i: &u8| {
            let p = &before.procs[*i as usize];
            match p.role {
                Role::Remover => "`memory rm` of key 0".to_owned(),
                role => format!("{role:?} of run {}", p.run),
            }
        };
        let what = match action {
            Action::Step(i) => format!("{} {:?}", who(i), before.procs[*i as usize].pc),
            Action::Poll(i) => format!("{} commits the cancel asked for", who(i)),
            Action::Crash(i) => format!("SIGKILL {}", who(i)),
            Action::Expire(r) => format!("the lease of run {r} expires"),
        };
        let runs: Vec<String> = after
            .runs
            .iter()
            .map(|r| format!("{:?}", r.machine.phase))
            .collect();
        let memory: Vec<String> = after
            .memory
            .iter()
            .map(|rows| {
                let versions: Vec<String> = rows
                    .iter()
                    .map(|r| match (r.value, r.by) {
                        (_, Writer::Removal) => "removed".to_owned(),
                        (v, Writer::Publish { run, effect }) => format!(
                            "{} (run {run} step {effect}, base {})",
                            v.unwrap_or(0),
                            r.base
                        ),
                    })
                    .collect();
                format!("[{}]", versions.join(", "))
            })
            .collect();
        lines.push(format!(
            "  {what:<40} memory {}; runs {}",
            memory.join(" "),
            runs.join(" / ")
        ));
    }
    lines.join("\n")
}

/// Runs the checker breadth first over every reachable state of `model`, or until `stop_at`
/// is violated when given (the trace found is then the shortest).
pub(super) fn check(model: PublishModel, stop_at: Option<&'static str>) -> Outcome {
    let started = std::time::Instant::now();
    let properties = model.properties();
    let mut builder = model.clone().checker();
    if let Some(name) = stop_at {
        builder = builder.finish_when(stateright::HasDiscoveries::AnyOf(
            std::iter::once(name).collect(),
        ));
    }
    let checker = builder.spawn_bfs().join();
    let mut violated = Vec::new();
    let mut missing_examples = Vec::new();
    let mut trace = None;
    for p in properties {
        let found = checker.discovery(p.name);
        match p.expectation {
            stateright::Expectation::Sometimes if found.is_none() => missing_examples.push(p.name),
            stateright::Expectation::Always | stateright::Expectation::Eventually => {
                if let Some(path) = found {
                    violated.push(p.name);
                    trace.get_or_insert_with(|| describe(path.into()));
                }
            }
            _ => {}
        }
    }
    Outcome {
        states: checker.unique_state_count(),
        violated,
        missing_examples,
        elapsed: started.elapsed(),
        trace,
    }
}

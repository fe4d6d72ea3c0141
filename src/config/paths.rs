//! Dotted field paths (`agents[1].tools[0]`): parsing them, and translating the machine's
//! paths (over [`Spec`](crate::machine::Spec)) into the file's (over `runtape.toml`).

use std::fmt;

/// One step of a path: a table key or an array index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Segment {
    Key(String),
    Index(usize),
}

/// Splits `a.b[2].c` into `a`, `b`, `2`, `c`. Malformed pieces are kept as keys, so any
/// string gives some path (the locator then stops where the file stops matching).
pub(crate) fn parse(path: &str) -> Vec<Segment> {
    let mut out = Vec::new();
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let mut rest = part;
        if let Some(open) = rest.find('[') {
            if open > 0 {
                out.push(Segment::Key(rest[..open].to_owned()));
            }
            rest = &rest[open..];
            while let Some(close) = rest.find(']') {
                let inner = rest.get(1..close).unwrap_or_default();
                match inner.parse() {
                    Ok(i) => out.push(Segment::Index(i)),
                    Err(_) => out.push(Segment::Key(inner.to_owned())),
                }
                rest = &rest[close + 1..];
                if !rest.starts_with('[') {
                    break;
                }
            }
            if !rest.is_empty() {
                out.push(Segment::Key(rest.to_owned()));
            }
        } else {
            out.push(Segment::Key(rest.to_owned()));
        }
    }
    out
}

/// Joins segments back into a dotted path.
pub(crate) fn join(segments: &[Segment]) -> String {
    Path(segments).to_string()
}

struct Path<'a>(&'a [Segment]);

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, seg) in self.0.iter().enumerate() {
            match seg {
                Segment::Key(k) if i == 0 => f.write_str(k)?,
                Segment::Key(k) => write!(f, ".{k}")?,
                Segment::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

/// The file's path for a machine path: routes become the agent's own fields (primary) or
/// `fallbacks[n]`, `limits` becomes `budget`, run-wide settings move under `run`, and
/// plan conditions use the file's keys.
pub(crate) fn file_path(spec_path: &str) -> String {
    use Segment::{Index, Key};
    let key = |s: &str| Key(s.to_owned());
    let segs = parse(spec_path);
    let out: Vec<Segment> = match segs.as_slice() {
        [Key(k), rest @ ..] if k == "max_transitions" || k == "on_exhausted" => {
            [vec![key("run"), Key(k.clone())], rest.to_vec()].concat()
        }
        [Key(k), rest @ ..] if k == "limits" => {
            [vec![key("run"), key("budget")], budget_rest(rest)].concat()
        }
        [Key(a), Index(i), Key(r), rest @ ..] if a == "agents" && r == "routes" => {
            let agent = vec![key("agents"), Index(*i)];
            match rest {
                [] | [Index(0)] => [agent, vec![key("provider")]].concat(),
                [Index(0), tail @ ..] => [agent, tail.to_vec()].concat(),
                [Index(n), tail @ ..] => {
                    let fallback = vec![key("fallbacks"), Index(n.saturating_sub(1))];
                    [agent, fallback, tail.to_vec()].concat()
                }
                other => [agent, vec![key("fallbacks")], other.to_vec()].concat(),
            }
        }
        [Key(a), Index(i), Key(l), rest @ ..] if a == "agents" && l == "limits" => [
            vec![key("agents"), Index(*i), key("budget")],
            budget_rest(rest),
        ]
        .concat(),
        [Key(p), Key(e), Index(n), Key(w), Key(field)] if p == "plan" && w == "when" => {
            let field = match field.as_str() {
                "pattern" => "regex",
                "pointer" => "json_pointer",
                "value" => "equals",
                "text" => "contains",
                other => other,
            };
            vec![
                key("plan"),
                Key(e.clone()),
                Index(*n),
                key("when"),
                key(field),
            ]
        }
        _ => segs.clone(),
    };
    join(&out)
}

fn budget_rest(rest: &[Segment]) -> Vec<Segment> {
    rest.iter()
        .map(|s| match s {
            Segment::Key(k) if k == "max_cost_nanos" => Segment::Key("max_cost_usd".into()),
            other => other.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_parse_and_join() {
        let p = parse("agents[1].tools[0]");
        assert_eq!(
            p,
            vec![
                Segment::Key("agents".into()),
                Segment::Index(1),
                Segment::Key("tools".into()),
                Segment::Index(0)
            ]
        );
        assert_eq!(join(&p), "agents[1].tools[0]");
        assert_eq!(join(&parse("a[x].b")), "a.x.b");
        assert_eq!(parse(""), vec![]);
        assert_eq!(join(&parse("[[[.]]]")), join(&parse("[[[.]]]")));
    }

    #[test]
    fn machine_paths_become_file_paths() {
        for (spec, file) in [
            ("max_transitions", "run.max_transitions"),
            ("limits.max_cost_nanos", "run.budget.max_cost_usd"),
            ("agents[2].routes[0].max_attempts", "agents[2].max_attempts"),
            (
                "agents[2].routes[2].max_attempts",
                "agents[2].fallbacks[1].max_attempts",
            ),
            ("agents[0].routes", "agents[0].provider"),
            ("agents[0].limits.max_turns", "agents[0].budget.max_turns"),
            ("plan.edges[3].when.pattern", "plan.edges[3].when.regex"),
            (
                "plan.edges[3].when.pointer",
                "plan.edges[3].when.json_pointer",
            ),
            ("agents[1].tools[0]", "agents[1].tools[0]"),
            ("plan.exits[0]", "plan.exits[0]"),
        ] {
            assert_eq!(file_path(spec), file, "{spec}");
        }
    }
}

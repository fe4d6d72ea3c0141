//! The run list as `runtape serve` asks for it: filters, a sort and a keyset cursor given as
//! `NAME=VALUE` pairs (a URL's query), checked into a [`RunQuery`] with one clear line for
//! anything wrong, and a page of runs ([`run_page`]) with the cursor of the next page.

use super::{OpsError, parse_tag, quoted};
use crate::store::{
    Cursor, Relation, RunQuery, RunRecord, RunSort, RunStatus, StatusFilter, Store,
};

/// The most runs one page lists.
pub const MAX_RUNS_PAGE: usize = 1000;
/// The runs one page lists unless `limit` says otherwise.
pub const DEFAULT_RUNS_PAGE: usize = 200;

/// The names [`run_query`] takes.
pub const RUN_FILTERS: &[&str] = &[
    "status",
    "agent",
    "spec",
    "from",
    "to",
    "cost_min",
    "cost_max",
    "duration_min",
    "duration_max",
    "relation",
    "parent",
    "tag",
    "q",
    "sort",
    "order",
    "cursor",
    "limit",
];

fn bad(why: String) -> OpsError {
    OpsError::BadFilter(why)
}

fn whole(name: &str, v: &str) -> Result<u64, OpsError> {
    v.parse().map_err(|_| {
        bad(format!(
            "{name} `{}` is not a whole number (milliseconds)",
            quoted(v)
        ))
    })
}

/// Dollars (`0.25`) as nanodollars.
fn dollars(name: &str, v: &str) -> Result<u64, OpsError> {
    let usd: f64 = v
        .parse()
        .ok()
        .filter(|d: &f64| d.is_finite() && *d >= 0.0 && *d < 1e9)
        .ok_or_else(|| {
            bad(format!(
                "{name} `{}` is not an amount in dollars (0.25, 3, …)",
                quoted(v)
            ))
        })?;
    // In range: checked above to be below 10^9 dollars, 10^18 nanodollars.
    Ok((usd * 1e9).round() as u64)
}

/// The cursor text of `c` under `q`'s sort and order: `SORT.ORDER.VALUE.KEY`.
pub fn cursor_text(q: &RunQuery, c: Cursor) -> String {
    format!(
        "{}.{}.{}.{}",
        sort_name(q.sort),
        if q.ascending { "asc" } else { "desc" },
        c.value,
        c.key
    )
}

fn sort_name(s: RunSort) -> &'static str {
    match s {
        RunSort::Started => "started",
        RunSort::Cost => "cost",
        RunSort::Duration => "duration",
    }
}

/// A run-list query from `NAME=VALUE` pairs, in any order (`tag` repeatable; every other
/// name at most once). See `runtape::guide::serve` for each name.
pub fn run_query(pairs: &[(String, String)]) -> Result<RunQuery, OpsError> {
    let mut q = RunQuery {
        limit: DEFAULT_RUNS_PAGE,
        ..RunQuery::default()
    };
    let mut seen: Vec<&str> = Vec::new();
    let mut cursor: Option<&str> = None;
    for (name, v) in pairs {
        let name = name.as_str();
        if !RUN_FILTERS.contains(&name) {
            return Err(bad(format!(
                "`{}` is not a run-list filter; the filters: {}",
                quoted(name),
                RUN_FILTERS.join(", ")
            )));
        }
        if name != "tag" {
            if seen.contains(&name) {
                return Err(bad(format!("`{name}` is given twice")));
            }
            seen.push(name);
        }
        if v.is_empty() && name != "q" {
            continue;
        }
        match name {
            "status" => {
                q.status = Some(match v.as_str() {
                    "queued" => StatusFilter::Queued,
                    "interrupted" => StatusFilter::Interrupted,
                    s => StatusFilter::Stored(RunStatus::parse(s).ok_or_else(|| bad(format!(
                        "status `{}` is not one of queued, running, paused, awaiting_input, budget_exhausted, completed, failed, cancelled, interrupted",
                        quoted(s)
                    )))?),
                })
            }
            "agent" => q.agent = Some(v.clone()),
            "spec" => {
                let hex = v.to_ascii_lowercase();
                if hex.len() < 4 || hex.len() > 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(bad(format!(
                        "spec `{}` is not 4 to 64 hex digits of a spec digest",
                        quoted(v)
                    )));
                }
                q.spec = Some(hex);
            }
            "from" => q.created_from_ms = Some(whole(name, v)?),
            "to" => q.created_to_ms = Some(whole(name, v)?),
            "cost_min" => q.cost_min = Some(dollars(name, v)?),
            "cost_max" => q.cost_max = Some(dollars(name, v)?),
            "duration_min" => q.duration_min_ms = Some(whole(name, v)?),
            "duration_max" => q.duration_max_ms = Some(whole(name, v)?),
            "relation" => {
                q.relation = Some(match v.as_str() {
                    "root" => Relation::Root,
                    "fork" => Relation::Fork,
                    "child" => Relation::Child,
                    other => {
                        return Err(bad(format!(
                            "relation `{}` is not one of root, fork, child",
                            quoted(other)
                        )));
                    }
                })
            }
            "parent" => q.parent = Some(super::parse_whole_run(v, "parent")?),
            "tag" => {
                let (k, val) = parse_tag(v).map_err(|e| bad(e.to_string()))?;
                q.tags.push((k.to_owned(), val.to_owned()));
            }
            "q" => q.text = Some(v.to_lowercase()).filter(|t| !t.is_empty()),
            "sort" => {
                q.sort = match v.as_str() {
                    "started" => RunSort::Started,
                    "cost" => RunSort::Cost,
                    "duration" => RunSort::Duration,
                    other => {
                        return Err(bad(format!(
                            "sort `{}` is not one of started, cost, duration",
                            quoted(other)
                        )));
                    }
                }
            }
            "order" => {
                q.ascending = match v.as_str() {
                    "asc" => true,
                    "desc" => false,
                    other => {
                        return Err(bad(format!(
                            "order `{}` is not asc or desc",
                            quoted(other)
                        )));
                    }
                }
            }
            "cursor" => cursor = Some(v),
            "limit" => {
                let n: usize = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_RUNS_PAGE).contains(n))
                    .ok_or_else(|| {
                        bad(format!(
                            "limit `{}` is not a whole number from 1 to {MAX_RUNS_PAGE}",
                            quoted(v)
                        ))
                    })?;
                q.limit = n;
            }
            _ => {}
        }
    }
    if let Some(c) = cursor {
        q.after = Some(parse_cursor(&q, c)?);
    }
    Ok(q)
}

/// A cursor [`cursor_text`] wrote for a query with the same sort and order.
fn parse_cursor(q: &RunQuery, text: &str) -> Result<Cursor, OpsError> {
    let wrong = || {
        bad(format!(
            "cursor `{}` is not one this list gave; ask for the first page without a cursor",
            quoted(text)
        ))
    };
    let parts: Vec<&str> = text.split('.').collect();
    let [sort, order, value, key] = parts[..] else {
        return Err(wrong());
    };
    let c = Cursor {
        value: value.parse().map_err(|_| wrong())?,
        key: key.parse().map_err(|_| wrong())?,
    };
    let dir = if q.ascending { "asc" } else { "desc" };
    if sort != sort_name(q.sort) || order != dir {
        return Err(bad(format!(
            "cursor `{}` belongs to a list sorted by {sort} {order}, not {} {dir}; ask for the first page again",
            quoted(text),
            sort_name(q.sort)
        )));
    }
    Ok(c)
}

/// A page of the run list: the rows of the runs `q` asks for, in its order, and the cursor
/// of the next page (`None` on the last). A front end shows each row as it shows a run
/// (`RunView::listed`, with what it adds).
pub fn run_page(
    store: &dyn Store,
    q: &RunQuery,
) -> Result<(Vec<RunRecord>, Option<String>), OpsError> {
    let page = store.run_page(q, crate::clock::wall_ms())?;
    Ok((page.runs, page.next.map(|c| cursor_text(q, c))))
}

//! The statechart as an SVG picture, drawn from [`table::TABLE`] (the same table `step`
//! checks and `statechart.md` is generated from), so the page needs no drawing library.
//!
//! Every state is a box with the id `state-NAME` (CamelCase, as in `statechart.md`); every
//! (from, to) pair of edges is one arrow, a `<g class="edge">` whose `data-edges` attribute
//! lists the table's edge ids it stands for and whose `<title>` names their events. The page
//! highlights the current state and the edge just taken by those ids. Edges from "any state
//! but Created and Done" (the transition cap) are left out, as in the Mermaid diagram.

use std::fmt::Write as _;

use crate::machine::table::{self, EventKind, StateKind};

/// Where each state's box is centred, in SVG user units.
fn position(s: StateKind) -> (f64, f64) {
    match s {
        StateKind::Created => (90.0, 50.0),
        StateKind::Preparing => (300.0, 50.0),
        StateKind::Generating => (530.0, 50.0),
        StateKind::BudgetExhausted => (90.0, 200.0),
        StateKind::Handoff => (300.0, 200.0),
        StateKind::CallingTools => (530.0, 200.0),
        StateKind::Done => (300.0, 350.0),
        StateKind::AwaitingInput => (530.0, 350.0),
        StateKind::Summarizing => (195.0, 125.0),
        StateKind::Retrieving => (415.0, 125.0),
        StateKind::Publishing => (90.0, 350.0),
        StateKind::Compensating => (530.0, 430.0),
    }
}

const BOX_W: f64 = 150.0;
const BOX_H: f64 = 36.0;

/// One arrow: the table edges from `from` to `to`.
struct Arrow {
    from: StateKind,
    to: StateKind,
    ids: Vec<&'static str>,
    events: Vec<&'static str>,
}

/// The statechart as a standalone SVG document. Its output depends only on the table.
pub(crate) fn svg() -> String {
    let mut arrows: Vec<Arrow> = Vec::new();
    for e in table::TABLE {
        let Some(from) = e.from else { continue };
        let event = e.on.map_or("any", EventKind::name);
        match arrows.iter_mut().find(|a| a.from == from && a.to == e.to) {
            Some(a) => {
                a.ids.push(e.id);
                if !a.events.contains(&event) {
                    a.events.push(event);
                }
            }
            None => arrows.push(Arrow {
                from,
                to: e.to,
                ids: vec![e.id],
                events: vec![event],
            }),
        }
    }
    let mut out = String::new();
    out.push_str(
        r##"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 640 470" class="statechart" role="img" aria-label="The run's statechart">
<defs><marker id="arrowhead" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z"/></marker></defs>
"##,
    );
    for a in &arrows {
        let path = if a.from == a.to {
            self_loop(a.from)
        } else {
            let both_ways = arrows.iter().any(|b| b.from == a.to && b.to == a.from);
            line(a.from, a.to, if both_ways { 7.0 } else { 0.0 })
        };
        let _ = writeln!(
            out,
            r#"<g class="edge" data-edges="{}"><title>{} → {}: {}</title><path d="{path}" marker-end="url(#arrowhead)"/></g>"#,
            a.ids.join(" "),
            a.from.name(),
            a.to.name(),
            a.events.join(", ")
        );
    }
    for s in StateKind::ALL {
        let (x, y) = position(s);
        let _ = writeln!(
            out,
            r#"<g class="state" id="state-{name}"><rect x="{:.0}" y="{:.0}" width="{BOX_W:.0}" height="{BOX_H:.0}" rx="10"/><text x="{x:.0}" y="{:.0}" text-anchor="middle">{name}</text></g>"#,
            x - BOX_W / 2.0,
            y - BOX_H / 2.0,
            y + 5.0,
            name = s.name()
        );
    }
    out.push_str("</svg>\n");
    out
}

/// A straight arrow from the border of `from`'s box to the border of `to`'s, moved `offset`
/// to its left so that the two directions between a pair stay apart.
fn line(from: StateKind, to: StateKind, offset: f64) -> String {
    let ((x1, y1), (x2, y2)) = (position(from), position(to));
    let (dx, dy) = (x2 - x1, y2 - y1);
    let len = (dx * dx + dy * dy).sqrt().max(1.0);
    let (nx, ny) = (-dy / len * offset, dx / len * offset);
    let (sx, sy) = border((x1, y1), (dx, dy));
    let (ex, ey) = border((x2, y2), (-dx, -dy));
    format!(
        "M{:.1},{:.1} L{:.1},{:.1}",
        sx + nx,
        sy + ny,
        ex + nx,
        ey + ny
    )
}

/// Where a ray from the centre `c` in direction `d` leaves the box.
fn border(c: (f64, f64), d: (f64, f64)) -> (f64, f64) {
    let tx = if d.0.abs() > f64::EPSILON {
        (BOX_W / 2.0 + 4.0) / d.0.abs()
    } else {
        f64::INFINITY
    };
    let ty = if d.1.abs() > f64::EPSILON {
        (BOX_H / 2.0 + 4.0) / d.1.abs()
    } else {
        f64::INFINITY
    };
    let t = tx.min(ty);
    (c.0 + d.0 * t, c.1 + d.1 * t)
}

/// A loop over the top right corner of the state's box.
fn self_loop(s: StateKind) -> String {
    let (x, y) = position(s);
    let (x0, y0) = (x + BOX_W / 2.0 - 30.0, y - BOX_H / 2.0);
    format!(
        "M{:.1},{:.1} C{:.1},{:.1} {:.1},{:.1} {:.1},{:.1}",
        x0,
        y0,
        x0,
        y0 - 28.0,
        x0 + 44.0,
        y0 - 20.0,
        x0 + 30.0,
        y0 + 1.0
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_and_every_edge_with_a_source_is_drawn() {
        let svg = svg();
        for s in StateKind::ALL {
            assert!(svg.contains(&format!("id=\"state-{}\"", s.name())), "{s}");
        }
        for e in table::TABLE.iter().filter(|e| e.from.is_some()) {
            let drawn = svg.split("data-edges=\"").skip(1).any(|rest| {
                rest.split('"')
                    .next()
                    .unwrap_or("")
                    .split(' ')
                    .any(|id| id == e.id)
            });
            assert!(drawn, "edge {} is not drawn", e.id);
        }
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    }
}

//! `nablac explain`: what the planner decided and why it helps, as JSON ([`Explain`]), a terminal
//! table ([`explain_text`]), a picture ([`explain_svg`]) and a full listing ([`plan_listing`], what
//! the plan snapshots hold). Everything here is deterministic: same tape and plan, same bytes.

use super::{
    alive_profile_checkpointed, alive_profile_plain, max_live_checkpointed, max_live_plain,
};
use crate::plan::Plan;
use crate::tape::NodeId;
use crate::verify::Verified;
use plotters::prelude::*;
use std::fmt::Write as _;

/// The summary `nablac explain --json` prints. `active` counts the nodes that carry an adjoint in
/// a kernel (active and live); `cuts` are node ids; `crossing[s]` is the number of values crossing
/// `cuts[s]`; `persistent` is the size of the persistent set; the max_live fields follow
/// `passes::max_live_plain` and `passes::max_live_checkpointed`.
#[derive(Clone, PartialEq, Eq, Debug, serde::Serialize)]
pub struct Explain {
    pub nodes: u32,
    pub active: u32,
    pub segments: u32,
    pub cuts: Vec<u32>,
    pub crossing: Vec<u32>,
    pub persistent: u32,
    pub max_live_plain: u32,
    pub max_live_checkpointed: u32,
}

/// The explain summary of `plan` (which must be `passes::plan` of `tape`).
pub fn explain(tape: &Verified, plan: &Plan) -> Explain {
    let act = &plan.activity;
    let sp = &plan.segments;
    Explain {
        nodes: tape.len() as u32,
        active: act
            .active
            .iter()
            .zip(&act.live)
            .filter(|(a, l)| **a && **l)
            .count() as u32,
        segments: sp.segments.len() as u32,
        cuts: sp.cuts.iter().map(|c| c.0).collect(),
        crossing: sp.crossing.clone(),
        persistent: sp.persistent.len() as u32,
        max_live_plain: max_live_plain(tape),
        max_live_checkpointed: max_live_checkpointed(tape, plan),
    }
}

/// Forward mode's directions (`nablac explain --mode forward`): how many tangent directions the
/// kernel carries and each input's (`colouring`: inputs that meet in no output share one;
/// an input no output depends on has none), and the kernel's loops.
#[derive(Clone, PartialEq, Eq, Debug, serde::Serialize)]
pub struct ForwardExplain {
    pub inputs: u32,
    pub directions: u32,
    /// Input name -> its direction (absent: no output depends on it).
    pub colouring: std::collections::BTreeMap<String, u32>,
    pub loops: Vec<LoopExplain>,
}

/// One loop of a kernel (`schedule::loops`): iterations `first .. first + count` of the
/// region `start .. end` (`period` nodes an iteration), and what it carries from one iteration
/// to the next: values and tangents (node, direction) of body nodes, each named by its node in
/// the loop's first iteration.
#[derive(Clone, PartialEq, Eq, Debug, serde::Serialize)]
pub struct LoopExplain {
    pub start: u32,
    pub end: u32,
    pub period: u32,
    pub first: u32,
    pub count: u32,
    pub values: Vec<u32>,
    pub tangents: Vec<(u32, u32)>,
    /// A reverse sweep's loop (the iterations last first).
    pub reverse: bool,
    /// The body nodes whose carried values each iteration bookmarks (a forward loop of a
    /// reverse kernel) or restores from its bookmarks (a reverse loop).
    pub bookmarks: Vec<u32>,
}

/// The loops of `tape`'s `mode` kernel, in order (a reverse kernel's as the GPU targets print
/// it under the default plan: `compile::CompileOptions::reverse_loops`).
pub fn explain_loops(tape: &Verified, mode: nablac_abi::manifest::Mode) -> Vec<LoopExplain> {
    use crate::schedule::{Class, Schedule, ScheduleOptions, Stmt, Var};
    let o = ScheduleOptions::looped(mode);
    let s = match mode {
        // Against the default plan, as a GPU target compiles it.
        nablac_abi::manifest::Mode::Reverse => {
            Schedule::build(tape, &super::plan(tape, &Default::default()), o)
        }
        _ => Schedule::plain(tape, o),
    };
    s.body
        .iter()
        .filter_map(|st| {
            let Stmt::Loop(l) = st else { return None };
            let mut e = LoopExplain {
                start: l.region.start,
                end: l.region.end,
                period: l.period,
                first: l.first,
                count: l.count,
                values: Vec::new(),
                tangents: Vec::new(),
                reverse: l.reverse,
                bookmarks: l
                    .body
                    .iter()
                    .filter_map(|s| match s {
                        Stmt::Store {
                            var: Var::Carried(n),
                            slot,
                        }
                        | Stmt::OpaqueRead {
                            node: n,
                            from: Some(slot),
                        } if slot.class == Class::Local => Some(n.0),
                        _ => None,
                    })
                    .collect(),
            };
            for c in &l.carried {
                match c.var {
                    Var::Carried(n) => e.values.push(n.0),
                    Var::CarriedTangent(n, d) => e.tangents.push((n.0, d as u32)),
                    _ => {}
                }
            }
            Some(e)
        })
        .collect()
}

/// The loops as text, one line each (nothing where there are none).
pub fn explain_loops_text(loops: &[LoopExplain]) -> String {
    let mut s = String::new();
    for l in loops {
        let marks: Vec<String> = l.bookmarks.iter().map(|v| format!("%{v}")).collect();
        if l.reverse {
            let _ = writeln!(
                s,
                "  reverse loop over iterations {}..{}, last first: restores {} from its \
                 bookmarks, recomputes the iteration (re-keyed), then its adjoints",
                l.first,
                l.first + l.count,
                marks.join(" ")
            );
            continue;
        }
        let values: Vec<String> = l.values.iter().map(|v| format!("%{v}")).collect();
        let mut tangents: Vec<String> = Vec::new();
        for &(n, d) in &l.tangents {
            match tangents.last_mut() {
                Some(t) if t.starts_with(&format!("%{n}:")) => t.push_str(&format!(",{d}")),
                _ => tangents.push(format!("%{n}:{d}")),
            }
        }
        let _ = write!(
            s,
            "  loop over iterations {}..{} of %{}..%{} ({} nodes each): carries {} values",
            l.first,
            l.first + l.count,
            l.start,
            l.end,
            l.period,
            l.values.len() + l.tangents.len()
        );
        let _ = write!(s, " ({}", values.join(" "));
        if !tangents.is_empty() {
            let _ = write!(s, "; tangents by direction {}", tangents.join(" "));
        }
        let _ = write!(s, ")");
        if !marks.is_empty() {
            let _ = write!(
                s,
                "; bookmarks {} each iteration ({} per path)",
                marks.join(" "),
                marks.len() as u32 * l.count
            );
        }
        let _ = writeln!(s);
    }
    s
}

/// The forward-mode summary of `tape`.
pub fn explain_forward(tape: &Verified) -> ForwardExplain {
    let c = super::colour_inputs(tape);
    ForwardExplain {
        inputs: tape.inputs.len() as u32,
        directions: c.colours,
        colouring: tape
            .inputs
            .iter()
            .zip(&c.colour)
            .filter_map(|(i, c)| c.map(|c| (i.name.clone(), c)))
            .collect(),
        loops: explain_loops(tape, nablac_abi::manifest::Mode::Forward),
    }
}

/// The forward-mode summary as text: the count, then the inputs of each direction.
pub fn explain_forward_text(tape: &Verified) -> String {
    let e = explain_forward(tape);
    let mut s = format!(
        "forward mode: {} tangent directions for {} inputs\n",
        e.directions, e.inputs
    );
    for d in 0..e.directions {
        let names: Vec<&str> = e
            .colouring
            .iter()
            .filter(|(_, &c)| c == d)
            .map(|(n, _)| n.as_str())
            .collect();
        let _ = writeln!(s, "  direction {d}: {}", names.join(" "));
    }
    let none: Vec<&str> = tape
        .inputs
        .iter()
        .map(|i| i.name.as_str())
        .filter(|n| !e.colouring.contains_key(*n))
        .collect();
    if !none.is_empty() {
        let _ = writeln!(
            s,
            "  no direction (no output depends on them): {}",
            none.join(" ")
        );
    }
    if !e.loops.is_empty() {
        let _ = writeln!(
            s,
            "loops (iterations outside them are straight-line; --unroll: none):"
        );
        s.push_str(&explain_loops_text(&e.loops));
    }
    s
}

/// A compact table for the terminal: the summary line, then one row per segment.
pub fn explain_text(tape: &Verified, plan: &Plan) -> String {
    let e = explain(tape, plan);
    let sp = &plan.segments;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} nodes, {} active; {} segment{} ({}); {} persistent; max live {} plain, {} checkpointed",
        e.nodes,
        e.active,
        e.segments,
        if e.segments == 1 { "" } else { "s" },
        sp.strategy.name(),
        e.persistent,
        e.max_live_plain,
        e.max_live_checkpointed
    );
    let _ = writeln!(
        s,
        "{:>4}  {:>13}  {:>5}  {:>8}  {:>9}  {:>5}  {:>6}",
        "seg", "nodes", "len", "crossing", "bookmarks", "draws", "opaque"
    );
    for (i, seg) in sp.segments.iter().enumerate() {
        let crossing = if i == 0 {
            "-".to_string()
        } else {
            sp.crossing[i - 1].to_string()
        };
        let opaque = plan.opacity.opaque_reads.get(i).map_or(0, |r| r.len());
        let _ = writeln!(
            s,
            "{:>4}  {:>13}  {:>5}  {:>8}  {:>9}  {:>5}  {:>6}",
            i,
            format!("%{}..%{}", seg.range.start, seg.range.end),
            seg.range.end - seg.range.start,
            crossing,
            seg.bookmarks.len(),
            seg.draws.len(),
            opaque
        );
    }
    s.push_str(
        "crossing: values crossing the cut at the segment's start; bookmarks: persistent values it \
         reads back; draws: draws its reverse block regenerates; opaque: values that block reads \
         through the opaque identity\n",
    );
    s
}

fn ids(v: &[NodeId]) -> String {
    let parts: Vec<String> = v.iter().map(|id| id.to_string()).collect();
    format!("[{}]", parts.join(" "))
}

/// Every decision of the plan in text, one line per fact (what the plan snapshots record).
pub fn plan_listing(tape: &Verified, plan: &Plan) -> String {
    let sp = &plan.segments;
    let mut s = String::new();
    let e = explain(tape, plan);
    let _ = writeln!(
        s,
        "nodes {}  active {}  strategy {}",
        e.nodes,
        e.active,
        sp.strategy.name()
    );
    let dead: Vec<NodeId> = tape
        .ids()
        .filter(|v| !plan.activity.live[v.index()])
        .collect();
    let _ = writeln!(s, "dead {}", ids(&dead));
    let _ = writeln!(s, "cuts {}", ids(&sp.cuts));
    let _ = writeln!(s, "crossing {:?}", sp.crossing);
    let _ = writeln!(
        s,
        "persistent ({}) {}",
        sp.persistent.len(),
        ids(&sp.persistent)
    );
    let _ = writeln!(
        s,
        "scratch_slots ({}) {}",
        sp.scratch_slots.len(),
        ids(&sp.scratch_slots)
    );
    let _ = writeln!(
        s,
        "max_live plain {}  checkpointed {}",
        e.max_live_plain, e.max_live_checkpointed
    );
    for (i, seg) in sp.segments.iter().enumerate() {
        let _ = writeln!(s, "segment {i} %{}..%{}", seg.range.start, seg.range.end);
        let _ = writeln!(s, "  bookmarks {}", ids(&seg.bookmarks));
        let _ = writeln!(s, "  draws {}", ids(&seg.draws));
        let empty = Vec::new();
        let _ = writeln!(
            s,
            "  opaque {}",
            ids(plan.opacity.opaque_reads.get(i).unwrap_or(&empty))
        );
        let _ = writeln!(
            s,
            "  rekey {}",
            plan.opacity.rekey.get(i).copied().unwrap_or(false)
        );
    }
    s
}

/// An SVG picture of why checkpointing works: forward values alive along the tape (x = node
/// position; at each position the most held by any step at that node, forward or reverse), the
/// plain kernel's curve against the plan's, with the cuts as vertical lines.
pub fn explain_svg(tape: &Verified, plan: &Plan) -> String {
    let plain = alive_profile_plain(tape);
    let ckpt = alive_profile_checkpointed(tape, plan);
    let cuts: Vec<u32> = plan.segments.cuts.iter().map(|c| c.0).collect();
    let mut out = String::new();
    let drawn = draw_svg(&mut out, &plain, &ckpt, &cuts, plan.segments.segments.len());
    match drawn {
        Ok(()) => out,
        Err(e) => format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"800\" height=\"60\"><text x=\"10\" y=\"30\">explain: could not draw: {}</text></svg>\n",
            xml_escape(&e)
        ),
    }
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn draw_svg(
    out: &mut String,
    plain: &[u32],
    ckpt: &[u32],
    cuts: &[u32],
    segments: usize,
) -> Result<(), String> {
    let n = plain.len().max(1) as u32;
    let ymax = plain.iter().chain(ckpt).copied().max().unwrap_or(0).max(1);
    let ytop = ymax + ymax / 20 + 1;
    let err = |e: &dyn std::fmt::Display| e.to_string();
    {
        let root = SVGBackend::with_string(out, (900, 500)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let title = if segments > 1 {
            format!("Forward values alive: plain vs checkpointed ({segments} segments)")
        } else {
            "Forward values alive: plain kernel (not checkpointed)".to_string()
        };
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(55)
            .build_cartesian_2d(0u32..n, 0u32..ytop)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc("node position")
            .y_desc("forward values alive")
            .disable_x_mesh()
            .draw()
            .map_err(|e| err(&e))?;
        for &c in cuts {
            chart
                .draw_series(LineSeries::new(
                    [(c, 0), (c, ytop)],
                    RGBColor(170, 170, 170),
                ))
                .map_err(|e| err(&e))?;
        }
        let red = RGBColor(200, 40, 40);
        let blue = RGBColor(30, 90, 200);
        chart
            .draw_series(LineSeries::new(
                plain.iter().enumerate().map(|(x, &y)| (x as u32, y)),
                red.stroke_width(2),
            ))
            .map_err(|e| err(&e))?
            .label(format!(
                "plain (max {})",
                plain.iter().max().copied().unwrap_or(0)
            ))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], red));
        if segments > 1 {
            chart
                .draw_series(LineSeries::new(
                    ckpt.iter().enumerate().map(|(x, &y)| (x as u32, y)),
                    blue.stroke_width(2),
                ))
                .map_err(|e| err(&e))?
                .label(format!(
                    "checkpointed (max {}); grey lines: cuts",
                    ckpt.iter().max().copied().unwrap_or(0)
                ))
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], blue));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    Ok(())
}

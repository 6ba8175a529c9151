//! The pipeline: activity → liveness → segment → opacity, and the invariants every plan keeps.
//!
//! `plan` assumes a verified tape. In debug builds (and so in tests) it checks its result with
//! [`check_plan`] and panics on a broken invariant: that is a bug in a pass, never bad input.

use super::segment::{crossing_profile, live_last_read};
use super::{activity, adjoint_reads, liveness, opacity, reverse_recompute, segment};
use crate::plan::{Checkpoint, Plan, SegmentOptions};
use crate::tape::{Node, NodeId, Tape};
use crate::verify::Verified;
use std::collections::BTreeSet;

/// A plan that breaks one of its invariants: which rule, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("plan invariant broken: {rule} (at {place})")]
pub struct PlanError {
    pub rule: &'static str,
    pub place: String,
}

fn fail(rule: &'static str, place: impl Into<String>) -> Result<(), PlanError> {
    Err(PlanError {
        rule,
        place: place.into(),
    })
}

fn ensure(ok: bool, rule: &'static str, place: impl FnOnce() -> String) -> Result<(), PlanError> {
    if ok {
        Ok(())
    } else {
        fail(rule, place())
    }
}

/// Runs the passes on a verified tape (its activity and liveness are the verifier's) and returns
/// the plan; in debug builds the plan is checked with `check_plan` (a failure is a pass bug and
/// panics).
pub fn plan(v: &Verified, opts: &SegmentOptions) -> Plan {
    let tape = v.tape();
    let activity = v.info().activity.clone();
    let liveness = v.info().liveness.clone();
    let segments = segment(tape, &activity, &liveness, opts);
    let opacity = opacity(tape, &activity, &segments);
    let plan = Plan {
        activity,
        liveness,
        segments,
        opacity,
    };
    if cfg!(debug_assertions) {
        if let Err(e) = check_plan(tape, &plan) {
            panic!("passes::plan produced a broken plan: {e}");
        }
    }
    plan
}

/// Checks every guarantee the plan types document against the tape; `Ok` iff all hold.
pub fn check_plan(tape: &Tape, plan: &Plan) -> Result<(), PlanError> {
    let n = tape.len();
    let is_const = |v: NodeId| matches!(tape.node(v), Node::Const(_));
    ensure(
        plan.activity == activity(tape),
        "activity is activity(tape)",
        || "activity".into(),
    )?;
    ensure(
        plan.liveness == liveness(tape),
        "liveness is liveness(tape)",
        || "liveness".into(),
    )?;
    let live = &plan.activity.live;
    let sp = &plan.segments;
    let count = sp.segments.len();

    // Tiling and cuts.
    ensure(count >= 1, "at least one segment", || "segments".into())?;
    let mut next = 0u32;
    for (s, seg) in sp.segments.iter().enumerate() {
        ensure(
            seg.range.start == next,
            "segments tile 0..n in order",
            || format!("segment {s}"),
        )?;
        ensure(
            seg.range.end > seg.range.start || n == 0,
            "segments are non-empty",
            || format!("segment {s}"),
        )?;
        next = seg.range.end;
    }
    ensure(next as usize == n, "segments tile 0..n in order", || {
        "last segment".into()
    })?;
    ensure(
        sp.cuts.len() + 1 == count,
        "one cut between each two segments",
        || "cuts".into(),
    )?;
    for (s, c) in sp.cuts.iter().enumerate() {
        ensure(
            sp.segments[s + 1].range.start == c.0,
            "cut s is the first node of segment s+1",
            || format!("cut {s} = {c}"),
        )?;
        ensure(c.0 >= 1 && (c.0 as usize) < n, "cuts lie in 1..n-1", || {
            format!("cut {s} = {c}")
        })?;
    }

    // Crossings and the persistent set.
    let last = live_last_read(tape, live);
    let cross = crossing_profile(&last);
    ensure(
        sp.crossing.len() == sp.cuts.len(),
        "one crossing count per cut",
        || "crossing".into(),
    )?;
    // Each value crosses the cuts in (v, last_read(v)]: count them per cut with a difference
    // array and collect the values that cross any (O(n log S), so debug builds stay fast).
    let cut_pos: Vec<u32> = sp.cuts.iter().map(|c| c.0).collect();
    let mut per_cut = vec![0i64; cut_pos.len() + 1];
    let mut expect: BTreeSet<NodeId> = BTreeSet::new();
    for (v, l) in last.iter().enumerate() {
        let Some(l) = *l else { continue };
        let first = cut_pos.partition_point(|&c| c as usize <= v);
        let end = cut_pos.partition_point(|&c| c <= l);
        if first < end {
            per_cut[first] += 1;
            per_cut[end] -= 1;
            expect.insert(NodeId(v as u32));
        }
    }
    let mut count_here = 0i64;
    for (s, c) in sp.cuts.iter().enumerate() {
        count_here += per_cut[s];
        ensure(
            count_here == sp.crossing[s] as i64,
            "crossing counts the values crossing the cut",
            || {
                format!(
                    "cut {s} = {c}: plan says {}, tape has {count_here}",
                    sp.crossing[s]
                )
            },
        )?;
        ensure(
            cross[c.0 as usize] as i64 == count_here,
            "crossing profile agrees",
            || format!("cut {s} = {c}"),
        )?;
    }
    let crossing_values: Vec<NodeId> = expect.iter().copied().collect();
    for (i, node) in tape.nodes.iter().enumerate() {
        if matches!(node, Node::Input(_)) {
            expect.insert(NodeId(i as u32));
        }
    }
    expect.extend(tape.outputs.iter().map(|o| o.node));
    let expect: Vec<NodeId> = expect.into_iter().collect();
    if sp.persistent != expect {
        let extra = sp.persistent.iter().find(|v| !expect.contains(v));
        let missing = expect.iter().find(|v| !sp.persistent.contains(v));
        return fail(
            "persistent is exactly crossings ∪ inputs ∪ outputs, ascending",
            format!("extra {extra:?}, missing {missing:?}"),
        );
    }
    let is_persistent = |v: NodeId| sp.persistent.binary_search(&v).is_ok();

    // Per segment: forward lines, bookmarks, what the reverse block recomputes, draws.
    let persistent_mask = sp.persistent_mask(n);
    for (s, seg) in sp.segments.iter().enumerate() {
        for i in seg.range.clone() {
            let v = NodeId(i);
            if !live[v.index()] {
                continue;
            }
            for a in tape.node(v).args() {
                ensure(
                    seg.range.contains(&a.0) || is_persistent(a) || is_const(a),
                    "a segment's forward lines read only its own nodes, persistent values and constants",
                    || format!("segment {s}, node {v} reads {a}"),
                )?;
            }
        }
        let recompute = if count == 1 {
            Vec::new()
        } else {
            reverse_recompute(tape, &plan.activity, &persistent_mask, seg.range.clone())
        };
        ensure(
            seg.recompute == recompute,
            "a reverse block recomputes exactly the locals its adjoint rules need",
            || {
                format!(
                    "segment {s}: plan {:?}, needed {recompute:?}",
                    seg.recompute
                )
            },
        )?;
        let draws: Vec<NodeId> = recompute
            .iter()
            .copied()
            .filter(|&v| matches!(tape.node(v), Node::Draw(..)))
            .collect();
        ensure(
            seg.draws == draws,
            "draws are the draws the reverse block recomputes",
            || format!("segment {s}"),
        )?;
    }

    // Strategy and scratch slots.
    if count == 1 {
        ensure(
            sp.strategy == Checkpoint::Off,
            "one segment is the plain kernel",
            || "strategy".into(),
        )?;
    } else {
        ensure(
            sp.strategy != Checkpoint::Off,
            "a checkpointed plan names its strategy",
            || "strategy".into(),
        )?;
    }
    if sp.strategy == Checkpoint::Scratch {
        let read_back: BTreeSet<NodeId> = plan
            .opacity
            .opaque_reads
            .iter()
            .flatten()
            .copied()
            .collect();
        let wanted: Vec<NodeId> = crossing_values
            .iter()
            .copied()
            .filter(|v| read_back.contains(v))
            .collect();
        ensure(
            sp.scratch_slots == wanted,
            "scratch slots are the crossing values some reverse block reads back",
            || "scratch_slots".into(),
        )?;
    } else {
        ensure(
            sp.scratch_slots.is_empty(),
            "only the scratch strategy has slots",
            || "scratch_slots".into(),
        )?;
    }

    // Opacity: a reverse block reads persistent values only through its opaque reads.
    let op = &plan.opacity;
    ensure(
        op.opaque_reads.len() == count && op.rekey.len() == count,
        "one opacity entry per segment",
        || "opacity".into(),
    )?;
    if count == 1 {
        ensure(
            sp.segments[0].bookmarks.is_empty(),
            "the plain kernel reads nothing back",
            || "bookmarks".into(),
        )?;
        ensure(
            op.opaque_reads[0].is_empty() && !op.rekey[0],
            "nothing is opaque in the plain kernel",
            || "opacity".into(),
        )?;
        return Ok(());
    }
    for (s, seg) in sp.segments.iter().enumerate() {
        let reads = &op.opaque_reads[s];
        let before: Vec<NodeId> = reads
            .iter()
            .copied()
            .filter(|v| v.0 < seg.range.start)
            .collect();
        ensure(
            seg.bookmarks == before,
            "bookmarks are the persistent values from before the segment that its reverse block reads",
            || format!("segment {s}: plan {:?}, block reads {before:?}", seg.bookmarks),
        )?;
        ensure(
            reads.windows(2).all(|w| w[0] < w[1]),
            "opaque reads ascend",
            || format!("segment {s}"),
        )?;
        for &r in reads {
            ensure(
                is_persistent(r) && !is_const(r),
                "opaque reads are non-constant persistent values",
                || format!("segment {s}, {r}"),
            )?;
        }
        ensure(
            op.rekey[s] != seg.draws.is_empty(),
            "a block that regenerates draws re-keys",
            || format!("segment {s}"),
        )?;
        let rec = &seg.recompute;
        let available = |v: NodeId| {
            is_const(v) || reads.binary_search(&v).is_ok() || rec.binary_search(&v).is_ok()
        };
        // Every persistent value the block reads is read opaquely, and nothing else is.
        let mut used = BTreeSet::new();
        for &v in rec {
            used.extend(tape.node(v).args());
        }
        for i in seg.range.clone() {
            let v = NodeId(i);
            if live[v.index()] && plan.activity.active[v.index()] {
                used.extend(adjoint_reads(tape.node(v), v, &plan.activity.active));
            }
        }
        let used: Vec<NodeId> = used
            .into_iter()
            .filter(|&v| is_persistent(v) && !is_const(v))
            .collect();
        ensure(
            *reads == used,
            "opaque reads are exactly the persistent values the reverse block reads",
            || format!("segment {s}: plan {reads:?}, block reads {used:?}"),
        )?;
        for &v in rec {
            for a in tape.node(v).args() {
                ensure(
                    available(a),
                    "a reverse block's recomputation reads only its copies and locals",
                    || format!("segment {s}, node {v} reads {a}"),
                )?;
            }
        }
        for i in seg.range.clone() {
            let v = NodeId(i);
            if live[v.index()] && plan.activity.active[v.index()] {
                for r in adjoint_reads(tape.node(v), v, &plan.activity.active) {
                    ensure(
                        available(r),
                        "a reverse block's adjoint rules read only its copies and locals",
                        || format!("segment {s}, node {v} reads {r}"),
                    )?;
                }
            }
        }
    }
    Ok(())
}

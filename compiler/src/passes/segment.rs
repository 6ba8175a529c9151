//! Segmentation: the checkpoint plan.
//!
//! Contract (see `crate::plan::SegmentPlan` for the guarantees of the result):
//!
//! - **Which values count.** Only *live* values (those that reach an output, `Activity::live`) that
//!   are not constants. A value's *last read* is the highest live node that reads it, or position n
//!   when it is an output. Dead nodes are dropped from every kernel, so a dead node never crosses a
//!   cut and a read by a dead node is not a read. Constants are re-materialized where they are
//!   used, never persisted, so they never cross.
//! - **Crossing.** A value v crosses cut c (a position in 1..n-1, the first node of a segment) when
//!   `v < c <= last_read(v)`. Draws and inputs count like any other value.
//! - **Segment count S.** `Checkpoint::Off`, `segments == Some(0 | 1)` → 1. `Some(k > 1)` → k.
//!   Otherwise S = ceil(L / seg_len), L the number of *live* nodes (dead ones cost nothing in a
//!   kernel; seg_len defaults to [`DEFAULT_SEG_LEN`](crate::plan::DEFAULT_SEG_LEN); 0 is read
//!   as 1), for register recompute only once L is at least `ckpt_nodes` (else 1). S is then
//!   reduced to L when S > L; a tape of 0 or 1 live nodes has one segment.
//! - **Cuts.** Cut s (1..S-1) aims at floor(s·n/S) and searches the window ±max(1, n/(4S)),
//!   clamped to stay above the previous cut and to leave room for the cuts after it (so cuts are
//!   strictly increasing inside 1..n-1; the clamped window is never empty when S <= n). The chosen
//!   position has the fewest crossing values; ties go to the position nearest the target, then to
//!   the lower position.
//! - **Persistent values** = values crossing any cut ∪ inputs ∪ outputs (inputs and outputs even
//!   when they are constants or dead), ascending.
//! - **Per segment.** `recompute` (S > 1): what its reverse block
//!   recomputes, [`reverse_recompute`]: only the locals its adjoint rules need, with their local
//!   arguments. `draws`: the draws among them (the block regenerates them from (seed, path, k)).
//!   `bookmarks`: the non-constant persistent values computed before the segment that its reverse
//!   block reads back (arguments of `recompute`, values its adjoint rules read), ascending.
//! - **Scratch.** With the scratch strategy and S > 1, `scratch_slots` lists every value crossing
//!   some cut (inputs included) that some reverse block reads back ([`reverse_reads`]),
//!   ascending: slot k holds `scratch_slots[k]`.
//! - With S = 1 the plan's strategy is `Checkpoint::Off` (the plain kernel) whatever was asked.

use super::adjoint_reads;
use crate::plan::{
    Activity, Checkpoint, Liveness, Segment, SegmentOptions, SegmentPlan, DEFAULT_SEG_LEN,
};
use crate::tape::{Node, NodeId, Tape};
use std::collections::BTreeSet;
use std::ops::Range;

/// The last live reader of every live non-constant value (`n` for outputs); `None` for constants,
/// dead values and values nothing live reads. `live` is `Activity::live`.
pub fn live_last_read(tape: &Tape, live: &[bool]) -> Vec<Option<u32>> {
    let n = tape.len();
    let mut last: Vec<Option<u32>> = vec![None; n];
    for (i, node) in tape.nodes.iter().enumerate() {
        if !live[i] {
            continue;
        }
        for a in node.args() {
            last[a.index()] = Some(i as u32);
        }
    }
    for out in &tape.outputs {
        last[out.node.index()] = Some(n as u32);
    }
    for (i, node) in tape.nodes.iter().enumerate() {
        if matches!(node, Node::Const(_)) || !live[i] {
            last[i] = None;
        }
    }
    last
}

/// `cross[c]` (c in 0..=n) = the number of values v with `v < c <= last_read(v)`.
pub fn crossing_profile(last_read: &[Option<u32>]) -> Vec<u32> {
    let n = last_read.len();
    let mut delta = vec![0i64; n + 2];
    for (v, last) in last_read.iter().enumerate() {
        if let Some(last) = *last {
            let last = last as usize;
            if last > v {
                delta[v + 1] += 1;
                delta[last + 1] -= 1;
            }
        }
    }
    let mut out = Vec::with_capacity(n + 1);
    let mut count = 0i64;
    for d in &delta[..=n] {
        count += d;
        out.push(count as u32);
    }
    out
}

/// The number of segments the options ask for on a tape of `n` live nodes, after reducing it to n.
pub fn segment_count(n: usize, opts: &SegmentOptions) -> u32 {
    let n32 = u32::try_from(n).unwrap_or(u32::MAX);
    let wanted = if opts.strategy == Checkpoint::Off {
        1
    } else {
        let by_length = || n32.div_ceil(opts.seg_len.unwrap_or(DEFAULT_SEG_LEN).max(1));
        match opts.segments {
            Some(k) => k.max(1),
            None => match opts.strategy {
                Checkpoint::Off => 1,
                Checkpoint::Registers if n32 < opts.ckpt_nodes => 1,
                Checkpoint::Registers | Checkpoint::Scratch => by_length(),
            },
        }
    };
    wanted.min(n32).max(1)
}

/// Chooses `count - 1` cuts on a tape of `n` nodes from the crossing profile (see the module doc).
/// Requires `1 <= count <= max(n, 1)` and `cross.len() == n + 1`.
pub fn choose_cuts(cross: &[u32], n: usize, count: u32) -> Vec<u32> {
    let s_total = count as usize;
    let mut cuts: Vec<u32> = Vec::with_capacity(s_total.saturating_sub(1));
    if s_total <= 1 || n < 2 {
        return cuts;
    }
    let window = (n / (4 * s_total)).max(1);
    for s in 1..s_total {
        let target = s * n / s_total;
        let prev = cuts.last().map_or(0, |&c| c as usize);
        let lo = target.saturating_sub(window).max(prev + 1).max(1);
        // Leave room for the s_total - 1 - s cuts after this one, all inside 1..n-1.
        let hi = (target + window).min(n - s_total + s);
        let mut best = lo;
        for c in lo..=hi.max(lo) {
            let key = |p: usize| (cross[p], p.abs_diff(target), p);
            if key(c) < key(best) {
                best = c;
            }
        }
        cuts.push(best as u32);
    }
    cuts
}

/// What the reverse block of the segment `range` recomputes: the local nodes (in `range`, live,
/// not constants, not persistent) whose values the segment's adjoint rules read
/// ([`adjoint_reads`]), and, transitively, the local arguments of those. Ascending. A local that
/// nothing in the block reads (a running sum whose only reader is a persistent value, an `add`
/// feeding only `add`s) is not recomputed: its adjoint rule needs no forward value.
pub fn reverse_recompute(
    tape: &Tape,
    act: &Activity,
    is_persistent: &[bool],
    range: Range<u32>,
) -> Vec<NodeId> {
    let local = |v: NodeId| {
        range.contains(&v.0)
            && act.live[v.index()]
            && !is_persistent[v.index()]
            && !matches!(tape.node(v), Node::Const(_))
    };
    let mut need = vec![false; range.len()];
    let at = |v: NodeId| (v.0 - range.start) as usize;
    for i in range.clone().rev() {
        let v = NodeId(i);
        if act.live[v.index()] && act.active[v.index()] {
            for r in adjoint_reads(tape.node(v), v, &act.active) {
                if local(r) {
                    need[at(r)] = true;
                }
            }
        }
        if need[at(v)] {
            for a in tape.node(v).args() {
                if local(a) {
                    need[at(a)] = true;
                }
            }
        }
    }
    (range.start..range.end)
        .filter(|&i| need[at(NodeId(i))])
        .map(NodeId)
        .collect()
}

/// The persistent values the reverse block of the segment `range` reads back: the arguments of
/// the nodes it recomputes (`recompute`, from [`reverse_recompute`]) and the forward values its
/// adjoint rules read, when persistent and not constants. Ascending. (The opacity pass reads each
/// of them through the opaque identity; those from before `range` are the segment's bookmarks.)
pub fn reverse_reads(
    tape: &Tape,
    act: &Activity,
    is_persistent: &[bool],
    range: Range<u32>,
    recompute: &[NodeId],
) -> Vec<NodeId> {
    let mut reads = BTreeSet::new();
    for &v in recompute {
        reads.extend(tape.node(v).args());
    }
    for v in range.map(NodeId) {
        if act.live[v.index()] && act.active[v.index()] {
            reads.extend(adjoint_reads(tape.node(v), v, &act.active));
        }
    }
    reads
        .into_iter()
        .filter(|&v| is_persistent[v.index()] && !matches!(tape.node(v), Node::Const(_)))
        .collect()
}

/// Cuts the tape into segments and decides which values persist (the module doc is the contract).
/// Assumes a verified tape; `act` and `liveness` must be its activity and liveness (the
/// verifier's). `liveness.last_use` counts reads by dead nodes, so the crossing rule uses the last
/// *live* reader ([`live_last_read`], from the tape and its activity) and only cross-checks it
/// against `liveness` in debug builds.
pub fn segment(
    tape: &Tape,
    act: &Activity,
    liveness: &Liveness,
    opts: &SegmentOptions,
) -> SegmentPlan {
    let n = tape.len();
    let last = live_last_read(tape, &act.live);
    debug_assert!(last
        .iter()
        .zip(&liveness.last_use)
        .all(|(l, all)| l.is_none() || (all.is_some() && l <= all)));
    let cross = crossing_profile(&last);
    // Dead nodes cost nothing in a kernel, so they do not count towards the segment length (a
    // tape with 1,000 dead draws is not cut into 21 segments).
    let live_nodes = act.live.iter().filter(|&&l| l).count();
    let count = segment_count(live_nodes, opts);
    let cuts = choose_cuts(&cross, n, count);
    let crossing: Vec<u32> = cuts.iter().map(|&c| cross[c as usize]).collect();

    // v crosses some cut iff the first cut after v is at most its last read.
    let crosses = |v: usize| -> bool {
        let Some(l) = last[v] else { return false };
        let k = cuts.partition_point(|&c| (c as usize) <= v);
        k < cuts.len() && cuts[k] <= l
    };
    let mut persistent_set: BTreeSet<u32> =
        (0..n).filter(|&v| crosses(v)).map(|v| v as u32).collect();
    let crossing_values: Vec<NodeId> = persistent_set.iter().map(|&v| NodeId(v)).collect();
    for (i, node) in tape.nodes.iter().enumerate() {
        if matches!(node, Node::Input(_)) {
            persistent_set.insert(i as u32);
        }
    }
    for out in &tape.outputs {
        persistent_set.insert(out.node.0);
    }
    let mut is_persistent = vec![false; n];
    for &p in &persistent_set {
        is_persistent[p as usize] = true;
    }

    let mut bounds: Vec<u32> = Vec::with_capacity(cuts.len() + 2);
    bounds.push(0);
    bounds.extend(&cuts);
    bounds.push(n as u32);
    // Each reverse block's read-backs, computed once: the bookmarks are those from before the
    // segment, and a crossing value gets a scratch slot only if some block reads it back.
    let mut read_back = vec![false; n];
    let segments = bounds
        .windows(2)
        .map(|w| {
            let (start, end) = (w[0], w[1]);
            let (recompute, reads) = if cuts.is_empty() {
                (Vec::new(), Vec::new())
            } else {
                let recompute = reverse_recompute(tape, act, &is_persistent, start..end);
                let reads = reverse_reads(tape, act, &is_persistent, start..end, &recompute);
                (recompute, reads)
            };
            for v in &reads {
                read_back[v.index()] = true;
            }
            let draws = recompute
                .iter()
                .copied()
                .filter(|&v| matches!(tape.node(v), Node::Draw(..)))
                .collect();
            Segment {
                range: start..end,
                bookmarks: reads.into_iter().filter(|v| v.0 < start).collect(),
                recompute,
                draws,
            }
        })
        .collect::<Vec<_>>();

    let checkpointed = segments.len() > 1;
    let strategy = if checkpointed {
        opts.strategy
    } else {
        Checkpoint::Off
    };
    let scratch_slots = if strategy == Checkpoint::Scratch {
        crossing_values
            .into_iter()
            .filter(|v| read_back[v.index()])
            .collect()
    } else {
        Vec::new()
    };
    SegmentPlan {
        strategy,
        segments,
        cuts: cuts.into_iter().map(NodeId).collect(),
        crossing,
        persistent: persistent_set.into_iter().map(NodeId).collect(),
        scratch_slots,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fewest_then_nearest_then_lowest() {
        // n = 6, S = 2: target 3, window max(1, 6/8) = 1, so positions 2..=4.
        assert_eq!(choose_cuts(&[0, 5, 3, 9, 3, 5, 0], 6, 2), [2]); // tie at distance 1: lower
        assert_eq!(choose_cuts(&[0, 5, 4, 9, 3, 5, 0], 6, 2), [4]); // fewest wins
        assert_eq!(choose_cuts(&[0, 5, 3, 3, 3, 5, 0], 6, 2), [3]); // nearest wins
        assert_eq!(choose_cuts(&[0, 0, 0, 0, 0, 0, 0], 6, 2), [3]);
        // Out-of-window positions never win: position 1 crosses nothing but lies outside.
        assert_eq!(choose_cuts(&[0, 0, 3, 3, 3, 5, 0], 6, 2), [3]);
    }

    #[test]
    fn windows_are_clamped() {
        // S = n: every node its own segment.
        assert_eq!(choose_cuts(&[0; 6], 5, 5), [1, 2, 3, 4]);
        // S = n - 1 with the cheapest positions pulling left: cuts stay increasing and leave room.
        assert_eq!(choose_cuts(&[0, 0, 9, 9, 9, 9, 0], 6, 5), [1, 2, 3, 4]);
        // n = 10, S = 3: targets 3 and 6, window 1; a cheap spot at 4 is taken by the first cut,
        // so the second cut searches 5..=7.
        assert_eq!(
            choose_cuts(&[0, 9, 9, 9, 0, 9, 9, 2, 9, 9, 0], 10, 3),
            [4, 7]
        );
        assert!(choose_cuts(&[0, 0], 1, 1).is_empty());
        assert!(choose_cuts(&[0], 0, 1).is_empty());
    }

    #[test]
    fn segment_counts() {
        let o = |strategy, segments, seg_len| SegmentOptions {
            strategy,
            segments,
            ckpt_nodes: 768,
            seg_len,
        };
        assert_eq!(
            segment_count(1536, &o(Checkpoint::Registers, None, None)),
            16
        );
        assert_eq!(segment_count(767, &o(Checkpoint::Registers, None, None)), 1);
        // Register recompute, once on, also cuts ~100-node segments: 8 at the threshold, 31
        // for the 3,051-node barrier, and --seg-len moves it as it does for scratch.
        assert_eq!(segment_count(768, &o(Checkpoint::Registers, None, None)), 8);
        assert_eq!(
            segment_count(3051, &o(Checkpoint::Registers, None, None)),
            31
        );
        assert_eq!(
            segment_count(1536, &o(Checkpoint::Registers, None, Some(50))),
            31
        );
        assert_eq!(
            segment_count(10, &o(Checkpoint::Registers, Some(32), None)),
            10
        );
        assert_eq!(segment_count(1536, &o(Checkpoint::Scratch, None, None)), 16);
        assert_eq!(
            segment_count(1536, &o(Checkpoint::Scratch, None, Some(200))),
            8
        );
        assert_eq!(
            segment_count(1536, &o(Checkpoint::Scratch, None, Some(100))),
            16
        );
        assert_eq!(
            segment_count(1536, &o(Checkpoint::Scratch, Some(3), Some(100))),
            3
        );
        assert_eq!(segment_count(1536, &o(Checkpoint::Off, Some(3), None)), 1);
        assert_eq!(
            segment_count(0, &o(Checkpoint::Registers, Some(3), None)),
            1
        );
    }
}

//! The plan: everything the middle end decides about a tape, in typed side tables keyed by node id.
//!
//! Passes (in `passes/`) fill these; emitters only read them and never re-derive a fact here.
//! This file is the contract between the middle end and the back ends.

use crate::tape::NodeId;
use std::ops::Range;

/// How the reverse sweep gets forward values back (a manifest field, so the runtime owns the type).
pub use nablac_abi::manifest::Checkpoint;

/// The knobs of segmentation (`--segments`, `--ckpt-nodes`, `--seg-len`, `--checkpoint`).
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct SegmentOptions {
    pub strategy: Checkpoint,
    /// `Some(1)` switches checkpointing off; `Some(n > 1)` forces n segments whatever the length.
    pub segments: Option<u32>,
    /// Register strategy: checkpoint automatically once the tape has at least this many nodes.
    pub ckpt_nodes: u32,
    /// The segment length, in nodes, that chooses S = ceil(n / seg_len) when `segments` does not
    /// (either strategy; register recompute only once the tape has `ckpt_nodes` nodes).
    pub seg_len: Option<u32>,
}

/// Register recompute switches itself on at this many nodes (on the H200 the 408-node 64-step
/// Asian ran 1.8x slower checkpointed than plain; BENCHMARKS.md, 2026-12-03).
pub const DEFAULT_CKPT_NODES: u32 = 768;
/// The default segment length of both strategies, measured on the H200 (BENCHMARKS.md,
/// 2026-12-03): scratch on the 252-step Asian, 100-node segments 3.62 ms, 200 5.34, 400 5.41;
/// register recompute at ~100 nodes a segment (16 for the 1,536-node Asian, 32 for the
/// 3,051-node barrier and the 3,048-node 504-step Asian) beat ~190 nodes by 1.45x, 1.6x, 1.5x.
pub const DEFAULT_SEG_LEN: u32 = 100;

impl Default for SegmentOptions {
    fn default() -> Self {
        SegmentOptions {
            strategy: Checkpoint::Registers,
            segments: None,
            ckpt_nodes: DEFAULT_CKPT_NODES,
            seg_len: None,
        }
    }
}

/// Which nodes matter. Guarantee: `active[i]` iff node i depends differentiably on some input and
/// some output depends differentiably on it (only active nodes carry adjoints or tangents; see
/// `passes::activity`); `live[i]` iff node i reaches some output (others are dead and no
/// kernel computes them).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Activity {
    pub active: Vec<bool>,
    pub live: Vec<bool>,
}

/// When values die. Guarantee: `last_use[i]` is the highest node that reads node i in the forward
/// sweep (outputs count as read at position n), `None` if nothing reads it; `alive[p]` is the
/// number of forward values alive just before node p executes (p in 0..=n).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Liveness {
    pub last_use: Vec<Option<u32>>,
    pub alive: Vec<u32>,
}

/// One segment of the checkpoint plan: the nodes `range` (in evaluation order).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Segment {
    pub range: Range<u32>,
    /// Persistent values computed before `range.start` that the reverse block of this segment
    /// reads back (its bookmarks), ascending. Empty with one segment.
    pub bookmarks: Vec<NodeId>,
    /// The nodes the reverse block of this segment recomputes, ascending: exactly the
    /// non-persistent, non-constant nodes of the segment whose values its adjoint rules read,
    /// closed under their arguments inside the segment. Empty with one segment.
    pub recompute: Vec<NodeId>,
    /// The draw nodes among `recompute` (the block regenerates them from (seed, path, k)).
    pub draws: Vec<NodeId>,
}

/// The checkpoint plan. Guarantees: the segments tile `0..n` in order; `cuts[s]` is the first node
/// of segment s+1; `crossing[s]` counts the non-constant values computed before `cuts[s]` and read
/// at or after it; `persistent` (ascending) is exactly the crossing values, the inputs and the
/// outputs; with one segment there are no cuts and the plan is the plain kernel's.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct SegmentPlan {
    pub strategy: Checkpoint,
    pub segments: Vec<Segment>,
    pub cuts: Vec<NodeId>,
    pub crossing: Vec<u32>,
    pub persistent: Vec<NodeId>,
    /// Scratch strategy: slot k of a path holds `scratch_slots[k]`; empty for the other strategies.
    pub scratch_slots: Vec<NodeId>,
}

impl SegmentPlan {
    pub fn is_checkpointed(&self) -> bool {
        self.segments.len() > 1
    }

    /// `mask[v]` iff node v is persistent, for a tape of `n` nodes.
    pub fn persistent_mask(&self, n: usize) -> Vec<bool> {
        let mut mask = vec![false; n];
        for v in &self.persistent {
            mask[v.index()] = true;
        }
        mask
    }
}

/// The anti-CSE plan. In the reverse sweep, segment s reads each of `opaque_reads[s]` through the
/// opaque identity (its bits XOR a run-time zero), and, when `rekey[s]`, re-keys the generator with
/// `key ^ zero` before recomputing its draws. Emitters materialize exactly this.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct OpacityPlan {
    pub opaque_reads: Vec<Vec<NodeId>>,
    pub rekey: Vec<bool>,
}

/// Everything the back ends need, computed once by `passes::plan`.
#[derive(Clone, PartialEq, Debug)]
pub struct Plan {
    pub activity: Activity,
    pub liveness: Liveness,
    pub segments: SegmentPlan,
    pub opacity: OpacityPlan,
}

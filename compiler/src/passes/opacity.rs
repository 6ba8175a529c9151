//! Opacity: the anti-CSE plan.
//!
//! A reverse block of a checkpointed kernel recomputes the same arithmetic from the same values as
//! the forward sweep, which is exactly what common-subexpression elimination merges (putting every
//! forward value back on the live list). So, for every segment s of a plan with S > 1:
//!
//! - `opaque_reads[s]` lists (ascending) every non-constant persistent value the reverse block of
//!   s reads: the arguments of the nodes it recomputes and the forward values its adjoint rules
//!   read ([`adjoint_reads`]). That is the bookmarks the block reads *and* the persistent values
//!   defined inside the segment that it reads (the inputs in segment 0, a value defined in s that
//!   crosses the next cut): without the second kind, a recomputed chain such as `vol * vol` in
//!   segment 0 would read only non-opaque values and could be merged with its forward twin. Each
//!   is read once, at the top of the block, through the opaque identity. A bookmark only a
//!   persistent node of the segment reads (in the forward sweep) is not read by the reverse block,
//!   since persistent nodes are not recomputed, so it is not in the list.
//! - `rekey[s]` is true when the block regenerates draws (`Segment::draws` is non-empty).
//!
//! The reverse block of s recomputes exactly `Segment::recompute` (the locals its adjoint rules
//! need, see `segment::reverse_recompute`), in order. With S = 1 nothing is opaque and nothing
//! re-keyed.
//!
//! One rule depends on the target's compiler rather than on the plan: where it folds or
//! specialises what feeds an exponential-family call by what it can see of it, every argument of
//! those calls goes through the opaque identity, in every kernel of that target
//! ([`opaque_math_arguments`]).

use super::segment::reverse_reads;
use crate::ops::{self, Fun};
use crate::plan::{Activity, OpacityPlan, SegmentPlan};
use crate::tape::{Node, NodeId, Tape};
use nablac_abi::manifest::Target;

/// The calls whose arguments go through the opaque identity where [`opaque_math_arguments`]
/// says so: exp and, by the same reasoning, the other exponential-family functions (and `pow`,
/// which the schedule asks about apart); log, sqrt and abs stay plain.
pub const OPAQUE_MATH: [Fun; 3] = [Fun::Exp, Fun::Tanh, Fun::Erfc];

/// Does `target`'s kernel pass the arguments of [`OPAQUE_MATH`] calls and `pow` through the
/// opaque identity? GLSL does: NVIDIA's Vulkan compiler gave the barrier (its exp of a product
/// of min/max selects) different bits in the plain and the 2-segment kernel, `precise` and all;
/// with `exp(opq(x, zero))` in both, the same bits (so it folds or specialises what feeds exp by
/// what it can see of it; measured on the H200, BENCHMARKS.md, 2026-12-03). Dividing through
/// add/multiply-only code did not help, so `/` stays. CUDA and OpenCL gave equal bits without it;
/// the CPU code has no such compiler.
pub fn opaque_math_arguments(target: Target) -> bool {
    target == Target::Glsl
}

/// The forward values node `id`'s adjoint rule reads when the nodes `active` receive adjoints
/// (`crate::ops::Rule::reads`): mul → the other argument of each active one; div → b (for a), b
/// and c (for b); exp → c; log → a; sqrt → c; max/min → a, b; abs → a; leaves → nothing. (c is
/// the node's own result, `id`.)
pub fn adjoint_reads(node: &Node, id: NodeId, active: &[bool]) -> Vec<NodeId> {
    let Some(rule) = ops::rule(node.op()) else {
        return Vec::new();
    };
    let mut args = node.args();
    let (a, b) = (args.next(), args.next());
    let is_active = |x: Option<NodeId>| x.is_some_and(|x| active[x.index()]);
    let (ra, rb, rc) = rule.reads([is_active(a), is_active(b)]);
    let mut reads = Vec::with_capacity(3);
    reads.extend(a.filter(|_| ra));
    reads.extend(b.filter(|_| rb));
    if rc {
        reads.push(id);
    }
    reads
}

/// Which reads of the reverse sweep are opaque and which segments re-key their generator (the
/// module doc is the contract). Assumes `plan` came from `segment` on this tape.
pub fn opacity(tape: &Tape, act: &Activity, plan: &SegmentPlan) -> OpacityPlan {
    let count = plan.segments.len();
    if !plan.is_checkpointed() {
        return OpacityPlan {
            opaque_reads: vec![Vec::new(); count],
            rekey: vec![false; count],
        };
    }
    let is_persistent = plan.persistent_mask(tape.len());
    let opaque_reads = plan
        .segments
        .iter()
        .map(|seg| reverse_reads(tape, act, &is_persistent, seg.range.clone(), &seg.recompute))
        .collect();
    let rekey = plan
        .segments
        .iter()
        .map(|seg| !seg.draws.is_empty())
        .collect();
    OpacityPlan {
        opaque_reads,
        rekey,
    }
}

//! Kernel source for CUDA, OpenCL and Vulkan GLSL: one C-like emitter, three dialects.
//!
//! Contract: [`emit`] turns a verified tape and its plan (`crate::passes::plan`) into one compute
//! kernel's source and the [`Manifest`] a host needs to launch it. It builds the kernel schedule
//! (`crate::schedule`) and prints it: the skeleton (`templates/kernel.txt`) around the body, one
//! line per statement (`body.rs`); it re-derives nothing the plan or the schedule holds and never
//! matches on tape ops. The same inputs give the same bytes (no hash-map order, names from dense
//! ids, no timestamps).
//!
//! # The kernel
//!
//! One path per thread. The global path index is 64-bit, kept as two uints:
//! `path = path_base + group * WG + lid` with carry into the high word; a thread whose path is
//! `>= paths` computes nothing and contributes leaf 0. Kinds:
//!
//! - **price** (`Mode::Price`): the forward sweep; per output the leaves `value` and `value²`.
//! - **plain reverse** (`Mode::Reverse`, one segment): the forward sweep, then the reverse sweep
//!   over the live active nodes with TAPE-FORMAT.md's adjoint rules; leaves `value`, `value²` and
//!   each input's `d output / d input`. Several outputs share one reverse sweep carrying one
//!   adjoint lane per output.
//! - **forward** (`Mode::Forward`): the forward sweep, each active node's value followed by its
//!   tangent `tN_i` in every direction i (one per input) where it is not structurally zero; an
//!   input's own direction is the literal 1, a rule that passes a tangent on unchanged defines no
//!   copy; leaves as reverse mode's, the Greeks being the outputs' tangents. Never checkpointed.
//! - **checkpointed reverse, register recompute** (`Checkpoint::Registers`): persistent values are
//!   declared at top level; the forward sweep is one `{ }` block per segment; the reverse sweep
//!   runs the segments last first, each block re-keying the generator (`key ^ zero`) when the plan
//!   says so, reading each of its opaque reads into a local `rN = opq(vN, zero)`, recomputing the
//!   plan's `Segment::recompute` (the locals its adjoint lines need), then its adjoint lines.
//!   Adjoints of persistent values live at top level; the others die with their block.
//! - **checkpointed reverse, scratch buffer** (`Checkpoint::Scratch`, CUDA and OpenCL): as the
//!   register kernel, and every value with a scratch slot is also written to
//!   `scratch[slot * invocations + gid]` (soa) or `scratch[gid * slots + slot]` (aos) by the
//!   forward sweep; the reverse blocks read slot values back from scratch (through `opq` too).
//!
//! The leaves are summed per workgroup in f64 shared memory in the exact pairwise order of
//! TAPE-FORMAT.md (`S(a,2m) = S(a,m) + S(a+m,m)`), one f64 per (group, sum) in
//! `partials[group * n_sums + s]`; no floating-point atomics.
//!
//! # The ABI (every target; [`Manifest::params`] lists it)
//!
//! The parameter table is `nablac_abi::manifest::gpu_params` (argument order for CUDA and OpenCL,
//! descriptor bindings and push-constant offsets for GLSL); the template declares the same
//! parameters in that order, and hosts bind from the manifest.
//!
//! Bit-reproducibility needs the compiler not to fuse multiply-adds: the driver options are
//! `nablac_abi::manifest::compile_options` (`--fmad=false` for NVRTC; OpenCL carries
//! `FP_CONTRACT OFF` and gets `-cl-fp32-correctly-rounded-divide-sqrt`).

mod body;
mod dialect;
mod fill;
mod skeleton;

#[cfg(test)]
pub(crate) mod snapshots;

/// The manifest is the kernel ABI's contract (crate `nablac-abi`); the emitters fill it.
pub use nablac_abi::manifest;

#[cfg(test)]
mod tests;

pub use dialect::{Dialect, MathFn, CUDA, GLSL, OPENCL};
pub use fill::{shift_names, sum_names};
pub use manifest::{Manifest, Mode, Param, Precision, Target, MANIFEST_VERSION};

use crate::plan::{Checkpoint, Plan};
use crate::schedule::{Schedule, ScheduleOptions};
use crate::tape::{Node, NodeId, Tape};
use crate::verify::Verified;

/// How the scratch buffer is laid out (scratch strategy only).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, Default)]
pub enum ScratchLayout {
    /// Structure of arrays: `scratch[slot * invocations + gid]` (coalesced; the default).
    #[default]
    Soa,
    /// Array of structures: `scratch[gid * slots + slot]`.
    Aos,
}

impl ScratchLayout {
    /// Every layout, in the order options list them.
    pub const ALL: [ScratchLayout; 2] = [ScratchLayout::Soa, ScratchLayout::Aos];

    /// `soa` or `aos`, as the manifest spells it.
    pub fn name(self) -> &'static str {
        match self {
            ScratchLayout::Soa => "soa",
            ScratchLayout::Aos => "aos",
        }
    }
}

/// The default (and most common) workgroup size.
pub const DEFAULT_WORKGROUP_SIZE: u32 = 128;
/// The largest workgroup size the emitter accepts (every target's common limit).
pub const MAX_WORKGROUP_SIZE: u32 = 1024;

/// What to emit.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct EmitOptions {
    pub target: Target,
    pub mode: Mode,
    pub precision: Precision,
    /// Threads per workgroup: a power of two in 1..=1024.
    pub workgroup_size: u32,
    pub scratch_layout: ScratchLayout,
    /// Add a comment naming the tape node to every line of the body (`// %18 = exp %17`).
    pub annotate: bool,
    /// CUDA: ask for this many resident workgroups per multiprocessor
    /// (`__launch_bounds__(WG, N)`), which caps registers at 65536 / (WG * N): occupancy bought
    /// with spills (on the H200, N = 4 made the 16-segment Asian 1.33x faster; BENCHMARKS.md).
    /// `None`: the compiler's choice. Other targets have no such hint and refuse it.
    pub min_blocks: Option<u32>,
    /// Sum the Greeks' squares for their standard errors (`greek_sq:O:I`; modes with Greeks).
    pub greek_stderr: bool,
}

impl Default for EmitOptions {
    fn default() -> Self {
        EmitOptions {
            target: Target::Cuda,
            mode: Mode::Reverse,
            precision: Precision::F32,
            workgroup_size: DEFAULT_WORKGROUP_SIZE,
            scratch_layout: ScratchLayout::Soa,
            annotate: false,
            min_blocks: None,
            greek_stderr: true,
        }
    }
}

/// An emitted kernel: its source and the manifest that describes how to launch it.
#[derive(Clone, PartialEq, Debug)]
pub struct Kernel {
    pub source: String,
    pub manifest: Manifest,
}

/// Why a kernel could not be emitted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EmitError {
    #[error("target {0} is not a C-like kernel target (the CPU target is compiled by the JIT)")]
    NotAKernelTarget(&'static str),
    #[error("workgroup size {0} is not a power of two in 1..={MAX_WORKGROUP_SIZE}")]
    WorkgroupSize(u32),
    #[error("min_blocks must be at least 1 (None asks for no launch-bounds hint)")]
    MinBlocks,
    #[error("target {target} cannot {what}")]
    Unsupported { target: &'static str, what: String },
    #[error("constant {value:e} at {node} overflows {precision} (it would be an infinity)")]
    ConstOverflow {
        node: NodeId,
        value: f64,
        precision: &'static str,
    },
    #[error("input {name} was recorded at {value:e}, which overflows {precision} (record it at a value the kernel can hold, or use f64)")]
    InputOverflow {
        name: String,
        value: f64,
        precision: &'static str,
    },
    #[error("tape is malformed: {0}")]
    Tape(String),
    #[error("plan does not fit the tape: {0}")]
    Plan(String),
    #[error("template {template} failed to render: {message}")]
    Render {
        template: &'static str,
        message: String,
    },
}

/// Emits the kernel for the verified tape `v` under `plan` (from `passes::plan` on the same tape)
/// with `opts`. Guarantees: never panics; the same arguments give the same bytes; the manifest
/// lists every parameter of the source in binding order.
pub fn emit(v: &Verified, plan: &Plan, opts: &EmitOptions) -> Result<Kernel, EmitError> {
    emit_checked(v, plan, opts, None)
}

/// [`emit`] printing `schedule`, which must be `Schedule::build(v, plan, ..)` with `opts`'s
/// mode, target and Greeks' squares (what `compile::compile` builds once for every reader).
pub fn emit_schedule(
    v: &Verified,
    plan: &Plan,
    schedule: &Schedule,
    opts: &EmitOptions,
) -> Result<Kernel, EmitError> {
    emit_checked(v, plan, opts, Some(schedule))
}

fn emit_checked(
    v: &Verified,
    plan: &Plan,
    opts: &EmitOptions,
    schedule: Option<&Schedule>,
) -> Result<Kernel, EmitError> {
    let tape = v.tape();
    let d = Dialect::of(opts.target).ok_or(EmitError::NotAKernelTarget(opts.target.name()))?;
    let wg = opts.workgroup_size;
    if !wg.is_power_of_two() || wg > MAX_WORKGROUP_SIZE {
        return Err(EmitError::WorkgroupSize(wg));
    }
    match opts.min_blocks {
        Some(0) => return Err(EmitError::MinBlocks),
        Some(_) if opts.target != Target::Cuda => {
            return Err(EmitError::Unsupported {
                target: opts.target.name(),
                what: "take a resident-workgroups hint (min_blocks is CUDA's launch bounds)".into(),
            })
        }
        _ => {}
    }
    check_plan_shape(tape, plan)?;
    let checkpointed = opts.mode == Mode::Reverse && plan.segments.is_checkpointed();
    let strategy = if checkpointed {
        plan.segments.strategy
    } else {
        Checkpoint::Off
    };
    if checkpointed && strategy == Checkpoint::Off {
        return Err(EmitError::Plan(
            "a plan with several segments says Checkpoint::Off".into(),
        ));
    }
    if strategy == Checkpoint::Scratch && opts.target == Target::Glsl {
        return Err(EmitError::Unsupported {
            target: opts.target.name(),
            what: "use the scratch-buffer strategy (register recompute is the GLSL strategy)"
                .into(),
        });
    }
    check_reads(tape, plan, checkpointed).map_err(EmitError::Plan)?;
    let built;
    let schedule = match schedule {
        Some(s) => s,
        None => {
            built = Schedule::build(
                v,
                plan,
                ScheduleOptions {
                    mode: opts.mode,
                    opaque_math: crate::passes::opaque_math_arguments(opts.target),
                    greek_stderr: opts.greek_stderr,
                    loops: false,
                },
            );
            &built
        }
    };
    let body = body::Body {
        tape,
        schedule,
        d,
        p: opts.precision,
        annotate: opts.annotate,
        layout: opts.scratch_layout,
        index64: if opts.target == Target::Cuda {
            "unsigned long long"
        } else {
            "ulong"
        },
        fused: crate::schedule::fused_products(&schedule.body),
        loop_first: std::cell::Cell::new(0),
    };
    if opts.precision == Precision::F64 {
        let (normal, uniform) = schedule.draws();
        let mut missing: Vec<MathFn> = body
            .math_used()
            .into_iter()
            .filter(|&f| !d.has_f64(f))
            .collect();
        if (normal || uniform) && !d.has_f64(MathFn::Log) {
            missing.push(MathFn::Log);
        }
        if !missing.is_empty() {
            let names: Vec<String> = missing
                .iter()
                .map(|f| format!("{f:?}").to_lowercase())
                .collect();
            return Err(EmitError::Unsupported {
                target: opts.target.name(),
                what: format!(
                    "compute {} in f64 (GLSL 450 has them for float only; draws need log and cos); use f32",
                    names.join(", ")
                ),
            });
        }
    }
    check_values_fit(tape, plan, opts.precision)?;
    let source = skeleton::render(&body, opts)?;
    let mut manifest = fill::build(v, plan, opts, schedule)?;
    manifest.seal(&source);
    Ok(Kernel { source, manifest })
}

/// Every target's check that the tape's numbers exist in the kernel precision: each live
/// constant (a literal in the source) and each input's recorded value (the run's default
/// market) is finite there; f32 rounds anything past 3.4028235e38 to an infinity.
pub fn check_values_fit(tape: &Tape, plan: &Plan, precision: Precision) -> Result<(), EmitError> {
    if precision != Precision::F32 {
        return Ok(());
    }
    for v in tape.ids().filter(|v| plan.activity.live[v.index()]) {
        if let Node::Const(k) = *tape.node(v) {
            let value = tape.consts[k as usize];
            if !(value as f32).is_finite() {
                return Err(EmitError::ConstOverflow {
                    node: v,
                    value,
                    precision: "f32",
                });
            }
        }
    }
    if let Some(i) = tape.inputs.iter().find(|i| !(i.value as f32).is_finite()) {
        return Err(EmitError::InputOverflow {
            name: i.name.clone(),
            value: i.value,
            precision: "f32",
        });
    }
    Ok(())
}

/// Checks that a checkpointed plan's segments only read what they may (their own nodes,
/// persistent values, constants): `Err` names the first read that breaks it. A plan from
/// `passes::plan` always passes; this keeps a foreign plan from producing source that reads a
/// variable out of scope.
fn check_reads(tape: &Tape, plan: &Plan, checkpointed: bool) -> Result<(), String> {
    if !checkpointed {
        return Ok(());
    }
    let sp = &plan.segments;
    let live = &plan.activity.live;
    let is_persistent = sp.persistent_mask(tape.len());
    for (s, seg) in sp.segments.iter().enumerate() {
        for v in seg.range.clone().map(NodeId).filter(|&v| live[v.index()]) {
            for a in tape.node(v).args() {
                let is_const = matches!(tape.node(a), Node::Const(_));
                if !seg.range.contains(&a.0) && !is_persistent[a.index()] && !is_const {
                    return Err(format!("segment {s}: {v} reads {a}, which is neither in the segment nor persistent"));
                }
                if !live[a.index()] {
                    return Err(format!("segment {s}: live {v} reads dead {a}"));
                }
            }
        }
    }
    Ok(())
}

/// The plan's tables have the tape's sizes and its ids are in range (so rendering cannot index
/// out of bounds); the segments tile the tape.
fn check_plan_shape(tape: &Tape, plan: &Plan) -> Result<(), EmitError> {
    let n = tape.len();
    let bad = |m: String| Err(EmitError::Plan(m));
    if plan.activity.live.len() != n || plan.activity.active.len() != n {
        return bad(format!(
            "activity tables have {} / {} entries for {n} nodes",
            plan.activity.live.len(),
            plan.activity.active.len()
        ));
    }
    for out in &tape.outputs {
        if !plan.activity.live[out.node.index()] {
            return bad(format!("output {} ({}) is not live", out.name, out.node));
        }
    }
    let sp = &plan.segments;
    if sp.segments.is_empty() {
        return bad("no segments".into());
    }
    let mut next = 0u32;
    for (s, seg) in sp.segments.iter().enumerate() {
        if seg.range.start != next || seg.range.end < seg.range.start {
            return bad(format!(
                "segment {s} ({:?}) does not continue at {next}",
                seg.range
            ));
        }
        next = seg.range.end;
    }
    if next as usize != n {
        return bad(format!("segments end at {next}, the tape has {n} nodes"));
    }
    let in_range = |v: &NodeId| v.index() < n;
    if !sp.persistent.iter().all(in_range) || !sp.persistent.windows(2).all(|w| w[0] < w[1]) {
        return bad("persistent values are out of range or not ascending".into());
    }
    if !sp.scratch_slots.iter().all(in_range) {
        return bad("a scratch slot names a node past the tape".into());
    }
    let op = &plan.opacity;
    if op.opaque_reads.len() != sp.segments.len() || op.rekey.len() != sp.segments.len() {
        return bad(format!(
            "{} opaque-read lists and {} re-key flags for {} segments",
            op.opaque_reads.len(),
            op.rekey.len(),
            sp.segments.len()
        ));
    }
    if !op.opaque_reads.iter().flatten().all(in_range) {
        return bad("an opaque read names a node past the tape".into());
    }
    if sp.strategy == Checkpoint::Scratch && sp.is_checkpointed() {
        let mut seen = std::collections::BTreeSet::new();
        for v in &sp.scratch_slots {
            if !seen.insert(*v) || sp.persistent.binary_search(v).is_err() {
                return bad(format!(
                    "scratch slot for {v} is repeated or not a persistent value"
                ));
            }
        }
    }
    Ok(())
}

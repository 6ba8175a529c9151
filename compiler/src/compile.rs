//! The whole pipeline in one call: plan a verified tape, then emit its kernel for any target.
//!
//! `compile(tape, opts)` runs `passes::plan` with `opts.segments` and hands the plan to the CPU
//! lowering (`clif::emit`, target `cpu`) or to the C-like emitter (`emit::emit`, the GPU targets).
//! It is what `nablac TAPE --target T -o FILE` and `nablac run TAPE` do, and what a program that
//! builds kernels from tapes calls. Guarantees: the same tape and options give the same bytes;
//! an option a target cannot honour is an error naming both, never a silent substitute.

use crate::clif::ClifError;
use crate::driver::{Opt, Refusal};
use crate::emit::{EmitError, EmitOptions, Manifest, Mode, Precision, ScratchLayout, Target};
use crate::plan::{Checkpoint, Plan, SegmentOptions};
use crate::verify::Verified;

/// What to compile: the emitter's options and the checkpoint plan's knobs.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct CompileOptions {
    pub target: Target,
    pub mode: Mode,
    pub precision: Precision,
    pub segments: SegmentOptions,
    /// Threads per workgroup (GPU targets): a power of two in 1..=1024.
    pub workgroup_size: u32,
    pub scratch_layout: ScratchLayout,
    /// A comment naming the tape node on every generated line (GPU targets).
    pub annotate: bool,
    /// CUDA: resident workgroups per multiprocessor to ask for (`EmitOptions::min_blocks`).
    /// `None`: [`DEFAULT_MIN_BLOCKS`] where it was measured to pay (f32 reverse kernels with
    /// register recompute), no hint elsewhere; `Some(0)`: no hint.
    pub min_blocks: Option<u32>,
    /// Which back end writes the CPU code (target cpu): Cranelift, the reference, by default.
    pub cpu_backend: CpuBackend,
    /// Sum the Greeks' squares, for their standard errors (on by default on every target; price
    /// kernels have no Greeks and ignore it).
    pub greek_stderr: bool,
    /// Fuse several markets into one kernel (`crate::ladder`); `None`: one market.
    pub ladder: Option<crate::ladder::LadderSpec>,
    /// Print the tape's loop regions (`passes::reroll`) as loops where their iterations repeat
    /// (`schedule::loops`), not unrolled; on by default (the same bits, a fraction of the
    /// source). Reverse kernels loop on the GPU targets under the default checkpoint plan
    /// ([`CompileOptions::reverse_loops`]); on the CPU, and with a checkpoint plan asked for,
    /// they stay unrolled.
    pub loops: bool,
}

/// The CPU code's back end: Cranelift (CLIF text, scalar, one path at a time; the reference) or
/// LLVM (LLVM IR, one path per SIMD lane; feature `llvm`). Both write the same ABI and manifest.
#[derive(Copy, Clone, PartialEq, Eq, Debug, Default)]
pub enum CpuBackend {
    #[default]
    Cranelift,
    Llvm,
}

/// The largest tape (nodes, a ladder's expanded tape included) the LLVM back end takes. LLVM's
/// optimiser takes time quadratic in a dependency chain's length (and recurses once per link,
/// `ReassociatePass::getRank`, which is why the runtime gives it a thread with a deep stack):
/// on this machine a chain of 40,000 nodes ran in 2.0 s, 100,000 in 9.5 s, 200,000 in 37 s
/// (`python3 scripts/chain-tape.py N > c.ntape; nablac run c.ntape --paths 100`, load included,
/// measured before this limit existed; 40,000 again at the review: 2.5 s). Cranelift is linear
/// (400,000 nodes in 2.3 s, 1,000,000 in 7.6 s, 11.7 s at the review on a busier machine), so
/// larger tapes go to it.
pub const LLVM_MAX_NODES: usize = 50_000;

/// The most per-path sums (value, square, non-finite count and each Greek and its square, per
/// output and market) a kernel gets the LLVM back end for by default. The leaves' stores, one
/// per lane each, make LLVM's optimiser superlinear in them: one output over N inputs (N
/// Greeks, `python3 scripts/wide-tape.py N > w.ntape`), load time on this machine (`nablac run
/// w.ntape --target cpu --cpu-backend llvm --paths 1000 --json`, timings.load, 2026-12-04): 250
/// inputs 2.5 s, 500: 5.6 s, 1,000: 19 s, 2,000: 63 s, against 0.2 s with Cranelift at 2,000.
/// Explicit `--cpu-backend llvm` is still honoured.
pub const LLVM_MAX_SUMS: usize = 512;

/// The nodes of the straight-line code a kernel of `tape` prints with `opts`: the tape's, or
/// with loops (`CompileOptions::loops`, price and forward mode) about the tape's less every
/// region's iterations after its first (what LLVM's optimiser and the size limits see; an
/// iteration the schedule keeps straight-line, `schedule::loops`, is not counted).
pub fn printed_nodes(tape: &Verified, opts: &CompileOptions) -> usize {
    if !opts.schedule_options().loops {
        return tape.len();
    }
    let rolled: usize = tape
        .regions()
        .iter()
        .map(|r| (r.period * (r.count - 1)) as usize)
        .sum();
    tape.len() - rolled
}

/// An upper bound on the per-path sums of `tape`'s kernel in `mode` over `markets` fused
/// markets: per output 3 (value, its square, the non-finite count), plus 2 a Greek (each
/// input, and its square) when the mode has Greeks.
pub fn per_path_sums(tape: &Verified, mode: Mode, markets: usize) -> usize {
    let greeks = if mode == Mode::Price {
        0
    } else {
        2 * tape.inputs.len()
    };
    tape.outputs
        .len()
        .saturating_mul(3 + greeks)
        .saturating_mul(markets.max(1))
}

impl CpuBackend {
    /// The fastest back end this build has: LLVM with feature `llvm`, else Cranelift.
    pub fn fastest() -> CpuBackend {
        if cfg!(feature = "llvm") {
            CpuBackend::Llvm
        } else {
            CpuBackend::Cranelift
        }
    }

    /// The fastest back end this build has for a kernel of `nodes` nodes and `sums` per-path
    /// sums ([`per_path_sums`]): LLVM up to [`LLVM_MAX_NODES`] and [`LLVM_MAX_SUMS`], else
    /// Cranelift.
    pub fn fastest_for(nodes: usize, sums: usize) -> CpuBackend {
        if nodes > LLVM_MAX_NODES || sums > LLVM_MAX_SUMS {
            CpuBackend::Cranelift
        } else {
            CpuBackend::fastest()
        }
    }

    /// Every back end, in the order options list them.
    pub const ALL: [CpuBackend; 2] = [CpuBackend::Llvm, CpuBackend::Cranelift];

    pub fn name(self) -> &'static str {
        match self {
            CpuBackend::Cranelift => "cranelift",
            CpuBackend::Llvm => "llvm",
        }
    }
}

/// CUDA launch bounds of f32 register-checkpointed kernels: 4 resident workgroups of 128 per
/// multiprocessor (at most 128 registers). On the H200 (BENCHMARKS.md, 2026-12-03) it made
/// the 252-step Asian 1.33x faster at 16 segments and the 504-step one 1.32x at 32; the
/// 3,051-node barrier 1.06x at 32 (and 0.99x at 16). Plain kernels are left alone: the 64-step
/// Asian lost 15% with it. f64 kernels were not measured with it. Kernels holding more than
/// about 200 values lose with it on the H100 (BENCHMARKS.md, 2026-12-06: basket8 and the
/// 52-bucket Asian, 1.2-2x), but it stays: without it the cost model, which has no occupancy
/// term, would price their reverse kernels under forward and choose the slower kernel.
pub const DEFAULT_MIN_BLOCKS: u32 = 4;

/// CUDA launch bounds of f32 forward kernels whose values just miss four resident workgroups:
/// 3 workgroups of 128 (at most 168 registers) where the schedule holds
/// [`FORWARD_MIN_BLOCKS_LIVE`] values at most. On the H100 (BENCHMARKS.md, 2026-12-05 evening)
/// the 24-bucket Asian's forward kernel (184 values; ptxas gave it 226 registers, two
/// workgroups) went from 60.2 to 40.9 ms with it (168 registers, 20 bytes spilled, the same
/// bits), while the 36-bucket one (268 values) went from 66.8 to 93.3 ms (1.2 KB spilled).
/// Below 129 values ptxas already fits three workgroups or more (the 12-bucket tape: 100
/// values, 130 registers).
pub const FORWARD_MIN_BLOCKS: u32 = 3;
/// The values (`max_live`) of the forward kernels [`FORWARD_MIN_BLOCKS`] is for: measured to
/// pay at 184, to lose at 268; the bound between is not measured.
pub const FORWARD_MIN_BLOCKS_LIVE: std::ops::RangeInclusive<u32> = 129..=200;

/// The launch-bounds hint `opts` asks for on `plan` (see `CompileOptions::min_blocks`).
/// `max_live` gives the kernel's schedule's max_live; it is called only for the forward rule
/// ([`FORWARD_MIN_BLOCKS`]), so a caller that has built the schedule passes its count and one
/// that has not builds it only then ([`max_live`]).
pub(crate) fn min_blocks(
    opts: &CompileOptions,
    plan: &Plan,
    max_live: impl FnOnce() -> u32,
) -> Option<u32> {
    let f32_cuda = opts.target == Target::Cuda && opts.precision == Precision::F32;
    match opts.min_blocks {
        Some(0) => None,
        Some(n) => Some(n),
        None if f32_cuda
            && opts.mode == Mode::Reverse
            && plan.segments.strategy == Checkpoint::Registers
            && plan.segments.is_checkpointed() =>
        {
            Some(DEFAULT_MIN_BLOCKS)
        }
        None if f32_cuda && opts.mode == Mode::Forward && opts.workgroup_size == 128 => {
            FORWARD_MIN_BLOCKS_LIVE
                .contains(&max_live())
                .then_some(FORWARD_MIN_BLOCKS)
        }
        None => None,
    }
}

/// The max_live of the schedule of the kernel `opts` compiles `tape` to under `plan`.
#[cfg(test)]
pub(crate) fn max_live(tape: &Verified, opts: &CompileOptions, plan: &Plan) -> u32 {
    let schedule = crate::schedule::Schedule::build(tape, plan, opts.schedule_options());
    crate::schedule::maxlive::max_live(&schedule, tape.len())
}

impl CompileOptions {
    /// The defaults of `target`: reverse mode; f64 on the CPU and f32 on GPUs; no checkpointing
    /// on the CPU (a path's values stay in cache there) and register recompute on GPUs (switched
    /// on automatically for long tapes); workgroups of 128.
    pub fn new(target: Target) -> CompileOptions {
        let cpu = target == Target::Cpu;
        CompileOptions {
            target,
            mode: Mode::Reverse,
            precision: if cpu { Precision::F64 } else { Precision::F32 },
            segments: SegmentOptions {
                strategy: if cpu {
                    Checkpoint::Off
                } else {
                    Checkpoint::Registers
                },
                ..SegmentOptions::default()
            },
            workgroup_size: crate::emit::DEFAULT_WORKGROUP_SIZE,
            scratch_layout: ScratchLayout::Soa,
            annotate: false,
            min_blocks: None,
            cpu_backend: CpuBackend::Cranelift,
            greek_stderr: true,
            ladder: None,
            loops: true,
        }
    }

    /// The options of the schedule the kernel follows (what every reader of it builds).
    pub(crate) fn schedule_options(&self) -> crate::schedule::ScheduleOptions {
        crate::schedule::ScheduleOptions {
            mode: self.mode,
            opaque_math: crate::passes::opaque_math_arguments(self.target),
            greek_stderr: self.greek_stderr,
            loops: self.loops && (self.mode != Mode::Reverse || self.reverse_loops()),
        }
    }

    /// Does a reverse kernel with these options loop? On a GPU target under the default plan
    /// (register checkpoints, the segments left to the planner): the loops' bookmarks replace
    /// the segments, and their recomputation is the checkpointed kernel's. Not on the CPU,
    /// whose unrolled reverse kernel keeps every value and recomputes nothing (a loop would
    /// recompute every step, its draw included), nor where a plan is asked for
    /// (segments, a segment length, scratch, none).
    pub fn reverse_loops(&self) -> bool {
        self.loops
            && self.target != Target::Cpu
            && self.segments.strategy == Checkpoint::Registers
            && self.segments.segments.is_none()
            && self.segments.seg_len.is_none()
    }
}

/// A compiled kernel: its source, the manifest a host launches it with, and the plan it follows.
#[derive(Clone, PartialEq, Debug)]
pub struct Compiled {
    pub source: String,
    pub manifest: Manifest,
    pub plan: Plan,
}

/// Why a tape could not be compiled. The variants that name an option name it by its field
/// ([`crate::driver::Opt`]); [`CompileError::refusal`] gives their message for a front end to
/// spell (the CLI as flags).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CompileError {
    /// An option the target cannot honour, whatever the tape.
    #[error("{}", self.refusal().unwrap_or_else(|| unreachable!()))]
    NotForTarget {
        option: Opt,
        /// The value refused, where the option is refused for one value only.
        value: Option<&'static str>,
        target: &'static str,
        why: &'static str,
    },
    /// A tape (its ladder's included) over [`LLVM_MAX_NODES`] for the LLVM back end.
    #[error("{}", self.refusal().unwrap_or_else(|| unreachable!()))]
    TooLargeForLlvm { nodes: usize },
    /// A numeric option outside the range it may take.
    #[error("{}", self.refusal().unwrap_or_else(|| unreachable!()))]
    OutOfRange {
        option: Opt,
        value: u64,
        range: &'static str,
    },
    #[error(transparent)]
    Emit(#[from] EmitError),
    #[error(transparent)]
    Ladder(#[from] crate::ladder::LadderError),
    #[error(transparent)]
    OverBudget(#[from] crate::budget::OverBudget),
    #[error(transparent)]
    Clif(#[from] ClifError),
    #[cfg(feature = "llvm")]
    #[error(transparent)]
    Llvm(#[from] crate::llvm::LlvmError),
}

impl CompileError {
    /// The message of an error that names options, for a front end to spell
    /// ([`crate::driver::Refusal::spell`]); `None` for the rest, whose `Display` names none.
    pub fn refusal(&self) -> Option<Refusal> {
        let with = |o: Opt, v: Option<&str>| (o, v.map(str::to_string));
        Some(match self {
            CompileError::NotForTarget {
                option,
                value,
                target,
                why,
            } => Refusal::new(
                &format!("{{}} is not for the {target} target: {why}"),
                &[with(*option, *value)],
            ),
            CompileError::TooLargeForLlvm { nodes } => Refusal::new(
                &format!(
                    "the tape has {nodes} nodes (a ladder's copies included) and the LLVM back \
                     end takes at most {LLVM_MAX_NODES}: its optimiser's time grows with the \
                     square of a dependency chain (100,000 nodes: 10 s, 200,000: 37 s); use {{}}, \
                     the default for larger tapes"
                ),
                &[with(Opt::CpuBackend, Some("cranelift"))],
            ),
            CompileError::OutOfRange {
                option,
                value,
                range,
            } => Refusal::new(
                &format!("{{}} is out of range: {range}"),
                &[with(*option, Some(&value.to_string()))],
            ),
            CompileError::Ladder(crate::ladder::LadderError::Markets(m)) => Refusal::new(
                &format!("{{}} is out of range: 1 ..= {}", crate::ladder::MAX_MARKETS),
                &[with(Opt::Markets, Some(&m.to_string()))],
            ),
            _ => return None,
        })
    }
}

/// The most resident workgroups per multiprocessor a launch-bounds hint may ask for (the
/// hardware limit of every CUDA GPU nablac targets: 32 blocks per SM from sm_50 to sm_90).
pub const MAX_MIN_BLOCKS: u32 = 32;
/// The most segments a plan may be asked for, and the longest segment.
pub const MAX_SEGMENTS: u32 = 1 << 20;

/// Every numeric option in its range (workgroup sizes are the emitter's to check).
pub(crate) fn check_ranges(opts: &CompileOptions) -> Result<(), CompileError> {
    let out = |option, value: u32, range| {
        Err(CompileError::OutOfRange {
            option,
            value: u64::from(value),
            range,
        })
    };
    let s = &opts.segments;
    if let Some(n) = s.segments.filter(|&n| n == 0 || n > MAX_SEGMENTS) {
        return out(Opt::Segments, n, "1 (no checkpointing) ..= 1048576");
    }
    if let Some(n) = s.seg_len.filter(|&n| n == 0 || n > MAX_SEGMENTS) {
        return out(Opt::SegLen, n, "1 ..= 1048576 nodes");
    }
    if s.ckpt_nodes == 0 {
        return out(Opt::CkptNodes, 0, "at least 1 node");
    }
    if let Some(n) = opts.min_blocks.filter(|&n| n > MAX_MIN_BLOCKS) {
        return out(
            Opt::MinBlocks,
            n,
            "0 (no hint) ..= 32 workgroups per multiprocessor",
        );
    }
    Ok(())
}

/// Plans the verified tape `tape` and emits its kernel (see the module doc); with a ladder, the
/// kernel of its laddered tape (`crate::ladder::expand`).
pub fn compile(tape: &Verified, opts: &CompileOptions) -> Result<Compiled, CompileError> {
    compile_scheduled(tape, opts, None)
}

/// [`compile`], from `schedule` where one is given: the schedule of `tape` (no ladder) under
/// `opts` on a GPU target, built already (auto mode's choice, `cost::Choice::schedule`), so the
/// kernel is not scheduled twice. Debug builds check that it is the one `compile` would build.
pub fn compile_scheduled(
    tape: &Verified,
    opts: &CompileOptions,
    schedule: Option<crate::schedule::Schedule>,
) -> Result<Compiled, CompileError> {
    check_ranges(opts)?;
    let fused;
    let tape = match &opts.ladder {
        Some(spec) => {
            fused = crate::ladder::fuse(tape, spec)?;
            &*fused
        }
        None => tape,
    };
    let refuse = |option, value, why| {
        Err(CompileError::NotForTarget {
            option,
            value,
            target: opts.target.name(),
            why,
        })
    };
    if opts.segments.strategy == Checkpoint::Scratch
        && matches!(opts.target, Target::Glsl | Target::Cpu)
    {
        return refuse(
            Opt::Checkpoint,
            Some("scratch"),
            "it keeps values in registers (the scratch buffer is for cuda and opencl)",
        );
    }
    if matches!(opts.min_blocks, Some(n) if n > 0) && opts.target != Target::Cuda {
        return refuse(
            Opt::MinBlocks,
            None,
            "it has no launch bounds (they are CUDA's)",
        );
    }
    if opts.cpu_backend == CpuBackend::Llvm && opts.target != Target::Cpu {
        return refuse(
            Opt::CpuBackend,
            Some("llvm"),
            "it chooses the back end of CPU code (target cpu)",
        );
    }
    let printed = printed_nodes(tape, opts);
    if opts.cpu_backend == CpuBackend::Llvm && printed > LLVM_MAX_NODES {
        return Err(CompileError::TooLargeForLlvm { nodes: printed });
    }
    crate::budget::check(tape, opts.mode)?;
    let plan = crate::passes::plan(tape, &opts.segments);
    // The one schedule every reader of this kernel takes: the printer, max_live.
    let clif_opts = crate::clif::Options {
        mode: opts.mode,
        precision: opts.precision,
        greek_stderr: opts.greek_stderr,
    };
    // (The CPU code ignores the checkpoint plan: Cranelift's and LLVM's allocators spill.)
    let build = || match opts.target {
        Target::Cpu => crate::schedule::Schedule::plain(tape, opts.schedule_options()),
        _ => crate::schedule::Schedule::build(tape, &plan, opts.schedule_options()),
    };
    let schedule = match schedule {
        Some(s) => {
            assert!(
                opts.target != Target::Cpu && opts.ladder.is_none(),
                "a schedule built before compile is a GPU kernel's of the tape itself"
            );
            debug_assert!(s == build(), "the schedule given is the one compile builds");
            s
        }
        None => build(),
    };
    #[cfg(debug_assertions)]
    crate::schedule::verify::verify(&schedule, tape)
        .unwrap_or_else(|e| panic!("the schedule of this kernel is not well formed: {e}"));
    let (source, manifest) = match opts.target {
        Target::Cpu => {
            // `emit` checks this for the C-like targets; the CPU lowerings do not go through it.
            crate::emit::check_values_fit(tape, &plan, opts.precision)?;
            let o = &clif_opts;
            match opts.cpu_backend {
                CpuBackend::Cranelift => {
                    let k = crate::clif::emit_schedule(tape, &schedule, o)?;
                    (k.source, k.manifest)
                }
                #[cfg(feature = "llvm")]
                CpuBackend::Llvm => {
                    let k = crate::llvm::emit_schedule(
                        tape,
                        &schedule,
                        o,
                        crate::llvm::lanes(o.precision),
                    )?;
                    (k.source, k.manifest)
                }
                #[cfg(not(feature = "llvm"))]
                CpuBackend::Llvm => {
                    return refuse(
                        Opt::CpuBackend,
                        Some("llvm"),
                        "this build has no LLVM back end (build nablac with --features llvm)",
                    )
                }
            }
        }
        target => {
            let k = crate::emit::emit_schedule(
                tape,
                &plan,
                &schedule,
                &EmitOptions {
                    target,
                    mode: opts.mode,
                    precision: opts.precision,
                    workgroup_size: opts.workgroup_size,
                    scratch_layout: opts.scratch_layout,
                    annotate: opts.annotate,
                    min_blocks: min_blocks(opts, &plan, || {
                        crate::schedule::maxlive::max_live(&schedule, tape.len())
                    }),
                    greek_stderr: opts.greek_stderr,
                },
            )?;
            (k.source, k.manifest)
        }
    };
    Ok(Compiled {
        source,
        manifest,
        plan,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::products::{record, Market, Options, Product};
    use crate::testing::verified;

    fn european() -> Verified {
        let p = Product::EuropeanCall;
        verified(&record(p, &Options::defaults(p), &Market::default()).unwrap())
    }

    /// A number f32 cannot hold (a constant, an input's recorded value) is refused by every
    /// target's f32 kernel (the CPU's ran and priced NaN), and taken in f64.
    #[test]
    fn values_past_f32_are_refused_on_every_target() {
        let mut big_const = european().into_tape();
        let k = big_const
            .nodes
            .iter()
            .find_map(|n| match *n {
                crate::tape::Node::Const(k) => Some(k as usize),
                _ => None,
            })
            .unwrap();
        big_const.consts[k] = 1e39;
        let mut big_input = european().into_tape();
        big_input.inputs[0].value = -1e39;
        for target in [Target::Cpu, Target::Cuda, Target::Opencl, Target::Glsl] {
            for (tape, want) in [
                (&big_const, "constant 1e39 at"),
                (&big_input, "input spot was recorded at -1e39"),
            ] {
                let v = verified(tape);
                let f32 = CompileOptions {
                    precision: Precision::F32,
                    ..CompileOptions::new(target)
                };
                let e = compile(&v, &f32).unwrap_err().to_string();
                assert!(
                    e.contains(want) && e.contains("overflows f32"),
                    "{target:?}: {e}"
                );
                if target != Target::Glsl {
                    let f64 = CompileOptions {
                        precision: Precision::F64,
                        ..CompileOptions::new(target)
                    };
                    assert!(compile(&v, &f64).is_ok(), "{target:?}");
                }
            }
        }
    }

    /// The default CPU back end: LLVM for the corpus's sizes, Cranelift past either limit.
    #[test]
    fn llvm_is_the_default_only_within_its_limits() {
        let e = european(); // 1 output, 5 inputs
        assert_eq!(per_path_sums(&e, Mode::Reverse, 1), 13);
        assert_eq!(per_path_sums(&e, Mode::Price, 3), 9);
        assert_eq!(CpuBackend::fastest_for(e.len(), 13), CpuBackend::fastest());
        assert_eq!(
            CpuBackend::fastest_for(LLVM_MAX_NODES + 1, 13),
            CpuBackend::Cranelift
        );
        assert_eq!(
            CpuBackend::fastest_for(e.len(), LLVM_MAX_SUMS + 1),
            CpuBackend::Cranelift
        );
    }

    #[test]
    fn targets_get_their_defaults_and_the_same_bytes_twice() {
        let t = european();
        for target in [Target::Cpu, Target::Cuda, Target::Opencl, Target::Glsl] {
            let o = CompileOptions::new(target);
            let a = compile(&verified(&t), &o).unwrap();
            assert_eq!(a.manifest.target, target);
            let want = if target == Target::Cpu {
                Precision::F64
            } else {
                Precision::F32
            };
            assert_eq!(a.manifest.precision, want);
            assert_eq!(a, compile(&verified(&t), &o).unwrap());
        }
    }

    #[test]
    fn options_a_target_cannot_honour_are_refused_whatever_the_tape() {
        let t = european(); // 24 nodes: never checkpointed, yet scratch is still refused
        for target in [Target::Cpu, Target::Glsl] {
            let mut o = CompileOptions::new(target);
            o.segments.strategy = Checkpoint::Scratch;
            let e = compile(&verified(&t), &o).unwrap_err().to_string();
            assert!(e.contains("checkpoint=scratch is not for the"), "{e}");
        }
        let mut o = CompileOptions::new(Target::Cpu);
        o.min_blocks = Some(4);
        assert!(compile(&verified(&t), &o)
            .unwrap_err()
            .to_string()
            .starts_with("min_blocks is not for the cpu target"));
        let mut o = CompileOptions::new(Target::Opencl);
        o.min_blocks = Some(4);
        assert!(matches!(
            compile(&verified(&t), &o),
            Err(CompileError::NotForTarget {
                option: Opt::MinBlocks,
                ..
            })
        ));
        // 0 asks for no hint, which every target honours.
        for target in [Target::Cpu, Target::Cuda, Target::Opencl, Target::Glsl] {
            let mut o = CompileOptions::new(target);
            o.min_blocks = Some(0);
            assert!(compile(&verified(&t), &o).is_ok(), "{target:?}");
        }
    }

    /// The `__launch_bounds__` arguments of `tape`'s CUDA kernel in `mode`, with the options
    /// `f` sets.
    fn launch_bounds(tape: &Verified, mode: Mode, f: &dyn Fn(&mut CompileOptions)) -> String {
        let mut o = CompileOptions::new(Target::Cuda);
        o.mode = mode;
        f(&mut o);
        let src = compile(tape, &o).unwrap().source;
        let (_, rest) = src.split_once("__launch_bounds__(").expect("launch bounds");
        rest.split_once(')').unwrap().0.to_string()
    }

    #[test]
    fn f32_register_checkpointed_cuda_kernels_get_launch_bounds_by_default() {
        let asian = {
            let p = Product::AsianCall;
            verified(&record(p, &Options::defaults(p), &Market::default()).unwrap())
        };
        let bounds = |tape: &Verified, f: &dyn Fn(&mut CompileOptions)| {
            launch_bounds(tape, Mode::Reverse, f)
        };
        assert_eq!(bounds(&asian, &|_| {}), "128, 4");
        assert_eq!(bounds(&asian, &|o| o.min_blocks = Some(6)), "128, 6");
        // No hint: asked for none, plain, f64, scratch, or a short (unsegmented) tape.
        let none: [&dyn Fn(&mut CompileOptions); 4] = [
            &|o| o.min_blocks = Some(0),
            &|o| o.segments.segments = Some(1),
            &|o| o.precision = Precision::F64,
            &|o| o.segments.strategy = Checkpoint::Scratch,
        ];
        for f in none {
            assert_eq!(bounds(&asian, f), "128");
        }
        assert_eq!(bounds(&european(), &|_| {}), "128");
    }

    /// The CPU target's CLIF (what `nablac TAPE --target cpu -o K.clif` writes) under
    /// `snapshots/cpu/`, like the GPU targets' source under `snapshots/<target>/`
    /// (`emit::snapshots`): the European in each mode, f64.
    #[test]
    fn cpu_kernels_match_their_snapshots() {
        let t = european();
        for (mode, name) in [
            (Mode::Price, "european_price_f64"),
            (Mode::Forward, "european_forward_f64"),
            (Mode::Reverse, "european_reverse_f64"),
        ] {
            let mut o = CompileOptions::new(Target::Cpu);
            o.mode = mode;
            let k = compile(&t, &o).unwrap();
            assert_eq!(k.manifest.mode, mode);
            crate::emit::snapshots::snapshot(Target::Cpu, name, &k.source);
        }
    }

    /// Loops' goldens: the 12-step Asian's kernels with their steps as loops (the default),
    /// per dialect (price, forward and reverse) and for the CPU's CLIF (price and forward: its
    /// reverse kernel is unrolled), under `snapshots/<target>/`; the unrolled goldens
    /// (`emit::snapshots`, `--unroll`) stay as they were.
    #[test]
    fn looped_kernels_match_their_snapshots() {
        let t = crate::passes::fixtures::asian(12);
        for target in [Target::Cuda, Target::Opencl, Target::Glsl, Target::Cpu] {
            let modes: &[Mode] = match target {
                Target::Cpu => &[Mode::Price, Mode::Forward],
                _ => &[Mode::Price, Mode::Forward, Mode::Reverse],
            };
            for &mode in modes {
                let o = CompileOptions {
                    mode,
                    ..CompileOptions::new(target)
                };
                let k = compile(&t, &o).unwrap();
                let name = format!(
                    "asian12_{}_loops_{}",
                    mode.name(),
                    k.manifest.precision.name()
                );
                assert!(
                    k.source.contains(" it = ") || target == Target::Cpu,
                    "{name}: a loop"
                );
                crate::emit::snapshots::snapshot(target, &name, &k.source);
            }
        }
    }

    /// The 252-step Asian with its vol in `buckets` buckets (scripts/bucketed-asian.py): every
    /// input reaches the price, so forward mode carries `buckets + 4` tangents.
    fn bucketed_asian(buckets: u32) -> Verified {
        let rec = crate::record::Recorder::new();
        let spot = rec.input("spot", 100.0).unwrap();
        let strike = rec.input("strike", 100.0).unwrap();
        let rate = rec.input("rate", 0.03).unwrap();
        let maturity = rec.input("maturity", 1.0).unwrap();
        let vols: Vec<_> = (0..buckets)
            .map(|j| {
                rec.input(&format!("vol{}", j + 1), 0.2 + 0.005 * f64::from(j))
                    .unwrap()
            })
            .collect();
        let dt = &maturity / 252.0;
        let sqrt_dt = dt.sqrt();
        let (drift, diffusion): (Vec<_>, Vec<_>) = vols
            .iter()
            .map(|v| ((&rate - 0.5 * (v * v)) * &dt, v * &sqrt_dt))
            .unzip();
        let (mut s, mut total) = (spot.clone(), rec.constant(0.0));
        for i in 0..252 {
            let j = (i * buckets / 252) as usize;
            s = &s * (&drift[j] + &diffusion[j] * &rec.normal(i)).exp();
            total = &total + &s;
        }
        let payoff = (total / 252.0 - &strike).max(&rec.constant(0.0));
        let price = (-(&rate * &maturity)).exp() * payoff;
        rec.output("price", &price).unwrap();
        verified(&rec.finish().unwrap())
    }

    #[test]
    fn f32_cuda_forward_kernels_that_just_miss_four_workgroups_are_bounded_to_three() {
        let bounds = |tape: &Verified, f: &dyn Fn(&mut CompileOptions)| {
            launch_bounds(tape, Mode::Forward, f)
        };
        let live = |tape: &Verified| {
            let mut o = CompileOptions::new(Target::Cuda);
            o.mode = Mode::Forward;
            max_live(tape, &o, &compile(tape, &o).unwrap().plan)
        };
        // 12 buckets fit three workgroups without a hint, 24 need it, 36 spill with it.
        let (b12, b24, b36) = (bucketed_asian(12), bucketed_asian(24), bucketed_asian(36));
        assert!(
            live(&b12) < *FORWARD_MIN_BLOCKS_LIVE.start(),
            "{}",
            live(&b12)
        );
        assert!(
            FORWARD_MIN_BLOCKS_LIVE.contains(&live(&b24)),
            "{}",
            live(&b24)
        );
        assert!(
            live(&b36) > *FORWARD_MIN_BLOCKS_LIVE.end(),
            "{}",
            live(&b36)
        );
        assert_eq!(bounds(&b12, &|_| {}), "128");
        assert_eq!(bounds(&b24, &|_| {}), "128, 3");
        assert_eq!(bounds(&b36, &|_| {}), "128");
        // Only f32, only workgroups of 128, and an explicit --min-blocks wins.
        assert_eq!(bounds(&b24, &|o| o.precision = Precision::F64), "128");
        assert_eq!(bounds(&b24, &|o| o.workgroup_size = 256), "256");
        assert_eq!(bounds(&b24, &|o| o.min_blocks = Some(0)), "128");
        assert_eq!(bounds(&b24, &|o| o.min_blocks = Some(2)), "128, 2");
    }
}

//! The whole pipeline in one call: plan a verified tape, then emit its kernel for any target.
//!
//! `compile(tape, opts)` runs `passes::plan` with `opts.segments` and hands the plan to the CPU
//! lowering (`jit::emit`, target `cpu`) or to the C-like emitter (`emit::emit`, the GPU targets).
//! It is what `nablac TAPE --target T -o FILE` and `nablac run TAPE` do, and what a program that
//! builds kernels from tapes calls. Guarantees: the same tape and options give the same bytes;
//! an option a target cannot honour is an error naming both, never a silent substitute.

use crate::emit::{EmitError, EmitOptions, Manifest, Mode, Precision, ScratchLayout, Target};
use crate::jit::JitError;
use crate::plan::{Checkpoint, Plan, SegmentOptions};
use crate::tape::Tape;

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
    pub min_blocks: Option<u32>,
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
        }
    }
}

/// A compiled kernel: its source, the manifest a host launches it with, and the plan it follows.
#[derive(Clone, PartialEq, Debug)]
pub struct Compiled {
    pub source: String,
    pub manifest: Manifest,
    pub plan: Plan,
}

/// Why a tape could not be compiled.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CompileError {
    #[error("--checkpoint scratch is for cuda and opencl; {0} keeps values in registers")]
    ScratchUnsupported(&'static str),
    #[error("--min-blocks is CUDA's launch bounds; the {0} target has none")]
    MinBlocksUnsupported(&'static str),
    #[error(transparent)]
    Emit(#[from] EmitError),
    #[error(transparent)]
    Jit(#[from] JitError),
}

/// Plans `tape` (verified: `verify::verify` accepted it) and emits its kernel (see the module doc).
pub fn compile(tape: &Tape, opts: &CompileOptions) -> Result<Compiled, CompileError> {
    let scratch = opts.segments.strategy == Checkpoint::Scratch;
    if scratch && matches!(opts.target, Target::Glsl | Target::Cpu) {
        return Err(CompileError::ScratchUnsupported(opts.target.name()));
    }
    if opts.min_blocks.is_some() && opts.target == Target::Cpu {
        return Err(CompileError::MinBlocksUnsupported(opts.target.name()));
    }
    let plan = crate::passes::plan(tape, &opts.segments);
    let (source, manifest) = match opts.target {
        Target::Cpu => {
            let k = crate::jit::emit(
                tape,
                &plan,
                &crate::jit::Options {
                    mode: opts.mode,
                    precision: opts.precision,
                },
            )?;
            (k.source, k.manifest)
        }
        target => {
            let k = crate::emit::emit(
                tape,
                &plan,
                &EmitOptions {
                    target,
                    mode: opts.mode,
                    precision: opts.precision,
                    workgroup_size: opts.workgroup_size,
                    scratch_layout: opts.scratch_layout,
                    annotate: opts.annotate,
                    min_blocks: opts.min_blocks,
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

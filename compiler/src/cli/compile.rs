//! `nablac TAPE --target cuda|opencl|glsl|cpu -o FILE`: the main job.

use super::output::Staged;
use super::{CheckpointArg, CompileOpts, LayoutArg, ModeArg, PrecisionArg, TargetArg};
use anyhow::{bail, Context, Result};
use clap::Args;
use nablac::emit::{Mode, Precision, Target};
use nablac::plan::{Checkpoint, SegmentOptions};
use std::path::{Path, PathBuf};

#[derive(Args, Debug, Clone)]
pub struct CompileArgs {
    /// A tape: binary (`NTAP` magic) or text (`nablatape 1`).
    #[arg(value_name = "TAPE", required = true)]
    pub tape: Option<PathBuf>,
    /// Where the kernel runs.
    #[arg(long, value_enum, default_value = "cpu")]
    pub target: TargetArg,
    /// Kernel source to write; the manifest goes to FILE.json.
    #[arg(short, long, value_name = "FILE", required = true)]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub opts: CompileOpts,
}

/// A compiled kernel: its source text and manifest.
pub struct Compiled {
    pub source: String,
    pub manifest: nablac::emit::Manifest,
}

pub fn target(t: TargetArg) -> Target {
    match t {
        TargetArg::Cpu => Target::Cpu,
        TargetArg::Cuda => Target::Cuda,
        TargetArg::Opencl => Target::Opencl,
        TargetArg::Glsl => Target::Glsl,
    }
}

pub fn segment_options(
    checkpoint: CheckpointArg,
    segments: Option<u32>,
    ckpt_nodes: u32,
    seg_len: Option<u32>,
) -> SegmentOptions {
    SegmentOptions {
        strategy: match checkpoint {
            CheckpointArg::Registers => Checkpoint::Registers,
            CheckpointArg::Scratch => Checkpoint::Scratch,
            CheckpointArg::Off => Checkpoint::Off,
        },
        segments,
        ckpt_nodes,
        seg_len,
    }
}

/// Compiles a verified tape for `target` with the command line's options.
pub fn compile(tape: &nablac::tape::Tape, target: Target, o: &CompileOpts) -> Result<Compiled> {
    let precision = match o.precision {
        Some(PrecisionArg::F32) => Precision::F32,
        Some(PrecisionArg::F64) => Precision::F64,
        None if target == Target::Cpu => Precision::F64,
        None => Precision::F32,
    };
    let mode = match o.mode {
        ModeArg::Price => Mode::Price,
        ModeArg::Reverse | ModeArg::Auto => Mode::Reverse,
    };
    let checkpoint = match (o.checkpoint, target) {
        (Some(CheckpointArg::Scratch), Target::Glsl | Target::Cpu) => bail!(
            "--checkpoint scratch is for cuda and opencl; {} keeps values in registers",
            target.name()
        ),
        (Some(c), _) => c,
        // The CPU keeps a path's values in cache: checkpointing buys nothing there.
        (None, Target::Cpu) => CheckpointArg::Off,
        (None, _) => CheckpointArg::Registers,
    };
    let seg = segment_options(checkpoint, o.segments, o.ckpt_nodes, o.seg_len);
    let plan = nablac::passes::plan(tape, &seg);
    let layout = match o.scratch_layout {
        LayoutArg::Soa => nablac::emit::ScratchLayout::Soa,
        LayoutArg::Aos => nablac::emit::ScratchLayout::Aos,
    };
    let kernel = match target {
        Target::Cpu => {
            let k = nablac::jit::emit(tape, &plan, &nablac::jit::Options { mode, precision })?;
            Compiled {
                source: k.source,
                manifest: k.manifest,
            }
        }
        _ => {
            let opts = nablac::emit::EmitOptions {
                target,
                mode,
                precision,
                workgroup_size: o.workgroup,
                scratch_layout: layout,
                annotate: o.annotate,
            };
            let k = nablac::emit::emit(tape, &plan, &opts)?;
            Compiled {
                source: k.source,
                manifest: k.manifest,
            }
        }
    };
    Ok(kernel)
}

/// The manifest's path for a kernel written to `out`: `out` with `.json` appended.
pub fn manifest_path(out: &Path) -> PathBuf {
    let mut s = out.as_os_str().to_owned();
    s.push(".json");
    PathBuf::from(s)
}

pub fn run(args: &CompileArgs) -> Result<()> {
    let (Some(tape_path), Some(out)) = (&args.tape, &args.output) else {
        bail!("usage: nablac TAPE --target cuda|opencl|glsl|cpu -o FILE (see nablac --help)");
    };
    let (tape, _info) = super::load_tape(tape_path)?;
    let k = compile(&tape, target(args.target), &args.opts)
        .with_context(|| format!("cannot compile {}", tape_path.display()))?;
    let manifest = serde_json::to_string_pretty(&k.manifest)? + "\n";
    let mut staged = Staged::new();
    staged.write(out, k.source.as_bytes())?;
    staged.write(&manifest_path(out), manifest.as_bytes())?;
    staged.commit()?;
    eprintln!(
        "wrote {} ({} kernel, {} segments, {} persistent values) and {}",
        out.display(),
        k.manifest.target.name(),
        k.manifest.segments,
        k.manifest.persistent,
        manifest_path(out).display()
    );
    Ok(())
}

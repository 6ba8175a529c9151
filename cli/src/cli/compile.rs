//! `nablac TAPE --target cuda|opencl|glsl|cpu -o FILE`: the main job.

use super::output::Staged;
use super::{CompileOpts, LayoutArg, ModeArg, PrecisionArg, TargetArg};
use anyhow::{bail, Context, Result};
use clap::Args;
use nablac::compile::{CompileOptions, Compiled};
use nablac::emit::{Mode, Precision, Target};
use nablac::plan::SegmentOptions;
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

pub fn target(t: TargetArg) -> Target {
    match t {
        TargetArg::Cpu => Target::Cpu,
        TargetArg::Cuda => Target::Cuda,
        TargetArg::Opencl => Target::Opencl,
        TargetArg::Glsl => Target::Glsl,
    }
}

/// The library's compile options for `target` from the command line's.
pub fn compile_options(target: Target, o: &CompileOpts) -> CompileOptions {
    let mut c = CompileOptions::new(target);
    match o.precision {
        Some(PrecisionArg::F32) => c.precision = Precision::F32,
        Some(PrecisionArg::F64) => c.precision = Precision::F64,
        None => {}
    }
    c.mode = match o.mode {
        ModeArg::Price => Mode::Price,
        // Forward (tangent) mode and the automatic choice between the two come later.
        ModeArg::Reverse | ModeArg::Auto => Mode::Reverse,
    };
    c.segments = SegmentOptions {
        strategy: o.checkpoint.map_or(c.segments.strategy, Into::into),
        segments: o.segments,
        ckpt_nodes: o.ckpt_nodes,
        seg_len: o.seg_len,
    };
    c.scratch_layout = match o.scratch_layout {
        LayoutArg::Soa => nablac::emit::ScratchLayout::Soa,
        LayoutArg::Aos => nablac::emit::ScratchLayout::Aos,
    };
    c.workgroup_size = o.workgroup;
    c.annotate = o.annotate;
    c.min_blocks = o.min_blocks;
    c
}

/// Compiles a verified tape for `target` with the command line's options.
pub fn compile(
    tape: &nablac::verify::Verified,
    target: Target,
    o: &CompileOpts,
) -> Result<Compiled> {
    Ok(nablac::compile::compile(tape, &compile_options(target, o))?)
}

/// Do `a` and `b` name one existing file (through links and `..` alike)?
fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
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
    for dest in [out.clone(), manifest_path(out)] {
        if same_file(tape_path, &dest) {
            bail!(
                "refusing to write {}: it is the input tape {}",
                dest.display(),
                tape_path.display()
            );
        }
    }
    let tape = super::load_tape(tape_path)?;
    let k = compile(&tape, target(args.target), &args.opts)
        .with_context(|| format!("cannot compile {}", tape_path.display()))?;
    let manifest = serde_json::to_string_pretty(&k.manifest)? + "\n";
    let mut staged = Staged::new();
    staged.write(out, k.source.as_bytes())?;
    staged.write(&manifest_path(out), manifest.as_bytes())?;
    staged.commit()?;
    let shape = if k.manifest.segments > 1 {
        format!(
            "checkpointed: {} segments, {} persistent values",
            k.manifest.segments, k.manifest.persistent
        )
    } else {
        "not checkpointed".to_string()
    };
    eprintln!(
        "wrote {} ({} {} kernel, {shape}) and {}",
        out.display(),
        k.manifest.target.name(),
        k.manifest.mode.name(),
        manifest_path(out).display()
    );
    Ok(())
}

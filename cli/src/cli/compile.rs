//! `nablac compile TAPE -o FILE [--target T]` (or `nablac TAPE ...`): the main job.

use super::output::Staged;
use super::{is_stdio, shown, CompileOpts, Given, LayoutArg, ModeArg, PrecisionArg, TargetArg};
use anyhow::{bail, Context, Result};
use clap::Args;
use nablac::compile::CompileOptions;
use nablac::emit::{Precision, Target};
use nablac::plan::SegmentOptions;
use serde::Serialize;
use std::path::{Path, PathBuf};

#[derive(Args, Debug, Clone)]
pub struct CompileArgs {
    /// A tape: binary (`NTAP` magic) or text (`nablatape 1`); `-` reads standard input.
    #[arg(value_name = "TAPE")]
    pub tape: PathBuf,
    /// Where the kernel runs. Default: the output's extension says (.cu cuda, .cl opencl,
    /// .comp glsl, .clif or .ll cpu); one that contradicts --target is an error.
    #[arg(long, value_enum)]
    pub target: Option<TargetArg>,
    /// Kernel source to write (`-`: standard output); the manifest goes to FILE.json.
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    /// Where the manifest goes (`-`: standard output). Default: FILE.json, or nowhere when the
    /// kernel goes to standard output.
    #[arg(long, value_name = "PATH")]
    pub manifest: Option<PathBuf>,
    /// The cpu kernel's back end: llvm writes LLVM IR (vectorised, one path per SIMD lane; what
    /// `nablac run` uses for a tape), cranelift writes CLIF (scalar, the reference). Default:
    /// the output's extension (.ll llvm, .clif cranelift), else cranelift. A kernel file runs on
    /// the back end it was written for.
    #[arg(long, value_enum, value_name = "BACKEND")]
    pub cpu_backend: Option<super::run::CpuBackendArg>,
    /// Print JSON: kernel, manifest_file, checkpointed, manifest (the manifest's contents).
    #[arg(long)]
    pub json: bool,
    #[command(flatten, next_help_heading = "Compile options")]
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
    c.mode = o.mode.into();
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
    c.greek_stderr = o.greek_stderr;
    c
}

/// The ladder `--markets` and `--ladder-inputs` ask for on `tape`, with `laddered` the inputs
/// `run --ladder` varies (`None`: one market). `run --ladder` without `--markets` gets one
/// market here; `run` then fuses by the measured rule (`nablac::cost::fused_markets`).
pub fn ladder_spec(
    tape: &nablac::tape::Tape,
    markets: Option<u32>,
    varying: &[String],
    laddered: &[&str],
) -> Result<Option<nablac::ladder::LadderSpec>> {
    if markets.is_none() && laddered.is_empty() {
        if !varying.is_empty() {
            bail!("--ladder-inputs names what varies across fused markets: give --markets M too");
        }
        return Ok(None);
    }
    let markets = markets.unwrap_or(1);
    let max = nablac::ladder::MAX_MARKETS;
    if markets == 0 || markets > max {
        bail!("--markets {markets} is out of range: 1 ..= {max}");
    }
    let names: Vec<&str> = tape.inputs.iter().map(|i| i.name.as_str()).collect();
    for v in varying {
        if !names.contains(&v.as_str()) {
            bail!(
                "--ladder-inputs {v}: the tape has no input {v} (inputs: {})",
                names.join(", ")
            );
        }
    }
    let all = varying.is_empty() && laddered.is_empty();
    Ok(Some(nablac::ladder::LadderSpec {
        markets,
        varying: names
            .iter()
            .map(|n| all || varying.iter().any(|v| v == n) || laddered.contains(n))
            .collect(),
    }))
}

/// The library's compile options with `--mode auto` resolved for `tape`, and the ladder of
/// `--markets` / `--ladder-inputs` (and `laddered`, the inputs `run --ladder` varies).
pub fn resolved_options(
    tape: &nablac::verify::Verified,
    target: Target,
    o: &CompileOpts,
    given: &Given,
    laddered: &[&str],
) -> Result<CompileOptions> {
    let mut c = compile_options(target, o);
    c.ladder = ladder_spec(tape, o.markets, &o.ladder_inputs, laddered)?;
    if o.mode != ModeArg::Auto || super::honour::checkpointing_asked(o, given) {
        return Ok(c);
    }
    Ok(nablac::cost::choose(tape, &c)?.options)
}

/// The CPU back end a kernel written to `out` is compiled with: `--cpu-backend`, else the
/// extension (`.ll` LLVM IR, `.clif` CLIF), else Cranelift. Refused for another target and
/// where the option contradicts the extension.
fn cpu_backend(
    target: Target,
    asked: Option<super::run::CpuBackendArg>,
    out: &Path,
) -> Result<nablac::compile::CpuBackend> {
    use nablac::compile::CpuBackend;
    let asked: Option<CpuBackend> = asked.map(Into::into);
    if target != Target::Cpu {
        if let Some(b) = asked {
            bail!(
                "--cpu-backend {} is for the cpu target, not {}",
                b.name(),
                target.name()
            );
        }
        return Ok(CpuBackend::Cranelift);
    }
    let by_name = match out.extension().and_then(|e| e.to_str()) {
        Some("ll") => Some(CpuBackend::Llvm),
        Some("clif") => Some(CpuBackend::Cranelift),
        _ => None,
    };
    match (asked, by_name) {
        (Some(a), Some(e)) if a != e => bail!(
            "--cpu-backend {} contradicts the output's name {}: .ll is LLVM IR (llvm), .clif is \
             CLIF (cranelift)",
            a.name(),
            out.display()
        ),
        (a, e) => Ok(a.or(e).unwrap_or(CpuBackend::Cranelift)),
    }
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

#[derive(Serialize)]
struct JsonCompile<'a> {
    /// The kernel's path, `-` for standard output.
    kernel: String,
    /// The manifest's path, `-` for standard output, null when it was not written.
    manifest_file: Option<String>,
    checkpointed: bool,
    manifest: &'a nablac::emit::Manifest,
}

pub fn run(args: &CompileArgs, given: &Given) -> Result<()> {
    let tape_path = &args.tape;
    let out = &args.output;
    let target = super::honour::compile_target(args.target.map(target), out)?;
    let cpu_backend = cpu_backend(target, args.cpu_backend, out)?;
    let mpath = match &args.manifest {
        Some(m) => Some(m.clone()),
        None if is_stdio(out) => None,
        None => Some(manifest_path(out)),
    };
    if let Some(m) = &mpath {
        if is_stdio(m) && is_stdio(out) {
            bail!("-o - and --manifest - both ask for standard output: give the manifest a file");
        }
        if !is_stdio(m) && !is_stdio(out) && (m == out || same_file(m, out)) {
            bail!("--manifest {} is the kernel's own file", m.display());
        }
    }
    for dest in [Some(out), mpath.as_ref()].into_iter().flatten() {
        if !is_stdio(tape_path) && !is_stdio(dest) && same_file(tape_path, dest) {
            bail!(
                "refusing to write {}: it is the input tape {}",
                dest.display(),
                tape_path.display()
            );
        }
    }
    super::honour::check_compile(target, &args.opts, given)?;
    let tape = super::load_tape(tape_path)?;
    let k = resolved_options(&tape, target, &args.opts, given, &[])
        .and_then(|mut o| {
            o.cpu_backend = cpu_backend;
            Ok(nablac::compile::compile(&tape, &o)?)
        })
        .with_context(|| format!("cannot compile {}", shown(tape_path, "<stdin>")))?;
    let manifest = serde_json::to_string_pretty(&k.manifest)? + "\n";
    // Files are staged and renamed into place together; standard output is written only once
    // every file is in place, so an error leaves nothing half-written.
    let mut staged = Staged::new();
    let mut to_stdout: Option<&[u8]> = None;
    for (dest, bytes) in [
        (Some(out), k.source.as_bytes()),
        (mpath.as_ref(), manifest.as_bytes()),
    ] {
        match dest {
            Some(d) if is_stdio(d) => to_stdout = Some(bytes),
            Some(d) => staged.write(d, bytes)?,
            None => {}
        }
    }
    staged.commit()?;
    if let Some(bytes) = to_stdout {
        super::output::write_stdout(bytes)?;
    }
    let stdout_taken = to_stdout.is_some();
    let checkpointed = k.manifest.segments > 1;
    if args.json {
        let j = JsonCompile {
            kernel: out.display().to_string(),
            manifest_file: mpath.as_ref().map(|m| m.display().to_string()),
            checkpointed,
            manifest: &k.manifest,
        };
        super::print_report(&super::json_text(&j, stdout_taken)?, stdout_taken)?;
        return Ok(());
    }
    let shape = if checkpointed {
        format!(
            "checkpointed: {} segments, {} persistent values",
            k.manifest.segments, k.manifest.persistent
        )
    } else {
        "not checkpointed".to_string()
    };
    let manifest_said = match &mpath {
        Some(m) => format!(" and {}", shown(m, "<stdout>")),
        None => " (no manifest: --manifest PATH writes one)".to_string(),
    };
    note!(
        "wrote {} ({} {} kernel, {shape}){manifest_said}",
        shown(out, "<stdout>"),
        k.manifest.target.name(),
        k.manifest.mode.name(),
    );
    Ok(())
}

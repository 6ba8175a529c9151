//! `nablac compile TAPE -o FILE [--target T]` (or `nablac TAPE ...`): the main job.

use super::output::Staged;
use super::{is_stdio, shown, CompileOpts, Given, TargetArg};
use anyhow::{bail, Context, Result};
use clap::Args;
use nablac::emit::Target;
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

/// The CPU back end a kernel written to `out` is compiled with: `--cpu-backend`, else the
/// extension (`.ll` LLVM IR, `.clif` CLIF), else Cranelift. Refused for another target and
/// where the option contradicts the extension.
fn cpu_backend(
    target: Target,
    asked: Option<super::run::CpuBackendArg>,
    out: &Path,
) -> Result<Option<nablac::compile::CpuBackend>> {
    use nablac::compile::CpuBackend;
    let asked: Option<CpuBackend> = asked.map(Into::into);
    if target != Target::Cpu {
        // The driver refuses it, for any other target.
        return Ok(asked);
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
        (a, e) => Ok(Some(a.or(e).unwrap_or(CpuBackend::Cranelift))),
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
    let mut req = super::honour::request(target, &args.opts, given);
    req.cpu_backend = cpu_backend;
    super::honour::check(&req)?;
    let tape = super::load_tape(tape_path)?;
    let (_, k) = nablac::driver::compile(&tape, &req, None)
        .map_err(super::honour::spelled)
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

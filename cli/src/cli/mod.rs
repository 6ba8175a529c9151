//! Argument parsing and dispatch. Each subcommand has one options struct and one `run()`.

mod compile;
mod explain;
mod inspect;
mod output;
mod record;
mod run;

use anyhow::Result;
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;

/// Compiles Monte Carlo tapes into kernels that compute the price and every Greek in one pass.
///
/// `nablac TAPE --target cuda -o kernel.cu` compiles a tape (binary `.bin` or text `.ntape`,
/// told apart by content) and writes the kernel with its manifest beside it (`kernel.cu.json`).
#[derive(Parser, Debug)]
#[command(name = "nablac", version, about, long_about = None)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct Cli {
    #[command(subcommand)]
    command: Option<Command>,

    #[command(flatten)]
    compile: compile::CompileArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Compile a tape into kernel source and a manifest (the same as the bare form).
    Compile(compile::CompileArgs),
    /// Record a product's Monte Carlo path as a tape.
    Record(record::RecordArgs),
    /// Summarize a tape: nodes by op, inputs, outputs, draws, liveness, content hash.
    Inspect(inspect::InspectArgs),
    /// Show the checkpoint plan: cuts, crossing values, persistent values, liveness.
    Explain(explain::ExplainArgs),
    /// Compile (if given a tape) and run a kernel; print value, standard error and Greeks.
    Run(run::RunArgs),
}

pub fn main() -> ExitCode {
    // `nablac inspect a.bin | head` must end quietly like any Unix filter, not panic on EPIPE.
    #[cfg(unix)]
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Compile(a)) => compile::run(&a),
        Some(Command::Record(a)) => record::run(&a),
        Some(Command::Inspect(a)) => inspect::run(&a),
        Some(Command::Explain(a)) => explain::run(&a),
        Some(Command::Run(a)) => run::run(&a),
        None => compile::run(&cli.compile),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            for cause in e.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            ExitCode::FAILURE
        }
    }
}

/// Where kernels are compiled for.
#[derive(Copy, Clone, PartialEq, Eq, Debug, ValueEnum)]
pub enum TargetArg {
    Cpu,
    Cuda,
    Opencl,
    /// Vulkan GLSL 450 (`vulkan` is accepted too).
    #[value(alias = "vulkan")]
    Glsl,
}

#[derive(Copy, Clone, PartialEq, Eq, Debug, ValueEnum)]
pub enum ModeArg {
    /// Value only.
    Price,
    /// Value and every Greek, by the adjoint sweep.
    Reverse,
    /// The mode that fits the tape (today: reverse).
    Auto,
}

#[derive(Copy, Clone, PartialEq, Eq, Debug, ValueEnum)]
pub enum PrecisionArg {
    F32,
    F64,
}

#[derive(Copy, Clone, PartialEq, Eq, Debug, ValueEnum)]
pub enum CheckpointArg {
    /// Persistent values stay in registers; segments are recomputed (GLSL default).
    Registers,
    /// Values crossing a cut go to a per-path global buffer (CUDA and OpenCL).
    Scratch,
    /// The plain kernel.
    Off,
}

impl From<CheckpointArg> for nablac::plan::Checkpoint {
    fn from(c: CheckpointArg) -> Self {
        match c {
            CheckpointArg::Registers => nablac::plan::Checkpoint::Registers,
            CheckpointArg::Scratch => nablac::plan::Checkpoint::Scratch,
            CheckpointArg::Off => nablac::plan::Checkpoint::Off,
        }
    }
}

#[derive(Copy, Clone, PartialEq, Eq, Debug, ValueEnum)]
pub enum LayoutArg {
    /// Structure of arrays: `scratch[slot * invocations + tid]` (coalesced).
    Soa,
    /// Array of structures, kept to measure the difference.
    Aos,
}

/// The compiler's options, shared by the compile and run subcommands.
#[derive(Args, Debug, Clone)]
pub struct CompileOpts {
    /// Value only, or value and every Greek.
    #[arg(long, value_enum, default_value = "auto")]
    pub mode: ModeArg,
    /// Kernel arithmetic (sums over paths are always f64). Default: f64 on cpu, f32 on GPUs.
    #[arg(long, value_enum)]
    pub precision: Option<PrecisionArg>,
    /// Checkpoint strategy for the reverse sweep.
    #[arg(long, value_enum)]
    pub checkpoint: Option<CheckpointArg>,
    /// Segments: 1 switches checkpointing off; N > 1 forces it on with N segments.
    #[arg(long, value_name = "N")]
    pub segments: Option<u32>,
    /// Register recompute switches itself on for tapes of at least N nodes.
    #[arg(long, value_name = "N", default_value_t = nablac::plan::DEFAULT_CKPT_NODES)]
    pub ckpt_nodes: u32,
    /// Nodes per segment when --segments does not say (both strategies) [default: 100].
    #[arg(long, value_name = "N")]
    pub seg_len: Option<u32>,
    /// Scratch buffer layout.
    #[arg(long, value_enum, default_value = "soa")]
    pub scratch_layout: LayoutArg,
    /// Threads per workgroup (a power of two).
    #[arg(long, value_name = "N", default_value_t = 128)]
    pub workgroup: u32,
    /// Comment every generated line with the tape node it computes.
    #[arg(long)]
    pub annotate: bool,
    /// CUDA: ask for N resident workgroups per multiprocessor (`__launch_bounds__(WG, N)`),
    /// capping registers at 65536 / (WG * N); 0: no hint. Default: 4 for f32 kernels with
    /// register recompute (measured faster on the H200), no hint otherwise.
    #[arg(long, value_name = "N")]
    pub min_blocks: Option<u32>,
}

/// `name=value` pairs overriding input values.
pub fn parse_market(s: &str) -> Result<(String, f64), String> {
    let (name, value) = s
        .split_once('=')
        .ok_or_else(|| format!("expected name=value, got '{s}'"))?;
    let v: f64 = value
        .trim()
        .parse()
        .map_err(|_| format!("'{value}' is not a number (in '{s}')"))?;
    if !v.is_finite() {
        return Err(format!("'{value}' is not finite (in '{s}')"));
    }
    Ok((name.trim().to_string(), v))
}

/// Reads and verifies a tape file, with the file name in every error.
pub fn load_tape(path: &std::path::Path) -> Result<nablac::verify::Verified> {
    use anyhow::Context;
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let tape =
        nablac::format::read(&bytes).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    nablac::verify::verify(tape).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// The input file, shared by the subcommands that read a tape.
#[derive(Args, Debug, Clone)]
pub struct TapeArg {
    /// A tape: binary (`NTAP` magic) or text (`nablatape 1`).
    #[arg(value_name = "TAPE")]
    pub tape: PathBuf,
}

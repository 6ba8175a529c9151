//! Argument parsing and dispatch. Each subcommand has one options struct and one `run()`.
//!
//! Conventions every subcommand follows (README.md, "The command line", says the same):
//! - exit status 0 on success (and for `--help`, `--version` and a bare `nablac`, which prints
//!   help), 1 for every error, usage errors included;
//! - `-` names standard input for a tape or kernel read, standard output for one written;
//! - `--json` prints a JSON report on standard output, or on standard error when standard output
//!   carries the data (`-o -`, `--manifest -`, `--plot -`); messages always go to standard error;
//! - an option that the target, the kernel or the product cannot honour is an error
//!   (`honour.rs`), never silently ignored.

/// `eprintln!` that never panics: a message to standard error, dropped if it cannot be written
/// (a full or closed standard error must not turn an error into a panic; the exit status still
/// says how the command went).
macro_rules! note {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}

mod compile;
mod explain;
mod honour;
mod inspect;
mod ladder;
mod manual;
mod number;
mod output;
mod record;
mod run;
mod spinner;

use anyhow::{Context, Result};
use clap::parser::ValueSource;
use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use std::collections::BTreeSet;
use std::ffi::OsString;
use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Every environment variable the binary reads, for `--help`, the man page and README.md.
pub const ENVIRONMENT: &str = "\
Environment:
  NABLAC_CACHE_DIR       where compiled GPU kernels are cached (`off`: no disk cache)
                         [default: $XDG_CACHE_HOME/nablac, else $HOME/.cache/nablac]
  XDG_CACHE_HOME, HOME   the default cache directory (above)
  NABLAC_OPENCL_DEVICE   a substring of the OpenCL device to use [default: a GPU first]
  NABLAC_GLSLANG         the glslangValidator to compile Vulkan kernels with
                         [default: glslangValidator, looked up in PATH]
  PATH                   where glslangValidator is looked up
  COLUMNS                how wide `run --ladder`'s table may be before its columns wrap
                         [default: the terminal's width, else 100]
  NO_COLOR, CLICOLOR, CLICOLOR_FORCE, TERM, COLORTERM, LANG
                         colours and characters of help, errors and the progress bar
The drivers nablac loads read their own (LD_LIBRARY_PATH, OCL_ICD_VENDORS, VK_ICD_FILENAMES...).";

/// The subcommands, in the order help lists them (for messages; `help` is clap's).
pub const SUBCOMMANDS: [&str; 7] = [
    "compile",
    "record",
    "inspect",
    "explain",
    "run",
    "completions",
    "man",
];

/// Exit statuses, for `--help`, the man page and README.md.
pub const EXIT_STATUS: &str = "\
Exit status:
  0  success, and --help, --version and a bare `nablac` (which prints this help)
  1  any error, usage errors included; nothing is written";

/// Compiles Monte Carlo tapes into kernels that compute the price and every Greek in one pass.
///
/// `nablac compile TAPE -o kernel.cu` compiles a tape (binary `.bin` or text `.ntape`, told apart
/// by content) and writes the kernel with its manifest beside it (`kernel.cu.json`);
/// `nablac TAPE ...` is the same when TAPE names a file (or is `-`).
#[derive(Parser, Debug)]
#[command(name = "nablac", version)]
#[command(override_usage = "nablac <COMMAND> [ARGS]\n       \
    nablac TAPE [COMPILE OPTIONS]   (the same as nablac compile TAPE ...)")]
pub struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Compile a tape into kernel source and a manifest (`nablac TAPE ...` is the same).
    Compile(compile::CompileArgs),
    /// Record a product's Monte Carlo path as a tape.
    Record(record::RecordArgs),
    /// Summarize a tape: nodes by op, inputs, outputs, draws, liveness, content hash.
    Inspect(inspect::InspectArgs),
    /// Show the checkpoint plan: cuts, crossing values, persistent values, liveness.
    Explain(explain::ExplainArgs),
    /// Compile (if given a tape) and run a kernel; print value, standard error and Greeks.
    Run(run::RunArgs),
    /// Print a shell completion script on standard output.
    Completions(manual::CompletionsArgs),
    /// Print the manual page (roff) on standard output: `nablac man | man -l -`.
    Man(manual::ManArgs),
}

/// The command line parser: the derive's, with the help text that is computed (products and
/// their defaults, environment, exit status). `completions` and `man` render this one too.
pub fn command() -> clap::Command {
    Cli::command()
        .after_help(format!("{EXIT_STATUS}\n\n{ENVIRONMENT}"))
        .mut_subcommand("record", |c| c.after_help(record::products_help()))
        .mut_subcommand("run", |c| {
            c.after_help(format!(
                "The progress bar shows on standard error when it is a terminal and a \
                 calibration run of a few paths\npredicts more than about a second.\n\n{ENVIRONMENT}"
            ))
        })
        .mut_subcommand("compile", |c| c.after_help(ENVIRONMENT))
}

/// The options given on the command line (not defaulted), by argument id: what `honour.rs`
/// checks, since an option left at its default asks for nothing.
#[derive(Debug, Default, Clone)]
pub struct Given(BTreeSet<String>);

impl Given {
    fn of(m: &ArgMatches) -> Given {
        Given(
            m.ids()
                .filter(|id| m.value_source(id.as_str()) == Some(ValueSource::CommandLine))
                .map(|id| id.as_str().to_string())
                .collect(),
        )
    }

    pub fn has(&self, id: &str) -> bool {
        self.0.contains(id)
    }
}

/// Edit distance, for "did you mean" on a mistyped subcommand.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let here = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(here + 1);
            prev = here;
        }
    }
    row[b.len()]
}

/// The short form: `nablac TAPE ...` is `nablac compile TAPE ...` when TAPE is `-` or names an
/// existing file. Any other first word that is not a subcommand is refused here, with a message
/// that names both readings (clap would say something about positional arguments).
fn expand_short_form(mut argv: Vec<OsString>, cmd: &clap::Command) -> Result<Vec<OsString>> {
    let Some(first) = argv.get(1).cloned() else {
        return Ok(argv);
    };
    let word = first.to_string_lossy();
    if word != "-" && word.starts_with('-') {
        return Ok(argv); // an option: clap's to read (or refuse)
    }
    let mut names: Vec<&str> = vec!["help"];
    for sub in cmd.get_subcommands() {
        names.push(sub.get_name());
        names.extend(sub.get_all_aliases());
    }
    if names.contains(&word.as_ref()) {
        return Ok(argv);
    }
    if word == "-" || Path::new(&first).exists() {
        argv.insert(1, OsString::from("compile"));
        return Ok(argv);
    }
    let near = names
        .iter()
        .filter(|n| distance(n, &word) <= 2)
        .min_by_key(|n| distance(n, &word));
    let hint = match near {
        Some(n) => format!("; did you mean `nablac {n}`?"),
        None => String::new(),
    };
    anyhow::bail!(
        "'{word}' is neither a subcommand nor an existing file{hint}\n\
         usage: nablac <COMMAND> [ARGS] or nablac TAPE [COMPILE OPTIONS]; subcommands: {} \
         (see nablac --help)",
        SUBCOMMANDS.join(", ")
    )
}

fn report_error(e: &anyhow::Error) -> ExitCode {
    note!("error: {e}");
    for cause in e.chain().skip(1) {
        note!("  caused by: {cause}");
    }
    ExitCode::FAILURE
}

pub fn main() -> ExitCode {
    // `nablac inspect a.bin | head` must end quietly like any Unix filter, not panic on EPIPE.
    #[cfg(unix)]
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let mut cmd = command();
    let argv = match expand_short_form(std::env::args_os().collect(), &cmd) {
        Ok(a) => a,
        Err(e) => return report_error(&e),
    };
    let matches = match cmd.try_get_matches_from_mut(argv) {
        Ok(m) => m,
        Err(e) => {
            use clap::error::ErrorKind;
            // Help and version go to standard output with status 0; every other parse error is a
            // usage error, status 1 like every other error (clap's own would be 2).
            let _ = e.print();
            return match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => ExitCode::SUCCESS,
                _ => ExitCode::FAILURE,
            };
        }
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::FAILURE;
        }
    };
    let given = matches
        .subcommand()
        .map(|(_, m)| Given::of(m))
        .unwrap_or_default();
    let result = match cli.command {
        Some(Command::Compile(a)) => compile::run(&a, &given),
        Some(Command::Record(a)) => record::run(&a, &given),
        Some(Command::Inspect(a)) => inspect::run(&a),
        Some(Command::Explain(a)) => explain::run(&a, &given),
        Some(Command::Run(a)) => run::run(&a, &given),
        Some(Command::Completions(a)) => manual::completions(&a, command()),
        Some(Command::Man(a)) => manual::man(&a, command()),
        None => {
            // A bare `nablac` asks for nothing: it prints the help, on standard output, status 0.
            let mut cmd = command();
            match cmd.print_help() {
                Ok(()) => Ok(()),
                Err(e) => Err(e.into()),
            }
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => report_error(&e),
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
    /// Value and every Greek, by tangents along the forward sweep (one direction per input).
    Forward,
    /// Forward or reverse (and reverse's checkpointing), whichever the cost model estimates
    /// faster for the tape and target (`nablac explain --mode auto` shows the estimates).
    Auto,
}

#[derive(Copy, Clone, PartialEq, Eq, Debug, ValueEnum)]
pub enum PrecisionArg {
    F32,
    F64,
}

#[derive(Copy, Clone, PartialEq, Eq, Debug, ValueEnum)]
pub enum CheckpointArg {
    /// Persistent values stay in registers; segments are recomputed (GPU default).
    Registers,
    /// Values crossing a cut go to a per-path global buffer (CUDA and OpenCL).
    Scratch,
    /// The plain kernel (the only one on cpu).
    Off,
}

impl From<ModeArg> for nablac::emit::Mode {
    fn from(m: ModeArg) -> Self {
        use nablac::emit::Mode;
        match m {
            ModeArg::Price => Mode::Price,
            // Auto is resolved against the tape (`compile::resolved_options`); without a tape
            // (a kernel compiled already) it asks for nothing in particular.
            ModeArg::Reverse | ModeArg::Auto => Mode::Reverse,
            ModeArg::Forward => Mode::Forward,
        }
    }
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

/// The compiler's options, shared by the compile and run subcommands. Any of them that the
/// target or the rest of the command line makes meaningless is refused (`honour.rs`).
#[derive(Args, Debug, Clone)]
pub struct CompileOpts {
    /// Value only, or value and every Greek.
    #[arg(long, value_enum, default_value = "auto")]
    pub mode: ModeArg,
    /// Kernel arithmetic (sums over paths are always f64). Default: f64 on cpu, f32 on GPUs.
    #[arg(long, value_enum)]
    pub precision: Option<PrecisionArg>,
    /// Checkpoint strategy for the reverse sweep (GPU targets). Default: registers on GPUs, off
    /// on cpu.
    #[arg(long, value_enum)]
    pub checkpoint: Option<CheckpointArg>,
    /// Segments: 1 switches checkpointing off; N > 1 forces it on with N segments (GPU targets).
    #[arg(long, value_name = "N")]
    pub segments: Option<u32>,
    /// Register recompute switches itself on for tapes of at least N nodes (GPU targets).
    #[arg(long, value_name = "N", default_value_t = nablac::plan::DEFAULT_CKPT_NODES)]
    pub ckpt_nodes: u32,
    /// Nodes per segment when --segments does not say (GPU targets) [default: 100].
    #[arg(long, value_name = "N")]
    pub seg_len: Option<u32>,
    /// Scratch buffer layout (--checkpoint scratch).
    #[arg(long, value_enum, default_value = "soa")]
    pub scratch_layout: LayoutArg,
    /// Threads per workgroup, a power of two (GPU targets).
    #[arg(long, value_name = "N", default_value_t = 128)]
    pub workgroup: u32,
    /// Comment every generated line with the tape node it computes (GPU targets).
    #[arg(long)]
    pub annotate: bool,
    /// CUDA: ask for N resident workgroups per multiprocessor (`__launch_bounds__(WG, N)`),
    /// capping registers at 65536 / (WG * N); 0: no hint. Default: 4 for f32 kernels with
    /// register recompute (measured faster on the H200), 3 for f32 forward kernels of workgroup
    /// 128 holding 129-200 values (faster on the H100), no hint otherwise.
    #[arg(long, value_name = "N")]
    pub min_blocks: Option<u32>,
    /// Sum each Greek's square in the kernel, for the Greeks' standard errors (one more sum per
    /// output and input; `false` leaves them out of the report).
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub greek_stderr: bool,
    /// Fuse M markets into one kernel (a ladder): the draws and every node that no varying input
    /// reaches are computed once per path, the rest once per market; each market gives the bits
    /// of a one-market run. Default 1; `run --ladder` chooses by the measured rule.
    #[arg(long, value_name = "M")]
    pub markets: Option<u32>,
    /// The inputs that may differ between the fused markets, comma-separated [default: every
    /// input; with `run --ladder`, the laddered ones].
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    pub ladder_inputs: Vec<String>,
    /// Unroll the tape's repeated steps (`nablac inspect` lists them), which price and forward
    /// kernels otherwise compile as loops (the same bits, a fraction of the source): the
    /// straight-line kernel, for comparison. Reverse kernels are unrolled anyway, for now.
    #[arg(long)]
    pub unroll: bool,
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

/// Refuses a `--plot` path that is neither `-` nor named `*.svg` (the plots are SVG).
pub fn check_svg_name(p: &Path) -> anyhow::Result<()> {
    let svg = p
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("svg"));
    if !svg && !is_stdio(p) {
        anyhow::bail!(
            "--plot writes SVG: name the file FILE.svg (or - for standard output), not {}",
            p.display()
        );
    }
    Ok(())
}

/// Writes a `--plot` SVG to `path` (staged: nothing half-written) or to standard output for
/// `-`, and says so on standard error (`wrote PATH (what)`) when it went to a file; returns
/// whether standard output now carries it (the report then goes to standard error).
pub fn write_svg(path: &Path, svg: &str, what: &str) -> anyhow::Result<bool> {
    if is_stdio(path) {
        output::write_stdout(svg.as_bytes())?;
        return Ok(true);
    }
    let mut out = output::Staged::new();
    out.write(path, svg.as_bytes())?;
    out.commit()?;
    note!("wrote {} ({what})", path.display());
    Ok(false)
}

/// Is `p` the name `-` (standard input or output)?
pub fn is_stdio(p: &Path) -> bool {
    p.as_os_str() == "-"
}

/// How a path is named in messages: `-` is `<stdin>` or `<stdout>`.
pub fn shown(p: &Path, stdio: &'static str) -> String {
    if is_stdio(p) {
        stdio.to_string()
    } else {
        p.display().to_string()
    }
}

/// The bytes of `path`, or of standard input for `-` (refused when it is a terminal: nablac
/// would sit waiting for a binary tape typed by hand).
pub fn read_input(path: &Path) -> Result<Vec<u8>> {
    if is_stdio(path) {
        let mut stdin = std::io::stdin();
        if stdin.is_terminal() {
            anyhow::bail!("- reads standard input, which is a terminal: pipe or redirect a file");
        }
        let mut bytes = Vec::new();
        stdin
            .read_to_end(&mut bytes)
            .context("cannot read standard input")?;
        Ok(bytes)
    } else {
        std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
    }
}

/// Reads and verifies a tape in `bytes`, read from `path`, with its name in every error.
pub fn parse_tape(path: &Path, bytes: &[u8]) -> Result<nablac::verify::Verified> {
    let name = shown(path, "<stdin>");
    let tape = nablac::format::read(bytes).map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
    nablac::verify::verify(tape).map_err(|e| anyhow::anyhow!("{name}: {e}"))
}

/// Reads and verifies a tape file (`-`: standard input), with the file name in every error.
pub fn load_tape(path: &Path) -> Result<nablac::verify::Verified> {
    parse_tape(path, &read_input(path)?)
}

/// Prints a subcommand's report: on standard output, or on standard error when standard output
/// carries the data the command wrote (`-o -` and the like). A stream that cannot be written (a
/// full disk, a closed pipe) is an error, not a panic.
pub fn print_report(text: &str, stdout_taken: bool) -> Result<()> {
    use std::io::Write;
    let line = format!("{text}\n");
    let written = if stdout_taken {
        std::io::stderr().lock().write_all(line.as_bytes())
    } else {
        let mut out = std::io::stdout().lock();
        out.write_all(line.as_bytes()).and_then(|()| out.flush())
    };
    written.context("cannot write the report")
}

/// A JSON report as text for the stream it goes to (standard error when `stdout_taken`):
/// indented for a person when that stream is a terminal, else compact on one line, like
/// `gh --json`. One line is what `jq` and other programs read as well, and reports appended to
/// a file then form JSON Lines (one run a line) with no flag to remember.
pub fn json_text<T: serde::Serialize>(value: &T, stdout_taken: bool) -> Result<String> {
    let terminal = if stdout_taken {
        std::io::stderr().is_terminal()
    } else {
        std::io::stdout().is_terminal()
    };
    Ok(if terminal {
        serde_json::to_string_pretty(value)?
    } else {
        serde_json::to_string(value)?
    })
}

/// The input file, shared by the subcommands that read a tape.
#[derive(Args, Debug, Clone)]
pub struct TapeArg {
    /// A tape: binary (`NTAP` magic) or text (`nablatape 1`); `-` reads standard input.
    #[arg(value_name = "TAPE")]
    pub tape: PathBuf,
}

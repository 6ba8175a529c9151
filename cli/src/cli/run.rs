//! `nablac run TAPE|KERNEL --target ... --paths N --seed S`: price and Greeks.

use super::{is_stdio, number, CompileOpts, Given, TargetArg};
use anyhow::{bail, Context, Result};
use clap::Args;
use nablac::compile::CpuBackend;
use nablac::emit::{Manifest, Target};
use nablac_runtime::{Backend, Progress, Report, RunOptions};
use serde::Serialize;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

#[derive(Args, Debug)]
#[command(allow_negative_numbers = true)] // --seed -1 is an invalid value, not an argument
pub struct RunArgs {
    /// A tape (compiled first) or a kernel emitted by nablac, with its manifest at KERNEL.json;
    /// `-` reads either from standard input (a kernel then needs --manifest).
    #[arg(value_name = "TAPE|KERNEL")]
    input: PathBuf,
    /// Where to run (`vulkan` = `glsl`). Default: cpu for a tape, the manifest's for a kernel.
    #[arg(long, value_enum)]
    target: Option<TargetArg>,
    /// A kernel's manifest [default: KERNEL.json].
    #[arg(long, value_name = "PATH")]
    manifest: Option<PathBuf>,
    /// Monte Carlo paths (1 ..= 2^63 - 1; `1e6` and `1_000_000` read as 1000000).
    #[arg(long, value_name = "N", default_value_t = 1_000_000, value_parser = whole_u64)]
    paths: u64,
    /// Seed of the Philox generator (0 ..= 2^64 - 1).
    #[arg(long, value_name = "S", default_value_t = 42, value_parser = whole_u64)]
    seed: u64,
    /// Run at another value of an input, e.g. --market spot=105 (repeatable).
    #[arg(long = "market", value_name = "NAME=VALUE", value_parser = super::parse_market)]
    market: Vec<(String, f64)>,
    /// Run a revaluation ladder: COUNT values of input NAME evenly from FROM to TO, e.g.
    /// --ladder spot=80:120:9 (repeatable: a grid, the first --ladder outermost). A tape is
    /// compiled into a fused kernel (the draws and everything no laddered input reaches shared by
    /// its markets; its market count by the measured rule unless --markets says); every market
    /// gives the bits of a one-market run.
    #[arg(long = "ladder", value_name = "NAME=FROM:TO:COUNT", value_parser = super::ladder::parse_ladder)]
    ladder: Vec<super::ladder::LadderArg>,
    /// Draw each output's value (±1 standard error) and a Greek against the first laddered input
    /// into FILE.svg (with --ladder).
    #[arg(long, value_name = "FILE.svg", requires = "ladder")]
    plot: Option<PathBuf>,
    /// The Greek --plot draws: d output / d INPUT [default: the first laddered input].
    #[arg(long, value_name = "INPUT", requires = "plot")]
    plot_greek: Option<String>,
    /// CPU worker threads, 1 ..= 4096 (cpu target; default: every core). Never changes a result.
    #[arg(long, value_name = "N",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=4096))]
    threads: Option<usize>,
    /// The CPU code's back end (cpu target, a tape): llvm (one path per SIMD lane; the default
    /// when nablac is built with LLVM, for kernels of at most 50,000 nodes and 512 per-path
    /// sums) or cranelift (scalar, the reference; linear compile time, the default beyond).
    #[arg(long, value_enum, value_name = "BACKEND")]
    cpu_backend: Option<CpuBackendArg>,
    /// Print JSON: the run's context (target, device, precision, mode, paths, seed, market,
    /// tape_hash, kernel_hash, cache_hit), outputs {name: value, stderr, non_finite, greeks,
    /// greek_stderr}, timings {load, run, device, assembly, transfer, allocation} in seconds; NaN and infinities are
    /// null.
    #[arg(long)]
    json: bool,
    /// Fail (exit 1) when a path gave a non-finite value or Greek (by default a warning: such
    /// paths are counted in `non_finite` and left out of that output's sums).
    #[arg(long)]
    strict: bool,
    #[command(
        flatten,
        next_help_heading = "Compile options (for a tape; a kernel is compiled already)"
    )]
    opts: CompileOpts,
}

#[derive(Copy, Clone, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum CpuBackendArg {
    Llvm,
    Cranelift,
}

impl From<CpuBackendArg> for CpuBackend {
    fn from(b: CpuBackendArg) -> Self {
        match b {
            CpuBackendArg::Llvm => CpuBackend::Llvm,
            CpuBackendArg::Cranelift => CpuBackend::Cranelift,
        }
    }
}

/// A JSON object whose keys keep the tape's order (inputs, outputs), where a `BTreeMap` would
/// sort them by name: a quant reads `spot, strike, vol, rate, maturity` as recorded.
struct Ordered<T>(Vec<(String, T)>);

impl<T: Serialize> Serialize for Ordered<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl<T> FromIterator<(String, T)> for Ordered<T> {
    fn from_iter<I: IntoIterator<Item = (String, T)>>(iter: I) -> Self {
        Ordered(iter.into_iter().collect())
    }
}

#[derive(Serialize)]
struct JsonOutput {
    value: f64,
    stderr: f64,
    /// Paths left out of this output's sums: their value or a Greek was NaN or infinite.
    non_finite: u64,
    greeks: Ordered<f64>,
    /// Each Greek's standard error; absent when the kernel was compiled without them.
    #[serde(skip_serializing_if = "Option::is_none")]
    greek_stderr: Option<Ordered<f64>>,
}

#[derive(Serialize)]
struct JsonReport<'a> {
    target: &'a str,
    device: String,
    precision: &'a str,
    mode: &'a str,
    paths: u64,
    seed: u64,
    /// Every input's value in this run (the tape's recorded values, as --market changed them).
    market: Ordered<f64>,
    /// SHA-256 of the tape's canonical binary form (the manifest's `tape_hash`).
    tape_hash: &'a str,
    /// SHA-256 of the kernel source and its manifest (the manifest's `fingerprint`).
    kernel_hash: &'a str,
    /// Whether the compiled kernel came from the cache (the driver's, or LLVM's object code on
    /// the cpu; null for Cranelift's code, which is not cached).
    cache_hit: Option<bool>,
    outputs: Ordered<JsonOutput>,
    timings: Timings,
}

/// What a report is printed with: the run's context.
struct RunContext<'a> {
    manifest: &'a Manifest,
    /// The report goes to standard error (`--plot -` took standard output).
    stdout_taken: bool,
    device: String,
    market: &'a [f64],
    cache_hit: Option<bool>,
    timings: Timings,
}

/// Where the command's time went, in seconds (host clocks). `load`: reading, compiling (a tape)
/// and loading the kernel, driver compile included; `run`: the measured run, end to end;
/// `device`: its launches from submission to completion (GPU; 0 on the CPU); `assembly`: turning
/// group partials into the run's sums (GPU; 0 on the CPU); `transfer`: copying the inputs to the
/// device and the group partials back, waits included (GPU; 0 on the CPU); `allocation`:
/// creating and freeing device buffers and launch objects (GPU; 0 on the CPU).
#[derive(Serialize, Clone, Copy)]
struct Timings {
    load: f64,
    run: f64,
    device: f64,
    assembly: f64,
    transfer: f64,
    allocation: f64,
}

/// A count or seed: digits, or scientific notation that names a whole number (`number::whole`).
fn whole_u64(s: &str) -> Result<u64, String> {
    super::number::whole(s, u64::MAX)
}

/// Whether `bytes` is a tape (either form) rather than kernel source: the binary magic, or a
/// first line that is neither blank nor a comment reading `nablatape` (however many comment lines
/// come first: a tape with more than 4 KiB of them was once taken for a kernel).
fn is_tape(bytes: &[u8]) -> bool {
    bytes.starts_with(&nablac::format::MAGIC)
        || bytes
            .split(|&b| b == b'\n')
            .map(|l| {
                let l = String::from_utf8_lossy(l);
                l.split('#').next().unwrap_or("").trim().to_string()
            })
            .find(|l| !l.is_empty())
            .is_some_and(|l| l.starts_with("nablatape"))
}

/// Refuses `--threads` where the target does not use it (the compile options, `--cpu-backend`
/// included, are the driver's to check).
fn check_target(target: Target, args: &RunArgs) -> Result<()> {
    if args.threads.is_some() && target != Target::Cpu {
        bail!(
            "--threads is for the cpu target, not {}: a GPU runs its paths on the device's own \
             threads",
            target.name()
        );
    }
    Ok(())
}

pub fn run(args: &RunArgs, given: &Given) -> Result<()> {
    let load_started = std::time::Instant::now();
    if args.paths == 0 || args.paths > i64::MAX as u64 {
        bail!("--paths must be between 1 and 2^63 - 1, not {}", args.paths);
    }
    let name = super::shown(&args.input, "<stdin>");
    let bytes = super::read_input(&args.input)?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        bail!(
            "{name} is empty: neither a tape (it would start with the NTAP magic or a \
             `nablatape` line) nor a kernel"
        );
    }
    let asked = args.target.map(super::compile::target);
    let (source, manifest): (String, Manifest) = if is_tape(&bytes) {
        if let Some(m) = &args.manifest {
            bail!(
                "--manifest {} is for a kernel, and {name} is a tape (its manifest is made when it \
                 is compiled)",
                m.display()
            );
        }
        let target = asked.unwrap_or(Target::Cpu);
        let mut req = super::honour::request(target, &args.opts, given);
        req.cpu_backend = args.cpu_backend.map(CpuBackend::from);
        super::honour::check(&req)?;
        check_target(target, args)?;
        let tape = super::parse_tape(&args.input, &bytes)?;
        // Checked before compiling: the names, and the grid's size.
        let names: Vec<String> = tape.inputs.iter().map(|i| i.name.clone()).collect();
        super::ladder::indices(&names, &args.ladder)?;
        let count = super::ladder::count(&args.ladder)?;
        let shape = nablac::driver::Run {
            laddered: args.ladder.iter().map(|l| l.name.clone()).collect(),
            markets: count as u32,
            paths: args.paths,
        };
        let mut resolved = nablac::driver::options(&tape, &req, Some(&shape))
            .map_err(super::honour::spelled)
            .with_context(|| format!("cannot compile {name}"))?;
        let o = &resolved.options;
        let what = format!(
            "compiling {name} for {} ({} nodes{})",
            target.name(),
            tape.len(),
            o.ladder
                .as_ref()
                .map_or(String::new(), |l| format!(", {} markets fused", l.markets))
        );
        let k = super::spinner::during(&what, || resolved.compile(&tape))
            .map_err(super::honour::spelled)
            .with_context(|| format!("cannot compile {name}"))?;
        (k.source, k.manifest)
    } else {
        let mpath = match &args.manifest {
            Some(m) => m.clone(),
            None if is_stdio(&args.input) => bail!(
                "<stdin> is not a tape, so it must be a kernel: give its manifest with --manifest PATH"
            ),
            None => super::compile::manifest_path(&args.input),
        };
        let mtext = std::fs::read_to_string(&mpath).with_context(|| {
            format!(
                "{name} is not a tape, so it must be a kernel with its manifest at {}",
                mpath.display()
            )
        })?;
        let m: Manifest = serde_json::from_str(&mtext)
            .with_context(|| format!("{}: bad manifest", mpath.display()))?;
        if asked.is_some_and(|t| t != m.target) {
            bail!(
                "{name} is a kernel for {}; run it with --target {} (or without --target)",
                m.target.name(),
                m.target.name()
            );
        }
        check_target(m.target, args)?;
        let mut req = super::honour::request(m.target, &args.opts, given);
        req.cpu_backend = args.cpu_backend.map(CpuBackend::from);
        nablac::driver::check_kernel(&name, &m, &req).map_err(super::honour::spelled)?;
        let src = String::from_utf8(bytes)
            .with_context(|| format!("{name}: kernel source is not UTF-8"))?;
        (src, m)
    };

    let mut market = manifest.input_defaults.clone();
    for (name, value) in &args.market {
        let Some(i) = manifest.inputs.iter().position(|n| n == name) else {
            bail!(
                "--market {name}={value}: the tape has no input {name} (inputs: {})",
                manifest.inputs.join(", ")
            );
        };
        market[i] = *value;
    }
    let markets = if args.ladder.is_empty() {
        vec![market.clone()]
    } else {
        super::ladder::markets(&manifest, &market, &args.ladder)?
    };
    let plot_greek = plot_greek(args, &manifest)?;
    let fused = manifest.fused_markets();
    let groups = markets.len().div_ceil(fused);

    let target = manifest.target;
    let backend = Backend::open(target)
        .with_context(|| format!("cannot open the {} backend", target.name()))?;
    let kernel = super::spinner::during(&load_message(&manifest, &source), || {
        backend.load(&source, &manifest)
    })
    .context("cannot load the kernel")?;
    let cache_hit = kernel.cache_hit();
    // Buffers for a run of this many paths, allocated once like the compile (counted as load).
    backend
        .reserve(&kernel, args.paths)
        .context("cannot allocate the run's buffers")?;
    let load = load_started.elapsed().as_secs_f64();

    let quiet = RunOptions {
        threads: args.threads,
        chunk_paths: None,
        progress: None,
    };
    let bar = if std::io::stderr().is_terminal()
        && expected_seconds(&backend, &kernel, &market, args.paths, args.seed, &quiet)
            .context("the run failed")?
            * groups as f64
            > BAR_AFTER_SECONDS
    {
        let b = indicatif::ProgressBar::new(args.paths.saturating_mul(groups as u64));
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:40} {human_pos}/{human_len} paths, {elapsed_precise}, eta {eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b.enable_steady_tick(std::time::Duration::from_millis(200));
        Some(b)
    } else {
        None
    };
    let progress = |p: Progress| {
        if let Some(b) = &bar {
            // Fused markets run together: one stretch of the bar per group.
            b.set_position((p.market / fused) as u64 * args.paths + p.done);
        }
    };
    let opts = RunOptions {
        progress: Some(&progress),
        ..quiet
    };
    let before = kernel.timings();
    let started = std::time::Instant::now();
    let reports = backend
        .run(&kernel, &markets, args.paths, args.seed, &opts)
        .context("the run failed");
    let elapsed = started.elapsed();
    let after = kernel.timings();
    let timings = Timings {
        load,
        run: elapsed.as_secs_f64(),
        device: after.device_s - before.device_s,
        assembly: after.assemble_s - before.assemble_s,
        transfer: after.transfer_s - before.transfer_s,
        allocation: after.allocate_s - before.allocate_s,
    };
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    let reports = reports?;
    let mut bad = Vec::new();
    for (k, report) in reports.iter().enumerate() {
        let at = if args.ladder.is_empty() {
            String::new()
        } else {
            format!(
                " (market {k}: {})",
                market_text(&manifest, &markets[k], &args.ladder)
            )
        };
        bad.extend(report.outputs.iter().filter(|o| o.non_finite > 0).map(|o| {
            format!(
                "{}{at}: {} of {} paths gave a non-finite value or Greek and are left out of its sums",
                o.name, o.non_finite, args.paths
            )
        }));
    }
    // --strict fails before anything is printed (an error writes nothing on standard output).
    if args.strict && !bad.is_empty() {
        bail!("--strict: {}", bad.join("; "));
    }
    for b in &bad {
        note!("warning: {b}");
    }
    // The report goes to standard output, or to standard error when `--plot -` took it.
    let plot_on_stdout = match &args.plot {
        Some(path) => {
            let greek = plot_greek
                .as_deref()
                .map_or(String::new(), |g| format!(" and d/d{g}"));
            super::write_svg(
                path,
                &super::ladder::svg(
                    &manifest,
                    &args.ladder,
                    &markets,
                    &reports,
                    plot_greek.as_deref(),
                )?,
                &format!("each output's value{greek} against {}", args.ladder[0].name),
            )?
        }
        None => false,
    };
    let cx = RunContext {
        manifest: &manifest,
        stdout_taken: plot_on_stdout,
        device: backend.describe_with(&kernel),
        market: &market,
        cache_hit,
        timings,
    };
    let mut out: Box<dyn Write> = if plot_on_stdout {
        Box::new(std::io::stderr().lock())
    } else {
        Box::new(std::io::stdout().lock())
    };
    let out = &mut *out;
    if args.ladder.is_empty() {
        if args.json {
            print_json(out, &reports[0], &cx, args)?;
        } else {
            print_table(out, &reports[0], &cx, args)?;
        }
    } else if args.json {
        print_ladder_json(out, &reports, &markets, &cx, args)?;
    } else {
        print_ladder_table(out, &reports, &markets, &cx, args)?;
    }
    out.flush().context("cannot write the report")?;
    Ok(())
}

/// The Greek `--plot` draws (None: the kernel has no Greeks and none was asked for).
fn plot_greek(args: &RunArgs, m: &Manifest) -> Result<Option<String>> {
    let Some(path) = &args.plot else {
        return Ok(None);
    };
    super::check_svg_name(path)?;
    if m.mode == nablac::emit::Mode::Price {
        if let Some(g) = &args.plot_greek {
            bail!("--plot-greek {g}: a price kernel has no Greeks (compile with --mode reverse, forward or auto)");
        }
        return Ok(None);
    }
    let g = args
        .plot_greek
        .clone()
        .unwrap_or_else(|| args.ladder[0].name.clone());
    if !m.inputs.contains(&g) {
        bail!(
            "--plot-greek {g}: the tape has no input {g} (inputs: {})",
            m.inputs.join(", ")
        );
    }
    Ok(Some(g))
}

/// The laddered inputs' values of `market`, e.g. `spot=90, vol=0.2`.
fn market_text(m: &Manifest, market: &[f64], ladders: &[super::ladder::LadderArg]) -> String {
    ladders
        .iter()
        .filter_map(|l| {
            let i = m.inputs.iter().position(|n| *n == l.name)?;
            Some(format!("{}={}", l.name, market[i]))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// What loading `source` compiles, for the spinner: which compiler turns it into machine code.
fn load_message(m: &Manifest, source: &str) -> String {
    let compiler = match m.target {
        Target::Cpu if nablac_runtime::cpu::is_llvm_ir(source) => {
            "LLVM's optimiser and code generator"
        }
        Target::Cpu => "Cranelift",
        Target::Cuda => "NVRTC and the CUDA driver",
        Target::Opencl => "the OpenCL driver",
        Target::Glsl => "glslangValidator and the Vulkan driver",
    };
    format!(
        "compiling the {} {} kernel with {compiler}",
        m.target.name(),
        m.mode.name()
    )
}

/// A run expected to take longer than this shows a progress bar (on a terminal).
const BAR_AFTER_SECONDS: f64 = 1.0;

/// How long a run of `paths` paths should take, from calibration runs of a few paths: 1024 first,
/// then 16 times more until one takes 20 ms or covers a sixteenth of the run (a GPU's launch
/// overhead makes a tiny run slow per path; growing the run until it is measurable keeps the
/// estimate near the truth at a cost of a few percent of a run that is itself short). Only
/// called on a terminal, where a bar could show; never changes a result.
fn expected_seconds(
    backend: &Backend,
    kernel: &nablac_runtime::LoadedKernel,
    market: &[f64],
    paths: u64,
    seed: u64,
    opts: &RunOptions,
) -> Result<f64> {
    let mut n = nablac_runtime::PATH_ALIGN.min(paths);
    loop {
        let started = std::time::Instant::now();
        backend.run(kernel, &[market.to_vec()], n, seed, opts)?;
        let t = started.elapsed().as_secs_f64();
        if t >= 0.02 || n.saturating_mul(16) > paths {
            return Ok(t * paths as f64 / n as f64);
        }
        n *= 16;
    }
}

/// A report's outputs as JSON: `{name: {value, stderr, non_finite, greeks, greek_stderr}}`, in
/// the tape's order (outputs, and inputs within each).
fn outputs_json(report: &Report, m: &Manifest) -> Ordered<JsonOutput> {
    report
        .outputs
        .iter()
        .map(|o| {
            (
                o.name.clone(),
                JsonOutput {
                    value: o.value,
                    stderr: o.stderr,
                    non_finite: o.non_finite,
                    greeks: o.greeks.iter().cloned().collect(),
                    greek_stderr: (!o.greek_stderr.is_empty() || m.greek_stderr).then(|| {
                        o.greeks
                            .iter()
                            .zip(&o.greek_stderr)
                            .map(|((i, _), &se)| (i.clone(), se))
                            .collect()
                    }),
                },
            )
        })
        .collect()
}

/// Every input's value in `market`, by name, in the tape's order.
fn market_json(m: &Manifest, market: &[f64]) -> Ordered<f64> {
    m.inputs
        .iter()
        .cloned()
        .zip(market.iter().copied())
        .collect()
}

#[derive(Serialize)]
struct JsonMarket {
    market: Ordered<f64>,
    outputs: Ordered<JsonOutput>,
}

#[derive(Serialize)]
struct JsonLadder<'a> {
    target: &'a str,
    device: String,
    precision: &'a str,
    mode: &'a str,
    paths: u64,
    seed: u64,
    /// Markets per kernel launch (the kernel's `markets`).
    fused_markets: usize,
    tape_hash: &'a str,
    kernel_hash: &'a str,
    cache_hit: Option<bool>,
    /// One entry per market, in ladder order: its inputs and its outputs as a single run
    /// reports them (the same bits).
    markets: Vec<JsonMarket>,
    timings: Timings,
}

fn print_ladder_json(
    out: &mut dyn Write,
    reports: &[Report],
    markets: &[Vec<f64>],
    cx: &RunContext,
    args: &RunArgs,
) -> Result<()> {
    let m = cx.manifest;
    let j = JsonLadder {
        target: m.target.name(),
        device: cx.device.clone(),
        precision: m.precision.name(),
        mode: m.mode.name(),
        paths: args.paths,
        seed: args.seed,
        fused_markets: m.fused_markets(),
        tape_hash: &m.tape_hash,
        kernel_hash: &m.fingerprint,
        cache_hit: cx.cache_hit,
        markets: reports
            .iter()
            .zip(markets)
            .map(|(r, mk)| JsonMarket {
                market: market_json(m, mk),
                outputs: outputs_json(r, m),
            })
            .collect(),
        timings: cx.timings,
    };
    writeln!(out, "{}", super::json_text(&j, cx.stdout_taken)?)?;
    Ok(())
}

/// One row per market: the laddered inputs, then each output's value and Greeks, each with its
/// standard error; columns past the table's width wrap into further blocks.
fn print_ladder_table(
    out: &mut dyn Write,
    reports: &[Report],
    markets: &[Vec<f64>],
    cx: &RunContext,
    args: &RunArgs,
) -> Result<()> {
    let (m, t) = (cx.manifest, cx.timings);
    let n = markets.len();
    writeln!(
            out,
        "{} {} {} ladder of {n} markets ({} per launch), {} paths each, seed {}, {:.3} s ({:.2} M market-paths/s); load {:.3} s{}",
        m.target.name(),
        m.precision.name(),
        m.mode.name(),
        m.fused_markets(),
        args.paths,
        args.seed,
        t.run,
        args.paths as f64 * n as f64 / t.run / 1e6,
        t.load,
        if cx.cache_hit == Some(true) { " (cached)" } else { " (compile included)" }
    )?;
    // Columns: the laddered inputs (the key, repeated in every block), then per output its value
    // and each Greek, every estimate with its standard error.
    let key: Vec<Column> = args
        .ladder
        .iter()
        .filter_map(|l| {
            let i = m.inputs.iter().position(|n| *n == l.name)?;
            Some(Column::new(
                l.name.clone(),
                markets.iter().map(|mk| number::given(mk[i])).collect(),
            ))
        })
        .collect();
    let cell = |v: f64, se: Option<f64>| match se {
        Some(se) => {
            let (v, e) = number::estimate(v, se);
            format!("{v} ± {e}")
        }
        None => number::plain(v),
    };
    let mut data: Vec<Column> = Vec::new();
    if let Some(first) = reports.first() {
        for (k, o) in first.outputs.iter().enumerate() {
            let outs = || reports.iter().map(move |r| &r.outputs[k]);
            data.push(Column::new(
                o.name.clone(),
                outs().map(|o| cell(o.value, Some(o.stderr))).collect(),
            ));
            for (g, (input, _)) in o.greeks.iter().enumerate() {
                data.push(Column::new(
                    format!("d{}/d{input}", o.name),
                    outs()
                        .map(|o| cell(o.greeks[g].1, o.greek_stderr.get(g).copied()))
                        .collect(),
                ));
            }
        }
    }
    let key_width: usize = key.iter().map(|c| c.width + 2).sum();
    let width = table_width().max(key_width + 40);
    let mut blocks: Vec<Vec<&Column>> = vec![Vec::new()];
    let mut used = key_width;
    for c in &data {
        let last = blocks.last_mut().expect("one block at least");
        if !last.is_empty() && used + c.width + 2 > width {
            blocks.push(vec![c]);
            used = key_width + c.width + 2;
        } else {
            last.push(c);
            used += c.width + 2;
        }
    }
    for (b, block) in blocks.iter().enumerate() {
        if b > 0 {
            writeln!(out)?;
        }
        let columns: Vec<&Column> = key.iter().chain(block.iter().copied()).collect();
        let line = |row: &dyn Fn(&Column) -> &str| {
            columns
                .iter()
                .map(|c| format!("{:>w$}", row(c), w = c.width))
                .collect::<Vec<_>>()
                .join("  ")
        };
        writeln!(out, "{}", line(&|c| c.head.as_str()).trim_end())?;
        for r in 0..n {
            writeln!(out, "{}", line(&|c| c.cells[r].as_str()))?;
        }
    }
    Ok(())
}

/// A column of the ladder table: its head and one cell per market, right-aligned to `width`.
struct Column {
    head: String,
    cells: Vec<String>,
    width: usize,
}

impl Column {
    fn new(head: String, cells: Vec<String>) -> Column {
        let width = cells
            .iter()
            .chain([&head])
            .map(|c| c.chars().count())
            .max()
            .unwrap_or(0);
        Column { head, cells, width }
    }
}

/// How wide the ladder table may be before its columns wrap into blocks (each repeating the
/// laddered inputs, as pandas and R print wide tables): `COLUMNS` when set, else the width of
/// the terminal standard output is, else 100.
fn table_width() -> usize {
    if let Some(c) = std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok()) {
        return c;
    }
    #[cfg(unix)]
    {
        // SAFETY: TIOCGWINSZ writes a `winsize` into the struct it is given, and nothing else.
        let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
        if unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) } == 0
            && ws.ws_col > 0
        {
            return usize::from(ws.ws_col);
        }
    }
    100
}

fn print_json(out: &mut dyn Write, report: &Report, cx: &RunContext, args: &RunArgs) -> Result<()> {
    let m = cx.manifest;
    let outputs = outputs_json(report, m);
    let j = JsonReport {
        target: m.target.name(),
        device: cx.device.clone(),
        precision: m.precision.name(),
        mode: m.mode.name(),
        paths: args.paths,
        seed: args.seed,
        market: market_json(m, cx.market),
        tape_hash: &m.tape_hash,
        kernel_hash: &m.fingerprint,
        cache_hit: cx.cache_hit,
        outputs,
        timings: cx.timings,
    };
    // serde_json prints f64 with the shortest representation that parses back to the same bits,
    // and NaN and the infinities as null.
    writeln!(out, "{}", super::json_text(&j, cx.stdout_taken)?)?;
    Ok(())
}

fn print_table(
    out: &mut dyn Write,
    report: &Report,
    cx: &RunContext,
    args: &RunArgs,
) -> Result<()> {
    let (m, t) = (cx.manifest, cx.timings);
    writeln!(
        out,
        "{} {} {} {} path{}, seed {}, {:.3} s ({:.2} Mpaths/s)",
        m.target.name(),
        m.precision.name(),
        m.mode.name(),
        args.paths,
        if args.paths == 1 { "" } else { "s" },
        args.seed,
        t.run,
        args.paths as f64 / t.run / 1e6
    )?;
    if m.target == Target::Cpu {
        let how = match cx.cache_hit {
            Some(true) => "compile, the machine code from the cache",
            _ => "compile and JIT",
        };
        writeln!(out, "load {:.3} s ({how})", t.load)?;
    } else {
        writeln!(
            out,
            "load {:.3} s (compile and driver compile{}); run: device {:.3} s, assembly {:.3} s, \
             transfer {:.3} s, allocation {:.3} s, other {:.3} s",
            t.load,
            if cx.cache_hit == Some(true) {
                ", cached"
            } else {
                ""
            },
            t.device,
            t.assembly,
            t.transfer,
            t.allocation,
            (t.run - t.device - t.assembly - t.transfer - t.allocation).max(0.0)
        )?;
    }
    for o in &report.outputs {
        let left_out = if o.non_finite > 0 {
            format!("  ({} non-finite paths left out)", o.non_finite)
        } else {
            String::new()
        };
        let (v, e) = number::estimate(o.value, o.stderr);
        writeln!(out, "{:<12} {v:>22} ± {e}{left_out}", o.name)?;
        for (k, (input, g)) in o.greeks.iter().enumerate() {
            match o.greek_stderr.get(k) {
                Some(&se) => {
                    let (g, e) = number::estimate(*g, se);
                    writeln!(out, "  d/d{input:<9} {g:>22} ± {e}")?
                }
                None => writeln!(out, "  d/d{input:<9} {:>22}", number::plain(*g))?,
            }
        }
    }
    Ok(())
}

//! nablac-runtime: loads kernels that nablac emitted (source + manifest) and runs them.
//!
//! This crate never sees a tape. The contracts every host shares with the emitted code live in the
//! `nablac-abi` crate, which the compiler depends on too, and are re-exported here: the manifest
//! (how to launch a kernel, [`manifest`]), the draws ([`philox`]), the fixed-order sums that turn
//! per-path leaves into a report ([`report`]) and the CPU kernel ABI's data (`nablac_abi::cpu`,
//! which [`cpu`] builds its Cranelift signatures from). The compiler does not depend on this crate
//! (so it needs no GPU driver); the `nablac` binary (crate `nablac-cli`) depends on both, and
//! `nablac run` drives this one.
//!
//! ```text
//! let backend = Backend::open(Target::Cpu)?;
//! let kernel = backend.load(&source, &manifest)?;
//! let reports = backend.run(&kernel, &[kernel.default_market()], paths, seed, &RunOptions::default())?;
//! ```
//!
//! # Determinism
//!
//! A run over `paths` paths is cut into ranges whose ends are multiples of 1024 (or the path
//! count). Each range's per-path leaves are summed into [`report::PartialSums`] (the maximal
//! aligned blocks of the fixed summation tree), and the ranges' sums are merged; any cut and any
//! merge order give the single run's bits. So a report depends only on (kernel, market, paths,
//! seed) on one backend: never on the thread count, the chunk size or how ranges are dispatched.
//!
//! # Backends
//!
//! [`Backend`] is one enum with a variant per driver: the CPU JIT, Vulkan, CUDA and OpenCL. Each
//! device implements one step, `run_range(kernel, market, seed, paths, range) -> Vec<PartialSums>`
//! (one per `manifest.sums` entry, over paths `range`), and the backend declares the largest
//! range it takes in one go ([`Backend::max_range`]; GPU backends: 2^27 paths per dispatch, the
//! global path index carried in the launch). [`Backend::run`] does the rest: markets, ranges,
//! merging, the report; [`Backend::partial_sums`] and [`Backend::report`] are its two halves, for
//! a host that splits a run across devices or machines. The CPU backend spreads a range over
//! threads in 1024-aligned chunks.

pub mod cpu;
#[cfg(feature = "llvm")]
pub mod llvm;
pub use nablac_abi::{manifest, philox, report};

pub use manifest::{Manifest, Mode, Precision, Target};
pub use report::{OutputReport, PartialSums, Report, ReportError};

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Path ranges given to one chunk or device start at multiples of this (TAPE-FORMAT.md, Results).
pub const PATH_ALIGN: u64 = 1024;

/// Why a kernel could not be loaded or run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RuntimeError {
    #[error("manifest: {0}")]
    Manifest(String),
    #[error("kernel: {0}")]
    Kernel(String),
    #[error("host: {0}")]
    Host(String),
    #[error("run: {0}")]
    Run(String),
    #[error("market {market}: {problem}")]
    Market { market: usize, problem: String },
    /// Not a `#[from]`/source: the message holds it, so a cause chain prints it once.
    #[error("sums: {0}")]
    Report(ReportError),
    // Transparent: the GPU error is the message, once (with `{0}` and a source it printed twice
    // in a cause chain).
    #[error(transparent)]
    Gpu(#[from] gpu::GpuError),
    #[error("the kernel was loaded by the {kernel} backend, not by {backend}")]
    WrongBackend {
        kernel: &'static str,
        backend: &'static str,
    },
}

impl From<ReportError> for RuntimeError {
    fn from(e: ReportError) -> Self {
        RuntimeError::Report(e)
    }
}

/// How far a run has got: reported after every chunk (from worker threads).
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct Progress {
    /// The market being run (index into `markets`) and how many there are.
    pub market: usize,
    pub markets: usize,
    /// Paths finished in this market, of `paths`.
    pub done: u64,
    pub paths: u64,
}

/// Knobs that change speed, never results.
#[derive(Clone, Copy, Default)]
pub struct RunOptions<'a> {
    /// Worker threads (CPU); `None` = the available cores.
    pub threads: Option<usize>,
    /// Paths per chunk, a multiple of 1024: on the CPU the unit of work a thread takes (`None`
    /// picks one from the path and thread counts); on a GPU the most paths one dispatch covers
    /// (`None`: the backend's limit, [`Backend::max_range`]).
    pub chunk_paths: Option<u64>,
    /// Called after every chunk; must be cheap (a progress bar).
    pub progress: Option<&'a (dyn Fn(Progress) + Sync)>,
}

impl std::fmt::Debug for RunOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("threads", &self.threads)
            .field("chunk_paths", &self.chunk_paths)
            .field("progress", &self.progress.is_some())
            .finish()
    }
}

/// A driver that runs kernels of one target.
pub enum Backend {
    /// Cranelift JIT on this machine's cores.
    Cpu,
    /// A Vulkan device (GLSL kernels compiled by glslangValidator).
    Vulkan(Box<vulkan::Device>),
    /// A CUDA device (kernels compiled by NVRTC).
    Cuda(Box<cuda::Device>),
    /// An OpenCL device (PoCL on the CPU, a GPU driver).
    Opencl(Box<opencl::Device>),
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Backend({})", self.describe())
    }
}

/// A kernel loaded by a backend, with its manifest.
#[derive(Debug)]
pub struct LoadedKernel {
    manifest: Manifest,
    code: Code,
    /// Whether the driver's (or LLVM's) compiled code came from the kernel cache; None where
    /// nothing is cached (Cranelift's CPU code).
    cache_hit: Option<bool>,
}

#[derive(Debug)]
enum Code {
    Cpu(cpu::Compiled),
    Vulkan(vulkan::Kernel),
    Cuda(cuda::Kernel),
    Opencl(opencl::Kernel),
}

impl LoadedKernel {
    /// Whether its compiled code came from the kernel cache (memory or disk) rather than a
    /// compiler run: Some for GPU kernels and LLVM CPU code, None for Cranelift's (not cached).
    pub fn cache_hit(&self) -> Option<bool> {
        self.cache_hit
    }

    /// The manifest the kernel was loaded with.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The market the tape was recorded at (`manifest.input_defaults`).
    pub fn default_market(&self) -> Vec<f64> {
        self.manifest.input_defaults.clone()
    }

    /// Where this kernel's runs so far spent their time on a GPU (launch to completion, and the
    /// assembly of group partials), host-measured; zero on the CPU, whose threads compute and
    /// sum in one pass.
    pub fn timings(&self) -> gpu::Timings {
        match &self.code {
            Code::Cpu(_) => gpu::Timings::default(),
            Code::Vulkan(k) => k.timings(),
            Code::Cuda(k) => k.timings(),
            Code::Opencl(k) => k.timings(),
        }
    }
}

/// Refuses, before any driver sees it, a kernel that is empty or not text, whose manifest is not
/// its own (the fingerprint over source and manifest differs: another kernel's manifest, or either
/// edited), or whose manifest asks the driver for options other than the compiler's rules
/// (`manifest::compile_options`).
fn check_pair(source: &str, m: &Manifest) -> Result<(), RuntimeError> {
    if source.trim().is_empty() {
        return Err(RuntimeError::Manifest("the kernel source is empty".into()));
    }
    if let Some(at) = source.find('\0') {
        return Err(RuntimeError::Manifest(format!(
            "the kernel source is not text (a NUL byte at offset {at})"
        )));
    }
    if m.fingerprint != m.fingerprint_of(source) {
        return Err(RuntimeError::Manifest(format!(
            "the kernel and this manifest do not belong together (fingerprint {} expected, the \
             pair gives {}): the source or the manifest was edited, or one was swapped for another \
             kernel's; compile the tape again",
            short(&m.fingerprint),
            short(&m.fingerprint_of(source))
        )));
    }
    let wanted = manifest::compile_options(m.target);
    if m.compile_options != wanted {
        return Err(RuntimeError::Manifest(format!(
            "compile_options {:?} are not the {} compiler's ({wanted:?})",
            m.compile_options,
            m.target.name()
        )));
    }
    Ok(())
}

/// The first 12 hex digits of a hash, for messages.
fn short(h: &str) -> &str {
    h.get(..12).unwrap_or(h)
}

/// "CPU (N threads available)", or with the JIT that built a kernel "CPU (LLVM JIT, N ...)".
fn cpu_description(jit: Option<&str>) -> String {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    match jit {
        Some(j) => format!("CPU ({j}, {threads} threads available)"),
        None => format!("CPU ({threads} threads available)"),
    }
}

impl Backend {
    /// The backend for `target`, or `Unsupported` when this build has no driver for it.
    pub fn open(target: Target) -> Result<Backend, RuntimeError> {
        match target {
            Target::Cpu => Ok(Backend::Cpu),
            Target::Glsl => Ok(Backend::Vulkan(Box::new(vulkan::open()?))),
            Target::Cuda => Ok(Backend::Cuda(Box::new(cuda::open()?))),
            Target::Opencl => Ok(Backend::Opencl(Box::new(opencl::open()?))),
        }
    }

    /// The device in words (for logs and reports).
    pub fn describe(&self) -> String {
        match self {
            Backend::Cpu => cpu_description(None),
            Backend::Vulkan(d) => d.describe(),
            Backend::Cuda(d) => d.describe(),
            Backend::Opencl(d) => d.describe(),
        }
    }

    /// The device and, on the CPU, the JIT that built `kernel` (for reports): "CPU (LLVM JIT,
    /// 2 threads available)".
    pub fn describe_with(&self, kernel: &LoadedKernel) -> String {
        match &kernel.code {
            Code::Cpu(c) => cpu_description(Some(c.jit())),
            _ => self.describe(),
        }
    }

    /// The target this backend runs.
    pub fn target(&self) -> Target {
        match self {
            Backend::Cpu => Target::Cpu,
            Backend::Vulkan(_) => Target::Glsl,
            Backend::Cuda(_) => Target::Cuda,
            Backend::Opencl(_) => Target::Opencl,
        }
    }

    /// The most paths one range takes (the CPU: unlimited; GPUs: 2^27 per dispatch; PoCL 2^20).
    pub fn max_range(&self) -> u64 {
        match self {
            Backend::Cpu => u64::MAX,
            Backend::Vulkan(_) | Backend::Cuda(_) => gpu::MAX_PATHS_PER_DISPATCH,
            Backend::Opencl(d) => d.max_range(),
        }
    }

    /// Loads `source` (kernel text in the manifest's target language) for this backend; checks the
    /// manifest's version and target, that source and manifest belong together (`check_pair`),
    /// and the kernel against its ABI.
    pub fn load(&self, source: &str, manifest: &Manifest) -> Result<LoadedKernel, RuntimeError> {
        if manifest.manifest_version != manifest::MANIFEST_VERSION {
            return Err(RuntimeError::Manifest(format!(
                "version {} (this runtime reads version {})",
                manifest.manifest_version,
                manifest::MANIFEST_VERSION
            )));
        }
        if manifest.target != self.target() {
            return Err(RuntimeError::Manifest(format!(
                "target {} given to the {} backend",
                manifest.target.name(),
                self.target().name()
            )));
        }
        check_pair(source, manifest)?;
        let hits = gpu::cache::hits();
        let code = match self {
            Backend::Cpu => Code::Cpu(cpu::load(source, manifest)?),
            Backend::Vulkan(d) => Code::Vulkan(d.load(source, manifest)?),
            Backend::Cuda(d) => Code::Cuda(d.load(source, manifest)?),
            Backend::Opencl(d) => Code::Opencl(d.load(source, manifest)?),
        };
        let cache_hit = match &code {
            Code::Cpu(c) => c.cache_hit(),
            Code::Vulkan(k) => Some(k.cache_hit()),
            _ => Some(gpu::cache::hits() > hits),
        };
        Ok(LoadedKernel {
            manifest: manifest.clone(),
            code,
            cache_hit,
        })
    }

    /// Runs `paths` paths of `kernel` under `seed` at each market (one input vector each, in
    /// `manifest.inputs` order) and returns one report per market, in order. A kernel of M
    /// markets (`manifest.markets`, a fused ladder) runs them M at a time, the last group padded
    /// with copies of its last market; the markets of one group must agree on every input outside
    /// `manifest.ladder_inputs`. The bits of each report depend only on kernel, market, paths and
    /// seed (see the crate doc), whatever the grouping.
    pub fn run(
        &self,
        kernel: &LoadedKernel,
        markets: &[Vec<f64>],
        paths: u64,
        seed: u64,
        opts: &RunOptions,
    ) -> Result<Vec<Report>, RuntimeError> {
        if paths == 0 {
            return Err(ReportError::NoPaths.into());
        }
        check_options(opts)?;
        for (mi, market) in markets.iter().enumerate() {
            self.check_market(kernel, mi, market)?;
        }
        let m = &kernel.manifest;
        let fused = m.fused_markets();
        let mut reports = Vec::with_capacity(markets.len());
        for (g, group) in markets.chunks(fused).enumerate() {
            let first = g * fused;
            let mut values: Vec<f64> = group.iter().flatten().copied().collect();
            for _ in group.len()..fused {
                values.extend_from_slice(&group[group.len() - 1]);
            }
            check_group(m, first, &values)?;
            let shifts = self.shifts_of_group(kernel, &values, seed, opts)?;
            let inputs: Vec<f64> = values.iter().chain(&shifts).copied().collect();
            let sums = self.tiled_sums(
                kernel,
                &inputs,
                seed,
                paths,
                0..paths,
                opts,
                (first, markets.len()),
            )?;
            let mut group_reports = self.reports(kernel, &sums, &shifts)?;
            group_reports.truncate(group.len());
            reports.extend(group_reports);
        }
        Ok(reports)
    }

    /// The markets of one dispatch as the inputs buffer holds them: `market` is one market
    /// (given to every market of the kernel) or `manifest.markets` of them one after the other;
    /// checked as [`Backend::run`] checks them.
    fn group_values(
        &self,
        kernel: &LoadedKernel,
        market: &[f64],
    ) -> Result<Vec<f64>, RuntimeError> {
        let m = &kernel.manifest;
        let (n, fused) = (m.inputs.len(), m.fused_markets());
        let values = if market.len() == n {
            market.repeat(fused)
        } else if market.len() == n * fused {
            market.to_vec()
        } else {
            return Err(RuntimeError::Market {
                market: 0,
                problem: format!(
                    "{} values for {n} inputs{}",
                    market.len(),
                    if fused > 1 {
                        format!(" (or {} for the kernel's {fused} markets)", n * fused)
                    } else {
                        String::new()
                    }
                ),
            });
        };
        for (k, one) in values.chunks(n.max(1)).enumerate() {
            self.check_market(kernel, k, one)?;
        }
        check_group(m, 0, &values)?;
        Ok(values)
    }

    /// The shifts the kernel takes its squares about at `market` under `seed`
    /// (`manifest.shifts`, TAPE-FORMAT.md, Results): path 0's leaves of the sums they name, from
    /// one run of path 0 alone with every shift 0 (a leaf is 0 where path 0 is non-finite, so a
    /// shift is always finite). Deterministic: every host that splits a run computes the same.
    /// `market`: one market, or all of a fused kernel's markets (`manifest.markets` blocks of
    /// shifts come back, market by market).
    pub fn shifts(
        &self,
        kernel: &LoadedKernel,
        market: &[f64],
        seed: u64,
        opts: &RunOptions,
    ) -> Result<Vec<f64>, RuntimeError> {
        let values = self.group_values(kernel, market)?;
        self.shifts_of_group(kernel, &values, seed, opts)
    }

    fn shifts_of_group(
        &self,
        kernel: &LoadedKernel,
        values: &[f64],
        seed: u64,
        opts: &RunOptions,
    ) -> Result<Vec<f64>, RuntimeError> {
        let m = &kernel.manifest;
        if m.shifts.is_empty() {
            return Ok(Vec::new());
        }
        let quiet = RunOptions {
            progress: None,
            ..*opts
        };
        let path0 = self.sums_of(kernel, values, seed, 1, 0..1, &quiet, (0, 1))?;
        let width = m.sums.len();
        let mut shifts = Vec::with_capacity(m.shifts_len());
        for block in path0.chunks(width) {
            for name in &m.shifts {
                let s =
                    m.sums.iter().position(|x| x == name).ok_or_else(|| {
                        RuntimeError::Manifest(format!("shift {name} names no sum"))
                    })?;
                let x = block[s].total()?;
                // What the kernel reads: the value in its precision (a leaf already is one).
                shifts.push(match m.precision {
                    Precision::F32 => f64::from(x as f32),
                    Precision::F64 => x,
                });
            }
        }
        Ok(shifts)
    }

    /// The partial sums (one per entry of a row: `manifest.sums`, each market's in turn for a
    /// fused kernel) of paths `range` of a `paths`-path run at `market` (one market, or all of a
    /// fused kernel's) under `seed`, the squares about `shifts` ([`Backend::shifts`] of the same
    /// market and seed): `range.start` a multiple of 1024, `range.end` one too or `paths`.
    /// Merging the sums of ranges that tile `0..paths`, in any order and grouping, gives the bits
    /// of [`Backend::run`] (this is how a run is split across devices or machines).
    #[allow(clippy::too_many_arguments)]
    pub fn partial_sums(
        &self,
        kernel: &LoadedKernel,
        market: &[f64],
        shifts: &[f64],
        seed: u64,
        paths: u64,
        range: Range<u64>,
        opts: &RunOptions,
    ) -> Result<Vec<PartialSums>, RuntimeError> {
        check_options(opts)?;
        let values = self.group_values(kernel, market)?;
        if range.start >= range.end
            || range.end > paths
            || !range.start.is_multiple_of(PATH_ALIGN)
            || (range.end != paths && !range.end.is_multiple_of(PATH_ALIGN))
        {
            return Err(RuntimeError::Run(format!(
                "path range {range:?} of a {paths}-path run: it must be non-empty, inside the run, \
                 and start (and end, unless at the run's end) at a multiple of {PATH_ALIGN}"
            )));
        }
        let m = &kernel.manifest;
        let n_shifts = m.shifts_len();
        if shifts.len() != n_shifts || shifts.iter().any(|c| !c.is_finite()) {
            return Err(RuntimeError::Run(format!(
                "{} shifts for a kernel with {n_shifts}, all finite",
                shifts.len(),
            )));
        }
        let inputs: Vec<f64> = values.iter().chain(shifts).copied().collect();
        self.tiled_sums(kernel, &inputs, seed, paths, range, opts, (0, 1))
    }

    /// Prepares `kernel` for runs of `paths` paths: allocates now what their first step would
    /// (Vulkan: the device and readback buffers and the dispatch objects; the other backends
    /// allocate little per run and do nothing here), so that a timed run measures the run.
    /// Changes no result.
    pub fn reserve(&self, kernel: &LoadedKernel, paths: u64) -> Result<(), RuntimeError> {
        match (self, &kernel.code) {
            (Backend::Vulkan(d), Code::Vulkan(k)) if paths > 0 => {
                let step = self.step_paths(kernel, &RunOptions::default());
                Ok(d.reserve(k, paths, 0..paths.min(step))?)
            }
            _ => Ok(()),
        }
    }

    /// The most paths one step of `tiled_sums` covers.
    fn step_paths(&self, kernel: &LoadedKernel, opts: &RunOptions) -> u64 {
        let step = match (self, opts.chunk_paths) {
            (Backend::Cpu, _) => self.max_range(),
            (_, None) => self.max_range().min(gpu::partials_paths(kernel.manifest())),
            (_, Some(c)) => c.min(self.max_range()),
        };
        (step.max(PATH_ALIGN) / PATH_ALIGN) * PATH_ALIGN
    }

    /// The partial sums of `range`, computed in steps no longer than the backend takes at once
    /// (GPU backends take `chunk_paths` as the most paths one step covers; the CPU backend takes
    /// a whole range and spreads it over threads in chunks of that many paths).
    #[allow(clippy::too_many_arguments)]
    fn tiled_sums(
        &self,
        kernel: &LoadedKernel,
        market: &[f64],
        seed: u64,
        paths: u64,
        range: Range<u64>,
        opts: &RunOptions,
        market_of: (usize, usize),
    ) -> Result<Vec<PartialSums>, RuntimeError> {
        let step = self.step_paths(kernel, opts);
        let mut sums = self.empty_sums(kernel, paths)?;
        let mut start = range.start;
        while start < range.end {
            let end = start.saturating_add(step).min(range.end);
            let part = self.sums_of(kernel, market, seed, paths, start..end, opts, market_of)?;
            merge_into(&mut sums, &part)?;
            start = end;
        }
        Ok(sums)
    }

    /// The report of complete sums (one per `manifest.sums` entry, covering every path) whose
    /// squares were taken about `shifts` (one per `manifest.shifts` entry): a one-market kernel's
    /// ([`Backend::reports`] for a fused one).
    pub fn report(
        &self,
        kernel: &LoadedKernel,
        sums: &[PartialSums],
        shifts: &[f64],
    ) -> Result<Report, RuntimeError> {
        let mut r = self.reports(kernel, sums, shifts)?;
        if r.len() != 1 {
            return Err(RuntimeError::Run(format!(
                "one report asked of a kernel of {} markets (use reports)",
                r.len()
            )));
        }
        Ok(r.remove(0))
    }

    /// One report per market of a row of complete sums (`manifest.markets` blocks of
    /// `manifest.sums`, covering every path) whose squares were taken about `shifts`
    /// (`manifest.markets` blocks of `manifest.shifts`).
    pub fn reports(
        &self,
        kernel: &LoadedKernel,
        sums: &[PartialSums],
        shifts: &[f64],
    ) -> Result<Vec<Report>, RuntimeError> {
        let m = &kernel.manifest;
        let row = cpu::row_len(m)?;
        let markets = m.fused_markets();
        if sums.len() != row || shifts.len() != m.shifts_len() {
            return Err(RuntimeError::Run(format!(
                "{} sums and {} shifts for a kernel with {row} and {}",
                sums.len(),
                shifts.len(),
                m.shifts_len()
            )));
        }
        let layout = m.layout().map_err(RuntimeError::Manifest)?;
        let inputs: Vec<String> = if m.mode.has_greeks() {
            m.inputs.clone()
        } else {
            Vec::new()
        };
        let per_output = m.sums.len() / m.outputs.len();
        let mut reports = Vec::with_capacity(markets);
        for (block, shifts) in sums.chunks(m.sums.len()).zip(
            shifts
                .chunks(m.shifts.len().max(1))
                .chain(std::iter::repeat(&[][..])),
        ) {
            let mut columns = block.to_vec();
            let outputs = layout
                .iter()
                .zip(columns.chunks_mut(per_output))
                .map(|(l, c)| {
                    report::OutputSums::from_columns(
                        c,
                        l.greeks.len(),
                        !l.greek_sq.is_empty(),
                        shifts[l.shifts.clone()].to_vec(),
                    )
                })
                .collect::<Result<Vec<_>, _>>()?;
            reports.push(Report::from_sums(&m.outputs, &inputs, &outputs)?);
        }
        Ok(reports)
    }

    fn check_market(
        &self,
        kernel: &LoadedKernel,
        index: usize,
        market: &[f64],
    ) -> Result<(), RuntimeError> {
        let n_inputs = kernel.manifest.inputs.len();
        if market.len() != n_inputs {
            return Err(RuntimeError::Market {
                market: index,
                problem: format!("{} values for {} inputs", market.len(), n_inputs),
            });
        }
        if let Some((i, x)) = market.iter().enumerate().find(|(_, x)| !x.is_finite()) {
            return Err(RuntimeError::Market {
                market: index,
                problem: format!("{} = {x} is not finite", kernel.manifest.inputs[i]),
            });
        }
        // An f32 kernel rounds its inputs to f32: a value past f32's range would be an infinity.
        if kernel.manifest.precision == Precision::F32 {
            if let Some((i, x)) = market
                .iter()
                .enumerate()
                .find(|(_, x)| !(**x as f32).is_finite())
            {
                return Err(RuntimeError::Market {
                    market: index,
                    problem: format!(
                        "{} = {x:e} is outside the f32 kernel's range (|x| <= {:e}); use an f64 kernel",
                        kernel.manifest.inputs[i],
                        f32::MAX
                    ),
                });
            }
        }
        Ok(())
    }

    fn empty_sums(
        &self,
        kernel: &LoadedKernel,
        paths: u64,
    ) -> Result<Vec<PartialSums>, RuntimeError> {
        let row = cpu::row_len(&kernel.manifest)?;
        Ok((0..row)
            .map(|_| PartialSums::empty(paths))
            .collect::<Result<_, _>>()?)
    }

    /// The partial sums of one range no longer than `max_range`.
    #[allow(clippy::too_many_arguments)]
    fn sums_of(
        &self,
        kernel: &LoadedKernel,
        market: &[f64],
        seed: u64,
        paths: u64,
        range: Range<u64>,
        opts: &RunOptions,
        market_of: (usize, usize),
    ) -> Result<Vec<PartialSums>, RuntimeError> {
        let end = range.end;
        let sums = match (self, &kernel.code) {
            (Backend::Cpu, Code::Cpu(c)) => {
                return cpu_range_sums(c, market, seed, paths, range, opts, market_of)
            }
            (Backend::Vulkan(d), Code::Vulkan(k)) => d.run_range(k, market, seed, paths, range)?,
            (Backend::Cuda(d), Code::Cuda(k)) => d.run_range(k, market, seed, paths, range)?,
            (Backend::Opencl(d), Code::Opencl(k)) => d.run_range(k, market, seed, paths, range)?,
            (b, k) => {
                return Err(RuntimeError::WrongBackend {
                    kernel: k.backend_name(),
                    backend: b.name(),
                })
            }
        };
        // A GPU range finishes whole; the CPU reports per chunk.
        if let Some(progress) = opts.progress {
            let (market, markets) = market_of;
            progress(Progress {
                market,
                markets,
                done: end,
                paths,
            });
        }
        Ok(sums)
    }

    fn name(&self) -> &'static str {
        match self {
            Backend::Cpu => "cpu",
            Backend::Vulkan(_) => "vulkan",
            Backend::Cuda(_) => "cuda",
            Backend::Opencl(_) => "opencl",
        }
    }
}

impl Code {
    fn backend_name(&self) -> &'static str {
        match self {
            Code::Cpu(_) => "cpu",
            Code::Vulkan(_) => "vulkan",
            Code::Cuda(_) => "cuda",
            Code::Opencl(_) => "opencl",
        }
    }
}

fn check_options(opts: &RunOptions) -> Result<(), RuntimeError> {
    if let Some(c) = opts.chunk_paths {
        if c == 0 || c % PATH_ALIGN != 0 {
            return Err(RuntimeError::Run(format!(
                "chunk of {c} paths is not a positive multiple of {PATH_ALIGN}"
            )));
        }
    }
    if opts.threads == Some(0) {
        return Err(RuntimeError::Run("0 threads".into()));
    }
    Ok(())
}

/// Checks that the markets of one dispatch (`values`: `manifest.markets` rows of inputs; the
/// first is market `first` of the run) agree on every input that is not in
/// `manifest.ladder_inputs`: the kernel reads those from the first row only.
fn check_group(m: &Manifest, first: usize, values: &[f64]) -> Result<(), RuntimeError> {
    let n = m.inputs.len();
    if m.markets <= 1 || n == 0 {
        return Ok(());
    }
    for (k, row) in values.chunks(n).enumerate().skip(1) {
        for (i, name) in m.inputs.iter().enumerate() {
            if !m.ladder_inputs.contains(name) && row[i].to_bits() != values[i].to_bits() {
                return Err(RuntimeError::Market {
                    market: first + k,
                    problem: format!(
                        "{name} = {} differs from market {first}'s {}, and this kernel fuses \
                         markets that differ only in {:?} (compile it with --ladder-inputs \
                         naming {name})",
                        row[i], values[i], m.ladder_inputs
                    ),
                });
            }
        }
    }
    Ok(())
}

fn merge_into(sums: &mut [PartialSums], part: &[PartialSums]) -> Result<(), RuntimeError> {
    for (s, p) in sums.iter_mut().zip(part) {
        s.merge(p)?;
    }
    Ok(())
}

/// The default chunk: about 8 chunks per thread, between 1024 and 65536 paths, 1024-aligned.
fn default_chunk(len: u64, threads: usize) -> u64 {
    let per = len / (threads as u64 * 8).max(1);
    (per.div_ceil(PATH_ALIGN) * PATH_ALIGN).clamp(PATH_ALIGN, 64 * PATH_ALIGN)
}

/// The most bytes of per-path leaves one CPU thread holds at a time: a chunk is run in pieces
/// of at most this many rows, so a run's memory is bounded by threads x this plus the partial
/// sums (a few blocks per sum), whatever the path count or the tape's width.
const CPU_LEAVES_BYTES: usize = 8 << 20;

/// The stack of each thread a CPU kernel runs on (reserved, and touched only as deep as the
/// kernel's frame goes): the 60,024-node unrolled reverse Asian overflowed a 2 MiB thread.
const CPU_KERNEL_STACK: usize = 256 << 20;

/// Paths per kernel call on one CPU thread: all of a chunk unless its leaves would pass
/// `CPU_LEAVES_BYTES`, then the largest power of two that fits (at least one path).
fn cpu_piece_paths(chunk: u64, row: usize) -> u64 {
    let fit = (CPU_LEAVES_BYTES / (row.max(1) * 8)).max(1) as u64;
    if fit >= chunk {
        chunk
    } else {
        1 << fit.ilog2()
    }
}

/// Runs `range` on `kernel` over threads in aligned chunks, a piece of a chunk at a time; each
/// chunk's leaves go straight into partial sums, merged into the run's as the chunk ends (the
/// tree's canonical blocks give the same bits in any order, and siblings merge at once, so the
/// run's sums hold a few blocks each, whatever the path count).
fn cpu_range_sums(
    kernel: &cpu::Compiled,
    market: &[f64],
    seed: u64,
    paths: u64,
    range: Range<u64>,
    opts: &RunOptions,
    (market_index, markets): (usize, usize),
) -> Result<Vec<PartialSums>, RuntimeError> {
    let row = kernel.row_len();
    let len = range.end - range.start;
    let threads = opts
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let chunk = opts
        .chunk_paths
        .unwrap_or_else(|| default_chunk(len, threads));
    let piece = cpu_piece_paths(chunk, row);
    // Chunk boundaries: multiples of `chunk` from the range start (itself aligned), and the end.
    let n_chunks = len.div_ceil(chunk);
    let next = AtomicU64::new(0);
    let done = AtomicU64::new(0);
    let empty = || -> Result<Vec<PartialSums>, RuntimeError> {
        (0..row)
            .map(|_| PartialSums::empty(paths).map_err(RuntimeError::from))
            .collect()
    };
    // The run's sums, or the first error (which stops every worker at its next chunk).
    let run: Mutex<Result<Vec<PartialSums>, RuntimeError>> = Mutex::new(empty());
    let lock = || run.lock().unwrap_or_else(|e| e.into_inner());
    let work = || {
        let mut out = Vec::new();
        loop {
            if lock().is_err() {
                return;
            }
            let c = next.fetch_add(1, Ordering::Relaxed);
            if c >= n_chunks {
                return;
            }
            let a = range.start + c * chunk;
            let b = (a + chunk).min(range.end);
            let chunk_sums = empty().and_then(|mut sums| {
                let mut p = a;
                while p < b {
                    let q = (p + piece).min(b);
                    out.clear();
                    out.resize((q - p) as usize * row, 0.0);
                    kernel.run(market, seed, p, &mut out)?;
                    PartialSums::add_rows(&mut sums, p, &mut out)?;
                    p = q;
                }
                Ok(sums)
            });
            {
                let mut run = lock();
                let merged = match (&mut *run, chunk_sums) {
                    (Ok(sums), Ok(part)) => merge_into(sums, &part),
                    (Ok(_), Err(e)) => Err(e),
                    (Err(_), _) => return,
                };
                if let Err(e) = merged {
                    *run = Err(e);
                    return;
                }
            }
            let d = done.fetch_add(b - a, Ordering::Relaxed) + (b - a);
            if let Some(progress) = opts.progress {
                progress(Progress {
                    market: market_index,
                    markets,
                    done: range.start + d,
                    paths,
                });
            }
        }
    };
    let workers = threads.min(n_chunks.max(1) as usize);
    // Every worker on a thread of its own with CPU_KERNEL_STACK: a long unrolled kernel's frame
    // outgrows a spawned thread's 2 MiB (the 10,000-step Asian's reverse kernel did) and, longer
    // still, the caller's 8 MiB.
    let spawned = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers.max(1))
            .map(|_| {
                std::thread::Builder::new()
                    .name("nablac-cpu".into())
                    .stack_size(CPU_KERNEL_STACK)
                    .spawn_scoped(s, work)
            })
            .collect();
        handles.into_iter().try_for_each(|h| h.map(|_| ()))
    });
    if let Err(e) = spawned {
        return Err(RuntimeError::Host(format!(
            "no thread for the CPU kernel: {e}"
        )));
    }
    run.into_inner().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CPU thread's leaves stay within `CPU_LEAVES_BYTES` whatever the tape's width (one path
    /// at a time past it), and usual tapes run a whole chunk per call.
    #[test]
    fn a_thread_s_leaves_are_bounded_whatever_the_width() {
        let chunk = 64 * PATH_ALIGN;
        assert_eq!(cpu_piece_paths(chunk, 13), chunk);
        for row in [13usize, 1_403, 20_003, 1_000_000, 100_000_000] {
            let piece = cpu_piece_paths(chunk, row);
            assert!(piece.is_power_of_two() && piece <= chunk, "{row}: {piece}");
            assert!(
                piece == 1 || piece as usize * row * 8 <= CPU_LEAVES_BYTES,
                "{row}: {piece}"
            );
            // And not needlessly small: twice the piece would not fit (or it is the chunk).
            assert!(piece == chunk || 2 * piece as usize * row * 8 > CPU_LEAVES_BYTES);
        }
    }
}

pub mod cuda;
pub mod gpu;
pub mod opencl;
pub mod vulkan;

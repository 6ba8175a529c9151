//! What the GPU backends (Vulkan, CUDA) share: the error type, how a path range becomes
//! dispatches, how group partials become [`PartialSums`], and the compiled-kernel cache.
//!
//! Contract (compiler/src/emit/mod.rs is the kernel ABI): a launch covers paths
//! `[path_base, path_base + groups * WG)` with `path_base` a multiple of 1024 (hence of WG);
//! `partials[group * n_sums + s]` is the pairwise sum `S(path_base + group * WG, WG)` of sum `s`,
//! so each group is one aligned block of the run's summation tree and the blocks rebuild, through
//! `PartialSums::from_blocks`, the single-run bits whatever the chunking.

use crate::manifest::{Manifest, Precision};
use crate::report::{tree_sum_rows, Block, PartialSums, ReportError};
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// The most paths one dispatch covers (the ABI's limit).
pub const MAX_PATHS_PER_DISPATCH: u64 = 1 << 27;

/// The most bytes of group partials one step of a GPU run holds (on the device and on the host):
/// wide tapes run in more, shorter steps, so memory does not grow with the paths x sums.
pub const PARTIALS_BYTES: u64 = 256 << 20;

/// Paths one step of a run of `m` covers so that its group partials stay within
/// [`PARTIALS_BYTES`]: a multiple of 1024 (at least 1024); for the usual tapes, more than
/// [`MAX_PATHS_PER_DISPATCH`] (no limit).
pub fn partials_paths(m: &Manifest) -> u64 {
    let group_bytes = (m.row_len() as u64).max(1) * 8;
    let paths = PARTIALS_BYTES / group_bytes * u64::from(m.workgroup_size.max(1));
    (paths / 1024 * 1024).max(1024)
}

/// Why a GPU backend could not open, compile or run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GpuError {
    /// The driver or a tool is not installed (the backend is unusable here, not broken).
    #[error("{0}")]
    Unavailable(String),
    /// A driver call failed.
    #[error("{driver} on {device}: {what} failed: {message}")]
    Driver {
        driver: &'static str,
        device: String,
        what: String,
        message: String,
    },
    /// The kernel did not compile.
    #[error("{compiler} could not compile kernel {entry} for {device}: {log}")]
    Compile {
        compiler: &'static str,
        device: String,
        entry: String,
        log: String,
    },
    /// The caller asked for something the kernel ABI cannot do.
    #[error("invalid launch: {0}")]
    Launch(String),
    /// The group partials did not form valid partial sums.
    /// Not a `#[from]`/source: the message holds it, so a cause chain prints it once.
    #[error("partial sums: {0}")]
    Report(ReportError),
}

impl From<ReportError> for GpuError {
    fn from(e: ReportError) -> Self {
        GpuError::Report(e)
    }
}

/// The line of a compiler's log that a `GpuError::Compile` quotes: the first that says "error"
/// (any case: NVRTC and OpenCL write `error`, glslang `ERROR`), else the whole log trimmed, else
/// `otherwise()` (an empty log).
pub fn log_line(log: &str, otherwise: impl FnOnce() -> String) -> String {
    match log
        .lines()
        .find(|l| l.to_ascii_lowercase().contains("error"))
    {
        Some(l) => l.to_string(),
        None if !log.trim().is_empty() => log.trim().to_string(),
        None => otherwise(),
    }
}

/// Where a loaded kernel's run time went, summed over every run so far (host-measured).
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct Timings {
    /// From each launch to its completion: the device's work plus launch latency (no uploads,
    /// downloads or allocations).
    pub device_s: f64,
    /// Turning group partials into the run's partial sums (`assemble`).
    pub assemble_s: f64,
    /// Copying inputs to the device and group partials back (uploads, downloads, their waits).
    pub transfer_s: f64,
    /// Creating and freeing buffers and the launch's driver objects (Vulkan: pools, fences).
    pub allocate_s: f64,
}

/// The accumulator behind [`Timings`], one per loaded GPU kernel.
#[derive(Debug, Default)]
pub struct Clock {
    device_ns: AtomicU64,
    assemble_ns: AtomicU64,
    transfer_ns: AtomicU64,
    allocate_ns: AtomicU64,
}

impl Clock {
    /// Runs `f`, adding its wall time to `counter`.
    fn timed<T>(counter: &AtomicU64, f: impl FnOnce() -> T) -> T {
        let t = Instant::now();
        let out = f();
        let d = t.elapsed();
        counter.fetch_add(d.as_nanos().min(u64::MAX as u128) as u64, Ordering::Relaxed);
        out
    }

    /// Runs `f` (a launch and the wait for its completion), counting its time as device time.
    pub fn device<T>(&self, f: impl FnOnce() -> T) -> T {
        Self::timed(&self.device_ns, f)
    }

    /// Runs `f` (an assembly of partials), counting its time as assembly time.
    pub fn assemble<T>(&self, f: impl FnOnce() -> T) -> T {
        Self::timed(&self.assemble_ns, f)
    }

    /// Runs `f` (an upload or a download and its wait), counting its time as transfer time.
    pub fn transfer<T>(&self, f: impl FnOnce() -> T) -> T {
        Self::timed(&self.transfer_ns, f)
    }

    /// Runs `f` (creating or freeing buffers or driver objects), counting its time as allocation.
    pub fn allocate<T>(&self, f: impl FnOnce() -> T) -> T {
        Self::timed(&self.allocate_ns, f)
    }

    pub fn read(&self) -> Timings {
        let s = |c: &AtomicU64| c.load(Ordering::Relaxed) as f64 * 1e-9;
        Timings {
            device_s: s(&self.device_ns),
            assemble_s: s(&self.assemble_ns),
            transfer_s: s(&self.transfer_ns),
            allocate_s: s(&self.allocate_ns),
        }
    }
}

/// One dispatch: `groups` workgroups starting at path `base`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Dispatch {
    pub base: u64,
    pub groups: u32,
}

/// Splits `range` of a `paths`-path run into dispatches of at most `max_paths` paths each.
/// Guarantees: every base is a multiple of 1024; the dispatches cover exactly `range` (the last
/// group may run past `range.end` only when `range.end == paths`, where the kernel adds 0).
pub fn plan_dispatches(
    wg: u32,
    paths: u64,
    range: &Range<u64>,
    max_paths: u64,
) -> Result<Vec<Dispatch>, GpuError> {
    let bad = |m: String| Err(GpuError::Launch(m));
    if !wg.is_power_of_two() || wg > 1024 {
        return bad(format!(
            "workgroup size {wg} is not a power of two in 1..=1024"
        ));
    }
    if paths == 0 || range.start >= range.end || range.end > paths {
        return bad(format!(
            "range {range:?} is empty or not inside the run's {paths} paths"
        ));
    }
    if !range.start.is_multiple_of(1024) {
        return bad(format!(
            "range start {} is not a multiple of 1024",
            range.start
        ));
    }
    if range.end != paths && !range.end.is_multiple_of(wg as u64) {
        return bad(format!("range end {} is neither the run's end ({paths}) nor a multiple of the workgroup size {wg}", range.end));
    }
    let chunk = (max_paths.min(MAX_PATHS_PER_DISPATCH) / 1024) * 1024;
    if chunk == 0 {
        return bad(format!(
            "the device allows only {max_paths} paths per dispatch (fewer than 1024)"
        ));
    }
    let mut out = Vec::new();
    let mut base = range.start;
    while base < range.end {
        let n = (range.end - base).min(chunk);
        out.push(Dispatch {
            base,
            groups: n.div_ceil(wg as u64) as u32,
        });
        base += n;
    }
    Ok(out)
}

/// One kernel parameter's value in a launch, as the manifest's parameter table names it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Arg {
    /// The input values buffer (role `input`).
    Inputs,
    /// The group partials buffer (role `output`).
    Partials,
    /// The scratch buffer (role `scratch`).
    Scratch,
    /// A u32 scalar (role `value`, or `push` in GLSL).
    Word(u32),
}

/// The value of scalar parameter `name` for dispatch `d` of a `paths`-path run under `seed` on
/// workgroups of `wg` threads (the names and meanings are the manifest's parameter docs).
fn word(name: &str, d: Dispatch, wg: u32, paths: u64, seed: u64) -> Option<u32> {
    Some(match name {
        "path_base_lo" => d.base as u32,
        "path_base_hi" => (d.base >> 32) as u32,
        "paths_lo" => paths as u32,
        "paths_hi" => (paths >> 32) as u32,
        "seed_lo" => seed as u32,
        "seed_hi" => (seed >> 32) as u32,
        "zero" => 0,
        "invocations" => d.groups.checked_mul(wg)?,
        _ => return None,
    })
}

/// Every parameter of the kernel with the role `roles` admits, as `(binding, Arg)` in binding
/// order: what a host binds where, read from the manifest's parameter table (never from fixed
/// positions). Fails on a parameter this runtime does not know how to fill.
pub fn arguments(
    m: &Manifest,
    roles: &[&str],
    d: Dispatch,
    paths: u64,
    seed: u64,
) -> Result<Vec<(u32, Arg)>, GpuError> {
    let mut out = Vec::new();
    for p in m.params.iter().filter(|p| roles.contains(&p.role.as_str())) {
        let arg = match p.role.as_str() {
            "input" => Arg::Inputs,
            "output" => Arg::Partials,
            "scratch" => Arg::Scratch,
            "value" | "push" if p.ty == "u32" => {
                Arg::Word(word(&p.name, d, m.workgroup_size, paths, seed).ok_or_else(|| {
                    GpuError::Launch(format!(
                        "the kernel's parameter `{}` (binding {}) is not one this runtime can fill",
                        p.name, p.binding
                    ))
                })?)
            }
            _ => {
                return Err(GpuError::Launch(format!(
                    "the kernel's parameter `{}` has role `{}` and type `{}`, which this runtime cannot bind",
                    p.name, p.role, p.ty
                )))
            }
        };
        out.push((p.binding, arg));
    }
    out.sort_by_key(|&(binding, _)| binding);
    Ok(out)
}

/// The kernel arguments of a CUDA or OpenCL kernel in argument order; fails unless the
/// manifest's argument indices are exactly 0, 1, 2, ...
pub fn kernel_arguments(
    m: &Manifest,
    d: Dispatch,
    paths: u64,
    seed: u64,
) -> Result<Vec<Arg>, GpuError> {
    let args = arguments(m, &["input", "output", "scratch", "value"], d, paths, seed)?;
    for (k, &(binding, _)) in args.iter().enumerate() {
        if binding as usize != k {
            return Err(GpuError::Launch(format!(
                "the manifest's kernel arguments are not numbered 0, 1, 2, ... (argument {k} has binding {binding})"
            )));
        }
    }
    Ok(args.into_iter().map(|(_, a)| a).collect())
}

/// The push-constant bytes of a GLSL kernel: each `push` parameter's u32 at its byte offset.
pub fn push_constants(
    m: &Manifest,
    d: Dispatch,
    paths: u64,
    seed: u64,
) -> Result<Vec<u8>, GpuError> {
    let mut bytes = Vec::new();
    for (offset, arg) in arguments(m, &["push"], d, paths, seed)? {
        let Arg::Word(w) = arg else {
            unreachable!("push parameters are words")
        };
        let at = offset as usize;
        if !at.is_multiple_of(4) || at > 4096 {
            return Err(GpuError::Launch(format!(
                "push constant at byte offset {offset} is not a u32 slot of the block"
            )));
        }
        if bytes.len() < at + 4 {
            bytes.resize(at + 4, 0);
        }
        bytes[at..at + 4].copy_from_slice(&w.to_ne_bytes());
    }
    Ok(bytes)
}

/// The inputs buffer's values: the markets then the shifts (`Manifest::inputs_len`), given whole
/// or as the markets alone (the shifts then 0); fails on any other length.
pub fn input_values(manifest: &Manifest, inputs: &[f64]) -> Result<Vec<f64>, GpuError> {
    let (n, full) = (manifest.market_values_len(), manifest.inputs_len());
    if inputs.len() != n && inputs.len() != full {
        return Err(GpuError::Launch(format!(
            "{} input values for the kernel's {n} market values and {} shifts",
            inputs.len(),
            full - n
        )));
    }
    let mut v = inputs.to_vec();
    v.resize(full, 0.0);
    Ok(v)
}

/// The inputs buffer's bytes in the kernel's precision ([`input_values`]).
pub fn input_bytes(manifest: &Manifest, inputs: &[f64]) -> Result<Vec<u8>, GpuError> {
    let inputs = &input_values(manifest, inputs)?;
    Ok(match manifest.precision {
        Precision::F32 => inputs
            .iter()
            .flat_map(|&x| (x as f32).to_ne_bytes())
            .collect(),
        Precision::F64 => inputs.iter().flat_map(|&x| x.to_ne_bytes()).collect(),
    })
}

/// Runs `launch` on each of `dispatches` in order, each filling its rows (`groups * n_sums`
/// f64s) of the host table `table` (grown to fit, never shrunk), then [`assemble_rows`] sums the
/// table in place. The one loop the CUDA and OpenCL backends share.
///
/// A whole run in one dispatch (every run up to 2^27 paths) is summed on the device first:
/// `launch` then gets the [`DeviceTree`] to apply to its partials and fills only that tree's
/// rows (one per block of `2^log2_block` groups), which the host finishes. Same tree, same bits
/// (see [`DeviceTree`]); the download shrinks `2^log2_block`-fold.
pub fn run_dispatches(
    manifest: &Manifest,
    paths: u64,
    dispatches: &[Dispatch],
    table: &mut Vec<f64>,
    clock: &Clock,
    mut launch: impl FnMut(Dispatch, Option<DeviceTree>, &mut [f64]) -> Result<(), GpuError>,
) -> Result<Vec<PartialSums>, GpuError> {
    let n_sums = manifest.row_len();
    if let Some((d, tree)) = whole_run_tree(manifest, paths, dispatches) {
        let n = tree.out_rows() as usize * n_sums;
        if table.len() < n {
            *table = vec![0.0; n];
        }
        launch(d, Some(tree), &mut table[..n])?;
        return clock.assemble(|| whole_run_sums(manifest, paths, &mut table[..n]));
    }
    let total: usize = dispatches.iter().map(|d| d.groups as usize * n_sums).sum();
    if table.len() < total {
        *table = vec![0.0; total];
    }
    let mut at = 0;
    for &d in dispatches {
        let n = d.groups as usize * n_sums;
        launch(d, None, &mut table[at..at + n])?;
        at += n;
    }
    clock.assemble(|| assemble_rows(manifest, paths, dispatches, &mut table[..total]))
}

/// The device's part of a whole run's tree: its one dispatch, and the tree over that dispatch's
/// group rows that lie below `paths` (None: several dispatches, a range, or a single group).
pub fn whole_run_tree(
    manifest: &Manifest,
    paths: u64,
    dispatches: &[Dispatch],
) -> Option<(Dispatch, DeviceTree)> {
    let wg = u64::from(manifest.workgroup_size);
    match *dispatches {
        [d] if d.base == 0 && d.groups as u64 * wg >= paths => {
            let groups = u32::try_from(paths.div_ceil(wg)).ok()?;
            DeviceTree::over(groups, manifest.row_len()).map(|t| (d, t))
        }
        _ => None,
    }
}

/// Rows of group partials summed on the device, in the fixed tree of TAPE-FORMAT.md: output row
/// `b`, column `c` is `S` over rows `[b 2^log2_block, (b + 1) 2^log2_block)` of column `c`, rows
/// at or past `rows` taken as -0.0 (padding, as on the host: it adds nothing). Each output row is then an
/// aligned subtree of the host's tree over the `rows` rows (`2^log2_block` is at most
/// `rows.next_power_of_two()`), so [`tree_sum_rows`] of the outputs has the bits of
/// `tree_sum_rows` of the rows. The kernels ([`DeviceTree::CUDA`], [`DeviceTree::OPENCL`],
/// [`DeviceTree::GLSL`]) run one thread per output value. Timings: CUDA and OpenCL count the
/// tree's launch as assembly; Vulkan submits it with the kernel, so it counts as device time.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct DeviceTree {
    /// The group rows summed (the rest of the buffer is padding past the run).
    pub rows: u32,
    /// Values a row (`manifest.row_len()`).
    pub width: u32,
    pub log2_block: u32,
}

impl DeviceTree {
    /// Groups a device block sums at most: 128 (16M paths at WG 128: 1,024 rows to download).
    pub const LOG2_BLOCK: u32 = 7;

    /// The tree over `rows` rows of `width` values; None below two rows (nothing to sum).
    pub fn over(rows: u32, width: usize) -> Option<DeviceTree> {
        let width = u32::try_from(width).ok().filter(|&w| w > 0)?;
        // The kernels index rows in 32 bits.
        let fits = (u64::from(rows).next_power_of_two() * u64::from(width)) < 1 << 32;
        (rows >= 2 && fits).then(|| DeviceTree {
            rows,
            width,
            log2_block: Self::LOG2_BLOCK.min(rows.next_power_of_two().trailing_zeros()),
        })
    }

    /// The rows it leaves for the host.
    pub fn out_rows(&self) -> u32 {
        self.rows.div_ceil(1 << self.log2_block)
    }

    /// Threads to launch: one per output value.
    pub fn threads(&self) -> u64 {
        u64::from(self.out_rows()) * u64::from(self.width)
    }

    /// The kernels' arguments after the two buffers (rows in, sums out), in order.
    pub fn words(&self) -> [u32; 4] {
        [self.rows, self.width, self.log2_block, self.out_rows()]
    }

    /// The kernels' entry point.
    pub const ENTRY: &'static str = "nablac_tree_rows";

    /// Threads a workgroup of the kernels (GLSL's `local_size_x` is this literal).
    pub const WG: u32 = 64;

    /// CUDA C (NVRTC).
    pub const CUDA: &'static str = concat!(
        "typedef unsigned int uint;\n#define WIDE(x) ((unsigned long long)(x))\n#define PRECISE\n",
        "extern \"C\" __global__ void nablac_tree_rows(const double* __restrict__ rows, ",
        "double* __restrict__ sums, uint n, uint width, uint log2_block, uint n_out) {\n",
        "  uint i = blockIdx.x * blockDim.x + threadIdx.x;\n",
        include_str!("tree_rows.inc"),
        "}\n"
    );

    /// OpenCL C 1.2 (doubles: cl_khr_fp64, which every nablac kernel needs for its sums).
    pub const OPENCL: &'static str = concat!(
        "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n#define WIDE(x) ((ulong)(x))\n#define PRECISE\n",
        "__kernel void nablac_tree_rows(__global const double* rows, __global double* sums, ",
        "uint n, uint width, uint log2_block, uint n_out) {\n",
        "  uint i = get_global_id(0);\n",
        include_str!("tree_rows.inc"),
        "}\n"
    );

    /// GLSL 4.50 for Vulkan (bindings 0: the rows, 1: the outputs; the four words as push
    /// constants). `precise`: no compiler may contract or reorder its adds. 32-bit indexes
    /// (`DeviceTree::over` keeps them in range).
    pub const GLSL: &'static str = concat!(
        "#version 450\nlayout(local_size_x = 64) in;\n",
        // Signed zeros kept in f64 (Vulkan may drop them otherwise): the padding is -0.0.
        "#extension GL_EXT_spirv_intrinsics : require\n",
        "spirv_execution_mode(extensions = [\"SPV_KHR_float_controls\"], capabilities = [4466], 4461, 64);\n",
        "layout(std430, set = 0, binding = 0) readonly buffer Rows { double rows[]; };\n",
        "layout(std430, set = 0, binding = 1) writeonly buffer Sums { double sums[]; };\n",
        "layout(push_constant) uniform Push { uint n_; uint width_; uint log2_block_; uint n_out_; } pc;\n",
        "#define n pc.n_\n#define width pc.width_\n#define log2_block pc.log2_block_\n#define n_out pc.n_out_\n",
        "#define WIDE(x) (x)\n#define PRECISE precise\n",
        "void main() {\n",
        "  uint i = gl_GlobalInvocationID.x;\n",
        include_str!("tree_rows.inc"),
        "}\n"
    );
}

/// Turns each dispatch's partials (`groups * n_sums` f64s) into one `PartialSums` per sum.
pub fn assemble(
    manifest: &Manifest,
    paths: u64,
    parts: Vec<(Dispatch, Vec<f64>)>,
) -> Result<Vec<PartialSums>, GpuError> {
    let n_sums = manifest.row_len();
    for (d, partials) in &parts {
        if partials.len() != d.groups as usize * n_sums {
            return Err(GpuError::Launch(format!(
                "{} partials for {} groups of {n_sums} sums",
                partials.len(),
                d.groups
            )));
        }
    }
    let dispatches: Vec<Dispatch> = parts.iter().map(|(d, _)| *d).collect();
    let mut parts = parts.into_iter().map(|(_, p)| p);
    let mut rows = parts.next().unwrap_or_default();
    for p in parts {
        rows.extend(p);
    }
    assemble_rows(manifest, paths, &dispatches, &mut rows)
}

/// A whole run's sums from `rows`, aligned subtrees that tile its tree from path 0 in order (the
/// group partials below `paths`, or a [`DeviceTree`]'s output rows), summed in place.
fn whole_run_sums(
    manifest: &Manifest,
    paths: u64,
    rows: &mut [f64],
) -> Result<Vec<PartialSums>, GpuError> {
    let wg = manifest.workgroup_size as u64;
    let log2 = wg
        .trailing_zeros()
        .min(paths.next_power_of_two().trailing_zeros());
    let groups = paths.div_ceil(wg);
    tree_sum_rows(rows, manifest.row_len())
        .into_iter()
        .map(|total| {
            PartialSums::from_tiling_sum(paths, log2, groups, total).map_err(GpuError::from)
        })
        .collect()
}

/// [`assemble`] of `dispatches` whose partials lie one after the other in `rows` (which it
/// sums in place). A group block longer than the run's tree root (a run of fewer than WG
/// paths) is taken as the root block: the kernel's padding adds `-0.0`s, which change nothing.
pub fn assemble_rows(
    manifest: &Manifest,
    paths: u64,
    dispatches: &[Dispatch],
    rows: &mut [f64],
) -> Result<Vec<PartialSums>, GpuError> {
    let n_sums = manifest.row_len();
    let wg = manifest.workgroup_size as u64;
    let log2 = wg
        .trailing_zeros()
        .min(paths.next_power_of_two().trailing_zeros());
    let want: usize = dispatches.iter().map(|d| d.groups as usize * n_sums).sum();
    if rows.len() != want {
        return Err(GpuError::Launch(format!(
            "{} partials for {} dispatches of {} groups in all, {n_sums} sums each",
            rows.len(),
            dispatches.len(),
            dispatches.iter().map(|d| u64::from(d.groups)).sum::<u64>()
        )));
    }
    // The whole run from path 0 in consecutive dispatches (a `run`): one pairwise tree per sum
    // over the group partials, O(groups), in place on whole rows.
    let whole = dispatches.first().is_some_and(|d| d.base == 0)
        && dispatches
            .windows(2)
            .all(|w| w[1].base == w[0].base + w[0].groups as u64 * wg)
        && dispatches
            .last()
            .is_some_and(|d| d.base + d.groups as u64 * wg >= paths);
    if whole {
        let groups = paths.div_ceil(wg); // the groups that start below `paths`
        return whole_run_sums(manifest, paths, &mut rows[..groups as usize * n_sums]);
    }
    let mut blocks: Vec<Vec<Block>> = vec![Vec::new(); n_sums];
    let mut at = 0;
    for d in dispatches {
        let partials = &rows[at..at + d.groups as usize * n_sums];
        at += partials.len();
        for g in 0..d.groups as usize {
            let start = d.base + g as u64 * wg;
            if start >= paths {
                continue; // a whole group past the run's end holds only padding
            }
            for (s, b) in blocks.iter_mut().enumerate() {
                b.push(Block {
                    start,
                    log2_len: log2,
                    sum: partials[g * n_sums + s],
                });
            }
        }
    }
    Ok(blocks
        .iter()
        .map(|b| PartialSums::from_blocks(paths, b))
        .collect::<Result<_, _>>()?)
}

/// The compiled-kernel cache: in memory and on disk, keyed on SHA-256 of (kind, device, options,
/// source). Disk writes are atomic (write a unique temp file, then rename); a disk that cannot be
/// written only costs a recompile. The directory is `$NABLAC_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/nablac`, else `$HOME/.cache/nablac`; `NABLAC_CACHE_DIR=off` disables the disk.
pub mod cache {
    use super::*;
    use sha2::{Digest, Sha256};

    static MEMORY: Mutex<BTreeMap<String, Vec<u8>>> = Mutex::new(BTreeMap::new());
    static HITS: AtomicU64 = AtomicU64::new(0);

    /// How many lookups in this process found their entry (memory or disk) so far: a host that
    /// reads it before and after a load knows whether the driver compile was skipped.
    pub fn hits() -> u64 {
        HITS.load(Ordering::Relaxed)
    }

    /// The cache key: lower-case hex SHA-256 over the length-prefixed parts.
    pub fn key(kind: &str, device: &str, options: &[String], source: &str) -> String {
        let mut h = Sha256::new();
        for part in [kind, device]
            .into_iter()
            .chain(options.iter().map(|s| s.as_str()))
            .chain([source])
        {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The disk directory, or None when disabled or unknown.
    pub fn dir() -> Option<PathBuf> {
        match std::env::var_os("NABLAC_CACHE_DIR") {
            Some(d) if d == "off" => None,
            Some(d) if !d.is_empty() => Some(PathBuf::from(d)),
            _ => std::env::var_os("XDG_CACHE_HOME")
                .filter(|d| !d.is_empty())
                .map(|d| PathBuf::from(d).join("nablac"))
                .or_else(|| {
                    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache").join("nablac"))
                }),
        }
    }

    /// The most bytes a disk entry may hold (a compiled kernel is far smaller).
    const MAX_ENTRY: u64 = 256 << 20;

    /// A disk entry's first line: the format, the key, the payload's length and SHA-256.
    fn header(key: &str, bytes: &[u8]) -> String {
        let sum: String = Sha256::digest(bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("nablac-cache 1 {key} {} {sum}\n", bytes.len())
    }

    /// The payload of a disk entry if it is one, for `key`, intact; `None` for anything else
    /// (short, edited, another key's, another format).
    fn payload(key: &str, entry: &[u8]) -> Option<Vec<u8>> {
        let end = entry.iter().position(|&b| b == b'\n')?;
        let bytes = &entry[end + 1..];
        (entry[..=end] == *header(key, bytes).as_bytes() && !bytes.is_empty())
            .then(|| bytes.to_vec())
    }

    /// The cached bytes for `key` (memory first, then disk), if any. A disk entry counts only if
    /// it is a regular file (a FIFO or a device is never opened, so never blocks), at most
    /// `MAX_ENTRY` bytes, and carries this key and the checksum of its bytes: anything else is a
    /// miss, which the caller's `put` then replaces atomically.
    pub fn get(key: &str, ext: &str) -> Option<Vec<u8>> {
        let found = lookup(key, ext);
        if found.is_some() {
            HITS.fetch_add(1, Ordering::Relaxed);
        }
        found
    }

    fn lookup(key: &str, ext: &str) -> Option<Vec<u8>> {
        if let Some(v) = MEMORY.lock().ok()?.get(key) {
            return Some(v.clone());
        }
        let path = dir()?.join(format!("{key}.{ext}"));
        let meta = std::fs::metadata(&path).ok()?;
        if !meta.is_file() || meta.len() > MAX_ENTRY {
            return None;
        }
        let bytes = payload(key, &std::fs::read(&path).ok()?)?;
        if let Ok(mut m) = MEMORY.lock() {
            m.insert(key.to_string(), bytes.clone());
        }
        Some(bytes)
    }

    /// Stores `bytes` under `key` in memory and (best effort, atomically: a temporary file
    /// renamed over the entry) on disk, with the header `get` verifies.
    pub fn put(key: &str, ext: &str, bytes: &[u8]) {
        if let Ok(mut m) = MEMORY.lock() {
            m.insert(key.to_string(), bytes.to_vec());
        }
        let Some(d) = dir() else { return };
        if std::fs::create_dir_all(&d).is_err() {
            return;
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |t| t.as_nanos());
        let tmp = d.join(format!(".{key}.{}.{nanos}.tmp", std::process::id()));
        let mut entry = header(key, bytes).into_bytes();
        entry.extend_from_slice(bytes);
        if std::fs::write(&tmp, &entry).is_ok()
            && std::fs::rename(&tmp, d.join(format!("{key}.{ext}"))).is_ok()
        {
            return;
        }
        let _ = std::fs::remove_file(&tmp);
    }

    /// Forgets the in-memory entries (tests use it to force the disk path).
    pub fn clear_memory() {
        if let Ok(mut m) = MEMORY.lock() {
            m.clear();
        }
    }
}

impl DeviceTree {
    /// What the kernels compute, on the host (the tests' model of them): the output rows.
    pub fn sum_on_host(&self, rows: &[f64]) -> Vec<f64> {
        let (n, width, len) = (
            self.rows as usize,
            self.width as usize,
            1usize << self.log2_block,
        );
        let mut out = vec![0.0; self.out_rows() as usize * width];
        for (i, o) in out.iter_mut().enumerate() {
            let (b, c) = (i / width, i % width);
            let mut stack = Vec::with_capacity(32);
            for j in 0..len {
                let r = b * len + j;
                let mut v = if r < n { rows[r * width + c] } else { -0.0 };
                let mut k = j;
                while k & 1 == 1 {
                    // Left + right, as the kernels write it (the same bits either way).
                    #[allow(clippy::assign_op_pattern)]
                    {
                        v = stack.pop().unwrap_or(f64::NAN) + v;
                    }
                    k >>= 1;
                }
                stack.push(v);
            }
            *o = stack[0];
        }
        out
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Rows of group partials with the awkward values: signed zeros, cancellations, magnitudes
    /// far apart (so that the order of the adds shows in the bits).
    pub(crate) fn awkward_rows(rows: usize, width: usize, seed: u64) -> Vec<f64> {
        let mut x = seed | 1;
        (0..rows * width)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                match x % 7 {
                    0 => -0.0,
                    1 => 0.0,
                    2 => 1e16,
                    3 => -1e16,
                    _ => (x >> 11) as f64 * 2f64.powi(-40) - 1e3,
                }
            })
            .collect()
    }

    /// The device's part of the tree, then the host's, gives the bits of the host's tree alone:
    /// every row count from 2 to 300 and a few large ones, widths 1 to 13.
    #[test]
    fn a_device_tree_then_the_host_tree_is_the_host_tree() {
        let counts = (2..300).chain([1000, 1023, 1024, 1025, 4097, 131_072]);
        for rows in counts {
            for width in [1usize, 3, 13] {
                let t = DeviceTree::over(rows, width).unwrap();
                assert!(1u32 << t.log2_block <= rows.next_power_of_two());
                let table = awkward_rows(rows as usize, width, u64::from(rows) * 31 + width as u64);
                let want = tree_sum_rows(&mut table.clone(), width);
                let mut out = t.sum_on_host(&table);
                assert_eq!(out.len(), t.threads() as usize);
                let got = tree_sum_rows(&mut out, width);
                let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "{rows} rows of {width}");
            }
        }
        assert_eq!(DeviceTree::over(1, 3), None);
        assert_eq!(DeviceTree::over(5, 0), None);
        let t = DeviceTree::over(131_072, 13).unwrap();
        assert_eq!((t.log2_block, t.out_rows()), (DeviceTree::LOG2_BLOCK, 1024));
    }

    /// Only a whole run in one dispatch is summed on the device.
    #[test]
    fn only_a_whole_run_in_one_dispatch_gets_a_device_tree() {
        let m = manifest(crate::manifest::Target::Cuda, false);
        let whole = [Dispatch { base: 0, groups: 8 }];
        let (d, t) = whole_run_tree(&m, 1000, &whole).unwrap();
        assert_eq!((d, t.rows), (whole[0], 8));
        assert_eq!(whole_run_tree(&m, 1024 + 1000, &whole), None);
        let two = [
            Dispatch { base: 0, groups: 8 },
            Dispatch {
                base: 1024,
                groups: 8,
            },
        ];
        assert_eq!(whole_run_tree(&m, 2048, &two), None);
        assert_eq!(whole_run_tree(&m, 2048, &two[1..]), None);
        assert_eq!(
            whole_run_tree(&m, 100, &[Dispatch { base: 0, groups: 1 }]),
            None
        );
    }

    /// A usual tape's whole run fits one step; a wide one's steps keep its partials in bounds.
    #[test]
    fn partials_bound_the_step_only_for_wide_tapes() {
        let mut m = manifest(crate::manifest::Target::Cuda, false);
        assert!(
            partials_paths(&m) >= MAX_PATHS_PER_DISPATCH,
            "{}",
            m.row_len()
        );
        let one = m.sums[0].clone();
        m.sums = vec![one; 20_003];
        let step = partials_paths(&m);
        assert!(step.is_multiple_of(1024) && step >= 1024, "{step}");
        let groups = step / u64::from(m.workgroup_size);
        assert!(groups * m.row_len() as u64 * 8 <= PARTIALS_BYTES);
        assert!((groups + 1024) * m.row_len() as u64 * 8 > PARTIALS_BYTES);
    }

    #[test]
    fn log_line_quotes_the_error() {
        let none = || "status 6".to_string();
        assert_eq!(
            log_line("k.cu(3): warning: x\nk.cu(4): error: y\n", none),
            "k.cu(4): error: y"
        );
        assert_eq!(
            log_line("ERROR: 0:7: 'z' : undeclared\n", none),
            "ERROR: 0:7: 'z' : undeclared"
        );
        assert_eq!(log_line("  only a note \n", none), "only a note");
        assert_eq!(log_line(" \n", none), "status 6");
    }

    #[test]
    fn dispatches_tile_the_range() {
        let d = plan_dispatches(128, 5000, &(1024..5000), 2048).unwrap();
        assert_eq!(
            d,
            vec![
                Dispatch {
                    base: 1024,
                    groups: 16
                },
                Dispatch {
                    base: 3072,
                    groups: 16
                }
            ]
        );
        assert!(plan_dispatches(128, 5000, &(1000..5000), 4096).is_err());
        assert!(plan_dispatches(128, 5000, &(0..1000), 4096).is_err());
        assert!(plan_dispatches(128, 5000, &(0..0), 4096).is_err());
        assert_eq!(
            plan_dispatches(128, 5000, &(0..1024), 1 << 40).unwrap(),
            vec![Dispatch { base: 0, groups: 8 }]
        );
    }

    /// A two-sum manifest of `target` whose parameter table (the compiler's, with a scratch buffer
    /// when `scratch`) is listed in reverse: hosts must sort by binding.
    fn manifest(target: crate::manifest::Target, scratch: bool) -> Manifest {
        use crate::manifest::{gpu_params, Checkpoint};
        let mut m = Manifest::hand_written(
            target,
            Precision::F32,
            "main",
            128,
            &[],
            &["y"],
            &["y", "y_sq"],
        );
        m.params = gpu_params(target, Precision::F32, 2, scratch.then_some(0));
        m.params.reverse();
        if scratch {
            m.checkpoint = Checkpoint::Scratch;
        }
        m
    }

    #[test]
    fn a_whole_run_assembles_as_its_blocks_merge() {
        // 20,000 groups (the parallel path) in three dispatches; the same blocks merged one by
        // one give the same bits.
        let m = manifest(crate::manifest::Target::Cuda, false);
        let (wg, n_sums) = (m.workgroup_size as u64, m.row_len());
        let paths = 20_000 * wg - 77;
        let mut parts = Vec::new();
        let mut base = 0;
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for groups in [7_000u32, 9_000, 4_000] {
            let partials: Vec<f64> = (0..groups as usize * n_sums)
                .map(|_| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (x >> 11) as f64 / (1u64 << 40) as f64 - 2048.0
                })
                .collect();
            parts.push((Dispatch { base, groups }, partials));
            base += groups as u64 * wg;
        }
        let fast = assemble(&m, paths, parts.clone()).unwrap();
        for (s, sums) in fast.iter().enumerate() {
            let blocks: Vec<Block> = parts
                .iter()
                .flat_map(|(d, p)| {
                    (0..d.groups as usize).map(move |g| Block {
                        start: d.base + g as u64 * wg,
                        log2_len: wg.trailing_zeros(),
                        sum: p[g * n_sums + s],
                    })
                })
                .rev()
                .collect();
            let slow = PartialSums::from_blocks(paths, &blocks).unwrap();
            assert_eq!(
                sums.total().unwrap().to_bits(),
                slow.total().unwrap().to_bits(),
                "sum {s}"
            );
        }
    }

    #[test]
    fn arguments_come_from_the_parameter_table() {
        use crate::manifest::Target;
        let d = Dispatch {
            base: 0x1_0000_0400,
            groups: 3,
        };
        let (paths, seed) = (0x2_0000_0001, 0xdead_beef_0000_0007);
        let words = [0x400, 1, 1, 2, 7, 0xdead_beef, 0].map(Arg::Word);
        let mut want = vec![Arg::Inputs, Arg::Partials];
        want.extend(words);
        assert_eq!(
            kernel_arguments(&manifest(Target::Cuda, false), d, paths, seed).unwrap(),
            want
        );
        want.extend([Arg::Scratch, Arg::Word(3 * 128)]);
        assert_eq!(
            kernel_arguments(&manifest(Target::Opencl, true), d, paths, seed).unwrap(),
            want
        );
        let push = push_constants(&manifest(Target::Glsl, false), d, paths, seed).unwrap();
        let expect: Vec<u8> = [0x400u32, 1, 1, 2, 7, 0xdead_beef, 0]
            .iter()
            .flat_map(|w| w.to_ne_bytes())
            .collect();
        assert_eq!(push, expect);
        // A parameter the runtime cannot fill, or a gap in the argument indices, is refused.
        let mut m = manifest(Target::Cuda, false);
        m.params[0].name = "strike".into();
        let e = kernel_arguments(&m, d, paths, seed)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`strike`"), "{e}");
        let mut m = manifest(Target::Cuda, false);
        m.params.retain(|p| p.name != "paths_lo");
        let e = kernel_arguments(&m, d, paths, seed)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not numbered"), "{e}");
    }

    /// Issue 14, point 2: a truncated, edited, foreign or non-regular disk entry is a miss (it
    /// used to abort or hang every later run until the cache was cleared); the next put replaces
    /// it.
    /// The cache tests set NABLAC_CACHE_DIR, which is process-wide: one at a time.
    static CACHE_ENV: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn bad_cache_entries_are_misses() {
        let _env = CACHE_ENV.lock().unwrap_or_else(|e| e.into_inner());
        let dir = std::env::temp_dir().join(format!("nablac-cache-bad-{}", std::process::id()));
        std::env::set_var("NABLAC_CACHE_DIR", &dir);
        let (a, b) = (
            cache::key("t", "d", &[], "a"),
            cache::key("t", "d", &[], "b"),
        );
        cache::put(&a, "bin", b"kernel a bytes");
        cache::put(&b, "bin", b"kernel b bytes");
        cache::clear_memory();
        assert_eq!(
            cache::get(&a, "bin").as_deref(),
            Some(&b"kernel a bytes"[..])
        );
        let path = |k: &str| dir.join(format!("{k}.bin"));
        let good = std::fs::read(path(&a)).unwrap();
        let miss = |what: &str| {
            cache::clear_memory();
            assert_eq!(cache::get(&a, "bin"), None, "{what}");
        };
        std::fs::write(path(&a), &good[..good.len() - 3]).unwrap();
        miss("truncated");
        let mut flipped = good.clone();
        *flipped.last_mut().unwrap() ^= 1;
        std::fs::write(path(&a), &flipped).unwrap();
        miss("a flipped bit");
        std::fs::copy(path(&b), path(&a)).unwrap();
        miss("another key's entry");
        std::fs::write(path(&a), b"kernel a bytes").unwrap();
        miss("no header");
        std::fs::write(path(&a), b"").unwrap();
        miss("empty");
        std::fs::remove_file(path(&a)).unwrap();
        let fifo = std::process::Command::new("mkfifo").arg(path(&a)).status();
        if fifo.is_ok_and(|s| s.success()) {
            miss("a FIFO (never opened, so no hang)");
        }
        cache::put(&a, "bin", b"kernel a bytes");
        cache::clear_memory();
        assert_eq!(
            cache::get(&a, "bin").as_deref(),
            Some(&b"kernel a bytes"[..])
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn cache_roundtrips_through_disk() {
        let _env = CACHE_ENV.lock().unwrap_or_else(|e| e.into_inner());
        let dir = std::env::temp_dir().join(format!("nablac-cache-test-{}", std::process::id()));
        std::env::set_var("NABLAC_CACHE_DIR", &dir);
        let k = cache::key("spv", "dev", &["-O".into()], "src");
        assert_ne!(k, cache::key("spv", "dev", &[], "-Osrc"));
        cache::put(&k, "spv", b"abcd");
        cache::clear_memory();
        assert_eq!(cache::get(&k, "spv").as_deref(), Some(&b"abcd"[..]));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

//! The OpenCL backend: runs emitted OpenCL C kernels (compiler/src/emit, the ABI) through `opencl3`.
//!
//! Contract: the OpenCL ICD loader (libOpenCL.so.1) is loaded at run time, so a binary without
//! OpenCL builds and runs and [`open`] says "OpenCL loader not found". `open` picks a device with
//! double precision (`NABLAC_OPENCL_DEVICE`, a substring of `platform / device`, chooses one; else
//! a GPU first, then any other type) and proves it with a tiny real launch under a timeout before
//! returning. [`Device::load`] builds the program with the compiler's `manifest::compile_options` plus
//! `-cl-std=CL1.2`; the program binary is cached (`gpu::cache`) on (source, device and driver,
//! options), so a second run skips the driver's compiler. [`Device::run_range`] returns one
//! `PartialSums` per manifest sum, as the Vulkan and CUDA backends do.
//!
//! The scratch kernel's buffer holds `slots * invocations` values: a dispatch is capped so that
//! it fits in the device's largest allocation (`CL_DEVICE_MAX_MEM_ALLOC_SIZE`).

use crate::gpu::{self, cache, GpuError};
use crate::manifest::{Checkpoint, Manifest, Precision, Target};
use crate::report::PartialSums;
use opencl3::command_queue::CommandQueue;
use opencl3::context::Context;
use opencl3::device::{
    Device as ClDevice, CL_DEVICE_TYPE_ALL, CL_DEVICE_TYPE_CPU, CL_DEVICE_TYPE_GPU,
};
use opencl3::kernel::{ExecuteKernel, Kernel as ClKernel};
use opencl3::memory::{Buffer, CL_MEM_READ_ONLY, CL_MEM_READ_WRITE, CL_MEM_WRITE_ONLY};
use opencl3::program::Program;
use opencl3::types::{cl_uint, CL_BLOCKING};
use std::ops::Range;
use std::time::{Duration, Instant};

const DRIVER: &str = "OpenCL";
/// How long the probe launch in [`open`] may take.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(20);
/// How long one dispatch may run before the wait gives up.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(600);
/// Paths per dispatch on a CPU device (PoCL): small enough that progress is reported often.
const CPU_PATHS_PER_DISPATCH: u64 = 1 << 20;

const PROBE_CL: &str = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable
__kernel void nb_probe(__global const double* inputs, __global double* partials,
    uint a, uint b, uint c, uint d, uint e, uint f, uint zero)
{ partials[0] = inputs[0] * 2.0 + (double)zero; }
";

/// An opened OpenCL device with its context and in-order queue.
pub struct Device {
    device: ClDevice,
    context: Context,
    queue: CommandQueue,
    /// `platform / device`.
    label: String,
    driver: String,
    is_cpu: bool,
    max_alloc: u64,
}

/// A built kernel and the manifest that says how to launch it.
pub struct Kernel {
    manifest: Manifest,
    kernel: ClKernel,
    _program: Program,
    /// `gpu::DeviceTree::OPENCL`, built with the kernel (so its build counts as loading).
    tree: ClKernel,
    _tree_program: Program,
    clock: gpu::Clock,
    buffers: std::sync::Mutex<Buffers>,
}

/// A reused device buffer and its length in values (`Buffers`).
type Slot = Option<(Buffer<f64>, usize)>;

/// What a kernel's runs reuse, grown on demand and never shrunk: the device partials of one
/// dispatch, a device tree's rows and the host table (a whole run's tree rows, or a range's
/// partials; no fresh, page-faulting vector a run; summed in place). None is cleared: every
/// group writes each of its sums (the ABI).
#[derive(Default)]
struct Buffers {
    partials: Slot,
    /// A `gpu::DeviceTree`'s output rows.
    tree: Slot,
    host: Vec<f64>,
}

impl Kernel {
    /// Where this kernel's runs spent their time so far.
    pub fn timings(&self) -> gpu::Timings {
        self.clock.read()
    }
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "opencl::Kernel({})", self.manifest.entry_point)
    }
}

impl Kernel {
    /// The manifest the kernel was loaded with.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }
}

/// Every OpenCL device as (`platform / device`, id); errors say what is missing.
fn devices() -> Result<Vec<(String, ClDevice)>, GpuError> {
    let platforms = opencl3::platform::get_platforms().map_err(|e| {
        GpuError::Unavailable(if e.0 == opencl3::error_codes::DLOPEN_RUNTIME_LOAD_FAILED {
            "OpenCL loader (libOpenCL.so.1) not found: install an ICD loader and a driver \
             (Debian: ocl-icd-libopencl1 and pocl-opencl-icd)"
                .into()
        } else {
            format!("OpenCL: no platform ({e}); is an ICD (e.g. pocl-opencl-icd) installed?")
        })
    })?;
    let mut out = Vec::new();
    for p in &platforms {
        let pname = p.name().unwrap_or_else(|_| "?".into());
        if let Ok(ids) = p.get_devices(CL_DEVICE_TYPE_ALL) {
            for id in ids {
                let d = ClDevice::new(id);
                let name = d.name().unwrap_or_else(|_| "?".into());
                out.push((format!("{pname} / {name}"), d));
            }
        }
    }
    if out.is_empty() {
        return Err(GpuError::Unavailable(format!(
            "OpenCL: {} platform(s) but no device",
            platforms.len()
        )));
    }
    Ok(out)
}

/// Serializes platform discovery and context creation: not every ICD survives two threads
/// starting it at once (PoCL's did not, in the test suite).
static OPEN: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Opens the chosen OpenCL device (see the module doc) and proves it with a tiny launch.
pub fn open() -> Result<Device, GpuError> {
    let _guard = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    let all = devices()?;
    let want = std::env::var("NABLAC_OPENCL_DEVICE").unwrap_or_default();
    let fp64 = |d: &ClDevice| d.double_fp_config().is_ok_and(|c| c != 0);
    let chosen = if want.is_empty() {
        let rank = |d: &ClDevice| match d.dev_type() {
            Ok(t) if t & CL_DEVICE_TYPE_GPU != 0 => 0,
            Ok(t) if t & CL_DEVICE_TYPE_CPU == 0 => 1,
            _ => 2,
        };
        all.iter()
            .filter(|(_, d)| fp64(d))
            .min_by_key(|(_, d)| rank(d))
            .ok_or_else(|| {
                GpuError::Unavailable(format!(
                    "OpenCL: no device with double precision (cl_khr_fp64) among: {}",
                    names(&all)
                ))
            })?
    } else {
        all.iter()
            .find(|(label, _)| label.contains(&want))
            .ok_or_else(|| {
                GpuError::Unavailable(format!(
                    "OpenCL: no device matches NABLAC_OPENCL_DEVICE={want:?} (devices: {})",
                    names(&all)
                ))
            })?
    };
    let (label, device) = (chosen.0.clone(), ClDevice::new(chosen.1.id()));
    if !fp64(&device) {
        return Err(GpuError::Unavailable(format!(
            "OpenCL: {label} has no double precision (cl_khr_fp64); the partial sums are f64"
        )));
    }
    let drv = |what: &str, e: String| GpuError::Driver {
        driver: DRIVER,
        device: label.clone(),
        what: what.into(),
        message: e,
    };
    let context =
        Context::from_device(&device).map_err(|e| drv("clCreateContext", e.to_string()))?;
    #[allow(deprecated)]
    let queue = CommandQueue::create_default(&context, 0)
        .map_err(|e| drv("clCreateCommandQueue", e.to_string()))?;
    let driver = device.driver_version().unwrap_or_default();
    let is_cpu = device.dev_type().is_ok_and(|t| t & CL_DEVICE_TYPE_CPU != 0);
    let max_alloc = device.max_mem_alloc_size().unwrap_or(128 << 20);
    let dev = Device {
        device,
        context,
        queue,
        label,
        driver,
        is_cpu,
        max_alloc,
    };
    dev.probe()?;
    Ok(dev)
}

fn names(all: &[(String, ClDevice)]) -> String {
    all.iter()
        .map(|(l, _)| l.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

impl Device {
    /// "platform / device (OpenCL driver version)", as errors print it.
    pub fn describe(&self) -> String {
        format!("{} (driver {})", self.label, self.driver)
    }

    /// True for a CPU device such as PoCL's.
    pub fn is_cpu(&self) -> bool {
        self.is_cpu
    }

    fn err(&self, what: &str, e: impl std::fmt::Display) -> GpuError {
        GpuError::Driver {
            driver: DRIVER,
            device: self.label.clone(),
            what: what.into(),
            message: e.to_string(),
        }
    }

    fn probe(&self) -> Result<(), GpuError> {
        let (_program, kernel) = self.build(PROBE_CL, "nb_probe", "")?;
        let input = self.upload(&[1.25f64])?;
        let out = self.zeros::<f64>(1, CL_MEM_WRITE_ONLY)?;
        let z: cl_uint = 0;
        let mut exec = ExecuteKernel::new(&kernel);
        // SAFETY: the argument list matches the probe kernel's signature.
        unsafe {
            exec.set_arg(&input).set_arg(&out);
            for _ in 0..7 {
                exec.set_arg(&z);
            }
        }
        exec.set_global_work_size(1).set_local_work_size(1);
        self.finish_launch(&mut exec, "probe launch", PROBE_TIMEOUT)?;
        let mut got = [0f64];
        self.download(&out, &mut got)?;
        if got != [2.5] {
            return Err(self.err("probe launch", format!("wrote {got:?}, expected [2.5]")));
        }
        Ok(())
    }

    /// Builds `source` (binary cached, see the module doc) and creates kernel `entry`.
    fn build(
        &self,
        source: &str,
        entry: &str,
        options: &str,
    ) -> Result<(Program, ClKernel), GpuError> {
        let key = cache::key(
            "clbin",
            &format!("{} {}", self.label, self.driver),
            &[options.to_string()],
            source,
        );
        let compile_err = |log: String| GpuError::Compile {
            compiler: "OpenCL",
            device: self.label.clone(),
            entry: entry.into(),
            log,
        };
        let from_cache = cache::get(&key, "clbin").and_then(|bin| {
            // SAFETY: the binary came from this device and driver (they are in the key).
            let mut p = unsafe {
                Program::create_from_binary(&self.context, &[self.device.id()], &[&bin[..]])
            }
            .ok()?;
            p.build(&[self.device.id()], options).ok()?;
            Some(p)
        });
        let program = match from_cache {
            Some(p) => p,
            None => {
                let mut p = Program::create_from_source(&self.context, source)
                    .map_err(|e| self.err("clCreateProgramWithSource", e))?;
                if let Err(e) = p.build(&[self.device.id()], options) {
                    let log = p.get_build_log(self.device.id()).unwrap_or_default();
                    return Err(compile_err(gpu::log_line(&log, || {
                        format!("clBuildProgram: {e}")
                    })));
                }
                if let Some(bin) = p.get_binaries().ok().and_then(|b| b.into_iter().next()) {
                    if !bin.is_empty() {
                        cache::put(&key, "clbin", &bin);
                    }
                }
                p
            }
        };
        let kernel = ClKernel::create(&program, entry)
            .map_err(|e| self.err(&format!("clCreateKernel({entry})"), e))?;
        Ok((program, kernel))
    }

    /// Builds `source` (target `opencl`) and creates its entry point.
    pub fn load(&self, source: &str, manifest: &Manifest) -> Result<Kernel, GpuError> {
        if manifest.target != Target::Opencl {
            return Err(GpuError::Launch(format!(
                "the OpenCL backend runs OpenCL kernels, not {}",
                manifest.target.name()
            )));
        }
        let mut options = vec!["-cl-std=CL1.2".to_string()];
        options.extend(crate::manifest::compile_options(Target::Opencl));
        let (program, kernel) = self.build(source, &manifest.entry_point, &options.join(" "))?;
        let (tree_program, tree) = self.build(
            gpu::DeviceTree::OPENCL,
            gpu::DeviceTree::ENTRY,
            "-cl-std=CL1.2",
        )?;
        Ok(Kernel {
            manifest: manifest.clone(),
            kernel,
            _program: program,
            tree,
            _tree_program: tree_program,
            clock: gpu::Clock::default(),
            buffers: std::sync::Mutex::default(),
        })
    }

    /// The most paths one call of [`Device::run_range`] should cover: 2^27, or 2^20 on a CPU
    /// device, so that a progress bar moves.
    pub fn max_range(&self) -> u64 {
        if self.is_cpu {
            CPU_PATHS_PER_DISPATCH
        } else {
            gpu::MAX_PATHS_PER_DISPATCH
        }
    }

    /// The most paths one dispatch of a kernel covers: [`Device::max_range`], and few enough
    /// that a scratch kernel's buffer fits in one allocation.
    pub fn max_paths(&self, m: &Manifest) -> u64 {
        let mut max = self.max_range();
        if m.checkpoint == Checkpoint::Scratch && m.scratch_slots_per_path > 0 {
            let per_path = m.scratch_slots_per_path as u64 * m.precision.bytes() as u64;
            max = max.min(self.max_alloc / per_path);
        }
        max
    }

    /// Runs paths `range` of a `paths`-path run under `seed`; one `PartialSums` per manifest sum.
    pub fn run_range(
        &self,
        k: &Kernel,
        inputs: &[f64],
        seed: u64,
        paths: u64,
        range: Range<u64>,
    ) -> Result<Vec<PartialSums>, GpuError> {
        let m = &k.manifest;
        let inputs = &gpu::input_values(m, inputs)?[..];
        let dispatches = gpu::plan_dispatches(m.workgroup_size, paths, &range, self.max_paths(m))?;
        let mut buffers = k.buffers.lock().unwrap_or_else(|e| e.into_inner());
        let b = &mut *buffers;
        let (partials, tree_rows) = (&mut b.partials, &mut b.tree);
        match m.precision {
            Precision::F32 => {
                let v: Vec<f32> = inputs.iter().map(|&x| x as f32).collect();
                let buf = k.clock.transfer(|| self.upload(&v))?;
                gpu::run_dispatches(m, paths, &dispatches, &mut b.host, &k.clock, |d, t, out| {
                    let bufs = (&mut *partials, &mut *tree_rows);
                    self.launch::<f32>(k, bufs, &buf, d, t, paths, seed, out)
                })
            }
            Precision::F64 => {
                let buf = k.clock.transfer(|| self.upload(inputs))?;
                gpu::run_dispatches(m, paths, &dispatches, &mut b.host, &k.clock, |d, t, out| {
                    let bufs = (&mut *partials, &mut *tree_rows);
                    self.launch::<f64>(k, bufs, &buf, d, t, paths, seed, out)
                })
            }
        }
    }

    fn zeros<T: Copy + Default>(
        &self,
        n: usize,
        flags: opencl3::types::cl_mem_flags,
    ) -> Result<Buffer<T>, GpuError> {
        let n = n.max(1);
        // SAFETY: no host pointer; the buffer is written before it is read.
        unsafe { Buffer::<T>::create(&self.context, flags, n, std::ptr::null_mut()) }
            .map_err(|e| self.err(&format!("clCreateBuffer({n} values)"), e))
    }

    fn upload<T: Copy + Default>(&self, data: &[T]) -> Result<Buffer<T>, GpuError> {
        let mut b = self.zeros::<T>(data.len(), CL_MEM_READ_ONLY)?;
        // SAFETY: a blocking write of `data.len()` values into a buffer of that size.
        unsafe {
            self.queue
                .enqueue_write_buffer(&mut b, CL_BLOCKING, 0, data, &[])
        }
        .map_err(|e| self.err("clEnqueueWriteBuffer", e))?;
        Ok(b)
    }

    fn download<T>(&self, b: &Buffer<T>, out: &mut [T]) -> Result<(), GpuError> {
        // SAFETY: a blocking read of `out.len()` values from a buffer at least that long.
        unsafe { self.queue.enqueue_read_buffer(b, CL_BLOCKING, 0, out, &[]) }
            .map_err(|e| self.err("clEnqueueReadBuffer", e))?;
        Ok(())
    }

    /// Enqueues `exec` and waits for it, at most `timeout`.
    fn finish_launch(
        &self,
        exec: &mut ExecuteKernel,
        what: &str,
        timeout: Duration,
    ) -> Result<(), GpuError> {
        // SAFETY: the caller set every argument of the kernel's signature.
        let event = unsafe { exec.enqueue_nd_range(&self.queue) }.map_err(|e| self.err(what, e))?;
        self.queue.flush().map_err(|e| self.err("clFlush", e))?;
        let start = Instant::now();
        loop {
            let status = event
                .command_execution_status()
                .map_err(|e| self.err(what, e))?
                .0;
            if status < 0 {
                return Err(self.err(what, format!("the command failed with status {status}")));
            }
            if status == opencl3::event::CL_COMPLETE {
                return Ok(());
            }
            if start.elapsed() > timeout {
                return Err(self.err(what, format!("no result after {} s", timeout.as_secs())));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// `slot` holding a buffer of at least `n` values: the one there, or a new one.
    fn grown<'b>(&self, slot: &'b mut Slot, n: usize) -> Result<&'b Buffer<f64>, GpuError> {
        if slot.as_ref().is_none_or(|(_, len)| *len < n) {
            *slot = None;
            *slot = Some((self.zeros::<f64>(n, CL_MEM_READ_WRITE)?, n.max(1)));
        }
        Ok(&slot.as_ref().expect("just set").0)
    }

    /// One dispatch `d`, its group partials downloaded into `out` (`d.groups * n_sums` f64s),
    /// or with `tree`, that tree of them (`tree.out_rows() * n_sums`).
    #[allow(clippy::too_many_arguments)]
    fn launch<T: Copy + Default>(
        &self,
        k: &Kernel,
        (partials, tree_rows): (&mut Slot, &mut Slot),
        inputs: &Buffer<T>,
        d: gpu::Dispatch,
        tree: Option<gpu::DeviceTree>,
        paths: u64,
        seed: u64,
        out: &mut [f64],
    ) -> Result<(), GpuError> {
        let m = &k.manifest;
        let n = out.len();
        let rows = d.groups as usize * m.row_len();
        let partials = k.clock.allocate(|| self.grown(partials, rows))?;
        let invocations: cl_uint = d.groups * m.workgroup_size;
        let args = gpu::kernel_arguments(m, d, paths, seed)?;
        let scratch = if args.contains(&gpu::Arg::Scratch) {
            let n = m.scratch_slots_per_path as usize * invocations as usize;
            Some(k.clock.allocate(|| self.zeros::<T>(n, CL_MEM_READ_WRITE))?)
        } else {
            None
        };
        let mut exec = ExecuteKernel::new(&k.kernel);
        // SAFETY: the arguments are the manifest's parameter table, in argument order, each
        // buffer sized as its doc says.
        unsafe {
            for a in &args {
                match a {
                    gpu::Arg::Inputs => exec.set_arg(inputs),
                    gpu::Arg::Partials => exec.set_arg(partials),
                    gpu::Arg::Scratch => match &scratch {
                        Some(s) => exec.set_arg(s),
                        None => unreachable!("allocated above when an argument is scratch"),
                    },
                    gpu::Arg::Word(w) => exec.set_arg(w),
                };
            }
        }
        exec.set_global_work_size(invocations as usize)
            .set_local_work_size(m.workgroup_size as usize);
        let what = format!("launch of {} groups at path {}", d.groups, d.base);
        k.clock
            .device(|| self.finish_launch(&mut exec, &what, RUN_TIMEOUT))?;
        let Some(t) = tree else {
            return k.clock.transfer(|| self.download(partials, out));
        };
        let sums = k.clock.allocate(|| self.grown(tree_rows, n))?;
        k.clock
            .assemble(|| self.run_tree(&k.tree, t, partials, sums))?;
        k.clock.transfer(|| self.download(sums, out))
    }

    /// Runs `tree` (the built `gpu::DeviceTree::OPENCL`) as `t` over `rows` (at least `t.rows`
    /// rows of `t.width` values) into `sums` (at least `t.threads()` values), and waits.
    fn run_tree(
        &self,
        tree: &ClKernel,
        t: gpu::DeviceTree,
        rows: &Buffer<f64>,
        sums: &Buffer<f64>,
    ) -> Result<(), GpuError> {
        let mut exec = ExecuteKernel::new(tree);
        let [rows_n, width, log2_block, n_out] = t.words();
        // SAFETY: the tree kernel's signature, the buffers sized as above.
        unsafe {
            exec.set_arg(rows)
                .set_arg(sums)
                .set_arg(&rows_n)
                .set_arg(&width)
                .set_arg(&log2_block)
                .set_arg(&n_out);
        }
        let wg = gpu::DeviceTree::WG as usize;
        exec.set_global_work_size((t.threads() as usize).next_multiple_of(wg))
            .set_local_work_size(wg);
        let what = format!("launch of the partials' tree over {rows_n} groups");
        self.finish_launch(&mut exec, &what, RUN_TIMEOUT)
    }
}

#[cfg(test)]
mod tests {
    /// Opening never panics: it gives a device whose probe ran, or an error that names OpenCL.
    /// Where the test command requires the drivers (NABLAC_REQUIRE_TOOLS=1), it must open.
    #[test]
    fn open_gives_a_device_or_says_what_is_missing() {
        match super::open() {
            Ok(d) => assert!(d.describe().contains(" / "), "{}", d.describe()),
            Err(e) => {
                assert!(
                    std::env::var("NABLAC_REQUIRE_TOOLS").as_deref() != Ok("1"),
                    "OpenCL is required here: {e}"
                );
                assert!(e.to_string().contains("OpenCL"), "{e}");
            }
        }
    }

    /// The device tree kernel on the OpenCL device has the bits of its host model (and so of
    /// the host's tree: gpu.rs's test), signed zeros and cancellations included.
    #[test]
    fn the_device_tree_kernel_has_the_bits_of_the_host_tree() {
        use crate::gpu::{tests::awkward_rows, DeviceTree};
        let d = match super::open() {
            Ok(d) => d,
            Err(e) => {
                assert!(
                    std::env::var("NABLAC_REQUIRE_TOOLS").as_deref() != Ok("1"),
                    "OpenCL is required here: {e}"
                );
                return;
            }
        };
        let (_program, kernel) = d
            .build(DeviceTree::OPENCL, DeviceTree::ENTRY, "-cl-std=CL1.2")
            .unwrap();
        for (rows, width) in [(2u32, 1usize), (3, 13), (157, 7), (1000, 3), (4097, 13)] {
            let t = DeviceTree::over(rows, width).unwrap();
            let table = awkward_rows(rows as usize, width, u64::from(rows));
            let input = d.upload(&table).unwrap();
            let mut slot = None;
            let sums = d.grown(&mut slot, t.threads() as usize).unwrap();
            d.run_tree(&kernel, t, &input, sums).unwrap();
            let mut out = vec![0.0; t.threads() as usize];
            d.download(sums, &mut out).unwrap();
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&out),
                bits(&t.sum_on_host(&table)),
                "{rows} rows of {width}"
            );
        }
    }
}

//! The CUDA backend: runs emitted CUDA kernels (compiler/src/emit, the ABI) through `cudarc`.
//!
//! Contract: libcuda and libnvrtc are loaded at run time; [`open`] checks they exist first and
//! returns "CUDA driver (libcuda.so) not found" (or the NVRTC equivalent) instead of panicking.
//! [`Device::load`] compiles with NVRTC using the compiler's `manifest::compile_options` (e.g.
//! `--fmad=false`) plus `--gpu-architecture=sm_XY` of the device, straight to a cubin, cached
//! (`gpu::cache`) on (source, device name + capability, options): a second load compiles
//! nothing. [`Device::run_range`] returns one `PartialSums` per manifest sum, as the Vulkan
//! backend does.

use crate::gpu::{self, cache, GpuError};
use crate::manifest::{Manifest, Precision, Target};
use crate::report::PartialSums;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg,
};
use std::ops::Range;
use std::sync::{Arc, Mutex};

const DRIVER: &str = "CUDA";

/// An opened CUDA device (ordinal 0 unless `open_ordinal`).
pub struct Device {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    name: String,
    arch: (i32, i32),
}

/// A loaded kernel function and its manifest.
pub struct Kernel {
    manifest: Manifest,
    func: CudaFunction,
    _module: Arc<cudarc::driver::CudaModule>,
    /// `gpu::DeviceTree::CUDA`, loaded with the kernel (so its compile counts as loading).
    tree: CudaFunction,
    _tree_module: Arc<cudarc::driver::CudaModule>,
    clock: gpu::Clock,
    buffers: Mutex<Buffers>,
}

/// What a kernel's runs reuse, grown on demand and never shrunk: the device partials of one
/// dispatch, a device tree's rows, the host table (a whole run's tree rows, or a range's
/// partials; summed in place) and the scratch buffer. The host table is pageable: page-locking
/// it cost more than it saved in a one-run `nablac run` process on the H200 (BENCHMARKS.md,
/// 2026-12-04), and a whole run downloads only its tree rows. None of them is cleared between
/// runs: every group writes each of its sums (the ABI), and a path writes a scratch slot before
/// it reads it.
#[derive(Default)]
struct Buffers {
    partials: Option<CudaSlice<f64>>,
    /// A `gpu::DeviceTree`'s output rows.
    tree: Option<CudaSlice<f64>>,
    host: Vec<f64>,
    /// Scratch as 8-byte words (the kernel sees a pointer to its precision).
    scratch: Option<CudaSlice<f64>>,
}

/// A reused device buffer (`Buffers`).
type Slot = Option<CudaSlice<f64>>;

/// `slot` holding at least `len` elements: the one there, or a new one from `alloc`.
fn grown<T, E>(
    slot: &mut Option<T>,
    len: usize,
    have: impl Fn(&T) -> usize,
    alloc: impl FnOnce(usize) -> Result<T, E>,
) -> Result<&mut T, E> {
    if slot.as_ref().is_none_or(|b| have(b) < len) {
        *slot = None; // free the old one first
        *slot = Some(alloc(len.max(1))?);
    }
    Ok(slot.as_mut().expect("just set"))
}

impl Kernel {
    /// Where this kernel's runs spent their time so far.
    pub fn timings(&self) -> gpu::Timings {
        self.clock.read()
    }
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cuda::Kernel({})", self.manifest.entry_point)
    }
}

impl Kernel {
    /// The manifest the kernel was loaded with.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }
}

/// True when both libcuda and libnvrtc can be loaded (never panics).
pub fn libraries_present() -> Result<(), GpuError> {
    // SAFETY: these only try to dlopen the libraries.
    let cuda = std::panic::catch_unwind(|| unsafe { cudarc::driver::sys::is_culib_present() })
        .unwrap_or(false);
    if !cuda {
        return Err(GpuError::Unavailable(
            "CUDA driver (libcuda.so) not found".into(),
        ));
    }
    let nvrtc = std::panic::catch_unwind(|| unsafe { cudarc::nvrtc::sys::is_culib_present() })
        .unwrap_or(false);
    if !nvrtc {
        return Err(GpuError::Unavailable(
            "NVRTC (libnvrtc.so) not found: install the CUDA toolkit's nvrtc".into(),
        ));
    }
    Ok(())
}

/// Opens CUDA device 0 and proves it with a tiny launch (under [`PROBE_TIMEOUT`]).
pub fn open() -> Result<Device, GpuError> {
    open_ordinal(0)
}

/// Opens CUDA device `ordinal`; errors say which library or device is missing.
pub fn open_ordinal(ordinal: usize) -> Result<Device, GpuError> {
    libraries_present()?;
    let drv = |what: &str, e: String| GpuError::Driver {
        driver: DRIVER,
        device: format!("device {ordinal}"),
        what: what.into(),
        message: e,
    };
    let count = catch(CudaContext::device_count)
        .map_err(|e| drv("cuDeviceGetCount", e))?
        .map_err(|e| drv("cuDeviceGetCount", e.to_string()))?;
    if count <= ordinal as i32 {
        return Err(GpuError::Unavailable(format!(
            "CUDA: no device {ordinal} ({count} devices)"
        )));
    }
    let ctx = catch(|| CudaContext::new(ordinal))
        .map_err(|e| drv("cuCtxCreate", e))?
        .map_err(|e| drv("cuCtxCreate", e.to_string()))?;
    let name = ctx
        .name()
        .unwrap_or_else(|_| format!("CUDA device {ordinal}"));
    let arch = ctx
        .compute_capability()
        .map_err(|e| drv("cuDeviceGetAttribute", e.to_string()))?;
    let stream = ctx.default_stream();
    let dev = Device {
        ctx,
        stream,
        name,
        arch,
    };
    // The probe runs on a thread of its own so that a device that never finishes it is an
    // error after PROBE_TIMEOUT, not a hang (the thread is then left behind).
    let describe = dev.describe();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = dev.probe();
        let _ = tx.send((dev, r));
    });
    match rx.recv_timeout(PROBE_TIMEOUT) {
        Ok((dev, Ok(()))) => Ok(dev),
        Ok((_, Err(e))) => Err(e),
        Err(_) => Err(GpuError::Driver {
            driver: DRIVER,
            device: describe,
            what: "probe launch".into(),
            message: format!("no result after {} s", PROBE_TIMEOUT.as_secs()),
        }),
    }
}

/// How long the probe launch in [`open`] may take (NVRTC compiles it first).
pub const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

fn catch<T>(f: impl FnOnce() -> T + std::panic::UnwindSafe) -> Result<T, String> {
    std::panic::catch_unwind(f).map_err(|p| {
        p.downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panicked".into())
    })
}

/// One NVRTC compile to a cubin; on failure, the log's line that names the error
/// (`gpu::log_line`, or NVRTC's status).
fn nvrtc_cubin(source: &str, name: &str, options: &[String]) -> Result<Vec<u8>, String> {
    use cudarc::nvrtc::{result, sys};
    use std::ffi::CString;
    let src = CString::new(source).map_err(|_| "the source holds a NUL byte".to_string())?;
    let name = CString::new(name).map_err(|_| "the entry point holds a NUL byte".to_string())?;
    let prog = result::create_program(&src, Some(&name)).map_err(|e| format!("{e:?}"))?;
    // SAFETY: `prog` was created above and is destroyed once, at the end; buffers are sized by
    // NVRTC's own size queries.
    let out = unsafe {
        match result::compile_program(prog, options) {
            Err(e) => {
                let log = result::get_program_log(prog)
                    .map(|l| {
                        let bytes: Vec<u8> =
                            l.iter().map(|&c| c as u8).take_while(|&c| c != 0).collect();
                        String::from_utf8_lossy(&bytes).into_owned()
                    })
                    .unwrap_or_default();
                Err(gpu::log_line(&log, || format!("{e:?}")))
            }
            Ok(()) => {
                let mut size = 0usize;
                match sys::nvrtcGetCUBINSize(prog, &mut size).result() {
                    Err(e) => Err(format!("nvrtcGetCUBINSize: {e:?}")),
                    Ok(()) => {
                        let mut buf = vec![0u8; size];
                        sys::nvrtcGetCUBIN(prog, buf.as_mut_ptr().cast())
                            .result()
                            .map(|()| buf)
                            .map_err(|e| format!("nvrtcGetCUBIN: {e:?}"))
                    }
                }
            }
        }
    };
    // SAFETY: created above, not yet destroyed.
    let _ = unsafe { result::destroy_program(prog) };
    out
}

const PROBE_CU: &str = r#"extern "C" __global__ void nb_probe(const double* inputs, double* partials,
    unsigned a, unsigned b, unsigned c, unsigned d, unsigned e, unsigned f, unsigned zero)
{ partials[0] = inputs[0] * 2.0 + (double)zero; }
"#;

impl Device {
    /// "device name (sm_XY)", as errors print it.
    pub fn describe(&self) -> String {
        format!("{} (sm_{}{})", self.name, self.arch.0, self.arch.1)
    }

    fn err(&self, what: &str, e: impl std::fmt::Display) -> GpuError {
        GpuError::Driver {
            driver: DRIVER,
            device: self.describe(),
            what: what.into(),
            message: e.to_string(),
        }
    }

    fn probe(&self) -> Result<(), GpuError> {
        let cubin = self.compile(PROBE_CU, "nb_probe", &[])?;
        let module = self
            .ctx
            .load_module(cudarc::nvrtc::Ptx::from_binary(cubin))
            .map_err(|e| self.err("cuModuleLoadData (probe)", e))?;
        let func = module
            .load_function("nb_probe")
            .map_err(|e| self.err("cuModuleGetFunction (probe)", e))?;
        let input = self
            .stream
            .clone_htod(&[1.25f64][..])
            .map_err(|e| self.err("cuMemcpyHtoD", e))?;
        let mut out = self
            .stream
            .alloc_zeros::<f64>(1)
            .map_err(|e| self.err("cuMemAlloc", e))?;
        let z = 0u32;
        let mut b = self.stream.launch_builder(&func);
        b.arg(&input).arg(&mut out);
        for _ in 0..7 {
            b.arg(&z);
        }
        // SAFETY: the argument list matches the probe kernel's signature.
        unsafe {
            b.launch(LaunchConfig {
                grid_dim: (1, 1, 1),
                block_dim: (1, 1, 1),
                shared_mem_bytes: 0,
            })
        }
        .map_err(|e| self.err("probe launch", e))?;
        let got = self
            .stream
            .clone_dtoh(&out)
            .map_err(|e| self.err("cuMemcpyDtoH", e))?;
        if got != [2.5] {
            return Err(self.err("probe launch", format!("wrote {got:?}, expected [2.5]")));
        }
        Ok(())
    }

    /// NVRTC straight to the device's SASS (`--gpu-architecture=sm_XY`), cached: a second load
    /// of the same kernel skips both NVRTC and the driver's PTX compile.
    fn compile(&self, source: &str, entry: &str, options: &[String]) -> Result<Vec<u8>, GpuError> {
        let mut opts = options.to_vec();
        opts.push(format!(
            "--gpu-architecture=sm_{}{}",
            self.arch.0, self.arch.1
        ));
        let key = cache::key("cubin", &self.describe(), &opts, source);
        if let Some(b) = cache::get(&key, "cubin") {
            return Ok(b);
        }
        let (src, name, o) = (source.to_string(), format!("{entry}.cu"), opts.clone());
        let cubin = catch(move || nvrtc_cubin(&src, &name, &o))
            .and_then(|r| r)
            .map_err(|log| GpuError::Compile {
                compiler: "NVRTC",
                device: self.describe(),
                entry: entry.into(),
                log,
            })?;
        cache::put(&key, "cubin", &cubin);
        Ok(cubin)
    }

    /// `source` compiled (cached) and loaded, and its function `entry`.
    fn module(
        &self,
        source: &str,
        entry: &str,
        options: &[String],
    ) -> Result<(Arc<cudarc::driver::CudaModule>, CudaFunction), GpuError> {
        let cubin = self.compile(source, entry, options)?;
        let module = self
            .ctx
            .load_module(cudarc::nvrtc::Ptx::from_binary(cubin))
            .map_err(|e| self.err("cuModuleLoadData", e))?;
        let func = module
            .load_function(entry)
            .map_err(|e| self.err(&format!("cuModuleGetFunction({entry})"), e))?;
        Ok((module, func))
    }

    /// Compiles `source` (target `cuda`) with NVRTC (cached) and loads its entry point.
    pub fn load(&self, source: &str, manifest: &Manifest) -> Result<Kernel, GpuError> {
        if manifest.target != Target::Cuda {
            return Err(GpuError::Launch(format!(
                "the CUDA backend runs CUDA kernels, not {}",
                manifest.target.name()
            )));
        }
        let options = crate::manifest::compile_options(Target::Cuda);
        let (module, func) = self.module(source, &manifest.entry_point, &options)?;
        let (tree_module, tree) =
            self.module(gpu::DeviceTree::CUDA, gpu::DeviceTree::ENTRY, &[])?;
        Ok(Kernel {
            manifest: manifest.clone(),
            func,
            _module: module,
            tree,
            _tree_module: tree_module,
            clock: gpu::Clock::default(),
            buffers: Mutex::default(),
        })
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
        let dispatches =
            gpu::plan_dispatches(m.workgroup_size, paths, &range, gpu::MAX_PATHS_PER_DISPATCH)?;
        let mut buffers = k.buffers.lock().unwrap_or_else(|e| e.into_inner());
        let b = &mut *buffers;
        let bufs = (&mut b.partials, &mut b.scratch, &mut b.tree);
        match m.precision {
            Precision::F32 => {
                let v: Vec<f32> = inputs.iter().map(|&x| x as f32).collect();
                let dev = k
                    .clock
                    .transfer(|| self.stream.clone_htod(&v[..]))
                    .map_err(|e| self.err("cuMemcpyHtoD", e))?;
                gpu::run_dispatches(m, paths, &dispatches, &mut b.host, &k.clock, |d, t, out| {
                    self.launch(
                        k,
                        (&mut *bufs.0, &mut *bufs.1, &mut *bufs.2),
                        &dev,
                        d,
                        t,
                        paths,
                        seed,
                        out,
                    )
                })
            }
            Precision::F64 => {
                let dev = k
                    .clock
                    .transfer(|| self.stream.clone_htod(inputs))
                    .map_err(|e| self.err("cuMemcpyHtoD", e))?;
                gpu::run_dispatches(m, paths, &dispatches, &mut b.host, &k.clock, |d, t, out| {
                    self.launch(
                        k,
                        (&mut *bufs.0, &mut *bufs.1, &mut *bufs.2),
                        &dev,
                        d,
                        t,
                        paths,
                        seed,
                        out,
                    )
                })
            }
        }
    }

    /// `slot`'s device buffer of at least `len` f64s (grown, never shrunk; allocation time of
    /// `k`). Its contents are unset: the callers' kernels write before they read.
    fn reuse<'s>(
        &self,
        k: &Kernel,
        slot: &'s mut Slot,
        len: usize,
        what: &str,
    ) -> Result<&'s mut CudaSlice<f64>, GpuError> {
        k.clock
            .allocate(|| {
                // SAFETY: see above.
                grown(
                    slot,
                    len,
                    |s| s.len(),
                    |n| unsafe { self.stream.alloc::<f64>(n) },
                )
            })
            .map_err(|e| self.err(&format!("cuMemAlloc({what})"), e))
    }

    /// One dispatch `d`, its group partials downloaded into `out` (`d.groups * n_sums` f64s),
    /// or with `tree`, that tree of them (`tree.out_rows() * n_sums`).
    #[allow(clippy::too_many_arguments)]
    fn launch<T: cudarc::driver::DeviceRepr>(
        &self,
        k: &Kernel,
        (partials, scratch, tree_rows): (&mut Slot, &mut Slot, &mut Slot),
        inputs: &CudaSlice<T>,
        d: gpu::Dispatch,
        tree: Option<gpu::DeviceTree>,
        paths: u64,
        seed: u64,
        out: &mut [f64],
    ) -> Result<(), GpuError> {
        let m = &k.manifest;
        let n = out.len();
        let rows = d.groups as usize * m.row_len();
        // Unset until the kernel writes every group's sums; only those are read.
        let partials = self.reuse(k, partials, rows, "partials")?;
        let args = gpu::kernel_arguments(m, d, paths, seed)?;
        let scratch_bytes = if args.contains(&gpu::Arg::Scratch) {
            m.scratch_slots_per_path as usize
                * (d.groups * m.workgroup_size) as usize
                * std::mem::size_of::<T>()
        } else {
            0
        };
        // A path writes each scratch slot before reading it.
        let scratch = self.reuse(k, scratch, scratch_bytes.div_ceil(8), "scratch")?;
        let mut b = self.stream.launch_builder(&k.func);
        for a in &args {
            match a {
                gpu::Arg::Inputs => b.arg(inputs),
                gpu::Arg::Partials => b.arg(&*partials),
                gpu::Arg::Scratch => b.arg(&*scratch),
                gpu::Arg::Word(w) => b.arg(w),
            };
        }
        let cfg = LaunchConfig {
            grid_dim: (d.groups, 1, 1),
            block_dim: (m.workgroup_size, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the arguments are the manifest's parameter table, in argument order, each
        // buffer at least as large as its doc says.
        let what = format!("launch of {} groups at path {}", d.groups, d.base);
        k.clock.device(|| {
            unsafe { b.launch(cfg) }.map_err(|e| self.err(&what, e))?;
            self.stream.synchronize().map_err(|e| self.err(&what, e))
        })?;
        let from = match tree {
            None => &*partials,
            Some(t) => {
                // The tree kernel writes every one of its `n` outputs.
                let sums = self.reuse(k, tree_rows, n, "tree")?;
                let threads = t.threads();
                let cfg = LaunchConfig {
                    grid_dim: (
                        threads.div_ceil(u64::from(gpu::DeviceTree::WG)) as u32,
                        1,
                        1,
                    ),
                    block_dim: (gpu::DeviceTree::WG, 1, 1),
                    shared_mem_bytes: 0,
                };
                let [rows_n, width, log2_block, n_out] = t.words();
                let mut b = self.stream.launch_builder(&k.tree);
                b.arg(&*partials)
                    .arg(&mut *sums)
                    .arg(&rows_n)
                    .arg(&width)
                    .arg(&log2_block)
                    .arg(&n_out);
                let what = format!("launch of the partials' tree over {rows_n} groups");
                // SAFETY: the tree kernel's signature; partials hold `rows_n` rows of `width`.
                k.clock.assemble(|| {
                    unsafe { b.launch(cfg) }.map_err(|e| self.err(&what, e))?;
                    self.stream.synchronize().map_err(|e| self.err(&what, e))
                })?;
                &*sums
            }
        };
        k.clock.transfer(|| {
            self.stream
                .memcpy_dtoh(&from.slice(..n), out)
                .map_err(|e| self.err("cuMemcpyDtoH(partials)", e))?;
            self.stream
                .synchronize()
                .map_err(|e| self.err("cuMemcpyDtoH(partials)", e))
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn absence_is_a_clean_error() {
        // On a machine without CUDA this is the error path; with CUDA it must open or say why.
        match super::open() {
            Ok(d) => assert!(!d.describe().is_empty()),
            Err(e) => assert!(!e.to_string().is_empty(), "{e}"),
        }
    }
}

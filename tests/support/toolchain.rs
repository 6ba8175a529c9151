//! Real compilers for generated kernel source: glslangValidator + spirv-val (GLSL → SPIR-V),
//! an OpenCL implementation through `clBuildProgram` (PoCL on the CPU), NVRTC (CUDA → PTX) and
//! ptxas (PTX → SASS, with its resource report).
//!
//! Contract:
//! - Every check returns `Ok` only when the tool ran and reported neither an error nor a warning;
//!   otherwise `Err(ToolError)` carrying the tool's own message (build log, stderr) verbatim.
//! - A tool that is not installed gives `Err(ToolError::Missing)`. [`check`] turns that into a
//!   skip (`None`, with a `skipped: X not installed` line on stderr) unless tools are required
//!   (`CI=true` or `NABLAC_REQUIRE_TOOLS=1`), in which case it panics like every other error.
//! - Tools are found through environment variables first (`NABLAC_GLSLANG`, `NABLAC_SPIRV_VAL`,
//!   `NABLAC_NVRTC`, `NABLAC_PTXAS`, as written by `scripts/install-test-deps.sh` into
//!   `.tools/env.sh`), then under this checkout's `.tools/cuda` (the wheels), then on `PATH`.
//! - Nothing here needs a GPU.

use std::ffi::{c_char, c_int, CStr, CString};
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// A compiler or validator this module drives.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Tool {
    Glslang,
    SpirvVal,
    OpenCl,
    Nvrtc,
    Ptxas,
}

impl fmt::Display for Tool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Tool::Glslang => "glslangValidator",
            Tool::SpirvVal => "spirv-val",
            Tool::OpenCl => "OpenCL (PoCL)",
            Tool::Nvrtc => "NVRTC (libnvrtc.so.12)",
            Tool::Ptxas => "ptxas",
        })
    }
}

/// Why a kernel did not get through a tool.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error(
        "{tool} not installed ({hint}); run scripts/install-test-deps.sh and source .tools/env.sh"
    )]
    Missing { tool: Tool, hint: String },
    #[error("{tool} rejected {what}:\n{log}")]
    Failed {
        tool: Tool,
        what: String,
        log: String,
    },
    #[error("{tool} warned on {what} (kernels must compile without warnings):\n{log}")]
    Warnings {
        tool: Tool,
        what: String,
        log: String,
    },
    #[error("{tool}: could not run on {what}: {detail}")]
    Io {
        tool: Tool,
        what: String,
        detail: String,
    },
}

/// True when a missing tool must fail the test instead of skipping it: `CI=true` or `NABLAC_REQUIRE_TOOLS=1`.
pub fn tools_required() -> bool {
    std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
        || std::env::var("NABLAC_REQUIRE_TOOLS").is_ok_and(|v| v == "1")
}

/// `Ok(v)` → `Some(v)`; a missing tool → `None` with a `skipped:` line (panics if tools are required);
/// any other error → panics with the tool's message.
#[track_caller]
pub fn check<T>(result: Result<T, ToolError>) -> Option<T> {
    match result {
        Ok(v) => Some(v),
        Err(ToolError::Missing { tool, hint }) if !tools_required() => {
            eprintln!("skipped: {tool} not installed ({hint}); run scripts/install-test-deps.sh");
            None
        }
        Err(e) => panic!("{e}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Locating tools

/// The checkout root (where `.tools/` lives).
fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `$var`, else the first of `candidates` that exists, else `name` on `PATH`.
fn locate(var: &str, candidates: &[PathBuf], name: &str) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(var).filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    if let Some(p) = candidates.iter().find(|p| p.is_file()) {
        return Some(p.clone());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn tool_path(tool: Tool) -> Result<PathBuf, ToolError> {
    let cuda = repo_root().join(".tools/cuda/nvidia");
    let (var, candidates, name, hint) = match tool {
        Tool::Glslang => (
            "NABLAC_GLSLANG",
            vec![],
            "glslangValidator",
            "apt glslang-tools",
        ),
        Tool::SpirvVal => ("NABLAC_SPIRV_VAL", vec![], "spirv-val", "apt spirv-tools"),
        Tool::Ptxas => (
            "NABLAC_PTXAS",
            vec![cuda.join("cuda_nvcc/bin/ptxas")],
            "ptxas",
            "pip nvidia-cuda-nvcc-cu12",
        ),
        Tool::Nvrtc => (
            "NABLAC_NVRTC",
            vec![cuda.join("cuda_nvrtc/lib/libnvrtc.so.12")],
            "libnvrtc.so.12",
            "pip nvidia-cuda-nvrtc-cu12",
        ),
        Tool::OpenCl => unreachable!("OpenCL is found through the ICD loader"),
    };
    locate(var, &candidates, name).ok_or_else(|| ToolError::Missing {
        tool,
        hint: format!("set {var} or install {hint}"),
    })
}

/// A fresh scratch directory for one compilation, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> std::io::Result<Scratch> {
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let safe: String = tag
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let dir = std::env::temp_dir().join(format!("nablac-tc-{}-{n}-{safe}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn io_err(tool: Tool, what: &str) -> impl Fn(std::io::Error) -> ToolError + '_ {
    move |e| ToolError::Io {
        tool,
        what: what.to_string(),
        detail: e.to_string(),
    }
}

/// Runs a command; returns its stdout+stderr, or `Failed` with them when it exits non-zero.
fn run(tool: Tool, what: &str, cmd: &mut Command) -> Result<String, ToolError> {
    let out = cmd.output().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => ToolError::Missing {
            tool,
            hint: format!("{:?} not found", cmd.get_program()),
        },
        _ => ToolError::Io {
            tool,
            what: what.to_string(),
            detail: e.to_string(),
        },
    })?;
    let mut log = String::from_utf8_lossy(&out.stdout).into_owned();
    log.push_str(&String::from_utf8_lossy(&out.stderr));
    if !out.status.success() {
        return Err(ToolError::Failed {
            tool,
            what: what.to_string(),
            log: format!("({}) {log}", out.status),
        });
    }
    Ok(log)
}

/// True when a compiler log mentions a warning (any case).
fn has_warning(log: &str) -> bool {
    log.to_ascii_lowercase().contains("warning")
}

// ---------------------------------------------------------------------------------------------
// GLSL → SPIR-V

/// Compiles a Vulkan GLSL compute shader with `glslangValidator -V --target-env vulkan1.1` and
/// validates the module with `spirv-val --target-env vulkan1.1`; returns the SPIR-V bytes.
/// Fails on any error or warning from either tool.
pub fn glsl_to_spirv(src: &str, what: &str) -> Result<Vec<u8>, ToolError> {
    let glslang = tool_path(Tool::Glslang)?;
    let spirv_val = tool_path(Tool::SpirvVal)?;
    let dir = Scratch::new(what).map_err(io_err(Tool::Glslang, what))?;
    let comp = dir.0.join("kernel.comp");
    let spv = dir.0.join("kernel.spv");
    std::fs::write(&comp, src).map_err(io_err(Tool::Glslang, what))?;
    let log = run(
        Tool::Glslang,
        what,
        Command::new(&glslang)
            .args(["-V", "--target-env", "vulkan1.1", "-S", "comp", "-o"])
            .arg(&spv)
            .arg(&comp),
    )?;
    if has_warning(&log) {
        return Err(ToolError::Warnings {
            tool: Tool::Glslang,
            what: what.to_string(),
            log,
        });
    }
    let log = run(
        Tool::SpirvVal,
        what,
        Command::new(&spirv_val)
            .args(["--target-env", "vulkan1.1"])
            .arg(&spv),
    )?;
    if has_warning(&log) {
        return Err(ToolError::Warnings {
            tool: Tool::SpirvVal,
            what: what.to_string(),
            log,
        });
    }
    std::fs::read(&spv).map_err(io_err(Tool::SpirvVal, what))
}

// ---------------------------------------------------------------------------------------------
// OpenCL (clBuildProgram)

/// What an OpenCL build produced.
#[derive(Clone, Debug)]
pub struct OpenClBuild {
    /// `platform / device`, e.g. `Portable Computing Language / pthread-haswell-AMD EPYC`.
    pub device: String,
    /// The kernels the program defines, sorted.
    pub kernels: Vec<String>,
    /// The build log (empty or whitespace when clean).
    pub log: String,
}

/// The OpenCL device builds run on: PoCL's CPU device when present (or the first device whose
/// `platform / device` name contains `$NABLAC_OPENCL_DEVICE`), else the first device found.
/// Discovered once per process (platform start-up is not safe to race in every ICD).
fn opencl_device() -> Result<(opencl3::device::Device, String), ToolError> {
    static DEVICE: OnceLock<Result<(usize, String), String>> = OnceLock::new();
    DEVICE
        .get_or_init(find_opencl_device)
        .as_ref()
        .map(|(id, label)| {
            (
                opencl3::device::Device::new(*id as opencl3::device::cl_device_id),
                label.clone(),
            )
        })
        .map_err(|hint| ToolError::Missing {
            tool: Tool::OpenCl,
            hint: hint.clone(),
        })
}

fn find_opencl_device() -> Result<(usize, String), String> {
    use opencl3::device::{Device, CL_DEVICE_TYPE_ALL};
    let platforms = opencl3::platform::get_platforms()
        .map_err(|e| format!("no OpenCL platform: {e}; apt pocl-opencl-icd ocl-icd-libopencl1"))?;
    let want = std::env::var("NABLAC_OPENCL_DEVICE").unwrap_or_default();
    let mut all = Vec::new();
    let mut errors = Vec::new();
    for p in &platforms {
        let pname = p.name().unwrap_or_default();
        match p.get_devices(CL_DEVICE_TYPE_ALL) {
            Ok(ids) => all.extend(ids.into_iter().map(|id| {
                (
                    id as usize,
                    format!("{pname} / {}", Device::new(id).name().unwrap_or_default()),
                )
            })),
            Err(e) => errors.push(format!("{pname}: {e}")),
        }
    }
    let pick = if !want.is_empty() {
        all.iter().position(|(_, l)| l.contains(&want))
    } else {
        all.iter()
            .position(|(_, l)| l.starts_with("Portable Computing Language"))
            .or(if all.is_empty() { None } else { Some(0) })
    };
    match pick {
        Some(i) => Ok(all.swap_remove(i)),
        None => Err(format!(
            "no OpenCL device{}{}; apt pocl-opencl-icd",
            if want.is_empty() {
                String::new()
            } else {
                format!(" matching NABLAC_OPENCL_DEVICE={want:?}")
            },
            if errors.is_empty() {
                String::new()
            } else {
                format!(" ({})", errors.join("; "))
            }
        )),
    }
}

/// Builds OpenCL C source with `clBuildProgram` (options as given, e.g. `-cl-std=CL1.2`) on the
/// device of [`opencl_device`]; fails with the build log on an error or a warning in the log.
pub fn opencl_build(src: &str, options: &str, what: &str) -> Result<OpenClBuild, ToolError> {
    use opencl3::context::Context;
    use opencl3::program::Program;
    let (device, label) = opencl_device()?;
    let fail = |log: String| ToolError::Failed {
        tool: Tool::OpenCl,
        what: what.to_string(),
        log,
    };
    let context = Context::from_device(&device)
        .map_err(|e| fail(format!("clCreateContext on {label}: {e}")))?;
    let mut program = Program::create_from_source(&context, src)
        .map_err(|e| fail(format!("clCreateProgramWithSource: {e}")))?;
    let built = program.build(context.devices(), options);
    let log = program
        .get_build_log(device.id())
        .unwrap_or_else(|e| format!("(no build log: {e})"));
    if let Err(e) = built {
        return Err(fail(format!("clBuildProgram on {label} ({e}):\n{log}")));
    }
    if has_warning(&log) {
        return Err(ToolError::Warnings {
            tool: Tool::OpenCl,
            what: what.to_string(),
            log,
        });
    }
    let names = program
        .get_kernel_names()
        .map_err(|e| fail(format!("CL_PROGRAM_KERNEL_NAMES: {e}")))?;
    let mut kernels: Vec<String> = names
        .trim_end_matches('\0')
        .split(';')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    kernels.sort();
    // Creating each kernel makes implementations that compile lazily finish their work.
    for k in &kernels {
        opencl3::kernel::Kernel::create(&program, k)
            .map_err(|e| fail(format!("clCreateKernel {k}: {e}")))?;
    }
    Ok(OpenClBuild {
        device: label,
        kernels,
        log,
    })
}

// ---------------------------------------------------------------------------------------------
// CUDA: NVRTC → PTX → ptxas

type NvrtcProgram = *mut std::ffi::c_void;

/// The NVRTC entry points used here, resolved once from `libnvrtc.so.12`.
struct Nvrtc {
    _lib: libloading::Library,
    version: (c_int, c_int),
    create: unsafe extern "C" fn(
        *mut NvrtcProgram,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> c_int,
    destroy: unsafe extern "C" fn(*mut NvrtcProgram) -> c_int,
    compile: unsafe extern "C" fn(NvrtcProgram, c_int, *const *const c_char) -> c_int,
    log_size: unsafe extern "C" fn(NvrtcProgram, *mut usize) -> c_int,
    log: unsafe extern "C" fn(NvrtcProgram, *mut c_char) -> c_int,
    ptx_size: unsafe extern "C" fn(NvrtcProgram, *mut usize) -> c_int,
    ptx: unsafe extern "C" fn(NvrtcProgram, *mut c_char) -> c_int,
    error_string: unsafe extern "C" fn(c_int) -> *const c_char,
}

// SAFETY: the NVRTC API is thread-safe for distinct programs; the struct holds only function pointers.
unsafe impl Send for Nvrtc {}
unsafe impl Sync for Nvrtc {}

fn nvrtc() -> Result<&'static Nvrtc, ToolError> {
    static NVRTC: OnceLock<Result<Nvrtc, String>> = OnceLock::new();
    let path = tool_path(Tool::Nvrtc)?;
    NVRTC
        .get_or_init(|| unsafe { load_nvrtc(&path) })
        .as_ref()
        .map_err(|e| ToolError::Missing {
            tool: Tool::Nvrtc,
            hint: e.clone(),
        })
}

/// SAFETY: loads a shared library and reads symbols with the NVRTC 12 C signatures.
unsafe fn load_nvrtc(path: &Path) -> Result<Nvrtc, String> {
    let lib = libloading::Library::new(path)
        .map_err(|e| format!("cannot load {}: {e}", path.display()))?;
    macro_rules! sym {
        ($name:literal) => {
            *lib.get(concat!($name, "\0").as_bytes())
                .map_err(|e| format!("{}: {e}", $name))?
        };
    }
    let version_fn: unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int = sym!("nvrtcVersion");
    let (mut major, mut minor) = (0, 0);
    version_fn(&mut major, &mut minor);
    Ok(Nvrtc {
        version: (major, minor),
        create: sym!("nvrtcCreateProgram"),
        destroy: sym!("nvrtcDestroyProgram"),
        compile: sym!("nvrtcCompileProgram"),
        log_size: sym!("nvrtcGetProgramLogSize"),
        log: sym!("nvrtcGetProgramLog"),
        ptx_size: sym!("nvrtcGetPTXSize"),
        ptx: sym!("nvrtcGetPTX"),
        error_string: sym!("nvrtcGetErrorString"),
        _lib: lib,
    })
}

/// The NVRTC version `(major, minor)`, when NVRTC is installed.
pub fn nvrtc_version() -> Result<(i32, i32), ToolError> {
    Ok(nvrtc()?.version)
}

/// What NVRTC produced.
#[derive(Clone, Debug)]
pub struct Ptx {
    pub ptx: String,
    /// The program log (empty when clean).
    pub log: String,
}

/// Compiles CUDA C++ with NVRTC for `--gpu-architecture=<arch>` (e.g. `compute_90`) plus `extra`
/// options; returns the PTX. Fails with the program log on an error or a warning.
pub fn nvrtc_compile(src: &str, arch: &str, extra: &[&str], what: &str) -> Result<Ptx, ToolError> {
    let api = nvrtc()?;
    let fail = |log: String| ToolError::Failed {
        tool: Tool::Nvrtc,
        what: what.to_string(),
        log,
    };
    let c_src = CString::new(src).map_err(|_| fail("source contains a NUL byte".into()))?;
    let c_name = CString::new(format!(
        "{}.cu",
        what.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
    ))
    .unwrap_or_default();
    let mut opts: Vec<CString> =
        vec![CString::new(format!("--gpu-architecture={arch}"))
            .map_err(|_| fail("bad arch".into()))?];
    for o in extra {
        opts.push(CString::new(*o).map_err(|_| fail(format!("option {o:?} contains a NUL byte")))?);
    }
    let opt_ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
    let err = |code: c_int| unsafe {
        CStr::from_ptr((api.error_string)(code))
            .to_string_lossy()
            .into_owned()
    };
    // SAFETY: pointers are valid for the calls; the program is destroyed on every path below.
    unsafe {
        let mut prog: NvrtcProgram = std::ptr::null_mut();
        let rc = (api.create)(
            &mut prog,
            c_src.as_ptr(),
            c_name.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        );
        if rc != 0 {
            return Err(fail(format!("nvrtcCreateProgram: {}", err(rc))));
        }
        let rc = (api.compile)(prog, opt_ptrs.len() as c_int, opt_ptrs.as_ptr());
        let mut n = 0usize;
        let log = if (api.log_size)(prog, &mut n) == 0 && n > 1 {
            let mut buf = vec![0u8; n];
            (api.log)(prog, buf.as_mut_ptr().cast());
            String::from_utf8_lossy(&buf[..n - 1]).into_owned()
        } else {
            String::new()
        };
        let result = if rc != 0 {
            Err(fail(format!("nvrtcCompileProgram: {}\n{log}", err(rc))))
        } else if has_warning(&log) {
            Err(ToolError::Warnings {
                tool: Tool::Nvrtc,
                what: what.to_string(),
                log,
            })
        } else {
            let mut n = 0usize;
            if (api.ptx_size)(prog, &mut n) != 0 || n == 0 {
                Err(fail("nvrtcGetPTXSize failed".into()))
            } else {
                let mut buf = vec![0u8; n];
                (api.ptx)(prog, buf.as_mut_ptr().cast());
                Ok(Ptx {
                    ptx: String::from_utf8_lossy(&buf[..n - 1]).into_owned(),
                    log,
                })
            }
        };
        (api.destroy)(&mut prog);
        result
    }
}

/// ptxas's resource report for one function (from `ptxas -v`).
#[derive(Copy, Clone, PartialEq, Eq, Debug, Default)]
pub struct PtxasReport {
    /// Registers per thread.
    pub registers: u32,
    /// Bytes of register spill stores to local memory.
    pub spill_stores: u32,
    /// Bytes of register spill loads from local memory.
    pub spill_loads: u32,
    /// Bytes of stack frame (local memory per thread, spills and local arrays).
    pub stack: u32,
}

/// Assembles PTX with `ptxas -arch=<sm> -v` and returns the full `-v` report (stdout+stderr).
/// Fails on an error or a warning.
pub fn ptxas(ptx: &str, sm: &str, what: &str) -> Result<String, ToolError> {
    let exe = tool_path(Tool::Ptxas)?;
    let dir = Scratch::new(what).map_err(io_err(Tool::Ptxas, what))?;
    let input = dir.0.join("kernel.ptx");
    std::fs::write(&input, ptx).map_err(io_err(Tool::Ptxas, what))?;
    let log = run(
        Tool::Ptxas,
        what,
        Command::new(&exe)
            .arg(format!("-arch={sm}"))
            .arg("-v")
            .arg("-o")
            .arg(dir.0.join("kernel.cubin"))
            .arg(&input),
    )?;
    if log
        .lines()
        .any(|l| l.starts_with("ptxas warning") || l.to_ascii_lowercase().contains("warning :"))
    {
        return Err(ToolError::Warnings {
            tool: Tool::Ptxas,
            what: what.to_string(),
            log,
        });
    }
    Ok(log)
}

/// The first unsigned integer in `s` directly followed by `unit` (e.g. `" bytes stack frame"`).
fn number_before(s: &str, unit: &str) -> Option<u32> {
    let end = s.find(unit)?;
    let head = s[..end].trim_end();
    let start = head
        .rfind(|c: char| !c.is_ascii_digit())
        .map_or(0, |i| i + 1);
    head[start..].parse().ok()
}

/// True when `name` (as ptxas prints it) is `entry`, either plain (`extern "C"`) or C++-mangled (`_Z<len><entry>…`).
fn names_entry(name: &str, entry: &str) -> bool {
    name == entry
        || name
            .strip_prefix(&format!("_Z{}{entry}", entry.len()))
            .is_some()
}

/// Parses the report for function `entry` out of `ptxas -v` output. `None` if it is not there.
pub fn parse_ptxas_report(log: &str, entry: &str) -> Option<PtxasReport> {
    let lines: Vec<&str> = log.lines().collect();
    let mut report = PtxasReport::default();
    let (mut saw_props, mut saw_used) = (false, false);
    let mut current: Option<&str> = None; // function whose "Used N registers" comes next
    for (i, l) in lines.iter().enumerate() {
        if let Some(rest) = l.split("Function properties for ").nth(1) {
            if names_entry(rest.trim(), entry) {
                let next = lines.get(i + 1)?;
                report.stack = number_before(next, " bytes stack frame")?;
                report.spill_stores = number_before(next, " bytes spill stores")?;
                report.spill_loads = number_before(next, " bytes spill loads")?;
                saw_props = true;
            }
        } else if let Some(rest) = l.split("Compiling entry function '").nth(1) {
            current = rest.split('\'').next();
        } else if l.contains("Used ") && l.contains(" registers") {
            if current.is_some_and(|c| names_entry(c, entry)) {
                report.registers = number_before(l, " registers")?;
                saw_used = true;
            }
            current = None;
        }
    }
    (saw_props && saw_used).then_some(report)
}

/// Every entry point (`.entry NAME(`) of a PTX module, in order.
pub fn ptx_entries(ptx: &str) -> Vec<String> {
    ptx.lines()
        .filter_map(|l| {
            l.trim_start()
                .strip_prefix(".visible .entry ")
                .or_else(|| l.trim_start().strip_prefix(".entry "))
        })
        .filter_map(|rest| rest.split('(').next())
        .map(|n| n.trim().to_string())
        .collect()
}

/// CUDA source → NVRTC (`compute_<sm>`, plus `nvrtc_options` such as `--fmad=false`) →
/// `ptxas -arch=sm_<sm> -v` → the report of every entry point, in PTX order.
pub fn ptxas_reports(
    cuda_src: &str,
    sm: &str,
    nvrtc_options: &[&str],
    what: &str,
) -> Result<Vec<(String, PtxasReport)>, ToolError> {
    let ptx = nvrtc_compile(cuda_src, &format!("compute_{sm}"), nvrtc_options, what)?;
    let log = ptxas(&ptx.ptx, &format!("sm_{sm}"), what)?;
    let entries = ptx_entries(&ptx.ptx);
    if entries.is_empty() {
        return Err(ToolError::Failed {
            tool: Tool::Nvrtc,
            what: what.to_string(),
            log: "the PTX has no entry point".into(),
        });
    }
    entries
        .into_iter()
        .map(|e| match parse_ptxas_report(&log, &e) {
            Some(r) => Ok((e, r)),
            None => Err(ToolError::Failed {
                tool: Tool::Ptxas,
                what: what.to_string(),
                log: format!("no resource report for entry {e:?} in ptxas -v output:\n{log}"),
            }),
        })
        .collect()
}

/// CUDA source → NVRTC (`compute_90`) → `ptxas -arch=sm_90 -v` → the report for kernel `entry`.
/// Fails loudly on any compiler error or warning, or if ptxas reports nothing for `entry`.
pub fn ptxas_report(cuda_src: &str, entry: &str) -> Result<PtxasReport, ToolError> {
    ptxas_report_for(cuda_src, entry, "90")
}

/// [`ptxas_report`] for another architecture: `sm` is the number (`"80"`, `"90"`, …).
pub fn ptxas_report_for(cuda_src: &str, entry: &str, sm: &str) -> Result<PtxasReport, ToolError> {
    let ptx = nvrtc_compile(cuda_src, &format!("compute_{sm}"), &[], entry)?;
    let log = ptxas(&ptx.ptx, &format!("sm_{sm}"), entry)?;
    parse_ptxas_report(&log, entry).ok_or_else(|| ToolError::Failed {
        tool: Tool::Ptxas,
        what: entry.to_string(),
        log: format!("no resource report for entry {entry:?} in ptxas -v output:\n{log}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ptxas_verbose_output() {
        let log = "ptxas info    : 0 bytes gmem\n\
ptxas info    : Compiling entry function '_Z5asianPdj' for 'sm_90'\n\
ptxas info    : Function properties for _Z5asianPdj\n\
    2016 bytes stack frame, 1208 bytes spill stores, 1184 bytes spill loads\n\
ptxas info    : Used 255 registers, 368 bytes cmem[0]\n\
ptxas info    : Compiling entry function 'smoke' for 'sm_90'\n\
ptxas info    : Function properties for smoke\n\
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n\
ptxas info    : Used 30 registers, 1024 bytes smem, 376 bytes cmem[0]\n";
        assert_eq!(
            parse_ptxas_report(log, "asian"),
            Some(PtxasReport {
                registers: 255,
                spill_stores: 1208,
                spill_loads: 1184,
                stack: 2016
            })
        );
        assert_eq!(
            parse_ptxas_report(log, "smoke"),
            Some(PtxasReport {
                registers: 30,
                spill_stores: 0,
                spill_loads: 0,
                stack: 0
            })
        );
        assert_eq!(parse_ptxas_report(log, "smok"), None);
        assert_eq!(parse_ptxas_report(log, "asia"), None);
    }
}

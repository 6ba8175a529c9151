//! `nablac._nablac`: the extension module under the `nablac` Python package.
//!
//! A thin layer, as the command line is: tapes are read and written by `nablac::format`,
//! recorded by `nablac::record`, compiled by `nablac::driver` (every compile policy: defaults,
//! refusals, auto mode, the CPU back end) and run by `nablac_runtime::Backend`. This file maps
//! Python arguments to a `driver::Request`, spells the driver's errors as keyword arguments
//! (`segments=8`), and releases the GIL while compiling and running.
//!
//! Errors are raised as the classes of `nablac._errors` (a hierarchy under `nablac.Error`,
//! defined in Python so that a class can also be a `ValueError` or an `OSError`).

use nablac::compile::CpuBackend;
use nablac::driver::{DriverError, Opt, Request, MAX_RUN_MARKETS};
use nablac::emit::{Manifest, Mode, Precision, ScratchLayout, Target};
use nablac::plan::Checkpoint;
use nablac::record::{Recorder as RustRecorder, Var};
use nablac::tape::Tape;
use nablac_runtime::{Backend, Report, RunOptions};
use numpy::{IntoPyArray, PyArray2};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};
use std::path::PathBuf;
use std::time::Instant;

/// A failure, by the `nablac._errors` class it is raised as.
#[derive(Debug)]
enum Fail {
    /// A tape that breaks a rule of TAPE-FORMAT.md.
    Tape(String),
    /// A mistake while recording.
    Record(String),
    /// A request the driver or the compiler refuses.
    Compile(String),
    /// A kernel that cannot be loaded or run.
    Run(String),
    /// An argument out of its range, of the wrong kind, or unknown.
    Option(String),
    /// A file that cannot be read or written.
    File(String),
}

impl From<Fail> for PyErr {
    fn from(f: Fail) -> PyErr {
        let (class, msg) = match f {
            Fail::Tape(m) => ("TapeError", m),
            Fail::Record(m) => ("RecordError", m),
            Fail::Compile(m) => ("CompileError", m),
            Fail::Run(m) => ("RunError", m),
            Fail::Option(m) => ("OptionError", m),
            Fail::File(m) => ("FileError", m),
        };
        Python::attach(
            |py| match py.import("nablac._errors").and_then(|m| m.getattr(class)) {
                Ok(cls) => PyErr::from_type(cls.cast_into().expect("an exception class"), msg),
                // The package is broken (the module imported alone): still an exception, never a crash.
                Err(_) => pyo3::exceptions::PyRuntimeError::new_err(msg),
            },
        )
    }
}

type Res<T> = Result<T, Fail>;

/// A string as Python writes it: `'off'`.
fn q(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// How a keyword argument spells option `o` with `value`: `segments=8`, `checkpoint='off'`,
/// `greek_stderr=False`.
fn keyword(o: Opt, value: Option<&str>) -> String {
    let field = o.field();
    let Some(v) = value else {
        return field.to_string();
    };
    let numeric = matches!(
        o,
        Opt::Segments
            | Opt::CkptNodes
            | Opt::SegLen
            | Opt::WorkgroupSize
            | Opt::MinBlocks
            | Opt::Markets
    );
    let shown = if numeric {
        v.to_string()
    } else if v == "true" || v == "false" {
        if v == "true" { "True" } else { "False" }.to_string()
    } else if o == Opt::LadderInputs {
        format!("[{}]", q(v))
    } else {
        q(v)
    };
    format!("{field}={shown}")
}

/// The driver's (or the compiler's) error in Python's words.
fn spelled(e: impl Into<DriverError>) -> Fail {
    let e = e.into();
    Fail::Compile(e.spell(&keyword))
}

fn target_of(name: &str) -> Res<Target> {
    Ok(match name {
        "cpu" => Target::Cpu,
        "cuda" => Target::Cuda,
        "opencl" => Target::Opencl,
        "glsl" | "vulkan" => Target::Glsl,
        _ => {
            return Err(Fail::Option(format!(
                "target={}: expected one of 'cpu', 'cuda', 'opencl', 'vulkan' (or 'glsl')",
                q(name)
            )))
        }
    })
}

fn mode_of(name: Option<&str>) -> Res<Option<Mode>> {
    Ok(match name {
        None | Some("auto") => None,
        Some("reverse") => Some(Mode::Reverse),
        Some("forward") => Some(Mode::Forward),
        Some("price") => Some(Mode::Price),
        Some(m) => {
            return Err(Fail::Option(format!(
                "mode={}: expected one of 'auto' (or None), 'reverse', 'forward', 'price'",
                q(m)
            )))
        }
    })
}

fn precision_of(name: Option<&str>) -> Res<Option<Precision>> {
    Ok(match name {
        None => None,
        Some("f64") => Some(Precision::F64),
        Some("f32") => Some(Precision::F32),
        Some(p) => {
            return Err(Fail::Option(format!(
                "precision={}: expected 'f32', 'f64' or None (the target's default)",
                q(p)
            )))
        }
    })
}

/// The compile options a keyword argument may name: every field of `driver::Request` but the
/// three `compile` and `run` take by name.
fn option_names() -> Vec<&'static str> {
    Opt::ALL
        .into_iter()
        .filter(|o| !matches!(o, Opt::Target | Opt::Mode | Opt::Precision))
        .map(Opt::field)
        .collect()
}

fn whole(key: &str, v: &Bound<'_, PyAny>) -> Res<u32> {
    if v.is_instance_of::<pyo3::types::PyBool>() {
        return Err(Fail::Option(format!("{key}={v}: expected a whole number")));
    }
    v.extract::<u32>().map_err(|_| {
        Fail::Option(format!(
            "{key}={}: expected a whole number 0 ..= 4294967295",
            repr(v)
        ))
    })
}

fn flag(key: &str, v: &Bound<'_, PyAny>) -> Res<bool> {
    if !v.is_instance_of::<pyo3::types::PyBool>() {
        return Err(Fail::Option(format!(
            "{key}={}: expected True or False",
            repr(v)
        )));
    }
    v.extract::<bool>()
        .map_err(|_| Fail::Option(format!("{key}: expected True or False")))
}

/// The one of `all` whose `name` is the string `v` (option `key`).
fn choice<T: Copy>(
    key: &str,
    v: &Bound<'_, PyAny>,
    all: &[T],
    name: fn(T) -> &'static str,
) -> Res<T> {
    let s: Option<String> = v.extract().ok();
    match s.and_then(|s| all.iter().copied().find(|&c| name(c) == s)) {
        Some(c) => Ok(c),
        None => Err(Fail::Option(format!(
            "{key}={}: expected one of {}",
            repr(v),
            all.iter()
                .map(|&c| q(name(c)))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

fn repr(v: &Bound<'_, PyAny>) -> String {
    v.repr().map_or_else(|_| "?".to_string(), |r| r.to_string())
}

/// The driver's request: `target`, `mode`, `precision` and the compile options given as
/// keywords (a field is `Some` only where its keyword was given, so the driver can refuse what a
/// kernel would not use).
fn request(
    target: Option<&str>,
    mode: Option<&str>,
    precision: Option<&str>,
    options: Option<&Bound<'_, PyDict>>,
) -> Res<Request> {
    let mut r = Request {
        target: target.map(target_of).transpose()?,
        mode: mode_of(mode)?,
        precision: precision_of(precision)?,
        ..Request::default()
    };
    let Some(options) = options else {
        return Ok(r);
    };
    for (k, v) in options.iter() {
        let key: String = k
            .extract()
            .map_err(|_| Fail::Option("option names are strings".into()))?;
        if v.is_none() {
            // None: the default, as if not given.
            continue;
        }
        let unknown = || {
            Fail::Option(format!(
                "unknown compile option {key}=...: the options are {}",
                option_names().join(", ")
            ))
        };
        match Opt::of_field(&key).ok_or_else(unknown)? {
            Opt::Target | Opt::Mode | Opt::Precision => return Err(unknown()),
            Opt::Checkpoint => {
                r.checkpoint = Some(choice(&key, &v, &Checkpoint::ALL, Checkpoint::name)?)
            }
            Opt::Segments => r.segments = Some(whole(&key, &v)?),
            Opt::CkptNodes => r.ckpt_nodes = Some(whole(&key, &v)?),
            Opt::SegLen => r.seg_len = Some(whole(&key, &v)?),
            Opt::ScratchLayout => {
                r.scratch_layout = Some(choice(&key, &v, &ScratchLayout::ALL, ScratchLayout::name)?)
            }
            Opt::WorkgroupSize => r.workgroup_size = Some(whole(&key, &v)?),
            Opt::Annotate => r.annotate = Some(flag(&key, &v)?),
            Opt::MinBlocks => r.min_blocks = Some(whole(&key, &v)?),
            Opt::CpuBackend => {
                r.cpu_backend = Some(choice(&key, &v, &CpuBackend::ALL, CpuBackend::name)?)
            }
            Opt::GreekStderr => r.greek_stderr = Some(flag(&key, &v)?),
            Opt::Markets => r.markets = Some(whole(&key, &v)?),
            Opt::Loops => r.loops = Some(flag(&key, &v)?),
            Opt::LadderInputs => {
                let names: Option<Vec<String>> = if v.is_instance_of::<PyString>() {
                    None
                } else {
                    v.extract().ok()
                };
                r.ladder_inputs = names.ok_or_else(|| {
                    Fail::Option(format!(
                        "ladder_inputs={}: expected a list of input names",
                        repr(&v)
                    ))
                })?;
            }
        }
    }
    Ok(r)
}

/// A recorded path: inputs, draws, nodes, outputs (TAPE-FORMAT.md). Read one with
/// `nablac.load(path)` or `nablac.parse(text)`, record one with `nablac.record()`.
#[pyclass(module = "nablac", name = "Tape", frozen)]
struct PyTape {
    tape: Tape,
}

fn verified(tape: Tape) -> Res<nablac::verify::Verified> {
    nablac::verify::verify(tape).map_err(|e| Fail::Tape(e.to_string()))
}

fn read_tape(bytes: &[u8], name: &str) -> Res<Tape> {
    let tape = nablac::format::read(bytes).map_err(|e| Fail::Tape(format!("{name}: {e}")))?;
    // The CLI verifies what it reads: the same refusals, with the same words.
    let v = nablac::verify::verify(tape).map_err(|e| Fail::Tape(format!("{name}: {e}")))?;
    Ok(v.tape().clone())
}

#[pymethods]
impl PyTape {
    /// Writes the tape to `path`: the binary form when `path` ends in `.bin` (or `binary=True`),
    /// else the text form (`.ntape`).
    #[pyo3(signature = (path, binary = None))]
    fn save(&self, path: PathBuf, binary: Option<bool>) -> PyResult<()> {
        let bin = binary.unwrap_or_else(|| path.extension().is_some_and(|e| e == "bin"));
        let bytes = if bin {
            nablac::format::write_binary(&self.tape)
        } else {
            nablac::format::write_text(&self.tape).into_bytes()
        };
        std::fs::write(&path, bytes)
            .map_err(|e| Fail::File(format!("cannot write {}: {e}", path.display())))?;
        Ok(())
    }

    /// The text form (`.ntape`).
    #[getter]
    fn text(&self) -> String {
        nablac::format::write_text(&self.tape)
    }

    /// The binary form (`.bin`).
    fn to_bytes<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &nablac::format::write_binary(&self.tape))
    }

    /// Each input's name and recorded value (the default market), in input order.
    #[getter]
    fn inputs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for i in &self.tape.inputs {
            d.set_item(&i.name, i.value)?;
        }
        Ok(d)
    }

    /// The outputs' names, in order.
    #[getter]
    fn outputs(&self) -> Vec<String> {
        self.tape.outputs.iter().map(|o| o.name.clone()).collect()
    }

    /// 1 + the highest draw index used (0 without draws).
    #[getter]
    fn n_draws(&self) -> u32 {
        self.tape.n_draws
    }

    /// SHA-256 of the canonical binary form (a kernel manifest's `tape_hash`).
    #[getter]
    fn hash(&self) -> String {
        nablac::format::content_hash(&self.tape)
    }

    fn __len__(&self) -> usize {
        self.tape.len()
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<PyTape>()
            .is_ok_and(|o| o.get().tape == self.tape)
    }

    fn __repr__(&self) -> String {
        let names = |v: Vec<String>| v.join(", ");
        format!(
            "<nablac.Tape: {} nodes, {} draws, inputs {}, outputs {}>",
            self.tape.len(),
            self.tape.n_draws,
            names(self.tape.inputs.iter().map(|i| i.name.clone()).collect()),
            names(self.outputs())
        )
    }
}

/// Reads a tape file, either form (told apart by content).
#[pyfunction]
fn load(path: PathBuf) -> PyResult<PyTape> {
    let name = path.display().to_string();
    let bytes = std::fs::read(&path).map_err(|e| Fail::File(format!("cannot read {name}: {e}")))?;
    Ok(PyTape {
        tape: read_tape(&bytes, &name)?,
    })
}

/// A tape from its text (`str`) or either form's bytes.
#[pyfunction]
fn parse(data: &Bound<'_, PyAny>) -> PyResult<PyTape> {
    let bytes: Vec<u8> = if data.is_instance_of::<PyString>() {
        data.extract::<String>()?.into_bytes()
    } else if let Ok(b) = data.cast::<PyBytes>() {
        b.as_bytes().to_vec()
    } else {
        return Err(Fail::Option(format!(
            "parse takes a tape's text (str) or bytes, not {}",
            data.get_type().name()?
        ))
        .into());
    };
    Ok(PyTape {
        tape: read_tape(&bytes, "<tape>")?,
    })
}

/// The recorder under `nablac.record()`: one node per call, in call order (nablac::record's
/// contract). Node ids index its variables.
#[pyclass(module = "nablac._nablac", unsendable)]
struct Recorder {
    rec: Option<RustRecorder>,
    vars: Vec<Var>,
}

impl Recorder {
    fn rec(&self) -> Res<&RustRecorder> {
        self.rec
            .as_ref()
            .ok_or_else(|| Fail::Record("the recording is finished".into()))
    }

    fn var(&self, id: usize) -> Res<&Var> {
        self.vars
            .get(id)
            .ok_or_else(|| Fail::Record(format!("no node %{id} in this recording")))
    }

    fn keep(&mut self, v: Var) -> usize {
        self.vars.push(v);
        self.vars.len() - 1
    }
}

fn record_error(e: nablac::record::RecordError) -> Fail {
    Fail::Record(e.to_string())
}

#[pymethods]
impl Recorder {
    #[new]
    fn new() -> Recorder {
        Recorder {
            rec: Some(RustRecorder::new()),
            vars: Vec::new(),
        }
    }

    fn input(&mut self, name: &str, value: f64) -> PyResult<usize> {
        let v = self.rec()?.input(name, value).map_err(record_error)?;
        Ok(self.keep(v))
    }

    fn constant(&mut self, x: f64) -> PyResult<usize> {
        let v = self.rec()?.constant(x);
        Ok(self.keep(v))
    }

    fn normal(&mut self, k: u32) -> PyResult<usize> {
        let v = self.rec()?.normal(k);
        Ok(self.keep(v))
    }

    fn uniform(&mut self, k: u32) -> PyResult<usize> {
        let v = self.rec()?.uniform(k);
        Ok(self.keep(v))
    }

    fn unary(&mut self, op: &str, a: usize) -> PyResult<usize> {
        let a = self.var(a)?;
        let v = match op {
            "neg" => -a,
            "exp" => a.exp(),
            "log" => a.ln(),
            "sqrt" => a.sqrt(),
            "abs" => a.abs(),
            "tanh" => a.tanh(),
            "ncdf" => a.ncdf(),
            _ => return Err(Fail::Record(format!("no unary op {op}")).into()),
        };
        Ok(self.keep(v))
    }

    fn binary(&mut self, op: &str, a: usize, b: usize) -> PyResult<usize> {
        let (a, b) = (self.var(a)?, self.var(b)?);
        let v = match op {
            "add" => a + b,
            "sub" => a - b,
            "mul" => a * b,
            "div" => a / b,
            "max" => a.max(b),
            "min" => a.min(b),
            "lt" => a.lt(b),
            "le" => a.le(b),
            "gt" => a.gt(b),
            "ge" => a.ge(b),
            "pow" => a.pow(b),
            _ => return Err(Fail::Record(format!("no binary op {op}")).into()),
        };
        Ok(self.keep(v))
    }

    fn output(&mut self, name: &str, a: usize) -> PyResult<()> {
        let a = self.var(a)?;
        self.rec()?.output(name, a).map_err(record_error)?;
        Ok(())
    }

    fn __len__(&self) -> usize {
        self.vars.len()
    }

    /// The tape (the recorder is spent).
    fn finish(&mut self) -> PyResult<PyTape> {
        let rec = self
            .rec
            .take()
            .ok_or_else(|| Fail::Record("the recording is finished".into()))?;
        self.vars.clear();
        let tape = rec.finish().map_err(record_error)?;
        // The recorder's contract is TAPE-FORMAT.md's rules; verify anyway, as a read tape is.
        let tape = verified(tape)?.tape().clone();
        Ok(PyTape { tape })
    }
}

/// A compiled kernel: its source (the target's language) and its manifest.
#[pyclass(module = "nablac", name = "Kernel", frozen)]
struct Kernel {
    source: String,
    manifest: Manifest,
}

fn json_loads<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyAny>> {
    py.import("json")?.call_method1("loads", (text,))
}

#[pymethods]
impl Kernel {
    /// The kernel source: CLIF or LLVM IR (cpu), CUDA C, OpenCL C or GLSL.
    #[getter]
    fn source(&self) -> &str {
        &self.source
    }

    /// The manifest (how a host launches the kernel), as a dict.
    #[getter]
    fn manifest<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let text = serde_json::to_string(&self.manifest)
            .map_err(|e| Fail::Compile(format!("manifest: {e}")))?;
        json_loads(py, &text)
    }

    #[getter]
    fn target(&self) -> &'static str {
        self.manifest.target.name()
    }

    #[getter]
    fn mode(&self) -> &'static str {
        self.manifest.mode.name()
    }

    #[getter]
    fn precision(&self) -> &'static str {
        self.manifest.precision.name()
    }

    /// Writes the source to `path` and the manifest to `path + ".json"`, as `nablac compile`
    /// does (`nablac run path` then runs it).
    fn write(&self, path: PathBuf) -> PyResult<()> {
        let mpath = nablac_manifest_path(&path);
        let m = serde_json::to_string_pretty(&self.manifest)
            .map_err(|e| Fail::Compile(format!("manifest: {e}")))?
            + "\n";
        std::fs::write(&path, &self.source)
            .map_err(|e| Fail::File(format!("cannot write {}: {e}", path.display())))?;
        std::fs::write(&mpath, m)
            .map_err(|e| Fail::File(format!("cannot write {}: {e}", mpath.display())))?;
        Ok(())
    }

    /// A kernel written by `Kernel.write` or `nablac compile`: the source at `path`, the
    /// manifest at `path + ".json"`.
    #[staticmethod]
    fn read(path: PathBuf) -> PyResult<Kernel> {
        let mpath = nablac_manifest_path(&path);
        let source = std::fs::read_to_string(&path)
            .map_err(|e| Fail::File(format!("cannot read {}: {e}", path.display())))?;
        let text = std::fs::read_to_string(&mpath).map_err(|e| {
            Fail::File(format!(
                "{} must be a kernel with its manifest at {}: {e}",
                path.display(),
                mpath.display()
            ))
        })?;
        let manifest: Manifest = serde_json::from_str(&text)
            .map_err(|e| Fail::Run(format!("{}: bad manifest: {e}", mpath.display())))?;
        Ok(Kernel { source, manifest })
    }

    fn __repr__(&self) -> String {
        format!(
            "<nablac.Kernel: {} {} {}, {} bytes of source>",
            self.manifest.target.name(),
            self.manifest.precision.name(),
            self.manifest.mode.name(),
            self.source.len()
        )
    }
}

fn nablac_manifest_path(p: &std::path::Path) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(".json");
    PathBuf::from(s)
}

/// Compiles `tape` as the driver resolves the request (no run: the CPU gets the reference back
/// end unless `cpu_backend` says).
#[pyfunction]
#[pyo3(signature = (tape, target = None, mode = None, precision = None, options = None))]
fn compile(
    py: Python<'_>,
    tape: &PyTape,
    target: Option<&str>,
    mode: Option<&str>,
    precision: Option<&str>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<Kernel> {
    let req = request(target, mode, precision, options)?;
    let tape = tape.tape.clone();
    let k = py.detach(move || -> Res<Kernel> {
        nablac::driver::check(&req).map_err(spelled)?;
        let v = verified(tape)?;
        let (_, k) = nablac::driver::compile(&v, &req, None).map_err(spelled)?;
        Ok(Kernel {
            source: k.source,
            manifest: k.manifest,
        })
    })?;
    Ok(k)
}

/// What a run reports, before it becomes a dict.
struct Ran {
    manifest: Manifest,
    /// One report per market (the first is the run's own without a ladder).
    reports: Vec<Report>,
    device: String,
    cache_hit: Option<bool>,
    /// The market every row of a ladder starts from (defaults, then `market`).
    market: Vec<f64>,
    /// A ladder's inputs and every market's input values (empty without one).
    laddered: Vec<String>,
    markets: Vec<Vec<f64>>,
    compile: f64,
    load: f64,
    run: f64,
    device_s: f64,
    assembly: f64,
    transfer: f64,
    allocation: f64,
}

/// Runs a kernel (or compiles a tape and runs it), as `nablac run` does.
#[allow(clippy::too_many_arguments)]
#[pyfunction]
#[pyo3(signature = (what, paths, seed, target = None, mode = None, precision = None, market = None, threads = None, options = None, ladder = None))]
fn run<'py>(
    py: Python<'py>,
    what: &Bound<'py, PyAny>,
    paths: u64,
    seed: u64,
    target: Option<&str>,
    mode: Option<&str>,
    precision: Option<&str>,
    market: Option<Vec<(String, f64)>>,
    threads: Option<usize>,
    options: Option<&Bound<'py, PyDict>>,
    ladder: Option<(Vec<String>, Vec<Vec<f64>>)>,
) -> PyResult<Bound<'py, PyDict>> {
    if paths == 0 || paths > i64::MAX as u64 {
        return Err(
            Fail::Option(format!("paths must be between 1 and 2^63 - 1, not {paths}")).into(),
        );
    }
    if let Some(t) = threads.filter(|t| !(1..=4096).contains(t)) {
        return Err(Fail::Option(format!("threads={t}: expected 1 ..= 4096")).into());
    }
    let mut req = request(target, mode, precision, options)?;
    enum What {
        Tape(Tape),
        Kernel(String, Box<Manifest>),
    }
    let what = if let Ok(t) = what.cast::<PyTape>() {
        req.target = Some(req.target.unwrap_or(Target::Cpu));
        What::Tape(t.get().tape.clone())
    } else if let Ok(k) = what.cast::<Kernel>() {
        let k = k.get();
        if let Some(t) = req.target.filter(|&t| t != k.manifest.target) {
            return Err(Fail::Option(format!(
                "target={}: the kernel is for {}; run it with target={} (or without target)",
                q(t.name()),
                k.manifest.target.name(),
                q(k.manifest.target.name())
            ))
            .into());
        }
        req.target = Some(k.manifest.target);
        What::Kernel(k.source.clone(), Box::new(k.manifest.clone()))
    } else {
        return Err(Fail::Option(format!(
            "run takes a Tape, a finished recording or a Kernel, not {}",
            what.get_type().name()?
        ))
        .into());
    };
    let target = req.target.unwrap_or(Target::Cpu);
    if threads.is_some() && target != Target::Cpu {
        return Err(Fail::Option(format!(
            "threads is for the cpu target, not {}: a GPU runs its paths on the device's own threads",
            target.name()
        ))
        .into());
    }
    let market = market.unwrap_or_default();
    // A ladder: the inputs it varies and one row of their values per market.
    let (laddered, rows) = ladder.unwrap_or_default();
    if let Some(r) = rows.iter().find(|r| r.len() != laddered.len()) {
        return Err(Fail::Option(format!(
            "ladder: a market of {} values for {} laddered inputs",
            r.len(),
            laddered.len()
        ))
        .into());
    }
    if !laddered.is_empty() && rows.is_empty() {
        return Err(Fail::Option("ladder: no markets to price".into()).into());
    }
    if rows.len() > MAX_RUN_MARKETS {
        return Err(Fail::Option(format!(
            "ladder: {} markets; at most {MAX_RUN_MARKETS} in one run",
            rows.len()
        ))
        .into());
    }
    let ran = py.detach(move || -> Res<Ran> {
        let started = Instant::now();
        let (source, manifest) = match what {
            What::Tape(tape) => {
                nablac::driver::check(&req).map_err(spelled)?;
                let v = verified(tape)?;
                let shape = nablac::driver::Run {
                    laddered: laddered.clone(),
                    markets: rows.len().max(1) as u32,
                    paths,
                };
                let (_, k) = nablac::driver::compile(&v, &req, Some(&shape)).map_err(spelled)?;
                (k.source, k.manifest)
            }
            What::Kernel(source, m) => {
                nablac::driver::check_kernel("the kernel", &m, &req).map_err(spelled)?;
                (source, *m)
            }
        };
        let compile = started.elapsed().as_secs_f64();
        // An input's index, for `market NAME=SHOWN` (a fixed value, or a ladder's `[...]`).
        let input = |name: &str, shown: &dyn std::fmt::Display| {
            manifest
                .inputs
                .iter()
                .position(|n| n == name)
                .ok_or_else(|| {
                    Fail::Option(format!(
                        "market {name}={shown}: the tape has no input {name} (inputs: {})",
                        manifest.inputs.join(", ")
                    ))
                })
        };
        let mut values = manifest.input_defaults.clone();
        for (name, value) in &market {
            values[input(name, value)?] = *value;
        }
        // Every market: the run's market with the laddered inputs set from its row.
        let at = laddered
            .iter()
            .map(|name| input(name, &"[...]"))
            .collect::<Result<Vec<_>, _>>()?;
        let markets: Vec<Vec<f64>> = if laddered.is_empty() {
            vec![values.clone()]
        } else {
            rows.iter()
                .map(|row| {
                    let mut m = values.clone();
                    for (&i, &v) in at.iter().zip(row) {
                        m[i] = v;
                    }
                    m
                })
                .collect()
        };
        let t = manifest.target;
        let backend = Backend::open(t)
            .map_err(|e| Fail::Run(format!("cannot open the {} backend: {e}", t.name())))?;
        let kernel = backend
            .load(&source, &manifest)
            .map_err(|e| Fail::Run(format!("cannot load the kernel: {e}")))?;
        backend
            .reserve(&kernel, paths)
            .map_err(|e| Fail::Run(format!("cannot allocate the run's buffers: {e}")))?;
        let load = started.elapsed().as_secs_f64();
        let opts = RunOptions {
            threads,
            chunk_paths: None,
            progress: None,
        };
        let before = kernel.timings();
        let run_started = Instant::now();
        let reports = backend
            .run(&kernel, &markets, paths, seed, &opts)
            .map_err(|e| Fail::Run(format!("the run failed: {e}")))?;
        let run = run_started.elapsed().as_secs_f64();
        let after = kernel.timings();
        if reports.len() != markets.len() {
            return Err(Fail::Run(format!(
                "the run gave {} reports for {} markets",
                reports.len(),
                markets.len()
            )));
        }
        Ok(Ran {
            device: backend.describe_with(&kernel),
            cache_hit: kernel.cache_hit(),
            manifest,
            reports,
            market: values,
            laddered,
            markets,
            compile,
            load,
            run,
            device_s: after.device_s - before.device_s,
            assembly: after.assemble_s - before.assemble_s,
            transfer: after.transfer_s - before.transfer_s,
            allocation: after.allocate_s - before.allocate_s,
        })
    })?;
    ran_dict(py, &ran, paths, seed)
}

/// A run as a dict of `nablac run --json`'s fields (outputs as a list, in order).
fn ran_dict<'py>(py: Python<'py>, r: &Ran, paths: u64, seed: u64) -> PyResult<Bound<'py, PyDict>> {
    let m = &r.manifest;
    let d = PyDict::new(py);
    d.set_item("target", m.target.name())?;
    d.set_item("device", &r.device)?;
    d.set_item("precision", m.precision.name())?;
    d.set_item("mode", m.mode.name())?;
    d.set_item("paths", paths)?;
    d.set_item("seed", seed)?;
    let market = PyDict::new(py);
    for (n, v) in m.inputs.iter().zip(&r.market) {
        market.set_item(n, v)?;
    }
    d.set_item("market", market)?;
    d.set_item("tape_hash", &m.tape_hash)?;
    d.set_item("kernel_hash", &m.fingerprint)?;
    d.set_item("cache_hit", r.cache_hit)?;
    d.set_item("fused_markets", m.fused_markets())?;
    d.set_item("outputs", outputs_list(py, m, &r.reports[0])?)?;
    if !r.laddered.is_empty() {
        let l = PyDict::new(py);
        l.set_item("inputs", &r.laddered)?;
        l.set_item("markets", &r.markets)?;
        let per = PyList::empty(py);
        for report in &r.reports {
            per.append(outputs_list(py, m, report)?)?;
        }
        l.set_item("outputs", per)?;
        d.set_item("ladder", l)?;
    }
    let t = PyDict::new(py);
    t.set_item("compile", r.compile)?;
    t.set_item("load", r.load)?;
    t.set_item("run", r.run)?;
    t.set_item("device", r.device_s)?;
    t.set_item("assembly", r.assembly)?;
    t.set_item("transfer", r.transfer)?;
    t.set_item("allocation", r.allocation)?;
    d.set_item("timings", t)?;
    Ok(d)
}

/// A report's outputs as a list of dicts (name, value, stderr, non_finite, greeks, greek_stderr).
fn outputs_list<'py>(
    py: Python<'py>,
    m: &Manifest,
    report: &Report,
) -> PyResult<Bound<'py, PyList>> {
    let outputs = PyList::empty(py);
    for o in &report.outputs {
        let od = PyDict::new(py);
        od.set_item("name", &o.name)?;
        od.set_item("value", o.value)?;
        od.set_item("stderr", o.stderr)?;
        od.set_item("non_finite", o.non_finite)?;
        let greeks = PyDict::new(py);
        for (i, g) in &o.greeks {
            greeks.set_item(i, g)?;
        }
        od.set_item("greeks", greeks)?;
        if !o.greek_stderr.is_empty() || (m.greek_stderr && m.mode != Mode::Price) {
            let se = PyDict::new(py);
            for ((i, _), s) in o.greeks.iter().zip(&o.greek_stderr) {
                se.set_item(i, s)?;
            }
            od.set_item("greek_stderr", se)?;
        } else {
            od.set_item("greek_stderr", py.None())?;
        }
        outputs.append(od)?;
    }
    Ok(outputs)
}

/// The most draws `draws` returns in one array (2 GiB of f64).
const MAX_DRAWS: u64 = 1 << 28;

/// The (paths, draws) array of the draws nablac's kernels take: draw k of path p in row p,
/// column k (TAPE-FORMAT.md, Draws), `kind` "normal" or "uniform", in `precision` "f64" (the
/// CPU's default) or "f32" (the GPUs'): the host's Philox and Box-Muller with libm, the bits
/// the Cranelift CPU kernels draw; the LLVM CPU kernels' vector log and cos are within a few
/// ulp of them (GPU kernels use the device's log and cos).
#[pyfunction]
#[pyo3(signature = (seed, paths, draws, kind = "normal", precision = "f64"))]
fn draws<'py>(
    py: Python<'py>,
    seed: u64,
    paths: u64,
    draws: u32,
    kind: &str,
    precision: &str,
) -> PyResult<Bound<'py, PyArray2<f64>>> {
    use nablac_runtime::philox;
    let f: fn(u64, u64, u32) -> f64 = match (kind, precision) {
        ("normal", "f64") => philox::normal_f64,
        ("uniform", "f64") => philox::uniform_f64,
        ("normal", "f32") => |s, p, k| f64::from(philox::normal_f32(s, p, k)),
        ("uniform", "f32") => |s, p, k| f64::from(philox::uniform_f32(s, p, k)),
        ("normal" | "uniform", p) => {
            return Err(Fail::Option(format!("precision={}: expected 'f64' or 'f32'", q(p))).into())
        }
        (k, _) => {
            return Err(
                Fail::Option(format!("kind={}: expected 'normal' or 'uniform'", q(k))).into(),
            )
        }
    };
    let n = paths.saturating_mul(u64::from(draws));
    if n > MAX_DRAWS {
        return Err(Fail::Option(format!(
            "paths={paths}, draws={draws}: {n} draws is more than one array takes here ({MAX_DRAWS}); ask for fewer paths at a time"
        ))
        .into());
    }
    let v: Vec<f64> = py.detach(move || {
        let mut v = Vec::with_capacity(n as usize);
        for p in 0..paths {
            for k in 0..draws {
                v.push(f(seed, p, k));
            }
        }
        v
    });
    let a = numpy::ndarray::Array2::from_shape_vec((paths as usize, draws as usize), v)
        .map_err(|e| Fail::Option(format!("draws: {e}")))?;
    Ok(a.into_pyarray(py))
}

/// A built-in product's tape (`nablac record PRODUCT`): its options left out are its defaults.
#[pyfunction]
#[pyo3(signature = (name, market = None, steps = None, assets = None, barrier = None, smoothing = None, rho = None))]
fn product(
    name: &str,
    market: Option<Vec<(String, f64)>>,
    steps: Option<u32>,
    assets: Option<u32>,
    barrier: Option<f64>,
    smoothing: Option<f64>,
    rho: Option<f64>,
) -> PyResult<PyTape> {
    use nablac::products::{record, Market, Options, Product};
    let bad = |e: nablac::products::ProductError| Fail::Option(e.to_string());
    let p = Product::from_name(name).map_err(bad)?;
    let mut o = Options::defaults(p);
    o.steps = steps.unwrap_or(o.steps);
    o.assets = assets.unwrap_or(o.assets);
    o.barrier = barrier.unwrap_or(o.barrier);
    o.smoothing = smoothing.unwrap_or(o.smoothing);
    o.rho = rho.unwrap_or(o.rho);
    let mut m = Market::default();
    for (n, v) in market.unwrap_or_default() {
        m.set(&n, v).map_err(bad)?;
    }
    let tape = record(p, &o, &m).map_err(bad)?;
    Ok(PyTape { tape })
}

#[pymodule]
fn _nablac(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyTape>()?;
    m.add_class::<Kernel>()?;
    m.add_class::<Recorder>()?;
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(parse, m)?)?;
    m.add_function(wrap_pyfunction!(compile, m)?)?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(draws, m)?)?;
    m.add_function(wrap_pyfunction!(product, m)?)?;
    m.add("OPTIONS", option_names())?;
    m.add("MAX_RUN_MARKETS", MAX_RUN_MARKETS)?;
    m.add("CPU_BACKEND", nablac::compile::CpuBackend::fastest().name())?;
    Ok(())
}

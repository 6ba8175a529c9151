//! The manifest: what a host needs to launch an emitted kernel, written beside it as `FILE.json`.
//!
//! A host that never saw the tape launches the kernel from source and manifest alone. The
//! manifest is the contract between `nablac` and `nablac-runtime` (and users' own hosts);
//! field names are stable, and a change bumps `MANIFEST_VERSION`.

use serde::{Deserialize, Serialize};

/// Bumped on any incompatible change to the manifest or to the kernel ABI it describes. Version 2
/// added `fingerprint` (a host refuses a kernel whose source or manifest was changed or swapped);
/// version 3 the standard errors of the Greeks and the non-finite rule: the sums `greek_sq:O:I`
/// and `non_finite:O`, squares taken about a shift (`shifts`, read after the inputs in the
/// inputs buffer), and `greek_stderr`.
pub const MANIFEST_VERSION: u32 = 3;

#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    Cuda,
    Opencl,
    Glsl,
    /// Cranelift IR text (CLIF), JIT-compiled by the runtime's CPU backend.
    Cpu,
}

impl Target {
    pub fn name(self) -> &'static str {
        match self {
            Target::Cuda => "cuda",
            Target::Opencl => "opencl",
            Target::Glsl => "glsl",
            Target::Cpu => "cpu",
        }
    }
}

#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Value (and its square, for the standard error) only.
    Price,
    /// Value and every Greek, by the adjoint (reverse) sweep.
    Reverse,
    /// Value and every Greek, by tangents carried along the one forward sweep (one direction per
    /// input, seeded with literals).
    Forward,
}

impl Mode {
    /// Does the kernel compute Greeks (reverse or forward), not just the value?
    pub fn has_greeks(self) -> bool {
        self != Mode::Price
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::Price => "price",
            Mode::Reverse => "reverse",
            Mode::Forward => "forward",
        }
    }
}

#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    F32,
    F64,
}

impl Precision {
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F64 => "f64",
        }
    }

    /// The size of one value, in bytes.
    pub fn bytes(self) -> usize {
        match self {
            Precision::F32 => 4,
            Precision::F64 => 8,
        }
    }
}

/// How the reverse sweep gets forward values back.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Checkpoint {
    /// Plain kernel: every forward value the reverse sweep reads stays alive.
    Off,
    /// Register recompute: persistent values stay in registers; each reverse segment re-runs
    /// its forward lines from them (GLSL default; offered for CUDA and OpenCL).
    Registers,
    /// Values crossing a cut go to a per-path global scratch buffer (CUDA and OpenCL).
    Scratch,
}

impl Checkpoint {
    /// Every strategy, in the order options list them.
    pub const ALL: [Checkpoint; 3] = [Checkpoint::Off, Checkpoint::Registers, Checkpoint::Scratch];

    /// The strategy's name, as options and reports spell it.
    pub fn name(self) -> &'static str {
        match self {
            Checkpoint::Off => "off",
            Checkpoint::Registers => "registers",
            Checkpoint::Scratch => "scratch",
        }
    }
}

/// One kernel parameter, buffer or push constant, in binding order.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct Param {
    pub name: String,
    /// Scalar type (`u32`, `u64`, `f32`, `f64`) or `ptr<T>` / `buffer<T>` for memory.
    pub ty: String,
    /// Kernel argument index (CUDA, OpenCL), descriptor binding (GLSL buffers) or byte offset
    /// in the push-constant block (GLSL push constants).
    pub binding: u32,
    /// `input` (host writes), `output` (host reads), `scratch` (device only), `push` (GLSL push
    /// constant), `value` (by-value kernel argument).
    pub role: String,
    /// What it holds, in words, including element counts in terms of the other fields.
    pub doc: String,
}

/// Everything a host needs to launch the kernel and turn its partial sums into a report.
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
pub struct Manifest {
    pub manifest_version: u32,
    pub nablac_version: String,
    pub target: Target,
    pub entry_point: String,
    pub mode: Mode,
    pub precision: Precision,
    /// Input names, in the order of the inputs buffer (and of each output's Greeks).
    pub inputs: Vec<String>,
    /// Markets per dispatch (a fused ladder; 1 otherwise, and then not written): the inputs
    /// buffer holds `markets` rows of `inputs` (market m's input i at `m * inputs.len() + i`),
    /// then `markets` blocks of `shifts`; a row of sums is `markets` blocks of `sums` (market m's
    /// sum s at `m * sums.len() + s`). Each market's sums have the bits of a one-market kernel's.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub markets: u32,
    /// The inputs that may differ between the markets of one dispatch (input order); the others
    /// are read from market 0's row, so a host gives one value for the whole group. Empty (and
    /// not written) for a one-market kernel.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ladder_inputs: Vec<String>,
    /// The values the tape was recorded at: the default market.
    pub input_defaults: Vec<f64>,
    pub outputs: Vec<String>,
    /// Per-path sums in the order of the partials buffer ([`sum_names`]): for each output O (in
    /// output order), `value:O`, `value_sq:O`, then (reverse and forward mode) `greek:O:I` for
    /// each input I in input order, then (when `greek_stderr`) `greek_sq:O:I` for each input,
    /// then `non_finite:O`.
    pub sums: Vec<String>,
    /// Whether the kernel sums the squares of the Greeks (`greek_sq:O:I`), for their standard
    /// errors (a compile option, on by default; always false in price mode).
    #[serde(default)]
    pub greek_stderr: bool,
    /// The shifts the squares are taken about, one per `_sq` sum and in their order, named by
    /// the sum whose leaf they shift ([`shift_names`]: `value:O`, `greek:O:I`). The inputs
    /// buffer holds the n_inputs input values and then these shifts, in the kernel's precision
    /// (TAPE-FORMAT.md, Results: a host passes path 0's leaves of these sums).
    #[serde(default)]
    pub shifts: Vec<String>,
    pub params: Vec<Param>,
    /// Threads per workgroup (a power of two); one path per thread.
    pub workgroup_size: u32,
    /// Segment blocks of the reverse sweep (1 for price and plain kernels).
    pub segments: u32,
    /// The checkpoint strategy the kernel uses (`off` for price and plain kernels).
    pub checkpoint: Checkpoint,
    /// Values a checkpointed kernel keeps across its segments (declared at its top level): the
    /// plan's persistent values that are live and not constants. 0 whenever `checkpoint` is `off`,
    /// on every target: price kernels, plain kernels and CPU kernels (which never checkpoint).
    pub persistent: u32,
    /// Scratch strategy: f32/f64 slots per path in the scratch buffer (0 otherwise).
    pub scratch_slots_per_path: u32,
    /// `soa` (`scratch[slot * invocations + tid]`) or `aos`; empty when there is no scratch.
    pub scratch_layout: String,
    /// The tape's `n_draws`.
    pub draws: u32,
    /// SHA-256 (lower-case hex) of the tape's canonical binary form (`nablac::format::content_hash`).
    pub tape_hash: String,
    /// Options the host's compiler needs for bit-reproducible results (`--fmad=false` for NVRTC;
    /// `-cl-fp32-correctly-rounded-divide-sqrt` for OpenCL); empty for GLSL.
    #[serde(default)]
    pub compile_options: Vec<String>,
    /// SHA-256 (lower-case hex) of the kernel source and this manifest with an empty fingerprint
    /// ([`Manifest::fingerprint_of`]): a host checks it before any driver sees the source, so a
    /// kernel paired with another kernel's manifest, or either edited, is refused.
    #[serde(default)]
    pub fingerprint: String,
}

/// The most markets one kernel may fuse (`Manifest::markets`).
pub const MAX_MARKETS: u32 = 64;

fn one() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

impl Manifest {
    /// Markets per dispatch (`markets`, at least 1).
    pub fn fused_markets(&self) -> usize {
        self.markets.max(1) as usize
    }

    /// f64 values one path (CPU) or one group (GPU partials) writes: `markets` blocks of `sums`.
    pub fn row_len(&self) -> usize {
        self.fused_markets() * self.sums.len()
    }

    /// The market values at the start of the inputs buffer: `markets` rows of `inputs`.
    pub fn market_values_len(&self) -> usize {
        self.fused_markets() * self.inputs.len()
    }

    /// The shifts after them: `markets` blocks of `shifts`.
    pub fn shifts_len(&self) -> usize {
        self.fused_markets() * self.shifts.len()
    }

    /// Values in the inputs buffer: the market values, then the shifts.
    pub fn inputs_len(&self) -> usize {
        self.market_values_len() + self.shifts_len()
    }

    /// The fingerprint of `source` under this manifest: SHA-256 over the source's bytes, a zero
    /// byte, and the manifest's JSON (fields in declaration order) with `fingerprint` empty.
    pub fn fingerprint_of(&self, source: &str) -> String {
        use sha2::{Digest, Sha256};
        let mut m = self.clone();
        m.fingerprint = String::new();
        let json = serde_json::to_string(&m).unwrap_or_default();
        let mut h = Sha256::new();
        h.update(source.as_bytes());
        h.update([0u8]);
        h.update(json.as_bytes());
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The manifest of a hand-written GPU kernel of the emitted ABI (the runtime's driver probes
    /// and tests): price mode, not checkpointed, `gpu_params`'s table, the compiler's driver
    /// options, the given inputs (name, default), outputs and sums; not sealed.
    pub fn hand_written(
        target: Target,
        precision: Precision,
        entry_point: &str,
        workgroup_size: u32,
        inputs: &[(&str, f64)],
        outputs: &[&str],
        sums: &[&str],
    ) -> Manifest {
        Manifest {
            manifest_version: MANIFEST_VERSION,
            nablac_version: String::new(),
            target,
            entry_point: entry_point.into(),
            mode: Mode::Price,
            precision,
            inputs: inputs.iter().map(|(n, _)| n.to_string()).collect(),
            markets: 1,
            ladder_inputs: Vec::new(),
            input_defaults: inputs.iter().map(|(_, v)| *v).collect(),
            outputs: outputs.iter().map(|o| o.to_string()).collect(),
            params: gpu_params(target, precision, sums.len(), None),
            sums: sums.iter().map(|s| s.to_string()).collect(),
            greek_stderr: false,
            shifts: Vec::new(),
            workgroup_size,
            segments: 1,
            checkpoint: Checkpoint::Off,
            persistent: 0,
            scratch_slots_per_path: 0,
            scratch_layout: String::new(),
            draws: 0,
            tape_hash: String::new(),
            compile_options: compile_options(target),
            fingerprint: String::new(),
        }
    }

    /// Sets `fingerprint` for `source` (what every emitter does last).
    pub fn seal(&mut self, source: &str) {
        self.fingerprint = self.fingerprint_of(source);
    }
}

/// The options a target's driver compiler needs for bit-reproducible results: `--fmad=false` for
/// NVRTC (no fused multiply-add), `-cl-fp32-correctly-rounded-divide-sqrt` for OpenCL; none for
/// GLSL (its body says `precise`) and the CPU. The compiler writes them into the manifest and a
/// host passes these, never what a file says.
pub fn compile_options(target: Target) -> Vec<String> {
    match target {
        Target::Cuda => vec!["--fmad=false".into()],
        Target::Opencl => vec!["-cl-fp32-correctly-rounded-divide-sqrt".into()],
        Target::Glsl | Target::Cpu => Vec::new(),
    }
}

/// The per-path sums of a kernel, in partials (and CPU row) order: for each output O,
/// `value:O`, `value_sq:O`, then in reverse and forward mode `greek:O:I` for each input I, then
/// when `greek_stderr` (and the mode has Greeks) `greek_sq:O:I` for each input I, then
/// `non_finite:O`. The one place this order is written down: every emitter fills
/// `Manifest::sums` from it. What each leaf is: [`crate::report::output_leaves`].
pub fn sum_names(
    outputs: &[String],
    inputs: &[String],
    mode: Mode,
    greek_stderr: bool,
) -> Vec<String> {
    let mut sums = Vec::new();
    for o in outputs {
        sums.push(format!("value:{o}"));
        sums.push(format!("value_sq:{o}"));
        if mode.has_greeks() {
            sums.extend(inputs.iter().map(|i| format!("greek:{o}:{i}")));
            if greek_stderr {
                sums.extend(inputs.iter().map(|i| format!("greek_sq:{o}:{i}")));
            }
        }
        sums.push(format!("non_finite:{o}"));
    }
    sums
}

/// The shifts of a kernel's squares, in the order they follow the inputs in the inputs buffer:
/// for each output O, `value:O` (the shift of `value_sq:O`), then when the kernel sums the
/// Greeks' squares `greek:O:I` for each input I (the shift of `greek_sq:O:I`). Each is named by
/// the sum whose path-0 leaf a host passes as the shift.
pub fn shift_names(
    outputs: &[String],
    inputs: &[String],
    mode: Mode,
    greek_stderr: bool,
) -> Vec<String> {
    let mut shifts = Vec::new();
    for o in outputs {
        shifts.push(format!("value:{o}"));
        if mode.has_greeks() && greek_stderr {
            shifts.extend(inputs.iter().map(|i| format!("greek:{o}:{i}")));
        }
    }
    shifts
}

/// Where one output's sums sit in a row of `Manifest::sums` (indices into it).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct OutputLayout {
    pub value: usize,
    pub value_sq: usize,
    /// `greek:O:I` for each input I (empty in price mode).
    pub greeks: Vec<usize>,
    /// `greek_sq:O:I` for each input I (empty unless `greek_stderr`).
    pub greek_sq: Vec<usize>,
    pub non_finite: usize,
    /// The indices into `Manifest::shifts` of this output's shifts: the value's, then the
    /// Greeks' (when `greek_stderr`).
    pub shifts: std::ops::Range<usize>,
}

impl Manifest {
    /// Each output's sums, checked: `sums` and `shifts` must be exactly [`sum_names`] and
    /// [`shift_names`] of the manifest's outputs, inputs, mode and `greek_stderr`.
    pub fn layout(&self) -> Result<Vec<OutputLayout>, String> {
        let greek_stderr = self.greek_stderr && self.mode.has_greeks();
        let want = sum_names(&self.outputs, &self.inputs, self.mode, greek_stderr);
        if self.sums != want || self.greek_stderr != greek_stderr {
            return Err(format!(
                "{} sums for {} outputs and {} inputs in {} mode (greek_stderr {}): expected {:?}",
                self.sums.len(),
                self.outputs.len(),
                self.inputs.len(),
                self.mode.name(),
                self.greek_stderr,
                want
            ));
        }
        let shifts = shift_names(&self.outputs, &self.inputs, self.mode, greek_stderr);
        if self.shifts != shifts {
            return Err(format!("shifts {:?}: expected {:?}", self.shifts, shifts));
        }
        let n_in = if self.mode.has_greeks() {
            self.inputs.len()
        } else {
            0
        };
        let n_sq = if greek_stderr { n_in } else { 0 };
        let per_output = 3 + n_in + n_sq;
        Ok((0..self.outputs.len())
            .map(|o| {
                let a = o * per_output;
                OutputLayout {
                    value: a,
                    value_sq: a + 1,
                    greeks: (a + 2..a + 2 + n_in).collect(),
                    greek_sq: (a + 2 + n_in..a + 2 + n_in + n_sq).collect(),
                    non_finite: a + 2 + n_in + n_sq,
                    shifts: o * (1 + n_sq)..(o + 1) * (1 + n_sq),
                }
            })
            .collect())
    }
}

fn param(name: &str, ty: String, binding: u32, role: &str, doc: String) -> Param {
    Param {
        name: name.into(),
        ty,
        binding,
        role: role.into(),
        doc,
    }
}

/// The parameter table of a GPU kernel (CUDA, OpenCL: kernel arguments in this order; GLSL:
/// `inputs` and `partials` at descriptor bindings 0 and 1 of set 0, the u32 scalars in the
/// push-constant block at byte offsets 0, 4, ..., 24), `scratch` the slots per path of a scratch
/// kernel. The one place the GPU launch ABI is written down: the emitters fill
/// `Manifest::params` from it and hosts bind from `Manifest::params`.
pub fn gpu_params(
    target: Target,
    precision: Precision,
    n_sums: usize,
    scratch: Option<u32>,
) -> Vec<Param> {
    let real = precision.name();
    let glsl = target == Target::Glsl;
    let mem = |t: &str| {
        if glsl {
            format!("buffer<{t}>")
        } else {
            format!("ptr<{t}>")
        }
    };
    let mut ps = vec![
        param("inputs", mem(real), 0, "input", "n_inputs input values, in input order (manifest `inputs`), then one value per entry of manifest `shifts`".into()),
        param(
            "partials",
            mem("f64"),
            1,
            "output",
            format!("n_groups * {n_sums} f64: partials[group * {n_sums} + s] = the group's pairwise sum of sum s"),
        ),
    ];
    let scalars: [(&str, &str); 7] = [
        (
            "path_base_lo",
            "low 32 bits of the first path of the launch (a multiple of workgroup_size)",
        ),
        (
            "path_base_hi",
            "high 32 bits of the first path of the launch",
        ),
        (
            "paths_lo",
            "low 32 bits of the total path count (paths at or past it contribute 0)",
        ),
        ("paths_hi", "high 32 bits of the total path count"),
        ("seed_lo", "low 32 bits of the seed (Philox key word 0)"),
        ("seed_hi", "high 32 bits of the seed (Philox key word 1)"),
        (
            "zero",
            "always 0: the run-time zero of the opaque identity and the re-keyed generator",
        ),
    ];
    for (k, (name, doc)) in scalars.iter().enumerate() {
        let k = k as u32;
        if glsl {
            ps.push(param(name, "u32".into(), 4 * k, "push", (*doc).into()));
        } else {
            ps.push(param(name, "u32".into(), 2 + k, "value", (*doc).into()));
        }
    }
    if let Some(slots) = scratch {
        ps.push(param(
            "scratch",
            mem(real),
            9,
            "scratch",
            format!("{slots} slots per thread: {slots} * invocations values, device only"),
        ));
        ps.push(param(
            "invocations",
            "u32".into(),
            10,
            "value",
            "threads in the launch (n_groups * workgroup_size)".into(),
        ));
    }
    ps
}

//! CPU code: the tape lowered to Cranelift IR, written as CLIF text; the runtime JIT-compiles it (the reference and embedded default target).
//!
//! `nablac --target cpu` writes CLIF text (Cranelift's own printer, [`emit`]) and a [`Manifest`]
//! (target `cpu`). The runtime (`nablac_runtime::cpu::load`) parses the text with
//! `cranelift-reader` and JIT-compiles it: a CPU kernel loads from source + manifest, with no tape.
//!
//! # ABI (manifest version 1; `nablac_abi::cpu` owns it)
//!
//! One function, named by `manifest.entry_point` (`nablac_cpu_<mode>_<precision>`), in the host's C
//! calling convention (the text says `system_v`; the loader rewrites every signature to the
//! host's default, so the text is host-independent):
//!
//! ```text
//! fn(inputs: *const T, seed: u64, first_path: u64, count: u64, out: *mut f64)
//! ```
//!
//! - `inputs`: one `T` (f32 or f64, the kernel precision) per input, in `manifest.inputs` order,
//!   then one per entry of `manifest.shifts` (the constants the squares are taken about).
//! - `seed`: the Philox key, `(seed mod 2^32, seed div 2^32)`.
//! - paths `first_path .. first_path + count` are run in order (global path indices, so the draws
//!   do not depend on how a run is split); `count = 0` writes nothing.
//! - `out`: `count` rows of `manifest.sums.len()` f64, row `j` for path `first_path + j`. A row is
//!   the path's leaves in the order of `manifest.sums`, as `nablac_abi::report::output_leaves`
//!   states them: for each output, `value` (converted to f64), `value_sq` (its square about its
//!   shift, in f64), then in reverse and forward mode `greek:<input>` (d output / d input,
//!   converted to f64) for each input and their squares about their shifts, then `non_finite`
//!   (1 when the value or a Greek is NaN or infinite, and then every other leaf of the output 0).
//!
//! The kernel does no reduction: the host sums leaves in the fixed tree order of TAPE-FORMAT.md
//! (Results). A block call rather than one call per path: the per-path state (Philox keys, inputs
//! and every node that does not depend on a draw) is computed once per call, outside the loop.
//!
//! # What the code computes
//!
//! Forward values and adjoints exactly as `crate::ops` states them (TAPE-FORMAT.md's rules), in
//! the kernel precision, in the order of the plain kernel schedule (`crate::schedule`, the
//! statements the GPU kernels print too): adjoints start at +0.0 and each rule adds its
//! contribution in the table's order; only active nodes receive adjoints, dead nodes are not
//! emitted. Reverse mode runs one reverse sweep carrying one adjoint lane per output. Draws are Philox4x32-10 inline in the CLIF
//! (`imul`/`umulhi`), turned into normals exactly as `crate::philox`; `exp`, `log`, `cos`, `tanh`,
//! `erfc` and `pow` (`expf`, ... in f32) are calls to the host libm (`nablac_abi::cpu::LIBM`), for
//! exp, log and cos the functions Rust's `f64::exp`/`ln`/`cos` call; `sqrt` and `abs` are native. The CPU code
//! ignores the checkpoint plan (Cranelift's register allocator spills what it must), so plain and
//! checkpointed plans give the same function text and the same bits; the manifest says
//! `segments: 1`, `checkpoint: off`.

mod abi;
mod lower;
#[cfg(test)]
mod tests;

use crate::emit::manifest::{Checkpoint, Manifest, Param, Target, MANIFEST_VERSION};
pub use crate::emit::manifest::{Mode, Precision};
use crate::tape::Tape;
use crate::verify::Verified;

/// What to generate.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct Options {
    pub mode: Mode,
    pub precision: Precision,
    /// Sum the Greeks' squares for their standard errors (`greek_sq:O:I`; modes with Greeks).
    pub greek_stderr: bool,
}

/// A CPU kernel: CLIF text and the manifest that launches it.
#[derive(Clone, PartialEq, Debug)]
pub struct Kernel {
    pub source: String,
    pub manifest: Manifest,
    /// The same function as `source`, for `nablac_runtime::cpu::compile` without a parse.
    pub function: cranelift_codegen::ir::Function,
}

/// Why a CPU kernel could not be generated, loaded or run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ClifError {
    #[error("tape not lowerable to CPU code: {rule} (at {place})")]
    Tape { rule: &'static str, place: String },
    /// A schedule this lowering does not take yet.
    #[error("the Cranelift back end cannot lower {0}")]
    Unsupported(&'static str),
}

/// The entry point's name for `opts`: `nablac_cpu_<mode>_<precision>`.
pub fn entry_name(opts: &Options) -> String {
    format!("nablac_cpu_{}_{}", opts.mode.name(), opts.precision.name())
}

/// The per-path leaves (and partial sums) in row order: `manifest::sum_names`, as every target.
pub fn sums(tape: &Tape, opts: &Options) -> Vec<String> {
    crate::emit::sum_names(tape, opts.mode, opts.greek_stderr)
}

/// The one limit of the CPU code beyond the tape's rules: its row and input offsets fit the
/// lowering's 32-bit displacements.
pub(crate) fn check_size(tape: &Tape) -> Result<(), ClifError> {
    if tape.len() > u32::MAX as usize / 64 || tape.inputs.len() > (i32::MAX / 8) as usize {
        return Err(ClifError::Tape {
            rule: "the tape fits the CPU code's offsets",
            place: format!("{} nodes", tape.len()),
        });
    }
    Ok(())
}

fn params(opts: &Options, tape: &Tape, row: usize) -> Vec<Param> {
    let t = opts.precision.name();
    let p = |name: &str, ty: String, binding, role: &str, doc: String| Param {
        name: name.into(),
        ty,
        binding,
        role: role.into(),
        doc,
    };
    vec![
        p("inputs", format!("ptr<{t}>"), 0, "input", format!("{} input values, in manifest.inputs order, then one value per entry of manifest.shifts", tape.inputs.len())),
        p("seed", "u64".into(), 1, "value", "Philox key: (seed mod 2^32, seed div 2^32)".into()),
        p("first_path", "u64".into(), 2, "value", "global index of the first path of this call".into()),
        p("count", "u64".into(), 3, "value", "paths run by this call: first_path .. first_path + count".into()),
        p(
            "out",
            "ptr<f64>".into(),
            4,
            "output",
            format!("count rows of {row} f64 (manifest.sums order): the per-path leaves, row j for path first_path + j"),
        ),
    ]
}

/// The manifest of the CPU kernel for `v` under `opts` (every field filled; see the ABI above; a
/// laddered tape's names, defaults and hash are its one-market tape's).
pub fn manifest(v: &Verified, opts: &Options) -> Manifest {
    let tape = v.base();
    let markets = v.markets();
    let sums = sums(tape, opts);
    Manifest {
        manifest_version: MANIFEST_VERSION,
        nablac_version: env!("CARGO_PKG_VERSION").to_string(),
        target: Target::Cpu,
        entry_point: entry_name(opts),
        mode: opts.mode,
        precision: opts.precision,
        inputs: tape.inputs.iter().map(|i| i.name.clone()).collect(),
        markets,
        ladder_inputs: v.ladder_inputs(),
        input_defaults: tape.inputs.iter().map(|i| i.value).collect(),
        outputs: tape.outputs.iter().map(|o| o.name.clone()).collect(),
        params: params(opts, tape, markets as usize * sums.len()),
        sums,
        greek_stderr: opts.greek_stderr && opts.mode.has_greeks(),
        shifts: crate::emit::shift_names(tape, opts.mode, opts.greek_stderr),
        workgroup_size: 1,
        segments: 1,
        checkpoint: Checkpoint::Off,
        persistent: 0,
        scratch_slots_per_path: 0,
        scratch_layout: String::new(),
        draws: tape.n_draws,
        tape_hash: crate::format::content_hash(tape),
        compile_options: Vec::new(),
        fingerprint: String::new(),
    }
}

/// Lowers a verified tape to CLIF text and its manifest (the CPU code ignores the checkpoint
/// plan: Cranelift's register allocator spills what it must). Same tape and options give the
/// same bytes.
pub fn emit(v: &Verified, opts: &Options) -> Result<Kernel, ClifError> {
    emit_schedule(v, &plain_schedule(v, opts), opts)
}

/// The schedule the CPU code follows: the plain one (no checkpoint segments), with `opts`'s
/// mode and Greeks' squares. The LLVM back end follows the same.
pub fn plain_schedule(v: &Verified, opts: &Options) -> crate::schedule::Schedule {
    crate::schedule::Schedule::plain(
        v,
        crate::schedule::ScheduleOptions {
            greek_stderr: opts.greek_stderr,
            ..crate::schedule::ScheduleOptions::new(opts.mode)
        },
    )
}

/// [`emit`] lowering `schedule`, which must be [`plain_schedule`]`(v, opts)` (what
/// `compile::compile` builds once for every reader).
pub fn emit_schedule(
    v: &Verified,
    schedule: &crate::schedule::Schedule,
    opts: &Options,
) -> Result<Kernel, ClifError> {
    let tape = v.tape();
    check_size(tape)?;
    let manifest = manifest(v, opts);
    let function = lower::lower(v, schedule, opts, &manifest.entry_point)?;
    // Cranelift's printer, minus its `; v8 = 32` constant annotations (comments to the reader).
    let mut source = String::new();
    for line in function.display().to_string().lines() {
        source.push_str(line.split_once("  ; ").map_or(line, |(code, _)| code));
        source.push('\n');
    }
    let mut manifest = manifest;
    manifest.seal(&source);
    Ok(Kernel {
        source,
        manifest,
        function,
    })
}

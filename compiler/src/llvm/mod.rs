//! Fast CPU code (feature `llvm`): the plain schedule printed into an LLVM module through inkwell,
//! one Monte Carlo path per SIMD lane, written as LLVM IR text; the runtime
//! (`nablac_runtime::cpu::load`, feature `llvm`) optimises it for the host (O3, the host's CPU
//! and features) and JIT-compiles it.
//!
//! # ABI
//!
//! The CPU kernel ABI of `crate::clif` (`nablac_abi::cpu`), unchanged: the same entry point name,
//! parameters, rows and manifest (target `cpu`), so the runtime runs either back end's kernel
//! through the same call and the same fixed-order sums; it tells the two sources apart by their
//! first line (LLVM IR text begins `; ModuleID`, CLIF text `function`).
//!
//! # What the code computes
//!
//! The same statements as the Cranelift lowering (`crate::schedule::Schedule::plain`: price,
//! forward with its tangent lanes, reverse with one adjoint lane per output), each value a
//! `<W x T>` vector of W paths (`lower::lanes`: 8 f64 or 16 f32 with AVX-512, else 4 or 8). Arithmetic is the rule
//! table's, unfused and in the table's order, so it rounds as the Cranelift code does; the math
//! functions are the module's own vector code (`math.rs`, each with a stated ulp bound that
//! `tests.rs` checks against the host libm), so results differ from Cranelift's by those few
//! ulp (the tests hold the two to 1e-12 relative on every corpus tape and on random tapes).
//! Draws are Philox4x32-10 in vector integer operations (the high halves by 64-bit widening
//! multiplies) and Box–Muller through the vector `log` and `cos`. Values and adjoints live in
//! SSA registers; LLVM's register allocator reuses their storage by liveness.

mod lower;
mod math;
#[cfg(test)]
mod tests;

use crate::clif::{check_size, manifest, ClifError, Options};
use crate::emit::manifest::Manifest;
use crate::verify::Verified;
use inkwell::context::Context;

pub use lower::lanes;

/// An LLVM CPU kernel: LLVM IR text and the manifest that launches it (the CPU ABI's).
#[derive(Clone, PartialEq, Debug)]
pub struct Kernel {
    pub source: String,
    pub manifest: Manifest,
}

/// Why an LLVM CPU kernel could not be generated.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LlvmError {
    #[error(transparent)]
    Tape(#[from] ClifError),
    /// LLVM refused the module (a bug of this back end, reported rather than a panic).
    #[error("building the LLVM module: {0}")]
    Build(String),
}

/// Prints the plain schedule of `v` into an LLVM module (see the module doc) and returns its IR
/// text and manifest, `lanes(precision)` paths per vector (this machine's SIMD). Same tape,
/// options and machine give the same bytes.
pub fn emit(v: &Verified, opts: &Options) -> Result<Kernel, LlvmError> {
    emit_with_lanes(v, opts, lanes(opts.precision))
}

/// [`emit`] with `lanes` paths per vector (a power of two): every width gives each path the
/// same bits; a width wider than the host's SIMD is split by LLVM, a narrower one wastes it.
pub fn emit_with_lanes(v: &Verified, opts: &Options, lanes: u32) -> Result<Kernel, LlvmError> {
    emit_schedule(v, &crate::clif::plain_schedule(v, opts), opts, lanes)
}

/// [`emit_with_lanes`] printing `schedule`, which must be `clif::plain_schedule(v, opts)` (what
/// `compile::compile` builds once for every reader).
pub fn emit_schedule(
    v: &Verified,
    schedule: &crate::schedule::Schedule,
    opts: &Options,
    lanes: u32,
) -> Result<Kernel, LlvmError> {
    check_size(v.tape())?;
    let mut manifest = manifest(v, opts);
    let cx = Context::create();
    let module = lower::lower(&cx, v, schedule, opts, &manifest.entry_point, lanes)?;
    let source = module.print_to_string().to_string();
    manifest.seal(&source);
    Ok(Kernel { source, manifest })
}

//! nablac-abi: the contract between the kernels nablac emits and every host that runs them.
//!
//! The compiler (`nablac`) writes kernels to this contract and the runtime (`nablac-runtime`), a
//! user's own host (`examples/host.rs`) or a script (`scripts/gpu/cuda_host.py`) runs them by it.
//! Both sides depend on this crate, and it depends on no GPU driver and no code generator, so the
//! compiler needs no driver and a host needs no compiler. What it guarantees:
//!
//! - [`manifest`]: everything a host needs to launch an emitted kernel without the tape, written
//!   beside the kernel as `FILE.json`: entry point, precision, inputs and outputs, the kernel
//!   parameters with their bindings and roles ([`manifest::Param`], the machine-readable parameter
//!   table), workgroup size, checkpointing, and the per-path sums in partials order
//!   ([`manifest::sum_names`], the one place that order is written down). Field names are stable;
//!   an incompatible change to the manifest or to the kernel ABI it describes bumps
//!   [`manifest::MANIFEST_VERSION`].
//! - [`philox`]: the draws of TAPE-FORMAT.md (Philox4x32-10 and Box–Muller), the reference every
//!   kernel matches bit for bit; draw `k` of a path is a pure function of `(seed, path, k)`.
//! - [`report`]: the fixed summation order over paths (TAPE-FORMAT.md, Results) and the report built
//!   from it, so a result never depends on launch geometry, chunking or thread count.
//! - [`cpu`]: the CPU target's kernel ABI as data (the entry point's parameters, the calling
//!   convention of the CLIF text, the libm functions a kernel may import per precision). The
//!   compiler's Cranelift lowering and the runtime's loader each build their Cranelift signatures
//!   from it.

pub mod cpu;
pub mod manifest;
pub mod philox;
pub mod report;

pub use manifest::{Manifest, Mode, Precision, Target};
pub use report::{OutputReport, PartialSums, Report, ReportError};

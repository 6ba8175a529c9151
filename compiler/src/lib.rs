//! nablac: compiles Monte Carlo tapes into adjoint kernels.
//!
//! The data's way through (../shared/DESIGN.md):
//!
//! ```text
//! recorder / .ntape / .bin ──► Tape ──verify──► Verified ──► passes ──► Plan ──► Schedule ──► printers (emit, clif) ──► kernel source + manifest
//! ```
//!
//! Each arrow is one function with a typed result; nothing goes backwards.

pub mod budget;
pub mod clif;
pub mod closed_form;
pub mod compile;
pub mod corpus;
pub mod cost;
pub mod driver;
pub mod emit;
pub mod format;
pub mod ladder;
#[cfg(feature = "llvm")]
pub mod llvm;
pub mod ops;
pub mod passes;
pub mod plan;
/// The draws and the fixed-order sums are the kernel ABI's contracts (crate `nablac-abi`), shared
/// with the runtime and every backend.
pub use nablac_abi::{philox, report};
pub mod products;
pub mod record;
pub mod reference;
pub mod schedule;
pub mod tape;
/// Random valid tapes (feature `testing`: the fuzz targets and the cross-crate tests use them).
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod verify;

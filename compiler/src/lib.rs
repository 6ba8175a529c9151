//! nablac: compiles Monte Carlo tapes into adjoint kernels.
//!
//! The data's way through (../shared/DESIGN.md):
//!
//! ```text
//! recorder / .ntape / .bin ──► Tape ──verify──► TapeInfo ──► passes ──► Plan ──► emit ──► kernel source + manifest
//! ```
//!
//! Each arrow is one function with a typed result; nothing goes backwards.

pub mod emit;
pub mod format;
pub mod jit;
pub mod passes;
pub mod philox;
pub mod plan;
pub mod products;
pub mod record;
pub mod reference;
pub mod report;
pub mod tape;
#[cfg(test)]
pub(crate) mod testing;
pub mod verify;

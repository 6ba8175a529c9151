//! nablac-runtime: loads kernels that nablac emitted (source + manifest) and runs them.
//!
//! This crate sits BELOW the compiler: it never sees a tape. It owns the contracts every host
//! shares with the emitted code: the manifest (how to launch a kernel), the draws (`philox`) and
//! the fixed-order sums that turn per-path leaves into a report (`report`). The compiler depends
//! on it and re-exports those contracts; `nablac run` (in the compiler's binary) drives it.

pub mod manifest;
pub mod philox;
pub mod report;

pub use manifest::Manifest;
pub mod gpu;
pub mod vulkan;
pub mod cuda;

//! Shared helpers for the cross-crate tests in tests/.
//!
//! - [`toolchain`]: push kernel source through real compilers (glslang + spirv-val, OpenCL's
//!   clBuildProgram, NVRTC + ptxas) and read ptxas's resource report.

pub mod toolchain;

pub use toolchain::{check, ptxas_report, tools_required, PtxasReport, ToolError};

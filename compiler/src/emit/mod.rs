//! Kernel source for CUDA, OpenCL and Vulkan GLSL: one C-like emitter, three dialects.

/// The manifest is the runtime's contract (crate `nablac-runtime`); the emitters fill it.
pub use nablac_runtime::manifest;
pub use nablac_runtime::manifest::{Manifest, Mode, Precision, Target};

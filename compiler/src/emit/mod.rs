//! Kernel source for CUDA, OpenCL and Vulkan GLSL: one C-like emitter, three dialects.

pub mod manifest;

pub use manifest::{Manifest, Mode, Precision, Target};

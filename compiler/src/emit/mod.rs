//! Kernel source for CUDA, OpenCL and Vulkan GLSL: one C-like emitter, three dialects.

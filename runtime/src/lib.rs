//! nablac-runtime: loads emitted kernels (source + manifest) and runs them.

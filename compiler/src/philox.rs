//! Philox4x32-10 and the draws of TAPE-FORMAT.md, in Rust: the reference every kernel must match bit for bit.

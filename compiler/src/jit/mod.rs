//! CPU code: the tape lowered to Cranelift IR and JIT-compiled (the reference and embedded default target).

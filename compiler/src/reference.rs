//! The f64 reference: TAPE-FORMAT.md evaluated draw by draw, forward and adjoint, with no cleverness.

//! The verifier: checks every rule of TAPE-FORMAT.md and returns the facts later stages need.

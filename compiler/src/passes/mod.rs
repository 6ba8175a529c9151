//! The middle-end passes: activity, liveness, segmentation (the checkpoint plan) and opacity.
//!
//! Each pass is a pure function of the tape (and earlier passes' results) with a typed result
//! from `crate::plan`. They assume a verified tape (`crate::verify::verify`): arguments point
//! backwards and every index is in range.

mod activity;
mod liveness;

pub use activity::activity;
pub use liveness::liveness;

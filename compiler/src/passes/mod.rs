//! The middle-end passes: activity, liveness, segmentation (the checkpoint plan), opacity and
//! forward mode's colouring of inputs into directions, the
//! pipeline that runs them (`plan`), the invariants of its result (`check_plan`), the max_live
//! measure and the `nablac explain` report.
//!
//! Each pass is a pure function of the tape (and earlier passes' results) with a typed result
//! from `crate::plan`. They assume a verified tape (`crate::verify::verify`): arguments point
//! backwards and every index is in range.

mod activity;
mod colouring;
mod explain;
mod liveness;
mod opacity;
mod pipeline;
pub mod reroll;
mod segment;

#[cfg(test)]
pub(crate) mod fixtures;
#[cfg(test)]
mod snapshots;
#[cfg(test)]
mod tests;

/// max_live is counted over the kernel's schedule (`crate::schedule::maxlive`).
pub use crate::schedule::maxlive::{
    alive_profile_checkpointed, alive_profile_plain, max_live_checkpointed, max_live_plain,
};
pub use activity::activity;
pub use colouring::{colour_inputs, Colouring};
pub use explain::{
    explain, explain_forward, explain_forward_text, explain_loops, explain_loops_text, explain_svg,
    explain_text, plan_listing, Explain, ForwardExplain, LoopExplain,
};
pub use liveness::liveness;
pub use opacity::{adjoint_reads, opacity, opaque_math_arguments, OPAQUE_MATH};
pub use pipeline::{check_plan, plan, PlanError};
pub use segment::{
    choose_cuts, crossing_profile, live_last_read, reverse_recompute, segment, segment_count,
};

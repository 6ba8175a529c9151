//! The middle-end passes: activity, liveness, segmentation (the checkpoint plan) and opacity.

//! Tests of segmentation, opacity, the pipeline, max_live and explain.

use super::fixtures::{arb_tape, asian, european};
use super::*;
use crate::plan::{Checkpoint, SegmentOptions};

fn opts(segments: Option<u32>) -> SegmentOptions {
    SegmentOptions { segments, ..SegmentOptions::default() }
}

#[test]
fn print_numbers() {
    let t = asian(252);
    for s in [1, 2, 4, 8, 16, 32] {
        let p = plan(&t, &opts(Some(s)));
        let e = explain(&t, &p);
        println!("S={s} persistent={} maxcross={:?} cuts={:?} crossing={:?} ml={} {}", e.persistent, e.crossing.iter().max(), e.cuts, e.crossing, e.max_live_plain, e.max_live_checkpointed);
    }
}

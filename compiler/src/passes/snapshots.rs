//! Plan snapshots (`snapshots/plan/`): for every case, the full plan listing and the explain JSON.
//!
//! Two sources: cases recorded in memory (`plan_snapshots`), and the shared corpus `tests/in/*.ntape`
//! with its sidecar options, loaded by `crate::corpus` (`corpus_plan_snapshots`; a missing or empty
//! corpus fails the test).

use super::fixtures::{asian, european, product};
use super::{explain, plan, plan_listing};
use crate::plan::{Checkpoint, SegmentOptions};
use crate::products::Product;
use crate::verify::Verified;

fn render(tape: &Verified, opts: &SegmentOptions) -> String {
    let p = plan(tape, opts);
    let json = serde_json::to_string_pretty(&explain(tape, &p)).unwrap_or_default();
    format!("{}\n{}\n", plan_listing(tape, &p), json)
}

fn check(name: &str, tape: &Verified, opts: &SegmentOptions) {
    insta::with_settings!({
        snapshot_path => "../../../snapshots/plan",
        prepend_module_to_snapshot => false,
        omit_expression => true,
        info => &format!("{opts:?}"),
    }, {
        insta::assert_snapshot!(name, render(tape, opts));
    });
}

#[test]
fn plan_snapshots() {
    let registers = |segments| SegmentOptions {
        segments,
        ..SegmentOptions::default()
    };
    let scratch = SegmentOptions {
        strategy: Checkpoint::Scratch,
        seg_len: Some(20),
        ..SegmentOptions::default()
    };
    check("asian8_default", &asian(8), &SegmentOptions::default());
    check("asian8_registers_4", &asian(8), &registers(Some(4)));
    check("asian8_scratch_seg20", &asian(8), &scratch);
    check("european_default", &european(), &SegmentOptions::default());
    check("european_registers_3", &european(), &registers(Some(3)));
    check(
        "barrier4_registers_3",
        &product(Product::Barrier, Some(4)),
        &registers(Some(3)),
    );
    check(
        "basket3_registers_2",
        &product(Product::Basket, Some(2)),
        &registers(Some(2)),
    );
}

/// The shared corpus (`crate::corpus`): every case at each of its sidecar's segment counts,
/// register recompute as `corpus_<case>_s<S>` and, checkpointed, the scratch strategy as
/// `corpus_<case>_s<S>_scratch` (the names the kernel snapshots use).
#[test]
fn corpus_plan_snapshots() {
    let cases =
        crate::corpus::load(&crate::corpus::dir()).unwrap_or_else(|e| panic!("corpus: {e}"));
    assert!(!cases.is_empty(), "the corpus tests/in/*.ntape is empty");
    for case in &cases {
        for &s in &case.options.segments {
            let mut strategies = vec![Checkpoint::Registers];
            if s > 1 {
                strategies.push(Checkpoint::Scratch);
            }
            for strategy in strategies {
                let opts = SegmentOptions {
                    strategy,
                    segments: Some(s),
                    ..SegmentOptions::default()
                };
                let suffix = if strategy == Checkpoint::Scratch {
                    "_scratch"
                } else {
                    ""
                };
                check(
                    &format!("corpus_{}_s{s}{suffix}", case.name),
                    &case.tape,
                    &opts,
                );
            }
        }
    }
}

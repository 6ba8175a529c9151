//! Plan snapshots (`snapshots/plan/`): for every case, the full plan listing and the explain JSON.
//!
//! The corpus `tests/in/*.ntape` (with sidecar `.toml` options) and its reader `crate::format::read`
//! are not on main yet; until they are, this snapshots cases built in memory. TODO(lead): when the
//! corpus lands, glob `tests/in/*.ntape` here (insta's `glob!`), read each with the format reader,
//! take its options from the sidecar, and keep these in-memory cases alongside.

use super::fixtures::{asian, european};
use super::{explain, plan, plan_listing};
use crate::plan::{Checkpoint, SegmentOptions};
use crate::tape::Tape;

fn render(tape: &Tape, opts: &SegmentOptions) -> String {
    let p = plan(tape, opts);
    let json = serde_json::to_string_pretty(&explain(tape, &p)).unwrap_or_default();
    format!("{}\n{}\n", plan_listing(tape, &p), json)
}

fn check(name: &str, tape: &Tape, opts: &SegmentOptions) {
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
    let registers = |segments| SegmentOptions { segments, ..SegmentOptions::default() };
    let scratch =
        SegmentOptions { strategy: Checkpoint::Scratch, seg_len: Some(20), ..SegmentOptions::default() };
    check("asian8_default", &asian(8), &SegmentOptions::default());
    check("asian8_registers_4", &asian(8), &registers(Some(4)));
    check("asian8_scratch_seg20", &asian(8), &scratch);
    check("european_default", &european(), &SegmentOptions::default());
    check("european_registers_3", &european(), &registers(Some(3)));
}

//! Filling the manifest (`nablac_abi::manifest`, the kernel ABI's contract) for an emitted kernel.

use super::manifest::{Manifest, Mode, Param, MANIFEST_VERSION};
use super::EmitOptions;
use crate::schedule::Schedule;
use crate::tape::Tape;

/// The sum names in partials order (the ABI's `manifest::sum_names`).
pub fn sum_names(tape: &Tape, mode: Mode, greek_stderr: bool) -> Vec<String> {
    let (outputs, inputs) = names(tape);
    super::manifest::sum_names(&outputs, &inputs, mode, greek_stderr && mode.has_greeks())
}

/// The shift names, in inputs-buffer order after the market (the ABI's `manifest::shift_names`).
pub fn shift_names(tape: &Tape, mode: Mode, greek_stderr: bool) -> Vec<String> {
    let (outputs, inputs) = names(tape);
    super::manifest::shift_names(&outputs, &inputs, mode, greek_stderr && mode.has_greeks())
}

fn names(tape: &Tape) -> (Vec<String>, Vec<String>) {
    (
        tape.outputs.iter().map(|o| o.name.clone()).collect(),
        tape.inputs.iter().map(|i| i.name.clone()).collect(),
    )
}

/// The kernel's parameters in binding order (the ABI crate owns the table).
fn params(opts: &EmitOptions, n_sums: usize, scratch: Option<u32>) -> Vec<Param> {
    super::manifest::gpu_params(opts.target, opts.precision, n_sums, scratch)
}

/// Fills every field of the manifest for the kernel of `schedule` (a laddered tape's names,
/// defaults and hash are its one-market tape's).
pub(super) fn build(
    v: &crate::verify::Verified,
    plan: &crate::plan::Plan,
    opts: &EmitOptions,
    schedule: &Schedule,
) -> Result<Manifest, super::EmitError> {
    let tape: &Tape = v;
    let base = v.base();
    let sums = sum_names(base, opts.mode, schedule.greek_stderr);
    let markets = v.markets();
    let checkpointed = schedule.is_checkpointed();
    let persistent = if checkpointed {
        plan.segments
            .persistent
            .iter()
            .filter(|v| {
                plan.activity.live[v.index()]
                    && !matches!(tape.node(**v), crate::tape::Node::Const(_))
            })
            .count() as u32
    } else {
        0
    };
    let scratch = schedule.strategy == super::manifest::Checkpoint::Scratch;
    let scratch_slots = scratch.then_some(schedule.storage.scratch);
    Ok(Manifest {
        manifest_version: MANIFEST_VERSION,
        nablac_version: env!("CARGO_PKG_VERSION").into(),
        target: opts.target,
        entry_point: super::skeleton::entry_point(opts.target).into(),
        mode: opts.mode,
        precision: opts.precision,
        inputs: base.inputs.iter().map(|i| i.name.clone()).collect(),
        markets,
        ladder_inputs: v.ladder_inputs(),
        input_defaults: base.inputs.iter().map(|i| i.value).collect(),
        outputs: base.outputs.iter().map(|o| o.name.clone()).collect(),
        params: params(opts, markets as usize * sums.len(), scratch_slots),
        sums,
        greek_stderr: schedule.greek_stderr,
        shifts: shift_names(base, opts.mode, schedule.greek_stderr),
        workgroup_size: opts.workgroup_size,
        segments: schedule.segments as u32,
        checkpoint: schedule.strategy,
        persistent,
        scratch_slots_per_path: scratch_slots.unwrap_or(0),
        scratch_layout: if scratch {
            opts.scratch_layout.name().into()
        } else {
            String::new()
        },
        draws: tape.n_draws,
        tape_hash: crate::format::content_hash(base),
        compile_options: super::manifest::compile_options(opts.target),
        fingerprint: String::new(),
    })
}

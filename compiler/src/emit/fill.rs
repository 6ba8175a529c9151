//! Filling the manifest (`nablac_abi::manifest`, the kernel ABI's contract) for an emitted kernel.

use super::manifest::{Manifest, Mode, Param, Target, MANIFEST_VERSION};
use super::EmitOptions;
use crate::schedule::Schedule;
use crate::tape::Tape;

/// The sum names in partials order (the runtime's `manifest::sum_names`).
pub fn sum_names(tape: &Tape, mode: Mode) -> Vec<String> {
    let outputs: Vec<String> = tape.outputs.iter().map(|o| o.name.clone()).collect();
    let inputs: Vec<String> = tape.inputs.iter().map(|i| i.name.clone()).collect();
    super::manifest::sum_names(&outputs, &inputs, mode)
}

fn param(name: &str, ty: String, binding: u32, role: &str, doc: String) -> Param {
    Param {
        name: name.into(),
        ty,
        binding,
        role: role.into(),
        doc,
    }
}

/// The kernel's parameters in binding order (the module doc of `emit` is the ABI).
fn params(opts: &EmitOptions, n_sums: usize, scratch: Option<u32>) -> Vec<Param> {
    let real = opts.precision.name();
    let glsl = opts.target == Target::Glsl;
    let mem = |t: &str| {
        if glsl {
            format!("buffer<{t}>")
        } else {
            format!("ptr<{t}>")
        }
    };
    let mut ps = vec![
        param("inputs", mem(real), 0, "input", "n_inputs input values, in input order (manifest `inputs`)".into()),
        param(
            "partials",
            mem("f64"),
            1,
            "output",
            format!("n_groups * {n_sums} f64: partials[group * {n_sums} + s] = the group's pairwise sum of sum s"),
        ),
    ];
    let scalars: [(&str, &str); 7] = [
        (
            "path_base_lo",
            "low 32 bits of the first path of the launch (a multiple of workgroup_size)",
        ),
        (
            "path_base_hi",
            "high 32 bits of the first path of the launch",
        ),
        (
            "paths_lo",
            "low 32 bits of the total path count (paths at or past it contribute 0)",
        ),
        ("paths_hi", "high 32 bits of the total path count"),
        ("seed_lo", "low 32 bits of the seed (Philox key word 0)"),
        ("seed_hi", "high 32 bits of the seed (Philox key word 1)"),
        (
            "zero",
            "always 0: the run-time zero of the opaque identity and the re-keyed generator",
        ),
    ];
    for (k, (name, doc)) in scalars.iter().enumerate() {
        let k = k as u32;
        if glsl {
            ps.push(param(name, "u32".into(), 4 * k, "push", (*doc).into()));
        } else {
            ps.push(param(name, "u32".into(), 2 + k, "value", (*doc).into()));
        }
    }
    if let Some(slots) = scratch {
        ps.push(param(
            "scratch",
            mem(real),
            9,
            "scratch",
            format!("{slots} slots per thread: {slots} * invocations values, device only"),
        ));
        ps.push(param(
            "invocations",
            "u32".into(),
            10,
            "value",
            "threads in the launch (n_groups * workgroup_size)".into(),
        ));
    }
    ps
}

/// Fills every field of the manifest for the kernel of `schedule`.
pub(super) fn build(
    tape: &Tape,
    plan: &crate::plan::Plan,
    opts: &EmitOptions,
    schedule: &Schedule,
) -> Result<Manifest, super::EmitError> {
    let sums = sum_names(tape, opts.mode);
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
    let scratch_slots = scratch.then_some(schedule.scratch_slots);
    Ok(Manifest {
        manifest_version: MANIFEST_VERSION,
        nablac_version: env!("CARGO_PKG_VERSION").into(),
        target: opts.target,
        entry_point: super::skeleton::entry_point(opts.target).into(),
        mode: opts.mode,
        precision: opts.precision,
        inputs: tape.inputs.iter().map(|i| i.name.clone()).collect(),
        input_defaults: tape.inputs.iter().map(|i| i.value).collect(),
        outputs: tape.outputs.iter().map(|o| o.name.clone()).collect(),
        params: params(opts, sums.len(), scratch_slots),
        sums,
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
        tape_hash: crate::format::content_hash(tape),
        compile_options: match opts.target {
            Target::Cuda => vec!["--fmad=false".into()],
            Target::Opencl => vec!["-cl-fp32-correctly-rounded-divide-sqrt".into()],
            _ => Vec::new(),
        },
    })
}

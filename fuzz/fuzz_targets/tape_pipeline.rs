//! Any bytes -> a valid random tape (`nablac::testing::tape_from_bytes`: every op, 1..=3 outputs,
//! both draws, up to 256 nodes) -> the whole pipeline. Asserts:
//!
//! - the tape verifies, and its binary and text forms read back to it;
//! - `passes::plan` at 1, 2, 3 and a byte-chosen number of segments (registers and scratch) and
//!   with the defaults keeps every invariant (`passes::check_plan`);
//! - every printer takes it: CUDA, OpenCL and GLSL in price, reverse and forward mode (reverse
//!   at every plan above), f32 or f64 (chosen by the bytes, OpenCL the other one), with a sealed manifest (the only errors allowed: GLSL refusing
//!   f64 transcendentals, an f32 kernel refusing a constant that overflows f32); the CPU lowering
//!   (CLIF) in every mode;
//! - plain = checkpointed on the CPU: the checkpointed reverse schedule, interpreted in f64
//!   (`nablac::testing::run_schedule`), gives the plain schedule's bits on a few paths, at each
//!   plan above;
//! - the CPU kernel (Cranelift) on 3 paths: its rows (`nablac_runtime::cpu::load`) are the plain
//!   schedule's bits in reverse and price mode, and its report through `Backend::Cpu` (load, run)
//!   is `nablac::reference::evaluate`'s bit for bit (both where no rule calls erfc, whose host
//!   libm and the `libm` crate's may differ in the last bit; the non-finite counts always);
//!   forward and price mode give reverse mode's values bit for bit (where both find the path
//!   finite).
#![no_main]

use libfuzzer_sys::fuzz_target;
use nablac::emit::{emit, EmitError, EmitOptions, Mode, Precision, Target};
use nablac::ops::Fun;
use nablac::plan::{Checkpoint, SegmentOptions};
use nablac::schedule::{Schedule, ScheduleOptions};
use nablac::testing::{run_schedule, tape_from_bytes};
use nablac_runtime::{Backend, RunOptions};

const SEED: u64 = 0x5eed;
const PATHS: u64 = 3;

fn bits(row: &[f64]) -> Vec<u64> {
    row.iter().map(|x| x.to_bits()).collect()
}

fuzz_target!(|data: &[u8]| {
    let tape = tape_from_bytes(data);
    let v = nablac::verify::verify(tape.clone()).expect("tape_from_bytes makes valid tapes");
    let bin = nablac::format::write_binary(&tape);
    assert_eq!(nablac::format::read(&bin).expect("binary reads back"), tape);
    let text = nablac::format::write_text(&tape);
    assert_eq!(
        nablac::format::read(text.as_bytes()).expect("text reads back"),
        tape
    );
    let inputs: Vec<f64> = tape.inputs.iter().map(|i| i.value).collect();

    // Plans, and the plain schedule every checkpointed one must match.
    let chosen = 2 + u32::from(data.first().copied().unwrap_or(0) % 14);
    let mut options = vec![SegmentOptions::default()];
    for strategy in [Checkpoint::Registers, Checkpoint::Scratch] {
        let counts: &[u32] = match strategy {
            Checkpoint::Registers => &[1, 2, 3, chosen],
            _ => &[2, 3, chosen],
        };
        for &segments in counts {
            options.push(SegmentOptions {
                strategy,
                segments: Some(segments),
                ..SegmentOptions::default()
            });
        }
    }
    let reverse = ScheduleOptions::new(Mode::Reverse);
    let plain = Schedule::plain(&v, reverse);
    let plain_rows: Vec<Vec<f64>> = (0..PATHS)
        .map(|p| run_schedule(&plain, &inputs, SEED, p))
        .collect();
    for o in &options {
        let plan = nablac::passes::plan(&v, o);
        if let Err(e) = nablac::passes::check_plan(&tape, &plan) {
            panic!("{o:?}: {e}");
        }
        let s = Schedule::build(&v, &plan, reverse);
        for (p, want) in plain_rows.iter().enumerate() {
            let got = run_schedule(&s, &inputs, SEED, p as u64);
            assert_eq!(bits(&got), bits(want), "{o:?}: path {p}, checkpointed vs plain");
        }
        // Every GPU printer on this plan.
        for target in [Target::Cuda, Target::Opencl, Target::Glsl] {
            for mode in [Mode::Price, Mode::Reverse, Mode::Forward] {
                if mode != Mode::Reverse && o.segments != Some(1) {
                    continue; // the plan matters to reverse mode only
                }
                // One precision a kernel (chosen by the bytes), so an execution stays quick.
                let wide = data.get(1).is_some_and(|b| b % 2 == 1) ^ (target == Target::Opencl);
                for precision in [if wide { Precision::F64 } else { Precision::F32 }] {
                    let eo = EmitOptions {
                        target,
                        mode,
                        precision,
                        annotate: o.segments == Some(chosen),
                        ..EmitOptions::default()
                    };
                    match emit(&v, &plan, &eo) {
                        Ok(k) => {
                            assert_eq!(k.manifest.fingerprint, k.manifest.fingerprint_of(&k.source));
                            assert_eq!(k.manifest.target, target);
                            assert_eq!(k.manifest.mode, mode);
                            assert!(k.manifest.layout().is_ok(), "{eo:?}: manifest layout");
                        }
                        Err(EmitError::Unsupported { .. })
                            if target == Target::Glsl
                                && (precision == Precision::F64
                                    || o.strategy == Checkpoint::Scratch) => {}
                        Err(EmitError::ConstOverflow { .. } | EmitError::InputOverflow { .. })
                            if precision == Precision::F32 => {}
                        Err(e) => panic!("{eo:?} {o:?}: {e}"),
                    }
                }
            }
        }
    }

    // The CPU kernel: the plain schedule's bits, the reference's values.
    let erfc = plain.calls(Some(Fun::Erfc));
    let mut values_of = Vec::new();
    for mode in [Mode::Reverse, Mode::Price, Mode::Forward] {
        let o = nablac::clif::Options {
            mode,
            precision: Precision::F64,
            greek_stderr: true,
        };
        let k = nablac::clif::emit(&v, &o).expect("the CPU lowering takes every valid tape");
        if mode == Mode::Reverse {
            // The host's way: Backend::Cpu, the report of PATHS paths, against the reference's
            // (the same leaves summed in the same fixed order: the same bits, erfc aside).
            let loaded = Backend::Cpu.load(&k.source, &k.manifest).unwrap_or_else(|e| {
                panic!("the CPU backend refused nablac's kernel: {e}")
            });
            let got = Backend::Cpu
                .run(&loaded, &[inputs.clone()], PATHS, SEED, &RunOptions::default())
                .expect("runs")
                .remove(0);
            let want = nablac::reference::evaluate(&v, &inputs, SEED, PATHS).expect("evaluates");
            assert_eq!(got.outputs.len(), want.outputs.len());
            for (g, w) in got.outputs.iter().zip(&want.outputs) {
                assert_eq!(g.non_finite, w.non_finite, "{}: non-finite paths", g.name);
                if !erfc {
                    let numbers = |o: &nablac_runtime::OutputReport| {
                        let mut x = vec![o.value, o.stderr];
                        x.extend(o.greeks.iter().map(|g| g.1));
                        x.extend(&o.greek_stderr);
                        bits(&x)
                    };
                    assert_eq!(numbers(g), numbers(w), "{}: Backend::Cpu vs reference", g.name);
                }
            }
        }
        let c = nablac_runtime::cpu::load(&k.source, &k.manifest).expect("loads");
        let row = c.row_len();
        let mut out = vec![f64::NAN; PATHS as usize * row];
        c.run(&inputs, SEED, 0, &mut out).expect("runs");
        let rows: Vec<&[f64]> = out.chunks(row).collect();
        if mode != Mode::Forward && !erfc {
            let s = Schedule::plain(&v, ScheduleOptions::new(mode));
            for (p, got) in rows.iter().enumerate() {
                let want = run_schedule(&s, &inputs, SEED, p as u64);
                assert_eq!(bits(got), bits(&want), "{mode:?} path {p}: CPU kernel vs schedule");
            }
        }
        // The value leaves (value, value^2, non-finite count) of every output.
        let width = row / tape.outputs.len();
        let values: Vec<u64> = rows
            .iter()
            .flat_map(|r| r.chunks(width).flat_map(|c| [c[0], c[1], c[width - 1]]))
            .map(f64::to_bits)
            .collect();
        values_of.push((mode, values));
    }
    // Forward and price mode compute reverse mode's forward sweep: the same values where both
    // modes found the path finite. (A path non-finite through a Greek zeroes its values, and
    // forward and reverse mode may disagree on an infinite partial: reverse mode runs a rule on
    // an adjoint of 0 that forward mode never forms, `clif::tests`, forward_equals_reverse; the
    // fuzzer found a tape where forward mode says non-finite and reverse mode finite, kept as
    // fuzz/corpus/tape_pipeline/forward-nonfinite.bin.)
    for other in [1, 2] {
        let pairs = values_of[0].1.chunks(3).zip(values_of[other].1.chunks(3));
        for (k, (r, x)) in pairs.enumerate() {
            if r[2] == 0f64.to_bits() && x[2] == 0f64.to_bits() {
                assert_eq!(r, x, "{:?} vs reverse values, path/output {k}", values_of[other].0);
            }
        }
    }
    // The reference's values (erfc aside, bit for bit through the plain schedule above; here
    // the values of every output, whatever the ops).
    for p in 0..PATHS {
        let r = nablac::reference::evaluate_path(&v, &inputs, SEED, p).expect("evaluates");
        let got = &plain_rows[p as usize];
        let width = got.len() / tape.outputs.len();
        for (o, y) in r.outputs.iter().enumerate() {
            let finite = got[o * width + width - 1] == 0.0;
            if finite && !erfc {
                assert_eq!(got[o * width].to_bits(), y.to_bits(), "path {p} output {o}");
            }
        }
    }
});

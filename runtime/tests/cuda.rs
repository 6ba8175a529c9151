//! The CUDA backend with a hand-written kernel of the emitted ABI (leaf of path p = p + 0.5, one
//! sum, pairwise per workgroup): the assembled totals equal `tree_sum` of the leaves bit for bit,
//! however the range is chunked. The emitted corpus kernels are tested in
//! compiler/tests/runtime.rs. Without CUDA this prints `skipped: ...` and passes
//! (it fails when NABLAC_REQUIRE_CUDA=1).

use nablac_runtime::cuda;
use nablac_runtime::manifest::{Manifest, Precision, Target};
use nablac_runtime::report::tree_sum;

const SRC: &str = r#"
extern "C" __global__ void leaves(const float* inputs, double* partials,
    unsigned pb_lo, unsigned pb_hi, unsigned n_lo, unsigned n_hi, unsigned s_lo, unsigned s_hi, unsigned zero)
{
    __shared__ double sh[128];
    unsigned lid = threadIdx.x;
    unsigned long long base = ((unsigned long long)pb_hi << 32) | pb_lo;
    unsigned long long n = ((unsigned long long)n_hi << 32) | n_lo;
    unsigned long long p = base + blockIdx.x * 128ull + lid;
    sh[lid] = p < n ? (double)p + (double)inputs[0] : 0.0;
    for (unsigned m = 1; m < 128; m *= 2) {
        __syncthreads();
        if (lid % (2 * m) == 0) sh[lid] += sh[lid + m];
    }
    if (lid == 0) partials[blockIdx.x] = sh[0];
}
"#;

fn manifest() -> Manifest {
    Manifest::hand_written(
        Target::Cuda,
        Precision::F32,
        "leaves",
        128,
        &[("half", 0.5)],
        &["x"],
        &["value:x"],
    )
}

#[test]
fn absent_cuda_is_a_clean_error_or_a_device() {
    match cuda::open() {
        Ok(d) => println!("device: {}", d.describe()),
        Err(e) => {
            let text = e.to_string();
            assert!(
                text.contains("not found") || text.contains("CUDA"),
                "unclear error: {text}"
            );
            println!("skipped: {text}");
        }
    }
}

#[test]
fn partials_rebuild_the_tree_sum() {
    let dev = match cuda::open() {
        Ok(d) => d,
        Err(e) if std::env::var("NABLAC_REQUIRE_CUDA").is_ok_and(|v| v == "1") => panic!("{e}"),
        Err(e) => return println!("skipped: {e}"),
    };
    let k = dev.load(SRC, &manifest()).expect("loads");
    let paths = 5000u64;
    let leaves: Vec<f64> = (0..paths).map(|p| p as f64 + 0.5).collect();
    let want = tree_sum(&leaves).to_bits();
    let full = dev.run_range(&k, &[0.5], 1, paths, 0..paths).expect("runs");
    assert_eq!(full[0].total().expect("complete").to_bits(), want);
    let mut a = dev
        .run_range(&k, &[0.5], 1, paths, 3072..paths)
        .expect("runs");
    a[0].merge(&dev.run_range(&k, &[0.5], 1, paths, 0..3072).expect("runs")[0])
        .expect("disjoint");
    assert_eq!(a[0].total().expect("complete").to_bits(), want);
    // Loading again hits the kernel cache and gives the same bits.
    let k2 = dev.load(SRC, &manifest()).expect("loads from cache");
    assert_eq!(
        dev.run_range(&k2, &[0.5], 1, paths, 0..paths)
            .expect("runs")[0]
            .total()
            .unwrap()
            .to_bits(),
        want
    );
}

//! The Vulkan backend with a hand-written GLSL kernel of the emitted ABI (leaf of path p =
//! p + inputs[0], one sum, pairwise per workgroup): the assembled totals equal `tree_sum` of the
//! leaves bit for bit, however the range is chunked; bad ranges and bad GLSL give clear errors.
//! The emitted corpus kernels are tested in compiler/tests/runtime.rs.
//! Required-tool policy: without Vulkan this fails when CI=true or NABLAC_REQUIRE_TOOLS=1, else
//! prints `skipped: ...`.

use nablac_runtime::gpu::GpuError;
use nablac_runtime::manifest::{Manifest, Precision, Target};
use nablac_runtime::report::tree_sum;
use nablac_runtime::vulkan;

const SRC: &str = "#version 450
layout(local_size_x = 128) in;
layout(std430, set = 0, binding = 0) readonly buffer Inputs { float inputs[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Partials { double partials[]; };
layout(push_constant) uniform Push { uint pb_lo; uint pb_hi; uint n_lo; uint n_hi; uint s_lo; uint s_hi; uint zero; } pc;
shared double sh[128];
void main() {
    uint lid = gl_LocalInvocationID.x;
    uint plo = pc.pb_lo + gl_WorkGroupID.x * 128u + lid;
    uint phi = pc.pb_hi + (plo < pc.pb_lo ? 1u : 0u);
    bool live = phi < pc.n_hi || (phi == pc.n_hi && plo < pc.n_lo);
    sh[lid] = live ? double(plo) + double(phi) * 4294967296.0lf + double(inputs[0]) : 0.0lf;
    for (uint m = 1u; m < 128u; m *= 2u) {
        memoryBarrierShared(); barrier();
        if (lid % (2u * m) == 0u) sh[lid] += sh[lid + m];
    }
    if (lid == 0u) partials[gl_WorkGroupID.x] = sh[0];
}
";

fn manifest() -> Manifest {
    Manifest::hand_written(
        Target::Glsl,
        Precision::F32,
        "main",
        128,
        &[("half", 0.5)],
        &["x"],
        &["value:x"],
    )
}

fn device() -> Option<vulkan::Device> {
    let required = std::env::var("CI").is_ok_and(|v| v == "true")
        || std::env::var("NABLAC_REQUIRE_TOOLS").is_ok_and(|v| v == "1");
    match vulkan::open() {
        Ok(d) => Some(d),
        Err(e) if required => {
            panic!("Vulkan is required here (CI / NABLAC_REQUIRE_TOOLS) but: {e}")
        }
        Err(e) => {
            println!("skipped: {e}");
            None
        }
    }
}

#[test]
fn partials_rebuild_the_tree_sum() {
    let Some(dev) = device() else { return };
    let k = dev.load(SRC, &manifest()).expect("loads");
    // Buffers reserved for the longest run serve the shorter ones too.
    dev.reserve(&k, 5000, 0..5000).expect("reserves");
    for paths in [1u64, 100, 128, 5000] {
        let leaves: Vec<f64> = (0..paths).map(|p| p as f64 + 0.5).collect();
        let want = tree_sum(&leaves).to_bits();
        let full = dev.run_range(&k, &[0.5], 7, paths, 0..paths).expect("runs");
        assert_eq!(full.len(), 1);
        assert_eq!(
            full[0].total().expect("complete").to_bits(),
            want,
            "{paths} paths"
        );
    }
    let paths = 5000u64;
    let want = tree_sum(&(0..paths).map(|p| p as f64 + 0.5).collect::<Vec<_>>()).to_bits();
    let mut a = dev
        .run_range(&k, &[0.5], 7, paths, 4096..paths)
        .expect("runs");
    for r in [2048..4096, 0..1024, 1024..2048] {
        a[0].merge(&dev.run_range(&k, &[0.5], 7, paths, r).expect("runs")[0])
            .expect("disjoint");
    }
    assert_eq!(a[0].total().expect("complete").to_bits(), want);
    dev.destroy_kernel(&k);
}

#[test]
fn bad_requests_are_clear_errors() {
    let Some(dev) = device() else { return };
    let k = dev.load(SRC, &manifest()).expect("loads");
    let e = dev
        .run_range(&k, &[0.5], 7, 5000, 100..5000)
        .expect_err("misaligned start");
    assert!(
        matches!(e, GpuError::Launch(_)) && e.to_string().contains("multiple of 1024"),
        "{e}"
    );
    let e = dev
        .run_range(&k, &[0.5, 1.0], 7, 5000, 0..5000)
        .expect_err("two inputs");
    assert!(e.to_string().contains("2 input values"), "{e}");
    dev.destroy_kernel(&k);
    let e = dev
        .load(
            "#version 450\nvoid main() { undefined_thing(); }\n",
            &manifest(),
        )
        .expect_err("bad GLSL");
    assert!(
        matches!(e, GpuError::Compile { .. }) && e.to_string().contains("ERROR"),
        "{e}"
    );
    let mut cuda = manifest();
    cuda.target = Target::Cuda;
    assert!(dev.load(SRC, &cuda).is_err());
}

/// A kernel that keeps float zeros' signs (as every emitted kernel asks) keeps doubles' too: the
/// runtime adds the 64-bit `SignedZeroInfNanPreserve` mode glslang leaves out, and the module
/// still validates (spirv-val, where installed).
#[test]
fn signed_zeros_are_kept_at_both_widths() {
    if device().is_none() {
        return;
    }
    let src = SRC.replacen(
        "#version 450\n",
        "#version 450\n#extension GL_EXT_spirv_intrinsics : require\n\
         spirv_execution_mode(extensions = [\"SPV_KHR_float_controls\"], capabilities = [4466], 4461, 32);\n",
        1,
    );
    let words = vulkan::compile_glsl(&src, "main", "test").unwrap();
    let modes: Vec<u32> = words
        .windows(4)
        .filter(|w| w[0] == (4 << 16) | 16 && w[2] == 4461)
        .map(|w| w[3])
        .collect();
    assert_eq!(modes, [32, 64]);
    // Completing twice changes nothing; a module without the mode is left alone.
    assert_eq!(
        vulkan::preserve_signed_zeros_at_every_width(words.clone()),
        words
    );
    let plain = vulkan::compile_glsl(SRC, "main", "test").unwrap();
    assert_eq!(
        vulkan::preserve_signed_zeros_at_every_width(plain.clone()),
        plain
    );
    let path = std::env::temp_dir().join(format!("nablac-sz-{}.spv", std::process::id()));
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    std::fs::write(&path, bytes).unwrap();
    match std::process::Command::new("spirv-val")
        .args(["--target-env", "vulkan1.1"])
        .arg(&path)
        .output()
    {
        Ok(out) => assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => println!("skipped spirv-val: {e}"),
    }
    let _ = std::fs::remove_file(&path);
}

/// A load is a cache hit only when nothing was compiled: SPIR-V already cached (as when it was
/// carried to a fresh GPU machine) but no pipeline cache for this device is a miss, since the
/// driver still compiles (issue 26: `cache_hit: true` and a 90.7 ms first dispatch on an H100);
/// the second load, with the driver's pipeline cache kept, is a hit. The source is unique to
/// this run, so no other test's entries count.
#[test]
fn a_load_hits_the_cache_only_when_the_driver_compiles_nothing_either() {
    let Some(d) = device() else { return };
    // Unique to this test and this run, so no entry on disk counts.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    // (in the code: the pipeline cache is keyed on the SPIR-V, which drops comments; pc.zero is 0).
    let nonce = 1 + (nanos as u32 ^ std::process::id()) % 0x7fff_ffff;
    let src = SRC.replace(
        "    for (uint m",
        &format!("    if (pc.zero == {nonce}u) sh[lid] = 0.0lf;\n    for (uint m"),
    );
    assert_ne!(src, SRC);
    vulkan::compile_glsl(&src, "main", "test").unwrap();
    let first = d.load(&src, &manifest()).unwrap();
    assert!(
        !first.cache_hit(),
        "SPIR-V cached, pipeline not: the driver compiled"
    );
    let second = d.load(&src, &manifest()).unwrap();
    assert!(
        second.cache_hit(),
        "SPIR-V and the pipeline cache both kept"
    );
    d.destroy_kernel(&first);
    d.destroy_kernel(&second);
}

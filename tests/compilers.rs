//! Generated kernel source through REAL compilers: GLSL → glslangValidator (Vulkan 1.1) →
//! spirv-val; OpenCL C → clBuildProgram (PoCL on the CPU); CUDA → NVRTC (compute_90) → ptxas
//! (sm_90). Every kernel must compile without an error or a warning.
//!
//! A missing tool skips its check with a `skipped:` line, or fails when `CI=true` or
//! `NABLAC_REQUIRE_TOOLS=1` (see nablac_suite::toolchain). Install everything with
//! `scripts/install-test-deps.sh` (no GPU needed).

use nablac_suite::toolchain::{self, check, PtxasReport};

const SMOKE_CU: &str = include_str!("kernels/smoke.cu");
const SMOKE_CL: &str = include_str!("kernels/smoke.cl");
const SMOKE_COMP: &str = include_str!("kernels/smoke.comp");

/// SPIR-V starts with the magic number 0x07230203 (little-endian here).
const SPIRV_MAGIC: [u8; 4] = [0x03, 0x02, 0x23, 0x07];

#[test]
fn smoke_glsl_compiles_and_validates() {
    let Some(spv) = check(toolchain::glsl_to_spirv(SMOKE_COMP, "smoke.comp")) else {
        return;
    };
    assert_eq!(spv[..4], SPIRV_MAGIC, "not a SPIR-V module");
    assert_eq!(spv.len() % 4, 0, "SPIR-V is a stream of 32-bit words");
}

#[test]
fn smoke_opencl_builds_on_pocl() {
    let Some(build) = check(toolchain::opencl_build(
        SMOKE_CL,
        "-cl-std=CL1.2",
        "smoke.cl",
    )) else {
        return;
    };
    assert_eq!(build.kernels, ["smoke"], "on {}", build.device);
}

#[test]
fn smoke_cuda_compiles_to_sm90_without_spills() {
    let Some(ptx) = check(toolchain::nvrtc_compile(
        SMOKE_CU,
        "compute_90",
        &[],
        "smoke.cu",
    )) else {
        return;
    };
    assert!(
        ptx.ptx.contains(".entry smoke("),
        "PTX lacks the entry point:\n{}",
        ptx.ptx
    );
    assert!(ptx.ptx.contains(".target sm_90"), "PTX not for sm_90");
    let Some(r) = check(toolchain::ptxas_report(SMOKE_CU, "smoke")) else {
        return;
    };
    // Philox + Box-Muller + a shared reduction fit easily: no spills. The small stack frame is
    // double cos()'s slow-path argument reduction (a local array), not a spill.
    assert_eq!((r.spill_stores, r.spill_loads), (0, 0), "{r:?}");
    assert!(r.stack <= 64, "{r:?}");
    assert!(r.registers > 0 && r.registers <= 255, "{r:?}");
}

/// The runtime's own kernel, the device part of the partials' tree (runtime gpu::DeviceTree),
/// through NVRTC + ptxas and PoCL like every generated kernel. Its one local array is the
/// pairwise stack (a stack frame, no spill).
#[test]
fn the_runtimes_tree_kernels_compile() {
    use nablac_runtime::gpu::DeviceTree;
    if let Some(r) = check(toolchain::ptxas_report(DeviceTree::CUDA, DeviceTree::ENTRY)) {
        assert_eq!((r.spill_stores, r.spill_loads), (0, 0), "{r:?}");
    }
    if let Some(b) = check(toolchain::opencl_build(
        DeviceTree::OPENCL,
        "-cl-std=CL1.2",
        "tree_rows.cl",
    )) {
        assert_eq!(b.kernels, [DeviceTree::ENTRY], "on {}", b.device);
    }
    if let Some(spv) = check(toolchain::glsl_to_spirv(DeviceTree::GLSL, "tree_rows.comp")) {
        assert_eq!(spv[..4], SPIRV_MAGIC, "not a SPIR-V module");
    }
}

/// A check that reports failure must carry the compiler's message, not just "failed".
#[test]
fn compiler_errors_carry_the_compilers_message() {
    let broken_glsl =
        "#version 450\nlayout(local_size_x = 1) in;\nvoid main() { undeclared_thing = 1; }\n";
    if let Some(e) = check_err(toolchain::glsl_to_spirv(broken_glsl, "broken.comp")) {
        assert!(e.contains("undeclared_thing"), "{e}");
    }
    let broken_cl = "__kernel void k(__global float* x) { x[0] = undeclared_thing; }\n";
    if let Some(e) = check_err(toolchain::opencl_build(
        broken_cl,
        "-cl-std=CL1.2",
        "broken.cl",
    )) {
        assert!(e.contains("undeclared_thing"), "{e}");
    }
    let broken_cu = "extern \"C\" __global__ void k(float* x) { x[0] = undeclared_thing; }\n";
    if let Some(e) = check_err(toolchain::nvrtc_compile(
        broken_cu,
        "compute_90",
        &[],
        "broken.cu",
    )) {
        assert!(e.contains("undeclared_thing"), "{e}");
    }
    // A warning is a failure too: control reaching the end of a non-void function (on by
    // default in clang, which PoCL uses), an unused variable for NVRTC.
    let warn_cl =
        "int f(int a) { if (a) return 1; }\n__kernel void k(__global int* x) { x[0] = f(x[1]); }\n";
    if let Some(e) = check_err(toolchain::opencl_build(warn_cl, "-cl-std=CL1.2", "warn.cl")) {
        assert!(e.contains("non-void"), "{e}");
    }
    let warn_cu = "extern \"C\" __global__ void k(float* x) { int unused = 1; x[0] = 1.0f; }\n";
    if let Some(e) = check_err(toolchain::nvrtc_compile(
        warn_cu,
        "compute_90",
        &[],
        "warn.cu",
    )) {
        assert!(e.contains("unused"), "{e}");
    }
}

/// `Some(message)` for an error other than a missing tool; `None` (skip) when the tool is missing.
/// Panics when the tool accepted what it should have rejected.
#[track_caller]
fn check_err<T: std::fmt::Debug>(r: Result<T, toolchain::ToolError>) -> Option<String> {
    match r {
        Ok(v) => panic!("expected the compiler to reject this, got {v:?}"),
        Err(e @ toolchain::ToolError::Missing { .. }) => check::<T>(Err(e)).map(|_| unreachable!()),
        Err(e) => Some(e.to_string()),
    }
}

/// Every `*.cu`, `*.cl` and `*.comp` file in `$NABLAC_COMPILE_DIR` (e.g. what `nablac emit`
/// wrote, or an emitter dump) through its compiler; all failures are reported together. CUDA is
/// compiled with `--fmad=false` and OpenCL with `-cl-fp32-correctly-rounded-divide-sqrt`, as the
/// emitted manifests ask. Does nothing without the variable.
#[test]
fn every_kernel_in_nablac_compile_dir() {
    let Some(dir) = std::env::var_os("NABLAC_COMPILE_DIR") else {
        return;
    };
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("NABLAC_COMPILE_DIR={dir:?}: {e}"))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            matches!(
                p.extension().and_then(|x| x.to_str()),
                Some("cu" | "cl" | "comp")
            )
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .cu/.cl/.comp files in {dir:?}");
    let mut failures = Vec::new();
    for path in &files {
        let name = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let src =
            std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let t0 = std::time::Instant::now();
        let outcome = match path.extension().and_then(|x| x.to_str()) {
            Some("cu") => {
                toolchain::ptxas_reports(&src, "90", &["--fmad=false"], &name).map(|rs| {
                    rs.iter()
                        .map(|(e, r)| {
                            format!(
                                "{e}: {} regs, {} B spill st, {} B spill ld, {} B stack",
                                r.registers, r.spill_stores, r.spill_loads, r.stack
                            )
                        })
                        .collect::<Vec<_>>()
                        .join("; ")
                })
            }
            Some("cl") => {
                toolchain::opencl_build(&src, "-cl-fp32-correctly-rounded-divide-sqrt", &name)
                    .map(|b| format!("kernels {:?}", b.kernels))
            }
            _ => toolchain::glsl_to_spirv(&src, &name).map(|spv| format!("{} B SPIR-V", spv.len())),
        };
        match outcome {
            Ok(msg) => eprintln!("ok   {name} ({:.1} s): {msg}", t0.elapsed().as_secs_f64()),
            Err(e @ toolchain::ToolError::Missing { .. }) => {
                if check::<()>(Err(e)).is_none() {
                    continue;
                }
            }
            Err(e) => {
                eprintln!("FAIL {name}");
                failures.push(format!("{name}: {e}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} kernels failed:\n\n{}",
        failures.len(),
        files.len(),
        failures.join("\n\n")
    );
}

// ---------------------------------------------------------------------------------------------
// nablac's own kernels: the corpus and the 252-step Asian.

use nablac::emit::{emit, EmitError, EmitOptions, Kernel, Mode, Precision, Target};
use nablac::plan::{Checkpoint, SegmentOptions};

/// Plans `tape` at `segments` segments (1 = plain) with `strategy`, as `nablac` does.
fn planned(
    tape: &nablac::verify::Verified,
    segments: u32,
    strategy: Checkpoint,
) -> nablac::plan::Plan {
    nablac::passes::plan(
        tape,
        &SegmentOptions {
            strategy,
            segments: Some(segments),
            ..Default::default()
        },
    )
}

/// Compiles one emitted kernel with its target's compiler and the manifest's compile options;
/// `Ok(summary)` or the compiler's message. CUDA goes on to ptxas (sm_90).
fn compile(k: &Kernel, what: &str) -> Result<String, toolchain::ToolError> {
    compile_source(&k.source, &k.manifest, what)
}

/// [`compile`] for a kernel's source and manifest.
fn compile_source(
    source: &str,
    manifest: &nablac::emit::manifest::Manifest,
    what: &str,
) -> Result<String, toolchain::ToolError> {
    let opts: Vec<&str> = manifest
        .compile_options
        .iter()
        .map(String::as_str)
        .collect();
    match manifest.target {
        Target::Cuda => {
            toolchain::ptxas_reports(source, "90", &opts, what).map(|rs| format!("{rs:?}"))
        }
        Target::Opencl => toolchain::opencl_build(source, &opts.join(" "), what).map(|b| {
            assert_eq!(
                b.kernels,
                std::slice::from_ref(&manifest.entry_point),
                "{what}: entry point"
            );
            format!("{:?}", b.kernels)
        }),
        _ => toolchain::glsl_to_spirv(source, what).map(|spv| format!("{} B SPIR-V", spv.len())),
    }
}

/// The time-stepping products' price and forward kernels, compiled as loops (the default), f32
/// and f64, through each target's compiler without warnings: NVRTC and ptxas, PoCL,
/// glslangValidator and spirv-val. (Their bits against the unrolled kernels are
/// compiler/tests/runtime.rs's.)
#[test]
fn looped_kernels_compile_on_every_target() {
    use nablac::compile::{compile as compile_tape, CompileError, CompileOptions};
    use nablac::products::{record, Market, Options, Product};
    let (mut failures, mut compiled) = (Vec::new(), 0);
    for (p, steps, assets) in [
        (Product::AsianCall, 252, 3),
        (Product::Barrier, 52, 3),
        (Product::Basket, 16, 8),
    ] {
        let o = Options {
            steps,
            assets,
            ..Options::defaults(p)
        };
        let v = nablac::verify::verify(record(p, &o, &Market::default()).unwrap()).unwrap();
        for target in [Target::Cuda, Target::Opencl, Target::Glsl] {
            for mode in [Mode::Price, Mode::Forward, Mode::Reverse] {
                for precision in [Precision::F32, Precision::F64] {
                    let what = format!("{p:?}_{}_{mode:?}_{}", target.name(), precision.name());
                    let opts = CompileOptions {
                        mode,
                        precision,
                        ..CompileOptions::new(target)
                    };
                    let k = match compile_tape(&v, &opts) {
                        Ok(k) => k,
                        Err(CompileError::Emit(EmitError::Unsupported { .. }))
                            if target == Target::Glsl && precision == Precision::F64 =>
                        {
                            continue
                        }
                        Err(e) => panic!("{what}: {e}"),
                    };
                    assert!(k.source.contains(" it = "), "{what}: no loop");
                    match compile_source(&k.source, &k.manifest, &what) {
                        Ok(_) => compiled += 1,
                        Err(e @ toolchain::ToolError::Missing { .. }) => {
                            check::<()>(Err(e));
                        }
                        Err(e) => failures.push(format!("{what}: {e}")),
                    }
                }
            }
        }
    }
    eprintln!("looped kernels: {compiled} compiled clean");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Every corpus tape (tests/in/*.ntape) at each of its sidecar's segment counts, register
/// recompute (and scratch for CUDA/OpenCL when checkpointed), price and forward (plain only) and
/// reverse, f32
/// and f64, through each target's compiler without warnings. GLSL f64 kernels the emitter refuses
/// (exp/log/cos have no double overloads in GLSL) are the only combinations left out.
#[test]
fn corpus_kernels_compile_on_every_target() {
    let cases = nablac::corpus::load(&nablac::corpus::dir()).expect("corpus loads");
    assert!(!cases.is_empty(), "tests/in has no tapes");
    let (mut failures, mut compiled, mut refused) = (Vec::new(), 0, 0);
    for case in &cases {
        for &s in &case.options.segments {
            for target in [Target::Cuda, Target::Opencl, Target::Glsl] {
                let mut strategies = vec![Checkpoint::Registers];
                if s > 1 && target != Target::Glsl {
                    strategies.push(Checkpoint::Scratch);
                }
                for strategy in strategies {
                    let plan = planned(&case.tape, s, strategy);
                    let modes: &[Mode] = if s == 1 {
                        &[Mode::Price, Mode::Reverse, Mode::Forward]
                    } else {
                        &[Mode::Reverse]
                    };
                    for &mode in modes {
                        for precision in [Precision::F32, Precision::F64] {
                            let what = format!(
                                "{}_s{s}_{strategy:?}_{}_{mode:?}_{}",
                                case.name,
                                target.name(),
                                precision.name()
                            );
                            let o = EmitOptions {
                                target,
                                mode,
                                precision,
                                ..EmitOptions::default()
                            };
                            let k = match emit(&case.tape, &plan, &o) {
                                Ok(k) => k,
                                Err(EmitError::Unsupported { .. })
                                    if target == Target::Glsl && precision == Precision::F64 =>
                                {
                                    refused += 1;
                                    continue;
                                }
                                Err(e) => panic!("{what}: emit failed: {e}"),
                            };
                            match compile(&k, &what) {
                                Ok(_) => compiled += 1,
                                Err(e @ toolchain::ToolError::Missing { .. }) => {
                                    check::<()>(Err(e));
                                }
                                Err(e) => failures.push(format!("{what}: {e}")),
                            }
                        }
                    }
                }
            }
        }
    }
    eprintln!(
        "corpus: {compiled} kernels compiled clean, {refused} GLSL f64 refused by the emitter, {} failed",
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} kernels failed:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// Every corpus tape fused into a 3-market ladder of all its inputs (`nablac::ladder::expand`),
/// price, forward, plain and checkpointed reverse, f32, through each target's compiler without
/// warnings (ptxas for CUDA: the ladder kernels the H200 runs).
#[test]
fn fused_ladder_kernels_compile_on_every_target() {
    let cases = nablac::corpus::load(&nablac::corpus::dir()).expect("corpus loads");
    let mut failures = Vec::new();
    let mut compiled = 0;
    for case in &cases {
        let spec = nablac::ladder::LadderSpec {
            markets: 3,
            varying: vec![true; case.tape.inputs.len()],
        };
        let tape = nablac::ladder::expand(&case.tape, &spec).expect("the corpus fuses");
        for target in [Target::Cuda, Target::Opencl, Target::Glsl] {
            for (mode, segments) in [
                (Mode::Price, 1),
                (Mode::Forward, 1),
                (Mode::Reverse, 1),
                (Mode::Reverse, 2),
            ] {
                let what = format!(
                    "{}_ladder3_{}_{mode:?}_s{segments}",
                    case.name,
                    target.name()
                );
                let plan = planned(&tape, segments, Checkpoint::Registers);
                let o = EmitOptions {
                    target,
                    mode,
                    ..EmitOptions::default()
                };
                let k = emit(&tape, &plan, &o).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(k.manifest.markets, 3, "{what}");
                match compile(&k, &what) {
                    Ok(_) => compiled += 1,
                    Err(e @ toolchain::ToolError::Missing { .. }) => {
                        check::<()>(Err(e));
                    }
                    Err(e) => failures.push(format!("{what}: {e}")),
                }
            }
        }
    }
    eprintln!("fused ladders: {compiled} kernels compiled clean");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// ptxas's sm_90 report of the 252-step Asian call (crate::products defaults), f32 reverse, plain
/// and checkpointed (16 segments, register recompute); `None` when NVRTC/ptxas are skipped. The
/// OpenCL and GLSL kernels of both are compiled on the way. Slow on a small CPU (~1 min a kernel).
fn asian_252_reports() -> Option<(PtxasReport, PtxasReport)> {
    use nablac::products::{record, Market, Options, Product};
    let tape = nablac::verify::verify(
        record(
            Product::AsianCall,
            &Options::defaults(Product::AsianCall),
            &Market::default(),
        )
        .expect("records"),
    )
    .expect("verifies");
    let plain = planned(&tape, 1, Checkpoint::Registers);
    let ckpt = planned(&tape, 16, Checkpoint::Registers);
    for target in [Target::Opencl, Target::Glsl] {
        for (name, plan) in [("plain", &plain), ("ckpt16", &ckpt)] {
            let k = emit(
                &tape,
                plan,
                &EmitOptions {
                    target,
                    ..EmitOptions::default()
                },
            )
            .expect("emits");
            check(compile(&k, &format!("asian252_{name}_{}", target.name())));
        }
    }
    let report = |plan| {
        let k = emit(
            &tape,
            plan,
            &EmitOptions {
                target: Target::Cuda,
                ..EmitOptions::default()
            },
        )
        .expect("emits");
        let opts: Vec<&str> = k
            .manifest
            .compile_options
            .iter()
            .map(String::as_str)
            .collect();
        check(toolchain::ptxas_reports(&k.source, "90", &opts, "asian252")).map(|rs| {
            rs.into_iter()
                .find(|(e, _)| *e == k.manifest.entry_point)
                .expect("entry in PTX")
                .1
        })
    };
    let p = report(&plain)?;
    let c = report(&ckpt)?;
    eprintln!("asian252 sm_90 f32 reverse: plain {p:?}, checkpointed {c:?}");
    Some((p, c))
}

/// The plain Asian 252 kernel spills kilobytes a thread; the checkpointed one (16 segments,
/// register recompute) spills nothing at sm_90: its draws call no out-of-line slow path
/// (`cospif`, the inline `draw_sqrt`), so ptxas has no call to save registers around.
#[test]
fn asian_252_checkpointed_does_not_spill_at_sm90() {
    let Some((p, c)) = asian_252_reports() else {
        return;
    };
    assert!(
        p.spill_stores >= 1024 && p.spill_loads >= 1024,
        "the plain kernel was expected to spill: {p:?}"
    );
    assert_eq!(
        (c.spill_stores, c.spill_loads),
        (0, 0),
        "the checkpointed kernel spills: {c:?}"
    );
}

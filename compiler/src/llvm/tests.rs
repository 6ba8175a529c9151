//! The LLVM CPU back end: its vector math against the host libm (stated ulp bounds), and its
//! kernels against the Cranelift ones (the reference back end) and the f64 reference.

use super::math::{self, Func, Vt, V};
use super::*;
use crate::clif;
use crate::emit::manifest::{Mode, Precision};
use crate::reference::evaluate_path_in;
use inkwell::execution_engine::ExecutionEngine;
use inkwell::module::Module;
use inkwell::targets::{InitializationConfig, Target, TargetMachine};
use inkwell::OptimizationLevel;
use nablac_runtime::cpu;

// ---------- the vector functions, one vector per call ----------

/// A module with `apply_<f>(T* a, T* b, T* out)` (one vector of W lanes, 64-byte aligned) for
/// every function, compiled for this host.
fn math_engine<'ctx>(cx: &'ctx Context, f64: bool) -> (Module<'ctx>, ExecutionEngine<'ctx>) {
    let w = if f64 { 4 } else { 8 };
    let t = Vt::new(cx, f64, w);
    let m = cx.create_module("math");
    let b = cx.create_builder();
    let ptr = t.fty.ptr_type(Default::default());
    for f in Func::ALL {
        let g = m.add_function(
            &format!("apply_{}", f.name()),
            cx.void_type()
                .fn_type(&[ptr.into(), ptr.into(), ptr.into()], false),
            None,
        );
        b.position_at_end(cx.append_basic_block(g, "entry"));
        let v = V { t, b: &b, m: &m };
        let p = |i| g.get_nth_param(i).unwrap().into_pointer_value();
        let a = b.build_load(p(0), "").unwrap().into_vector_value();
        let c = b.build_load(p(1), "").unwrap().into_vector_value();
        let args = if f.arity() == 2 { vec![a, c] } else { vec![a] };
        let y = math::call(&v, f, &args).unwrap();
        b.build_store(p(2), y).unwrap();
        b.build_return(None).unwrap();
    }
    m.verify().unwrap();
    Target::initialize_native(&InitializationConfig::default()).unwrap();
    let (cpu, features) = (
        TargetMachine::get_host_cpu_name().to_string(),
        TargetMachine::get_host_cpu_features().to_string(),
    );
    let mut f = m.get_first_function();
    while let Some(g) = f {
        if g.count_basic_blocks() > 0 {
            for (k, v) in [("target-cpu", &cpu), ("target-features", &features)] {
                g.add_attribute(
                    inkwell::attributes::AttributeLoc::Function,
                    cx.create_string_attribute(k, v),
                );
            }
        }
        f = g.get_next_function();
    }
    let e = m
        .create_jit_execution_engine(OptimizationLevel::Default)
        .unwrap();
    (m, e)
}

#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Lanes([u64; 8]);

type Apply = unsafe extern "C" fn(*const Lanes, *const Lanes, *mut Lanes);

/// `f` over `args` (pairs; the second ignored by unary functions), lane by lane, as f64 bits
/// (f64) or f32 bits (f32).
fn apply(e: &ExecutionEngine, f: Func, f64: bool, args: &[(f64, f64)]) -> Vec<f64> {
    let addr = e
        .get_function_address(&format!("apply_{}", f.name()))
        .unwrap();
    // SAFETY: apply_<f> has this signature and reads/writes one 32-byte vector.
    let g = unsafe { std::mem::transmute::<usize, Apply>(addr) };
    let w = if f64 { 4 } else { 8 };
    let mut out = Vec::new();
    for chunk in args.chunks(w) {
        let (mut a, mut b, mut y) = (Lanes([0; 8]), Lanes([0; 8]), Lanes([0; 8]));
        for (j, &(x, z)) in chunk.iter().enumerate() {
            if f64 {
                a.0[j] = x.to_bits();
                b.0[j] = z.to_bits();
            } else {
                let bits = |v: f64| u64::from((v as f32).to_bits());
                let (lo, hi) = (j % 2, j / 2);
                a.0[hi] |= bits(x) << (32 * lo);
                b.0[hi] |= bits(z) << (32 * lo);
            }
        }
        // SAFETY: as above.
        unsafe { g(&a, &b, &mut y) };
        for j in 0..chunk.len() {
            out.push(if f64 {
                f64::from_bits(y.0[j])
            } else {
                f64::from(f32::from_bits((y.0[j / 2] >> (32 * (j % 2))) as u32))
            });
        }
    }
    out
}

/// Distance in units in the last place (of f64, or of f32 when `!f64`); 0 for two NaNs or equal
/// infinities, `u64::MAX` when only one is NaN.
fn ulps(a: f64, b: f64, f64: bool) -> u64 {
    if a.is_nan() || b.is_nan() {
        return if a.is_nan() && b.is_nan() {
            0
        } else {
            u64::MAX
        };
    }
    let ord = |x: f64| -> i128 {
        let i = if f64 {
            i128::from(x.to_bits() as i64)
        } else {
            i128::from((x as f32).to_bits() as i32)
        };
        if i < 0 {
            (if f64 {
                i128::from(i64::MIN)
            } else {
                i128::from(i32::MIN)
            }) - i
        } else {
            i
        }
    };
    (ord(a) - ord(b)).unsigned_abs() as u64
}

/// The host libm's value, in f64 or f32.
fn libm_value(f: Func, f64: bool, x: f64, y: f64) -> f64 {
    if f64 {
        match f {
            Func::Exp => x.exp(),
            Func::Log => x.ln(),
            Func::Cos => x.cos(),
            Func::Tanh => x.tanh(),
            Func::Erfc => libm::erfc(x),
            Func::Pow => x.powf(y),
        }
    } else {
        let (x, y) = (x as f32, y as f32);
        f64::from(match f {
            Func::Exp => x.exp(),
            Func::Log => x.ln(),
            Func::Cos => x.cos(),
            Func::Tanh => x.tanh(),
            Func::Erfc => libm::erfcf(x),
            Func::Pow => x.powf(y),
        })
    }
}

/// A deterministic stream in [0, 1).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / 9_007_199_254_740_992.0
    }
}

/// Arguments for `f`: the edges, then `n` spread over the domain of the stated bound
/// (uniformly and log-uniformly).
fn arguments(f: Func, f64: bool, n: usize) -> Vec<(f64, f64)> {
    let (huge, tiny) = if f64 {
        (f64::MAX, f64::from_bits(1))
    } else {
        (f64::from(f32::MAX), f64::from(f32::from_bits(1)))
    };
    let min_normal = if f64 {
        f64::MIN_POSITIVE
    } else {
        f64::from(f32::MIN_POSITIVE)
    };
    let mut edges = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        2.0,
        tiny,
        -tiny,
        min_normal,
        huge,
        -huge,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
    ];
    let mut r = Lcg(0x5eed ^ f as u64);
    let mut out: Vec<(f64, f64)> = Vec::new();
    match f {
        Func::Exp => {
            let (o, u) = if f64 {
                (709.78, -745.1)
            } else {
                (88.72, -103.9)
            };
            edges.extend([o, u, o + 0.01, u - 0.01, 1e-10, -1e-10]);
            for _ in 0..n {
                out.push((u + (o - u) * r.next(), 0.0));
                out.push(((r.next() - 0.5) * 4.0, 0.0));
            }
        }
        Func::Log => {
            edges.extend([1.0 + 1e-9, 1.0 - 1e-9, std::f64::consts::SQRT_2, 0.7]);
            for _ in 0..n {
                let e = if f64 { 2000.0 } else { 250.0 };
                out.push((2f64.powf((r.next() - 0.5) * e), 0.0));
                out.push((0.5 + r.next(), 0.0));
            }
        }
        Func::Cos => {
            let lim = if f64 { 524_288.0 } else { 1024.0 };
            edges.retain(|x| x.abs() <= lim || !x.is_finite());
            edges.extend([
                std::f64::consts::FRAC_PI_2,
                std::f64::consts::PI,
                std::f64::consts::TAU,
            ]);
            for _ in 0..n {
                out.push((std::f64::consts::TAU * r.next(), 0.0));
                out.push(((r.next() - 0.5) * 2.0 * lim, 0.0));
            }
        }
        Func::Tanh => {
            edges.extend([1e-9, 0.3, 0.55, 20.0, 22.0, 9.0]);
            for _ in 0..n {
                out.push(((r.next() - 0.5) * 50.0, 0.0));
                out.push(((r.next() - 0.5) * 2.0, 0.0));
            }
        }
        Func::Erfc => {
            edges.extend([0.5, -0.5, 8.0, 26.5, 27.2, 28.0, -6.0, 1e-9]);
            let hi = if f64 { 27.0 } else { 10.0 };
            for _ in 0..n {
                out.push(((r.next() - 0.3) * 1.3 * hi, 0.0));
                out.push(((r.next() - 0.5) * 4.0, 0.0));
            }
        }
        Func::Pow => {
            for &a in &[0.0, -0.0, 1.0, 2.0, -2.0, f64::INFINITY, f64::NAN, 0.5] {
                for &b in &[0.0, 1.0, -1.0, 2.0, 3.0, 0.5, f64::NAN, f64::INFINITY] {
                    out.push((a, b));
                }
            }
            for _ in 0..n {
                out.push((2f64.powf((r.next() - 0.5) * 20.0), (r.next() - 0.5) * 20.0));
                out.push((0.1 + 10.0 * r.next(), (r.next() - 0.5) * 4.0));
            }
            return out;
        }
    }
    out.extend(edges.into_iter().map(|x| (x, 0.0)));
    out
}

/// The stated bound (module doc of `math`) at `(a, b)`, in ulp.
fn bound(f: Func, f64: bool, a: f64, b: f64) -> f64 {
    match (f, f64) {
        (Func::Exp | Func::Log, _) => 1.0,
        (Func::Cos, _) => 2.0,
        (Func::Tanh, _) => 3.0,
        (Func::Erfc, _) => 4.0,
        (Func::Pow, true) => {
            let y = (b * a.abs().ln()).abs();
            2.0 + if y.is_finite() { y } else { 0.0 }
        }
        (Func::Pow, false) => 1.0,
    }
}

#[test]
fn vector_math_is_within_its_stated_ulp_bounds_of_libm() {
    for f64 in [true, false] {
        let cx = Context::create();
        let (_m, e) = math_engine(&cx, f64);
        for f in Func::ALL {
            let args = arguments(f, f64, 20_000);
            let got = apply(&e, f, f64, &args);
            let mut worst = (0.0f64, 0.0, 0.0);
            for (&(a, b), &y) in args.iter().zip(&got) {
                let want = libm_value(f, f64, a, b);
                let d = ulps(y, want, f64) as f64;
                let allowed = bound(f, f64, a, b);
                assert!(
                    d <= allowed,
                    "{}({a:e}, {b:e}) in {}: {y:e}, libm {want:e}: {d} ulp > {allowed}",
                    f.name(),
                    if f64 { "f64" } else { "f32" }
                );
                if d / allowed > worst.0 {
                    worst = (d / allowed, a, d);
                }
            }
            eprintln!(
                "{} {}: worst {} ulp at {:e} of {} arguments",
                f.name(),
                if f64 { "f64" } else { "f32" },
                worst.2,
                worst.1,
                args.len()
            );
        }
    }
}

/// erfcx(x) from the `libm` crate's erfc and an exact split of x^2 (x <= 8: no overflow).
fn erfcx_reference(x: f64) -> f64 {
    let hi = x * x;
    let lo = x.mul_add(x, -hi);
    let e = hi.exp();
    libm::erfc(x) * e.mul_add(lo, e)
}

/// The fits (exact to 1e-18) against erfcx from the libm crate, whose erfc has last-bit errors
/// of its own (hence 8e-16, about 4 ulp).
#[test]
fn the_erfcx_fits_meet_the_reference() {
    for fit in math::erfcx_fits() {
        for k in 0..=200 {
            let x = fit.a + (fit.b - fit.a) * k as f64 / 200.0;
            let t = (x - 0.5 * (fit.a + fit.b)) * 2.0 / (fit.b - fit.a);
            let (mut b1, mut b2) = (0.0, 0.0);
            for &c in fit.c[1..].iter().rev() {
                let b0 = 2.0 * t * b1 - b2 + c;
                b2 = b1;
                b1 = b0;
            }
            let y = t * b1 - b2 + fit.c[0];
            let want = erfcx_reference(x);
            assert!(
                ((y - want) / want).abs() < 8e-16,
                "erfcx({x}) fit {y:e} reference {want:e}"
            );
        }
    }
}

// ---------- kernels against Cranelift and the reference ----------

fn rows(
    source: &str,
    manifest: &Manifest,
    inputs: &[f64],
    seed: u64,
    first: u64,
    n: usize,
) -> Vec<f64> {
    let c = cpu::load(source, manifest).unwrap_or_else(|e| panic!("{e}"));
    let mut out = vec![f64::NAN; n * c.row_len()];
    c.run(inputs, seed, first, &mut out).unwrap();
    out
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan()) || (a - b).abs() <= rel * a.abs().max(b.abs())
}

/// The LLVM kernel of `v` against the Cranelift one, row by row, over paths `first..first+n`.
/// Returns how many leaves were compared.
fn agree(
    v: &Verified,
    mode: Mode,
    precision: Precision,
    first: u64,
    n: usize,
    rel: f64,
    what: &str,
) -> usize {
    let o = Options {
        mode,
        precision,
        greek_stderr: true,
    };
    let l = emit(v, &o).unwrap_or_else(|e| panic!("{what}: {e}"));
    let c = clif::emit(v, &o).unwrap();
    assert_eq!(l.manifest.sums, c.manifest.sums);
    assert_eq!(l.manifest.shifts, c.manifest.shifts);
    // The market, then a non-zero shift for every square: both take them from the inputs.
    let mut inputs: Vec<f64> = v.tape().inputs.iter().map(|i| i.value).collect();
    inputs.extend((0..l.manifest.shifts.len()).map(|k| 0.25 + 0.5 * k as f64));
    let a = rows(&l.source, &l.manifest, &inputs, 7, first, n);
    let b = rows(&c.source, &c.manifest, &inputs, 7, first, n);
    let row = l.manifest.sums.len();
    for (k, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(
            close(*x, *y, rel),
            "{what} {mode:?} {precision:?}: path {} {}: llvm {x:e} cranelift {y:e}",
            first + (k / row) as u64,
            l.manifest.sums[k % row]
        );
    }
    a.len()
}

#[test]
fn corpus_kernels_agree_with_cranelift() {
    let cases = crate::corpus::load(&crate::corpus::dir()).unwrap();
    assert!(cases.len() >= 8, "{} corpus cases", cases.len());
    let mut compared = 0;
    for case in &cases {
        for mode in [Mode::Price, Mode::Forward, Mode::Reverse] {
            compared += agree(
                &case.tape,
                mode,
                Precision::F64,
                1021,
                67,
                1e-12,
                &case.name,
            );
            compared += agree(&case.tape, mode, Precision::F32, 1021, 67, 2e-4, &case.name);
        }
    }
    assert!(compared > 10_000);
}

#[test]
fn random_tapes_agree_with_cranelift() {
    for seed in 0..60 {
        let tape = crate::testing::random_tape(seed, 6 + (seed as usize * 7) % 40);
        let v = crate::testing::verified(&tape);
        for mode in [Mode::Price, Mode::Forward, Mode::Reverse] {
            agree(
                &v,
                mode,
                Precision::F64,
                5,
                13,
                1e-12,
                &format!("random tape {seed}"),
            );
        }
    }
}

#[test]
fn corpus_kernels_agree_with_the_reference() {
    let cases = crate::corpus::load(&crate::corpus::dir()).unwrap();
    for case in &cases {
        let v = &case.tape;
        let inputs: Vec<f64> = v.tape().inputs.iter().map(|i| i.value).collect();
        let o = Options {
            mode: Mode::Reverse,
            precision: Precision::F64,
            greek_stderr: true,
        };
        let k = emit(v, &o).unwrap();
        let got = rows(&k.source, &k.manifest, &inputs, 3, 0, 9);
        let row = k.manifest.sums.len();
        for p in 0..9u64 {
            let r = evaluate_path_in::<f64>(v, &inputs, 3, p).unwrap();
            let mut want = Vec::new();
            for (o, &x) in r.outputs.iter().enumerate() {
                // The row of the ABI with every shift 0 (the market alone was passed).
                let shifts = vec![0.0; 1 + r.greeks[o].len()];
                want.extend(crate::report::output_leaves(x, &r.greeks[o], &shifts, true));
            }
            for (s, (g, w)) in got[p as usize * row..][..row].iter().zip(&want).enumerate() {
                assert!(
                    close(*g, *w, 1e-12),
                    "{} path {p} {}: llvm {g:e} reference {w:e}",
                    case.name,
                    k.manifest.sums[s]
                );
            }
        }
    }
}

#[test]
fn a_partial_group_writes_only_its_rows_and_the_same_bits() {
    let case = crate::corpus::load(&crate::corpus::dir())
        .unwrap()
        .into_iter()
        .find(|c| c.tape.tape().n_draws > 0)
        .unwrap();
    for precision in [Precision::F64, Precision::F32] {
        let o = Options {
            mode: Mode::Reverse,
            precision,
            greek_stderr: true,
        };
        let k = emit(&case.tape, &o).unwrap();
        let c = cpu::load(&k.source, &k.manifest).unwrap();
        let inputs: Vec<f64> = case.tape.tape().inputs.iter().map(|i| i.value).collect();
        let row = c.row_len();
        let mut all = vec![f64::NAN; 16 * row];
        c.run(&inputs, 9, 100, &mut all).unwrap();
        // Three paths from 103, in a buffer with a sentinel row after them.
        let mut part = vec![-7.0; 4 * row];
        c.run(&inputs, 9, 103, &mut part[..3 * row]).unwrap();
        assert_eq!(&part[..3 * row], &all[3 * row..6 * row]);
        assert!(part[3 * row..].iter().all(|&x| x == -7.0));
        assert!(all.iter().all(|x| !x.is_nan()) || case.name.contains("nan"));
    }
}

#[test]
fn emission_is_deterministic_and_reads_no_libm() {
    let cases = crate::corpus::load(&crate::corpus::dir()).unwrap();
    for case in cases.iter().take(6) {
        let o = Options {
            mode: Mode::Reverse,
            precision: Precision::F64,
            greek_stderr: true,
        };
        let a = emit(&case.tape, &o).unwrap();
        let b = emit(&case.tape, &o).unwrap();
        assert_eq!(a, b);
        assert!(a.source.starts_with("; ModuleID"));
        for line in a.source.lines().filter(|l| l.starts_with("declare")) {
            assert!(line.contains("@llvm."), "{}: {line}", case.name);
        }
        assert_eq!(a.manifest.entry_point, clif::entry_name(&o));
    }
}

#[test]
fn the_runtime_refuses_foreign_llvm_ir() {
    let case = &crate::corpus::load(&crate::corpus::dir()).unwrap()[0];
    let o = Options {
        mode: Mode::Price,
        precision: Precision::F64,
        greek_stderr: true,
    };
    let k = emit(&case.tape, &o).unwrap();
    // A declaration of a function that is not an LLVM intrinsic (at the end: any SIMD width).
    let call_libm = format!("{}\ndeclare double @system(i8*)\n", k.source);
    let err = cpu::load(&call_libm, &k.manifest).unwrap_err().to_string();
    assert!(err.contains("imports system"), "{err}");
    let broken = k.source.replace("define ", "define oops ");
    let err = cpu::load(&broken, &k.manifest).unwrap_err().to_string();
    assert!(err.contains("does not parse"), "{err}");
    let mut m = k.manifest.clone();
    m.entry_point = "elsewhere".into();
    let err = cpu::load(&k.source, &m).unwrap_err().to_string();
    assert!(err.contains("defines no function elsewhere"), "{err}");
}

/// The runtime runs an LLVM kernel over threads and chunks with the Cranelift kernels' fixed-order
/// sums: neither the thread count nor the chunking changes a bit, and the report agrees with the
/// Cranelift kernel's to 1e-12.
#[test]
fn threads_and_chunks_never_change_a_bit() {
    use nablac_runtime::{Backend, RunOptions, Target};
    let case = crate::corpus::load(&crate::corpus::dir())
        .unwrap()
        .into_iter()
        .find(|c| c.name == "asian8")
        .unwrap();
    let be = Backend::open(Target::Cpu).unwrap();
    let o = Options {
        mode: Mode::Reverse,
        precision: Precision::F64,
        greek_stderr: true,
    };
    let l = emit(&case.tape, &o).unwrap();
    let lk = be.load(&l.source, &l.manifest).unwrap();
    let market = lk.default_market();
    let report = |threads, chunk| {
        let opts = RunOptions {
            threads: Some(threads),
            chunk_paths: chunk,
            progress: None,
        };
        be.run(&lk, std::slice::from_ref(&market), 10_007, 5, &opts)
            .unwrap()
            .remove(0)
    };
    let one = report(1, None);
    for (threads, chunk) in [(2, None), (3, Some(1024)), (4, Some(2048))] {
        assert_eq!(
            report(threads, chunk),
            one,
            "{threads} threads, chunk {chunk:?}"
        );
    }
    let c = clif::emit(&case.tape, &o).unwrap();
    let ck = be.load(&c.source, &c.manifest).unwrap();
    let cr = be
        .run(
            &ck,
            std::slice::from_ref(&market),
            10_007,
            5,
            &RunOptions::default(),
        )
        .unwrap()
        .remove(0);
    for (a, b) in one.outputs.iter().zip(&cr.outputs) {
        assert!(
            close(a.value, b.value, 1e-12),
            "{} {} {}",
            a.name,
            a.value,
            b.value
        );
        for ((_, x), (_, y)) in a.greeks.iter().zip(&b.greeks) {
            assert!(close(*x, *y, 1e-12), "{}: {x} vs {y}", a.name);
        }
    }
}

/// Every SIMD width gives each path the same bits (a lane is a path, computed by the same
/// instructions): the AVX2 width, the AVX-512 one and a narrow one, on corpus tapes in every
/// mode and both precisions, whatever this machine's own width is.
#[test]
fn the_simd_width_never_changes_a_bit() {
    use nablac_runtime::{Backend, RunOptions, Target};
    let be = Backend::open(Target::Cpu).unwrap();
    let cases: Vec<_> = crate::corpus::load(&crate::corpus::dir())
        .unwrap()
        .into_iter()
        .filter(|c| ["asian8", "portfolio", "format2"].contains(&c.name.as_str()))
        .collect();
    assert_eq!(cases.len(), 3);
    for case in &cases {
        for mode in [Mode::Price, Mode::Forward, Mode::Reverse] {
            for precision in [Precision::F64, Precision::F32] {
                let o = Options {
                    mode,
                    precision,
                    greek_stderr: true,
                };
                let avx2 = match precision {
                    Precision::F64 => 4,
                    Precision::F32 => 8,
                };
                let reports: Vec<_> = [2, avx2, 2 * avx2]
                    .into_iter()
                    .map(|w| {
                        let k = emit_with_lanes(&case.tape, &o, w).unwrap();
                        let lk = be.load(&k.source, &k.manifest).unwrap();
                        let market = lk.default_market();
                        be.run(&lk, &[market], 1_003, 11, &RunOptions::default())
                            .unwrap()
                            .remove(0)
                    })
                    .collect();
                assert_eq!(
                    reports[0], reports[1],
                    "{} {mode:?} {precision:?}",
                    case.name
                );
                assert_eq!(
                    reports[1], reports[2],
                    "{} {mode:?} {precision:?}",
                    case.name
                );
            }
        }
    }
}

//! Every backend against the contract: kernels that nablac compiles, loaded and run through
//! `nablac_runtime::Backend` on cpu (the Cranelift JIT), opencl (PoCL in CI), vulkan (lavapipe in
//! CI) and cuda (a GPU machine).
//!
//! - plain, register-checkpointed and scratch-checkpointed kernels give the same bits; two runs
//!   and runs chunked differently give the same bits;
//! - f64 kernels equal TAPE-FORMAT.md's definition (`definition`, written again here) to 1e-12
//!   relative; f32 kernels agree with it, evaluated in f64 on the f32 kernels' variates, to 1e-4;
//! - the European call and put match Black–Scholes within 4 standard errors, value and all five
//!   Greeks; every product's Greeks match central bump-and-revalue of its price kernel (same seed);
//! - the 252-step Asian at 1,000,000 paths prices near the literature's 5.30003 with delta near
//!   0.5616 and vega near 22.40, plain equal to checkpointed bit for bit.
//!
//! Backends: cpu always runs. opencl and vulkan run where a device opens, and must open when
//! `CI=true` or `NABLAC_REQUIRE_TOOLS=1` (scripts/check.sh sets it); cuda must open when
//! `NABLAC_REQUIRE_CUDA=1` (the GPU machine). Otherwise a missing one prints `skipped: ...`.
//! `NABLAC_BACKENDS=cpu,cuda` restricts the run to some backends.

mod definition;

use definition::Variates;
use nablac::compile::{compile, CompileOptions};
use nablac::emit::{EmitError, Mode, Precision, Target};
use nablac::ladder::LadderSpec;
use nablac::plan::Checkpoint;
use nablac::products::{record, Market, Options, Product};
use nablac::tape::Tape;
use nablac_runtime::{Backend, LoadedKernel, Report, RunOptions};

const SEED: u64 = 0x5eed_0000_0000_002a;

fn env_is(name: &str, value: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v == value)
}

/// The backends this run checks, opened (see the module doc). Tests open them one at a time:
/// drivers' start-up (PoCL's, lavapipe's, each with its own LLVM) is not all safe to race.
fn backends() -> Vec<(Target, Backend)> {
    static OPENING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = OPENING.lock().unwrap_or_else(|e| e.into_inner());
    let only = std::env::var("NABLAC_BACKENDS").unwrap_or_default();
    let mut out = Vec::new();
    for target in [Target::Cpu, Target::Opencl, Target::Glsl, Target::Cuda] {
        let name = backend_name(target);
        if !only.is_empty() && !only.split(',').any(|b| b.trim() == name) {
            continue;
        }
        let required = match target {
            Target::Cpu => true,
            Target::Cuda => env_is("NABLAC_REQUIRE_CUDA", "1"),
            _ => env_is("CI", "true") || env_is("NABLAC_REQUIRE_TOOLS", "1"),
        };
        match Backend::open(target) {
            Ok(b) => {
                eprintln!("{name}: {}", b.describe());
                out.push((target, b));
            }
            Err(e) if required => panic!("the {name} backend is required here but: {e}"),
            Err(e) => eprintln!("skipped: {name}: {e}"),
        }
    }
    out
}

/// Is `backend` PoCL, OpenCL on the CPU (CI's OpenCL), whose LLVM is slow on long kernels?
fn is_pocl(backend: &Backend) -> bool {
    backend.target() == Target::Opencl && backend.describe().contains("Portable Computing Language")
}

fn backend_name(t: Target) -> &'static str {
    match t {
        Target::Glsl => "vulkan",
        t => t.name(),
    }
}

/// A kernel configuration: precision, mode and checkpointing.
#[derive(Copy, Clone, Debug)]
struct Config {
    precision: Precision,
    mode: Mode,
    strategy: Checkpoint,
    segments: u32,
}

impl Config {
    fn plain(precision: Precision, mode: Mode) -> Config {
        Config {
            precision,
            mode,
            strategy: Checkpoint::Off,
            segments: 1,
        }
    }
    fn label(&self) -> String {
        format!(
            "{} {} {:?}/{}",
            self.precision.name(),
            self.mode.name(),
            self.strategy,
            self.segments
        )
    }
}

/// Compiles and loads `tape` with `c` on `backend`; `None` where the target cannot have it (the
/// scratch strategy outside cuda and opencl, f64 transcendentals in GLSL).
fn kernel(target: Target, backend: &Backend, tape: &Tape, c: Config) -> Option<LoadedKernel> {
    kernel_of(target, backend, tape, c, None)
}

/// [`kernel`], fusing the markets of `ladder` when given.
fn kernel_of(
    target: Target,
    backend: &Backend,
    tape: &Tape,
    c: Config,
    ladder: Option<LadderSpec>,
) -> Option<LoadedKernel> {
    if c.strategy == Checkpoint::Scratch && !matches!(target, Target::Cuda | Target::Opencl) {
        return None;
    }
    let mut o = CompileOptions::new(target);
    o.precision = c.precision;
    o.mode = c.mode;
    o.segments.strategy = c.strategy;
    o.segments.segments = Some(c.segments);
    o.ladder = ladder;
    let tape = nablac::verify::verify(tape.clone()).expect("the tests' tapes are valid");
    let k = match compile(&tape, &o) {
        Ok(k) => k,
        Err(nablac::compile::CompileError::Emit(EmitError::Unsupported { .. }))
            if target == Target::Glsl && c.precision == Precision::F64 =>
        {
            return None
        }
        Err(e) => panic!("{} {}: compile: {e}", backend_name(target), c.label()),
    };
    Some(
        backend
            .load(&k.source, &k.manifest)
            .unwrap_or_else(|e| panic!("{} {}: load: {e}", backend_name(target), c.label())),
    )
}

fn run_with(
    backend: &Backend,
    k: &LoadedKernel,
    markets: &[Vec<f64>],
    paths: u64,
    chunk: Option<u64>,
) -> Vec<Report> {
    let opts = RunOptions {
        chunk_paths: chunk,
        ..RunOptions::default()
    };
    backend
        .run(k, markets, paths, SEED, &opts)
        .unwrap_or_else(|e| panic!("run: {e}"))
}

fn run1(backend: &Backend, k: &LoadedKernel, market: &[f64], paths: u64) -> Report {
    run_with(backend, k, &[market.to_vec()], paths, None).remove(0)
}

/// Every number of a report, as bits.
fn bits(r: &Report) -> Vec<u64> {
    r.outputs
        .iter()
        .flat_map(|o| {
            [o.value.to_bits(), o.stderr.to_bits(), o.non_finite]
                .into_iter()
                .chain(o.greeks.iter().map(|g| g.1.to_bits()))
                .chain(o.greek_stderr.iter().map(|g| g.to_bits()))
        })
        .collect()
}

fn corpus() -> Vec<nablac::corpus::Case> {
    nablac::corpus::load(&nablac::corpus::dir()).expect("the corpus loads")
}

fn asian(steps: u32) -> Tape {
    let o = Options {
        steps,
        ..Options::defaults(Product::AsianCall)
    };
    record(Product::AsianCall, &o, &Market::default()).expect("records")
}

/// The checkpointed configurations of a case: its sidecar's segment counts above 1 (2 if it has
/// none), with register recompute and the scratch buffer.
fn checkpointed(precision: Precision, segments: &[u32]) -> Vec<Config> {
    let mut counts: Vec<u32> = segments.iter().copied().filter(|&s| s > 1).collect();
    if counts.is_empty() {
        counts.push(2);
    }
    counts
        .into_iter()
        .flat_map(|s| {
            [Checkpoint::Registers, Checkpoint::Scratch].map(|strategy| Config {
                precision,
                mode: Mode::Reverse,
                strategy,
                segments: s,
            })
        })
        .collect()
}

/// Plain vs checkpointed, run vs run, chunked vs whole: the same bits, on `tape`.
fn check_bits(
    target: Target,
    backend: &Backend,
    name: &str,
    tape: &Tape,
    segments: &[u32],
    paths: u64,
) {
    let market: Vec<f64> = tape.inputs.iter().map(|i| i.value).collect();
    for precision in [Precision::F32, Precision::F64] {
        let Some(plain) = kernel(
            target,
            backend,
            tape,
            Config::plain(precision, Mode::Reverse),
        ) else {
            continue;
        };
        let what = format!("{} {name} {}", backend_name(target), precision.name());
        let want = bits(&run1(backend, &plain, &market, paths));
        assert_eq!(
            want,
            bits(&run1(backend, &plain, &market, paths)),
            "{what}: run vs run"
        );
        assert_eq!(
            want,
            bits(
                &run_with(
                    backend,
                    &plain,
                    std::slice::from_ref(&market),
                    paths,
                    Some(1024)
                )[0]
            ),
            "{what}: chunks of 1024 paths vs one run"
        );
        // Partial sums of ranges, merged out of order, make the same report (a run split
        // across devices); a range that does not start on a 1024 boundary is refused.
        let shifts = backend
            .shifts(&plain, &market, SEED, &RunOptions::default())
            .unwrap_or_else(|e| panic!("{what}: shifts: {e}"));
        let part = |r: std::ops::Range<u64>| {
            backend
                .partial_sums(
                    &plain,
                    &market,
                    &shifts,
                    SEED,
                    paths,
                    r,
                    &RunOptions::default(),
                )
                .unwrap_or_else(|e| panic!("{what}: partial sums: {e}"))
        };
        let mut merged = part(2048..paths);
        for p in [part(0..1024), part(1024..2048)] {
            for (a, b) in merged.iter_mut().zip(&p) {
                a.merge(b).expect("disjoint ranges");
            }
        }
        assert_eq!(
            want,
            bits(
                &backend
                    .report(&plain, &merged, &shifts)
                    .expect("complete sums")
            ),
            "{what}: partial sums of three ranges vs one run"
        );
        assert!(backend
            .partial_sums(
                &plain,
                &market,
                &shifts,
                SEED,
                paths,
                100..1024,
                &RunOptions::default()
            )
            .is_err());
        for c in checkpointed(precision, segments) {
            let Some(k) = kernel(target, backend, tape, c) else {
                continue;
            };
            assert_eq!(
                want,
                bits(
                    &run_with(
                        backend,
                        &k,
                        std::slice::from_ref(&market),
                        paths,
                        Some(2048)
                    )[0]
                ),
                "{what}: {} vs the plain kernel",
                c.label()
            );
        }
    }
}

#[test]
fn plain_and_checkpointed_kernels_give_the_same_bits_on_the_corpus() {
    for (target, backend) in backends() {
        for case in corpus() {
            // 3000 paths: not a multiple of the workgroup size, so the last group is padded.
            check_bits(
                target,
                &backend,
                &case.name,
                &case.tape,
                &case.options.segments,
                3000,
            );
        }
    }
}

#[test]
fn plain_and_checkpointed_kernels_give_the_same_bits_on_the_252_step_asian() {
    let tape = asian(252);
    for (target, backend) in backends() {
        check_bits(target, &backend, "asian252", &tape, &[16], 2048 + 77);
    }
}

/// `got` within `rel` of `want`, relative to the larger of |want| and the per-path scale.
fn close(got: f64, want: &definition::Stat, rel: f64) -> bool {
    (got - want.mean).abs() <= rel * want.mean.abs().max(want.abs_mean).max(1e-300)
}

/// A standard error against the definition's (two-pass, over the same finite paths): within
/// `rel` of it, or of the scale of the values where it is near zero (a constant Greek).
fn close_se(got: f64, want: &definition::Stat, rel: f64) -> bool {
    (got.is_nan() && want.se.is_nan())
        || (got - want.se).abs() <= rel * want.se.max(1e-9 * want.abs_mean).max(1e-300)
}

/// The report against the definition: every value and Greek within `rel`, the non-finite counts
/// equal, the standard errors (value and Greeks) within `10 * rel`.
fn check_against(what: &str, r: &Report, d: &definition::Run, rel: f64) {
    for (o, out) in r.outputs.iter().enumerate() {
        assert_eq!(
            out.non_finite, d.non_finite[o],
            "{what} {}: non-finite paths",
            out.name
        );
        if d.values[o].se.is_finite() {
            assert!(
                close_se(out.stderr, &d.values[o], 10.0 * rel),
                "{what} {}: stderr {} vs the definition's {}",
                out.name,
                out.stderr,
                d.values[o].se
            );
        }
        for (i, se) in out.greek_stderr.iter().enumerate() {
            if d.greeks[o][i].se.is_finite() {
                assert!(
                    close_se(*se, &d.greeks[o][i], 10.0 * rel),
                    "{what} {}: stderr of d/d{} {se} vs the definition's {}",
                    out.name,
                    out.greeks[i].0,
                    d.greeks[o][i].se
                );
            }
        }
        assert!(
            close(out.value, &d.values[o], rel),
            "{what} {}: value {} vs the definition's {}",
            out.name,
            out.value,
            d.values[o].mean
        );
        for (i, (input, g)) in out.greeks.iter().enumerate() {
            assert!(
                close(*g, &d.greeks[o][i], rel),
                "{what} {}: d/d{input} {g} vs the definition's {}",
                out.name,
                d.greeks[o][i].mean
            );
        }
    }
}

#[test]
fn f64_kernels_equal_the_definition() {
    let paths = 2000;
    for (target, backend) in backends() {
        for case in corpus() {
            let market: Vec<f64> = case.tape.inputs.iter().map(|i| i.value).collect();
            let d = definition::run(&case.tape, &market, SEED, paths, Variates::F64);
            for mode in [Mode::Reverse, Mode::Forward] {
                let Some(k) = kernel(
                    target,
                    &backend,
                    &case.tape,
                    Config::plain(Precision::F64, mode),
                ) else {
                    continue;
                };
                let r = run1(&backend, &k, &market, paths);
                check_against(
                    &format!("{} {} f64 {}", backend_name(target), case.name, mode.name()),
                    &r,
                    &d,
                    1e-12,
                );
            }
        }
    }
}

/// Forward mode's Greeks are reverse mode's on every corpus tape and backend: the same values bit
/// for bit (one forward sweep either way), Greeks within 1e-12 (f64) or 1e-5 (f32) of each other,
/// relative to the definition's mean absolute per-path derivative (the sums cancel).
#[test]
fn forward_equals_reverse_on_the_corpus() {
    let paths = 4096;
    for (target, backend) in backends() {
        for case in corpus() {
            let market: Vec<f64> = case.tape.inputs.iter().map(|i| i.value).collect();
            let d = definition::run(&case.tape, &market, SEED, paths, Variates::F64);
            for (precision, rel) in [(Precision::F64, 1e-12), (Precision::F32, 1e-5)] {
                let k = |mode| kernel(target, &backend, &case.tape, Config::plain(precision, mode));
                let (Some(fwd), Some(rev)) = (k(Mode::Forward), k(Mode::Reverse)) else {
                    continue;
                };
                let (f, r) = (
                    run1(&backend, &fwd, &market, paths),
                    run1(&backend, &rev, &market, paths),
                );
                let what = format!(
                    "{} {} {}",
                    backend_name(target),
                    case.name,
                    precision.name()
                );
                for (o, (fo, ro)) in f.outputs.iter().zip(&r.outputs).enumerate() {
                    assert_eq!(
                        fo.value.to_bits(),
                        ro.value.to_bits(),
                        "{what} {}: value",
                        fo.name
                    );
                    for (i, (fg, rg)) in fo.greeks.iter().zip(&ro.greeks).enumerate() {
                        let scale = d.greeks[o][i].abs_mean.max(rg.1.abs()).max(1e-300);
                        assert!(
                            (fg.1 - rg.1).abs() <= rel * scale,
                            "{what} {}: d/d{} forward {} reverse {}",
                            fo.name,
                            fg.0,
                            fg.1,
                            rg.1
                        );
                    }
                }
            }
        }
    }
}

/// Fused ladders (issue 11, point 4): each market of a fused kernel has exactly the bits of a
/// one-market run of the same tape, seed and paths, in every mode (price, forward, plain and
/// checkpointed reverse), f32 and f64, whether one input or every input varies, with a last
/// group that is padded (5 markets through a kernel of 2).
#[test]
fn each_market_of_a_fused_ladder_has_the_bits_of_a_single_run() {
    let paths = 3000; // not a multiple of the workgroup: the tail is padded too
    let cases: Vec<(String, Tape)> = std::iter::once(("asian16".to_string(), asian(16)))
        .chain(corpus().into_iter().map(|c| (c.name, c.tape.into_tape())))
        .collect();
    let configs = [
        Config::plain(Precision::F64, Mode::Price),
        Config::plain(Precision::F32, Mode::Forward),
        Config::plain(Precision::F64, Mode::Forward),
        Config::plain(Precision::F32, Mode::Reverse),
        Config::plain(Precision::F64, Mode::Reverse),
        Config {
            precision: Precision::F32,
            mode: Mode::Reverse,
            strategy: Checkpoint::Registers,
            segments: 3,
        },
    ];
    for (target, backend) in backends() {
        let cpu = target == Target::Cpu;
        for (name, tape) in &cases {
            // Drivers' compilers are slow on the CPU: every case and ladder on the cpu; elsewhere
            // a one-input ladder of the Asian and an all-input ladder of the portfolio (three
            // outputs), f32, one kernel per mode.
            let n = tape.inputs.len();
            let ladders: Vec<Vec<bool>> = match (cpu, name.as_str()) {
                (true, _) => vec![vec![true; n], (0..n).map(|i| i == 0).collect()],
                (false, "asian16") => vec![(0..n).map(|i| i == 0).collect()],
                (false, "portfolio") => vec![vec![true; n]],
                _ => continue,
            };
            let base: Vec<f64> = tape.inputs.iter().map(|i| i.value).collect();
            for c in configs {
                if !cpu
                    && (c.precision == Precision::F64 || c.mode == Mode::Reverse && c.segments == 1)
                {
                    continue;
                }
                let Some(single) = kernel(target, &backend, tape, c) else {
                    continue;
                };
                for varying in &ladders {
                    let markets: Vec<Vec<f64>> = (0..5)
                        .map(|k| {
                            base.iter()
                                .zip(varying)
                                .map(|(&x, &v)| if v { x * (1.0 + 0.05 * k as f64) } else { x })
                                .collect()
                        })
                        .collect();
                    let spec = LadderSpec {
                        markets: 2,
                        varying: varying.clone(),
                    };
                    let what = format!(
                        "{} {name} {} varying {varying:?}",
                        backend_name(target),
                        c.label(),
                    );
                    let fused = kernel_of(target, &backend, tape, c, Some(spec))
                        .unwrap_or_else(|| panic!("{what}: no fused kernel"));
                    assert_eq!(fused.manifest().markets, 2, "{what}");
                    let got = run_with(&backend, &fused, &markets, paths, None);
                    assert_eq!(got.len(), markets.len(), "{what}");
                    for (k, market) in markets.iter().enumerate() {
                        let want = run1(&backend, &single, market, paths);
                        assert_eq!(bits(&got[k]), bits(&want), "{what}: market {k}");
                    }
                }
            }
        }
    }
}

#[test]
fn f32_kernels_agree_with_the_f64_definition() {
    let paths = 16384;
    for (target, backend) in backends() {
        for case in corpus() {
            let k = kernel(
                target,
                &backend,
                &case.tape,
                Config::plain(Precision::F32, Mode::Reverse),
            )
            .expect("every target has f32");
            let market: Vec<f64> = case.tape.inputs.iter().map(|i| i.value).collect();
            let r = run1(&backend, &k, &market, paths);
            let d = definition::run(&case.tape, &market, SEED, paths, Variates::F32);
            check_against(
                &format!("{} {} f32", backend_name(target), case.name),
                &r,
                &d,
                1e-4,
            );
        }
    }
}

#[test]
fn european_call_and_put_match_black_scholes() {
    let paths = 1 << 20;
    let m = Market::default();
    for product in [Product::EuropeanCall, Product::EuropeanPut] {
        let tape = record(product, &Options::defaults(product), &m).expect("records");
        // The standard errors of the Greeks, from the definition's per-path values.
        let d = definition::run(&tape, &m.values(), SEED, 1 << 16, Variates::F64);
        let se_scale = ((1u64 << 16) as f64 / paths as f64).sqrt();
        let bs = nablac::closed_form::black_scholes(product == Product::EuropeanCall, &m);
        for (target, backend) in backends() {
            let precision = match target {
                Target::Cpu => Precision::F64,
                _ => Precision::F32,
            };
            let k = kernel(
                target,
                &backend,
                &tape,
                Config::plain(precision, Mode::Reverse),
            )
            .expect("compiles");
            let r = run1(&backend, &k, &m.values(), paths);
            let out = &r.outputs[0];
            let what = format!("{} {}", backend_name(target), product.name());
            assert!(
                (out.value - bs.price).abs() <= 4.0 * out.stderr,
                "{what}: price {} vs Black-Scholes {} (se {})",
                out.value,
                bs.price,
                out.stderr
            );
            for (i, (input, g)) in out.greeks.iter().enumerate() {
                let se = d.greeks[0][i].se * se_scale;
                assert!(
                    (g - bs.greeks[i]).abs() <= 4.0 * se,
                    "{what}: d/d{input} {g} vs Black-Scholes {} (se {se})",
                    bs.greeks[i]
                );
            }
        }
    }
}

/// Every product's Greeks (reverse kernel) against central differences of its price kernel at
/// input ± h with the same seed (the same draws), in f64 where the target has it. The bump is
/// small (h = 1e-7 of the input) so that no path's payoff kink falls inside it at this seed (one
/// that did would add up to ~1/paths), and the difference is still exact to ~1e-9; the
/// tolerance, 1e-6, is taken against the value's scale for a near-zero Greek.
#[test]
fn greeks_match_bump_and_revalue() {
    let paths = 20_000;
    let m = Market::default();
    let x = m.values();
    let mut products = Vec::new();
    for p in Product::ALL {
        let mut o = Options::defaults(p);
        o.steps = o.steps.min(12);
        products.push((p, record(p, &o, &m).expect("records")));
    }
    for (target, backend) in backends() {
        if target == Target::Glsl {
            // No f64 transcendentals in GLSL: its f32 Greeks are checked against the f64
            // definition (which these bumps check on the other backends) instead.
            eprintln!("vulkan: bump-and-revalue needs f64; covered by f32_kernels_agree_with_the_f64_definition");
            continue;
        }
        for (p, tape) in &products {
            let what = format!("{} {}", backend_name(target), p.name());
            let price = kernel(
                target,
                &backend,
                tape,
                Config::plain(Precision::F64, Mode::Price),
            )
            .expect("compiles");
            let reverse = kernel(
                target,
                &backend,
                tape,
                Config::plain(Precision::F64, Mode::Reverse),
            )
            .expect("compiles");
            let mut markets = vec![x.to_vec()];
            let h: Vec<f64> = x.iter().map(|v| 1e-7 * v.abs().max(0.1)).collect();
            for i in 0..5 {
                for s in [1.0, -1.0] {
                    let mut y = x.to_vec();
                    y[i] += s * h[i];
                    markets.push(y);
                }
            }
            let values: Vec<f64> = run_with(&backend, &price, &markets, paths, None)
                .iter()
                .map(|r| r.outputs[0].value)
                .collect();
            let r = run1(&backend, &reverse, &x, paths);
            let out = &r.outputs[0];
            assert_eq!(
                out.value.to_bits(),
                values[0].to_bits(),
                "{what}: the price and reverse kernels' values"
            );
            for i in 0..5 {
                let fd = (values[1 + 2 * i] - values[2 + 2 * i]) / (2.0 * h[i]);
                let (input, g) = &out.greeks[i];
                let scale = g.abs().max(fd.abs()).max(1e-3 * out.value.abs());
                assert!(
                    (g - fd).abs() <= 1e-6 * scale,
                    "{what}: d/d{input} {g} vs central difference {fd}"
                );
            }
        }
    }
}

/// The acceptance run: 1,000,000 paths of the 252-step Asian call at the reference market,
/// plain equal to checkpointed (16 segments; and scratch where the target has it) bit for bit,
/// the price within 4 standard errors of 5.30003 and delta, vega within 4 of 0.5616 and 22.40.
#[test]
fn asian_252_at_a_million_paths() {
    let paths = 1_000_000;
    let tape = asian(252);
    let market = Market::default().values();
    let d = definition::run(&tape, &market, SEED, 4096, Variates::F64);
    let scale = (4096f64 / paths as f64).sqrt();
    for (target, backend) in backends() {
        let precision = match target {
            Target::Cpu => Precision::F64,
            _ => Precision::F32,
        };
        let plain = kernel(
            target,
            &backend,
            &tape,
            Config::plain(precision, Mode::Reverse),
        )
        .expect("compiles");
        let r = run1(&backend, &plain, &market, paths);
        let what = format!("{} asian252 {}", backend_name(target), precision.name());
        let out = &r.outputs[0];
        eprintln!(
            "{what}: price {:.6} ± {:.6}, delta {:.6}, vega {:.4}",
            out.value, out.stderr, out.greeks[0].1, out.greeks[2].1
        );
        assert!(
            (out.value - 5.30003).abs() <= 4.0 * out.stderr,
            "{what}: price {} (se {})",
            out.value,
            out.stderr
        );
        for (i, want) in [(0, 0.5616), (2, 22.40)] {
            let se = d.greeks[0][i].se * scale;
            let g = out.greeks[i].1;
            assert!(
                (g - want).abs() <= 4.0 * se,
                "{what}: d/d{} {g} vs {want} (se {se})",
                out.greeks[i].0
            );
        }
        if target != Target::Cpu {
            for strategy in [Checkpoint::Registers, Checkpoint::Scratch] {
                let c = Config {
                    precision,
                    mode: Mode::Reverse,
                    strategy,
                    segments: 16,
                };
                let Some(k) = kernel(target, &backend, &tape, c) else {
                    continue;
                };
                assert_eq!(
                    bits(&r),
                    bits(&run1(&backend, &k, &market, paths)),
                    "{what}: {} vs plain",
                    c.label()
                );
            }
        }
    }
}

/// Seed 11264, path 8, draw 0: x0 >> 8 = 2^24 - 1, so the f32 u1 = ((x0 >> 8) + 0.5) * 2^-24
/// rounds to exactly 1 and -2 ln u1 is -0 (found by a search over seeds; one draw in 2^24 does
/// this). The CUDA f32 draw once turned that zero into NaN, which the payoff's max hid in the
/// value and let loose in four of the five Greeks (seen on the H200 at 1M Asian paths).
const EDGE_SEED: u64 = 11264;
const EDGE_PATH: u64 = 8;

/// Seed 15626855, path 0, uniform 0: x0 >> 8 = 2^24 - 1, where a uniform made like the normal's
/// u1 rounds to exactly 1 in f32. The uniform keeps one bit fewer and stays below 1 on every
/// backend, in f32 and f64, so `log(1 - u)` is finite and equals the definition.
#[test]
fn a_uniform_at_the_top_counter_stays_below_one() {
    const SEED: u64 = 15_626_855;
    assert_eq!(
        definition::philox([0, 0, 0, 1], [SEED as u32, 0])[0] >> 8,
        (1 << 24) - 1
    );
    let text = "nablatape 1\n%0 = input x 2.0\n%1 = uniform 0\n%2 = const 1.0\n%3 = sub %2 %1\n\
                %4 = log %3\n%5 = mul %0 %4\noutput y = %5\n";
    let tape = nablac::format::read(text.as_bytes()).expect("reads");
    for (target, backend) in backends() {
        for (precision, variates, rel) in [
            (Precision::F32, Variates::F32, 1e-5),
            (Precision::F64, Variates::F64, 1e-12),
        ] {
            let Some(k) = kernel(
                target,
                &backend,
                &tape,
                Config::plain(precision, Mode::Reverse),
            ) else {
                continue;
            };
            let r = backend
                .run(&k, &[vec![2.0]], 1, SEED, &RunOptions::default())
                .expect("runs")
                .remove(0);
            let d = definition::run(&tape, &[2.0], SEED, 1, variates);
            let what = format!("{} {precision:?} uniform at the top", backend_name(target));
            let o = &r.outputs[0];
            assert!(
                o.value.is_finite() && o.greeks.iter().all(|g| g.1.is_finite()),
                "{what}: {r:?}"
            );
            // One path: no standard error (undefined, NaN), never a made-up 0.
            assert!(o.stderr.is_nan() && o.greek_stderr.iter().all(|s| s.is_nan()));
            assert_eq!(o.non_finite, 0);
            check_against(&what, &r, &d, rel);
        }
    }
}

#[test]
fn a_draw_whose_f32_u1_rounds_to_one_is_zero_not_nan() {
    assert_eq!(
        definition::philox([0, EDGE_PATH as u32, 0, 0], [EDGE_SEED as u32, 0])[0] >> 8,
        (1 << 24) - 1
    );
    assert_eq!(
        definition::normal(EDGE_SEED, EDGE_PATH, 0, Variates::F32),
        0.0
    );
    // y = x * normal 0, and the European call (its payoff's max is where a NaN would hide).
    let text = "nablatape 1\n%0 = input x 1.5\n%1 = normal 0\n%2 = mul %0 %1\noutput y = %2\n";
    let product = nablac::format::read(text.as_bytes()).expect("reads");
    let m = Market::default();
    let european = record(
        Product::EuropeanCall,
        &Options::defaults(Product::EuropeanCall),
        &m,
    )
    .unwrap();
    let paths = 1024;
    for (target, backend) in backends() {
        for (name, tape) in [("x*normal", &product), ("european", &european)] {
            let market: Vec<f64> = tape.inputs.iter().map(|i| i.value).collect();
            let d = definition::run(tape, &market, EDGE_SEED, paths, Variates::F32);
            let k = kernel(
                target,
                &backend,
                tape,
                Config::plain(Precision::F32, Mode::Reverse),
            )
            .expect("compiles");
            let r = backend
                .run(
                    &k,
                    std::slice::from_ref(&market),
                    paths,
                    EDGE_SEED,
                    &RunOptions::default(),
                )
                .expect("runs")
                .remove(0);
            let what = format!("{} {name} f32 at seed {EDGE_SEED}", backend_name(target));
            assert!(
                bits(&r).iter().all(|&b| f64::from_bits(b).is_finite()),
                "{what}: {r:?}"
            );
            check_against(&what, &r, &d, 1e-4);
        }
    }
}

/// Issue 14's finding: vulkan summed 0.0 where cpu and opencl summed -0.0 (Vulkan may drop a
/// zero's sign unless the kernel keeps it), and a run shorter than a workgroup summed +0.0 on
/// every GPU (its padding was +0.0) where the CPU summed -0.0. Now padding is -0.0, the identity:
/// `x * -0.0` sums to -0.0 at every path count on every backend, in price, reverse and forward
/// kernels, and every report has the CPU's bits (the reverse Greek is +0.0: its adjoint starts
/// at 0 and adds -0.0; the forward one -0.0).
#[test]
fn an_all_negative_zero_output_sums_to_negative_zero_everywhere() {
    let text = "nablatape 1\n%0 = input x 1.5\n%1 = const -0.0\n%2 = mul %0 %1\noutput y = %2\n";
    let tape = nablac::format::read(text.as_bytes()).expect("reads");
    let mut cpu = std::collections::BTreeMap::new();
    for (target, backend) in backends() {
        for precision in [Precision::F32, Precision::F64] {
            for mode in [Mode::Price, Mode::Reverse, Mode::Forward] {
                let Some(k) = kernel(target, &backend, &tape, Config::plain(precision, mode))
                else {
                    continue;
                };
                for paths in [1, 2, 3, 100, 128, 129, 2048, 5000] {
                    let r = run1(&backend, &k, &[1.5], paths);
                    let what = format!(
                        "{} {precision:?} {mode:?} {paths} paths",
                        backend_name(target)
                    );
                    let o = &r.outputs[0];
                    assert_eq!(o.value.to_bits(), (-0.0f64).to_bits(), "{what}: {r:?}");
                    assert_eq!(
                        (o.non_finite, o.greeks.len()),
                        (0, usize::from(mode != Mode::Price))
                    );
                    let key = (format!("{precision:?} {mode:?}"), paths);
                    let want = cpu.entry(key).or_insert_with(|| bits(&r));
                    assert_eq!(&bits(&r), want, "{what}: {r:?}");
                }
            }
        }
    }
}

/// Kernels compiled with the tape's loops give the bits of the unrolled kernels, on every
/// backend (and the CPU's LLVM back end), f32 and f64, on time-stepping products and the
/// corpus: price and forward kernels everywhere, reverse kernels (bookmarks and a reverse
/// loop, against the checkpointed kernel) on the GPU targets.
#[test]
fn kernels_with_loops_give_the_bits_of_the_unrolled_ones() {
    let product = |p: Product, steps: u32, assets: u32| {
        let o = Options {
            steps,
            assets,
            ..Options::defaults(p)
        };
        record(p, &o, &Market::default()).expect("records")
    };
    let mut tapes = vec![
        ("asian252".to_string(), asian(252)),
        ("asian64".into(), asian(64)),
        ("barrier52".into(), product(Product::Barrier, 52, 3)),
        ("basket8x16".into(), product(Product::Basket, 16, 8)),
    ];
    tapes.extend(
        corpus()
            .into_iter()
            .map(|c| (c.name, c.tape.tape().clone())),
    );
    // Kernels that shrank with loops, and the backends run (at least the three products' f32
    // kernels in both modes shrink on each).
    let (mut looped, mut opened) = (0, 0);
    for (target, backend) in backends() {
        opened += 1;
        let mut cpu_backends = vec![nablac::compile::CpuBackend::Cranelift];
        if target == Target::Cpu && cfg!(feature = "llvm") {
            cpu_backends.push(nablac::compile::CpuBackend::Llvm);
        }
        for cpu_backend in cpu_backends {
            for (name, tape) in &tapes {
                let v = nablac::verify::verify(tape.clone()).expect("valid");
                let market: Vec<f64> = tape.inputs.iter().map(|i| i.value).collect();
                // (Reverse kernels loop on the GPU targets only: `CompileOptions::reverse_loops`;
                // clif::tests holds the CPU lowerings of reverse loops to the same bits. The
                // 64-step Asian stands for the 252-step one there, and on PoCL in every mode:
                // PoCL's LLVM takes minutes over the unrolled checkpointed kernel, and was still
                // compiling the unrolled f64 forward kernel (191 KB) after 40 minutes on
                // 2026-12-08, where the f32 one took seconds. The GPU machine's drivers run it.)
                if name == "asian252" && is_pocl(&backend) {
                    continue;
                }
                let reverse = target != Target::Cpu && name != "asian252";
                for (mode, precision) in [Mode::Price, Mode::Forward, Mode::Reverse]
                    .into_iter()
                    .filter(|&m| m != Mode::Reverse || reverse)
                    .flat_map(|m| [(m, Precision::F32), (m, Precision::F64)])
                {
                    let what = format!(
                        "{} {} {name} {} {}",
                        backend_name(target),
                        cpu_backend.name(),
                        mode.name(),
                        precision.name()
                    );
                    let k = |loops: bool| {
                        let o = CompileOptions {
                            mode,
                            precision,
                            cpu_backend,
                            loops,
                            ..CompileOptions::new(target)
                        };
                        match compile(&v, &o) {
                            Ok(k) => Some(k),
                            Err(nablac::compile::CompileError::Emit(EmitError::Unsupported {
                                ..
                            })) if target == Target::Glsl && precision == Precision::F64 => None,
                            Err(e) => panic!("{what}: compile: {e}"),
                        }
                    };
                    let (Some(plain), Some(rolled)) = (k(false), k(true)) else {
                        continue;
                    };
                    if rolled.source.len() < plain.source.len() {
                        looped += 1;
                    }
                    let load = |k: &nablac::compile::Compiled| {
                        backend
                            .load(&k.source, &k.manifest)
                            .unwrap_or_else(|e| panic!("{what}: load: {e}"))
                    };
                    let want = bits(&run1(&backend, &load(&plain), &market, 2048 + 77));
                    let got = bits(&run1(&backend, &load(&rolled), &market, 2048 + 77));
                    assert_eq!(want, got, "{what}: loops vs unrolled");
                }
            }
        }
    }
    assert!(
        looped >= 6 * opened,
        "the products compile as loops ({looped} kernels shrank on {opened} backends)"
    );
}

/// A long unrolled CPU kernel runs even from a thread with a small stack (a test thread has
/// 2 MiB): the kernel's frame, past 2 MiB for the 10,000-step Asian's reverse kernel on
/// Cranelift, is on the runtime's own worker thread. Before that thread, a one-thread run used
/// the caller's stack and overflowed a small one, and two threads overflowed their 2 MiB.
#[test]
fn a_long_cpu_kernel_runs_whatever_the_caller_s_stack() {
    let o = Options {
        steps: 10_000,
        ..Options::defaults(Product::AsianCall)
    };
    let v = nablac::verify::verify(record(Product::AsianCall, &o, &Market::default()).unwrap())
        .expect("valid");
    let o = CompileOptions {
        mode: Mode::Reverse,
        precision: Precision::F64,
        cpu_backend: nablac::compile::CpuBackend::Cranelift,
        ..CompileOptions::new(Target::Cpu)
    };
    let k = compile(&v, &o).expect("compiles");
    let backend = Backend::open(Target::Cpu).expect("cpu");
    let loaded = backend.load(&k.source, &k.manifest).expect("loads");
    let market: Vec<f64> = v.inputs.iter().map(|i| i.value).collect();
    let r = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            let opts = RunOptions {
                threads: Some(1),
                ..RunOptions::default()
            };
            backend.run(&loaded, &[market], 8, SEED, &opts)
        })
        .unwrap()
        .join()
        .expect("no overflow")
        .expect("runs");
    assert!(r[0].outputs[0].value.is_finite() && r[0].outputs[0].value > 0.0);
}

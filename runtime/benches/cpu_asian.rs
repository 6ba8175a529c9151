//! The 252-step arithmetic Asian call (`nablac record asian --steps 252`), draws generated in the
//! kernel, on the CPU: price and value + 5 Greeks (reverse mode), f64 and f32, one thread and
//! all threads, the Cranelift back end and (feature `llvm`) the LLVM one, beside a hand-written
//! Rust loop of the same case (price and pathwise tangents, the same Philox and Box–Muller) as
//! the in-repo baseline; and, one thread and f64, the price and forward kernels with their steps
//! as loops (the default) beside the unrolled ones (`--unroll`), for each back end. Throughput is
//! in paths (criterion's elements/s).
//!
//! `cargo bench -p nablac-runtime --features llvm --bench cpu_asian` (BENCHMARKS.md).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use nablac::compile::{compile, CompileOptions, CpuBackend};
use nablac::products::{record, Market, Options, Product};
use nablac_abi::philox::{box_muller_f64, draw_block, uniforms_f64};
use nablac_runtime::{cpu, Backend, Mode, Precision, RunOptions, Target};
use std::hint::black_box;

const STEPS: u32 = 252;
/// Paths per one-thread call (a multiple of every SIMD width).
const BLOCK: u64 = 2048;
/// Paths per all-threads run.
const RUN: u64 = 32768;

fn kernel(
    backend: CpuBackend,
    mode: Mode,
    precision: Precision,
    loops: bool,
) -> (String, nablac::emit::Manifest) {
    let o = Options {
        steps: STEPS,
        ..Options::defaults(Product::AsianCall)
    };
    let tape = record(Product::AsianCall, &o, &Market::default()).expect("the Asian records");
    let tape = nablac::verify::verify(tape).expect("a recorded tape verifies");
    let k = compile(
        &tape,
        &CompileOptions {
            mode,
            precision,
            cpu_backend: backend,
            loops,
            ..CompileOptions::new(Target::Cpu)
        },
    )
    .expect("the Asian compiles");
    (k.source, k.manifest)
}

/// Benchmarks one kernel on the calling thread: `BLOCK` paths a call, each call the next block.
fn one_thread(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    id: BenchmarkId,
    source: &str,
    manifest: &nablac::emit::Manifest,
    market: &[f64],
) {
    let c = cpu::load(source, manifest).expect("the kernel loads");
    let mut out = vec![0.0; BLOCK as usize * c.row_len()];
    let mut first = 0u64;
    g.bench_function(id, |b| {
        b.iter(|| {
            c.run(market, 42, first, &mut out).expect("the kernel runs");
            first += BLOCK;
            black_box(out[0])
        })
    });
}

fn backends() -> Vec<CpuBackend> {
    let mut b = vec![CpuBackend::Cranelift];
    if cfg!(feature = "llvm") {
        b.push(CpuBackend::Llvm);
    }
    b
}

fn kernels(c: &mut Criterion) {
    let market = Market::default().values().to_vec();
    for threads in [1usize, 0] {
        let mut g = c.benchmark_group(if threads == 1 {
            "asian252/1 thread"
        } else {
            "asian252/all threads"
        });
        g.sample_size(10);
        let paths = if threads == 1 { BLOCK } else { RUN };
        g.throughput(Throughput::Elements(paths));
        for backend in backends() {
            for precision in [Precision::F64, Precision::F32] {
                for mode in [Mode::Price, Mode::Reverse] {
                    let (source, manifest) = kernel(backend, mode, precision, true);
                    let id = BenchmarkId::new(
                        format!("{}/{}", backend.name(), precision.name()),
                        if mode == Mode::Price {
                            "price"
                        } else {
                            "value+5 greeks"
                        },
                    );
                    if threads == 1 {
                        one_thread(&mut g, id, &source, &manifest, &market);
                    } else {
                        let be = Backend::open(Target::Cpu).expect("the CPU backend opens");
                        let k = be.load(&source, &manifest).expect("the kernel loads");
                        let opts = RunOptions::default();
                        g.bench_function(id, |b| {
                            b.iter(|| {
                                black_box(
                                    be.run(&k, std::slice::from_ref(&market), paths, 42, &opts)
                                        .expect("the run"),
                                )
                            })
                        });
                    }
                }
            }
        }
        g.finish();
    }
}

/// One path of the Asian by hand: the value and, with `greeks`, its pathwise derivatives by
/// (spot, strike, vol, rate, maturity), every step's exp and draw as the kernels make them.
#[inline(always)]
fn hand_path(m: &[f64; 5], seed: u64, path: u64, greeks: bool, out: &mut [f64; 6]) {
    let [spot, strike, vol, rate, maturity] = *m;
    let n = f64::from(STEPS);
    let dt = maturity / n;
    let mu = rate - 0.5 * vol * vol;
    let drift = mu * dt;
    let sq = dt.sqrt();
    let vsq = vol * sq;
    // d drift, d vsq by (spot, strike, vol, rate, maturity)
    let dd = [0.0, 0.0, -vol * dt, dt, mu / n];
    let dv = [0.0, 0.0, sq, 0.0, 0.5 * vol / (sq * n)];
    let (mut s, mut sum) = (spot, 0.0);
    let mut ds = [1.0, 0.0, 0.0, 0.0, 0.0];
    let mut dsum = [0.0; 5];
    for k in 0..STEPS {
        let (u1, u2) = uniforms_f64(draw_block(seed, path, k, 0));
        let z = box_muller_f64(u1, u2);
        let e = (drift + vsq * z).exp();
        if greeks {
            for i in 0..5 {
                ds[i] = ds[i] * e + s * e * (dd[i] + dv[i] * z);
                dsum[i] += ds[i];
            }
        }
        s *= e;
        sum += s;
    }
    let disc = (-rate * maturity).exp();
    let x = sum / n - strike;
    out[0] = x.max(0.0) * disc;
    if greeks {
        let ddisc = [0.0, 0.0, 0.0, -maturity * disc, -rate * disc];
        let dk = [0.0, 1.0, 0.0, 0.0, 0.0];
        for i in 0..5 {
            out[1 + i] = if x >= 0.0 {
                (dsum[i] / n - dk[i]) * disc + x * ddisc[i]
            } else {
                0.0
            };
        }
    }
}

fn hand_loop(c: &mut Criterion) {
    let m = Market::default().values();
    let mut g = c.benchmark_group("asian252/1 thread");
    g.sample_size(10);
    g.throughput(Throughput::Elements(BLOCK));
    for greeks in [false, true] {
        let id = BenchmarkId::new(
            "hand-written rust/f64",
            if greeks { "value+5 greeks" } else { "price" },
        );
        let mut first = 0u64;
        g.bench_function(id, |b| {
            b.iter(|| {
                let mut acc = [0.0; 6];
                let mut row = [0.0; 6];
                for p in first..first + BLOCK {
                    hand_path(&m, 42, p, greeks, &mut row);
                    for (a, r) in acc.iter_mut().zip(&row) {
                        *a += r;
                    }
                }
                first += BLOCK;
                black_box(acc)
            })
        });
    }
    g.finish();
}

/// The rerolled kernels against the unrolled ones (issue 27: CPU throughput no worse), one
/// thread, f64: price and value + 5 Greeks in forward mode (the mode whose kernel loops on the
/// CPU; the CPU's reverse kernel stays unrolled).
fn loops_against_unrolled(c: &mut Criterion) {
    let market = Market::default().values().to_vec();
    let mut g = c.benchmark_group("asian252/loops vs unrolled");
    g.sample_size(10);
    g.throughput(Throughput::Elements(BLOCK));
    for backend in backends() {
        for mode in [Mode::Price, Mode::Forward] {
            for loops in [false, true] {
                let (source, manifest) = kernel(backend, mode, Precision::F64, loops);
                let id = BenchmarkId::new(
                    format!(
                        "{}/{}",
                        backend.name(),
                        if loops { "loops" } else { "unrolled" }
                    ),
                    if mode == Mode::Price {
                        "price"
                    } else {
                        "forward"
                    },
                );
                one_thread(&mut g, id, &source, &manifest, &market);
            }
        }
    }
    g.finish();
}

criterion_group!(benches, hand_loop, kernels, loops_against_unrolled);
criterion_main!(benches);

//! The CPU backend on kernels the compiler emits (built here through `nablac::compile`, as a user
//! would with `nablac --target cpu`): bit-identical reports whatever the threads and chunks, equal
//! to the fixed-order sums of the per-path leaves, and errors that name the problem.

use nablac::compile::{compile, CompileOptions};
use nablac::products::{record, Market, Options, Product};
use nablac_runtime::report::tree_sum;
use nablac_runtime::{
    cpu, Backend, LoadedKernel, Manifest, Mode, Precision, Progress, Report, RunOptions, Target,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// The kernel `name` (`asian<steps>_<mode>_<precision>`: the Asian call at rate 0.05) as CLIF text
/// and its manifest, read back from its JSON form as a host reads `KERNEL.json`.
fn fixture(name: &str) -> (String, Manifest) {
    let (steps, mode, precision) = match name {
        "asian16_reverse_f64" => (16, Mode::Reverse, Precision::F64),
        "asian16_reverse_f32" => (16, Mode::Reverse, Precision::F32),
        other => panic!("no kernel {other}"),
    };
    let o = Options {
        steps,
        ..Options::defaults(Product::AsianCall)
    };
    let market = Market {
        rate: 0.05,
        ..Market::default()
    };
    let tape = nablac::verify::verify(record(Product::AsianCall, &o, &market).unwrap()).unwrap();
    let k = compile(
        &tape,
        &CompileOptions {
            mode,
            precision,
            ..CompileOptions::new(Target::Cpu)
        },
    )
    .unwrap();
    let json = serde_json::to_string_pretty(&k.manifest).unwrap();
    (k.source, serde_json::from_str(&json).unwrap())
}

fn load(name: &str) -> (Backend, LoadedKernel) {
    let (src, m) = fixture(name);
    let b = Backend::open(Target::Cpu).unwrap();
    let k = b.load(&src, &m).unwrap();
    (b, k)
}

fn bits(r: &[Report]) -> Vec<u64> {
    r.iter()
        .flat_map(|r| r.outputs.iter())
        .flat_map(|o| {
            [o.value.to_bits(), o.stderr.to_bits(), o.non_finite]
                .into_iter()
                .chain(o.greeks.iter().map(|g| g.1.to_bits()))
                .chain(o.greek_stderr.iter().map(|g| g.to_bits()))
        })
        .collect()
}

fn run(
    b: &Backend,
    k: &LoadedKernel,
    paths: u64,
    threads: Option<usize>,
    chunk: Option<u64>,
) -> Vec<Report> {
    let opts = RunOptions {
        threads,
        chunk_paths: chunk,
        progress: None,
    };
    b.run(k, &[k.default_market()], paths, 42, &opts).unwrap()
}

#[test]
fn threads_and_chunks_never_change_a_bit() {
    let (b, k) = load("asian16_reverse_f64");
    let paths = 5000; // not a multiple of 1024: the last chunk is ragged
    let want = bits(&run(&b, &k, paths, Some(1), Some(1024)));
    assert_eq!(want.len(), 13);
    for (threads, chunk) in [
        (Some(1), None),
        (Some(2), Some(1024)),
        (Some(3), Some(1024)),
        (Some(3), Some(2048)),
        (Some(2), Some(3072)),
        (None, None),
        (Some(8), Some(8192)),
    ] {
        assert_eq!(
            bits(&run(&b, &k, paths, threads, chunk)),
            want,
            "threads {threads:?} chunk {chunk:?}"
        );
    }
    // Two runs, same bits; another seed, other bits.
    assert_eq!(bits(&run(&b, &k, paths, Some(3), None)), want);
    let other = b
        .run(&k, &[k.default_market()], paths, 43, &RunOptions::default())
        .unwrap();
    assert_ne!(bits(&other), want);
}

#[test]
fn the_report_is_the_fixed_order_sum_of_the_leaves() {
    let (src, m) = fixture("asian16_reverse_f64");
    let c = cpu::load(&src, &m).unwrap();
    let paths = 3000u64;
    let row = c.row_len();
    let mut out = vec![0.0; paths as usize * row];
    let (b, k) = load("asian16_reverse_f64");
    // The shifts are path 0's value and Greeks; the kernel takes its squares about them.
    let shifts = b
        .shifts(&k, &m.input_defaults, 42, &RunOptions::default())
        .unwrap();
    assert_eq!(shifts.len(), 6);
    let mut path0 = vec![0.0; row];
    c.run(&m.input_defaults, 42, 0, &mut path0).unwrap();
    assert_eq!(shifts[0], path0[0]);
    assert_eq!(shifts[1..], path0[2..7]);
    let inputs: Vec<f64> = m.input_defaults.iter().chain(&shifts).copied().collect();
    c.run(&inputs, 42, 0, &mut out).unwrap();
    let col = |j: usize| tree_sum(&out.iter().skip(j).step_by(row).copied().collect::<Vec<_>>());
    let n = paths as f64;
    assert_eq!(col(12), 0.0); // no non-finite path
    let r = &run(&b, &k, paths, Some(2), Some(1024))[0].outputs[0];
    assert_eq!(r.name, "price");
    assert_eq!(r.value.to_bits(), (col(0) / n).to_bits());
    let se = nablac_runtime::report::standard_error(paths, col(0), col(1), shifts[0]);
    assert_eq!(r.stderr.to_bits(), se.to_bits());
    let names: Vec<&str> = r.greeks.iter().map(|g| g.0.as_str()).collect();
    assert_eq!(names, ["spot", "strike", "vol", "rate", "maturity"]);
    for (i, g) in r.greeks.iter().enumerate() {
        assert_eq!(g.1.to_bits(), (col(2 + i) / n).to_bits(), "greek {}", g.0);
        let se =
            nablac_runtime::report::standard_error(paths, col(2 + i), col(7 + i), shifts[1 + i]);
        assert_eq!(r.greek_stderr[i].to_bits(), se.to_bits(), "greek {}", g.0);
    }
    // And the numbers are an Asian call's: price ~ 5.8, delta ~ 0.6, d/dstrike ~ -0.5, vega > 0.
    assert!((r.value - 5.8).abs() < 0.6, "{}", r.value);
    assert!(
        r.greeks[0].1 > 0.45 && r.greeks[0].1 < 0.75,
        "{:?}",
        r.greeks
    );
    assert!(
        r.greeks[1].1 < -0.4 && r.greeks[1].1 > -0.7,
        "{:?}",
        r.greeks
    );
    assert!(r.greeks[2].1 > 5.0, "{:?}", r.greeks);
}

#[test]
fn markets_are_independent_runs() {
    let (b, k) = load("asian16_reverse_f64");
    let base = k.default_market();
    let mut bumped = base.clone();
    bumped[0] = 110.0;
    let both = b
        .run(
            &k,
            &[base.clone(), bumped.clone()],
            2048,
            7,
            &RunOptions::default(),
        )
        .unwrap();
    let one = b
        .run(&k, &[bumped], 2048, 7, &RunOptions::default())
        .unwrap();
    assert_eq!(both.len(), 2);
    assert_eq!(bits(&both[1..]), bits(&one));
    assert!(both[1].outputs[0].value > both[0].outputs[0].value);
    assert!(b
        .run(&k, &[], 2048, 7, &RunOptions::default())
        .unwrap()
        .is_empty());
}

#[test]
fn f32_agrees_with_f64_statistically() {
    let (b, k64) = load("asian16_reverse_f64");
    let (_, k32) = load("asian16_reverse_f32");
    let r64 = &run(&b, &k64, 8192, None, None)[0].outputs[0];
    let r32 = &run(&b, &k32, 8192, None, None)[0].outputs[0];
    // Different draws (f32 reads other bits), so compare within the standard errors.
    assert!(
        (r64.value - r32.value).abs() < 5.0 * (r64.stderr + r32.stderr),
        "{r64:?} {r32:?}"
    );
    assert_eq!(
        bits(&run(&b, &k32, 3000, Some(1), None)),
        bits(&run(&b, &k32, 3000, Some(3), Some(1024)))
    );
}

#[test]
fn progress_reaches_the_end() {
    let (b, k) = load("asian16_reverse_f64");
    let calls = AtomicU64::new(0);
    let seen = Mutex::new(Vec::new());
    let cb = |p: Progress| {
        calls.fetch_add(1, Ordering::Relaxed);
        seen.lock().unwrap().push(p);
    };
    let opts = RunOptions {
        threads: Some(2),
        chunk_paths: Some(1024),
        progress: Some(&cb),
    };
    b.run(
        &k,
        &[k.default_market(), k.default_market()],
        4500,
        1,
        &opts,
    )
    .unwrap();
    assert_eq!(calls.load(Ordering::Relaxed), 10); // 5 chunks per market
    let seen = seen.into_inner().unwrap();
    for m in 0..2 {
        let max = seen.iter().filter(|p| p.market == m).map(|p| p.done).max();
        assert_eq!(max, Some(4500));
    }
    assert!(seen
        .iter()
        .all(|p| p.markets == 2 && p.paths == 4500 && p.done <= 4500));
}

#[test]
fn errors_name_the_problem() {
    let (b, k) = load("asian16_reverse_f64");
    let o = RunOptions::default();
    let e = b.run(&k, &[vec![1.0; 3]], 100, 1, &o).unwrap_err();
    assert_eq!(e.to_string(), "market 0: 3 values for 5 inputs");
    assert_eq!(
        b.run(&k, &[k.default_market()], 0, 1, &o)
            .unwrap_err()
            .to_string(),
        "sums: a run needs at least one path"
    );
    let bad = RunOptions {
        chunk_paths: Some(1000),
        ..o
    };
    assert!(b
        .run(&k, &[k.default_market()], 100, 1, &bad)
        .unwrap_err()
        .to_string()
        .contains("multiple of 1024"));
    let zero = RunOptions {
        threads: Some(0),
        ..o
    };
    assert!(b.run(&k, &[k.default_market()], 100, 1, &zero).is_err());
    // Without a driver (CI), opening a GPU backend is a clean error that names what is missing.
    if let Err(e) = Backend::open(Target::Cuda) {
        assert!(
            e.to_string().contains("CUDA") || e.to_string().contains("NVRTC"),
            "{e}"
        );
    }
    let (src, m) = fixture("asian16_reverse_f64");
    // A manifest from a newer nablac is refused by name.
    let mut newer = m.clone();
    newer.manifest_version = nablac_runtime::manifest::MANIFEST_VERSION + 1;
    let want = format!("version {}", newer.manifest_version);
    assert!(b
        .load(&src, &newer)
        .unwrap_err()
        .to_string()
        .contains(&want));
    let mut gl = m.clone();
    gl.target = Target::Glsl;
    assert!(b
        .load(&src, &gl)
        .unwrap_err()
        .to_string()
        .contains("target glsl"));
    let mut renamed = m.clone();
    renamed.entry_point = "other".into();
    assert!(b
        .load(&src, &renamed)
        .unwrap_err()
        .to_string()
        .contains("do not belong together"));
    renamed.seal(&src);
    assert!(b
        .load(&src, &renamed)
        .unwrap_err()
        .to_string()
        .contains("entry point"));
    // A kernel's run checks its buffers.
    let c = cpu::load(&src, &m).unwrap();
    assert!(c.run(&m.input_defaults, 1, 0, &mut [0.0; 8]).is_err());
    assert!(c.run(&[1.0], 1, 0, &mut [0.0; 7]).is_err());
    c.run(&m.input_defaults, 1, 0, &mut []).unwrap();
}

#[test]
fn a_path_index_past_2_pow_32_is_carried() {
    // Paths beyond 2^32 use the counter's high word: a kernel call at first_path = 2^32 + j differs
    // from first_path = j, and equals itself however it is split.
    let (src, m) = fixture("asian16_reverse_f64");
    let c = cpu::load(&src, &m).unwrap();
    let row = c.row_len();
    let mut lo = vec![0.0; 4 * row];
    let mut hi = vec![0.0; 4 * row];
    c.run(&m.input_defaults, 5, 2, &mut lo).unwrap();
    c.run(&m.input_defaults, 5, (1 << 32) + 2, &mut hi).unwrap();
    assert_ne!(lo, hi);
    let mut split = vec![0.0; 4 * row];
    c.run(&m.input_defaults, 5, (1 << 32) + 2, &mut split[..row])
        .unwrap();
    c.run(&m.input_defaults, 5, (1 << 32) + 3, &mut split[row..])
        .unwrap();
    assert_eq!(split, hi);
}

/// Issue 14, point 1: a kernel and its manifest are checked against each other before any driver
/// sees them. Found before: a kernel run with another kernel's manifest corrupted the heap; a
/// manifest edited after compiling (precision, workgroup) ran anyway with a wrong price.
#[test]
fn a_kernel_runs_only_with_its_own_manifest() {
    let b = Backend::open(Target::Cpu).unwrap();
    let (src, m) = fixture("asian16_reverse_f64");
    let (src32, m32) = fixture("asian16_reverse_f32");
    b.load(&src, &m)
        .expect("a kernel and its own manifest load");
    let refused = |src: &str, m: &Manifest, why: &str| {
        let e = b.load(src, m).expect_err(why).to_string();
        assert!(e.contains(why), "{e}");
    };
    // Swapped pairs, an edited source, an edited manifest field.
    refused(&src, &m32, "do not belong together");
    refused(&src32, &m, "do not belong together");
    refused(&format!("{src}\n; edited"), &m, "do not belong together");
    let mut edited = m.clone();
    edited.precision = Precision::F32;
    refused(&src, &edited, "do not belong together");
    let mut edited = m.clone();
    edited.sums.pop();
    refused(&src, &edited, "do not belong together");
    // Empty or binary sources never reach a driver.
    refused("", &m, "empty");
    refused("  \n", &m, "empty");
    refused("abc\0def", &m, "not text");
    // Driver options are the compiler's, not the file's, even in a consistent pair.
    let mut opts = m.clone();
    opts.compile_options = vec!["-O0".into()];
    opts.seal(&src);
    refused(&src, &opts, "compile_options");
}

/// A tape of `n` inputs and one output, `z * (x_0 + ... + x_{n-1})` (scripts/wide-tape.py's shape):
/// its reverse kernel writes 2n + 3 sums a path.
fn wide_kernel(n: usize) -> (String, Manifest) {
    let mut text = String::from("nablatape 1\n");
    for i in 0..n {
        text += &format!("%{i} = input x{i} 1.0\n");
    }
    text += &format!("%{n} = normal 0\n%{} = mul %0 %{n}\n", n + 1);
    let (mut acc, mut k) = (n + 1, n + 2);
    for i in 1..n {
        text += &format!("%{k} = mul %{i} %{n}\n%{} = add %{acc} %{k}\n", k + 1);
        acc = k + 1;
        k += 2;
    }
    text += &format!("output y = %{acc}\n");
    let tape = nablac::verify::verify(nablac::format::read(text.as_bytes()).unwrap()).unwrap();
    let opts = CompileOptions {
        mode: Mode::Reverse,
        precision: Precision::F64,
        ..CompileOptions::new(Target::Cpu)
    };
    let k = compile(&tape, &opts).unwrap();
    (k.source, k.manifest)
}

/// A tape so wide that a chunk's leaves would pass the CPU's per-thread bound runs in pieces of
/// a chunk; the report keeps the bits of the fixed-order sums of all the leaves, whatever the
/// threads and chunks.
#[test]
fn a_wide_tape_runs_in_pieces_with_the_same_bits() {
    let (src, m) = wide_kernel(700);
    let c = cpu::load(&src, &m).unwrap();
    let row = c.row_len();
    assert_eq!(row, 2 * 700 + 3);
    // 8 MiB of leaves a thread: 747 rows of 1,403 f64s, so a 1024-path chunk runs as 512 + 512.
    assert!(row * 8 * 1024 > 8 << 20);
    let b = Backend::open(Target::Cpu).unwrap();
    let k = b.load(&src, &m).unwrap();
    let paths = 2500u64;
    let shifts = b
        .shifts(&k, &m.input_defaults, 42, &RunOptions::default())
        .unwrap();
    let inputs: Vec<f64> = m.input_defaults.iter().chain(&shifts).copied().collect();
    let mut out = vec![0.0; paths as usize * row];
    c.run(&inputs, 42, 0, &mut out).unwrap();
    let col = |j: usize| tree_sum(&out.iter().skip(j).step_by(row).copied().collect::<Vec<_>>());
    let n = paths as f64;
    let want = run(&b, &k, paths, Some(1), Some(1024));
    let o = &want[0].outputs[0];
    assert_eq!(o.value.to_bits(), (col(0) / n).to_bits());
    assert_eq!(o.greeks.len(), 700);
    for (i, g) in o.greeks.iter().enumerate() {
        assert_eq!(g.1.to_bits(), (col(2 + i) / n).to_bits(), "greek {}", g.0);
    }
    // d value / d x_i is the mean draw for every i: about 0, within a few standard errors.
    assert!(o.greeks[0].1.abs() < 5.0 / n.sqrt(), "{}", o.greeks[0].1);
    for (threads, chunk) in [
        (Some(2), Some(1024)),
        (Some(2), None),
        (Some(3), Some(2048)),
    ] {
        assert_eq!(
            bits(&run(&b, &k, paths, threads, chunk)),
            bits(&want),
            "threads {threads:?} chunk {chunk:?}"
        );
    }
}

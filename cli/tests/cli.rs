//! The `nablac` binary end to end: record → inspect → explain → compile → run, and bad input
//! refused with exit status 1, a message naming the problem and the place, and nothing written.

use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn nablac(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nablac"))
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("nablac runs")
}

/// Runs nablac with `stdin` on its standard input.
fn nablac_in(args: &[&str], dir: &Path, stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_nablac"))
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("nablac runs");
    let mut pipe = child.stdin.take().unwrap();
    // A command that fails early may close its end first: a broken pipe here is not the test's.
    let _ = pipe.write_all(stdin);
    drop(pipe);
    child.wait_with_output().expect("nablac ends")
}

/// Standard output of a successful `nablac_in`.
fn ok_in(args: &[&str], dir: &Path, stdin: &[u8]) -> Output {
    let out = nablac_in(args, dir, stdin);
    assert!(
        out.status.success(),
        "nablac {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs nablac, asserts success, returns stdout.
fn ok(args: &[&str], dir: &Path) -> String {
    let out = nablac(args, dir);
    assert!(
        out.status.success(),
        "nablac {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 stdout")
}

/// Runs nablac, asserts exit status `code`, returns stderr.
fn fails(args: &[&str], dir: &Path, code: i32) -> String {
    let out = nablac(args, dir);
    assert_eq!(
        out.status.code(),
        Some(code),
        "nablac {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty(), "nothing on stdout when failing");
    String::from_utf8(out.stderr).expect("utf-8 stderr")
}

/// A fresh scratch directory per test (removed first if a previous run left it).
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nablac-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn record_then_inspect_the_252_step_asian() {
    let d = scratch("inspect");
    ok(&["record", "asian", "--steps", "252", "-o", "a.bin"], &d);
    let j: Value = serde_json::from_str(&ok(&["inspect", "a.bin", "--json"], &d)).unwrap();
    assert_eq!(j["nodes"], 1536);
    assert_eq!(
        j["inputs"],
        serde_json::json!(["spot", "strike", "vol", "rate", "maturity"])
    );
    assert_eq!(j["outputs"], serde_json::json!(["price"]));
    assert_eq!(j["draws"], 252);
    assert_eq!(j["ops"]["normal"], 252);
    assert_eq!(j["ops"]["exp"], 253);
    assert_eq!(
        j["max_live"], 766,
        "a plain adjoint kernel of the Asian keeps 766 values"
    );
    assert_eq!(j["hash"].as_str().unwrap().len(), 64);
    // One step recorded 252 times: one loop of 252 iterations carrying the spot and the sum.
    assert_eq!(
        j["loops"],
        serde_json::json!([{"start": 15, "end": 1527, "period": 6, "iterations": 252,
            "carried": [19, 20], "draws_per_iteration": 1}])
    );
    let text = ok(&["inspect", "a.bin"], &d);
    assert!(
        text.contains(
            "loop      %15..%1527: 252 iterations of 6 nodes, 1 draws each, carrying %19 %20 (2)"
        ),
        "{text}"
    );
    // The same tape recorded as text has the same content hash, and the examples/ copies are it.
    ok(&["record", "asian", "--steps", "252", "-o", "a.ntape"], &d);
    let t: Value = serde_json::from_str(&ok(&["inspect", "a.ntape", "--json"], &d)).unwrap();
    assert_eq!(t, j);
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    assert_eq!(
        std::fs::read(d.join("a.bin")).unwrap(),
        std::fs::read(examples.join("asian252.bin")).unwrap()
    );
    assert_eq!(
        std::fs::read(d.join("a.ntape")).unwrap(),
        std::fs::read(examples.join("asian252.ntape")).unwrap()
    );
}

#[test]
fn market_overrides_are_recorded_and_checked() {
    let d = scratch("market");
    ok(
        &[
            "record", "european", "--market", "spot=105", "--market", "vol=0.25", "-o", "e.ntape",
        ],
        &d,
    );
    let text = std::fs::read_to_string(d.join("e.ntape")).unwrap();
    assert!(text.contains("input spot 105"), "{text}");
    assert!(text.contains("input vol 0.25"), "{text}");
    let e = fails(
        &["record", "european", "--market", "spo=1", "-o", "x.bin"],
        &d,
        1,
    );
    assert!(e.contains("spo"), "{e}");
    let e = fails(
        &["record", "european", "--market", "spot=abc", "-o", "x.bin"],
        &d,
        1,
    );
    assert!(e.contains("'abc' is not a number"), "{e}");
    let e = fails(&["record", "asian", "--steps", "0", "-o", "x.bin"], &d, 1);
    assert!(e.contains("steps"), "{e}");
    let e = fails(&["record", "asian", "-o", "x.txt"], &d, 1);
    assert!(e.contains("FILE.bin") && e.contains("FILE.ntape"), "{e}");
    assert_eq!(files_in(&d), ["e.ntape"], "failed records write nothing");
}

#[test]
fn malformed_tapes_are_refused_with_the_place_and_nothing_written() {
    let d = scratch("malformed");
    ok(&["record", "asian", "--steps", "4", "-o", "a.bin"], &d);
    let good = std::fs::read(d.join("a.bin")).unwrap();
    // Truncated binary: the byte offset where the data ran out.
    std::fs::write(d.join("short.bin"), &good[..100]).unwrap();
    // A header claiming 4,000,000,000 nodes in a 40-byte file: refused without allocating them.
    let mut huge = good[..32].to_vec();
    for field in [8usize, 12, 16] {
        huge[field..field + 4].copy_from_slice(&0u32.to_le_bytes());
    }
    huge[20..24].copy_from_slice(&4_000_000_000u32.to_le_bytes());
    huge.extend_from_slice(&[0; 8]);
    std::fs::write(d.join("huge.bin"), &huge).unwrap();
    // Text: a forward reference, at its line and column.
    std::fs::write(
        d.join("fwd.ntape"),
        "nablatape 1\n%0 = input x 1.0\n%1 = add %0 %2\noutput y = %1\n",
    )
    .unwrap();
    std::fs::write(d.join("junk.bin"), b"hello, world").unwrap();
    let cases = [
        ("short.bin", "short.bin: byte offset"),
        ("huge.bin", "4000000000 nodes"),
        ("fwd.ntape", "fwd.ntape: line 3:"),
        ("junk.bin", "junk.bin"),
    ];
    let before = files_in(&d);
    for (file, needle) in cases {
        for args in [
            vec!["inspect", file],
            vec![file, "--target", "cuda", "-o", "k.cu"],
            vec!["explain", file, "--plot", "p.svg"],
            vec!["run", file, "--paths", "1024"],
        ] {
            let e = fails(&args, &d, 1);
            assert!(
                e.starts_with("error: ") && e.contains(needle),
                "{args:?}: {e}"
            );
        }
    }
    assert_eq!(files_in(&d), before, "nothing written by a refused command");
}

#[test]
fn compile_writes_kernel_and_manifest_for_every_target() {
    let d = scratch("compile");
    ok(&["record", "asian", "--steps", "16", "-o", "a.bin"], &d);
    for (target, file, marker) in [
        ("cuda", "k.cu", "extern \"C\" __global__"),
        ("opencl", "k.cl", "__kernel"),
        ("glsl", "k.comp", "#version 450"),
        ("vulkan", "v.comp", "#version 450"),
        ("cpu", "k.clif", "function"),
    ] {
        ok(&["a.bin", "--target", target, "-o", file], &d);
        let src = std::fs::read_to_string(d.join(file)).unwrap();
        assert!(src.contains(marker), "{target}: no {marker:?} in {file}");
        let m: Value =
            serde_json::from_str(&std::fs::read_to_string(d.join(format!("{file}.json"))).unwrap())
                .unwrap();
        let want = if target == "vulkan" { "glsl" } else { target };
        assert_eq!(m["target"], want);
        assert_eq!(
            m["inputs"],
            serde_json::json!(["spot", "strike", "vol", "rate", "maturity"])
        );
    }
    // Byte-identical from run to run.
    ok(&["a.bin", "--target", "cuda", "-o", "k2.cu"], &d);
    assert_eq!(
        std::fs::read(d.join("k.cu")).unwrap(),
        std::fs::read(d.join("k2.cu")).unwrap()
    );
    // `compile` is the bare form.
    ok(&["compile", "a.bin", "--target", "cuda", "-o", "k3.cu"], &d);
    assert_eq!(
        std::fs::read(d.join("k.cu")).unwrap(),
        std::fs::read(d.join("k3.cu")).unwrap()
    );
    let e = fails(
        &[
            "a.bin",
            "--target",
            "glsl",
            "--checkpoint",
            "scratch",
            "-o",
            "x.comp",
        ],
        &d,
        1,
    );
    assert!(e.contains("--checkpoint scratch"), "{e}");
    assert!(!d.join("x.comp").exists() && !d.join("x.comp.json").exists());
}

/// Issue 14: a text tape with more than 4 KiB of leading comments is still a tape to `run`.
#[test]
fn a_tape_with_long_leading_comments_runs_as_a_tape() {
    let d = scratch("comments");
    let tape = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/in/european.ntape"
    ))
    .unwrap();
    let comments = "# a comment line that a user wrote about this tape, repeated\n".repeat(100);
    assert!(comments.len() > 4096);
    std::fs::write(d.join("c.ntape"), format!("{comments}{tape}")).unwrap();
    let out = ok(
        &[
            "run", "c.ntape", "--target", "cpu", "--paths", "1024", "--json",
        ],
        &d,
    );
    let j: Value = serde_json::from_str(&out).unwrap();
    assert!(j["outputs"]["price"]["value"].as_f64().unwrap() > 0.0);
}

#[test]
fn forward_mode_gives_the_reverse_greeks() {
    let d = scratch("forward");
    ok(&["record", "asian", "--steps", "12", "-o", "a.bin"], &d);
    let run = |mode: &str| -> Value {
        let args = [
            "run", "a.bin", "--target", "cpu", "--mode", mode, "--paths", "4096", "--json",
        ];
        serde_json::from_str(&ok(&args, &d)).unwrap()
    };
    let (f, r) = (run("forward"), run("reverse"));
    let (fo, ro) = (&f["outputs"]["price"], &r["outputs"]["price"]);
    assert_eq!(fo["value"], ro["value"]);
    let greeks = ro["greeks"].as_object().unwrap();
    assert_eq!(greeks.len(), 5);
    for (input, g) in greeks {
        let (g, h) = (g.as_f64().unwrap(), fo["greeks"][input].as_f64().unwrap());
        assert!(
            (g - h).abs() <= 1e-12 * g.abs().max(1e-3),
            "d/d{input}: forward {h} reverse {g}"
        );
    }
    // Colouring: the corpus portfolio (3 calls on separate spots, one shared rate) needs 2
    // directions, and explain --mode forward says which inputs share one.
    let portfolio = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/in/portfolio.ntape");
    let text = ok(&["explain", portfolio, "--mode", "forward"], &d);
    assert!(text.contains("2 tangent directions for 4 inputs"), "{text}");
    assert!(
        text.contains("direction 0: spot0 spot1 spot2") && text.contains("direction 1: rate"),
        "{text}"
    );
    let j: Value = serde_json::from_str(&ok(
        &["explain", portfolio, "--mode", "forward", "--json"],
        &d,
    ))
    .unwrap();
    assert_eq!(j["directions"], 2);
    assert_eq!(j["colouring"]["rate"], 1);
    let e = fails(
        &["explain", portfolio, "--mode", "forward", "--segments", "2"],
        &d,
        1,
    );
    assert!(
        e.contains("--segments does nothing with --mode forward"),
        "{e}"
    );
    ok(
        &[
            portfolio, "--target", "cuda", "--mode", "forward", "-o", "p.cu",
        ],
        &d,
    );
    let src = std::fs::read_to_string(d.join("p.cu")).unwrap();
    assert!(src.contains("forward kernel, 2 tangent directions"));
    // A forward kernel has no reverse sweep to checkpoint.
    let e = fails(
        &[
            "a.bin",
            "--target",
            "cuda",
            "--mode",
            "forward",
            "--segments",
            "4",
            "-o",
            "k.cu",
        ],
        &d,
        1,
    );
    assert!(e.contains("--mode forward"), "{e}");
    ok(
        &[
            "a.bin", "--target", "cuda", "--mode", "forward", "-o", "k.cu",
        ],
        &d,
    );
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("k.cu.json")).unwrap()).unwrap();
    assert_eq!(m["mode"], "forward");
    assert_eq!(m["sums"].as_array().unwrap().len(), 13);
}

/// An Asian call over `steps` steps whose vol is a different input at every step (bucketed
/// vega at its finest): steps + 3 inputs, every one reaching the one output.
fn per_step_vol_tape(steps: u32) -> String {
    let mut t = String::from(
        "nablatape 1\n%0 = input spot 100.0\n%1 = input strike 100.0\n%2 = input rate 0.03\n",
    );
    let vol = |i: u32| 3 + i;
    for i in 0..steps {
        t += &format!("%{} = input vol{i} 0.2\n", vol(i));
    }
    let mut k = 3 + steps;
    let mut node = |t: &mut String, text: String| {
        *t += &format!("%{k} = {text}\n");
        k += 1;
        k - 1
    };
    let sdt = node(&mut t, format!("const {}", (1.0 / f64::from(steps)).sqrt()));
    let (mut s, mut sum) = (0, node(&mut t, "const 0.0".into()));
    for i in 0..steps {
        let z = node(&mut t, format!("normal {i}"));
        let v = node(&mut t, format!("mul %{} %{sdt}", vol(i)));
        let x = node(&mut t, format!("mul %{v} %{z}"));
        let e = node(&mut t, format!("exp %{x}"));
        s = node(&mut t, format!("mul %{s} %{e}"));
        sum = node(&mut t, format!("add %{sum} %{s}"));
    }
    let n = node(&mut t, format!("const {steps}.0"));
    let mean = node(&mut t, format!("div %{sum} %{n}"));
    let x = node(&mut t, format!("sub %{mean} %1"));
    let zero = node(&mut t, "const 0.0".into());
    let pay = node(&mut t, format!("max %{x} %{zero}"));
    let _ = node(&mut t, format!("mul %{pay} %2"));
    t + &format!("output price = %{}\n", k - 1)
}

#[test]
fn auto_mode_compiles_the_cost_models_choice() {
    let d = scratch("auto");
    ok(&["record", "asian", "--steps", "252", "-o", "a.bin"], &d);
    std::fs::write(d.join("v.ntape"), per_step_vol_tape(64)).unwrap();
    let choice = |tape: &str, target: &str| -> Value {
        serde_json::from_str(&ok(
            &[
                "explain", tape, "--mode", "auto", "--target", target, "--json",
            ],
            &d,
        ))
        .unwrap()
    };
    // Five inputs: forward mode on the GPU (its tangents cost less than the reverse sweep).
    let j = choice("a.bin", "cuda");
    assert_eq!(j["kernel"], "forward", "{j}");
    let kernels: Vec<&str> = j["estimates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kernel"].as_str().unwrap())
        .collect();
    assert_eq!(kernels, ["price", "forward", "reverse", "reverse-plain"]);
    // 67 inputs meeting in one output: 67 directions against one adjoint lane.
    for target in ["cuda", "cpu"] {
        assert_eq!(choice("v.ntape", target)["kernel"], "reverse", "{target}");
    }
    let text = ok(
        &["explain", "a.bin", "--mode", "auto", "--target", "cuda"],
        &d,
    );
    assert!(
        text.contains("* forward") && text.contains("ns/path"),
        "{text}"
    );
    // The default mode is auto: the compiled kernel is the choice.
    let mode = |args: &[&str]| -> String {
        ok(args, &d);
        let m: Value =
            serde_json::from_str(&std::fs::read_to_string(d.join("k.cu.json")).unwrap()).unwrap();
        m["mode"].as_str().unwrap().to_string()
    };
    assert_eq!(
        mode(&["a.bin", "--target", "cuda", "-o", "k.cu"]),
        "forward"
    );
    assert_eq!(
        mode(&["v.ntape", "--target", "cuda", "-o", "k.cu"]),
        "reverse"
    );
    // Checkpoint options are read by reverse mode only: auto honours them by choosing it.
    assert_eq!(
        mode(&["a.bin", "--target", "cuda", "--segments", "8", "-o", "k.cu"]),
        "reverse"
    );
    // --target and --precision are for explain --mode auto only: alone they imply it, beside
    // another mode they are refused.
    let implied = ok(&["explain", "a.bin", "--target", "cuda"], &d);
    assert!(implied.starts_with("auto mode"), "{implied}");
    let e = fails(
        &["explain", "a.bin", "--mode", "forward", "--target", "cuda"],
        &d,
        1,
    );
    assert!(e.contains("--target is for --mode auto"), "{e}");
}

#[test]
fn explain_reports_the_plan() {
    let d = scratch("explain");
    ok(&["record", "asian", "--steps", "252", "-o", "a.bin"], &d);
    let j: Value =
        serde_json::from_str(&ok(&["explain", "a.bin", "--segments", "16", "--json"], &d)).unwrap();
    assert_eq!(j["nodes"], 1536);
    assert_eq!(j["segments"], 16);
    assert_eq!(j["cuts"].as_array().unwrap().len(), 15);
    assert_eq!(j["persistent"], 38);
    assert_eq!(j["max_live_plain"], 766);
    assert_eq!(j["max_live_checkpointed"], 69);
    assert!(j["crossing"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c.as_u64().unwrap() <= 7));
    ok(&["explain", "a.bin", "--plot", "p.svg"], &d);
    let svg = std::fs::read_to_string(d.join("p.svg")).unwrap();
    assert!(
        svg.starts_with("<svg") || svg.starts_with("<?xml"),
        "an SVG"
    );
}

/// Issue 26's hostile-test tapes: forward and reverse mode disagreed about which paths are
/// non-finite (value -800 against NaN; 16 non-finite paths against none). With the strong zero
/// (TAPE-FORMAT.md) both modes give the same report on both CPU back ends, and tape 1's path
/// is priced: min(tanh(exp(|x|)), x) at x = -800 is -800, with derivative 1.
#[test]
fn forward_and_reverse_agree_on_the_non_finite_repro_tapes() {
    let d = scratch("nonfinite");
    for k in 1..=3 {
        let tape = format!(
            "{}/../tests/repro/modes-nonfinite-{k}.ntape",
            env!("CARGO_MANIFEST_DIR")
        );
        for backend in ["llvm", "cranelift"] {
            let run = |mode: &str| -> Value {
                let args = [
                    "run",
                    &tape,
                    "--paths",
                    "16",
                    "--seed",
                    "3",
                    "--mode",
                    mode,
                    "--cpu-backend",
                    backend,
                    "--json",
                ];
                let out = nablac(&args, &d);
                assert!(
                    out.status.success(),
                    "{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                serde_json::from_slice(&out.stdout).unwrap()
            };
            let (f, r) = (run("forward"), run("reverse"));
            assert_eq!(f["outputs"], r["outputs"], "tape {k} on {backend}");
            if k == 1 {
                assert_eq!(r["outputs"]["o0"]["value"], -800.0);
                assert_eq!(r["outputs"]["o0"]["non_finite"], 0);
                assert_eq!(r["outputs"]["o0"]["greeks"]["i0"], 1.0);
            }
        }
    }
}

/// A report without what depends on the moment rather than the run: its timings, and whether
/// the kernel was in the disk cache (the first run of a changed kernel misses, the next hits).
fn results(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("timings");
        o.remove("cache_hit");
    }
    v
}

#[test]
fn run_on_the_cpu_is_deterministic_and_matches_a_compiled_kernel() {
    let d = scratch("run");
    ok(&["record", "european", "-o", "e.bin"], &d);
    let run = |extra: &[&str]| -> Value {
        let mut args = vec!["run", "e.bin", "--paths", "20000", "--seed", "7", "--json"];
        args.extend_from_slice(extra);
        serde_json::from_str(&ok(&args, &d)).unwrap()
    };
    let a = run(&["--threads", "1"]);
    let b = run(&["--threads", "2"]);
    assert_eq!(
        results(&a),
        results(&b),
        "thread count never changes a result"
    );
    for t in [
        "load",
        "run",
        "device",
        "assembly",
        "transfer",
        "allocation",
    ] {
        assert!(a["timings"][t].as_f64().unwrap() >= 0.0, "timings.{t}");
    }
    assert!(a["timings"]["run"].as_f64().unwrap() > 0.0);
    // The device names the JIT that built the kernel (LLVM for this small tape where built in).
    let device = a["device"].as_str().unwrap();
    let jit = if cfg!(feature = "llvm") {
        "LLVM JIT"
    } else {
        "Cranelift JIT"
    };
    assert!(device.starts_with(&format!("CPU ({jit}, ")), "{device}");
    let price = &a["outputs"]["price"];
    // Black-Scholes at (100, 100, 0.2, 0.03, 1): 9.4134, delta 0.5987; 20,000 paths: within 4 stderr.
    let (v, se) = (
        price["value"].as_f64().unwrap(),
        price["stderr"].as_f64().unwrap(),
    );
    assert!((v - 9.413_403).abs() < 4.0 * se, "price {v} ± {se}");
    assert!((price["greeks"]["spot"].as_f64().unwrap() - 0.598_706).abs() < 0.02);
    // The compiled kernel file (CLIF) runs to the same bits as the tape on the Cranelift back end.
    ok(&["e.bin", "--target", "cpu", "-o", "e.clif"], &d);
    let mut args = vec!["run", "e.clif", "--paths", "20000", "--seed", "7", "--json"];
    args.extend_from_slice(&["--threads", "1"]);
    let k: Value = serde_json::from_str(&ok(&args, &d)).unwrap();
    let c = run(&["--threads", "2", "--cpu-backend", "cranelift"]);
    assert_eq!(results(&k), results(&c));
    // The default back end (LLVM where nablac has it) agrees with Cranelift to 1e-12.
    let close = |x: &Value, y: &Value| {
        let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
        assert!((x - y).abs() <= 1e-12 * x.abs().max(y.abs()), "{x} vs {y}");
    };
    close(
        &a["outputs"]["price"]["value"],
        &c["outputs"]["price"]["value"],
    );
    for g in ["spot", "strike", "vol", "rate", "maturity"] {
        close(
            &a["outputs"]["price"]["greeks"][g],
            &c["outputs"]["price"]["greeks"][g],
        );
    }
    if cfg!(feature = "llvm") {
        let l = run(&["--threads", "1", "--cpu-backend", "llvm"]);
        assert_eq!(results(&l), results(&a), "llvm is the default back end");
    }
    let e = fails(&["run", "e.clif", "--cpu-backend", "cranelift"], &d, 1);
    assert!(
        e.contains("--cpu-backend applies when compiling a tape, and e.clif is a kernel"),
        "{e}"
    );
    let e = fails(
        &["run", "e.bin", "--target", "cuda", "--cpu-backend", "llvm"],
        &d,
        1,
    );
    assert!(
        e.contains("--cpu-backend llvm is for the cpu target, not cuda"),
        "{e}"
    );
    // A bump of the market moves the price the way delta says.
    let up: Value = serde_json::from_str(&ok(
        &[
            "run",
            "e.bin",
            "--paths",
            "20000",
            "--seed",
            "7",
            "--json",
            "--market",
            "spot=100.5",
        ],
        &d,
    ))
    .unwrap();
    let dv = up["outputs"]["price"]["value"].as_f64().unwrap() - v;
    assert!(
        (dv / 0.5 - price["greeks"]["spot"].as_f64().unwrap()).abs() < 0.01,
        "bump {dv}"
    );
    let e = fails(&["run", "e.clif", "--target", "cuda"], &d, 1);
    assert!(
        e.contains("is a kernel for cpu; run it with --target cpu"),
        "{e}"
    );
    let e = fails(&["run", "e.bin", "--paths", "0"], &d, 1);
    assert!(e.contains("--paths"), "{e}");
}

/// Issue 14's findings about options and files, each refused with exit status 1 and nothing
/// written: numeric options out of range, `-o` naming the input or something that is not a
/// regular file, a path count past 2^63 - 1, a market value an f32 kernel cannot hold.
#[test]
fn out_of_range_options_and_unsafe_outputs_are_refused() {
    let d = scratch("hardening");
    ok(&["record", "european", "-o", "e.bin"], &d);
    let before = std::fs::read(d.join("e.bin")).unwrap();
    for (option, value, needle) in [
        ("--segments", "0", "--segments 0 is out of range"),
        ("--seg-len", "0", "--seg-len 0 is out of range"),
        (
            "--min-blocks",
            "4294967295",
            "--min-blocks 4294967295 is out of range",
        ),
        ("--ckpt-nodes", "0", "--ckpt-nodes 0 is out of range"),
        ("--markets", "0", "--markets 0 is out of range"),
        ("--workgroup", "3", "workgroup size 3 is not a power of two"),
    ] {
        let e = fails(
            &["e.bin", "--target", "cuda", "-o", "k.cu", option, value],
            &d,
            1,
        );
        assert!(e.contains(needle), "{option}: {e}");
    }
    // -o onto the input tape: refused, the tape intact.
    let e = fails(&["e.bin", "--target", "cuda", "-o", "e.bin"], &d, 1);
    assert!(e.contains("it is the input tape"), "{e}");
    let e = fails(&["e.bin", "--target", "cuda", "-o", "./e.bin"], &d, 1);
    assert!(e.contains("it is the input tape"), "{e}");
    assert_eq!(std::fs::read(d.join("e.bin")).unwrap(), before);
    // -o onto a directory: refused, and no temporary file left beside it.
    std::fs::create_dir(d.join("out")).unwrap();
    let e = fails(&["e.bin", "--target", "cuda", "-o", "out"], &d, 1);
    assert!(e.contains("not a regular file"), "{e}");
    // The manifest's path a directory: the kernel is not written either.
    std::fs::create_dir(d.join("k2.cu.json")).unwrap();
    let e = fails(&["e.bin", "--target", "cuda", "-o", "k2.cu"], &d, 1);
    assert!(e.contains("not a regular file"), "{e}");
    assert_eq!(files_in(&d), ["e.bin", "k2.cu.json", "out"]);
    // Paths past 2^63 - 1, threads out of 1..=4096, a negative seed; a negative number is a
    // value, refused by the option's own range (or taken: --rho below).
    for (args, needle) in [
        (
            &["run", "e.bin", "--paths", "9223372036854775808"][..],
            "--paths must be between 1 and 2^63 - 1",
        ),
        (
            &["run", "e.bin", "--paths", "1024", "--threads", "0"],
            "0 is not in 1..=4096",
        ),
        (
            &["run", "e.bin", "--seed", "-1"],
            "invalid value '-1' for '--seed",
        ),
        (
            &["record", "barrier", "--barrier", "-5", "-o", "b.bin"],
            "barrier = -5: must be finite and positive",
        ),
    ] {
        let e = fails(args, &d, 1);
        assert!(e.contains(needle), "{args:?}: {e}");
    }
    ok(&["record", "basket", "--rho", "-0.2", "-o", "b.bin"], &d);
    std::fs::remove_file(d.join("b.bin")).unwrap();
    // A market value past f32's range on an f32 kernel.
    let e = fails(
        &[
            "run",
            "e.bin",
            "--precision",
            "f32",
            "--paths",
            "1024",
            "--market",
            "spot=1e39",
        ],
        &d,
        1,
    );
    assert!(e.contains("outside the f32 kernel's range"), "{e}");
}

/// Issue 12, point 3: an option that the target, a compiled kernel or the product cannot honour
/// is refused with status 1, a message naming it, and nothing written.
#[test]
fn options_nothing_would_honour_are_refused() {
    let d = scratch("honour");
    ok(&["record", "asian", "--steps", "8", "-o", "a.bin"], &d);
    ok(&["a.bin", "--target", "cpu", "-o", "k.clif"], &d);
    let before = files_in(&d);
    // Product options the product does not read.
    for (args, needle) in [
        (
            vec!["record", "european", "--barrier", "90", "-o", "x.bin"],
            "--barrier is not an option of european",
        ),
        (
            vec!["record", "european", "--steps", "3", "-o", "x.bin"],
            "--steps is not an option of european",
        ),
        (
            vec!["record", "asian", "--rho", "0.3", "-o", "x.bin"],
            "--rho is not an option of asian: it reads --steps",
        ),
        (
            vec!["record", "basket", "--smoothing", "0.1", "-o", "x.bin"],
            "--smoothing is not an option of basket",
        ),
        (
            vec!["record", "barrier", "--assets", "2", "-o", "x.bin"],
            "--assets is not an option of barrier",
        ),
    ] {
        let e = fails(&args, &d, 1);
        assert!(e.contains(needle), "{args:?}: {e}");
    }
    // Compile options the target, the mode or the other checkpoint options leave unused.
    for (args, needle) in [
        (
            vec![
                "--checkpoint",
                "registers",
                "--segments",
                "2",
                "-o",
                "x.clif",
            ],
            "--checkpoint registers is not for the cpu target",
        ),
        (
            vec!["--segments", "2", "-o", "x.clif"],
            "--segments 2 is not for the cpu target",
        ),
        (
            vec!["--workgroup", "64", "-o", "x.clif"],
            "--workgroup is not for the cpu target",
        ),
        (
            vec!["--annotate", "-o", "x.clif"],
            "--annotate is not for the cpu target",
        ),
        (
            vec!["--seg-len", "50", "-o", "x.clif"],
            "--seg-len is not for the cpu target",
        ),
        (
            vec!["--ckpt-nodes", "50", "-o", "x.clif"],
            "--ckpt-nodes is not for the cpu target",
        ),
        (
            vec!["--scratch-layout", "aos", "-o", "x.clif"],
            "--scratch-layout is not for the cpu target",
        ),
        (
            vec!["--checkpoint", "scratch", "-o", "x.clif"],
            "--checkpoint scratch is not for the cpu target",
        ),
        (
            vec!["--mode", "price", "--segments", "4", "-o", "x.cu"],
            "--segments 4 does nothing with --mode price",
        ),
        (
            vec!["--mode", "price", "--checkpoint", "scratch", "-o", "x.cu"],
            "--checkpoint scratch does nothing with --mode price",
        ),
        (
            vec!["--checkpoint", "off", "--segments", "3", "-o", "x.cu"],
            "--segments 3 contradicts --checkpoint off",
        ),
        (
            vec!["--checkpoint", "off", "--seg-len", "30", "-o", "x.cu"],
            "--seg-len does nothing with --checkpoint off",
        ),
        (
            vec!["--segments", "3", "--seg-len", "10", "-o", "x.cu"],
            "--seg-len does nothing with --segments 3",
        ),
        (
            vec!["--segments", "3", "--ckpt-nodes", "10", "-o", "x.cu"],
            "--ckpt-nodes does nothing with --segments 3",
        ),
        (
            vec![
                "--checkpoint",
                "scratch",
                "--ckpt-nodes",
                "10",
                "-o",
                "x.cl",
            ],
            "--ckpt-nodes does nothing with --checkpoint scratch",
        ),
        (
            vec!["--scratch-layout", "aos", "-o", "x.cu"],
            "--scratch-layout does nothing with --checkpoint registers",
        ),
        (vec!["--min-blocks", "4", "-o", "x.cl"], "--min-blocks"),
    ] {
        for cmd in [vec!["a.bin"], vec!["compile", "a.bin"]] {
            let args: Vec<&str> = cmd.iter().chain(&args).copied().collect();
            let e = fails(&args, &d, 1);
            assert!(e.contains(needle), "{args:?}: {e}");
        }
    }
    // `run` on a tape refuses them the same way, before compiling; --threads is for the cpu.
    let e = fails(
        &[
            "run",
            "a.bin",
            "--checkpoint",
            "registers",
            "--segments",
            "2",
        ],
        &d,
        1,
    );
    assert!(
        e.contains("--checkpoint registers is not for the cpu target"),
        "{e}"
    );
    let e = fails(
        &["run", "a.bin", "--target", "cuda", "--threads", "2"],
        &d,
        1,
    );
    assert!(
        e.contains("--threads is for the cpu target, not cuda"),
        "{e}"
    );
    // A kernel compiled already: its precision and mode are what its manifest says; the other
    // compile options cannot apply at all.
    for (args, needle) in [
        (
            vec!["run", "k.clif", "--precision", "f32"],
            "--precision f32 cannot apply: k.clif is a kernel compiled already (cpu, f64, reverse)",
        ),
        (
            vec!["run", "k.clif", "--mode", "price"],
            "--mode price cannot apply",
        ),
        (
            vec!["run", "k.clif", "--segments", "4"],
            "--segments applies when compiling a tape",
        ),
        (
            vec!["run", "k.clif", "--workgroup", "64"],
            "--workgroup applies when compiling a tape",
        ),
        (
            vec!["run", "k.clif", "--manifest", "k.clif"],
            "k.clif: bad manifest",
        ),
        (
            vec!["run", "a.bin", "--manifest", "k.clif.json"],
            "--manifest k.clif.json is for a kernel, and a.bin is a tape",
        ),
    ] {
        let e = fails(&args, &d, 1);
        assert!(e.contains(needle), "{args:?}: {e}");
    }
    // Stating what the kernel is, is no contradiction.
    ok(
        &[
            "run",
            "k.clif",
            "--precision",
            "f64",
            "--mode",
            "reverse",
            "--paths",
            "1024",
        ],
        &d,
    );
    // The output's extension picks the target; a contradiction with --target is refused.
    for (args, needle) in [
        (
            vec!["a.bin", "--target", "cuda", "-o", "x.cl"],
            "--target cuda contradicts the output's name x.cl: .cl names a kernel for opencl",
        ),
        (
            vec!["a.bin", "--target", "cpu", "-o", "x.cu"],
            "--target cpu contradicts the output's name x.cu",
        ),
        (
            vec!["a.bin", "-o", "x.txt"],
            "cannot tell the target from the output's name x.txt: give --target",
        ),
        (
            vec!["a.bin", "-o", "-"],
            "cannot tell the target from the output's name - (standard output)",
        ),
    ] {
        let e = fails(&args, &d, 1);
        assert!(e.contains(needle), "{args:?}: {e}");
    }
    // explain --plot writes SVG, so it wants an .svg name (or -).
    let e = fails(&["explain", "a.bin", "--plot", "x.png"], &d, 1);
    assert!(
        e.contains("--plot writes SVG: name the file FILE.svg"),
        "{e}"
    );
    let e = fails(
        &["explain", "a.bin", "--checkpoint", "off", "--segments", "4"],
        &d,
        1,
    );
    assert!(
        e.contains("--segments 4 contradicts --checkpoint off"),
        "{e}"
    );
    assert_eq!(files_in(&d), before, "nothing written by a refused command");

    // What each target honours still compiles; the extension alone picks the target.
    for (file, target, marker) in [
        ("k.cu", "cuda", "extern \"C\" __global__"),
        ("k.cl", "opencl", "__kernel"),
        ("k.comp", "glsl", "#version 450"),
        ("k2.clif", "cpu", "function"),
    ] {
        ok(&["a.bin", "-o", file], &d);
        let src = std::fs::read_to_string(d.join(file)).unwrap();
        assert!(src.contains(marker), "{file} is not {target} source");
        let m: Value =
            serde_json::from_str(&std::fs::read_to_string(d.join(format!("{file}.json"))).unwrap())
                .unwrap();
        assert_eq!(m["target"], target);
    }
    for args in [
        vec![
            "a.bin",
            "-o",
            "s.cu",
            "--checkpoint",
            "scratch",
            "--segments",
            "4",
            "--scratch-layout",
            "aos",
        ],
        vec![
            "a.bin",
            "-o",
            "r.cu",
            "--seg-len",
            "20",
            "--ckpt-nodes",
            "10",
            "--min-blocks",
            "2",
        ],
        vec![
            "a.bin",
            "-o",
            "p.cl",
            "--mode",
            "price",
            "--checkpoint",
            "off",
            "--segments",
            "1",
        ],
        vec![
            "a.bin",
            "-o",
            "o.clif",
            "--checkpoint",
            "off",
            "--segments",
            "1",
            "--min-blocks",
            "0",
        ],
        vec!["a.bin", "--target", "cuda", "-o", "kernel.txt"],
        vec!["explain", "a.bin", "--plot", "P.SVG"],
    ] {
        ok(&args, &d);
    }
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("s.cu.json")).unwrap()).unwrap();
    assert_eq!(
        (m["segments"].as_u64(), m["scratch_layout"].as_str()),
        (Some(4), Some("aos"))
    );
}

/// Issue 12, point 4: help, usage errors and their exit status, the short form.
#[test]
fn help_usage_errors_and_the_short_form() {
    let d = scratch("usage");
    // A bare `nablac` prints the help on standard output, status 0.
    let out = nablac(&[], &d);
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(help.contains("Usage: nablac <COMMAND>"), "{help}");
    assert!(help.contains("nablac TAPE [COMPILE OPTIONS]"), "{help}");
    assert!(out.stderr.is_empty());
    for args in [
        vec!["--help"],
        vec!["-h"],
        vec!["--version"],
        vec!["help", "run"],
    ] {
        let out = nablac(&args, &d);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(!out.stdout.is_empty(), "{args:?}");
    }
    // README and --help say what each status means, and they agree.
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .unwrap();
    assert!(help.contains("Exit status:") && help.contains("1  any error, usage errors included"));
    assert!(
        readme.contains("usage errors included"),
        "README states the exit statuses"
    );
    // Usage errors exit 1 like every other error.
    for (args, needle) in [
        (vec!["--bogus"], "unexpected argument '--bogus'"),
        (vec!["record"], "required arguments were not provided"),
        (vec!["compile", "x.bin"], "--output"),
        (
            vec!["run", "x.bin", "--paths", "many"],
            "invalid value 'many'",
        ),
        (
            vec!["record", "asianx", "-o", "a.bin"],
            "invalid value 'asianx'",
        ),
        (vec!["completions", "tcsh"], "invalid value 'tcsh'"),
        (vec!["man", "nope"], "no subcommand nope"),
    ] {
        let e = fails(&args, &d, 1);
        assert!(e.contains(needle), "{args:?}: {e}");
    }
    // A mistyped subcommand is named as such, with a suggestion; not a complaint about TAPE.
    ok(&["record", "european", "-o", "a.bin"], &d);
    let e = fails(&["inspeect", "a.bin"], &d, 1);
    assert!(
        e.contains("'inspeect' is neither a subcommand nor an existing file; did you mean `nablac inspect`?"),
        "{e}"
    );
    assert!(!e.contains("cannot be used with"), "{e}");
    let e = fails(&["nope.bin", "-o", "k.cu"], &d, 1);
    assert!(
        e.contains("'nope.bin' is neither a subcommand nor an existing file"),
        "{e}"
    );
    // The short form is the compile subcommand; a tape named like a subcommand needs `compile`.
    ok(&["a.bin", "-o", "k1.cu"], &d);
    ok(&["compile", "a.bin", "-o", "k2.cu"], &d);
    assert_eq!(
        std::fs::read(d.join("k1.cu")).unwrap(),
        std::fs::read(d.join("k2.cu")).unwrap()
    );
    std::fs::copy(d.join("a.bin"), d.join("run")).unwrap();
    ok(&["compile", "run", "-o", "k3.cu"], &d);
    // `record --help` lists every product with the options it reads and their defaults.
    let rh = ok(&["record", "--help"], &d);
    for needle in [
        "european ",
        "european-put",
        "digital",
        "asian ",
        "asian-put",
        "--steps 252",
        "barrier       up-and-out barrier call, smoothed  --steps 52  --barrier 120  --smoothing 0.01",
        "basket        basket call, equal weights         --steps 1  --assets 3  --rho 0.5",
        "spot 100, strike 100, vol 0.2, rate 0.03, maturity 1",
    ] {
        assert!(rh.contains(needle), "record --help lacks {needle:?}:\n{rh}");
    }
}

/// Issue 12, point 4: every environment variable the binary reads (the runtime's and the CLI's
/// own `env::var` calls) is listed in `nablac --help`, the man page and README.md.
#[test]
fn every_environment_variable_is_in_help() {
    let d = scratch("env");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let help = ok(&["--help"], &d);
    let man = ok(&["man"], &d);
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    // Test modules (`tests.rs`, `snapshots.rs`, whatever follows `#[cfg(test)]`) are not the
    // binary's; the corpus loader is library code that only the snapshot tests call.
    let test_only = ["NABLAC_CORPUS_DIR"];
    let mut found = Vec::new();
    for dir in ["runtime/src", "abi/src", "compiler/src", "cli/src"] {
        let mut stack = vec![root.join(dir)];
        while let Some(p) = stack.pop() {
            if p.is_dir() {
                stack.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
                continue;
            }
            let name = p.file_name().unwrap().to_string_lossy();
            if name == "tests.rs" || name == "snapshots.rs" {
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            let text = text.split("#[cfg(test)]").next().unwrap();
            for call in ["env::var(\"", "env::var_os(\""] {
                for (i, _) in text.match_indices(call) {
                    let rest = &text[i + call.len()..];
                    let name = &rest[..rest.find('"').unwrap()];
                    found.push(name.to_string());
                }
            }
        }
    }
    assert!(
        found.iter().any(|n| n == "NABLAC_CACHE_DIR"),
        "the scan finds env reads"
    );
    for name in found.iter().filter(|n| !test_only.contains(&n.as_str())) {
        assert!(help.contains(name.as_str()), "--help does not list {name}");
        assert!(
            man.contains(name.as_str()),
            "the man page does not list {name}"
        );
        assert!(
            readme.contains(name.as_str()),
            "README.md does not list {name}"
        );
    }
}

/// Issue 12, point 4: `-` is standard input for tapes and kernels, standard output for what is
/// written; a JSON report then goes to standard error; --json on every reporting subcommand.
#[test]
fn dash_is_stdin_and_stdout() {
    let d = scratch("dash");
    // record -o - writes the text form; inspect - reads it.
    let tape = ok(&["record", "asian", "--steps", "6", "-o", "-"], &d);
    assert!(tape.starts_with("nablatape"), "{tape}");
    assert!(
        files_in(&d).is_empty(),
        "-o - writes no file (no `-`, no `-.json`)"
    );
    ok(&["record", "asian", "--steps", "6", "-o", "a.ntape"], &d);
    assert_eq!(std::fs::read_to_string(d.join("a.ntape")).unwrap(), tape);
    let from_file: Value =
        serde_json::from_str(&ok(&["inspect", "a.ntape", "--json"], &d)).unwrap();
    let out = ok_in(&["inspect", "-", "--json"], &d, tape.as_bytes());
    assert_eq!(
        serde_json::from_slice::<Value>(&out.stdout).unwrap(),
        from_file
    );
    // A bad tape on stdin is named <stdin> with the place.
    let out = nablac_in(
        &["inspect", "-"],
        &d,
        b"nablatape 1\n%0 = input x 1.0\n%1 = add %0 %2\noutput y = %1\n",
    );
    assert_eq!(out.status.code(), Some(1));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.starts_with("error: <stdin>: line 3:"), "{e}");
    // compile - -o -: the kernel on stdout, no manifest unless --manifest says where.
    let out = ok_in(&["-", "--target", "cuda", "-o", "-"], &d, tape.as_bytes());
    let src = String::from_utf8(out.stdout).unwrap();
    assert!(src.contains("extern \"C\" __global__"));
    assert_eq!(files_in(&d), ["a.ntape"]);
    ok(&["a.ntape", "-o", "k.cu"], &d);
    assert_eq!(std::fs::read_to_string(d.join("k.cu")).unwrap(), src);
    // --json with the kernel on stdout: the report goes to standard error.
    let out = ok_in(
        &[
            "compile",
            "-",
            "--target",
            "cpu",
            "-o",
            "-",
            "--manifest",
            "m.json",
            "--json",
        ],
        &d,
        tape.as_bytes(),
    );
    assert!(String::from_utf8(out.stdout)
        .unwrap()
        .starts_with("function"));
    let j: Value = serde_json::from_slice(&out.stderr).unwrap();
    assert_eq!(
        (j["kernel"].as_str(), j["manifest_file"].as_str()),
        (Some("-"), Some("m.json"))
    );
    assert_eq!(j["manifest"]["target"], "cpu");
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("m.json")).unwrap()).unwrap();
    assert_eq!(m, j["manifest"]);
    // The manifest alone on stdout.
    let out = ok(&["a.ntape", "-o", "k2.clif", "--manifest", "-"], &d);
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap(), m);
    let e = fails(
        &["a.ntape", "--target", "cpu", "-o", "-", "--manifest", "-"],
        &d,
        1,
    );
    assert!(e.contains("both ask for standard output"), "{e}");
    // A manifest that cannot be written: the kernel is not written to stdout either (`fails`
    // checks that stdout is empty).
    std::fs::create_dir(d.join("sub")).unwrap();
    let e = fails(
        &["a.ntape", "--target", "cpu", "-o", "-", "--manifest", "sub"],
        &d,
        1,
    );
    assert!(e.contains("not a regular file"), "{e}");
    // run -: a tape, or a kernel with --manifest; the same bits as from files.
    let args = ["--paths", "2048", "--seed", "3", "--json"];
    let want: Value =
        serde_json::from_str(&ok(&[&["run", "a.ntape"], &args[..]].concat(), &d)).unwrap();
    let out = ok_in(&[&["run", "-"], &args[..]].concat(), &d, tape.as_bytes());
    assert_eq!(
        results(&serde_json::from_slice(&out.stdout).unwrap()),
        results(&want)
    );
    // The CLIF kernel runs to the bits of the tape on the Cranelift back end.
    let want: Value = serde_json::from_str(&ok(
        &[&["run", "a.ntape", "--cpu-backend", "cranelift"], &args[..]].concat(),
        &d,
    ))
    .unwrap();
    let kernel = std::fs::read(d.join("k2.clif")).unwrap();
    let out = ok_in(
        &[&["run", "-", "--manifest", "m.json"], &args[..]].concat(),
        &d,
        &kernel,
    );
    assert_eq!(
        results(&serde_json::from_slice(&out.stdout).unwrap()),
        results(&want)
    );
    let out = nablac_in(&["run", "-"], &d, &kernel);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("give its manifest with --manifest"));
    // explain --plot -: the SVG on stdout, the plan on stderr.
    let out = ok_in(
        &["explain", "-", "--plot", "-", "--json"],
        &d,
        tape.as_bytes(),
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("<svg"));
    let j: Value = serde_json::from_slice(&out.stderr).unwrap();
    assert_eq!(j["nodes"], from_file["nodes"]);
    // --json on record and compile (inspect, explain and run have their own tests).
    let r: Value = serde_json::from_str(&ok(
        &["record", "basket", "--assets", "2", "-o", "b.bin", "--json"],
        &d,
    ))
    .unwrap();
    assert_eq!(r["product"], "basket");
    assert_eq!(r["format"], "binary");
    assert_eq!(
        r["options"],
        serde_json::json!({"steps": 1, "assets": 2, "rho": 0.5})
    );
    assert_eq!(r["market"]["spot"], 100.0);
    let i: Value = serde_json::from_str(&ok(&["inspect", "b.bin", "--json"], &d)).unwrap();
    assert_eq!(r["hash"], i["hash"]);
    let c: Value = serde_json::from_str(&ok(&["b.bin", "-o", "b.cu", "--json"], &d)).unwrap();
    assert_eq!(c["kernel"], "b.cu");
    assert_eq!(c["manifest_file"], "b.cu.json");
    assert_eq!(c["manifest"]["target"], "cuda");
}

/// Issue 12, point 4: `nablac completions SHELL` and `nablac man [SUBCOMMAND]`.
#[test]
fn completions_and_man_pages() {
    let d = scratch("man");
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let s = ok(&["completions", shell], &d);
        assert!(
            s.contains("nablac") && s.contains("inspect") && s.contains("--checkpoint"),
            "{shell}"
        );
    }
    let page = ok(&["man"], &d);
    assert!(page.contains(".TH nablac 1"), "{page}");
    assert!(page.contains("nablac\\-compile(1)"), "{page}");
    let run = ok(&["man", "run"], &d);
    assert!(run.contains(".TH nablac-run 1"), "{run}");
    assert!(run.contains("\\-\\-paths"), "{run}");
    let record = ok(&["man", "record"], &d);
    assert!(
        record.contains("\\-\\-steps 252"),
        "the products' defaults: {record}"
    );
}

/// Issue 12, point 4: the progress bar shows on a terminal when a calibration run predicts more
/// than about a second, and never when standard error is not a terminal or the run is short.
/// Uses script(1) for a terminal; skipped where there is none.
#[test]
fn progress_bar_on_a_terminal_for_long_runs_only() {
    let d = scratch("progress");
    // 3-4 s on one thread of this machine with the scalar Cranelift code (the Asian runs
    // 50,000-70,000 paths a second there, so the calibration predicts over a second with a margin
    // of 3; the LLVM code would finish in well under a second).
    ok(&["record", "asian", "--steps", "252", "-o", "a.bin"], &d);
    ok(&["record", "european", "-o", "e.bin"], &d);
    let long = [
        "run",
        "a.bin",
        "--paths",
        "200000",
        "--threads",
        "1",
        "--cpu-backend",
        "cranelift",
    ];
    let out = nablac(&long, &d);
    assert!(out.status.success());
    assert!(
        out.stderr.is_empty(),
        "no bar off a terminal: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped the terminal half: no script(1)");
        return;
    }
    let on_terminal = |args: &[&str]| -> String {
        let cmd = format!("{} {}", env!("CARGO_BIN_EXE_nablac"), args.join(" "));
        let out = Command::new("script")
            .args(["-qec", &cmd, "/dev/null"])
            .current_dir(&d)
            .stdin(Stdio::null())
            .output()
            .expect("script runs");
        assert!(out.status.success(), "{cmd}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let tty = on_terminal(&long);
    assert!(
        tty.contains("/200,000 paths"),
        "a bar for a long run: {tty}"
    );
    assert!(tty.contains("price"), "{tty}");
    let tty = on_terminal(&["run", "e.bin", "--paths", "200000"]);
    assert!(
        !tty.contains("/200,000 paths"),
        "no bar for a short run: {tty}"
    );
}

/// Issue 12, point 2: every Greek has its standard error, non-finite paths are counted, left out
/// and warned about (an error with --strict), standard errors do not cancel, and the JSON says
/// what produced it.
#[test]
fn results_one_can_trust() {
    let d = scratch("trust");
    let run = |args: &[&str]| -> (Value, String) {
        let out = nablac(args, &d);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        (
            serde_json::from_slice(&out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    };
    // log(x * z) is NaN where the draw z is negative: about half the paths, counted and left out.
    std::fs::write(
        d.join("log.ntape"),
        "nablatape 1\n%0 = input x 1\n%1 = normal 0\n%2 = mul %0 %1\n%3 = log %2\noutput y = %3\n",
    )
    .unwrap();
    let (j, err) = run(&[
        "run",
        "log.ntape",
        "--paths",
        "8192",
        "--seed",
        "3",
        "--json",
    ]);
    let y = &j["outputs"]["y"];
    let bad = y["non_finite"].as_u64().unwrap();
    assert!(bad > 3800 && bad < 4400, "{bad}");
    assert!(
        err.contains("warning: y:") && err.contains("non-finite"),
        "{err}"
    );
    // E[log |z|] = -(gamma + ln 2) / 2 = -0.635, over the positive half alike.
    let v = y["value"].as_f64().unwrap();
    assert!(
        (v + 0.635).abs() < 5.0 * y["stderr"].as_f64().unwrap(),
        "{v}"
    );
    // d/dx = 1/x = 1 on every path used: the mean 1, its standard error 0 (to rounding).
    assert!((y["greeks"]["x"].as_f64().unwrap() - 1.0).abs() < 1e-12);
    assert!(y["greek_stderr"]["x"].as_f64().unwrap() < 1e-12);
    let e = fails(&["run", "log.ntape", "--paths", "8192", "--strict"], &d, 1);
    assert!(e.contains("--strict") && e.contains("non-finite"), "{e}");

    // 1e8 + N(0,1): the standard error is 1/sqrt(paths), not 0.
    std::fs::write(
        d.join("big.ntape"),
        "nablatape 1\n%0 = input x 100000000\n%1 = normal 0\n%2 = add %0 %1\noutput y = %2\n",
    )
    .unwrap();
    let (j, _) = run(&["run", "big.ntape", "--paths", "100000", "--json"]);
    let se = j["outputs"]["y"]["stderr"].as_f64().unwrap();
    assert!((se * 100000f64.sqrt() - 1.0).abs() < 0.02, "{se}");
    assert_eq!(j["outputs"]["y"]["greek_stderr"]["x"].as_f64(), Some(0.0));

    // The European call at maturity 0: d/dmaturity is NaN on every path, so every path is left
    // out, nothing is averaged in silently, and NaN prints as null (never "± 0").
    ok(&["record", "european", "-o", "e.bin"], &d);
    let (j, err) = run(&[
        "run",
        "e.bin",
        "--paths",
        "4096",
        "--market",
        "maturity=0",
        "--json",
    ]);
    let p = &j["outputs"]["price"];
    assert_eq!(p["non_finite"], 4096);
    assert!(p["value"].is_null() && p["stderr"].is_null(), "{p}");
    assert!(err.contains("4096 of 4096 paths"), "{err}");
    let table = nablac(
        &["run", "e.bin", "--paths", "4096", "--market", "maturity=0"],
        &d,
    );
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        !text.contains("± 0") && text.contains("NaN ± NaN") && text.contains("4096 non-finite"),
        "{text}"
    );
    fails(
        &[
            "run",
            "e.bin",
            "--paths",
            "4096",
            "--market",
            "maturity=0",
            "--strict",
        ],
        &d,
        1,
    );

    // The JSON echoes its context; the Greeks carry standard errors.
    let (j, err) = run(&[
        "run", "e.bin", "--paths", "4096", "--seed", "9", "--market", "spot=105", "--mode",
        "reverse", "--json",
    ]);
    assert!(err.is_empty(), "{err}");
    assert_eq!(j["target"], "cpu");
    assert_eq!(j["precision"], "f64");
    assert_eq!(j["mode"], "reverse");
    assert_eq!(j["paths"], 4096);
    assert_eq!(j["seed"], 9);
    assert_eq!(j["market"]["spot"], 105.0);
    assert_eq!(j["market"].as_object().unwrap().len(), 5);
    assert!(j["device"].as_str().unwrap().starts_with("CPU"));
    assert_eq!(j["tape_hash"].as_str().unwrap().len(), 64);
    assert_eq!(j["kernel_hash"].as_str().unwrap().len(), 64);
    // LLVM's object code is cached (a bool), Cranelift's is not (null).
    assert_eq!(
        j["cache_hit"].is_boolean(),
        j["device"].as_str().unwrap().contains("LLVM")
    );
    assert!(j["timings"]["run"].as_f64().unwrap() > 0.0);
    let p = &j["outputs"]["price"];
    assert_eq!(p["non_finite"], 0);
    for (input, se) in p["greek_stderr"].as_object().unwrap() {
        let se = se.as_f64().unwrap();
        assert!(se > 0.0 && se < 5.0, "{input}: {se}");
    }
    // Without the Greeks' squares: no greek_stderr, and the option cannot apply to a price kernel.
    let (j, _) = run(&[
        "run",
        "e.bin",
        "--paths",
        "1024",
        "--greek-stderr",
        "false",
        "--json",
    ]);
    assert!(j["outputs"]["price"].get("greek_stderr").is_none());
    let e = fails(
        &["run", "e.bin", "--mode", "price", "--greek-stderr", "true"],
        &d,
        1,
    );
    assert!(e.contains("--greek-stderr"), "{e}");
}

#[test]
fn a_ladder_runs_fused_and_each_market_has_the_bits_of_a_single_run() {
    let d = scratch("ladder");
    ok(&["record", "european", "-o", "e.bin"], &d);
    let json = |args: &[&str]| -> Value { serde_json::from_str(&ok(args, &d)).unwrap() };
    let base = ["run", "e.bin", "--paths", "4096", "--seed", "3", "--json"];
    // A 2 x 3 grid of (vol, spot), vol outermost, three markets fused per launch.
    let mut args = base.to_vec();
    args.extend([
        "--ladder",
        "vol=0.1:0.3:2",
        "--ladder",
        "spot=90:110:3",
        "--markets",
        "3",
        "--market",
        "rate=0.01",
    ]);
    let l = json(&args);
    assert_eq!(l["fused_markets"], 3);
    let markets = l["markets"].as_array().unwrap();
    let grid: Vec<(f64, f64)> = markets
        .iter()
        .map(|m| {
            assert_eq!(m["market"]["rate"], 0.01, "--market sets the base");
            (
                m["market"]["vol"].as_f64().unwrap(),
                m["market"]["spot"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        grid,
        [
            (0.1, 90.0),
            (0.1, 100.0),
            (0.1, 110.0),
            (0.3, 90.0),
            (0.3, 100.0),
            (0.3, 110.0)
        ]
    );
    for (m, (vol, spot)) in markets.iter().zip(&grid) {
        let (vol, spot) = (format!("vol={vol}"), format!("spot={spot}"));
        let mut single = base.to_vec();
        single.extend(["--market", &vol, "--market", &spot, "--market", "rate=0.01"]);
        let s = json(&single);
        assert_eq!(
            m["outputs"], s["outputs"],
            "{vol} {spot}: same bits as a single run"
        );
    }
    // Without --markets the measured rule fuses the whole (short) ladder into one launch at ten
    // million paths, only spot varying; the price rises with spot. At 4,096 paths the run is
    // shorter than what fusing adds to LLVM's compile (the CPU model prices a fused European
    // only 2% faster a path), and the rule does not fuse.
    let mut args = base.to_vec();
    args.extend(["--ladder", "spot=80:120:5"]);
    if cfg!(feature = "llvm") {
        assert_eq!(json(&args)["fused_markets"], 1);
    }
    args[3] = "1e7";
    let r = json(&args);
    assert!(
        r["fused_markets"].as_u64().unwrap() > 1,
        "{}",
        r["fused_markets"]
    );
    let prices: Vec<f64> = r["markets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["outputs"]["price"]["value"].as_f64().unwrap())
        .collect();
    assert!(prices.windows(2).all(|w| w[0] < w[1]), "{prices:?}");
    // The table has a header and one row per market; the plot is an SVG with both panels.
    let t = ok(
        &[
            "run",
            "e.bin",
            "--paths",
            "4096",
            "--ladder",
            "spot=90:110:3",
            "--plot",
            "l.svg",
        ],
        &d,
    );
    assert_eq!(t.lines().count(), 2 + 3, "{t}");
    // `--plot -`: the SVG on standard output, the table on standard error (as explain does).
    let piped = nablac(
        &[
            "run",
            "e.bin",
            "--paths",
            "4096",
            "--ladder",
            "spot=90:110:3",
            "--plot",
            "-",
        ],
        &d,
    );
    assert!(piped.status.success());
    assert!(piped.stdout.starts_with(b"<svg"));
    assert_eq!(
        String::from_utf8_lossy(&piped.stderr).lines().count(),
        2 + 3,
        "the table on standard error"
    );
    let svg = std::fs::read_to_string(d.join("l.svg")).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("d value / d spot"),
        "{svg:.200}"
    );
    // A compiled ladder kernel says what it fuses in its manifest, and runs ladders of its
    // varying inputs only.
    ok(
        &[
            "e.bin",
            "--target",
            "cpu",
            "--markets",
            "2",
            "--ladder-inputs",
            "spot",
            "-o",
            "k.clif",
        ],
        &d,
    );
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("k.clif.json")).unwrap()).unwrap();
    assert_eq!(m["markets"], 2);
    assert_eq!(m["ladder_inputs"], serde_json::json!(["spot"]));
    let mut args = vec!["run", "k.clif", "--paths", "4096", "--seed", "3", "--json"];
    args.extend(["--ladder", "spot=90:110:3"]);
    let k = json(&args);
    let mut args = base.to_vec();
    args.extend([
        "--ladder",
        "spot=90:110:3",
        "--cpu-backend",
        "cranelift",
        "--markets",
        "1",
    ]);
    let one = json(&args);
    for (a, b) in k["markets"]
        .as_array()
        .unwrap()
        .iter()
        .zip(one["markets"].as_array().unwrap())
    {
        assert_eq!(
            a["outputs"], b["outputs"],
            "a padded fused group keeps the bits"
        );
    }
    let e = fails(
        &[
            "run",
            "k.clif",
            "--paths",
            "64",
            "--ladder",
            "vol=0.1:0.2:2",
        ],
        &d,
        1,
    );
    assert!(e.contains("vol"), "{e}");
    // Errors name the problem.
    let e = fails(&["run", "e.bin", "--ladder", "spott=1:2:3"], &d, 1);
    assert!(e.contains("no input spott"), "{e}");
    let e = fails(&["run", "e.bin", "--ladder", "spot=1:2:0"], &d, 1);
    assert!(e.contains("COUNT"), "{e}");
    let e = fails(&["e.bin", "--ladder-inputs", "spot", "-o", "x.cu"], &d, 1);
    assert!(e.contains("--markets"), "{e}");
    let e = fails(&["run", "k.clif", "--markets", "2"], &d, 1);
    assert!(e.contains("--markets"), "{e}");
    let e = fails(
        &["run", "e.bin", "--ladder", "spot=1:2:2", "--plot", "x.png"],
        &d,
        1,
    );
    assert!(e.contains("SVG"), "{e}");
    assert!(!d.join("x.cu").exists() && !d.join("x.png").exists());
}

/// A chain `x * c + c * c + ...` of `n` nodes as a text tape.
fn chain_tape(n: usize) -> String {
    let mut t =
        String::from("nablatape 1\n%0 = input x 1.0\n%1 = const 1.0000001\n%2 = mul %0 %1\n");
    for i in 3..n {
        let op = if i % 2 == 0 { "mul" } else { "add" };
        t.push_str(&format!("%{i} = {op} %{} %1\n", i - 1));
    }
    t.push_str(&format!("output y = %{}\n", n - 1));
    t
}

#[test]
fn long_chains_run_on_the_cpu_and_llvm_takes_only_what_it_compiles_in_seconds() {
    let d = scratch("chains");
    // Under the LLVM limit: the default (LLVM) back end, whose optimiser recurses once per link,
    // on its own deep-stacked thread (a 45,000-link chain overflowed nothing).
    std::fs::write(d.join("c45k.ntape"), chain_tape(45_000)).unwrap();
    let run = |tape: &str, extra: &[&str]| -> Value {
        let mut args = vec!["run", tape, "--paths", "64", "--json"];
        args.extend_from_slice(extra);
        serde_json::from_str(&ok(&args, &d)).unwrap()
    };
    let a = run("c45k.ntape", &[]);
    let b = run("c45k.ntape", &["--cpu-backend", "cranelift"]);
    let (x, y) = (
        a["outputs"]["y"]["greeks"]["x"].as_f64().unwrap(),
        b["outputs"]["y"]["greeks"]["x"].as_f64().unwrap(),
    );
    // d y / d x = 1.0000001^(22,499): the multiplies along the chain.
    let want = 1.000_000_1f64.powi(22_499);
    assert!(
        (x - want).abs() < 1e-9 && (y - want).abs() < 1e-9,
        "{x} {y} {want}"
    );
    // Over it unrolled: Cranelift by default (linear), and LLVM refused with the reason.
    std::fs::write(d.join("c120k.ntape"), chain_tape(120_000)).unwrap();
    let c = run("c120k.ntape", &["--unroll"]);
    assert!(c["outputs"]["y"]["value"].as_f64().unwrap().is_finite());
    let e = fails(
        &[
            "run",
            "c120k.ntape",
            "--paths",
            "64",
            "--cpu-backend",
            "llvm",
            "--unroll",
        ],
        &d,
        1,
    );
    assert!(
        e.contains("120000 nodes") && e.contains("--cpu-backend cranelift"),
        "{e}"
    );
    // With its links as a loop (the default) the printed code is short, and LLVM takes it:
    // the same derivative as Cranelift's unrolled kernel.
    let l = run("c120k.ntape", &["--cpu-backend", "llvm"]);
    assert_eq!(
        l["outputs"]["y"]["greeks"]["x"],
        c["outputs"]["y"]["greeks"]["x"]
    );
}

#[test]
fn a_kernel_over_the_size_budget_is_refused_fast_and_auto_takes_the_mode_that_fits() {
    let d = scratch("budget");
    // 2,000 outputs along an 8,000-node chain: a reverse kernel would run a lane per output
    // over its cone, about 14 million statements (over the 8 million budget); forward needs one
    // direction.
    let mut t = chain_tape(8_000);
    for k in 0..2_000 {
        t.push_str(&format!("output z{k} = %{}\n", 7_998 - k));
    }
    std::fs::write(d.join("many.ntape"), t).unwrap();
    let e = fails(
        &[
            "many.ntape",
            "--target",
            "cuda",
            "--mode",
            "reverse",
            "-o",
            "r.cu",
        ],
        &d,
        1,
    );
    assert!(
        e.contains("over the budget") && e.contains("--mode forward fits"),
        "{e}"
    );
    assert!(!d.join("r.cu").exists() && !d.join("r.cu.json").exists());
    ok(&["many.ntape", "--target", "cuda", "-o", "a.cu"], &d);
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("a.cu.json")).unwrap()).unwrap();
    assert_eq!(m["mode"], "forward");
}

#[test]
fn a_huge_cpu_kernel_gets_the_linear_register_allocator_and_the_same_bits() {
    let d = scratch("regalloc");
    // 8,000 outputs alive until their leaves: the forward kernel's CLIF is past
    // SINGLE_PASS_INSTS (its backtracking allocation took 117 s; the single-pass one seconds).
    let mut many = chain_tape(16_000);
    for k in 0..8_000 {
        many.push_str(&format!("output z{k} = %{}\n", 15_998 - k));
    }
    std::fs::write(d.join("many.ntape"), many).unwrap();
    std::fs::write(d.join("one.ntape"), chain_tape(16_000)).unwrap();
    let run = |tape: &str| -> Value {
        let args = [
            "run",
            tape,
            "--paths",
            "64",
            "--mode",
            "forward",
            "--cpu-backend",
            "cranelift",
            "--json",
        ];
        serde_json::from_str(&ok(&args, &d)).unwrap()
    };
    let (many, one) = (run("many.ntape"), run("one.ntape"));
    assert_eq!(many["outputs"].as_object().unwrap().len(), 8_001);
    assert_eq!(
        many["outputs"]["y"], one["outputs"]["y"],
        "the allocator never changes a bit"
    );
}

#[test]
fn explain_for_the_cpu_target_reports_the_storage_slots() {
    let d = scratch("slots");
    ok(&["record", "asian", "--steps", "8", "-o", "a.bin"], &d);
    // --target alone means --mode auto: what would be compiled for the target, and why.
    let t = ok(&["explain", "a.bin", "--target", "cpu"], &d);
    assert!(t.starts_with("auto mode"), "{t}");
    let line = t
        .lines()
        .find(|l| l.starts_with("storage: "))
        .expect("a storage line");
    let slots: u32 = line["storage: ".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let j: Value =
        serde_json::from_str(&ok(&["explain", "a.bin", "--target", "cpu", "--json"], &d)).unwrap();
    let chosen = j["estimates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kernel"] == j["kernel"])
        .unwrap();
    assert_eq!(chosen["work"]["storage_slots"], slots);
    assert!(slots >= chosen["work"]["max_live"].as_u64().unwrap() as u32);
}

/// Issue 12, point 4: the table prints every estimate to its standard error's second
/// significant digit, the estimate to the same decimal place, and the same numbers as the JSON.
#[test]
fn the_table_prints_each_estimate_to_its_error_s_second_digit() {
    let d = scratch("numbers");
    ok(&["record", "asian", "--steps", "16", "-o", "a.bin"], &d);
    let args = ["run", "a.bin", "--paths", "4096"];
    let table = ok(&args, &d);
    let json: Value = serde_json::from_str(&ok(&[&args[..], &["--json"]].concat(), &d)).unwrap();
    let price = &json["outputs"]["price"];
    let mut rows = 0;
    for line in table.lines() {
        let Some((left, err)) = line.split_once(" ± ") else {
            continue;
        };
        let (name, value) = left.trim().rsplit_once(' ').unwrap();
        let name = name.trim();
        let (want, want_se) = if name == "price" {
            (price["value"].as_f64(), price["stderr"].as_f64())
        } else {
            let g = name.strip_prefix("d/d").unwrap();
            (
                price["greeks"][g].as_f64(),
                price["greek_stderr"][g].as_f64(),
            )
        };
        let (want, want_se) = (want.unwrap(), want_se.unwrap());
        // Two significant digits of the error; the value to the same place.
        let digits = err.trim_start_matches(['0', '.']).replace('.', "");
        assert_eq!(digits.len(), 2, "{line}");
        let places = |s: &str| s.split_once('.').map_or(0, |(_, f)| f.len());
        assert_eq!(places(value), places(err), "{line}");
        let unit = 10f64.powi(-(places(err) as i32));
        let (v, e): (f64, f64) = (value.parse().unwrap(), err.parse().unwrap());
        assert!(
            (v - want).abs() <= unit / 2.0 * (1.0 + 1e-9),
            "{line}: {want}"
        );
        assert!(
            (e - want_se).abs() <= unit / 2.0 * (1.0 + 1e-9),
            "{line}: {want_se}"
        );
        rows += 1;
    }
    assert_eq!(rows, 6, "{table}");
}

/// Issue 26's small findings of a first hour, each as a new user met it.
#[test]
fn a_new_user_s_first_hour() {
    let dir = scratch("first-hour");
    ok(&["record", "european", "-o", "e.ntape"], &dir);

    // Whole numbers in scientific notation: exactly the run of the digits.
    let j = |args: &[&str]| -> Value {
        serde_json::from_str(&ok(args, &dir)).expect("the report is JSON")
    };
    let sci = j(&[
        "run", "e.ntape", "--paths", "4e3", "--seed", "1e1", "--json",
    ]);
    let digits = j(&[
        "run", "e.ntape", "--paths", "4000", "--seed", "10", "--json",
    ]);
    assert_eq!(sci["paths"], 4000);
    assert_eq!(sci["seed"], 10);
    assert_eq!(results(&sci), results(&digits));
    for bad in ["1.25e1", "1e-3", "2.5"] {
        let e = fails(&["run", "e.ntape", "--paths", bad], &dir, 1);
        assert!(e.contains("not a whole number"), "{bad}: {e}");
    }
    assert!(fails(&["run", "e.ntape", "--paths", "1e19"], &dir, 1).contains("2^63 - 1"));

    // JSON: one line when piped, objects in the tape's order (not sorted by name).
    let line = ok(&["run", "e.ntape", "--paths", "2000", "--json"], &dir);
    assert_eq!(line.trim_end().lines().count(), 1, "{line}");
    let order = |text: &str, keys: &[&str]| {
        let at: Vec<usize> = keys
            .iter()
            .map(|k| text.find(&format!("\"{k}\":")).expect(k))
            .collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]), "{keys:?} in {text}");
    };
    let market = &line[line.find("\"market\"").unwrap()..];
    order(market, &["spot", "strike", "vol", "rate", "maturity"]);
    let greeks = &line[line.find("\"greeks\"").unwrap()..];
    order(greeks, &["spot", "strike", "vol", "rate", "maturity"]);

    // A one-market ladder over a range would drop TO: refused, with the two ways out.
    let e = fails(&["run", "e.ntape", "--ladder", "spot=80:120:1"], &dir, 1);
    assert!(
        e.contains("COUNT 1 is one market") && e.contains("--market spot=80"),
        "{e}"
    );

    // An empty file is called empty, not a kernel without its manifest.
    std::fs::write(dir.join("empty.ntape"), "").unwrap();
    let e = fails(&["run", "empty.ntape"], &dir, 1);
    assert!(e.contains("empty.ntape is empty"), "{e}");
    assert!(!e.contains("manifest"), "{e}");

    // A missing driver's cause is printed once.
    if std::env::var_os("NABLAC_REQUIRE_CUDA").is_none() {
        let out = nablac(
            &["run", "e.ntape", "--target", "cuda", "--paths", "1024"],
            &dir,
        );
        if !out.status.success() {
            let e = String::from_utf8_lossy(&out.stderr);
            let lines: Vec<&str> = e.lines().collect();
            for (k, l) in lines.iter().enumerate() {
                let body = l
                    .trim_start_matches("  caused by: ")
                    .trim_start_matches("error: ");
                assert!(
                    !lines[k + 1..]
                        .iter()
                        .any(|m| m.ends_with(body) && !body.is_empty()),
                    "printed twice: {body}\n{e}"
                );
            }
        }
    }

    // --plot says where it wrote; the ladder table gives every Greek its error and wraps its
    // columns at the width it is given, repeating the laddered input.
    let out = Command::new(env!("CARGO_BIN_EXE_nablac"))
        .args([
            "run",
            "e.ntape",
            "--paths",
            "4096",
            "--ladder",
            "spot=80:120:3",
        ])
        .args(["--plot", "l.svg"])
        .env("COLUMNS", "60")
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("wrote l.svg (each output's value and d/dspot against spot)"),
        "{err}"
    );
    let table = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = table.lines().skip(1).collect();
    assert!(lines.iter().all(|l| l.chars().count() <= 60), "{table}");
    let blocks: Vec<&[&str]> = lines.split(|l| l.is_empty()).collect();
    assert!(blocks.len() >= 2, "{table}");
    for b in &blocks {
        assert!(b[0].trim_start().starts_with("spot"), "{table}");
        assert_eq!(b.len(), 4, "a head and three markets: {table}");
    }
    assert_eq!(
        table.matches(" ± ").count(),
        3 * 6,
        "value and 5 Greeks, 3 markets: {table}"
    );

    // A full standard error or output is an error (exit 1), never a panic (exit 101).
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full");
    if let Ok(full) = full {
        let out = Command::new(env!("CARGO_BIN_EXE_nablac"))
            .args(["run", "missing.ntape"])
            .current_dir(&dir)
            .stderr(full.try_clone().unwrap())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        let out = Command::new(env!("CARGO_BIN_EXE_nablac"))
            .args(["inspect", "e.ntape"])
            .current_dir(&dir)
            .stdout(full)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(1),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stderr).contains("cannot write the report"));
    }
}

/// The CPU's LLVM code is cached like a GPU kernel: a second run, another market or the same
/// kernel written as a `.ll` file links the cached object (cache_hit true, the same bits); a
/// damaged entry is a miss that is replaced; a `.clif` kernel runs on Cranelift, uncached.
#[cfg(feature = "llvm")]
#[test]
fn cpu_kernels_are_cached_and_run_on_the_back_end_they_were_written_for() {
    let dir = scratch("cpu-cache");
    let cache = dir.join("cache");
    let run = |args: &[&str]| -> Value {
        let out = Command::new(env!("CARGO_BIN_EXE_nablac"))
            .args(args)
            .args(["--json", "--paths", "4096"])
            .env("NABLAC_CACHE_DIR", &cache)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    ok(&["record", "asian", "--steps", "8", "-o", "a.ntape"], &dir);
    let first = run(&["run", "a.ntape"]);
    assert_eq!(first["cache_hit"], false);
    assert!(first["device"].as_str().unwrap().contains("LLVM"));
    let entries = || {
        std::fs::read_dir(&cache)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "o"))
            .collect::<Vec<_>>()
    };
    assert_eq!(entries().len(), 1);
    let second = run(&["run", "a.ntape"]);
    assert_eq!(second["cache_hit"], true);
    assert_eq!(results(&first)["outputs"], results(&second)["outputs"]);
    // Markets are arguments: another spot is the same kernel.
    let moved = run(&["run", "a.ntape", "--market", "spot=90"]);
    assert_eq!(moved["cache_hit"], true);
    assert_ne!(moved["outputs"], first["outputs"]);
    // The LLVM form written to a file is the same kernel, so the same entry.
    ok(&["compile", "a.ntape", "-o", "a.ll"], &dir);
    let file = run(&["run", "a.ll"]);
    assert_eq!(file["cache_hit"], true);
    assert_eq!(file["outputs"], first["outputs"]);
    assert_eq!(entries().len(), 1);
    // A damaged entry is a miss (its header's checksum fails), and is replaced.
    let entry = &entries()[0];
    let mut bytes = std::fs::read(entry).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(entry, &bytes).unwrap();
    let again = run(&["run", "a.ntape"]);
    assert_eq!(again["cache_hit"], false);
    assert_eq!(again["outputs"], first["outputs"]);
    assert_eq!(run(&["run", "a.ntape"])["cache_hit"], true);
    // CLIF runs on Cranelift (no cache); the back end and the extension must agree.
    ok(&["compile", "a.ntape", "-o", "a.clif"], &dir);
    let clif = run(&["run", "a.clif"]);
    assert!(clif["device"].as_str().unwrap().contains("Cranelift"));
    assert!(clif["cache_hit"].is_null());
    let e = fails(
        &[
            "compile",
            "a.ntape",
            "-o",
            "b.clif",
            "--cpu-backend",
            "llvm",
        ],
        &dir,
        1,
    );
    assert!(e.contains("contradicts"), "{e}");
    let e = fails(
        &["compile", "a.ntape", "-o", "b.cu", "--cpu-backend", "llvm"],
        &dir,
        1,
    );
    assert!(e.contains("for the cpu target"), "{e}");
}

/// Loops: price and forward kernels' repeated steps compile as a loop by default (a fraction of
/// the source), `--unroll` gives the straight-line kernel; reverse kernels are unrolled anyway.
#[test]
fn price_and_forward_kernels_loop_unless_unrolled() {
    let d = scratch("loops");
    ok(&["record", "asian", "--steps", "252", "-o", "a.bin"], &d);
    let size = |f: &str| std::fs::metadata(d.join(f)).unwrap().len();
    for (mode, first) in [("price", 0), ("forward", 2)] {
        ok(&["a.bin", "--mode", mode, "--unroll", "-o", "u.cu"], &d);
        ok(&["a.bin", "--mode", mode, "-o", "l.cu"], &d);
        assert!(
            size("l.cu") * 10 < size("u.cu"),
            "{mode}: {} vs {}",
            size("l.cu"),
            size("u.cu")
        );
        let src = std::fs::read_to_string(d.join("l.cu")).unwrap();
        // Forward mode's first two steps differ from the rest (the running sum's tangent
        // starts from the first price's), and its last fuses a product the others carry.
        let last = if mode == "forward" { 251 } else { 252 };
        assert!(
            src.contains(&format!(
                "for (unsigned int it = {first}u; it < {last}u; it++)"
            )),
            "{mode}: {src}"
        );
        let unrolled = std::fs::read_to_string(d.join("u.cu")).unwrap();
        assert!(!unrolled.contains("unsigned int it ="), "{mode}: unrolled");
    }
    // explain shows each mode's loops and what they carry.
    let e = ok(&["explain", "a.bin", "--mode", "price"], &d);
    assert!(
        e.contains("price mode: 1 loop (")
            && e.contains(
                "loop over iterations 0..252 of %15..%1527 (6 nodes each): carries 2 values \
                 (%19 %20)"
            ),
        "{e}"
    );
    let e = ok(&["explain", "a.bin", "--mode", "forward"], &d);
    assert!(
        e.contains(
            "loop over iterations 2..251 of %15..%1527 (6 nodes each): carries 10 values (%31 \
             %32; tangents by direction %31:0,2,3,4 %32:0,2,3,4)"
        ),
        "{e}"
    );
    let j: Value = serde_json::from_str(&ok(
        &["explain", "a.bin", "--mode", "forward", "--json"],
        &d,
    ))
    .unwrap();
    assert_eq!(j["loops"][0]["first"], 2);
    assert_eq!(j["loops"][0]["tangents"].as_array().unwrap().len(), 8);
    // Reverse kernels loop on the GPU targets under the default plan: a forward loop that
    // bookmarks the path's price each step, a reverse loop that restores it.
    ok(
        &["a.bin", "--mode", "reverse", "--unroll", "-o", "r.cu"],
        &d,
    );
    ok(&["a.bin", "--mode", "reverse", "-o", "r2.cu"], &d);
    assert!(
        size("r2.cu") * 10 < size("r.cu"),
        "{} vs {}",
        size("r2.cu"),
        size("r.cu")
    );
    let src = std::fs::read_to_string(d.join("r2.cu")).unwrap();
    assert!(
        src.contains("float bm[252];")
            && src.contains("bm[0u + it] = c19;")
            && src.contains("for (unsigned int it = 252u; it-- > 0u;)")
            && src.contains("float r19 = opq(bm[0u + it], zero);"),
        "{src}"
    );
    // A plan asked for gives the checkpointed kernel, as --unroll does.
    ok(&["a.bin", "--segments", "16", "-o", "r3.cu"], &d);
    assert_eq!(
        std::fs::read(d.join("r.cu")).unwrap(),
        std::fs::read(d.join("r3.cu")).unwrap(),
        "--segments: the checkpointed kernel"
    );
    let e = ok(&["explain", "a.bin"], &d);
    assert!(
        e.contains("bookmarks %19 each iteration (252 per path)")
            && e.contains("reverse loop over iterations 0..252, last first: restores %19"),
        "{e}"
    );
    // A kernel compiled already takes no compile option.
    let e = fails(&["run", "l.cu", "--unroll"], &d, 1);
    assert!(e.contains("--unroll applies when compiling a tape"), "{e}");
}

//! The `nablac` binary end to end: record → inspect → explain → compile → run, and bad input
//! refused with exit status 1, a message naming the problem and the place, and nothing written.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn nablac(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nablac"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("nablac runs")
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
        2,
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
    assert_eq!(a, b, "thread count never changes a result");
    let price = &a["outputs"]["price"];
    // Black-Scholes at (100, 100, 0.2, 0.03, 1): 9.4134, delta 0.5987; 20,000 paths: within 4 stderr.
    let (v, se) = (
        price["value"].as_f64().unwrap(),
        price["stderr"].as_f64().unwrap(),
    );
    assert!((v - 9.413_403).abs() < 4.0 * se, "price {v} ± {se}");
    assert!((price["greeks"]["spot"].as_f64().unwrap() - 0.598_706).abs() < 0.02);
    // The compiled kernel file runs to the same bits as the tape.
    ok(&["e.bin", "--target", "cpu", "-o", "e.clif"], &d);
    let mut args = vec!["run", "e.clif", "--paths", "20000", "--seed", "7", "--json"];
    args.extend_from_slice(&["--threads", "1"]);
    let k: Value = serde_json::from_str(&ok(&args, &d)).unwrap();
    assert_eq!(k, a);
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
        ("--segments", "0", "--segments = 0 is out of range"),
        ("--seg-len", "0", "--seg-len = 0 is out of range"),
        (
            "--min-blocks",
            "4294967295",
            "--min-blocks = 4294967295 is out of range",
        ),
        ("--ckpt-nodes", "0", "--ckpt-nodes = 0 is out of range"),
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
    // Paths past 2^63 - 1.
    let e = fails(&["run", "e.bin", "--paths", "9223372036854775808"], &d, 1);
    assert!(e.contains("--paths must be between 1 and 2^63 - 1"), "{e}");
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

//! A host program of a user's own: it loads a kernel that `nablac` emitted (the source and its
//! manifest, no tape) and runs it through `nablac-runtime`, on the backend the manifest names.
//!
//! ```text
//! nablac record asian --steps 252 -o asian.bin
//! nablac asian.bin --target opencl -o asian.cl       # writes asian.cl and asian.cl.json
//! cargo run --release --example host -- asian.cl --paths 1000000 --market spot=105
//! ```
//!
//! Everything it needs comes from `KERNEL.json`: the target, the inputs and their recorded values,
//! the outputs and the Greeks in result order. It prints one line per output and per Greek.

use nablac_runtime::{Backend, Manifest, RunOptions};
use std::process::ExitCode;

struct Args {
    kernel: String,
    paths: u64,
    seed: u64,
    market: Vec<(String, f64)>,
}

fn parse() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let mut a = Args {
        kernel: String::new(),
        paths: 100_000,
        seed: 42,
        market: Vec::new(),
    };
    while let Some(arg) = args.next() {
        let mut value = |flag: &str| args.next().ok_or(format!("{flag} needs a value"));
        match arg.as_str() {
            "--paths" => {
                a.paths = value("--paths")?
                    .parse()
                    .map_err(|e| format!("--paths: {e}"))?
            }
            "--seed" => {
                a.seed = value("--seed")?
                    .parse()
                    .map_err(|e| format!("--seed: {e}"))?
            }
            "--market" => {
                let v = value("--market")?;
                let (name, x) = v
                    .split_once('=')
                    .ok_or(format!("--market {v}: expected name=value"))?;
                let x: f64 = x.parse().map_err(|e| format!("--market {v}: {e}"))?;
                a.market.push((name.to_string(), x));
            }
            s if s.starts_with('-') => return Err(format!("unknown option {s}")),
            s if a.kernel.is_empty() => a.kernel = s.to_string(),
            s => return Err(format!("unexpected argument {s}")),
        }
    }
    if a.kernel.is_empty() {
        return Err("usage: host KERNEL [--paths N] [--seed S] [--market name=value ...]".into());
    }
    Ok(a)
}

fn run() -> Result<(), String> {
    let a = parse()?;
    let source = std::fs::read_to_string(&a.kernel).map_err(|e| format!("{}: {e}", a.kernel))?;
    let mpath = format!("{}.json", a.kernel);
    let text = std::fs::read_to_string(&mpath).map_err(|e| format!("{mpath}: {e}"))?;
    let manifest: Manifest = serde_json::from_str(&text).map_err(|e| format!("{mpath}: {e}"))?;

    // The market: the values the tape was recorded at, then the overrides.
    let mut market = manifest.input_defaults.clone();
    for (name, x) in &a.market {
        let i = manifest
            .inputs
            .iter()
            .position(|n| n == name)
            .ok_or(format!("the kernel has no input {name}"))?;
        market[i] = *x;
    }

    let backend = Backend::open(manifest.target).map_err(|e| e.to_string())?;
    let kernel = backend
        .load(&source, &manifest)
        .map_err(|e| e.to_string())?;
    let reports = backend
        .run(&kernel, &[market], a.paths, a.seed, &RunOptions::default())
        .map_err(|e| e.to_string())?;
    println!(
        "{} on {}: {} paths, seed {}",
        a.kernel,
        backend.describe(),
        a.paths,
        a.seed
    );
    for out in &reports[0].outputs {
        println!("{} {:.17e} stderr {:.6e}", out.name, out.value, out.stderr);
        for (input, g) in &out.greeks {
            println!("  d/d{input} {g:.17e}");
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

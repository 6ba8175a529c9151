//! examples/host.rs, the "user's own host program", run as a user would: on kernels nablac wrote
//! to disk (source + manifest, no tape), it prints the same bits as the runtime run in process.
//! cpu always; opencl and vulkan where a device opens (required under NABLAC_REQUIRE_TOOLS=1).

use nablac::compile::{compile, CompileOptions};
use nablac::emit::Target;
use nablac::products::{record, Market, Options, Product};
use nablac_runtime::{Backend, RunOptions};
use std::path::PathBuf;

/// target/<profile>/examples/host, beside this test's target/<profile>/deps/ (cargo test builds it).
fn host_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    exe.parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>")
        .join("examples")
        .join(format!("host{}", std::env::consts::EXE_SUFFIX))
}

#[test]
fn the_example_host_runs_emitted_kernels() {
    let host = host_binary();
    if !host.exists() {
        // `cargo test` builds the examples; `cargo test --test host_example` alone does not.
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = std::process::Command::new(cargo)
            .args(["build", "--example", "host", "--manifest-path"])
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
            .status()
            .expect("runs cargo");
        assert!(
            status.success() && host.exists(),
            "cannot build {}",
            host.display()
        );
    }
    let dir = std::env::temp_dir().join(format!("nablac-host-example-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let o = Options {
        steps: 8,
        ..Options::defaults(Product::AsianCall)
    };
    let tape = nablac::verify::verify(record(Product::AsianCall, &o, &Market::default()).unwrap())
        .expect("a recorded tape verifies");
    let required = std::env::var("NABLAC_REQUIRE_TOOLS").is_ok_and(|v| v == "1");
    let mut ran = 0;
    for (target, file) in [
        (Target::Cpu, "asian8.clif"),
        (Target::Opencl, "asian8.cl"),
        (Target::Glsl, "asian8.comp"),
    ] {
        let backend = match Backend::open(target) {
            Ok(b) => b,
            Err(e) if target == Target::Cpu || required => panic!("{}: {e}", target.name()),
            Err(e) => {
                eprintln!("skipped: {}: {e}", target.name());
                continue;
            }
        };
        let k = compile(&tape, &CompileOptions::new(target)).unwrap();
        let path = dir.join(file);
        std::fs::write(&path, &k.source).unwrap();
        std::fs::write(
            dir.join(format!("{file}.json")),
            serde_json::to_string_pretty(&k.manifest).unwrap(),
        )
        .unwrap();

        let out = std::process::Command::new(&host)
            .arg(&path)
            .args(["--paths", "5000", "--seed", "7", "--market", "spot=105"])
            .output()
            .expect("runs the host");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}: host failed: {}",
            target.name(),
            String::from_utf8_lossy(&out.stderr)
        );

        // The same run in process.
        let kernel = backend.load(&k.source, &k.manifest).unwrap();
        let mut market = k.manifest.input_defaults.clone();
        market[0] = 105.0;
        let r = backend
            .run(&kernel, &[market], 5000, 7, &RunOptions::default())
            .unwrap()
            .remove(0);
        let printed: Vec<f64> = stdout
            .lines()
            .skip(1)
            .map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                w[1].parse().unwrap_or_else(|_| panic!("a number in {l:?}"))
            })
            .collect();
        let want: Vec<f64> =
            r.outputs[0]
                .greeks
                .iter()
                .map(|g| g.1)
                .fold(vec![r.outputs[0].value], |mut v, g| {
                    v.push(g);
                    v
                });
        assert_eq!(
            printed.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            want.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            "{}: the host printed\n{stdout}",
            target.name()
        );
        ran += 1;
    }
    assert!(ran >= 1);
    let _ = std::fs::remove_dir_all(&dir);
}

//! The emit snapshot test: generated source (and a manifest per target) under
//! `snapshots/<target>/`, reviewed by hand before acceptance.
//!
//! Two sources of cases: the in-code tapes below (European; Asian with 8 steps, plain and
//! checkpointed at 2 segments, register and scratch strategies), planned by `passes::plan`;
//! and the shared corpus `tests/in/*.ntape` with its sidecar `.toml` options, once the corpus and
//! the text reader exist (see [`corpus`]).

use super::tests::{asian, european, planned, poly};
use super::*;
use crate::plan::Checkpoint;
use crate::verify::Verified;

fn target_dir(target: Target) -> &'static str {
    match target {
        Target::Cuda => "../../../snapshots/cuda",
        Target::Opencl => "../../../snapshots/opencl",
        Target::Glsl => "../../../snapshots/glsl",
        Target::Cpu => "../../../snapshots/cpu",
    }
}

/// Asserts `text` against `snapshots/<target>/<name>.snap` (the CPU target's CLIF included).
pub(crate) fn snapshot(target: Target, name: &str, text: &str) {
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path(target_dir(target));
    settings.set_prepend_module_to_snapshot(false);
    settings.set_omit_expression(true);
    settings.bind(|| insta::assert_snapshot!(name.to_string(), text));
}

struct Case {
    name: &'static str,
    tape: Verified,
    segments: u32,
    strategy: Checkpoint,
    opts: EmitOptions,
}

fn cases(target: Target) -> Vec<Case> {
    let base = EmitOptions {
        target,
        ..EmitOptions::default()
    };
    let price = EmitOptions {
        mode: Mode::Price,
        ..base.clone()
    };
    let mut v = vec![
        Case {
            name: "european_price_f32",
            tape: european(),
            segments: 1,
            strategy: Checkpoint::Off,
            opts: price,
        },
        Case {
            name: "european_reverse_f32_annotated",
            tape: european(),
            segments: 1,
            strategy: Checkpoint::Off,
            opts: EmitOptions {
                annotate: true,
                ..base.clone()
            },
        },
        Case {
            name: "european_forward_f32",
            tape: european(),
            segments: 1,
            strategy: Checkpoint::Off,
            opts: EmitOptions {
                mode: Mode::Forward,
                ..base.clone()
            },
        },
        Case {
            name: "poly_forward_f64",
            tape: poly(),
            segments: 1,
            strategy: Checkpoint::Off,
            opts: EmitOptions {
                mode: Mode::Forward,
                precision: Precision::F64,
                ..base.clone()
            },
        },
        Case {
            name: "asian8_reverse_f32",
            tape: asian(8),
            segments: 1,
            strategy: Checkpoint::Off,
            opts: base.clone(),
        },
        Case {
            name: "asian8_ckpt2_reverse_f32",
            tape: asian(8),
            segments: 2,
            strategy: Checkpoint::Registers,
            opts: base.clone(),
        },
        Case {
            // A fused 2-market spot ladder: one draw and the market-free nodes shared, the
            // spot-dependent ones once per market, the sums market by market.
            name: "european_spot_ladder2_reverse_f32",
            tape: crate::ladder::expand(
                &european(),
                &crate::ladder::LadderSpec {
                    markets: 2,
                    varying: european().inputs.iter().map(|i| i.name == "spot").collect(),
                },
            )
            .unwrap(),
            segments: 1,
            strategy: Checkpoint::Off,
            opts: base.clone(),
        },
    ];
    if target == Target::Glsl {
        let f64 = EmitOptions {
            precision: Precision::F64,
            ..base.clone()
        };
        v.push(Case {
            name: "poly_ckpt2_reverse_f64",
            tape: poly(),
            segments: 2,
            strategy: Checkpoint::Registers,
            opts: f64,
        });
    } else {
        let f64 = EmitOptions {
            precision: Precision::F64,
            ..base.clone()
        };
        v.push(Case {
            name: "european_reverse_f64",
            tape: european(),
            segments: 1,
            strategy: Checkpoint::Off,
            opts: f64,
        });
        v.push(Case {
            name: "asian8_scratch2_reverse_f32",
            tape: asian(8),
            segments: 2,
            strategy: Checkpoint::Scratch,
            opts: base.clone(),
        });
        let aos = EmitOptions {
            scratch_layout: ScratchLayout::Aos,
            ..base.clone()
        };
        v.push(Case {
            name: "asian8_scratch2_aos_reverse_f32",
            tape: asian(8),
            segments: 2,
            strategy: Checkpoint::Scratch,
            opts: aos,
        });
    }
    v
}

#[test]
fn in_code_tapes() {
    for target in [Target::Cuda, Target::Opencl, Target::Glsl] {
        for case in cases(target) {
            let plan = planned(&case.tape, case.segments, case.strategy);
            assert_eq!(
                plan.segments.segments.len() as u32,
                case.segments,
                "{}",
                case.name
            );
            let k = emit(&case.tape, &plan, &case.opts)
                .unwrap_or_else(|e| panic!("{}: {e}", case.name));
            snapshot(target, case.name, &k.source);
            if matches!(
                case.name,
                "asian8_ckpt2_reverse_f32" | "european_spot_ladder2_reverse_f32"
            ) {
                let json = serde_json::to_string_pretty(&k.manifest).unwrap();
                snapshot(target, &format!("{}.manifest", case.name), &json);
            }
        }
    }
}

/// The shared corpus `tests/in/*.ntape` (`crate::corpus`): every case at each of its sidecar's
/// segment counts, planned by `passes::plan` (register recompute; S = 1 is the plain kernel),
/// emitted f32 reverse for each target as `corpus_<case>_s<S>`, and, checkpointed, with the
/// scratch strategy for CUDA and OpenCL as `corpus_<case>_s<S>_scratch`.
#[test]
fn corpus() {
    let dir = crate::corpus::dir();
    if !dir.exists() {
        eprintln!("emit corpus: {} does not exist yet; skipped", dir.display());
        return;
    }
    let cases = crate::corpus::load(&dir).unwrap();
    assert!(!cases.is_empty());
    for case in &cases {
        for &s in &case.options.segments {
            for target in [Target::Cuda, Target::Opencl, Target::Glsl] {
                let mut strategies = vec![Checkpoint::Registers];
                if s > 1 && target != Target::Glsl {
                    strategies.push(Checkpoint::Scratch);
                }
                for strategy in strategies {
                    let plan = planned(&case.tape, s, strategy);
                    let o = EmitOptions {
                        target,
                        ..EmitOptions::default()
                    };
                    let k = emit(&case.tape, &plan, &o)
                        .unwrap_or_else(|e| panic!("{} at {s}: {e}", case.name));
                    let suffix = if strategy == Checkpoint::Scratch {
                        "_scratch"
                    } else {
                        ""
                    };
                    snapshot(
                        target,
                        &format!("corpus_{}_s{s}{suffix}", case.name),
                        &k.source,
                    );
                }
            }
        }
    }
}

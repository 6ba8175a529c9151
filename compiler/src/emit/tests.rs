//! Emitter tests: structure of each kernel kind, counts in the source, determinism, literals,
//! errors, and the insta snapshots under `snapshots/<target>/`.

use super::*;
use crate::passes::{activity, liveness};
use crate::plan::{Checkpoint, OpacityPlan, Plan, Segment, SegmentPlan};
use crate::products::{record, Market, Options, Product};
use crate::tape::{BinaryOp, Input, Node, NodeId, Output, Tape, UnaryOp};
use crate::testing::verified;
use crate::verify::Verified;
use std::collections::BTreeSet;

// ---------------------------------------------------------------------------------------------
// Fixtures: tapes built by hand, and a test-only planner that follows the contract of
// `crate::plan` (and of `passes::plan` on branch `passes`) for cuts given explicitly.

struct Rec {
    tape: Tape,
}

impl Rec {
    fn new() -> Rec {
        Rec {
            tape: Tape::default(),
        }
    }
    fn push(&mut self, node: Node) -> NodeId {
        self.tape.nodes.push(node);
        NodeId(self.tape.nodes.len() as u32 - 1)
    }
    fn input(&mut self, name: &str, value: f64) -> NodeId {
        self.tape.inputs.push(Input {
            name: name.into(),
            value,
        });
        let k = self.tape.inputs.len() as u32 - 1;
        self.push(Node::Input(k))
    }
    fn c(&mut self, x: f64) -> NodeId {
        self.tape.consts.push(x);
        let k = self.tape.consts.len() as u32 - 1;
        self.push(Node::Const(k))
    }
    fn bin(&mut self, op: BinaryOp, a: NodeId, b: NodeId) -> NodeId {
        self.push(Node::Binary(op, a, b))
    }
    fn un(&mut self, op: UnaryOp, a: NodeId) -> NodeId {
        self.push(Node::Unary(op, a))
    }
    fn finish(mut self, outputs: &[(&str, NodeId)]) -> Tape {
        self.tape.outputs = outputs
            .iter()
            .map(|(n, v)| Output {
                name: (*n).into(),
                node: *v,
            })
            .collect();
        self.tape.n_draws = self.tape.draws_used();
        self.tape
    }
}

/// The European call from the product recorder (24 nodes, one draw), at the default market.
pub(super) fn european() -> Verified {
    product(Product::EuropeanCall, None)
}

/// The arithmetic Asian call with `steps` monitoring dates from the product recorder: the
/// reference layout of 15 + 6 * steps + 9 nodes (1536 at 252; step k occupies 15 + 6k .. 21 + 6k).
pub(super) fn asian(steps: u32) -> Verified {
    product(Product::AsianCall, Some(steps))
}

fn product(p: Product, steps: Option<u32>) -> Verified {
    let mut options = Options::defaults(p);
    if let Some(steps) = steps {
        options.steps = steps;
    }
    let tape = record(p, &options, &Market::default())
        .unwrap_or_else(|e| panic!("recording {}: {e}", p.name()));
    crate::verify::verify(tape).expect("a recorded tape verifies")
}

/// The cuts at the starts of the Asian's steps `floor(s * steps / segments)`, s = 1..segments.
fn asian_cuts(steps: u32, segments: u32) -> Vec<u32> {
    (1..segments)
        .map(|s| 15 + 6 * (s * steps / segments))
        .collect()
}

fn is_const(tape: &Tape, v: NodeId) -> bool {
    matches!(tape.node(v), Node::Const(_))
}

/// A plan with the given cuts, built by the rules `crate::plan` documents (test-only stand-in
/// for `passes::plan`, which takes its cuts from the liveness profile instead).
pub(super) fn plan_with_cuts(tape: &Tape, cuts: &[u32], strategy: Checkpoint) -> Plan {
    let n = tape.len();
    let act = activity(tape);
    let live = act.live.clone();
    let mut last: Vec<Option<u32>> = vec![None; n];
    for (i, node) in tape.nodes.iter().enumerate() {
        if live[i] {
            for a in node.args() {
                last[a.index()] = Some(i as u32);
            }
        }
    }
    for out in &tape.outputs {
        last[out.node.index()] = Some(n as u32);
    }
    for i in 0..n {
        if !live[i] || is_const(tape, NodeId(i as u32)) {
            last[i] = None;
        }
    }
    let crosses = |v: usize, c: u32| (v as u32) < c && last[v].is_some_and(|l| l >= c);
    let crossing: Vec<u32> = cuts
        .iter()
        .map(|&c| (0..n).filter(|&v| crosses(v, c)).count() as u32)
        .collect();
    let crossing_values: BTreeSet<NodeId> = (0..n)
        .filter(|&v| cuts.iter().any(|&c| crosses(v, c)))
        .map(|v| NodeId(v as u32))
        .collect();
    let mut persistent = crossing_values.clone();
    for (i, node) in tape.nodes.iter().enumerate() {
        if matches!(node, Node::Input(_)) {
            persistent.insert(NodeId(i as u32));
        }
    }
    persistent.extend(tape.outputs.iter().map(|o| o.node));
    let is_p = |v: NodeId| persistent.contains(&v);
    let mut bounds = vec![0u32];
    bounds.extend_from_slice(cuts);
    bounds.push(n as u32);
    let mut segments = Vec::new();
    let mut opaque_reads = Vec::new();
    let mut rekey = Vec::new();
    let checkpointed = !cuts.is_empty();
    for w in bounds.windows(2) {
        let range = w[0]..w[1];
        let mut bookmarks = BTreeSet::new();
        let mut reads = BTreeSet::new();
        // The reverse block recomputes the locals the adjoint rules read, and what those need.
        let local =
            |v: NodeId| range.contains(&v.0) && live[v.index()] && !is_const(tape, v) && !is_p(v);
        let mut needed: BTreeSet<NodeId> = BTreeSet::new();
        for v in range.clone().rev().map(NodeId) {
            if live[v.index()] && act.active[v.index()] {
                needed.extend(
                    crate::passes::adjoint_reads(tape.node(v), v, &act.active)
                        .into_iter()
                        .filter(|&r| local(r)),
                );
            }
            if needed.contains(&v) {
                needed.extend(tape.node(v).args().filter(|&a| local(a)));
            }
        }
        let recompute: Vec<NodeId> = if checkpointed {
            needed.into_iter().collect()
        } else {
            Vec::new()
        };
        let draws: Vec<NodeId> = recompute
            .iter()
            .copied()
            .filter(|&v| matches!(tape.node(v), Node::Draw(..)))
            .collect();
        for v in range.clone().map(NodeId) {
            if !live[v.index()] {
                continue;
            }
            let node = tape.node(v);
            if recompute.contains(&v) {
                reads.extend(node.args());
            }
            if act.active[v.index()] {
                reads.extend(crate::passes::adjoint_reads(node, v, &act.active));
            }
        }
        // Bookmarks: what the block reads back from before the segment.
        bookmarks.extend(
            reads
                .iter()
                .copied()
                .filter(|&a| a.0 < range.start && is_p(a) && !is_const(tape, a)),
        );
        let reads: Vec<NodeId> = if checkpointed {
            reads
                .into_iter()
                .filter(|&v| is_p(v) && !is_const(tape, v))
                .collect()
        } else {
            Vec::new()
        };
        rekey.push(checkpointed && !draws.is_empty());
        opaque_reads.push(reads);
        segments.push(Segment {
            range,
            bookmarks: bookmarks.into_iter().collect(),
            recompute,
            draws,
        });
    }
    let strategy = if checkpointed {
        strategy
    } else {
        Checkpoint::Off
    };
    Plan {
        liveness: liveness(tape),
        activity: act,
        segments: SegmentPlan {
            strategy,
            segments,
            cuts: cuts.iter().map(|&c| NodeId(c)).collect(),
            crossing,
            persistent: persistent.into_iter().collect(),
            scratch_slots: if strategy == Checkpoint::Scratch {
                // Only what some reverse block reads back needs a slot.
                crossing_values
                    .into_iter()
                    .filter(|v| opaque_reads.iter().any(|r| r.contains(v)))
                    .collect()
            } else {
                Vec::new()
            },
        },
        opacity: OpacityPlan {
            opaque_reads,
            rekey,
        },
    }
}

pub(super) fn plain_plan(tape: &Tape) -> Plan {
    plan_with_cuts(tape, &[], Checkpoint::Off)
}

pub(super) fn opts(target: Target, mode: Mode) -> EmitOptions {
    EmitOptions {
        target,
        mode,
        ..EmitOptions::default()
    }
}

/// The cases every target is checked on: (name, tape, plan).
pub(super) fn cases() -> Vec<(&'static str, Verified, Plan)> {
    let e = european();
    let a = asian(8);
    let cuts = asian_cuts(8, 2);
    vec![
        ("european", e.clone(), plain_plan(&e)),
        ("asian8", a.clone(), plain_plan(&a)),
        (
            "asian8_ckpt2",
            a.clone(),
            plan_with_cuts(&a, &cuts, Checkpoint::Registers),
        ),
        (
            "asian8_scratch2",
            a.clone(),
            plan_with_cuts(&a, &cuts, Checkpoint::Scratch),
        ),
        ("poly", poly(), plain_plan(&poly())),
        (
            "poly_ckpt2",
            poly(),
            plan_with_cuts(&poly(), &[8], Checkpoint::Registers),
        ),
    ]
}

/// Writes every case × target × mode × precision × layout to `$NABLAC_EMIT_DUMP` (for checking
/// with glslangValidator, PoCL or NVRTC by hand); does nothing without the variable.
#[test]
fn dump_for_compilers() {
    let Some(dir) = std::env::var_os("NABLAC_EMIT_DUMP") else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    std::fs::create_dir_all(&dir).unwrap();
    for (name, tape, plan) in cases() {
        for target in [Target::Cuda, Target::Opencl, Target::Glsl] {
            for mode in [Mode::Price, Mode::Reverse, Mode::Forward] {
                for precision in [Precision::F32, Precision::F64] {
                    for layout in [ScratchLayout::Soa, ScratchLayout::Aos] {
                        let o = EmitOptions {
                            target,
                            mode,
                            precision,
                            scratch_layout: layout,
                            ..EmitOptions::default()
                        };
                        let Ok(k) = emit(&verified(&tape), &plan, &o) else {
                            continue;
                        };
                        let ext = match target {
                            Target::Cuda => "cu",
                            Target::Opencl => "cl",
                            _ => "comp",
                        };
                        let file = format!(
                            "{name}_{}_{}_{}.{ext}",
                            mode_name(mode),
                            precision.name(),
                            layout.name()
                        );
                        std::fs::write(dir.join(file), k.source).unwrap();
                    }
                }
            }
        }
    }
}

fn mode_name(m: Mode) -> &'static str {
    m.name()
}

/// A tape with no draws and no transcendentals (GLSL f64 can compile it), two outputs, a dead
/// node and an inactive branch: x*y + |x| / sqrt(y), min/max, and a const output.
pub(super) fn poly() -> Verified {
    use BinaryOp::*;
    let mut r = Rec::new();
    let x = r.input("x", 1.5);
    let y = r.input("y", -0.25);
    let dead = r.bin(Mul, x, x); // nothing reads it
    let _ = dead;
    let xy = r.bin(Mul, x, y);
    let ax = r.un(UnaryOp::Abs, x);
    let y2 = r.bin(Mul, y, y);
    let sy = r.un(UnaryOp::Sqrt, y2);
    let q = r.bin(Div, ax, sy);
    let s = r.bin(Add, xy, q);
    let c = r.c(-3.0e-9);
    let inactive = r.bin(Mul, c, c);
    let lo = r.bin(Min, s, inactive);
    let hi = r.bin(Max, lo, y);
    let n = r.un(UnaryOp::Neg, hi);
    let out2 = r.bin(Sub, n, x);
    verified(&r.finish(&[("first", hi), ("second", out2)]))
}

fn count(hay: &str, needle: &str) -> usize {
    hay.matches(needle).count()
}

/// The source lines between the first line containing `start` and the next line containing `end`.
fn section<'s>(src: &'s str, start: &str, end: &str) -> Vec<&'s str> {
    let mut lines = src.lines().skip_while(|l| !l.contains(start));
    let mut out: Vec<&str> = lines.next().into_iter().collect();
    out.extend(lines.take_while(|l| !l.contains(end)));
    out
}

/// The test-only plans keep every invariant `passes::check_plan` checks.
#[test]
fn test_plans_pass_check_plan() {
    for (name, tape, plan) in cases() {
        crate::passes::check_plan(&tape, &plan).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let tape = poly();
    crate::passes::check_plan(&tape, &plan_with_cuts(&tape, &[8], Checkpoint::Registers)).unwrap();
    let tape = asian(252);
    crate::passes::check_plan(
        &tape,
        &plan_with_cuts(&tape, &asian_cuts(252, 16), Checkpoint::Registers),
    )
    .unwrap();
}

/// The real planner's plan at `segments` segments of `strategy`.
pub(super) fn planned(tape: &Tape, segments: u32, strategy: Checkpoint) -> Plan {
    let opts = crate::plan::SegmentOptions {
        strategy,
        segments: Some(segments),
        ..Default::default()
    };
    crate::passes::plan(&verified(tape), &opts)
}

#[test]
fn asian_252_at_16_segments_in_glsl() {
    let tape = asian(252);
    assert_eq!(tape.len(), 1536);
    let plan = planned(&tape, 16, Checkpoint::Registers);
    assert_eq!(plan.segments.segments.len(), 16);
    assert_eq!(plan.segments.persistent.len(), 38);
    let k = emit(&verified(&tape), &plan, &opts(Target::Glsl, Mode::Reverse)).unwrap();
    let src = &k.source;
    assert_eq!(k.manifest.persistent, 38);
    assert_eq!(k.manifest.segments, 16);
    assert_eq!(k.manifest.checkpoint, Checkpoint::Registers);
    // 38 top-level declarations `precise float vN;` (precise: see Dialect::precise) before the first segment block, and no others.
    let top = section(src, "persistent values", "forward sweep");
    let decls: Vec<&str> = top
        .iter()
        .flat_map(|l| l.split(';'))
        .map(str::trim)
        .filter(|s| s.starts_with("precise float v"))
        .collect();
    assert_eq!(decls.len(), 38, "{top:?}");
    for v in &plan.segments.persistent {
        assert!(
            decls.contains(&format!("precise float v{}", v.0).as_str()),
            "v{} not declared at top level",
            v.0
        );
    }
    // 16 forward blocks, 16 reverse blocks; every reverse block re-keys (each has draws).
    assert_eq!(count(src, "// segment "), 32);
    assert_eq!(count(src, " reverse: %"), 16);
    assert_eq!(
        count(src, "uint rk0 = key0 ^ pc.zero; uint rk1 = key1 ^ pc.zero;"),
        16
    );
    // Every bookmark of every segment is read through the opaque identity in its block.
    let reverse = src.split("// reverse sweep").nth(1).unwrap();
    let mut reads = 0;
    for (s, seg) in plan.segments.segments.iter().enumerate() {
        let block = section(reverse, &format!("// segment {s} reverse"), "}").join("\n");
        for b in &seg.bookmarks {
            assert!(
                block.contains(&format!("precise float r{0} = opq(v{0}, pc.zero);", b.0)),
                "segment {s} bookmark {b}"
            );
        }
        for r in &plan.opacity.opaque_reads[s] {
            assert!(
                block.contains(&format!("precise float r{0} = opq(v{0}, pc.zero);", r.0)),
                "segment {s} read {r}"
            );
            reads += 1;
        }
        // Draws are regenerated with the re-keyed generator only.
        for d in &seg.draws {
            assert!(block.contains(&format!("precise float v{} = draw_normal(", d.0)));
        }
        assert_eq!(count(&block, ", rk0, rk1)"), seg.draws.len());
        assert_eq!(count(&block, ", key0, key1)"), 0);
    }
    assert_eq!(count(reverse, "= opq("), reads);
    assert!(reads > 0);
    // All 252 draws in the forward sweep, all 252 again in the reverse blocks.
    assert_eq!(count(src, "draw_normal("), 2 * 252 + 1);
}

#[test]
fn emit_is_deterministic() {
    for (name, tape, plan) in cases() {
        for target in [Target::Cuda, Target::Opencl, Target::Glsl] {
            for mode in [Mode::Price, Mode::Reverse] {
                let o = EmitOptions {
                    annotate: true,
                    ..opts(target, mode)
                };
                let a = emit(&verified(&tape), &plan, &o);
                let b = emit(&tape.clone(), &plan.clone(), &o);
                assert_eq!(a, b, "{name} {target:?} {mode:?}");
            }
        }
    }
}

/// Every literal in the body parses back to the bits of the tape's constant rounded to the
/// kernel precision.
#[test]
fn constants_round_trip() {
    let mut r = Rec::new();
    let x = r.input("x", 1.0);
    let mut acc = x;
    let consts = [
        0.1,
        1.0 / 3.0,
        6.02214076e23,
        1e-300,
        -2.5e-7,
        123456789.12345679,
        0.0,
        -0.0,
        2.0f64.powi(-1074),
        1e38,
    ];
    for c in consts {
        let k = r.c(c);
        acc = r.bin(BinaryOp::Mul, acc, k);
    }
    let tape = r.finish(&[("y", acc)]);
    let plan = plain_plan(&tape);
    for target in [Target::Cuda, Target::Opencl, Target::Glsl] {
        for p in [Precision::F32, Precision::F64] {
            let o = EmitOptions {
                precision: p,
                ..opts(target, Mode::Price)
            };
            let src = emit(&verified(&tape), &plan, &o).unwrap().source;
            let body = section(&src, "// forward sweep", "// leaves");
            let muls: Vec<&str> = body.iter().filter(|l| l.contains(" * ")).copied().collect();
            assert_eq!(muls.len(), consts.len());
            for (line, c) in muls.iter().zip(consts) {
                let lit = line.split(" * ").nth(1).unwrap().trim_end_matches(';');
                let lit = lit
                    .strip_prefix('(')
                    .and_then(|l| l.strip_suffix(')'))
                    .unwrap_or(lit);
                let suffix = match (target, p) {
                    (Target::Glsl, Precision::F64) => "lf",
                    (Target::Glsl, Precision::F32) | (_, Precision::F64) => "",
                    _ => "f",
                };
                let digits = lit
                    .strip_suffix(suffix)
                    .unwrap_or_else(|| panic!("{lit} lacks {suffix:?}"));
                assert!(
                    digits.contains('.') || digits.contains('e'),
                    "{lit} is not a floating literal"
                );
                match p {
                    Precision::F32 => assert_eq!(
                        digits.parse::<f32>().unwrap().to_bits(),
                        (c as f32).to_bits(),
                        "{lit}"
                    ),
                    Precision::F64 => assert_eq!(
                        digits.parse::<f64>().unwrap().to_bits(),
                        c.to_bits(),
                        "{lit}"
                    ),
                }
            }
        }
    }
}

#[test]
fn plain_kernels_compute_only_live_nodes_and_active_adjoints() {
    let tape = poly();
    let plan = plain_plan(&tape);
    let src = emit(&verified(&tape), &plan, &opts(Target::Cuda, Mode::Reverse))
        .unwrap()
        .source;
    // %2 is dead: never computed. %10 (c*c) is live but inactive: computed, no adjoint.
    assert_eq!(count(&src, "v2 "), 0);
    assert!(src.contains("float v10 = (-3e-9f) * (-3e-9f);"));
    assert!(!src.contains("d10"));
    // Two outputs: two adjoint lanes, each seeded on its own output.
    assert!(src.contains("d12_0 = 1.0f;"));
    assert!(src.contains("d14_1 = 1.0f;"));
    assert!(!src.contains("d14_0 = 1.0f;"));
    // max/min: ties go to the first argument; the inactive side gets nothing.
    assert!(src.contains("float v11 = (v8 <= v10) ? v8 : v10;"));
    assert!(src.contains("if (v8 <= v10) d8_0 += d11_0;"));
    assert!(src.contains("if (v11 >= v1) d11_0 += d12_0; else d1_0 += d12_0;"));
    // abs: sign(0) = 0; sqrt: d * 0.5 ⊘ c; div: d ⊙ c ⊘ b (chain factors, ops.rs).
    assert!(src.contains("if (v0 > 0.0f) d0_0 += d4_0; else if (v0 < 0.0f) d0_0 -= d4_0;"));
    assert!(src.contains("d5_0 += chain_div(d6_0 * 0.5f, v6);"));
    assert!(src.contains("d6_0 -= chain_div(chain_mul(d7_0, v7), v6);"));
    // Lane 1 (output `second` = -%12 - %0) runs only its cone: %14, %13, %12's rules and below;
    // %12 is in both cones, %14 and %13 only in lane 1's.
    assert!(src.contains("d13_1 += d14_1;"));
    assert!(!src.contains("d13_0 += d14_0;"));
    assert!(!src.contains("d12_0 -= d13_0;"));
    // Leaves: per output value, its square about its shift, one Greek per input, their squares,
    // the non-finite count.
    let k = emit(&verified(&tape), &plan, &opts(Target::Cuda, Mode::Reverse)).unwrap();
    assert_eq!(
        k.manifest.sums,
        [
            "value:first",
            "value_sq:first",
            "greek:first:x",
            "greek:first:y",
            "greek_sq:first:x",
            "greek_sq:first:y",
            "non_finite:first",
            "value:second",
            "value_sq:second",
            "greek:second:x",
            "greek:second:y",
            "greek_sq:second:x",
            "greek_sq:second:y",
            "non_finite:second"
        ]
    );
    assert_eq!(
        k.manifest.shifts,
        [
            "value:first",
            "greek:first:x",
            "greek:first:y",
            "value:second",
            "greek:second:x",
            "greek:second:y"
        ]
    );
    assert!(src.contains("acc9 = (double)(d0_1);"));
    // The squares about the shifts, read after the two inputs; the non-finite check.
    assert!(
        src.contains("acc1 = acc0 - (double)(inputs[2]);\n"),
        "{src}"
    );
    assert!(src.contains("acc12 = acc10 - (double)(inputs[7]);"));
    assert!(src.contains("acc6 = ((__double2hiint(acc0) & 0x7ff00000) != 0x7ff00000 && (__double2hiint(acc2) & 0x7ff00000) != 0x7ff00000"));
    assert!(src.contains("double acc13 = (-0.0);") && !src.contains("acc14"));
    // Price: no adjoints, no opaque reads, three sums per output.
    let price = emit(&verified(&tape), &plan, &opts(Target::Cuda, Mode::Price)).unwrap();
    assert!(!price.source.contains("d0"));
    assert_eq!(price.manifest.sums.len(), 6);
    assert!(price.source.contains("double acc5 = (-0.0);") && !price.source.contains("acc6"));
}

#[test]
fn scratch_kernels_write_and_read_back_each_slot() {
    let tape = asian(8);
    let plan = plan_with_cuts(&tape, &asian_cuts(8, 2), Checkpoint::Scratch);
    let slots = plan.segments.scratch_slots.clone();
    assert!(!slots.is_empty());
    for (layout, at) in [
        (
            ScratchLayout::Soa,
            "scratch[(unsigned long long)K * invocations + gid]",
        ),
        (
            ScratchLayout::Aos,
            "scratch[(unsigned long long)gid * Nu + K]",
        ),
    ] {
        let o = EmitOptions {
            scratch_layout: layout,
            ..opts(Target::Cuda, Mode::Reverse)
        };
        let k = emit(&verified(&tape), &plan, &o).unwrap();
        let fwd = k
            .source
            .split("// reverse sweep")
            .next()
            .unwrap()
            .to_string();
        let rev = k
            .source
            .split("// reverse sweep")
            .nth(1)
            .unwrap()
            .to_string();
        for (slot, v) in slots.iter().enumerate() {
            let addr = at
                .replace('K', &format!("{slot}u"))
                .replace('N', &slots.len().to_string());
            assert_eq!(count(&fwd, &format!("{addr} = v{};", v.0)), 1, "{addr}");
            // Read back (opaquely) by every reverse block that reads it.
            let readers = plan
                .opacity
                .opaque_reads
                .iter()
                .filter(|r| r.contains(v))
                .count();
            assert_eq!(
                count(&rev, &format!("float r{} = opq({addr}, zero);", v.0)),
                readers,
                "{addr}"
            );
        }
        assert_eq!(k.manifest.scratch_slots_per_path, slots.len() as u32);
        assert_eq!(k.manifest.scratch_layout, layout.name());
        assert_eq!(k.manifest.checkpoint, Checkpoint::Scratch);
        let names: Vec<&str> = k.manifest.params.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "inputs",
                "partials",
                "path_base_lo",
                "path_base_hi",
                "paths_lo",
                "paths_hi",
                "seed_lo",
                "seed_hi",
                "zero",
                "scratch",
                "invocations"
            ]
        );
        assert!(k
            .source
            .contains("float* __restrict__ scratch, unsigned int invocations)"));
    }
    // GLSL has no scratch strategy.
    assert!(matches!(
        emit(&verified(&tape), &plan, &opts(Target::Glsl, Mode::Reverse)),
        Err(EmitError::Unsupported { target: "glsl", .. })
    ));
}

#[test]
fn manifest_describes_the_abi() {
    let tape = european();
    let plan = plain_plan(&tape);
    for target in [Target::Cuda, Target::Opencl, Target::Glsl] {
        let o = EmitOptions {
            precision: Precision::F64,
            workgroup_size: 256,
            ..opts(target, Mode::Reverse)
        };
        let o = if target == Target::Glsl {
            EmitOptions {
                precision: Precision::F32,
                ..o
            }
        } else {
            o
        };
        let k = emit(&verified(&tape), &plan, &o).unwrap();
        let m = &k.manifest;
        assert_eq!(m.manifest_version, MANIFEST_VERSION);
        assert_eq!(m.target, target);
        assert_eq!(m.inputs, ["spot", "strike", "vol", "rate", "maturity"]);
        assert_eq!(m.input_defaults, [100.0, 100.0, 0.2, 0.03, 1.0]);
        assert_eq!(m.outputs, ["price"]);
        assert_eq!(m.sums.len(), 13);
        assert_eq!(m.shifts.len(), 6);
        assert_eq!(m.workgroup_size, 256);
        assert_eq!(
            (m.segments, m.checkpoint, m.persistent),
            (1, Checkpoint::Off, 0)
        );
        assert_eq!(m.draws, 1);
        assert_eq!(m.tape_hash.len(), 64);
        let names: Vec<&str> = m.params.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "inputs",
                "partials",
                "path_base_lo",
                "path_base_hi",
                "paths_lo",
                "paths_hi",
                "seed_lo",
                "seed_hi",
                "zero"
            ]
        );
        let bindings: Vec<u32> = m.params.iter().map(|p| p.binding).collect();
        let real = o.precision.name();
        if target == Target::Glsl {
            assert_eq!(m.entry_point, "main");
            assert_eq!(bindings, [0, 1, 0, 4, 8, 12, 16, 20, 24]);
            assert_eq!(m.params[0].ty, format!("buffer<{real}>"));
            assert!(m.params[2..]
                .iter()
                .all(|p| p.role == "push" && p.ty == "u32"));
            assert!(k
                .source
                .contains("layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;"));
            assert!(k.source.contains("layout(std430, set = 0, binding = 1) writeonly buffer Partials { double partials[]; };"));
        } else {
            assert_eq!(m.entry_point, "nablac_main");
            assert_eq!(bindings, [0, 1, 2, 3, 4, 5, 6, 7, 8]);
            assert_eq!(m.params[0].ty, format!("ptr<{real}>"));
            assert_eq!(m.params[1].ty, "ptr<f64>");
            assert!(k.source.contains("nablac_main("));
        }
        assert_eq!(m.params[1].role, "output");
        // The partials index and the pairwise reduction order.
        // At workgroup 256, 4 sums a batch: sum s sits at sh[(s % 4) * 256 + lid], its tree's
        // root at sh[(s % 4) * 256].
        for s in 0..13 {
            let at = (s % 4) * 256;
            assert!(k
                .source
                .contains(&format!("group * 13u + {s}u] = sh[{at}u];")));
            assert!(k.source.contains(&format!("sh[{at}u + lid] = acc{s};")));
        }
        assert!(!k.source.contains("acc["), "no indexed leaf array");
        assert_eq!(count(&k.source, "m < 256u; m *= 2u)"), 4);
        for at in [0, 256, 512, 768] {
            assert!(k
                .source
                .contains(&format!("sh[{at}u + lid] += sh[{at}u + lid + m];")));
        }
        // The manifest round-trips through JSON.
        let json = serde_json::to_string(m).unwrap();
        assert_eq!(&serde_json::from_str::<Manifest>(&json).unwrap(), m);
    }
}

#[test]
fn cuda_source_has_no_include_and_a_c_entry_point() {
    for (_, tape, plan) in cases() {
        for p in [Precision::F32, Precision::F64] {
            let src = emit(
                &verified(&tape),
                &plan,
                &EmitOptions {
                    precision: p,
                    ..opts(Target::Cuda, Mode::Reverse)
                },
            )
            .unwrap()
            .source;
            assert!(!src.contains("#include"));
            assert!(
                src.contains("extern \"C\" __global__ void __launch_bounds__(128) nablac_main(")
            );
        }
    }
}

#[test]
fn opaque_identity_per_dialect() {
    let tape = asian(8);
    let plan = plan_with_cuts(&tape, &asian_cuts(8, 2), Checkpoint::Registers);
    let expect = [
        (
            Target::Cuda,
            Precision::F32,
            "__int_as_float(__float_as_int(x) ^ (int)z)",
        ),
        (
            Target::Cuda,
            Precision::F64,
            "__longlong_as_double(__double_as_longlong(x) ^ (long long)z)",
        ),
        (Target::Opencl, Precision::F32, "as_float(as_uint(x) ^ z)"),
        (
            Target::Opencl,
            Precision::F64,
            "as_double(as_ulong(x) ^ (ulong)z)",
        ),
        (
            Target::Glsl,
            Precision::F32,
            "uintBitsToFloat(floatBitsToUint(x) ^ z)",
        ),
    ];
    for (target, p, body) in expect {
        let src = emit(
            &verified(&tape),
            &plan,
            &EmitOptions {
                precision: p,
                ..opts(target, Mode::Reverse)
            },
        )
        .unwrap()
        .source;
        assert!(src.contains(&format!("opq({} x, ", super::dialect::real(p))));
        assert!(src.contains(body), "{target:?} {p:?}");
    }
    // GLSL f64 (no transcendentals): packDouble2x32.
    let tape = poly();
    let plan = plan_with_cuts(&tape, &[8], Checkpoint::Registers);
    let src = emit(
        &verified(&tape),
        &plan,
        &EmitOptions {
            precision: Precision::F64,
            ..opts(Target::Glsl, Mode::Reverse)
        },
    )
    .unwrap()
    .source;
    assert!(src.contains("packDouble2x32(unpackDouble2x32(x) ^ uvec2(z))"));
    assert!(src.contains("= opq(v"));
}

/// GLSL passes every exp argument through `opq`, plain kernels too (NVIDIA's Vulkan compiler
/// otherwise rounded the barrier's exps differently plain and checkpointed); CUDA and OpenCL
/// call exp on the value itself.
#[test]
fn glsl_exp_arguments_are_opaque() {
    let tape = european(); // two exps, one draw, never checkpointed
    for (target, want) in [
        (Target::Glsl, "exp(opq(v14, pc.zero))"),
        (Target::Cuda, "expf(v14)"),
        (Target::Opencl, "exp(v14)"),
    ] {
        for mode in [Mode::Price, Mode::Reverse] {
            let src = emit(&verified(&tape), &plain_plan(&tape), &opts(target, mode))
                .unwrap()
                .source;
            assert!(src.contains(want), "{target:?} {mode:?}");
            assert_eq!(src.contains(" opq("), target == Target::Glsl, "{target:?}");
        }
    }
}

#[test]
fn annotations_name_the_tape_node() {
    let tape = european();
    let src = emit(
        &verified(&tape),
        &plain_plan(&tape),
        &EmitOptions {
            annotate: true,
            ..opts(Target::Opencl, Mode::Reverse)
        },
    )
    .unwrap()
    .source;
    assert!(src.contains("float v15 = exp(v14); // %15 = exp %14"));
    assert!(src.contains("float v0 = inputs[0]; // %0 = input spot"));
    assert!(src.contains("float v12 = draw_normal(0u, plo, phi, key0, key1); // %12 = normal 0"));
    assert!(src.contains("d14 += chain_mul(d15, v15); // %15 = exp %14"));
    let plain = emit(
        &verified(&tape),
        &plain_plan(&tape),
        &opts(Target::Opencl, Mode::Reverse),
    )
    .unwrap()
    .source;
    assert!(!plain.contains("// %"));
}

#[test]
fn errors_name_the_problem() {
    let tape = european();
    let plan = plain_plan(&tape);
    for wg in [0, 3, 96, 2048] {
        let o = EmitOptions {
            workgroup_size: wg,
            ..EmitOptions::default()
        };
        assert_eq!(
            emit(&verified(&tape), &plan, &o),
            Err(EmitError::WorkgroupSize(wg))
        );
    }
    for wg in [1, 2, 64, 1024] {
        assert!(emit(
            &verified(&tape),
            &plan,
            &EmitOptions {
                workgroup_size: wg,
                ..EmitOptions::default()
            }
        )
        .is_ok());
    }
    assert_eq!(
        emit(&verified(&tape), &plan, &opts(Target::Cpu, Mode::Reverse)),
        Err(EmitError::NotAKernelTarget("cpu"))
    );
    let glsl64 = EmitOptions {
        precision: Precision::F64,
        ..opts(Target::Glsl, Mode::Price)
    };
    let e = emit(&verified(&tape), &plan, &glsl64).unwrap_err();
    assert!(e.to_string().contains("f64"), "{e}");
    // A plan for another tape.
    let other = plain_plan(&asian(2));
    assert!(matches!(
        emit(&verified(&tape), &other, &EmitOptions::default()),
        Err(EmitError::Plan(_))
    ));
    // A plan whose segment reads a local of another segment.
    let mut bad = plan_with_cuts(&tape, &[10], Checkpoint::Registers);
    bad.segments.persistent.retain(|v| v.0 != 9);
    assert!(
        matches!(emit(&verified(&tape), &bad, &EmitOptions::default()), Err(EmitError::Plan(m)) if m.contains("%9"))
    );
    // (Malformed tapes cannot reach `emit`: it takes only a `Verified` tape.)
    let mut t = tape.clone().into_tape();
    t.consts[0] = 1e300;
    let e = emit(&verified(&t), &plan, &EmitOptions::default()).unwrap_err();
    assert_eq!(
        e,
        EmitError::ConstOverflow {
            node: NodeId(6),
            value: 1e300,
            precision: "f32"
        }
    );
    assert!(emit(
        &verified(&t),
        &plan,
        &EmitOptions {
            precision: Precision::F64,
            ..EmitOptions::default()
        }
    )
    .is_ok());
}

#[test]
fn tape_hash_is_the_content_hash() {
    let tape = european();
    let k = emit(
        &verified(&tape),
        &plain_plan(&tape),
        &EmitOptions::default(),
    )
    .unwrap();
    assert_eq!(k.manifest.tape_hash, crate::format::content_hash(&tape));
    assert_ne!(
        crate::format::content_hash(&tape),
        crate::format::content_hash(&asian(1))
    );
}

#[test]
#[ignore = "prints the f64 reference for comparison with a kernel run by hand"]
fn print_reference() {
    for (name, tape) in [("european", european()), ("asian8", asian(8))] {
        let inputs = crate::reference::recorded_inputs(&tape);
        let r = crate::reference::evaluate(&verified(&tape), &inputs, 42, 4096).unwrap();
        println!("{name}: {r:?}");
    }
}

#[test]
fn min_blocks_is_cuda_launch_bounds() {
    let (_, tape, plan) = cases().remove(2); // asian8_ckpt2
    let with = |target, min_blocks| {
        emit(
            &verified(&tape),
            &plan,
            &EmitOptions {
                min_blocks,
                ..opts(target, Mode::Reverse)
            },
        )
    };
    let src = with(Target::Cuda, Some(4)).unwrap().source;
    assert!(
        src.contains("__launch_bounds__(128, 4) nablac_main("),
        "{src}"
    );
    assert!(with(Target::Cuda, None)
        .unwrap()
        .source
        .contains("__launch_bounds__(128) nablac_main("));
    assert_eq!(with(Target::Cuda, Some(0)), Err(EmitError::MinBlocks));
    for target in [Target::Opencl, Target::Glsl] {
        let e = with(target, Some(4)).unwrap_err().to_string();
        assert!(e.contains("resident-workgroups hint"), "{e}");
    }
}

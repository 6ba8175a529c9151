//! Test helpers shared by every module's tests: random VALID canonical tapes.
//!
//! [`arb_tape`] is a proptest strategy (it shrinks towards fewer, simpler nodes); [`random_tape`]
//! is a deterministic generator without proptest, for corpus files and benchmarks. Both produce
//! tapes that satisfy every rule of TAPE-FORMAT.md and are in the canonical form of
//! `crate::format` (module doc there):
//!
//! - every input index is used by exactly one `input` node, and input nodes appear in input-index
//!   order; node 0 is always `input 0`;
//! - the const pool holds each distinct f64 bit pattern once, in order of first use, every entry used;
//! - names are valid and unique among inputs and among outputs; values and consts are finite;
//! - every argument points backwards; draw indices are small (< 8) and `n_draws` is exactly
//!   1 + the highest draw index used (0 if none);
//! - 1..=3 outputs, at any node.
//!
//! Every op appears with some probability; leaves are about a quarter of the nodes.

use crate::tape::{Input, Node, NodeId, Op, Output, Tape};
use proptest::prelude::*;

/// Draw indices stay below this, so tapes often reuse a draw.
const MAX_DRAW: u32 = 8;

/// A raw choice for one node: an op selector and two argument selectors, reduced modulo what is
/// legal at the node's position.
#[derive(Clone, Copy, Debug)]
struct NodeSpec {
    op: u8,
    a: u32,
    b: u32,
}

/// Builds a valid canonical tape with exactly `1 + specs.len()` nodes (at least `input_values.len()`,
/// which callers guarantee). `const_values` are candidates for the pool; `outputs` pick nodes.
fn build(
    input_names: &[String],
    input_values: &[f64],
    const_values: &[f64],
    specs: &[NodeSpec],
    outputs: &[(String, u32)],
) -> Tape {
    let n_inputs = input_names.len().min(input_values.len()).max(1);
    let n = specs.len() + 1;
    debug_assert!(n >= n_inputs);
    let mut nodes: Vec<Node> = Vec::with_capacity(n);
    let mut consts: Vec<f64> = Vec::new();
    nodes.push(Node::Input(0));
    let mut next_input = 1usize;
    for (p, spec) in specs.iter().enumerate() {
        let pos = p + 1; // the node being built
        let left = n_inputs - next_input;
        let slots_left = n - pos;
        let op = Op::ALL[spec.op as usize % Op::ALL.len()];
        if left > 0 && (op == Op::Input || slots_left <= left) {
            nodes.push(Node::Input(next_input as u32));
            next_input += 1;
            continue;
        }
        let node = match op {
            Op::Input | Op::Const if !const_values.is_empty() => {
                let v = const_values[spec.a as usize % const_values.len()];
                let k = match consts.iter().position(|c| c.to_bits() == v.to_bits()) {
                    Some(k) => k,
                    None => {
                        consts.push(v);
                        consts.len() - 1
                    }
                };
                Node::Const(k as u32)
            }
            Op::Input | Op::Const => Node::from_op(Op::Normal, spec.a % MAX_DRAW, 0),
            Op::Normal | Op::Uniform => Node::from_op(op, spec.a % MAX_DRAW, 0),
            _ => {
                let a = spec.a % pos as u32;
                let b = spec.b % pos as u32;
                Node::from_op(op, a, b)
            }
        };
        nodes.push(node);
    }
    debug_assert_eq!(next_input, n_inputs);
    let inputs = (0..n_inputs)
        .map(|i| Input {
            name: input_names[i].clone(),
            value: input_values[i],
        })
        .collect();
    let mut outs: Vec<Output> = Vec::new();
    for (name, sel) in outputs {
        if outs.iter().all(|o| &o.name != name) {
            outs.push(Output {
                name: name.clone(),
                node: NodeId(sel % n as u32),
            });
        }
    }
    if outs.is_empty() {
        outs.push(Output {
            name: "out".into(),
            node: NodeId(n as u32 - 1),
        });
    }
    let mut tape = Tape {
        inputs,
        outputs: outs,
        consts,
        nodes,
        n_draws: 0,
    };
    tape.n_draws = tape.draws_used();
    tape
}

/// Makes names unique by appending `_k` to repeats (keeps them valid: at most 11 + 3 bytes).
fn uniquify(names: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(names.len());
    for (k, name) in names.into_iter().enumerate() {
        if out.contains(&name) {
            out.push(format!("{name}_{k}"));
        } else {
            out.push(name);
        }
    }
    out
}

fn arb_name() -> impl Strategy<Value = String> {
    "[A-Za-z_][A-Za-z0-9_]{0,10}"
}

/// Finite f64s: "nice" decimals most of the time, any finite bit pattern otherwise (subnormals,
/// -0.0, huge and tiny exponents).
fn arb_finite() -> impl Strategy<Value = f64> {
    use proptest::num::f64 as pf;
    prop_oneof![
        3 => (-4000i32..4000).prop_map(|x| f64::from(x) / 8.0),
        1 => pf::POSITIVE | pf::NEGATIVE | pf::NORMAL | pf::SUBNORMAL | pf::ZERO,
    ]
}

/// Random valid canonical tapes: 1..=6 inputs, 0..=4 pool constants, 1..=200 nodes of every op,
/// draws below 8, 1..=3 outputs (see the module doc for every guarantee).
pub fn arb_tape() -> impl Strategy<Value = Tape> {
    (
        prop::collection::vec((arb_name(), arb_finite()), 1..=6),
        prop::collection::vec(arb_finite(), 0..=4),
        prop::collection::vec((any::<u8>(), any::<u32>(), any::<u32>()), 0..200),
        prop::collection::vec((arb_name(), any::<u32>()), 1..=3),
    )
        .prop_map(|(inputs, consts, specs, outputs)| {
            let specs: Vec<NodeSpec> = specs
                .into_iter()
                .map(|(op, a, b)| NodeSpec { op, a, b })
                .collect();
            // No more inputs than nodes.
            let n_inputs = inputs.len().min(specs.len() + 1);
            let (names, values): (Vec<String>, Vec<f64>) =
                inputs.into_iter().take(n_inputs).unzip();
            let names = uniquify(names);
            let (onames, osel): (Vec<String>, Vec<u32>) = outputs.into_iter().unzip();
            let outputs: Vec<(String, u32)> = uniquify(onames).into_iter().zip(osel).collect();
            build(&names, &values, &consts, &specs, &outputs)
        })
}

/// splitmix64: a tiny deterministic generator (no dependency, same stream on every platform).
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// A random valid canonical tape with exactly `max(n, 1)` nodes, a pure function of `(seed, n)`:
/// 1..=min(6, n) inputs named `x0, x1, ...` with values in [0.5, 100], up to 4 pool constants,
/// draws below 8, 1..=3 outputs named `y0, y1, ...` (the last node is always `y0`).
pub fn random_tape(seed: u64, n: usize) -> Tape {
    let n = n.max(1);
    let mut rng = SplitMix(seed);
    let n_inputs = 1 + rng.below(n.min(6) as u64) as usize;
    let names: Vec<String> = (0..n_inputs).map(|i| format!("x{i}")).collect();
    let values: Vec<f64> = (0..n_inputs)
        .map(|_| 0.5 + rng.below(800) as f64 / 8.0)
        .collect();
    let n_consts = rng.below(5) as usize;
    let consts: Vec<f64> = (0..n_consts)
        .map(|_| (rng.below(2001) as f64 - 1000.0) / 16.0)
        .collect();
    let specs: Vec<NodeSpec> = (1..n)
        .map(|_| NodeSpec {
            op: rng.next() as u8,
            a: rng.next() as u32,
            b: rng.next() as u32,
        })
        .collect();
    let n_outputs = 1 + rng.below(3) as usize;
    let outputs: Vec<(String, u32)> = (0..n_outputs)
        .map(|k| {
            let node = if k == 0 {
                n as u32 - 1
            } else {
                rng.next() as u32
            };
            (format!("y{k}"), node)
        })
        .collect();
    build(&names, &values, &consts, &specs, &outputs)
}

/// Checks the canonical-form guarantees of this module directly (independent of the verifier).
#[cfg(test)]
pub(crate) fn assert_valid_canonical(tape: &Tape) {
    use crate::tape::is_valid_name;
    assert!(!tape.nodes.is_empty());
    assert!(!tape.outputs.is_empty());
    for (i, inp) in tape.inputs.iter().enumerate() {
        assert!(is_valid_name(&inp.name), "{}", inp.name);
        assert!(inp.value.is_finite());
        assert!(tape.inputs[..i].iter().all(|o| o.name != inp.name));
    }
    for (i, out) in tape.outputs.iter().enumerate() {
        assert!(is_valid_name(&out.name), "{}", out.name);
        assert!(out.node.index() < tape.nodes.len());
        assert!(tape.outputs[..i].iter().all(|o| o.name != out.name));
    }
    let mut next_input = 0u32;
    let mut next_const = 0u32;
    for (i, node) in tape.nodes.iter().enumerate() {
        match *node {
            Node::Input(k) => {
                assert_eq!(k, next_input);
                next_input += 1;
            }
            Node::Const(k) => {
                assert!(k <= next_const);
                if k == next_const {
                    next_const += 1;
                }
            }
            Node::Draw(_, k) => assert!(k < tape.n_draws),
            _ => assert!(node.args().all(|a| a.index() < i)),
        }
    }
    assert_eq!(next_input as usize, tape.inputs.len());
    assert_eq!(next_const as usize, tape.consts.len());
    assert!(tape.consts.iter().all(|c| c.is_finite()));
    for (i, c) in tape.consts.iter().enumerate() {
        assert!(tape.consts[..i].iter().all(|d| d.to_bits() != c.to_bits()));
    }
    assert_eq!(tape.n_draws, tape.draws_used());
}

/// `tape` verified (a test's own tape, known to be valid).
pub(crate) fn verified(tape: &Tape) -> crate::verify::Verified {
    crate::verify::verify(tape.clone()).expect("a valid tape")
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest! {
        #[test]
        fn arb_tapes_are_valid_and_canonical(tape in arb_tape()) {
            assert!(tape.nodes.len() <= 200);
            assert!((1..=6).contains(&tape.inputs.len()));
            assert!(tape.consts.len() <= 4);
            assert!((1..=3).contains(&tape.outputs.len()));
            assert_valid_canonical(&tape);
            crate::verify::check(&tape).unwrap();
            assert!(crate::format::is_canonical(&tape));
        }
    }

    #[test]
    fn random_tapes_are_deterministic_valid_and_sized() {
        for seed in 0..50u64 {
            for n in [1usize, 2, 5, 7, 64, 1000] {
                let t = random_tape(seed, n);
                assert_eq!(t.nodes.len(), n);
                assert_eq!(t, random_tape(seed, n));
                assert_valid_canonical(&t);
                assert_eq!(t.outputs[0].node, NodeId(n as u32 - 1));
            }
        }
        assert_ne!(random_tape(1, 100), random_tape(2, 100));
    }

    #[test]
    fn every_op_appears() {
        // Some seeds have an empty pool (no const nodes); over a few seeds every op shows up,
        // and in a long tape every non-const op does.
        let t = random_tape(7, 2000);
        for op in Op::ALL.into_iter().filter(|&op| op != Op::Const) {
            assert!(t.nodes.iter().any(|n| n.op() == op), "{op} missing");
        }
        assert!((0..10).any(|s| random_tape(s, 50).nodes.iter().any(|n| n.op() == Op::Const)));
    }
}

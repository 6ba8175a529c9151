//! Random VALID canonical tapes, for the crate's tests, the cross-crate tests and the fuzz targets.
//!
//! Public (`nablac::testing`) with the `testing` feature, which the fuzz crate (fuzz/) and the
//! workspace's cross-crate tests turn on; otherwise compiled only into the crate's own tests.
//!
//! [`arb_tape`] is a proptest strategy (it shrinks towards fewer, simpler nodes; crate tests only:
//! proptest is a dev-dependency); [`random_tape`] is a deterministic generator without proptest,
//! for corpus files, benchmarks and the tool sweep; [`tape_from_bytes`] turns any bytes into a tape
//! (the fuzz targets' structured input). All three share one builder, so they produce
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
#[cfg(test)]
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

#[cfg(test)]
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

#[cfg(test)]
fn arb_name() -> impl Strategy<Value = String> {
    "[A-Za-z_][A-Za-z0-9_]{0,10}"
}

#[cfg(test)]
/// Finite f64s: "nice" decimals most of the time, any finite bit pattern otherwise (subnormals,
/// -0.0, huge and tiny exponents).
fn arb_finite() -> impl Strategy<Value = f64> {
    use proptest::num::f64 as pf;
    prop_oneof![
        3 => (-4000i32..4000).prop_map(|x| f64::from(x) / 8.0),
        1 => pf::POSITIVE | pf::NEGATIVE | pf::NORMAL | pf::SUBNORMAL | pf::ZERO,
    ]
}

#[cfg(test)]
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
pub struct SplitMix(pub u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
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

/// The most nodes [`tape_from_bytes`] builds (so one fuzz execution stays fast).
pub const MAX_FUZZ_NODES: usize = 256;

/// Bytes read in order; zeros once they run out.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    /// A finite f64: a "nice" multiple of 1/8 in [-4096, 4096) three times in four, else any
    /// finite bit pattern (subnormals, -0.0, huge and tiny exponents; a NaN or infinity reads 1.0).
    fn finite(&mut self) -> f64 {
        if self.u8() < 192 {
            f64::from(self.u16() as i16) / 8.0
        } else {
            let mut b = [0u8; 8];
            b.iter_mut().for_each(|x| *x = self.u8());
            Some(f64::from_le_bytes(b))
                .filter(|x| x.is_finite())
                .unwrap_or(1.0)
        }
    }
}

/// A valid canonical tape made of any bytes (the structured fuzz target's input), a pure function
/// of them: a header (inputs 1..=6, pool constants 0..=4, outputs 1..=3, their values and output
/// nodes), then 5 bytes a node (op, two argument selectors) for at most [`MAX_FUZZ_NODES`] - 1
/// nodes after `input 0`. Every op can appear (the op byte is taken modulo the op count, as in
/// [`random_tape`]), draws below 8; inputs are named `x0, x1, ...`, outputs `y0, y1, ...`.
/// Mutating a byte of a node changes that node only, so the fuzzer explores tapes locally.
pub fn tape_from_bytes(data: &[u8]) -> Tape {
    let mut r = Bytes(data);
    let header = r.u8();
    let n_inputs = 1 + usize::from(header % 6);
    let n_consts = usize::from((header / 6) % 5);
    let n_outputs = 1 + usize::from(r.u8() % 3);
    let values: Vec<f64> = (0..n_inputs).map(|_| r.finite()).collect();
    let consts: Vec<f64> = (0..n_consts).map(|_| r.finite()).collect();
    let outputs: Vec<(String, u32)> = (0..n_outputs)
        .map(|k| (format!("y{k}"), u32::from(r.u16())))
        .collect();
    let mut specs: Vec<NodeSpec> =
        r.0.chunks(5)
            .take(MAX_FUZZ_NODES - 1)
            .map(|c| {
                let mut c = Bytes(c);
                NodeSpec {
                    op: c.u8(),
                    a: u32::from(c.u16()),
                    b: u32::from(c.u16()),
                }
            })
            .collect();
    // At least one node per input (the builder places the inputs it still owes at the end).
    while specs.len() + 1 < n_inputs {
        specs.push(NodeSpec { op: 0, a: 0, b: 0 });
    }
    let names: Vec<String> = (0..n_inputs).map(|i| format!("x{i}")).collect();
    build(&names, &values, &consts, &specs, &outputs)
}

/// Runs one path of a price or reverse-mode [`Schedule`](crate::schedule::Schedule) in f64,
/// statement by statement, and returns its row of leaves (every shift 0: the market alone, as
/// `inputs`): an interpreter of the schedule every printer reads, plain or checkpointed, so a
/// checkpointed schedule can be compared with the plain one bit for bit without a GPU. Values
/// and adjoints follow the statements' rules (`crate::ops::eval`, `eval_step`, the reference's
/// arithmetic), draws `crate::philox` (a re-keyed generator draws the same numbers), scratch
/// slots a per-path array, opaque reads the identity.
///
/// Scopes are kept as the generated code keeps them: a block's declarations die at its end, an
/// assignment goes to the innermost declaration, and reading a value or adjoint that is not
/// defined in scope panics (the schedule's guarantee, module doc of `crate::schedule`).
/// Forward-mode schedules (tangents) are not interpreted.
pub fn run_schedule(
    schedule: &crate::schedule::Schedule,
    inputs: &[f64],
    seed: u64,
    path: u64,
) -> Vec<f64> {
    let mut m = Machine {
        inputs,
        seed,
        path,
        scopes: vec![Scope::default()],
        scratch: vec![None; schedule.storage.scratch as usize],
        row: Vec::new(),
        iteration: 0,
        loop_first: 0,
        bookmarks: vec![None; schedule.storage.local as usize],
    };
    m.block(&schedule.body);
    m.row
}

#[derive(Default)]
struct Scope {
    values: std::collections::HashMap<crate::schedule::Var, Option<f64>>,
    adjoints: std::collections::HashMap<(crate::schedule::Grad, usize), f64>,
}

struct Machine<'a> {
    inputs: &'a [f64],
    seed: u64,
    path: u64,
    scopes: Vec<Scope>,
    scratch: Vec<Option<f64>>,
    row: Vec<f64>,
    /// The enclosing loop's iteration (0 outside loops).
    iteration: u32,
    /// The enclosing loop's first iteration (0 outside loops).
    loop_first: u32,
    /// The path's bookmarks (`None`: not stored yet).
    bookmarks: Vec<Option<f64>>,
}

impl Machine<'_> {
    fn block(&mut self, body: &[crate::schedule::Stmt]) {
        for stmt in body {
            self.stmt(stmt);
        }
    }

    fn read(&self, x: crate::schedule::Operand) -> f64 {
        use crate::schedule::Operand;
        match x {
            Operand::Lit(v) => v,
            Operand::Var(var) => self
                .scopes
                .iter()
                .rev()
                .find_map(|s| s.values.get(&var))
                .copied()
                .flatten()
                .unwrap_or_else(|| panic!("the schedule reads {var:?}, not defined in scope")),
        }
    }

    fn operand(&self, x: Option<crate::schedule::Operand>) -> f64 {
        x.map_or(0.0, |x| self.read(x))
    }

    /// Sets `var`: declared in the innermost scope, or assigned to its innermost declaration.
    fn set(&mut self, var: crate::schedule::Var, value: f64, declare: bool) {
        let scope = if declare {
            self.scopes.last_mut()
        } else {
            self.scopes
                .iter_mut()
                .rev()
                .find(|s| s.values.contains_key(&var))
        };
        let scope = scope.unwrap_or_else(|| panic!("the schedule assigns undeclared {var:?}"));
        scope.values.insert(var, Some(value));
    }

    fn adjoint(&mut self, node: NodeId, lane: usize) -> &mut f64 {
        self.grad(crate::schedule::Grad::Of(node), lane)
    }

    fn grad(&mut self, g: crate::schedule::Grad, lane: usize) -> &mut f64 {
        self.scopes
            .iter_mut()
            .rev()
            .find_map(|s| s.adjoints.get_mut(&(g, lane)))
            .unwrap_or_else(|| panic!("the schedule uses the undeclared adjoint {g:?} lane {lane}"))
    }

    /// The cell of `slot` (for a bookmark, the current iteration's).
    fn cell(&mut self, slot: crate::schedule::Slot) -> &mut Option<f64> {
        use crate::schedule::Class;
        match slot.class {
            Class::Scratch => &mut self.scratch[slot.index as usize],
            Class::Local => {
                let k = (slot.index + self.iteration - self.loop_first) as usize;
                &mut self.bookmarks[k]
            }
        }
    }

    fn stmt(&mut self, stmt: &crate::schedule::Stmt) {
        use crate::ops::{eval, eval_step, Operands};
        use crate::schedule::{Def, Leaf, Stmt, Var};
        use crate::tape::DrawKind;
        match stmt {
            Stmt::Note(_) | Stmt::Rekey => {}
            Stmt::Declare(nodes) => {
                let scope = self.scopes.last_mut().expect("a scope");
                for &v in nodes {
                    scope.values.insert(Var::Value(v), None);
                }
            }
            Stmt::Define { node, def, declare } => {
                let value = match *def {
                    Def::Input(k) => self.inputs[k as usize],
                    Def::Draw {
                        kind,
                        index,
                        stride,
                        ..
                    } => {
                        let index = index + stride * self.iteration;
                        match kind {
                            DrawKind::Normal => {
                                crate::philox::normal_f64(self.seed, self.path, index)
                            }
                            DrawKind::Uniform => {
                                crate::philox::uniform_f64(self.seed, self.path, index)
                            }
                        }
                    }
                    Def::Rule { rule, args } => {
                        let x = Operands {
                            a: self.operand(args[0]),
                            b: self.operand(args[1]),
                            c: 0.0,
                            d: 0.0,
                        };
                        eval(&rule.value, &x)
                    }
                };
                self.set(Var::Value(*node), value, *declare);
            }
            Stmt::Store { var, slot } => {
                let x = self.read(crate::schedule::Operand::Var(*var));
                *self.cell(*slot) = Some(x);
            }
            Stmt::OpaqueRead { node, from } => {
                let value = match from {
                    Some(slot) => self.cell(*slot).unwrap_or_else(|| {
                        panic!(
                            "{slot:?} read before it is written (iteration {})",
                            self.iteration
                        )
                    }),
                    None => self.read(crate::schedule::Operand::Var(Var::Value(*node))),
                };
                self.set(Var::Copy(*node), value, true);
            }
            Stmt::DeclareAdjoints { grad, lanes } => {
                let scope = self.scopes.last_mut().expect("a scope");
                for &lane in lanes {
                    scope.adjoints.insert((*grad, lane), 0.0);
                }
            }
            Stmt::MoveAdjoint { to, from, lane } => {
                let x = *self.grad(*from, *lane);
                *self.grad(*to, *lane) = x;
            }
            Stmt::Seed { node, lane } => *self.adjoint(*node, *lane) = 1.0,
            Stmt::Adjoint(adj) => {
                // Only what the steps that run read (`Adjoint::reads`): the others need not be
                // in scope (NaN stands in for them; no step that runs reads it).
                let (ra, rb, rc) = adj.rule.reads(adj.to.map(|t| t.is_some()));
                let x = Operands {
                    a: if ra { self.operand(adj.x[0]) } else { f64::NAN },
                    b: if rb { self.operand(adj.x[1]) } else { f64::NAN },
                    c: if rc { self.operand(adj.x[2]) } else { f64::NAN },
                    d: *self.adjoint(adj.node, adj.lane),
                };
                for step in adj.rule.adjoint {
                    let mut deltas = Vec::new();
                    eval_step(step, &x, &mut |arg, sub, delta| {
                        deltas.push((arg, sub, delta))
                    });
                    for (arg, sub, delta) in deltas {
                        if let Some(to) = adj.to[arg.index()] {
                            let a = self.grad(to, adj.lane);
                            *a = if sub { *a - delta } else { *a + delta };
                        }
                    }
                }
            }
            Stmt::Tangent(t) => {
                // The steps' deltas with D the tangent of the argument each feeds, summed in
                // step order (not the C printers' fused form: this interprets the schedule).
                let (ra, rb, rc) = t.rule.reads(t.from.map(|f| f.is_some()));
                let mut x = Operands {
                    a: if ra { self.operand(t.x[0]) } else { f64::NAN },
                    b: if rb { self.operand(t.x[1]) } else { f64::NAN },
                    c: if rc { self.operand(t.x[2]) } else { f64::NAN },
                    d: 0.0,
                };
                let mut sum = 0.0;
                for step in t.rule.adjoint {
                    for (k, from) in t.from.iter().enumerate() {
                        let Some(from) = *from else { continue };
                        x.d = self.read(from);
                        eval_step(step, &x, &mut |arg, sub, delta| {
                            if arg.index() == k {
                                sum = if sub { sum - delta } else { sum + delta };
                            }
                        });
                    }
                }
                self.set(Var::Tangent(t.node, t.lane), sum, true);
            }
            Stmt::Loop(l) => {
                for c in &l.carried {
                    let x = self.read(c.init);
                    self.set(c.var, x, true);
                }
                self.loop_first = l.first;
                let order: Box<dyn Iterator<Item = u32>> = if l.reverse {
                    Box::new((l.first..l.first + l.count).rev())
                } else {
                    Box::new(l.first..l.first + l.count)
                };
                for i in order {
                    self.iteration = i;
                    self.scopes.push(Scope::default());
                    self.block(&l.body);
                    let next: Vec<f64> = l.carried.iter().map(|c| self.read(c.next)).collect();
                    self.scopes.pop();
                    for (c, x) in l.carried.iter().zip(next) {
                        self.set(c.var, x, false);
                    }
                }
                self.iteration = 0;
                self.loop_first = 0;
            }
            Stmt::Block(b) => {
                self.scopes.push(Scope::default());
                self.block(&b.body);
                self.scopes.pop();
            }
            Stmt::Leaves(leaves) => {
                let mut row: Vec<f64> = Vec::with_capacity(leaves.len());
                for leaf in leaves {
                    let x =
                        match *leaf {
                            Leaf::Value(x) => self.read(x),
                            Leaf::Adjoint(node, lane) => *self.adjoint(node, lane),
                            Leaf::Zero => 0.0,
                            // About shift 0 (the market alone was passed): (x - 0)^2 = x * x.
                            Leaf::Square { of, .. } => row[of] * row[of],
                            Leaf::NonFinite { first, end } => {
                                let bad = leaves[first..end].iter().zip(&row[first..end]).any(
                                    |(l, x)| {
                                        matches!(l, Leaf::Value(_) | Leaf::Adjoint(..))
                                            && !x.is_finite()
                                    },
                                );
                                if bad {
                                    row[first..end].iter_mut().for_each(|x| *x = 0.0);
                                }
                                f64::from(u8::from(bad))
                            }
                        };
                    row.push(x);
                }
                self.row = row;
            }
        }
    }
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
#[cfg(test)]
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
    fn any_bytes_make_a_valid_canonical_tape() {
        let mut bytes: Vec<u8> = Vec::new();
        let mut rng = SplitMix(3);
        for len in 0..600usize {
            bytes.truncate(0);
            bytes.extend((0..len * 3).map(|_| rng.next() as u8));
            let t = tape_from_bytes(&bytes);
            assert!(t.nodes.len() <= MAX_FUZZ_NODES);
            assert_eq!(t, tape_from_bytes(&bytes));
            assert_valid_canonical(&t);
            crate::verify::check(&t).unwrap();
            assert!(crate::format::is_canonical(&t));
        }
        assert_eq!(tape_from_bytes(&[]).nodes.len(), 1);
        let long = tape_from_bytes(&[7u8; 5000]);
        assert_eq!(long.nodes.len(), MAX_FUZZ_NODES);
    }

    /// The interpreter against the reference (plain schedules) and checkpointed schedules against
    /// plain ones, bit for bit, on random tapes of every op.
    #[test]
    fn checkpointed_schedules_run_the_plain_schedules_bits() {
        use crate::emit::manifest::Mode;
        use crate::plan::{Checkpoint, SegmentOptions};
        use crate::schedule::{Schedule, ScheduleOptions};
        let mut checked = 0;
        for seed in 0..200u64 {
            let tape = random_tape(seed, 2 + (seed as usize * 13) % 120);
            let v = verified(&tape);
            let inputs: Vec<f64> = tape.inputs.iter().map(|i| i.value).collect();
            for mode in [Mode::Price, Mode::Reverse] {
                let plain = Schedule::plain(&v, ScheduleOptions::new(mode));
                for path in 0..3 {
                    let want = run_schedule(&plain, &inputs, seed, path);
                    let r = crate::reference::evaluate_path(&v, &inputs, seed, path).unwrap();
                    let mut reference = Vec::new();
                    for (o, &y) in r.outputs.iter().enumerate() {
                        let g: &[f64] = if mode.has_greeks() { &r.greeks[o] } else { &[] };
                        let shifts = vec![0.0; 1 + g.len()];
                        reference.extend(crate::report::output_leaves(y, g, &shifts, true));
                    }
                    assert_eq!(want.len(), reference.len());
                    for (k, (a, b)) in want.iter().zip(&reference).enumerate() {
                        assert!(
                            a.to_bits() == b.to_bits(),
                            "seed {seed} {mode:?} path {path} leaf {k}: schedule {a:e} reference {b:e}\n{}",
                            crate::format::write_text(&tape)
                        );
                    }
                    for strategy in [Checkpoint::Registers, Checkpoint::Scratch] {
                        for segments in [2, 3, 7] {
                            let o = SegmentOptions {
                                strategy,
                                segments: Some(segments),
                                ..SegmentOptions::default()
                            };
                            let plan = crate::passes::plan(&v, &o);
                            let s = Schedule::build(&v, &plan, ScheduleOptions::new(mode));
                            let got = run_schedule(&s, &inputs, seed, path);
                            let bits =
                                |r: &[f64]| r.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                            assert_eq!(
                                bits(&got),
                                bits(&want),
                                "seed {seed} {mode:?} {strategy:?}/{segments}"
                            );
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert!(checked > 1000);
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

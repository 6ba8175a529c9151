//! Emitter tests: structure of each kernel kind, counts in the source, determinism, literals,
//! errors, and the insta snapshots under `snapshots/<target>/`.

use super::*;
use crate::passes::{activity, liveness};
use crate::plan::{Checkpoint, OpacityPlan, Plan, Segment, SegmentPlan};
use crate::tape::{BinaryOp, DrawKind, Input, Node, NodeId, Output, Tape, UnaryOp};
use std::collections::BTreeSet;

// ---------------------------------------------------------------------------------------------
// Fixtures: tapes built by hand, and a test-only planner that follows the contract of
// `crate::plan` (and of `passes::plan` on branch `passes`) for cuts given explicitly.

struct Rec {
    tape: Tape,
}

impl Rec {
    fn new() -> Rec {
        Rec { tape: Tape::default() }
    }
    fn push(&mut self, node: Node) -> NodeId {
        self.tape.nodes.push(node);
        NodeId(self.tape.nodes.len() as u32 - 1)
    }
    fn input(&mut self, name: &str, value: f64) -> NodeId {
        self.tape.inputs.push(Input { name: name.into(), value });
        let k = self.tape.inputs.len() as u32 - 1;
        self.push(Node::Input(k))
    }
    fn c(&mut self, x: f64) -> NodeId {
        self.tape.consts.push(x);
        let k = self.tape.consts.len() as u32 - 1;
        self.push(Node::Const(k))
    }
    fn normal(&mut self, k: u32) -> NodeId {
        self.push(Node::Draw(DrawKind::Normal, k))
    }
    fn bin(&mut self, op: BinaryOp, a: NodeId, b: NodeId) -> NodeId {
        self.push(Node::Binary(op, a, b))
    }
    fn un(&mut self, op: UnaryOp, a: NodeId) -> NodeId {
        self.push(Node::Unary(op, a))
    }
    fn finish(mut self, outputs: &[(&str, NodeId)]) -> Tape {
        self.tape.outputs = outputs.iter().map(|(n, v)| Output { name: (*n).into(), node: *v }).collect();
        self.tape.n_draws = self.tape.draws_used();
        self.tape
    }
}

/// European call: 24 nodes, one draw.
pub(super) fn european() -> Tape {
    use BinaryOp::*;
    let mut r = Rec::new();
    let spot = r.input("spot", 100.0);
    let strike = r.input("strike", 100.0);
    let vol = r.input("vol", 0.2);
    let rate = r.input("rate", 0.05);
    let mat = r.input("maturity", 1.0);
    let v2 = r.bin(Mul, vol, vol);
    let half = r.c(0.5);
    let hv2 = r.bin(Mul, v2, half);
    let mu = r.bin(Sub, rate, hv2);
    let drift = r.bin(Mul, mu, mat);
    let sq = r.un(UnaryOp::Sqrt, mat);
    let vs = r.bin(Mul, vol, sq);
    let z = r.normal(0);
    let dz = r.bin(Mul, vs, z);
    let x = r.bin(Add, drift, dz);
    let g = r.un(UnaryOp::Exp, x);
    let st = r.bin(Mul, spot, g);
    let ex = r.bin(Sub, st, strike);
    let zero = r.c(0.0);
    let pay = r.bin(Max, ex, zero);
    let rt = r.bin(Mul, rate, mat);
    let nrt = r.un(UnaryOp::Neg, rt);
    let df = r.un(UnaryOp::Exp, nrt);
    let price = r.bin(Mul, pay, df);
    r.finish(&[("price", price)])
}

/// Arithmetic Asian call with `steps` monitoring dates: 15 + 6 * steps + 9 nodes (1536 at 252),
/// laid out as the seed article's listing (step k occupies nodes 15 + 6k .. 21 + 6k).
pub(super) fn asian(steps: u32) -> Tape {
    use BinaryOp::*;
    let mut r = Rec::new();
    let spot = r.input("spot", 100.0);
    let strike = r.input("strike", 100.0);
    let vol = r.input("vol", 0.2);
    let rate = r.input("rate", 0.05);
    let mat = r.input("maturity", 1.0);
    let v2 = r.bin(Mul, vol, vol);
    let half = r.c(0.5);
    let hv2 = r.bin(Mul, v2, half);
    let mu = r.bin(Sub, rate, hv2);
    let inv_n = r.c(1.0 / f64::from(steps));
    let dt = r.bin(Mul, mat, inv_n);
    let drift = r.bin(Mul, mu, dt);
    let sdt = r.un(UnaryOp::Sqrt, dt);
    let vs = r.bin(Mul, vol, sdt);
    let mut sum = r.c(0.0);
    let mut s = spot;
    for k in 0..steps {
        let z = r.normal(k);
        let dz = r.bin(Mul, vs, z);
        let x = r.bin(Add, drift, dz);
        let g = r.un(UnaryOp::Exp, x);
        s = r.bin(Mul, s, g);
        sum = r.bin(Add, sum, s);
    }
    let n = r.c(f64::from(steps));
    let avg = r.bin(Div, sum, n);
    let ex = r.bin(Sub, avg, strike);
    let zero = r.c(0.0);
    let pay = r.bin(Max, ex, zero);
    let rt = r.bin(Mul, rate, mat);
    let nrt = r.un(UnaryOp::Neg, rt);
    let df = r.un(UnaryOp::Exp, nrt);
    let price = r.bin(Mul, pay, df);
    r.finish(&[("price", price)])
}

/// The cuts at the starts of the Asian's steps `floor(s * steps / segments)`, s = 1..segments.
fn asian_cuts(steps: u32, segments: u32) -> Vec<u32> {
    (1..segments).map(|s| 15 + 6 * (s * steps / segments)).collect()
}

fn is_const(tape: &Tape, v: NodeId) -> bool {
    matches!(tape.node(v), Node::Const(_))
}

/// The forward values an adjoint rule reads (TAPE-FORMAT.md).
fn adjoint_reads(node: &Node, id: NodeId) -> Vec<NodeId> {
    match *node {
        Node::Binary(BinaryOp::Mul | BinaryOp::Max | BinaryOp::Min, a, b) => vec![a, b],
        Node::Binary(BinaryOp::Div, _, b) => vec![b, id],
        Node::Unary(UnaryOp::Exp | UnaryOp::Sqrt, _) => vec![id],
        Node::Unary(UnaryOp::Log | UnaryOp::Abs, a) => vec![a],
        _ => vec![],
    }
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
    let crossing: Vec<u32> = cuts.iter().map(|&c| (0..n).filter(|&v| crosses(v, c)).count() as u32).collect();
    let crossing_values: BTreeSet<NodeId> =
        (0..n).filter(|&v| cuts.iter().any(|&c| crosses(v, c))).map(|v| NodeId(v as u32)).collect();
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
        let mut draws = Vec::new();
        let mut reads = BTreeSet::new();
        for v in range.clone().map(NodeId) {
            if !live[v.index()] {
                continue;
            }
            let node = tape.node(v);
            for a in node.args() {
                if a.0 < range.start && is_p(a) && !is_const(tape, a) {
                    bookmarks.insert(a);
                }
            }
            let recomputed = !is_const(tape, v) && !is_p(v);
            if matches!(node, Node::Draw(..)) && !is_p(v) {
                draws.push(v);
            }
            if recomputed {
                reads.extend(node.args());
            }
            if act.active[v.index()] {
                reads.extend(adjoint_reads(node, v));
            }
        }
        let reads: Vec<NodeId> = if checkpointed {
            reads.into_iter().filter(|&v| is_p(v) && !is_const(tape, v)).collect()
        } else {
            Vec::new()
        };
        rekey.push(checkpointed && !draws.is_empty());
        opaque_reads.push(reads);
        segments.push(Segment { range, bookmarks: bookmarks.into_iter().collect(), draws });
    }
    let strategy = if checkpointed { strategy } else { Checkpoint::Off };
    Plan {
        liveness: liveness(tape),
        activity: act,
        segments: SegmentPlan {
            strategy,
            segments,
            cuts: cuts.iter().map(|&c| NodeId(c)).collect(),
            crossing,
            persistent: persistent.into_iter().collect(),
            scratch_slots: if strategy == Checkpoint::Scratch { crossing_values.into_iter().collect() } else { Vec::new() },
        },
        opacity: OpacityPlan { opaque_reads, rekey },
    }
}

pub(super) fn plain_plan(tape: &Tape) -> Plan {
    plan_with_cuts(tape, &[], Checkpoint::Off)
}

pub(super) fn opts(target: Target, mode: Mode) -> EmitOptions {
    EmitOptions { target, mode, ..EmitOptions::default() }
}

#[test]
fn smoke_print() {
    let t = european();
    let k = emit(&t, &plain_plan(&t), &EmitOptions { annotate: true, ..opts(Target::Cuda, Mode::Reverse) }).unwrap();
    println!("{}", k.source);
    let t = asian(4);
    let k = emit(&t, &plan_with_cuts(&t, &asian_cuts(4, 2), Checkpoint::Registers), &opts(Target::Glsl, Mode::Reverse)).unwrap();
    println!("{}", k.source);
    println!("{}", serde_json::to_string_pretty(&k.manifest).unwrap());
}

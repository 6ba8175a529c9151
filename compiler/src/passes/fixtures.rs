//! Tapes built in code for the passes' tests: the arithmetic Asian (the node layout of the recorder
//! on branch `record`), a one-draw European, and a generator of random valid tapes.
//!
//! TODO(lead): switch to `crate::products` and `crate::testing::arb_tape()` once they are on main.

use crate::tape::{BinaryOp, DrawKind, Input, Node, NodeId, Output, Tape, UnaryOp};
use proptest::prelude::*;

struct Builder {
    tape: Tape,
}

impl Builder {
    fn new() -> Self {
        Builder { tape: Tape::default() }
    }
    fn push(&mut self, node: Node) -> NodeId {
        self.tape.nodes.push(node);
        NodeId(self.tape.nodes.len() as u32 - 1)
    }
    fn input(&mut self, name: &str, value: f64) -> NodeId {
        let i = self.tape.inputs.len() as u32;
        self.tape.inputs.push(Input { name: name.into(), value });
        self.push(Node::Input(i))
    }
    fn constant(&mut self, x: f64) -> NodeId {
        let k = self.tape.consts.len() as u32;
        self.tape.consts.push(x);
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
    fn finish(mut self, out: NodeId) -> Tape {
        self.tape.outputs.push(Output { name: "price".into(), node: out });
        self.tape.n_draws = self.tape.draws_used();
        self.tape
    }
}

/// The arithmetic Asian call over `steps` steps: 15 + 6·steps + 9 nodes, output the last node.
pub fn asian(steps: u32) -> Tape {
    use BinaryOp::*;
    let mut b = Builder::new();
    let spot = b.input("spot", 100.0);
    let strike = b.input("strike", 100.0);
    let vol = b.input("vol", 0.2);
    let rate = b.input("rate", 0.05);
    let maturity = b.input("maturity", 1.0);
    let v2 = b.bin(Mul, vol, vol); // 5
    let half = b.constant(0.5); // 6
    let hv2 = b.bin(Mul, half, v2); // 7
    let mu = b.bin(Sub, rate, hv2); // 8
    let nsteps = b.constant(steps as f64); // 9
    let dt = b.bin(Div, maturity, nsteps); // 10
    let drift = b.bin(Mul, mu, dt); // 11
    let sqdt = b.un(UnaryOp::Sqrt, dt); // 12
    let vsq = b.bin(Mul, vol, sqdt); // 13
    let zero = b.constant(0.0); // 14
    let (mut s, mut sum) = (spot, zero);
    for k in 0..steps {
        let z = b.normal(k);
        let dz = b.bin(Mul, vsq, z);
        let x = b.bin(Add, drift, dz);
        let g = b.un(UnaryOp::Exp, x);
        s = b.bin(Mul, s, g);
        sum = b.bin(Add, sum, s);
    }
    let n2 = b.constant(steps as f64);
    let avg = b.bin(Div, sum, n2);
    let m = b.bin(Sub, avg, strike);
    let z0 = b.constant(0.0);
    let pay = b.bin(Max, m, z0);
    let rt = b.bin(Mul, rate, maturity);
    let nrt = b.un(UnaryOp::Neg, rt);
    let df = b.un(UnaryOp::Exp, nrt);
    let price = b.bin(Mul, pay, df);
    b.finish(price)
}

/// A European call with one draw: 24 nodes.
pub fn european() -> Tape {
    use BinaryOp::*;
    let mut b = Builder::new();
    let spot = b.input("spot", 100.0);
    let strike = b.input("strike", 100.0);
    let vol = b.input("vol", 0.2);
    let rate = b.input("rate", 0.05);
    let t = b.input("maturity", 1.0);
    let v2 = b.bin(Mul, vol, vol);
    let half = b.constant(0.5);
    let hv2 = b.bin(Mul, half, v2);
    let mu = b.bin(Sub, rate, hv2);
    let drift = b.bin(Mul, mu, t);
    let sq = b.un(UnaryOp::Sqrt, t);
    let vsq = b.bin(Mul, vol, sq);
    let z = b.normal(0);
    let dz = b.bin(Mul, vsq, z);
    let x = b.bin(Add, drift, dz);
    let g = b.un(UnaryOp::Exp, x);
    let st = b.bin(Mul, spot, g);
    let m = b.bin(Sub, st, strike);
    let z0 = b.constant(0.0);
    let pay = b.bin(Max, m, z0);
    let rt = b.bin(Mul, rate, t);
    let nrt = b.un(UnaryOp::Neg, rt);
    let df = b.un(UnaryOp::Exp, nrt);
    let price = b.bin(Mul, pay, df);
    b.finish(price)
}

/// Random valid tapes: 1..4 inputs first, then 0..max_nodes nodes of any op with backward
/// arguments (leaves interleaved), 1..3 outputs anywhere. Dead nodes, constant outputs and long
/// reads across the tape all occur.
pub fn arb_tape(max_nodes: usize) -> impl Strategy<Value = Tape> {
    let n_inputs = 1usize..4;
    let body = prop::collection::vec((0u8..15, any::<u32>(), any::<u32>(), any::<u32>()), 0..max_nodes);
    let outs = prop::collection::vec(any::<u32>(), 1..4);
    (n_inputs, body, outs).prop_map(|(ni, body, outs)| {
        let mut t = Tape::default();
        for i in 0..ni {
            t.inputs.push(Input { name: format!("x{i}"), value: 1.0 + i as f64 });
            t.nodes.push(Node::Input(i as u32));
        }
        let mut draws = 0u32;
        for (sel, r1, r2, r3) in body {
            let len = t.nodes.len() as u32;
            // Bias arguments towards recent nodes (chains), with some long reads.
            let pick = |r: u32| {
                if r.is_multiple_of(4) {
                    NodeId(r / 4 % len)
                } else {
                    NodeId(len - 1 - (r / 4 % len.min(6)))
                }
            };
            let node = match sel {
                0 => {
                    t.consts.push((r1 % 7) as f64 * 0.5);
                    Node::Const(t.consts.len() as u32 - 1)
                }
                1 => {
                    draws += 1;
                    Node::Draw(DrawKind::Normal, draws - 1)
                }
                2 => {
                    draws += 1;
                    Node::Draw(DrawKind::Uniform, draws - 1)
                }
                3..=8 => {
                    let op = [
                        BinaryOp::Add,
                        BinaryOp::Sub,
                        BinaryOp::Mul,
                        BinaryOp::Div,
                        BinaryOp::Max,
                        BinaryOp::Min,
                    ][(sel - 3) as usize];
                    Node::Binary(op, pick(r1), pick(r2))
                }
                _ => {
                    let op =
                        [UnaryOp::Neg, UnaryOp::Exp, UnaryOp::Log, UnaryOp::Sqrt, UnaryOp::Abs, UnaryOp::Exp]
                            [((sel - 9) as usize + r3 as usize) % 6];
                    Node::Unary(op, pick(r1))
                }
            };
            t.nodes.push(node);
        }
        let n = t.nodes.len() as u32;
        for (k, o) in outs.iter().enumerate() {
            // Mostly the last node, sometimes any node.
            let node = if k == 0 || o % 3 != 0 { n - 1 - (o / 3 % n.min(3)) } else { o / 3 % n };
            t.outputs.push(Output { name: format!("y{k}"), node: NodeId(node) });
        }
        t.n_draws = t.draws_used();
        t
    })
}

#[test]
fn asian_layout() {
    let t = asian(252);
    assert_eq!(t.len(), 1536);
    assert_eq!(t.nodes[15], Node::Draw(DrawKind::Normal, 0));
    assert_eq!(t.nodes[18], Node::Unary(UnaryOp::Exp, NodeId(17)));
    assert_eq!(t.nodes[19], Node::Binary(BinaryOp::Mul, NodeId(0), NodeId(18)));
    assert_eq!(t.nodes[20], Node::Binary(BinaryOp::Add, NodeId(14), NodeId(19)));
    assert_eq!(t.nodes[1535], Node::Binary(BinaryOp::Mul, NodeId(1531), NodeId(1534)));
    assert_eq!(t.n_draws, 252);
    assert_eq!(european().len(), 24);
}

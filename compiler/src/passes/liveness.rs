use crate::plan::Liveness;
use crate::tape::Tape;

/// Each node's last forward reader (outputs are read at position n) and the number of values
/// alive before each position: `alive[p]` counts nodes v < p with `last_use[v] >= p`.
pub fn liveness(tape: &Tape) -> Liveness {
    let n = tape.len();
    let mut last_use: Vec<Option<u32>> = vec![None; n];
    for (i, node) in tape.nodes.iter().enumerate() {
        for a in node.args() {
            last_use[a.index()] = Some(i as u32);
        }
    }
    for out in &tape.outputs {
        last_use[out.node.index()] = Some(n as u32);
    }
    // A value is alive on positions def+1 ..= last_use: a difference array over 0..=n.
    let mut delta = vec![0i64; n + 2];
    for (v, last) in last_use.iter().enumerate() {
        if let Some(last) = *last {
            delta[v + 1] += 1;
            delta[last as usize + 1] -= 1;
        }
    }
    let mut alive = Vec::with_capacity(n + 1);
    let mut count = 0i64;
    for d in &delta[..=n] {
        count += d;
        alive.push(count as u32);
    }
    Liveness { last_use, alive }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tape::{BinaryOp, Input, Node, NodeId, Output, UnaryOp};

    #[test]
    fn last_use_and_alive() {
        // %0 = input a; %1 = input b; %2 = mul %0 %1; %3 = exp %2; %4 = add %3 %0
        let tape = Tape {
            inputs: vec![
                Input {
                    name: "a".into(),
                    value: 1.0,
                },
                Input {
                    name: "b".into(),
                    value: 2.0,
                },
            ],
            outputs: vec![Output {
                name: "y".into(),
                node: NodeId(4),
            }],
            consts: vec![],
            nodes: vec![
                Node::Input(0),
                Node::Input(1),
                Node::Binary(BinaryOp::Mul, NodeId(0), NodeId(1)),
                Node::Unary(UnaryOp::Exp, NodeId(2)),
                Node::Binary(BinaryOp::Add, NodeId(3), NodeId(0)),
            ],
            n_draws: 0,
        };
        let l = liveness(&tape);
        assert_eq!(l.last_use, [Some(4), Some(2), Some(3), Some(4), Some(5)]);
        // before %0: nothing; before %2: a, b; before %3: a, %2; before %4: a, %3; end: %4
        assert_eq!(l.alive, [0, 1, 2, 2, 2, 1]);
    }
}

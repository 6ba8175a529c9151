use crate::plan::Activity;
use crate::tape::{Node, Tape};

/// Which nodes depend on an input (`active`) and which reach an output (`live`).
pub fn activity(tape: &Tape) -> Activity {
    let n = tape.len();
    let mut active = vec![false; n];
    for (i, node) in tape.nodes.iter().enumerate() {
        active[i] = matches!(node, Node::Input(_)) || node.args().any(|a| active[a.index()]);
    }
    let mut live = vec![false; n];
    for out in &tape.outputs {
        live[out.node.index()] = true;
    }
    for (i, node) in tape.nodes.iter().enumerate().rev() {
        if live[i] {
            for a in node.args() {
                live[a.index()] = true;
            }
        }
    }
    Activity { active, live }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tape::{BinaryOp, DrawKind, Input, NodeId, Output, UnaryOp};

    #[test]
    fn active_and_live() {
        // %0 = input x; %1 = const; %2 = normal 0; %3 = mul %1 %2 (inactive, live);
        // %4 = add %0 %3 (active, live); %5 = exp %0 (active, dead)
        let tape = Tape {
            inputs: vec![Input {
                name: "x".into(),
                value: 1.0,
            }],
            outputs: vec![Output {
                name: "y".into(),
                node: NodeId(4),
            }],
            consts: vec![2.0],
            nodes: vec![
                Node::Input(0),
                Node::Const(0),
                Node::Draw(DrawKind::Normal, 0),
                Node::Binary(BinaryOp::Mul, NodeId(1), NodeId(2)),
                Node::Binary(BinaryOp::Add, NodeId(0), NodeId(3)),
                Node::Unary(UnaryOp::Exp, NodeId(0)),
            ],
            n_draws: 1,
        };
        let a = activity(&tape);
        assert_eq!(a.active, [true, false, false, false, true, true]);
        assert_eq!(a.live, [true, true, true, true, true, false]);
    }
}

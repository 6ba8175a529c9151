use crate::ops;
use crate::plan::Activity;
use crate::tape::{Node, Tape};

/// Which nodes carry a derivative (`active`) and which reach an output (`live`).
///
/// `active[v]` iff v depends differentiably on an input (an input, or an op that passes a
/// derivative, `ops::Rule::is_differentiable`, reading an active node) *and* some output depends
/// differentiably on v (v is an output, or a differentiable op reading v is such a node): exactly
/// the nodes whose adjoint can be nonzero. Every format-1 op passes a derivative, so there the
/// second half is liveness; a `lt` feeding a payoff stops both halves.
pub fn activity(tape: &Tape) -> Activity {
    let n = tape.len();
    let differentiable: Vec<bool> = tape
        .nodes
        .iter()
        .map(|node| ops::rule(node.op()).is_some_and(|r| r.is_differentiable()))
        .collect();
    let mut varied = vec![false; n];
    for (i, node) in tape.nodes.iter().enumerate() {
        varied[i] = matches!(node, Node::Input(_))
            || (differentiable[i] && node.args().any(|a| varied[a.index()]));
    }
    let mut live = vec![false; n];
    let mut useful = vec![false; n];
    for out in &tape.outputs {
        live[out.node.index()] = true;
        useful[out.node.index()] = true;
    }
    for (i, node) in tape.nodes.iter().enumerate().rev() {
        if live[i] {
            for a in node.args() {
                live[a.index()] = true;
                if useful[i] && differentiable[i] {
                    useful[a.index()] = true;
                }
            }
        }
    }
    let active = (0..n).map(|i| varied[i] && useful[i]).collect();
    Activity { active, live }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tape::{BinaryOp, DrawKind, Input, NodeId, Output, UnaryOp};

    #[test]
    fn active_and_live() {
        // %0 = input x; %1 = const; %2 = normal 0; %3 = mul %1 %2 (inactive, live);
        // %4 = add %0 %3 (active, live); %5 = exp %0 (dead, so no output needs its adjoint)
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
        assert_eq!(a.active, [true, false, false, false, true, false]);
        assert_eq!(a.live, [true, true, true, true, true, false]);
    }
}

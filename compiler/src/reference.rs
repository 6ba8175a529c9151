//! The f64 reference: TAPE-FORMAT.md evaluated draw by draw, forward and adjoint, with no cleverness.
//!
//! For one path: a forward sweep computes every node's value in f64 (draws from `philox::normal_f64`
//! and `philox::uniform_f64`); then, for each output separately, a reverse sweep starts from adjoint 1
//! at the output node and visits, in reverse order, exactly the nodes the output depends on (its
//! backward cone), applying the adjoint rules of TAPE-FORMAT.md literally:
//!
//! ```text
//! add: da += d; db += d          sub: da += d; db -= d        mul: da += d*b; db += d*a
//! div: da += d/b; db -= d*c/b    max: to a when a >= b, else to b;  min: to a when a <= b, else to b
//! neg: da -= d                   exp: da += d*c               log: da += d/a
//! sqrt: da += d*0.5/c            abs: da += d*sign(a), sign(0) = 0 (and sign(NaN) = 0)
//! input i: greek[i] += d
//! ```
//!
//! (`d*c/b` is `(d*c)/b`, `d*0.5/c` is `(d*0.5)/c`.) Nodes outside the output's cone are never
//! visited, so a non-finite value elsewhere on the tape cannot leak into this output's Greeks.
//! `evaluate` sums paths in the fixed order of `report` and builds the `Report`.

use crate::philox::{normal_f64, uniform_f64};
use crate::report::{OutputSums, Report, ReportError};
use crate::tape::{BinaryOp, DrawKind, Node, Tape, UnaryOp};

/// Why the reference could not evaluate a tape.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReferenceError {
    #[error("the tape has {expected} inputs but {got} input values were given")]
    InputCount { expected: usize, got: usize },
    #[error("node %{node}: {problem}")]
    Malformed { node: usize, problem: String },
    #[error("output {name} names node %{node}, but the tape has {len} nodes")]
    OutputRange { name: String, node: u32, len: usize },
    #[error(transparent)]
    Report(#[from] ReportError),
}

/// One path's results: `outputs[o]` and `greeks[o][i]` = d output o / d input i.
#[derive(Clone, Debug, PartialEq)]
pub struct PathResult {
    pub outputs: Vec<f64>,
    pub greeks: Vec<Vec<f64>>,
}

/// The recorded value of every input, in input order (the default market).
pub fn recorded_inputs(tape: &Tape) -> Vec<f64> {
    tape.inputs.iter().map(|i| i.value).collect()
}

fn check(tape: &Tape, inputs: &[f64]) -> Result<(), ReferenceError> {
    if inputs.len() != tape.inputs.len() {
        return Err(ReferenceError::InputCount {
            expected: tape.inputs.len(),
            got: inputs.len(),
        });
    }
    for (i, node) in tape.nodes.iter().enumerate() {
        let bad = |problem: String| Err(ReferenceError::Malformed { node: i, problem });
        match *node {
            Node::Input(k) if k as usize >= inputs.len() => {
                return bad(format!("input index {k} out of range"))
            }
            Node::Const(k) if k as usize >= tape.consts.len() => {
                return bad(format!("const index {k} out of range"));
            }
            _ => {}
        }
        if let Some(a) = node.args().find(|a| a.index() >= i) {
            return bad(format!("argument {a} does not point backwards"));
        }
    }
    for o in &tape.outputs {
        if o.node.index() >= tape.nodes.len() {
            return Err(ReferenceError::OutputRange {
                name: o.name.clone(),
                node: o.node.0,
                len: tape.nodes.len(),
            });
        }
    }
    Ok(())
}

fn sign(a: f64) -> f64 {
    if a > 0.0 {
        1.0
    } else if a < 0.0 {
        -1.0
    } else {
        0.0
    }
}

fn forward(tape: &Tape, inputs: &[f64], seed: u64, path: u64) -> Vec<f64> {
    let mut v: Vec<f64> = Vec::with_capacity(tape.nodes.len());
    for node in &tape.nodes {
        let x = match *node {
            Node::Input(k) => inputs[k as usize],
            Node::Const(k) => tape.consts[k as usize],
            Node::Draw(DrawKind::Normal, k) => normal_f64(seed, path, k),
            Node::Draw(DrawKind::Uniform, k) => uniform_f64(seed, path, k),
            Node::Unary(op, a) => {
                let a = v[a.index()];
                match op {
                    UnaryOp::Neg => -a,
                    UnaryOp::Exp => a.exp(),
                    UnaryOp::Log => a.ln(),
                    UnaryOp::Sqrt => a.sqrt(),
                    UnaryOp::Abs => a.abs(),
                }
            }
            Node::Binary(op, a, b) => {
                let (a, b) = (v[a.index()], v[b.index()]);
                match op {
                    BinaryOp::Add => a + b,
                    BinaryOp::Sub => a - b,
                    BinaryOp::Mul => a * b,
                    BinaryOp::Div => a / b,
                    BinaryOp::Max => {
                        if a >= b {
                            a
                        } else {
                            b
                        }
                    }
                    BinaryOp::Min => {
                        if a <= b {
                            a
                        } else {
                            b
                        }
                    }
                }
            }
        };
        v.push(x);
    }
    v
}

/// d (node `out`) / d input, for every input, by one reverse sweep over `out`'s backward cone.
fn reverse(tape: &Tape, v: &[f64], out: usize, n_inputs: usize) -> Vec<f64> {
    let mut cone = vec![false; out + 1];
    cone[out] = true;
    for i in (0..=out).rev() {
        if cone[i] {
            for a in tape.nodes[i].args() {
                cone[a.index()] = true;
            }
        }
    }
    let mut adj = vec![0.0f64; out + 1];
    adj[out] = 1.0;
    let mut greeks = vec![0.0f64; n_inputs];
    for i in (0..=out).rev() {
        if !cone[i] {
            continue;
        }
        let d = adj[i];
        let c = v[i];
        match tape.nodes[i] {
            Node::Input(k) => greeks[k as usize] += d,
            Node::Const(_) | Node::Draw(..) => {}
            Node::Unary(op, a) => {
                let (ai, av) = (a.index(), v[a.index()]);
                match op {
                    UnaryOp::Neg => adj[ai] -= d,
                    UnaryOp::Exp => adj[ai] += d * c,
                    UnaryOp::Log => adj[ai] += d / av,
                    UnaryOp::Sqrt => adj[ai] += d * 0.5 / c,
                    UnaryOp::Abs => adj[ai] += d * sign(av),
                }
            }
            Node::Binary(op, a, b) => {
                let (ai, bi) = (a.index(), b.index());
                let (av, bv) = (v[ai], v[bi]);
                match op {
                    BinaryOp::Add => {
                        adj[ai] += d;
                        adj[bi] += d;
                    }
                    BinaryOp::Sub => {
                        adj[ai] += d;
                        adj[bi] -= d;
                    }
                    BinaryOp::Mul => {
                        adj[ai] += d * bv;
                        adj[bi] += d * av;
                    }
                    BinaryOp::Div => {
                        adj[ai] += d / bv;
                        adj[bi] -= d * c / bv;
                    }
                    BinaryOp::Max => {
                        if av >= bv {
                            adj[ai] += d;
                        } else {
                            adj[bi] += d;
                        }
                    }
                    BinaryOp::Min => {
                        if av <= bv {
                            adj[ai] += d;
                        } else {
                            adj[bi] += d;
                        }
                    }
                }
            }
        }
    }
    greeks
}

/// Path `path`'s outputs and their derivatives with respect to every input, at input values `inputs`.
pub fn evaluate_path(
    tape: &Tape,
    inputs: &[f64],
    seed: u64,
    path: u64,
) -> Result<PathResult, ReferenceError> {
    check(tape, inputs)?;
    Ok(path_unchecked(tape, inputs, seed, path))
}

fn path_unchecked(tape: &Tape, inputs: &[f64], seed: u64, path: u64) -> PathResult {
    let v = forward(tape, inputs, seed, path);
    let outputs = tape.outputs.iter().map(|o| v[o.node.index()]).collect();
    let greeks = tape
        .outputs
        .iter()
        .map(|o| reverse(tape, &v, o.node.index(), inputs.len()))
        .collect();
    PathResult { outputs, greeks }
}

/// The report of paths `0..paths` under `seed` at input values `inputs`, summed in the fixed order.
pub fn evaluate(
    tape: &Tape,
    inputs: &[f64],
    seed: u64,
    paths: u64,
) -> Result<Report, ReferenceError> {
    check(tape, inputs)?;
    let (n_out, n_in) = (tape.outputs.len(), inputs.len());
    let mut sums: Option<Vec<OutputSums>> = None;
    const CHUNK: u64 = 1024;
    let mut start = 0;
    while start < paths {
        let end = (start + CHUNK).min(paths);
        let mut values = vec![Vec::new(); n_out];
        let mut derivs = vec![vec![Vec::new(); n_in]; n_out];
        for p in start..end {
            let r = path_unchecked(tape, inputs, seed, p);
            for o in 0..n_out {
                values[o].push(r.outputs[o]);
                for (leaves, g) in derivs[o].iter_mut().zip(&r.greeks[o]) {
                    leaves.push(*g);
                }
            }
        }
        let chunk: Vec<OutputSums> = (0..n_out)
            .map(|o| OutputSums::from_leaves(paths, start, &values[o], &derivs[o]))
            .collect::<Result<_, _>>()?;
        match &mut sums {
            None => sums = Some(chunk),
            Some(s) => {
                for (a, b) in s.iter_mut().zip(&chunk) {
                    a.merge(b)?;
                }
            }
        }
        start = end;
    }
    let sums = sums.ok_or(ReportError::NoPaths)?;
    let out_names: Vec<String> = tape.outputs.iter().map(|o| o.name.clone()).collect();
    let in_names: Vec<String> = tape.inputs.iter().map(|i| i.name.clone()).collect();
    Ok(Report::from_sums(&out_names, &in_names, &sums)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Recorder, Var};
    use crate::report::tree_sum;
    use crate::tape::{Input, NodeId, Output};

    fn tape_of(f: impl Fn(&Recorder, &[Var]) -> Vec<Var>, inputs: &[(&str, f64)]) -> Tape {
        let rec = Recorder::new();
        let xs: Vec<Var> = inputs
            .iter()
            .map(|(n, v)| rec.input(n, *v).unwrap())
            .collect();
        for (k, out) in f(&rec, &xs).iter().enumerate() {
            rec.output(&format!("out{k}"), out).unwrap();
        }
        rec.finish().unwrap()
    }

    #[test]
    fn hand_computed_values_and_greeks() {
        // f = x*y + x/y - (-y) at x = 3, y = 2: 6 + 1.5 + 2 = 9.5; df/dx = y + 1/y = 2.5;
        // df/dy = x - x/y^2 + 1 = 3 - 0.75 + 1 = 3.25.
        let t = tape_of(
            |_, v| vec![&v[0] * &v[1] + &v[0] / &v[1] - (-&v[1])],
            &[("x", 3.0), ("y", 2.0)],
        );
        let r = evaluate_path(&t, &[3.0, 2.0], 0, 0).unwrap();
        assert_eq!(r.outputs, [9.5]);
        assert_eq!(r.greeks, [vec![2.5, 3.25]]);

        // g = sqrt(x) * exp(ln(y)) at x = 4, y = 2: 2 * 2 = 4; dg/dx = 0.5/2 * 2 = 0.5; dg/dy = 2 * 2 * (1/2) = 2.
        let t = tape_of(
            |_, v| vec![v[0].sqrt() * v[1].ln().exp()],
            &[("x", 4.0), ("y", 2.0)],
        );
        let r = evaluate_path(&t, &[4.0, 2.0], 0, 0).unwrap();
        assert_eq!(r.outputs, [4.0]);
        assert_eq!(r.greeks, [vec![0.5, 2.0]]);

        // Ties go to the first argument; abs'(0) = 0; two outputs get separate sweeps.
        let t = tape_of(
            |_, v| {
                vec![
                    v[0].max(&v[1]),
                    v[1].min(&v[0]),
                    (&v[0] - &v[1]).abs() + &v[0],
                    v[0].abs() * 2.0,
                ]
            },
            &[("x", 1.0), ("y", 1.0)],
        );
        let r = evaluate_path(&t, &[1.0, 1.0], 0, 0).unwrap();
        assert_eq!(r.outputs, [1.0, 1.0, 1.0, 2.0]);
        assert_eq!(
            r.greeks,
            [
                vec![1.0, 0.0],
                vec![0.0, 1.0],
                vec![1.0, 0.0],
                vec![2.0, 0.0]
            ]
        );
        let r = evaluate_path(&t, &[-1.0, 2.0], 0, 0).unwrap();
        assert_eq!(r.outputs, [2.0, -1.0, 2.0, 2.0]);
        assert_eq!(
            r.greeks,
            [
                vec![0.0, 1.0],
                vec![1.0, 0.0],
                vec![0.0, 1.0],
                vec![-2.0, 0.0]
            ]
        );
    }

    #[test]
    fn draws_come_from_philox() {
        let t = tape_of(
            |rec, v| vec![&v[0] * rec.normal(2).exp() + rec.uniform(0)],
            &[("spot", 100.0)],
        );
        assert_eq!(t.n_draws, 3);
        for p in [0u64, 1, 5, 1 << 40] {
            let z = normal_f64(9, p, 2);
            let r = evaluate_path(&t, &[100.0], 9, p).unwrap();
            assert_eq!(
                r.outputs[0].to_bits(),
                (100.0 * z.exp() + uniform_f64(9, p, 0)).to_bits()
            );
            assert_eq!(r.greeks[0][0].to_bits(), z.exp().to_bits());
        }
    }

    #[test]
    fn dead_nodes_do_not_leak_nan() {
        // exp(1000 x) overflows, but the output does not depend on it.
        let t = tape_of(
            |_, v| {
                let dead = (&v[0] * 1000.0).exp();
                let _ = &dead * &dead;
                vec![&v[0] * 2.0]
            },
            &[("x", 1.0)],
        );
        let r = evaluate_path(&t, &[1.0], 0, 0).unwrap();
        assert_eq!(r.greeks, [vec![2.0]]);
    }

    fn central_differences(t: &Tape, x: &[f64], path: u64, o: usize) -> Vec<f64> {
        (0..x.len())
            .map(|i| {
                let h = 1e-6 * x[i].abs().max(1.0);
                let mut up = x.to_vec();
                up[i] += h;
                let mut dn = x.to_vec();
                dn[i] -= h;
                let fu = evaluate_path(t, &up, 3, path).unwrap().outputs[o];
                let fd = evaluate_path(t, &dn, 3, path).unwrap().outputs[o];
                (fu - fd) / (2.0 * h)
            })
            .collect()
    }

    #[test]
    fn greeks_match_finite_differences() {
        let tapes = [
            tape_of(
                |rec, v| {
                    let z = rec.normal(0);
                    let s = &v[0]
                        * ((&v[2] - 0.5 * &v[1] * &v[1]) * &v[3] + &v[1] * v[3].sqrt() * z).exp();
                    vec![(&s / &v[0]).ln() * &s, (&s - 90.0).abs().sqrt()]
                },
                &[("spot", 100.0), ("vol", 0.3), ("rate", 0.02), ("t", 1.5)],
            ),
            tape_of(
                |rec, v| {
                    let u = rec.uniform(1);
                    let a = (&v[0] * &u - &v[1]).max(&(&v[1] / &v[0]));
                    let b = a.min(&(&v[1] * 4.0));
                    vec![-(b * &v[0]) / (&v[1] + 1.0), (&v[0] * &v[1]).ln()]
                },
                &[("a", 1.7), ("b", 0.4)],
            ),
        ];
        for t in &tapes {
            let x = recorded_inputs(t);
            for path in 0..20 {
                let r = evaluate_path(t, &x, 3, path).unwrap();
                for o in 0..t.outputs.len() {
                    let fd = central_differences(t, &x, path, o);
                    for (i, (g, f)) in r.greeks[o].iter().zip(&fd).enumerate() {
                        assert!(
                            (g - f).abs() <= 1e-6 * (1.0 + g.abs()),
                            "path {path} output {o} input {i}: adjoint {g} vs finite difference {f}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn evaluate_sums_in_the_fixed_order() {
        let t = tape_of(
            |rec, v| vec![&v[0] * rec.normal(0), v[0].clone()],
            &[("x", 2.0)],
        );
        let paths = 2500u64;
        let rep = evaluate(&t, &[2.0], 7, paths).unwrap();
        let leaves: Vec<f64> = (0..paths).map(|p| 2.0 * normal_f64(7, p, 0)).collect();
        let d: Vec<f64> = (0..paths).map(|p| normal_f64(7, p, 0)).collect();
        let sq: Vec<f64> = leaves.iter().map(|x| x * x).collect();
        let n = paths as f64;
        let o = &rep.outputs[0];
        assert_eq!(o.name, "out0");
        assert_eq!(o.value.to_bits(), (tree_sum(&leaves) / n).to_bits());
        assert_eq!(o.greeks, vec![("x".to_string(), tree_sum(&d) / n)]);
        let (s1, s2) = (tree_sum(&leaves), tree_sum(&sq));
        assert_eq!(
            o.stderr.to_bits(),
            crate::report::standard_error(paths, s1, s2).to_bits()
        );
        assert!(o.value.abs() < 4.0 * o.stderr && o.stderr > 0.03 && o.stderr < 0.05);
        assert_eq!(rep.outputs[1].value, 2.0);
        assert_eq!(rep.outputs[1].stderr, 0.0);
        assert_eq!(rep.outputs[1].greeks, vec![("x".to_string(), 1.0)]);
    }

    #[test]
    fn bad_tapes_are_refused_not_panicked_on() {
        let good = tape_of(|_, v| vec![&v[0] + 1.0], &[("x", 1.0)]);
        assert_eq!(
            evaluate_path(&good, &[], 0, 0).unwrap_err(),
            ReferenceError::InputCount {
                expected: 1,
                got: 0
            }
        );
        assert!(matches!(
            evaluate(&good, &[1.0], 0, 0),
            Err(ReferenceError::Report(ReportError::NoPaths))
        ));
        let mut fwd = good.clone();
        fwd.nodes[2] = Node::Binary(BinaryOp::Add, NodeId(0), NodeId(2));
        assert!(matches!(
            evaluate_path(&fwd, &[1.0], 0, 0),
            Err(ReferenceError::Malformed { node: 2, .. })
        ));
        let mut c = good.clone();
        c.nodes[1] = Node::Const(5);
        assert!(matches!(
            evaluate_path(&c, &[1.0], 0, 0),
            Err(ReferenceError::Malformed { node: 1, .. })
        ));
        let bad_out = Tape {
            inputs: vec![Input {
                name: "x".into(),
                value: 1.0,
            }],
            outputs: vec![Output {
                name: "y".into(),
                node: NodeId(3),
            }],
            consts: vec![],
            nodes: vec![Node::Input(0)],
            n_draws: 0,
        };
        assert!(matches!(
            evaluate_path(&bad_out, &[1.0], 0, 0),
            Err(ReferenceError::OutputRange { .. })
        ));
    }
}

//! The f64 reference: TAPE-FORMAT.md evaluated draw by draw, forward and adjoint, with no cleverness.
//!
//! For one path: a forward sweep computes every node's value in f64 (draws from `philox::normal_f64`
//! and `philox::uniform_f64`); then, for each output separately, a reverse sweep starts from adjoint 1
//! at the output node and visits, in reverse order, exactly the nodes the output depends on
//! differentiably (its backward cone through every op but the comparisons, which pass no
//! adjoint), applying the rules of `crate::ops` (TAPE-FORMAT.md's, in their evaluation order:
//! `d*c/b` is `(d*c)/b`), and `greek[i] += d` at input i. Nodes outside the output's cone are
//! never visited, so a non-finite value elsewhere on the tape cannot leak into this output's Greeks.
//! `evaluate` sums paths in the fixed order of `report` and builds the `Report`.

use crate::ops::{self, Operands};
use crate::philox::{normal_f32, normal_f64, uniform_f32, uniform_f64};
use crate::report::{path_shifts, OutputSums, Report, ReportError};
use crate::tape::{DrawKind, Node, Tape};
use crate::verify::Verified;

/// Why the reference could not evaluate a tape.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReferenceError {
    #[error("the tape has {expected} inputs but {got} input values were given")]
    InputCount { expected: usize, got: usize },
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
    Ok(())
}

/// A precision the reference evaluates in: the rules' arithmetic (`ops::Real`) and the draws.
pub trait Float: ops::Real {
    fn normal(seed: u64, path: u64, k: u32) -> Self;
    fn uniform(seed: u64, path: u64, k: u32) -> Self;
}

impl Float for f64 {
    fn normal(seed: u64, path: u64, k: u32) -> f64 {
        normal_f64(seed, path, k)
    }
    fn uniform(seed: u64, path: u64, k: u32) -> f64 {
        uniform_f64(seed, path, k)
    }
}

impl Float for f32 {
    fn normal(seed: u64, path: u64, k: u32) -> f32 {
        normal_f32(seed, path, k)
    }
    fn uniform(seed: u64, path: u64, k: u32) -> f32 {
        uniform_f32(seed, path, k)
    }
}

/// The operands of `node` given every forward value `v` (absent arguments: 0).
pub(crate) fn operands<T: Float>(node: &Node, v: &[T], c: T, d: T) -> Operands<T> {
    let mut args = node.args().map(|a| v[a.index()]);
    let zero = T::of(0.0);
    Operands {
        a: args.next().unwrap_or(zero),
        b: args.next().unwrap_or(zero),
        c,
        d,
    }
}

/// Every node's forward value on path `path`.
pub(crate) fn forward<T: Float>(tape: &Tape, inputs: &[f64], seed: u64, path: u64) -> Vec<T> {
    let mut v: Vec<T> = Vec::with_capacity(tape.nodes.len());
    let zero = T::of(0.0);
    for node in &tape.nodes {
        let x = match *node {
            Node::Input(k) => T::of(inputs[k as usize]),
            Node::Const(k) => T::of(tape.consts[k as usize]),
            Node::Draw(DrawKind::Normal, k) => T::normal(seed, path, k),
            Node::Draw(DrawKind::Uniform, k) => T::uniform(seed, path, k),
            Node::Unary(..) | Node::Binary(..) => {
                let rule = ops::rule(node.op()).expect("arithmetic ops have rules");
                ops::eval(&rule.value, &operands(node, &v, zero, zero))
            }
        };
        v.push(x);
    }
    v
}

/// d (node `out`) / d input, for every input, by one reverse sweep over `out`'s backward cone.
/// The cone is the differentiable one (`TapeInfo::cones`): a comparison passes no adjoint, so
/// what only comparisons read is outside it and its rule never runs (with an adjoint of 0 it
/// would still turn a non-finite partial, `0 * 0.5 / sqrt(-1)`, into a NaN Greek; the kernels
/// never run it either).
fn reverse<T: Float>(tape: &Tape, v: &[T], out: usize, n_inputs: usize) -> Vec<T> {
    let mut cone = vec![false; out + 1];
    cone[out] = true;
    for i in (0..=out).rev() {
        let differentiable = ops::rule(tape.nodes[i].op()).is_none_or(|r| r.is_differentiable());
        if cone[i] && differentiable {
            for a in tape.nodes[i].args() {
                cone[a.index()] = true;
            }
        }
    }
    let zero = T::of(0.0);
    let mut adj = vec![zero; out + 1];
    adj[out] = T::of(1.0);
    let mut greeks = vec![zero; n_inputs];
    for i in (0..=out).rev() {
        if !cone[i] {
            continue;
        }
        let node = &tape.nodes[i];
        match *node {
            Node::Input(k) => greeks[k as usize] = greeks[k as usize] + adj[i],
            Node::Const(_) | Node::Draw(..) => {}
            Node::Unary(..) | Node::Binary(..) => {
                let rule = ops::rule(node.op()).expect("arithmetic ops have rules");
                let x = operands(node, v, v[i], adj[i]);
                let args: Vec<usize> = node.args().map(|a| a.index()).collect();
                for step in rule.adjoint {
                    ops::eval_step(step, &x, &mut |arg, sub, delta| {
                        let j = args[arg.index()];
                        adj[j] = if sub { adj[j] - delta } else { adj[j] + delta };
                    });
                }
            }
        }
    }
    greeks
}

/// Path `path`'s outputs and their derivatives with respect to every input, at input values `inputs`.
pub fn evaluate_path(
    tape: &Verified,
    inputs: &[f64],
    seed: u64,
    path: u64,
) -> Result<PathResult, ReferenceError> {
    evaluate_path_in::<f64>(tape, inputs, seed, path)
}

/// [`evaluate_path`] with every value, draw and adjoint in precision `T` (f32 checks an f32
/// kernel); the results are converted to f64.
pub fn evaluate_path_in<T: Float>(
    tape: &Verified,
    inputs: &[f64],
    seed: u64,
    path: u64,
) -> Result<PathResult, ReferenceError> {
    check(tape, inputs)?;
    Ok(path_unchecked::<T>(tape, inputs, seed, path))
}

fn path_unchecked<T: Float>(tape: &Tape, inputs: &[f64], seed: u64, path: u64) -> PathResult {
    let v = forward::<T>(tape, inputs, seed, path);
    let outputs = tape
        .outputs
        .iter()
        .map(|o| v[o.node.index()].to_f64())
        .collect();
    let greeks = tape
        .outputs
        .iter()
        .map(|o| {
            reverse(tape, &v, o.node.index(), inputs.len())
                .into_iter()
                .map(T::to_f64)
                .collect()
        })
        .collect();
    PathResult { outputs, greeks }
}

/// The report of paths `0..paths` under `seed` at input values `inputs`, summed in the fixed order
/// (every Greek with its standard error; the squares about path 0's leaves).
pub fn evaluate(
    tape: &Verified,
    inputs: &[f64],
    seed: u64,
    paths: u64,
) -> Result<Report, ReferenceError> {
    check(tape, inputs)?;
    let (n_out, n_in) = (tape.outputs.len(), inputs.len());
    let mut sums: Option<Vec<OutputSums>> = None;
    // The squares are taken about path 0's leaves (TAPE-FORMAT.md, Results).
    let first = path_unchecked::<f64>(tape, inputs, seed, 0);
    let shifts: Vec<Vec<f64>> = (0..n_out)
        .map(|o| path_shifts(first.outputs[o], &first.greeks[o], true))
        .collect();
    const CHUNK: u64 = 1024;
    let mut start = 0;
    while start < paths {
        let end = (start + CHUNK).min(paths);
        let mut values = vec![Vec::new(); n_out];
        let mut derivs = vec![vec![Vec::new(); n_in]; n_out];
        for p in start..end {
            let r = path_unchecked::<f64>(tape, inputs, seed, p);
            for o in 0..n_out {
                values[o].push(r.outputs[o]);
                for (leaves, g) in derivs[o].iter_mut().zip(&r.greeks[o]) {
                    leaves.push(*g);
                }
            }
        }
        let chunk: Vec<OutputSums> = (0..n_out)
            .map(|o| {
                OutputSums::from_leaves(paths, start, &values[o], &derivs[o], &shifts[o], true)
            })
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

    fn tape_of(f: impl Fn(&Recorder, &[Var]) -> Vec<Var>, inputs: &[(&str, f64)]) -> Verified {
        let rec = Recorder::new();
        let xs: Vec<Var> = inputs
            .iter()
            .map(|(n, v)| rec.input(n, *v).unwrap())
            .collect();
        for (k, out) in f(&rec, &xs).iter().enumerate() {
            rec.output(&format!("out{k}"), out).unwrap();
        }
        crate::verify::verify(rec.finish().unwrap()).unwrap()
    }

    /// Found by the schedule interpreter on random tape 13 (nablac::testing): y = ge(sqrt(-x),
    /// sqrt(-x)) + x. The comparison passes no adjoint, so sqrt's rule must not run: with an
    /// adjoint of 0 it gives 0 * 0.5 / NaN = NaN, which reached dy/dx here while every kernel
    /// said 1.
    #[test]
    fn a_comparison_ends_the_cone() {
        let t = tape_of(
            |_, v| {
                let s = (-&v[0]).sqrt();
                vec![s.ge(&s) + &v[0]]
            },
            &[("x", 2.0)],
        );
        let r = evaluate_path(&t, &[2.0], 0, 0).unwrap();
        assert_eq!(r.outputs, [2.0]);
        assert_eq!(r.greeks, [vec![1.0]]);
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

    fn central_differences(t: &Verified, x: &[f64], path: u64, o: usize) -> Vec<f64> {
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
            // The smooth format-2 ops (pow in both arguments, tanh, ncdf), gated by an indicator
            // whose flat derivative the bumps see too (it does not flip within a bump).
            tape_of(
                |rec, v| {
                    let z = rec.normal(2);
                    let s = &v[0] * (&v[1] * &z).exp();
                    let gate = s.gt(&v[2]) + s.le(&v[2]) * 0.5;
                    vec![
                        (s.pow(&v[1]) + (&s * 0.1).tanh() + (&v[1] * &z).ncdf()) * gate,
                        s.pow(&(&v[1] * 10.0)).ncdf(),
                    ]
                },
                &[("spot", 1.2), ("vol", 0.3), ("level", 1.0)],
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
        // The squares about path 0's leaf.
        let sq: Vec<f64> = leaves
            .iter()
            .map(|x| (x - leaves[0]) * (x - leaves[0]))
            .collect();
        let dsq: Vec<f64> = d.iter().map(|x| (x - d[0]) * (x - d[0])).collect();
        let n = paths as f64;
        let o = &rep.outputs[0];
        assert_eq!(o.name, "out0");
        assert_eq!(o.value.to_bits(), (tree_sum(&leaves) / n).to_bits());
        assert_eq!(o.greeks, vec![("x".to_string(), tree_sum(&d) / n)]);
        let (s1, s2) = (tree_sum(&leaves), tree_sum(&sq));
        assert_eq!(
            o.stderr.to_bits(),
            crate::report::standard_error(paths, s1, s2, leaves[0]).to_bits()
        );
        assert_eq!(
            o.greek_stderr[0].to_bits(),
            crate::report::standard_error(paths, tree_sum(&d), tree_sum(&dsq), d[0]).to_bits()
        );
        // d out0 / dx is a normal draw: its standard error is 1 / sqrt(paths), about.
        assert!((o.greek_stderr[0] * n.sqrt() - 1.0).abs() < 0.05);
        assert_eq!(rep.outputs[1].greek_stderr, vec![0.0]);
        assert_eq!(o.non_finite, 0);
        assert!(o.value.abs() < 4.0 * o.stderr && o.stderr > 0.03 && o.stderr < 0.05);
        assert_eq!(rep.outputs[1].value, 2.0);
        assert_eq!(rep.outputs[1].stderr, 0.0);
        assert_eq!(rep.outputs[1].greeks, vec![("x".to_string(), 1.0)]);
    }

    #[test]
    fn bad_inputs_are_refused_not_panicked_on() {
        // (A malformed tape cannot get here: only `verify` makes the `Verified` the reference takes.)
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
    }
}

//! TAPE-FORMAT.md's definition of the results, written again from the text for the tests, so that
//! they check the kernels against the contract and not against the crate's own reference: Philox
//! and the variates, the forward values, the adjoint rules over each output's backward cone, and
//! the fixed-order sums. Everything is computed in f64.

use nablac::tape::{BinaryOp, DrawKind, Node, Tape, UnaryOp};

/// Which uniforms a path's draws are made of: the f64 kernels' (53 bits from two words each)
/// or the f32 kernels' (24 bits, u1 rounded in f32 as the f32 formula rounds it), turned into
/// normals in f64 either way.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Variates {
    F64,
    F32,
}

const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;

/// Philox4x32-10 of counter `c` under key `k`.
pub fn philox(mut c: [u32; 4], mut k: [u32; 2]) -> [u32; 4] {
    for _ in 0..10 {
        let p0 = u64::from(M0) * u64::from(c[0]);
        let p1 = u64::from(M1) * u64::from(c[2]);
        c = [
            (p1 >> 32) as u32 ^ c[1] ^ k[0],
            p1 as u32,
            (p0 >> 32) as u32 ^ c[3] ^ k[1],
            p0 as u32,
        ];
        k = [
            k[0].wrapping_add(0x9E37_79B9),
            k[1].wrapping_add(0xBB67_AE85),
        ];
    }
    c
}

/// (u1, u2) of normal draw `k` of path `path` under `seed`, counter word 3 = `w3`.
fn uniforms(seed: u64, path: u64, k: u32, w3: u32, v: Variates) -> (f64, f64) {
    let x = philox(
        [k, path as u32, (path >> 32) as u32, w3],
        [seed as u32, (seed >> 32) as u32],
    );
    match v {
        Variates::F64 => {
            let hi = (u64::from(x[0]) << 32) | u64::from(x[1]);
            let lo = (u64::from(x[2]) << 32) | u64::from(x[3]);
            let ulp = 2f64.powi(-53);
            (((hi >> 11) as f64 + 0.5) * ulp, (lo >> 11) as f64 * ulp)
        }
        Variates::F32 => {
            let ulp = 2f32.powi(-24);
            let u1 = ((x[0] >> 8) as f32 + 0.5) * ulp;
            let u2 = (x[1] >> 8) as f32 * ulp;
            (f64::from(u1), f64::from(u2))
        }
    }
}

pub fn normal(seed: u64, path: u64, k: u32, v: Variates) -> f64 {
    let (u1, u2) = uniforms(seed, path, k, 0, v);
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

/// Uniform draw `k`: from the uniform counter (word 3 = 1), one bit fewer than the normal's u1,
/// so it lies strictly in (0, 1): fp32 ((x0 >> 9) + 0.5) * 2^-23, fp64
/// ((((x0 << 32) | x1) >> 12) + 0.5) * 2^-52.
pub fn uniform(seed: u64, path: u64, k: u32, v: Variates) -> f64 {
    let x = philox(
        [k, path as u32, (path >> 32) as u32, 1],
        [seed as u32, (seed >> 32) as u32],
    );
    match v {
        Variates::F64 => {
            let hi = (u64::from(x[0]) << 32) | u64::from(x[1]);
            ((hi >> 12) as f64 + 0.5) * 2f64.powi(-52)
        }
        Variates::F32 => f64::from(((x[0] >> 9) as f32 + 0.5) * 2f32.powi(-23)),
    }
}

/// One path: `outputs[o]` and `greeks[o][i]` = d output o / d input i.
pub struct Path {
    pub outputs: Vec<f64>,
    pub greeks: Vec<Vec<f64>>,
}

/// Path `p` of `tape` at `inputs` under `seed`.
pub fn path(tape: &Tape, inputs: &[f64], seed: u64, p: u64, v: Variates) -> Path {
    let n = tape.nodes.len();
    let mut x = vec![0.0f64; n];
    for (i, node) in tape.nodes.iter().enumerate() {
        x[i] = match *node {
            Node::Input(k) => inputs[k as usize],
            Node::Const(k) => tape.consts[k as usize],
            Node::Draw(DrawKind::Normal, k) => normal(seed, p, k, v),
            Node::Draw(DrawKind::Uniform, k) => uniform(seed, p, k, v),
            Node::Binary(op, a, b) => {
                let (a, b) = (x[a.index()], x[b.index()]);
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
                    BinaryOp::Lt => f64::from(u8::from(a < b)),
                    BinaryOp::Le => f64::from(u8::from(a <= b)),
                    BinaryOp::Gt => f64::from(u8::from(a > b)),
                    BinaryOp::Ge => f64::from(u8::from(a >= b)),
                    BinaryOp::Pow => {
                        if a > 0.0 {
                            a.powf(b)
                        } else {
                            f64::NAN
                        }
                    }
                }
            }
            Node::Unary(op, a) => {
                let a = x[a.index()];
                match op {
                    UnaryOp::Neg => -a,
                    UnaryOp::Exp => a.exp(),
                    UnaryOp::Log => a.ln(),
                    UnaryOp::Sqrt => a.sqrt(),
                    UnaryOp::Abs => a.abs(),
                    UnaryOp::Tanh => a.tanh(),
                    // Phi(a) = erfc(-a / sqrt 2) / 2, with the closed forms' own erfc (a series
                    // and a continued fraction), not the one the crate's rule table calls.
                    UnaryOp::Ncdf => nablac::closed_form::erfc(-a / std::f64::consts::SQRT_2) / 2.0,
                }
            }
        };
    }
    let mut greeks = Vec::new();
    for out in &tape.outputs {
        // The output's backward cone: only those nodes carry its adjoint. A comparison passes
        // none, so the cone does not go on through one (TAPE-FORMAT.md, the adjoint rules).
        let mut cone = vec![false; n];
        cone[out.node.index()] = true;
        for i in (0..n).rev() {
            let comparison = matches!(
                tape.nodes[i],
                Node::Binary(
                    BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge,
                    ..
                )
            );
            if cone[i] && !comparison {
                for a in tape.nodes[i].args() {
                    cone[a.index()] = true;
                }
            }
        }
        let mut d = vec![0.0f64; n];
        d[out.node.index()] = 1.0;
        let mut g = vec![0.0f64; tape.inputs.len()];
        for i in (0..n).rev().filter(|&i| cone[i]) {
            let di = d[i];
            let c = x[i];
            match tape.nodes[i] {
                Node::Input(k) => g[k as usize] += di,
                Node::Const(_) | Node::Draw(..) => {}
                Node::Binary(op, a, b) => {
                    let (ia, ib) = (a.index(), b.index());
                    let (va, vb) = (x[ia], x[ib]);
                    match op {
                        BinaryOp::Add => {
                            d[ia] += di;
                            d[ib] += di;
                        }
                        BinaryOp::Sub => {
                            d[ia] += di;
                            d[ib] -= di;
                        }
                        BinaryOp::Mul => {
                            d[ia] += times(di, vb);
                            d[ib] += times(di, va);
                        }
                        BinaryOp::Div => {
                            d[ia] += over(di, vb);
                            d[ib] -= over(times(di, c), vb);
                        }
                        BinaryOp::Max => {
                            if va >= vb {
                                d[ia] += di
                            } else {
                                d[ib] += di
                            }
                        }
                        BinaryOp::Min => {
                            if va <= vb {
                                d[ia] += di
                            } else {
                                d[ib] += di
                            }
                        }
                        // Indicators: derivative 0 with respect to both arguments.
                        BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge => {}
                        BinaryOp::Pow => {
                            d[ia] += times(times(di, vb), va.powf(vb - 1.0));
                            d[ib] += times(times(di, c), va.ln());
                        }
                    }
                }
                Node::Unary(op, a) => {
                    let ia = a.index();
                    let va = x[ia];
                    match op {
                        UnaryOp::Neg => d[ia] -= di,
                        UnaryOp::Exp => d[ia] += times(di, c),
                        UnaryOp::Log => d[ia] += over(di, va),
                        UnaryOp::Sqrt => d[ia] += over(di * 0.5, c),
                        UnaryOp::Abs => {
                            let sign = if va > 0.0 {
                                1.0
                            } else if va < 0.0 {
                                -1.0
                            } else {
                                0.0
                            };
                            d[ia] += times(di, sign)
                        }
                        UnaryOp::Tanh => d[ia] += times(di, 1.0 - c * c),
                        UnaryOp::Ncdf => {
                            d[ia] += times(di, (-va * va / 2.0).exp())
                                / (2.0 * std::f64::consts::PI).sqrt()
                        }
                    }
                }
            }
        }
        greeks.push(g);
    }
    Path {
        outputs: tape.outputs.iter().map(|o| x[o.node.index()]).collect(),
        greeks,
    }
}

/// `x * y` with TAPE-FORMAT.md's strong zero: 0 when x or y is 0, whatever the other.
fn times(x: f64, y: f64) -> f64 {
    if x == 0.0 || y == 0.0 {
        0.0
    } else {
        x * y
    }
}

/// `x / y` with the strong zero: 0 when x is 0 or y infinite (the factor 1/y is 0).
fn over(x: f64, y: f64) -> f64 {
    if x == 0.0 || y.is_infinite() {
        0.0
    } else {
        x / y
    }
}

/// S(0, 2^K) of TAPE-FORMAT.md, Results: the balanced pairwise tree, zero padded.
pub fn tree_sum(leaves: &[f64]) -> f64 {
    fn s(x: &[f64], a: usize, m: usize) -> f64 {
        if m == 1 {
            x.get(a).copied().unwrap_or(0.0)
        } else {
            s(x, a, m / 2) + s(x, a + m / 2, m / 2)
        }
    }
    s(leaves, 0, leaves.len().next_power_of_two().max(1))
}

/// One result of a run: the mean over paths, and the mean of its absolute per-path values (the
/// scale a relative tolerance is taken against when the mean itself is near zero), and the
/// standard error of the mean.
#[derive(Copy, Clone, Debug)]
pub struct Stat {
    pub mean: f64,
    pub abs_mean: f64,
    pub se: f64,
}

impl Stat {
    fn of(xs: &[f64]) -> Stat {
        let n = xs.len() as f64;
        let mean = tree_sum(xs) / n;
        // Undefined (NaN) for fewer than two paths.
        let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0);
        let var = if xs.len() < 2 { f64::NAN } else { var };
        Stat {
            mean,
            abs_mean: xs.iter().map(|x| x.abs()).sum::<f64>() / n,
            se: (var / n).sqrt(),
        }
    }
}

/// The results of `paths` paths: per output its value and its Greeks by input, over the paths
/// where the output and all its Greeks are finite (TAPE-FORMAT.md, Results), and how many were
/// not.
pub struct Run {
    pub values: Vec<Stat>,
    pub greeks: Vec<Vec<Stat>>,
    pub non_finite: Vec<u64>,
}

pub fn run(tape: &Tape, inputs: &[f64], seed: u64, paths: u64, v: Variates) -> Run {
    let per: Vec<Path> = (0..paths).map(|p| path(tape, inputs, seed, p, v)).collect();
    let finite =
        |p: &Path, o: usize| p.outputs[o].is_finite() && p.greeks[o].iter().all(|g| g.is_finite());
    let column = |o: usize, f: &dyn Fn(&Path) -> f64| {
        Stat::of(
            &per.iter()
                .filter(|p| finite(p, o))
                .map(f)
                .collect::<Vec<_>>(),
        )
    };
    Run {
        values: (0..tape.outputs.len())
            .map(|o| column(o, &|p| p.outputs[o]))
            .collect(),
        greeks: (0..tape.outputs.len())
            .map(|o| {
                (0..tape.inputs.len())
                    .map(|i| column(o, &|p| p.greeks[o][i]))
                    .collect()
            })
            .collect(),
        non_finite: (0..tape.outputs.len())
            .map(|o| per.iter().filter(|p| !finite(p, o)).count() as u64)
            .collect(),
    }
}

#[test]
fn philox_known_answer() {
    assert_eq!(
        philox([0, 0, 0, 0], [0, 0]),
        [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]
    );
}

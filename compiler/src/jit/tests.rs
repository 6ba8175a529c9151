//! The CPU target against a Rust evaluation of the same tape, path by path.
//!
//! TODO(jit): switch `Real`/`eval_path` to `crate::reference::evaluate_path` and the local Philox
//! to `crate::philox` once branch `record` is on main (the assertions stay).

use super::*;
use crate::plan::{Liveness, OpacityPlan, Segment, SegmentPlan};
use crate::tape::{BinaryOp, DrawKind, Input, NodeId, Output, UnaryOp};
use nablac_runtime::cpu;

// ---------- a tape builder ----------

#[derive(Default)]
struct B {
    t: Tape,
}

impl B {
    fn push(&mut self, n: Node) -> NodeId {
        self.t.nodes.push(n);
        NodeId(self.t.nodes.len() as u32 - 1)
    }
    fn input(&mut self, name: &str, v: f64) -> NodeId {
        let k = self.t.inputs.len() as u32;
        self.t.inputs.push(Input {
            name: name.into(),
            value: v,
        });
        self.push(Node::Input(k))
    }
    fn c(&mut self, x: f64) -> NodeId {
        let k = self.t.consts.len() as u32;
        self.t.consts.push(x);
        self.push(Node::Const(k))
    }
    fn normal(&mut self, k: u32) -> NodeId {
        self.push(Node::Draw(DrawKind::Normal, k))
    }
    fn uniform(&mut self, k: u32) -> NodeId {
        self.push(Node::Draw(DrawKind::Uniform, k))
    }
    fn bin(&mut self, op: BinaryOp, a: NodeId, b: NodeId) -> NodeId {
        self.push(Node::Binary(op, a, b))
    }
    fn un(&mut self, op: UnaryOp, a: NodeId) -> NodeId {
        self.push(Node::Unary(op, a))
    }
    fn out(&mut self, name: &str, n: NodeId) {
        self.t.outputs.push(Output {
            name: name.into(),
            node: n,
        });
    }
    fn finish(mut self) -> Tape {
        self.t.n_draws = self.t.draws_used();
        self.t
    }
}

/// The arithmetic Asian call (the recorder's layout): 15 + 6·steps + 9 nodes.
fn asian(steps: u32) -> Tape {
    use BinaryOp::*;
    let mut b = B::default();
    let spot = b.input("spot", 100.0);
    let strike = b.input("strike", 100.0);
    let vol = b.input("vol", 0.2);
    let rate = b.input("rate", 0.05);
    let maturity = b.input("maturity", 1.0);
    let v2 = b.bin(Mul, vol, vol);
    let half = b.c(0.5);
    let hv2 = b.bin(Mul, half, v2);
    let mu = b.bin(Sub, rate, hv2);
    let ns = b.c(steps as f64);
    let dt = b.bin(Div, maturity, ns);
    let drift = b.bin(Mul, mu, dt);
    let sqdt = b.un(UnaryOp::Sqrt, dt);
    let vsq = b.bin(Mul, vol, sqdt);
    let zero = b.c(0.0);
    let (mut s, mut sum) = (spot, zero);
    for k in 0..steps {
        let z = b.normal(k);
        let dz = b.bin(Mul, vsq, z);
        let x = b.bin(Add, drift, dz);
        let g = b.un(UnaryOp::Exp, x);
        s = b.bin(Mul, s, g);
        sum = b.bin(Add, sum, s);
    }
    let n2 = b.c(steps as f64);
    let avg = b.bin(Div, sum, n2);
    let m = b.bin(Sub, avg, strike);
    let z0 = b.c(0.0);
    let pay = b.bin(Max, m, z0);
    let rt = b.bin(Mul, rate, maturity);
    let nrt = b.un(UnaryOp::Neg, rt);
    let df = b.un(UnaryOp::Exp, nrt);
    let price = b.bin(Mul, df, pay);
    b.out("price", price);
    b.finish()
}

/// Every op, ties in max/min, abs of 0, a dead node, an inactive draw chain and two outputs.
fn all_ops() -> Tape {
    use BinaryOp::*;
    use UnaryOp::*;
    let mut b = B::default();
    let x = b.input("x", 1.3);
    let y = b.input("y", 0.7);
    let w = b.input("w", -0.4);
    let z = b.normal(0);
    let u = b.uniform(1);
    let zu = b.bin(Mul, z, u); // inactive
    let a = b.bin(Add, x, zu);
    let s = b.bin(Sub, a, y);
    let m = b.bin(Mul, s, s);
    let d = b.bin(Div, m, y);
    let e = b.un(Exp, w);
    let l = b.un(Log, x);
    let q = b.un(Sqrt, y);
    let mx = b.bin(Max, d, e);
    let tie = b.bin(Max, x, x); // tie: all to the first argument
    let mn = b.bin(Min, l, q);
    let tie2 = b.bin(Min, y, y);
    let zero = b.c(0.0);
    let wz = b.bin(Mul, w, zero);
    let ab0 = b.un(Abs, wz); // abs(±0): sign 0
    let ab = b.un(Abs, w);
    let ng = b.un(Neg, mx);
    let _dead = b.un(Exp, ng);
    let t1 = b.bin(Add, ng, mn);
    let t2 = b.bin(Add, t1, tie);
    let t3 = b.bin(Sub, t2, tie2);
    let t4 = b.bin(Add, t3, ab0);
    let t5 = b.bin(Mul, t4, ab);
    let t6 = b.bin(Add, t5, zu);
    b.out("f", t6);
    let g = b.bin(Mul, x, u);
    b.out("g", g);
    b.finish()
}

// ---------- a Rust evaluation to compare with ----------

fn philox(ctr: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let [mut c0, mut c1, mut c2, mut c3] = ctr;
    let [mut k0, mut k1] = key;
    for _ in 0..10 {
        let p0 = u64::from(0xD251_1F53u32) * u64::from(c0);
        let p1 = u64::from(0xCD9E_8D57u32) * u64::from(c2);
        (c0, c1, c2, c3) = (
            (p1 >> 32) as u32 ^ c1 ^ k0,
            p1 as u32,
            (p0 >> 32) as u32 ^ c3 ^ k1,
            p0 as u32,
        );
        k0 = k0.wrapping_add(0x9E37_79B9);
        k1 = k1.wrapping_add(0xBB67_AE85);
    }
    [c0, c1, c2, c3]
}

fn block(seed: u64, path: u64, k: u32, stream: u32) -> [u32; 4] {
    philox(
        [k, path as u32, (path >> 32) as u32, stream],
        [seed as u32, (seed >> 32) as u32],
    )
}

trait Real:
    Copy
    + PartialOrd
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
    + std::ops::Neg<Output = Self>
{
    fn of(x: f64) -> Self;
    fn f64(self) -> f64;
    fn exp(self) -> Self;
    fn ln(self) -> Self;
    fn sqrt(self) -> Self;
    fn abs(self) -> Self;
    fn normal(seed: u64, path: u64, k: u32) -> Self;
    fn uniform(seed: u64, path: u64, k: u32) -> Self;
}

impl Real for f64 {
    fn of(x: f64) -> Self {
        x
    }
    fn f64(self) -> f64 {
        self
    }
    fn exp(self) -> Self {
        f64::exp(self)
    }
    fn ln(self) -> Self {
        f64::ln(self)
    }
    fn sqrt(self) -> Self {
        f64::sqrt(self)
    }
    fn abs(self) -> Self {
        f64::abs(self)
    }
    fn normal(seed: u64, path: u64, k: u32) -> Self {
        let x = block(seed, path, k, 0);
        let a = ((u64::from(x[0]) << 32) | u64::from(x[1])) >> 11;
        let b = ((u64::from(x[2]) << 32) | u64::from(x[3])) >> 11;
        let (u1, u2) = (
            (a as f64 + 0.5) * (1.0 / 9_007_199_254_740_992.0),
            b as f64 * (1.0 / 9_007_199_254_740_992.0),
        );
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
    fn uniform(seed: u64, path: u64, k: u32) -> Self {
        let x = block(seed, path, k, 1);
        let a = ((u64::from(x[0]) << 32) | u64::from(x[1])) >> 11;
        (a as f64 + 0.5) * (1.0 / 9_007_199_254_740_992.0)
    }
}

impl Real for f32 {
    fn of(x: f64) -> Self {
        x as f32
    }
    fn f64(self) -> f64 {
        f64::from(self)
    }
    fn exp(self) -> Self {
        f32::exp(self)
    }
    fn ln(self) -> Self {
        f32::ln(self)
    }
    fn sqrt(self) -> Self {
        f32::sqrt(self)
    }
    fn abs(self) -> Self {
        f32::abs(self)
    }
    fn normal(seed: u64, path: u64, k: u32) -> Self {
        let x = block(seed, path, k, 0);
        let u1 = ((x[0] >> 8) as f32 + 0.5) * (1.0 / 16_777_216.0);
        let u2 = (x[1] >> 8) as f32 * (1.0 / 16_777_216.0);
        (-2.0f32 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos()
    }
    fn uniform(seed: u64, path: u64, k: u32) -> Self {
        let x = block(seed, path, k, 1);
        ((x[0] >> 8) as f32 + 0.5) * (1.0 / 16_777_216.0)
    }
}

/// One path: the row the kernel must write (value, value², then Greeks per output in reverse mode).
fn eval_path<T: Real>(tape: &Tape, inputs: &[f64], seed: u64, path: u64, mode: Mode) -> Vec<f64> {
    let act = crate::passes::activity(tape);
    let n = tape.len();
    let mut v = vec![T::of(0.0); n];
    for (i, node) in tape.nodes.iter().enumerate() {
        v[i] = match *node {
            Node::Input(k) => T::of(inputs[k as usize]),
            Node::Const(k) => T::of(tape.consts[k as usize]),
            Node::Draw(DrawKind::Normal, k) => T::normal(seed, path, k),
            Node::Draw(DrawKind::Uniform, k) => T::uniform(seed, path, k),
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
    }
    let mut row = Vec::new();
    for o in &tape.outputs {
        let x = v[o.node.index()].f64();
        row.push(x);
        row.push(x * x);
        if mode == Mode::Price {
            continue;
        }
        let zero = T::of(0.0);
        let mut adj = vec![zero; n];
        let mut greeks = vec![0.0; tape.inputs.len()];
        adj[o.node.index()] = T::of(1.0);
        for i in (0..n).rev() {
            if !act.active[i] {
                continue;
            }
            let d = adj[i];
            let c = v[i];
            let add = |adj: &mut Vec<T>, a: NodeId, x: T| {
                if act.active[a.index()] {
                    adj[a.index()] = adj[a.index()] + x;
                }
            };
            match tape.nodes[i] {
                Node::Input(k) => greeks[k as usize] = d.f64(),
                Node::Const(_) | Node::Draw(..) => {}
                Node::Unary(op, a) => {
                    let va = v[a.index()];
                    match op {
                        UnaryOp::Neg => {
                            if act.active[a.index()] {
                                adj[a.index()] = adj[a.index()] - d;
                            }
                        }
                        UnaryOp::Exp => add(&mut adj, a, d * c),
                        UnaryOp::Log => add(&mut adj, a, d / va),
                        UnaryOp::Sqrt => add(&mut adj, a, d * T::of(0.5) / c),
                        UnaryOp::Abs => {
                            let s = if va > zero {
                                T::of(1.0)
                            } else if va < zero {
                                T::of(-1.0)
                            } else {
                                zero
                            };
                            add(&mut adj, a, d * s)
                        }
                    }
                }
                Node::Binary(op, a, b) => {
                    let (va, vb) = (v[a.index()], v[b.index()]);
                    match op {
                        BinaryOp::Add => {
                            add(&mut adj, a, d);
                            add(&mut adj, b, d);
                        }
                        BinaryOp::Sub => {
                            add(&mut adj, a, d);
                            if act.active[b.index()] {
                                adj[b.index()] = adj[b.index()] - d;
                            }
                        }
                        BinaryOp::Mul => {
                            add(&mut adj, a, d * vb);
                            add(&mut adj, b, d * va);
                        }
                        BinaryOp::Div => {
                            add(&mut adj, a, d / vb);
                            if act.active[b.index()] {
                                adj[b.index()] = adj[b.index()] - d * c / vb;
                            }
                        }
                        BinaryOp::Max => add(&mut adj, if va >= vb { a } else { b }, d),
                        BinaryOp::Min => add(&mut adj, if va <= vb { a } else { b }, d),
                    }
                }
            }
        }
        row.extend(greeks);
    }
    row
}

// ---------- helpers ----------

fn opts(mode: Mode, precision: Precision) -> Options {
    Options { mode, precision }
}

fn kernel(tape: &Tape, o: Options) -> (Kernel, cpu::Compiled) {
    let k = emit_with_activity(tape, &crate::passes::activity(tape), &o).unwrap();
    let c = cpu::load(&k.source, &k.manifest).unwrap();
    (k, c)
}

fn run_rows(c: &cpu::Compiled, inputs: &[f64], seed: u64, first: u64, count: usize) -> Vec<f64> {
    let mut out = vec![f64::NAN; count * c.row_len()];
    c.run(inputs, seed, first, &mut out).unwrap();
    out
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    a == b || (a - b).abs() <= rel * a.abs().max(b.abs()).max(1e-300) || (a.is_nan() && b.is_nan())
}

fn check_against_reference(
    tape: &Tape,
    mode: Mode,
    precision: Precision,
    paths: std::ops::Range<u64>,
    seed: u64,
    rel: f64,
) {
    let (_, c) = kernel(tape, opts(mode, precision));
    let inputs: Vec<f64> = tape.inputs.iter().map(|i| i.value).collect();
    let count = (paths.end - paths.start) as usize;
    let out = run_rows(&c, &inputs, seed, paths.start, count);
    let row = c.row_len();
    for (j, p) in paths.enumerate() {
        let want = match precision {
            Precision::F64 => eval_path::<f64>(tape, &inputs, seed, p, mode),
            Precision::F32 => eval_path::<f32>(tape, &inputs, seed, p, mode),
        };
        let got = &out[j * row..(j + 1) * row];
        assert_eq!(got.len(), want.len());
        for (s, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                close(*g, *w, rel),
                "path {p} sum {s}: jit {g:e} reference {w:e} ({precision:?} {mode:?})"
            );
        }
    }
}

// ---------- tests ----------

#[test]
fn first_draws_match_the_known_answer() {
    let mut b = B::default();
    let z = b.normal(0);
    let u = b.uniform(0);
    b.out("z", z);
    b.out("u", u);
    let tape = b.finish();
    let (_, c) = kernel(&tape, opts(Mode::Price, Precision::F64));
    let out = run_rows(&c, &[], 0, 0, 1);
    // philox((0,0,0,0), (0,0)) = (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8) (TAPE-FORMAT.md)
    let a = ((0x6627e8d5_u64 << 32) | 0xe169c58d) >> 11;
    let bb = ((0xbc57ac4c_u64 << 32) | 0x9b00dbd8) >> 11;
    let u1 = (a as f64 + 0.5) / 9_007_199_254_740_992.0;
    let u2 = bb as f64 / 9_007_199_254_740_992.0;
    let want = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
    assert_eq!(out[0].to_bits(), want.to_bits());
    assert_eq!(out[1].to_bits(), (want * want).to_bits());
    let (_, c32) = kernel(&tape, opts(Mode::Price, Precision::F32));
    let out = run_rows(&c32, &[], 0, 0, 1);
    let v1 = ((0x6627e8d5_u32 >> 8) as f32 + 0.5) / 16_777_216.0;
    let v2 = (0xe169c58d_u32 >> 8) as f32 / 16_777_216.0;
    let w = (-2.0f32 * v1.ln()).sqrt() * (2.0 * std::f32::consts::PI * v2).cos();
    assert_eq!(out[0].to_bits(), f64::from(w).to_bits());
}

#[test]
fn draws_equal_the_rust_reference_bit_for_bit() {
    let mut b = B::default();
    for k in [0, 1, 7, 1000] {
        let z = b.normal(k);
        b.out(&format!("z{k}"), z);
        let u = b.uniform(k);
        b.out(&format!("u{k}"), u);
    }
    let tape = b.finish();
    for precision in [Precision::F64, Precision::F32] {
        let (_, c) = kernel(&tape, opts(Mode::Price, precision));
        for (seed, first) in [
            (0u64, 0u64),
            (42, 1000),
            (0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3000),
            (u64::MAX, (1 << 32) - 3),
        ] {
            let out = run_rows(&c, &[], seed, first, 8);
            for j in 0..8u64 {
                let p = first.wrapping_add(j);
                for (o, k) in [0u32, 1, 7, 1000].iter().enumerate() {
                    let (z, u) = match precision {
                        Precision::F64 => (f64::normal(seed, p, *k), f64::uniform(seed, p, *k)),
                        Precision::F32 => (
                            f32::normal(seed, p, *k).f64(),
                            f32::uniform(seed, p, *k).f64(),
                        ),
                    };
                    let r = &out[j as usize * 16..];
                    assert_eq!(
                        r[4 * o].to_bits(),
                        z.to_bits(),
                        "{precision:?} normal {k} seed {seed} path {p}"
                    );
                    assert_eq!(
                        r[4 * o + 2].to_bits(),
                        u.to_bits(),
                        "{precision:?} uniform {k} seed {seed} path {p}"
                    );
                }
            }
        }
    }
}

#[test]
fn every_op_matches_the_reference() {
    let tape = all_ops();
    for mode in [Mode::Price, Mode::Reverse] {
        check_against_reference(&tape, mode, Precision::F64, 0..64, 9, 1e-12);
        check_against_reference(&tape, mode, Precision::F32, 0..64, 9, 1e-4);
    }
}

#[test]
fn asian_paths_match_the_reference() {
    let tape = asian(52);
    check_against_reference(&tape, Mode::Reverse, Precision::F64, 0..40, 42, 1e-12);
    check_against_reference(&tape, Mode::Price, Precision::F64, 5000..5010, 42, 1e-12);
    check_against_reference(&tape, Mode::Reverse, Precision::F32, 0..40, 42, 1e-4);
}

#[test]
fn greeks_by_hand() {
    // y = spot * exp(vol) + max(spot, strike) - abs(strike - strike) ; two outputs, price and reverse.
    use BinaryOp::*;
    let mut b = B::default();
    let spot = b.input("spot", 2.0);
    let strike = b.input("strike", 3.0);
    let vol = b.input("vol", 0.5);
    let e = b.un(UnaryOp::Exp, vol);
    let m = b.bin(Mul, spot, e);
    let mx = b.bin(Max, spot, strike);
    let zero = b.bin(Sub, strike, strike);
    let ab = b.un(UnaryOp::Abs, zero);
    let s = b.bin(Add, m, mx);
    let y = b.bin(Sub, s, ab);
    b.out("y", y);
    b.out("spot_again", spot);
    let tape = b.finish();
    let (k, c) = kernel(&tape, opts(Mode::Reverse, Precision::F64));
    assert_eq!(
        k.manifest.sums,
        [
            "value:y",
            "value_sq:y",
            "greek:y:spot",
            "greek:y:strike",
            "greek:y:vol",
            "value:spot_again",
            "value_sq:spot_again",
            "greek:spot_again:spot",
            "greek:spot_again:strike",
            "greek:spot_again:vol"
        ]
    );
    let out = run_rows(&c, &[2.0, 3.0, 0.5], 1, 0, 2);
    let ex = 0.5f64.exp();
    let row = [
        2.0 * ex + 3.0,
        (2.0 * ex + 3.0) * (2.0 * ex + 3.0),
        ex,
        1.0,
        2.0 * ex,
        2.0,
        4.0,
        1.0,
        0.0,
        0.0,
    ];
    assert_eq!(&out[..10], &row);
    assert_eq!(&out[10..], &row, "no draws: every path is the same");
    // A tie in max goes to the first argument: at spot = strike = 3, d/dspot gets it.
    let out = run_rows(&c, &[3.0, 3.0, 0.0], 1, 0, 1);
    assert_eq!(&out[2..5], &[1.0 + 1.0, 0.0, 3.0]);
}

#[test]
fn emission_is_deterministic_and_self_describing() {
    let tape = asian(4);
    let o = opts(Mode::Reverse, Precision::F64);
    let act = crate::passes::activity(&tape);
    let a = emit_with_activity(&tape, &act, &o).unwrap();
    let b = emit_with_activity(&tape.clone(), &act, &o).unwrap();
    assert_eq!(a.source, b.source);
    assert!(
        a.source
            .starts_with("function %nablac_cpu_reverse_f64(i64, i64, i64, i64, i64) system_v {"),
        "{}",
        &a.source[..200]
    );
    for f in ["%exp", "%log", "%cos", "umulhi"] {
        assert!(a.source.contains(f), "{f} missing");
    }
    let m = &a.manifest;
    assert_eq!(m.target, Target::Cpu);
    assert_eq!(m.entry_point, "nablac_cpu_reverse_f64");
    assert_eq!(m.inputs, ["spot", "strike", "vol", "rate", "maturity"]);
    assert_eq!(m.input_defaults, [100.0, 100.0, 0.2, 0.05, 1.0]);
    assert_eq!(m.outputs, ["price"]);
    assert_eq!(m.sums.len(), 7);
    assert_eq!(
        m.params.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        ["inputs", "seed", "first_path", "count", "out"]
    );
    assert_eq!(m.params[0].ty, "ptr<f64>");
    assert_eq!(
        (m.segments, m.checkpoint, m.draws, m.persistent),
        (1, Checkpoint::Off, 4, 0)
    );
    assert_eq!(m.tape_hash.len(), 64);
    assert_eq!(m.tape_hash, crate::format::content_hash(&tape));
    assert_ne!(m.tape_hash, crate::format::content_hash(&asian(5)));
    let f32k = emit_with_activity(&tape, &act, &opts(Mode::Price, Precision::F32)).unwrap();
    assert!(f32k.source.contains("%expf") && f32k.source.contains("%cosf"));
    assert_eq!(f32k.manifest.sums, ["value:price", "value_sq:price"]);
    assert_eq!(f32k.manifest.params[0].ty, "ptr<f32>");
    // The manifest survives JSON.
    let json = serde_json::to_string(m).unwrap();
    assert_eq!(&serde_json::from_str::<Manifest>(&json).unwrap(), m);
}

fn plan_with(tape: &Tape, segments: Vec<Segment>) -> Plan {
    let cuts = segments
        .iter()
        .skip(1)
        .map(|s| NodeId(s.range.start))
        .collect::<Vec<_>>();
    let count = segments.len();
    Plan {
        activity: crate::passes::activity(tape),
        liveness: crate::passes::liveness(tape),
        segments: SegmentPlan {
            strategy: if count > 1 {
                Checkpoint::Registers
            } else {
                Checkpoint::Off
            },
            crossing: vec![0; cuts.len()],
            cuts,
            segments,
            persistent: vec![],
            scratch_slots: vec![],
        },
        opacity: OpacityPlan {
            opaque_reads: vec![vec![]; count],
            rekey: vec![false; count],
        },
    }
}

#[test]
fn plain_and_checkpointed_plans_give_the_same_code() {
    // TODO(jit): build both plans with crate::passes::plan once branch `passes` is on main.
    let tape = asian(8);
    let n = tape.len() as u32;
    let seg = |r: std::ops::Range<u32>| Segment {
        range: r,
        bookmarks: vec![],
        recompute: vec![],
        draws: vec![],
    };
    let plain = plan_with(&tape, vec![seg(0..n)]);
    let ckpt = plan_with(&tape, vec![seg(0..20), seg(20..40), seg(40..n)]);
    let _: &Liveness = &plain.liveness;
    let o = opts(Mode::Reverse, Precision::F64);
    let a = emit(&tape, &plain, &o).unwrap();
    let b = emit(&tape, &ckpt, &o).unwrap();
    assert_eq!(a.source, b.source);
    assert_eq!(a.manifest, b.manifest);
    let inputs: Vec<f64> = tape.inputs.iter().map(|i| i.value).collect();
    let ca = cpu::load(&a.source, &a.manifest).unwrap();
    let cb = cpu::load(&b.source, &b.manifest).unwrap();
    let (ra, rb) = (
        run_rows(&ca, &inputs, 3, 0, 50),
        run_rows(&cb, &inputs, 3, 0, 50),
    );
    assert_eq!(
        ra.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        rb.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
    );
}

#[test]
fn dead_and_inactive_nodes_are_not_emitted() {
    // %0 = input x; %1 = normal 0; %2 = exp %0 (dead); %3 = mul %0 %1; output %3
    let mut b = B::default();
    let x = b.input("x", 1.0);
    let z = b.normal(0);
    let dead = b.un(UnaryOp::Log, x);
    let _ = dead;
    let m = b.bin(BinaryOp::Mul, x, z);
    b.out("y", m);
    let tape = b.finish();
    let (k, c) = kernel(&tape, opts(Mode::Reverse, Precision::F64));
    // log appears once (Box–Muller), not for the dead node.
    assert_eq!(k.source.matches("call fn1").count(), 1, "{}", k.source);
    let out = run_rows(&c, &[1.5], 7, 0, 3);
    for p in 0..3 {
        let z = f64::normal(7, p, 0);
        assert_eq!(
            &out[p as usize * 3..p as usize * 3 + 3],
            &[1.5 * z, 1.5 * z * (1.5 * z), z]
        );
    }
}

#[test]
fn bad_tapes_are_errors_not_panics() {
    let mut t = asian(2);
    t.nodes[20] = Node::Binary(BinaryOp::Add, NodeId(25), NodeId(0));
    let act = Activity {
        active: vec![true; t.len()],
        live: vec![true; t.len()],
    };
    let e = emit_with_activity(&t, &act, &opts(Mode::Reverse, Precision::F64)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "tape not lowerable to CPU code: arguments point backwards (at %20)"
    );
    let mut t = asian(2);
    t.outputs.clear();
    let e = emit_with_activity(
        &t,
        &crate::passes::activity(&t),
        &opts(Mode::Price, Precision::F64),
    )
    .unwrap_err();
    assert!(matches!(
        e,
        JitError::Tape {
            rule: "a tape has at least one output",
            ..
        }
    ));
    let t = asian(2);
    let short = Activity {
        active: vec![true; 3],
        live: vec![true; 3],
    };
    assert!(emit_with_activity(&t, &short, &opts(Mode::Price, Precision::F64)).is_err());
    let mut t = asian(2);
    t.nodes[3] = Node::Const(99);
    assert!(emit_with_activity(
        &t,
        &crate::passes::activity(&t),
        &opts(Mode::Price, Precision::F64)
    )
    .is_err());
    let mut t = asian(2);
    t.nodes[4] = Node::Input(0);
    let e = emit_with_activity(
        &t,
        &crate::passes::activity(&t),
        &opts(Mode::Price, Precision::F64),
    )
    .unwrap_err();
    assert!(e.to_string().contains("exactly one input node"), "{e}");
}

#[test]
fn the_loader_refuses_foreign_code() {
    let tape = asian(2);
    let k = emit_with_activity(
        &tape,
        &crate::passes::activity(&tape),
        &opts(Mode::Price, Precision::F64),
    )
    .unwrap();
    let err = |src: &str, m: &Manifest| cpu::load(src, m).unwrap_err().to_string();
    assert!(err(&k.source.replace("%exp", "%system"), &k.manifest)
        .contains("import %system is not one of"));
    let sig = k.source.replace(
        "sig0 = (f64) -> f64 system_v",
        "sig0 = (f64) -> f32 system_v",
    );
    assert_ne!(sig, k.source);
    assert!(err(&sig, &k.manifest).contains("has signature"));
    let entry = k.source.replace(
        "(i64, i64, i64, i64, i64) system_v {",
        "(i64, i64, i64, i64) system_v {",
    );
    assert!(err(&entry, &k.manifest).contains("entry signature"));
    // Valid syntax, invalid IR: Cranelift's verifier speaks.
    let ir = k.source.replacen(
        "    return\n",
        "    v9000 = fadd.f64 v0, v0\n    return\n",
        1,
    );
    assert_ne!(ir, k.source);
    assert!(
        err(&ir, &k.manifest).contains("does not parse")
            || err(&ir, &k.manifest).contains("compiling")
    );
    assert!(err(&k.source.replace("%exp", "%expf"), &k.manifest).contains("not one of"));
    assert!(err("function %f() {\nblock0:\n  return\n}", &k.manifest).contains("entry point"));
    assert!(err("garbage", &k.manifest).contains("does not parse"));
    let two = format!("{}\n{}", k.source, k.source);
    assert!(err(&two, &k.manifest).contains("2 functions"));
    let mut m = k.manifest.clone();
    m.sums.pop();
    assert!(err(&k.source, &m).contains("sums"));
    let mut m = k.manifest.clone();
    m.target = Target::Cuda;
    assert!(err(&k.source, &m).contains("target"));
}

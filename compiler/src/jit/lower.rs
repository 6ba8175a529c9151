//! Tape → Cranelift IR: the block function of the CPU target (ABI in the module doc of `jit`).
//!
//! Layout of the generated function:
//!
//! ```text
//! block0(inputs, seed, first_path, count, out):
//!     load the inputs; the 20 Philox round keys; every live node that does not depend on a draw
//!     brif count != 0 → block1(0, out), block2
//! block1(i, row):                      ; one path per iteration
//!     path = first_path + i
//!     draws (inline Philox4x32-10, Box–Muller through `log`/`cos`), the path-dependent live nodes
//!     reverse mode: one reverse sweep per output, seeded with adjoint 1
//!     store the row (value, value², Greeks per output, as f64)
//!     i + 1 < count → block1(i + 1, row + 8·width), block2
//! block2: return
//! ```
//!
//! Adjoints follow TAPE-FORMAT.md literally: an adjoint starts at +0.0 and each rule adds (or
//! subtracts) its contribution in argument order, so `max`/`min` route the whole adjoint to one
//! argument (ties to the first) and `abs` multiplies by sign(a) with sign(0) = 0. Only active
//! nodes receive contributions; dead nodes are never emitted.

use super::abi::{entry_signature, libm_names, CALL_CONV};
use super::{JitError, Options};
use crate::emit::manifest::{Mode, Precision};
use crate::philox::{M0, M1, W0, W1};
use crate::plan::Activity;
use crate::tape::{BinaryOp, DrawKind, Node, NodeId, Tape, UnaryOp};
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{
    types, AbiParam, BlockArg, ExtFuncData, ExternalName, FuncRef, Function, InstBuilder,
    MemFlagsData, Signature, UserFuncName, Value,
};
use cranelift_codegen::isa::TargetFrontendConfig;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use target_lexicon::PointerWidth;

/// Constants defined once in the entry block (so the text stays short), in the kernel precision.
struct K {
    zero: Value,
    one: Value,
    mone: Value,
    half: Value,
    mtwo: Value,
    tau: Value,
    scale: Value,
    m0: Value,
    m1: Value,
    stream: [Value; 2],
}

struct Ctx<'a> {
    k: K,
    precision: Precision,
    exp: FuncRef,
    log: FuncRef,
    cos: FuncRef,
    tape: &'a Tape,
    active: &'a [bool],
}

impl Ctx<'_> {
    fn fconst(&self, b: &mut FunctionBuilder, x: f64) -> Value {
        match self.precision {
            Precision::F64 => b.ins().f64const(x),
            Precision::F32 => b.ins().f32const(x as f32),
        }
    }

    fn call1(&self, b: &mut FunctionBuilder, f: FuncRef, x: Value) -> Value {
        let inst = b.ins().call(f, &[x]);
        b.inst_results(inst)[0]
    }

    fn to_f64(&self, b: &mut FunctionBuilder, x: Value) -> Value {
        match self.precision {
            Precision::F64 => x,
            Precision::F32 => b.ins().fpromote(types::F64, x),
        }
    }
}

/// Philox4x32-10 of `counter` under the precomputed round keys, as CLIF (TAPE-FORMAT.md, Draws).
fn philox(
    b: &mut FunctionBuilder,
    (m0, m1): (Value, Value),
    keys: &[(Value, Value)],
    counter: [Value; 4],
) -> [Value; 4] {
    let [mut c0, mut c1, mut c2, mut c3] = counter;
    for &(k0, k1) in keys {
        let hi0 = b.ins().umulhi(m0, c0);
        let lo0 = b.ins().imul(m0, c0);
        let hi1 = b.ins().umulhi(m1, c2);
        let lo1 = b.ins().imul(m1, c2);
        let t0 = b.ins().bxor(hi1, c1);
        let n0 = b.ins().bxor(t0, k0);
        let t2 = b.ins().bxor(hi0, c3);
        let n2 = b.ins().bxor(t2, k1);
        (c0, c1, c2, c3) = (n0, lo1, n2, lo0);
    }
    [c0, c1, c2, c3]
}

/// Draw `k` of the path (normal or uniform) in the kernel precision, exactly as `crate::philox`.
fn draw(
    cx: &Ctx,
    b: &mut FunctionBuilder,
    keys: &[(Value, Value)],
    path: (Value, Value),
    kind: DrawKind,
    k: u32,
) -> Value {
    let ck = b.ins().iconst(types::I32, i64::from(k));
    let stream = cx.k.stream[usize::from(kind == DrawKind::Uniform)];
    let x = philox(b, (cx.k.m0, cx.k.m1), keys, [ck, path.0, path.1, stream]);
    let (u1, u2) = match cx.precision {
        Precision::F64 => {
            let word = |b: &mut FunctionBuilder, hi: Value, lo: Value| {
                let h = b.ins().uextend(types::I64, hi);
                let h = b.ins().ishl_imm_u(h, 32);
                let l = b.ins().uextend(types::I64, lo);
                let w = b.ins().bor(h, l);
                let w = b.ins().ushr_imm_u(w, 11);
                b.ins().fcvt_from_uint(types::F64, w)
            };
            let (scale, half) = (cx.k.scale, cx.k.half);
            let a = word(b, x[0], x[1]);
            let a = b.ins().fadd(a, half);
            let u1 = b.ins().fmul(a, scale);
            let u2 = if kind == DrawKind::Normal {
                let w = word(b, x[2], x[3]);
                Some(b.ins().fmul(w, scale))
            } else {
                None
            };
            (u1, u2)
        }
        Precision::F32 => {
            let (scale, half) = (cx.k.scale, cx.k.half);
            let a = b.ins().ushr_imm_u(x[0], 8);
            let a = b.ins().fcvt_from_uint(types::F32, a);
            let a = b.ins().fadd(a, half);
            let u1 = b.ins().fmul(a, scale);
            let u2 = if kind == DrawKind::Normal {
                let w = b.ins().ushr_imm_u(x[1], 8);
                let w = b.ins().fcvt_from_uint(types::F32, w);
                Some(b.ins().fmul(w, scale))
            } else {
                None
            };
            (u1, u2)
        }
    };
    match u2 {
        None => u1,
        Some(u2) => {
            // sqrt(-2 * ln(u1)) * cos(TAU * u2), every step in the kernel precision.
            let l = cx.call1(b, cx.log, u1);
            let t = b.ins().fmul(cx.k.mtwo, l);
            let r = b.ins().sqrt(t);
            let arg = b.ins().fmul(cx.k.tau, u2);
            let c = cx.call1(b, cx.cos, arg);
            b.ins().fmul(r, c)
        }
    }
}

/// The forward value of one node from its arguments' values (draws and inputs handled by the caller).
fn forward(cx: &Ctx, b: &mut FunctionBuilder, node: &Node, val: &[Option<Value>]) -> Value {
    let v = |id: NodeId| val[id.index()].expect("arguments are emitted before their readers");
    match *node {
        Node::Const(k) => cx.fconst(b, cx.tape.consts[k as usize]),
        Node::Unary(op, a) => {
            let a = v(a);
            match op {
                UnaryOp::Neg => b.ins().fneg(a),
                UnaryOp::Exp => cx.call1(b, cx.exp, a),
                UnaryOp::Log => cx.call1(b, cx.log, a),
                UnaryOp::Sqrt => b.ins().sqrt(a),
                UnaryOp::Abs => b.ins().fabs(a),
            }
        }
        Node::Binary(op, a, c) => {
            let (a, c) = (v(a), v(c));
            match op {
                BinaryOp::Add => b.ins().fadd(a, c),
                BinaryOp::Sub => b.ins().fsub(a, c),
                BinaryOp::Mul => b.ins().fmul(a, c),
                BinaryOp::Div => b.ins().fdiv(a, c),
                BinaryOp::Max => {
                    let ge = b.ins().fcmp(FloatCC::GreaterThanOrEqual, a, c);
                    b.ins().select(ge, a, c)
                }
                BinaryOp::Min => {
                    let le = b.ins().fcmp(FloatCC::LessThanOrEqual, a, c);
                    b.ins().select(le, a, c)
                }
            }
        }
        Node::Input(_) | Node::Draw(..) => unreachable!("leaves are emitted by the caller"),
    }
}

/// The adjoint table of one reverse sweep: `None` is an adjoint still at its initial +0.0.
struct Adjoints {
    adj: Vec<Option<Value>>,
    zero: Value,
}

impl Adjoints {
    fn get(&self, a: NodeId) -> Value {
        self.adj[a.index()].unwrap_or(self.zero)
    }

    /// `adj[a] += c` (or `-= c`), skipped when `a` is inactive.
    fn acc(&mut self, cx: &Ctx, b: &mut FunctionBuilder, a: NodeId, c: Value, plus: bool) {
        if !cx.active[a.index()] {
            return;
        }
        let old = self.get(a);
        let new = if plus {
            b.ins().fadd(old, c)
        } else {
            b.ins().fsub(old, c)
        };
        self.adj[a.index()] = Some(new);
    }

    /// `adj[a] += d` when `cond`, unchanged otherwise (the branch of max/min, without a branch).
    fn acc_if(
        &mut self,
        cx: &Ctx,
        b: &mut FunctionBuilder,
        a: NodeId,
        d: Value,
        cond: Value,
        when: bool,
    ) {
        if !cx.active[a.index()] {
            return;
        }
        let old = self.get(a);
        let sum = b.ins().fadd(old, d);
        let new = if when {
            b.ins().select(cond, sum, old)
        } else {
            b.ins().select(cond, old, sum)
        };
        self.adj[a.index()] = Some(new);
    }
}

/// One reverse sweep from `out` (adjoint 1); returns the Greek of every input (+0.0 where none).
fn reverse(cx: &Ctx, b: &mut FunctionBuilder, out: NodeId, val: &[Option<Value>]) -> Vec<Value> {
    let n_inputs = cx.tape.inputs.len();
    let zero = cx.k.zero;
    let mut greeks = vec![zero; n_inputs];
    if !cx.active[out.index()] {
        return greeks;
    }
    let mut t = Adjoints {
        adj: vec![None; cx.tape.len()],
        zero,
    };
    t.adj[out.index()] = Some(cx.k.one);
    let v = |id: NodeId| val[id.index()].expect("live nodes have values");
    for i in (0..=out.index()).rev() {
        let Some(d) = t.adj[i] else { continue };
        let c = val[i];
        match cx.tape.nodes[i] {
            Node::Input(k) => greeks[k as usize] = d,
            Node::Const(_) | Node::Draw(..) => {}
            Node::Unary(op, a) => {
                let va = v(a);
                let c = c.expect("live nodes have values");
                if !cx.active[a.index()] {
                    continue;
                }
                match op {
                    UnaryOp::Neg => t.acc(cx, b, a, d, false),
                    UnaryOp::Exp => {
                        let x = b.ins().fmul(d, c);
                        t.acc(cx, b, a, x, true)
                    }
                    UnaryOp::Log => {
                        let x = b.ins().fdiv(d, va);
                        t.acc(cx, b, a, x, true)
                    }
                    UnaryOp::Sqrt => {
                        let x = b.ins().fmul(d, cx.k.half);
                        let x = b.ins().fdiv(x, c);
                        t.acc(cx, b, a, x, true)
                    }
                    UnaryOp::Abs => {
                        let (z, p1, m1) = (cx.k.zero, cx.k.one, cx.k.mone);
                        let gt = b.ins().fcmp(FloatCC::GreaterThan, va, z);
                        let lt = b.ins().fcmp(FloatCC::LessThan, va, z);
                        let s = b.ins().select(lt, m1, z);
                        let s = b.ins().select(gt, p1, s);
                        let x = b.ins().fmul(d, s);
                        t.acc(cx, b, a, x, true)
                    }
                }
            }
            Node::Binary(op, a, e) => {
                let (va, ve) = (v(a), v(e));
                let (aa, ea) = (cx.active[a.index()], cx.active[e.index()]);
                match op {
                    BinaryOp::Add => {
                        t.acc(cx, b, a, d, true);
                        t.acc(cx, b, e, d, true);
                    }
                    BinaryOp::Sub => {
                        t.acc(cx, b, a, d, true);
                        t.acc(cx, b, e, d, false);
                    }
                    BinaryOp::Mul => {
                        if aa {
                            let x = b.ins().fmul(d, ve);
                            t.acc(cx, b, a, x, true);
                        }
                        if ea {
                            let x = b.ins().fmul(d, va);
                            t.acc(cx, b, e, x, true);
                        }
                    }
                    BinaryOp::Div => {
                        if aa {
                            let x = b.ins().fdiv(d, ve);
                            t.acc(cx, b, a, x, true);
                        }
                        if ea {
                            let c = c.expect("live nodes have values");
                            let x = b.ins().fmul(d, c);
                            let x = b.ins().fdiv(x, ve);
                            t.acc(cx, b, e, x, false);
                        }
                    }
                    BinaryOp::Max | BinaryOp::Min => {
                        let cc = if op == BinaryOp::Max {
                            FloatCC::GreaterThanOrEqual
                        } else {
                            FloatCC::LessThanOrEqual
                        };
                        let cond = b.ins().fcmp(cc, va, ve);
                        t.acc_if(cx, b, a, d, cond, true);
                        t.acc_if(cx, b, e, d, cond, false);
                    }
                }
            }
        }
    }
    greeks
}

/// Lowers a verified tape to the CPU block function (see the `jit` module doc for the ABI).
pub(super) fn lower(
    tape: &Tape,
    activity: &Activity,
    opts: &Options,
    name: &str,
) -> Result<Function, JitError> {
    let n = tape.len();
    let (ty, precision) = match opts.precision {
        Precision::F64 => (types::F64, Precision::F64),
        Precision::F32 => (types::F32, Precision::F32),
    };
    let mut func = Function::with_name_signature(UserFuncName::testcase(name), entry_signature());
    let mut unary = Signature::new(CALL_CONV);
    unary.params.push(AbiParam::new(ty));
    unary.returns.push(AbiParam::new(ty));
    let unary = func.import_signature(unary);
    let [exp, log, cos] = libm_names(precision).map(|f| {
        func.import_function(ExtFuncData {
            name: ExternalName::testcase(f),
            signature: unary,
            colocated: false,
            patchable: false,
        })
    });
    let live = &activity.live;

    // Path-dependent nodes: draws and everything that reads one.
    let mut varying = vec![false; n];
    for (i, node) in tape.nodes.iter().enumerate() {
        varying[i] = matches!(node, Node::Draw(..)) || node.args().any(|a| varying[a.index()]);
    }
    let mut width = 2usize;
    if opts.mode == Mode::Reverse {
        width += tape.inputs.len();
    }
    let row_bytes = (8 * width * tape.outputs.len()) as i64;

    let mut fctx = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut func, &mut fctx);
    let entry = b.create_block();
    let body = b.create_block();
    let exit = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.append_block_param(body, types::I64);
    b.append_block_param(body, types::I64);

    b.switch_to_block(entry);
    let params = b.block_params(entry).to_vec();
    let (inputs, seed, first, count, out) = (params[0], params[1], params[2], params[3], params[4]);
    let fc = |b: &mut FunctionBuilder, x: f64| match precision {
        Precision::F64 => b.ins().f64const(x),
        Precision::F32 => b.ins().f32const(x as f32),
    };
    let k = K {
        zero: fc(&mut b, 0.0),
        one: fc(&mut b, 1.0),
        mone: fc(&mut b, -1.0),
        half: fc(&mut b, 0.5),
        mtwo: fc(&mut b, -2.0),
        tau: match precision {
            Precision::F64 => b.ins().f64const(std::f64::consts::TAU),
            Precision::F32 => b.ins().f32const(std::f32::consts::TAU),
        },
        scale: match precision {
            Precision::F64 => b.ins().f64const(1.0 / 9_007_199_254_740_992.0),
            Precision::F32 => b.ins().f32const(1.0f32 / 16_777_216.0),
        },
        m0: b.ins().iconst(types::I32, i64::from(M0)),
        m1: b.ins().iconst(types::I32, i64::from(M1)),
        stream: [b.ins().iconst(types::I32, 0), b.ins().iconst(types::I32, 1)],
    };
    let cx = Ctx {
        k,
        precision,
        exp,
        log,
        cos,
        tape,
        active: &activity.active,
    };
    let flags = MemFlagsData::trusted();
    let mut val: Vec<Option<Value>> = vec![None; n];
    let seed_lo = b.ins().ireduce(types::I32, seed);
    let seed_hi = b.ins().ushr_imm_u(seed, 32);
    let seed_hi = b.ins().ireduce(types::I32, seed_hi);
    let mut keys = Vec::with_capacity(10);
    for r in 0..10u32 {
        let d0 = b.ins().iconst(types::I32, i64::from(W0.wrapping_mul(r)));
        let d1 = b.ins().iconst(types::I32, i64::from(W1.wrapping_mul(r)));
        let k0 = b.ins().iadd(seed_lo, d0);
        let k1 = b.ins().iadd(seed_hi, d1);
        keys.push((k0, k1));
    }
    let size = ty.bytes() as i32;
    for (i, node) in tape.nodes.iter().enumerate() {
        if !live[i] || varying[i] {
            continue;
        }
        val[i] = Some(match *node {
            Node::Input(k) => b.ins().load(ty, flags, inputs, size * k as i32),
            _ => forward(&cx, &mut b, node, &val),
        });
    }
    let zero64 = b.ins().iconst(types::I64, 0);
    b.ins().brif(
        count,
        body,
        &[BlockArg::Value(zero64), BlockArg::Value(out)],
        exit,
        &[],
    );

    b.switch_to_block(body);
    let bp = b.block_params(body).to_vec();
    let (idx, row) = (bp[0], bp[1]);
    let path = b.ins().iadd(first, idx);
    let path_lo = b.ins().ireduce(types::I32, path);
    let path_hi = b.ins().ushr_imm_u(path, 32);
    let path_hi = b.ins().ireduce(types::I32, path_hi);
    for (i, node) in tape.nodes.iter().enumerate() {
        if !live[i] || !varying[i] {
            continue;
        }
        val[i] = Some(match *node {
            Node::Draw(kind, k) => draw(&cx, &mut b, &keys, (path_lo, path_hi), kind, k),
            _ => forward(&cx, &mut b, node, &val),
        });
    }
    let mut offset = 0i32;
    for o in &tape.outputs {
        let v = val[o.node.index()].expect("outputs are live");
        let v = cx.to_f64(&mut b, v);
        let sq = b.ins().fmul(v, v);
        b.ins().store(flags, v, row, offset);
        b.ins().store(flags, sq, row, offset + 8);
        offset += 16;
        if opts.mode == Mode::Reverse {
            for g in reverse(&cx, &mut b, o.node, &val) {
                let g = cx.to_f64(&mut b, g);
                b.ins().store(flags, g, row, offset);
                offset += 8;
            }
        }
    }
    let next = b.ins().iadd_imm_u(idx, 1);
    let next_row = b.ins().iadd_imm_u(row, row_bytes);
    let more = b.ins().icmp(IntCC::UnsignedLessThan, next, count);
    b.ins().brif(
        more,
        body,
        &[BlockArg::Value(next), BlockArg::Value(next_row)],
        exit,
        &[],
    );

    b.switch_to_block(exit);
    b.ins().return_(&[]);
    b.seal_all_blocks();
    // No stack-map values, so the frontend config is never consulted; it names the text's target.
    b.finalize(TargetFrontendConfig {
        default_call_conv: CALL_CONV,
        pointer_width: PointerWidth::U64,
        page_size_align_log2: 12,
    });
    Ok(func)
}

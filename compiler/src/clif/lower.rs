//! Schedule → Cranelift IR: the block function of the CPU target (ABI in the module doc of `clif`).
//!
//! Layout of the generated function:
//!
//! ```text
//! block0(inputs, seed, first_path, count, out):
//!     the literals; the 20 Philox round keys; every definition of the schedule that does not
//!     depend on a draw (inputs and what reads only them)
//!     brif count != 0 → block1(0, out), block2
//! block1(i, row):                      ; one path per iteration
//!     path = first_path + i
//!     the path-dependent definitions (draws: inline Philox4x32-10, Box–Muller through `log`/`cos`)
//!     reverse mode: the schedule's seeds and adjoint applications, every lane in one sweep
//!     the leaves: the row (value, value², Greeks per output, as f64)
//!     i + 1 < count → block1(i + 1, row + 8·width), block2
//! block2: return
//! ```
//!
//! The lowering reads the plain schedule (`crate::schedule::Schedule::plain`) and never the tape's
//! ops: values and adjoints are the rules the statements carry (`crate::ops`), built as CLIF: an
//! adjoint starts at +0.0 and each step adds (or subtracts) its contribution in the table's order;
//! a branching step (`max`, `min`, `abs`) is a `select`, not a branch. `exp`, `log`, `cos` are
//! always imported (the draws need log and cos); `tanh`, `erfc`, `pow` only where a rule calls
//! them.

use super::abi::{entry_signature, libm, CALL_CONV};
use super::{ClifError, Options};
use crate::emit::manifest::Precision;
use crate::ops::{self, Arith, Cmp, Cond, Expr, Factor, Fun, Step};
use crate::philox::{M0, M1, W0, W1};
use crate::schedule::{
    Adjoint, Class, Def, Grad, Leaf, Loop, Operand, Schedule, Slot, Stmt, Tangent, Var,
};
use crate::tape::{DrawKind, NodeId};
use crate::verify::Verified;
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{
    types, AbiParam, BlockArg, ExtFuncData, ExternalName, FuncRef, Function, InstBuilder,
    MemFlagsData, Signature, StackSlotData, StackSlotKind, UserFuncName, Value,
};
use cranelift_codegen::isa::TargetFrontendConfig;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use target_lexicon::PointerWidth;

/// Constants defined once in the entry block (so the text stays short), in the kernel precision.
struct K {
    zero: Value,
    one: Value,
    half: Value,
    mtwo: Value,
    tau: Value,
    scale: Value,
    /// The uniform draw's scale: 2^-52 (f64), 2^-23 (f32).
    uscale: Value,
    m0: Value,
    m1: Value,
    stream: [Value; 2],
}

struct Ctx {
    k: K,
    precision: Precision,
    exp: FuncRef,
    log: FuncRef,
    cos: FuncRef,
    /// Imported only where a rule calls them.
    tanh: Option<FuncRef>,
    erfc: Option<FuncRef>,
    pow: Option<FuncRef>,
    /// The literals of every rule the tape uses, defined once in the entry block (by f64 bits).
    lits: Vec<(u64, Value)>,
}

impl Ctx {
    /// The entry block's value of rule literal `x`.
    fn lit(&self, x: f64) -> Value {
        self.lits
            .iter()
            .find(|(bits, _)| *bits == x.to_bits())
            .map(|&(_, v)| v)
            .expect("every rule literal is defined in the entry block")
    }

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
    ck: Value,
) -> Value {
    let stream = cx.k.stream[usize::from(kind == DrawKind::Uniform)];
    let x = philox(b, (cx.k.m0, cx.k.m1), keys, [ck, path.0, path.1, stream]);
    // A uniform draw keeps one bit fewer than the normal's u1 (TAPE-FORMAT.md), so it stays in (0, 1).
    let uniform = kind == DrawKind::Uniform;
    let scale = if uniform { cx.k.uscale } else { cx.k.scale };
    let (u1, u2) = match cx.precision {
        Precision::F64 => {
            let word = |b: &mut FunctionBuilder, hi: Value, lo: Value, shift: i64| {
                let h = b.ins().uextend(types::I64, hi);
                let h = b.ins().ishl_imm_u(h, 32);
                let l = b.ins().uextend(types::I64, lo);
                let w = b.ins().bor(h, l);
                let w = b.ins().ushr_imm_u(w, shift);
                b.ins().fcvt_from_uint(types::F64, w)
            };
            let half = cx.k.half;
            let a = word(b, x[0], x[1], if uniform { 12 } else { 11 });
            let a = b.ins().fadd(a, half);
            let u1 = b.ins().fmul(a, scale);
            let u2 = if kind == DrawKind::Normal {
                let w = word(b, x[2], x[3], 11);
                Some(b.ins().fmul(w, scale))
            } else {
                None
            };
            (u1, u2)
        }
        Precision::F32 => {
            let half = cx.k.half;
            let a = b.ins().ushr_imm_u(x[0], if uniform { 9 } else { 8 });
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

/// The CLIF value of rule expression `e` over operands `x` = [A, B, C, D] (`crate::ops`).
fn expr(cx: &Ctx, b: &mut FunctionBuilder, e: &Expr, x: &[Option<Value>; 4]) -> Value {
    let operand = |i: usize| x[i].expect("a rule reads only operands its node has");
    match *e {
        Expr::A => operand(0),
        Expr::B => operand(1),
        Expr::C => operand(2),
        Expr::D => operand(3),
        Expr::Lit(v) => cx.lit(v),
        Expr::Neg(y) => {
            let y = expr(cx, b, y, x);
            b.ins().fneg(y)
        }
        Expr::Arith(op, y, z) => {
            let (y, z) = (expr(cx, b, y, x), expr(cx, b, z, x));
            match op {
                Arith::Add => b.ins().fadd(y, z),
                Arith::Sub => b.ins().fsub(y, z),
                Arith::Mul => b.ins().fmul(y, z),
                Arith::Div => b.ins().fdiv(y, z),
            }
        }
        Expr::Chain(f, y, z) => {
            // ops::Factor::strong_zero, as a select.
            let (y, z) = (expr(cx, b, y, x), expr(cx, b, z, x));
            let zero = cx.fconst(b, 0.0);
            let y_zero = b.ins().fcmp(FloatCC::Equal, y, zero);
            let (r, z_kills) = match f {
                Factor::Times => (b.ins().fmul(y, z), b.ins().fcmp(FloatCC::Equal, z, zero)),
                Factor::Over => {
                    let size = b.ins().fabs(z);
                    let inf = cx.fconst(b, f64::INFINITY);
                    (b.ins().fdiv(y, z), b.ins().fcmp(FloatCC::Equal, size, inf))
                }
            };
            let killed = b.ins().bor(y_zero, z_kills);
            b.ins().select(killed, zero, r)
        }
        Expr::Call(f, y) => {
            let y = expr(cx, b, y, x);
            match f {
                Fun::Exp => cx.call1(b, cx.exp, y),
                Fun::Log => cx.call1(b, cx.log, y),
                Fun::Sqrt => b.ins().sqrt(y),
                Fun::Abs => b.ins().fabs(y),
                Fun::Tanh => cx.call1(b, cx.tanh.expect("tanh is imported where used"), y),
                Fun::Erfc => cx.call1(b, cx.erfc.expect("erfc is imported where used"), y),
            }
        }
        Expr::Pow(y, z) => {
            let (y, z) = (expr(cx, b, y, x), expr(cx, b, z, x));
            let pow = cx.pow.expect("pow is imported where used");
            let inst = b.ins().call(pow, &[y, z]);
            b.inst_results(inst)[0]
        }
        Expr::Nan => cx.fconst(b, f64::NAN),
        Expr::Select(c, y, z) => {
            let c = cond(cx, b, &c, x);
            let (y, z) = (expr(cx, b, y, x), expr(cx, b, z, x));
            b.ins().select(c, y, z)
        }
    }
}

/// The CLIF truth value (i8, 0 or 1) of rule condition `c`.
fn cond(cx: &Ctx, b: &mut FunctionBuilder, c: &Cond, x: &[Option<Value>; 4]) -> Value {
    let (l, r) = (expr(cx, b, c.lhs, x), expr(cx, b, c.rhs, x));
    let cc = match c.cmp {
        Cmp::Lt => FloatCC::LessThan,
        Cmp::Le => FloatCC::LessThanOrEqual,
        Cmp::Gt => FloatCC::GreaterThan,
        Cmp::Ge => FloatCC::GreaterThanOrEqual,
    };
    b.ins().fcmp(cc, l, r)
}

/// The values of the schedule's names so far, and the adjoint table of the reverse sweep.
struct Values {
    /// `val[v]`: node v's value (`Var::Value`), once defined.
    val: Vec<Option<Value>>,
    /// `adj[v * lanes + lane]`: node v's adjoint in `lane` (`None` is an adjoint still at +0.0),
    /// or in forward mode its tangent in direction `lane`.
    adj: Vec<Option<Value>>,
    lanes: usize,
    /// The loops' carried values and a reverse loop's restored copies where the code now
    /// stands.
    carried: rustc_hash::FxHashMap<Var, Value>,
    /// A reverse loop's previous-iteration adjoints (`Grad::Prev`; absent: still +0.0).
    prev: rustc_hash::FxHashMap<(NodeId, usize), Value>,
}

impl Values {
    fn operand(&self, cx: &Ctx, x: Operand) -> Value {
        match x {
            Operand::Lit(v) => cx.lit(v),
            Operand::Var(Var::Value(n)) => {
                self.val[n.index()].expect("values are defined before they are read")
            }
            Operand::Var(Var::Tangent(n, lane)) => self.adj[n.index() * self.lanes + lane]
                .expect("tangents are defined before they are read"),
            Operand::Var(v @ (Var::Carried(_) | Var::CarriedTangent(..) | Var::Copy(_))) => *self
                .carried
                .get(&v)
                .expect("carried values are defined before they are read"),
        }
    }

    fn adjoint(&self, cx: &Ctx, v: NodeId, lane: usize) -> Value {
        self.grad(Grad::Of(v), lane).unwrap_or(cx.k.zero)
    }

    /// Adjoint `g` in `lane`; `None` while it is +0.0.
    fn grad(&self, g: Grad, lane: usize) -> Option<Value> {
        match g {
            Grad::Of(v) => self.adj[v.index() * self.lanes + lane],
            Grad::Prev(v) => self.prev.get(&(v, lane)).copied(),
        }
    }

    fn set_grad(&mut self, g: Grad, lane: usize, x: Option<Value>) {
        match g {
            Grad::Of(v) => self.adj[v.index() * self.lanes + lane] = x,
            Grad::Prev(v) => match x {
                Some(x) => {
                    self.prev.insert((v, lane), x);
                }
                None => {
                    self.prev.remove(&(v, lane));
                }
            },
        }
    }
}

/// The value a definition computes (draws under the path's generator).
fn define(
    cx: &Ctx,
    b: &mut FunctionBuilder,
    vals: &Values,
    def: &Def,
    draws: &dyn Fn(&mut FunctionBuilder, DrawKind, Value) -> Value,
    input: &dyn Fn(&mut FunctionBuilder, u32) -> Value,
    iteration: Option<Value>,
) -> Value {
    match *def {
        Def::Input(k) => input(b, k),
        Def::Draw {
            kind,
            index,
            stride,
            ..
        } => {
            let mut ck = b.ins().iconst(types::I32, i64::from(index));
            if stride > 0 {
                let i = iteration.expect("a strided draw is inside a loop");
                let step = b.ins().imul_imm_u(i, i64::from(stride));
                ck = b.ins().iadd(ck, step);
            }
            draws(b, kind, ck)
        }
        Def::Rule { rule, args } => {
            let x = [
                args[0].map(|a| vals.operand(cx, a)),
                args[1].map(|a| vals.operand(cx, a)),
                None,
                None,
            ];
            expr(cx, b, &rule.value, &x)
        }
    }
}

/// One adjoint rule application: its steps, in order.
fn adjoint(cx: &Ctx, b: &mut FunctionBuilder, vals: &mut Values, adj: &Adjoint) {
    // Only the operands the steps that run read (a reverse loop recomputes no others).
    let (ra, rb, rc) = adj.rule.reads(adj.to.map(|t| t.is_some()));
    let op = |x: Option<Operand>, read: bool| x.filter(|_| read).map(|x| vals.operand(cx, x));
    let x = [
        op(adj.x[0], ra),
        op(adj.x[1], rb),
        op(adj.x[2], rc),
        Some(vals.adjoint(cx, adj.node, adj.lane)),
    ];
    for st in adj.rule.adjoint {
        step(cx, b, vals, adj, st, &x, None);
    }
}

/// A reverse loop (`Loop::reverse`) as a do-while loop from its last iteration down to its
/// first: the block's parameters are the iteration and the adjoints the body updates that live
/// outside it (`Loop::outer_adjoints`), the exit block's their values after the first iteration.
#[allow(clippy::too_many_arguments)]
fn reverse_loop(
    cx: &Ctx,
    b: &mut FunctionBuilder,
    vals: &mut Values,
    l: &Loop,
    ty: types::Type,
    draws: &dyn Fn(&mut FunctionBuilder, DrawKind, Value) -> Value,
    input: &dyn Fn(&mut FunctionBuilder, u32) -> Value,
    bookmark: &dyn Fn(&mut FunctionBuilder, u32, u32, Value) -> Value,
) -> Result<(), ClifError> {
    let flags = MemFlagsData::trusted();
    let outer = l.outer_adjoints();
    let lp = b.create_block();
    let after = b.create_block();
    b.append_block_param(lp, types::I32);
    for _ in &outer {
        b.append_block_param(lp, ty);
        b.append_block_param(after, ty);
    }
    let last = b.ins().iconst(types::I32, i64::from(l.first + l.count - 1));
    let mut args = vec![BlockArg::Value(last)];
    for &(g, lane) in &outer {
        args.push(BlockArg::Value(vals.grad(g, lane).unwrap_or(cx.k.zero)));
    }
    b.ins().jump(lp, &args);
    b.switch_to_block(lp);
    let p = b.block_params(lp).to_vec();
    let it = p[0];
    for (&(g, lane), &x) in outer.iter().zip(&p[1..]) {
        vals.set_grad(g, lane, Some(x));
    }
    for s in &l.body {
        match s {
            Stmt::Note(_) | Stmt::Rekey => {}
            Stmt::OpaqueRead {
                node,
                from:
                    Some(Slot {
                        class: Class::Local,
                        index: at,
                    }),
            } => {
                let a = bookmark(b, *at, l.first, it);
                let x = b.ins().load(ty, flags, a, 0);
                vals.carried.insert(Var::Copy(*node), x);
            }
            Stmt::Define { node, def, .. } => {
                let x = define(cx, b, vals, def, draws, input, Some(it));
                vals.val[node.index()] = Some(x);
            }
            Stmt::DeclareAdjoints { grad, lanes } => {
                for &lane in lanes {
                    vals.set_grad(*grad, lane, None);
                }
            }
            Stmt::Adjoint(adj) => adjoint(cx, b, vals, adj),
            Stmt::MoveAdjoint { to, from, lane } => {
                let x = vals.grad(*from, *lane);
                vals.set_grad(*to, *lane, x);
            }
            _ => {
                return Err(ClifError::Unsupported(
                    "a reverse loop of anything but restores, definitions and adjoints",
                ))
            }
        }
    }
    let next: Vec<BlockArg> = outer
        .iter()
        .map(|&(g, lane)| BlockArg::Value(vals.grad(g, lane).unwrap_or(cx.k.zero)))
        .collect();
    let more = b
        .ins()
        .icmp_imm_u(IntCC::UnsignedGreaterThan, it, i64::from(l.first));
    let it1 = b.ins().iadd_imm_u(it, -1);
    let mut again = vec![BlockArg::Value(it1)];
    again.extend(next.iter().cloned());
    b.ins().brif(more, lp, &again, after, &next);
    b.switch_to_block(after);
    let p = b.block_params(after).to_vec();
    for (&(g, lane), &x) in outer.iter().zip(&p) {
        vals.set_grad(g, lane, Some(x));
    }
    Ok(())
}

/// When a guarded adjoint step applies: `(flag, true)` when the i8 `flag` is 1, `(flag, false)`
/// when it is 0.
type Guard = Option<(Value, bool)>;

/// Applies one adjoint step of `adj` to the table, selecting instead of branching; steps that feed
/// no adjoint (`adj.to`) are skipped.
fn step(
    cx: &Ctx,
    b: &mut FunctionBuilder,
    vals: &mut Values,
    adj: &Adjoint,
    step_: &Step,
    x: &[Option<Value>; 4],
    guard: Guard,
) {
    match step_ {
        Step::Acc(acc) => {
            let Some(a) = adj.to[acc.arg.index()] else {
                return;
            };
            let old = vals.grad(a, adj.lane).unwrap_or(cx.k.zero);
            let c = expr(cx, b, &acc.expr, x);
            let new = if acc.sub {
                b.ins().fsub(old, c)
            } else {
                b.ins().fadd(old, c)
            };
            let new = match guard {
                None => new,
                Some((flag, true)) => b.ins().select(flag, new, old),
                Some((flag, false)) => b.ins().select(flag, old, new),
            };
            vals.set_grad(a, adj.lane, Some(new));
        }
        Step::If(c, then, otherwise) => {
            let flag = cond(cx, b, c, x);
            let (then_guard, else_guard) = match guard {
                None => (Some((flag, true)), Some((flag, false))),
                Some((g, pol)) => {
                    // Nested: apply when the outer guard holds and this condition does (not).
                    let g = if pol {
                        g
                    } else {
                        b.ins().icmp_imm_u(IntCC::Equal, g, 0)
                    };
                    let not_flag = b.ins().icmp_imm_u(IntCC::Equal, flag, 0);
                    let t = b.ins().band(g, flag);
                    let e = b.ins().band(g, not_flag);
                    (Some((t, true)), Some((e, true)))
                }
            };
            step(cx, b, vals, adj, &Step::Acc(*then), x, then_guard);
            if let Some(s) = otherwise {
                step(cx, b, vals, adj, s, x, else_guard);
            }
        }
    }
}

/// A tangent definition's term for one adjoint step (`schedule::Tangent`): `(value, subtracted)`,
/// or `None` when the step contributes nothing; a branching step is a `select`.
fn tangent_term(
    cx: &Ctx,
    b: &mut FunctionBuilder,
    vals: &Values,
    t: &Tangent,
    step: &Step,
    x: &[Option<Value>; 4],
) -> Option<(Value, bool)> {
    let acc = |b: &mut FunctionBuilder, acc: &ops::Acc| {
        let d = t.from[acc.arg.index()]?;
        let x = [x[0], x[1], x[2], Some(vals.operand(cx, d))];
        Some((expr(cx, b, &acc.expr, &x), acc.sub))
    };
    match step {
        Step::Acc(a) => acc(b, a),
        Step::If(c, then, otherwise) => {
            let flag = cond(cx, b, c, x);
            let then = acc(b, then);
            let other = otherwise.and_then(|s| tangent_term(cx, b, vals, t, s, x));
            if then.is_none() && other.is_none() {
                return None;
            }
            let arm = |b: &mut FunctionBuilder, term: Option<(Value, bool)>| match term {
                None => cx.k.zero,
                Some((v, true)) => b.ins().fneg(v),
                Some((v, false)) => v,
            };
            let (t, o) = (arm(b, then), arm(b, other));
            Some((b.ins().select(flag, t, o), false))
        }
    }
}

/// The value of a tangent definition: its terms summed in step order.
fn tangent(cx: &Ctx, b: &mut FunctionBuilder, vals: &Values, t: &Tangent) -> Value {
    let op = |x: Option<Operand>| x.map(|x| vals.operand(cx, x));
    let x = [op(t.x[0]), op(t.x[1]), op(t.x[2]), None];
    let mut sum: Option<Value> = None;
    for step in t.rule.adjoint {
        let Some((v, sub)) = tangent_term(cx, b, vals, t, step, &x) else {
            continue;
        };
        sum = Some(match (sum, sub) {
            (None, false) => v,
            (None, true) => b.ins().fneg(v),
            (Some(s), false) => b.ins().fadd(s, v),
            (Some(s), true) => b.ins().fsub(s, v),
        });
    }
    sum.unwrap_or(cx.k.zero)
}

/// Every literal the schedule reads (its rules' and its constant operands'), each once.
fn literals(schedule: &Schedule) -> Vec<f64> {
    let mut out = Vec::new();
    for rule in schedule.rules() {
        rule.literals(&mut out);
    }
    let mut push = |x: Option<Operand>| {
        if let Some(Operand::Lit(v)) = x {
            if !out.iter().any(|y: &f64| y.to_bits() == v.to_bits()) {
                out.push(v);
            }
        }
    };
    schedule.walk(&mut |s| match s {
        Stmt::Define {
            def: Def::Rule { args, .. },
            ..
        } => args.iter().for_each(|&a| push(a)),
        Stmt::Adjoint(adj) => adj.x.iter().for_each(|&a| push(a)),
        Stmt::Tangent(t) => t.x.iter().chain(&t.from).for_each(|&a| push(a)),
        Stmt::Loop(l) => l.carried.iter().for_each(|c| {
            push(Some(c.init));
            push(Some(c.next));
        }),
        Stmt::Leaves(leaves) => leaves.iter().for_each(|l| {
            if let Leaf::Value(x) = *l {
                push(Some(x))
            }
        }),
        _ => {}
    });
    out
}

/// Lowers a verified tape to the CPU block function (see the `clif` module doc for the ABI).
pub(super) fn lower(
    v: &Verified,
    schedule: &Schedule,
    opts: &Options,
    name: &str,
) -> Result<Function, ClifError> {
    let tape = v.tape();
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
    // exp, log and cos always (draws); tanh, erfc and pow only where a rule calls them.
    let wanted = [
        ("exp", true),
        ("log", true),
        ("cos", true),
        ("tanh", schedule.calls(Some(Fun::Tanh))),
        ("erfc", schedule.calls(Some(Fun::Erfc))),
        ("pow", schedule.calls(None)),
    ];
    let mut binary = None;
    let mut imports = [None; 6];
    for (k, &(f, want)) in wanted.iter().enumerate() {
        if !want {
            continue;
        }
        let (name, arity) = libm(f, precision);
        let signature = if arity == 1 {
            unary
        } else {
            *binary.get_or_insert_with(|| {
                let mut sig = Signature::new(CALL_CONV);
                sig.params = vec![AbiParam::new(ty); 2];
                sig.returns.push(AbiParam::new(ty));
                func.import_signature(sig)
            })
        };
        imports[k] = Some(func.import_function(ExtFuncData {
            name: ExternalName::testcase(name),
            signature,
            colocated: false,
            patchable: false,
        }));
    }
    let [Some(exp), Some(log), Some(cos), tanh, erfc, pow] = imports else {
        unreachable!("exp, log and cos are always imported")
    };

    // Path-dependent nodes (draws and everything that reads one) run once per path; the rest once.
    let varying = &v.info().path_dependent;
    let leaves = match schedule.body.last() {
        Some(Stmt::Leaves(leaves)) => leaves.clone(),
        _ => unreachable!("a schedule ends with its leaves"),
    };
    let row_bytes = (8 * leaves.len()) as i64;

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
        uscale: match precision {
            Precision::F64 => b.ins().f64const(1.0 / 4_503_599_627_370_496.0),
            Precision::F32 => b.ins().f32const(1.0f32 / 8_388_608.0),
        },
        m0: b.ins().iconst(types::I32, i64::from(M0)),
        m1: b.ins().iconst(types::I32, i64::from(M1)),
        stream: [b.ins().iconst(types::I32, 0), b.ins().iconst(types::I32, 1)],
    };
    let lits = literals(schedule)
        .into_iter()
        .map(|x| (x.to_bits(), fc(&mut b, x)))
        .collect();
    let cx = Ctx {
        k,
        precision,
        exp,
        log,
        cos,
        tanh,
        erfc,
        pow,
        lits,
    };
    let flags = MemFlagsData::trusted();
    let mut vals = Values {
        val: vec![None; n],
        adj: vec![None; n * schedule.lanes],
        lanes: schedule.lanes,
        carried: Default::default(),
        prev: Default::default(),
    };
    // The bookmarks: a stack slot of the path's values (`schedule.storage.local`).
    let bookmarks = (schedule.storage.local > 0).then(|| {
        let slot = b.create_sized_stack_slot(StackSlotData::new(
            StackSlotKind::ExplicitSlot,
            schedule.storage.local * ty.bytes(),
            4,
        ));
        b.ins().stack_addr(types::I64, slot, 0)
    });
    // Bookmark `at` of iteration `it` of a loop that starts at `first`.
    let bookmark = |b: &mut FunctionBuilder, at: u32, first: u32, it: Value| {
        let base = bookmarks.expect("a bookmark has its slot");
        let i = b.ins().iadd_imm_u(it, i64::from(at) - i64::from(first));
        let i = b.ins().uextend(types::I64, i);
        let off = b.ins().imul_imm_u(i, i64::from(ty.bytes()));
        b.ins().iadd(base, off)
    };
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
    let load = |b: &mut FunctionBuilder, k: u32| b.ins().load(ty, flags, inputs, size * k as i32);
    let no_draws = |_: &mut FunctionBuilder, _: DrawKind, _: Value| -> Value {
        unreachable!("draws are path-dependent")
    };
    // Path-independent definitions run once per call, before the paths.
    let hoisted = schedule.hoisted(varying);
    for s in &schedule.body {
        if let Stmt::Define { node, def, .. } = s {
            if hoisted[node.index()] {
                let x = define(&cx, &mut b, &vals, def, &no_draws, &load, None);
                vals.val[node.index()] = Some(x);
            }
        }
    }
    // The shifts of the squares (after the market in the inputs buffer), as f64, once per call.
    let mut shifts: Vec<Option<Value>> = vec![None; leaves.len()];
    for (k, leaf) in leaves.iter().enumerate() {
        if let Leaf::Square { shift, .. } = *leaf {
            let c = load(&mut b, shift);
            shifts[k] = Some(cx.to_f64(&mut b, c));
        }
    }
    let zero_f64 = b.ins().f64const(0.0);
    let one_f64 = b.ins().f64const(1.0);
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
    let draws = |b: &mut FunctionBuilder, kind: DrawKind, ck: Value| {
        draw(&cx, b, &keys, (path_lo, path_hi), kind, ck)
    };
    for s in &schedule.body {
        match s {
            Stmt::Define { node, def, .. } => {
                if !hoisted[node.index()] {
                    let x = define(&cx, &mut b, &vals, def, &draws, &load, None);
                    vals.val[node.index()] = Some(x);
                }
            }
            Stmt::Loop(l) if l.reverse => {
                reverse_loop(&cx, &mut b, &mut vals, l, ty, &draws, &load, &bookmark)?;
            }
            Stmt::Loop(l) => {
                // A do-while loop (a region has at least two iterations): the block's
                // parameters are the iteration and the carried values, the exit block's the
                // carried values after the last iteration.
                let lp = b.create_block();
                let after = b.create_block();
                b.append_block_param(lp, types::I32);
                for _ in &l.carried {
                    b.append_block_param(lp, ty);
                    b.append_block_param(after, ty);
                }
                let start = b.ins().iconst(types::I32, i64::from(l.first));
                let mut args = vec![BlockArg::Value(start)];
                for c in &l.carried {
                    args.push(BlockArg::Value(vals.operand(&cx, c.init)));
                }
                b.ins().jump(lp, &args);
                b.switch_to_block(lp);
                let p = b.block_params(lp).to_vec();
                for (c, &x) in l.carried.iter().zip(&p[1..]) {
                    vals.carried.insert(c.var, x);
                }
                for s in &l.body {
                    match s {
                        Stmt::Define { node, def, .. } => {
                            let x = define(&cx, &mut b, &vals, def, &draws, &load, Some(p[0]));
                            vals.val[node.index()] = Some(x);
                        }
                        Stmt::Tangent(t) => {
                            let v = tangent(&cx, &mut b, &vals, t);
                            vals.adj[t.node.index() * vals.lanes + t.lane] = Some(v);
                        }
                        Stmt::Store {
                            var,
                            slot:
                                Slot {
                                    class: Class::Local,
                                    index: at,
                                },
                        } => {
                            let x = vals.operand(&cx, Operand::Var(*var));
                            let a = bookmark(&mut b, *at, l.first, p[0]);
                            b.ins().store(flags, x, a, 0);
                        }
                        _ => return Err(ClifError::Unsupported(
                            "a forward loop of anything but definitions, tangents and bookmarks",
                        )),
                    }
                }
                let next: Vec<BlockArg> = l
                    .carried
                    .iter()
                    .map(|c| BlockArg::Value(vals.operand(&cx, c.next)))
                    .collect();
                let it = b.ins().iadd_imm_u(p[0], 1);
                let more =
                    b.ins()
                        .icmp_imm_u(IntCC::UnsignedLessThan, it, i64::from(l.first + l.count));
                let mut again = vec![BlockArg::Value(it)];
                again.extend(next.iter().cloned());
                b.ins().brif(more, lp, &again, after, &next);
                b.switch_to_block(after);
                let p = b.block_params(after).to_vec();
                for (c, &x) in l.carried.iter().zip(&p) {
                    vals.carried.insert(c.var, x);
                }
            }
            Stmt::Tangent(t) => {
                let v = tangent(&cx, &mut b, &vals, t);
                vals.adj[t.node.index() * vals.lanes + t.lane] = Some(v);
            }
            Stmt::Seed { node, lane } => {
                vals.adj[node.index() * vals.lanes + lane] = Some(cx.k.one);
            }
            Stmt::Adjoint(adj) => adjoint(&cx, &mut b, &mut vals, adj),
            Stmt::MoveAdjoint { to, from, lane } => {
                let x = vals.grad(*from, *lane);
                vals.set_grad(*to, *lane, x);
            }
            Stmt::Leaves(_) => {
                let mut ys: Vec<Value> = Vec::with_capacity(leaves.len());
                for (k, leaf) in leaves.iter().enumerate() {
                    let y = match *leaf {
                        Leaf::Value(x) => {
                            let x = vals.operand(&cx, x);
                            cx.to_f64(&mut b, x)
                        }
                        Leaf::Square { of, .. } => {
                            let c = shifts[k].expect("a square's shift is loaded");
                            let d = b.ins().fsub(ys[of], c);
                            b.ins().fmul(d, d)
                        }
                        Leaf::Adjoint(v, lane) => {
                            let d = vals.adjoint(&cx, v, lane);
                            cx.to_f64(&mut b, d)
                        }
                        Leaf::Zero => zero_f64,
                        Leaf::NonFinite { first, end } => {
                            // Finite: the exponent bits are not all ones.
                            let mut ok = None;
                            for j in first..end {
                                if !matches!(leaves[j], Leaf::Value(_) | Leaf::Adjoint(..)) {
                                    continue;
                                }
                                let bits = b.ins().bitcast(types::I64, MemFlagsData::new(), ys[j]);
                                let e = b.ins().band_imm_u(bits, 0x7ff0_0000_0000_0000);
                                let f =
                                    b.ins()
                                        .icmp_imm_u(IntCC::NotEqual, e, 0x7ff0_0000_0000_0000);
                                ok = Some(match ok {
                                    None => f,
                                    Some(o) => b.ins().band(o, f),
                                });
                            }
                            let ok = ok.expect("an output's value is checked");
                            for y in &mut ys[first..end] {
                                *y = b.ins().select(ok, *y, zero_f64);
                            }
                            b.ins().select(ok, zero_f64, one_f64)
                        }
                    };
                    ys.push(y);
                }
                for (k, y) in ys.into_iter().enumerate() {
                    b.ins().store(flags, y, row, 8 * k as i32);
                }
            }
            // The plain schedule's notes and declarations (adjoints start at +0.0) emit nothing
            // (the bookmarks' slot is made above).
            Stmt::Note(_) | Stmt::DeclareAdjoints { .. } => {}
            // The checkpointed sweep's statements: the CPU code runs the plain schedule or loops
            // (`compile` never asks for more; a caller that does gets this, not a panic).
            Stmt::Declare(_)
            | Stmt::Store { .. }
            | Stmt::Rekey
            | Stmt::OpaqueRead { .. }
            | Stmt::Block(_) => return Err(ClifError::Unsupported(
                "a checkpointed statement (scratch, opaque reads, segment blocks) outside a loop",
            )),
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

//! Schedule → LLVM module: the block function of the CPU target (ABI in `crate::clif`'s module
//! doc, the same for both CPU back ends), one path per SIMD lane.
//!
//! ```text
//! entry(inputs, seed, first_path, count, out):
//!     every definition of the schedule that does not depend on a draw, splat over the lanes
//!     count != 0 → loop, exit
//! loop(i):                                ; W paths per iteration: first_path + i + lane
//!     normals(j): draws j, j+1 of the W paths in one 2W-lane call (two independent chains
//!     for the core to overlap), into a stack array (when most normal indices are used)
//!     the path-dependent definitions (draws: loads from that array, or calls of the W-lane
//!     nablac_normal / nablac_uniform: vector Philox4x32-10 and Box–Muller), tangents, seeds
//!     and adjoint applications, as the schedule orders them
//!     the leaves: lane j's row to out[(i + j) * row ..] (a last, partial group goes through a
//!     stack buffer and a copy of its live rows)
//!     i + W < count → loop, exit
//! ```
//!
//! Every value is a `<W x T>` vector (W = 4 in f64, 8 in f32: AVX2's width). The rules are
//! evaluated exactly as `clif::lower` evaluates them (no FMA contraction, no reassociation: the
//! instructions carry no fast-math flags), so the two back ends differ only where the vector
//! math functions (`math.rs`) round differently from the host libm.

use super::math::{self, Func, Vt, R, V};
use super::LlvmError;
use crate::emit::manifest::Precision;
use crate::ops::{self, Arith, Cmp, Cond, Expr, Factor, Fun, Step};
use crate::philox::{M0, M1, W0, W1};
use crate::schedule::{
    Adjoint, Class, Def, Grad, Leaf, Operand, Schedule, Slot, Stmt, Tangent, Var,
};
use crate::tape::{DrawKind, NodeId};
use crate::verify::Verified;
use inkwell::builder::{Builder, BuilderError};
use inkwell::context::Context;
use inkwell::module::{Linkage, Module};
use inkwell::types::VectorType;
use inkwell::values::{FunctionValue, IntValue, VectorValue};
use inkwell::{AddressSpace, FloatPredicate, IntPredicate};

/// Normal draws made per call of the batched draw function (independent chains in one
/// instruction stream, for the core to overlap).
const BATCH: u32 = 2;

/// The lanes of a kernel in `precision`: one vector register of the host's SIMD, chosen where
/// the kernel is emitted (`nablac run` emits and runs it on one machine): 8 f64 or 16 f32 where
/// the CPU has AVX-512 (`host_has_avx512`), else 4 f64 or 8 f32 (AVX2). The width never changes
/// a result: every lane is one path, computed by the same instructions.
pub fn lanes(precision: Precision) -> u32 {
    let per_512_bits = match precision {
        Precision::F64 => 8,
        Precision::F32 => 16,
    };
    if host_has_avx512() {
        per_512_bits
    } else {
        per_512_bits / 2
    }
}

/// Does this machine have AVX-512 (foundation)?
pub fn host_has_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

type Vv<'ctx> = VectorValue<'ctx>;

/// The values of the schedule's names so far (as `clif::lower::Values`).
struct Values<'ctx> {
    val: Vec<Option<Vv<'ctx>>>,
    adj: Vec<Option<Vv<'ctx>>>,
    lanes: usize,
    /// The loops' carried values and a reverse loop's restored copies where the code now
    /// stands.
    carried: rustc_hash::FxHashMap<Var, Vv<'ctx>>,
    /// A reverse loop's previous-iteration adjoints (`Grad::Prev`; absent: still +0.0).
    prev: rustc_hash::FxHashMap<(NodeId, usize), Vv<'ctx>>,
}

fn missing(what: &str) -> BuilderError {
    // A schedule that reads a name before defining it breaks `crate::schedule`'s guarantee; the
    // builder error turns into an `LlvmError` naming it rather than a panic.
    let _ = what;
    BuilderError::UnsetPosition
}

impl<'ctx> Values<'ctx> {
    fn operand(&self, v: &V<'_, 'ctx>, x: Operand) -> R<Vv<'ctx>> {
        match x {
            Operand::Lit(c) => Ok(v.splat(c)),
            Operand::Var(Var::Value(n)) => self.val[n.index()].ok_or_else(|| missing("value")),
            Operand::Var(Var::Tangent(n, lane)) => {
                self.adj[n.index() * self.lanes + lane].ok_or_else(|| missing("tangent"))
            }
            Operand::Var(v @ (Var::Carried(_) | Var::CarriedTangent(..) | Var::Copy(_))) => self
                .carried
                .get(&v)
                .copied()
                .ok_or_else(|| missing("carried value")),
        }
    }

    fn adjoint(&self, v: &V<'_, 'ctx>, n: NodeId, lane: usize) -> Vv<'ctx> {
        self.grad(Grad::Of(n), lane).unwrap_or_else(|| v.splat(0.0))
    }

    /// Adjoint `g` in `lane`; `None` while it is +0.0.
    fn grad(&self, g: Grad, lane: usize) -> Option<Vv<'ctx>> {
        match g {
            Grad::Of(n) => self.adj[n.index() * self.lanes + lane],
            Grad::Prev(n) => self.prev.get(&(n, lane)).copied(),
        }
    }

    fn set_grad(&mut self, g: Grad, lane: usize, x: Option<Vv<'ctx>>) {
        match (g, x) {
            (Grad::Of(n), _) => self.adj[n.index() * self.lanes + lane] = x,
            (Grad::Prev(n), Some(x)) => {
                self.prev.insert((n, lane), x);
            }
            (Grad::Prev(n), None) => {
                self.prev.remove(&(n, lane));
            }
        }
    }
}

/// The vector value of rule expression `e` over `x` = [A, B, C, D] (`crate::ops`).
fn expr<'ctx>(v: &V<'_, 'ctx>, e: &Expr, x: &[Option<Vv<'ctx>>; 4]) -> R<Vv<'ctx>> {
    let operand = |i: usize| x[i].ok_or_else(|| missing("rule operand"));
    Ok(match *e {
        Expr::A => operand(0)?,
        Expr::B => operand(1)?,
        Expr::C => operand(2)?,
        Expr::D => operand(3)?,
        Expr::Lit(c) => v.splat(c),
        Expr::Neg(y) => v.neg(expr(v, y, x)?)?,
        Expr::Arith(op, y, z) => {
            let (y, z) = (expr(v, y, x)?, expr(v, z, x)?);
            match op {
                Arith::Add => v.add(y, z)?,
                Arith::Sub => v.sub(y, z)?,
                Arith::Mul => v.mul(y, z)?,
                Arith::Div => v.div(y, z)?,
            }
        }
        Expr::Chain(f, y, z) => {
            // ops::Factor::strong_zero, as a select per lane.
            let (y, z) = (expr(v, y, x)?, expr(v, z, x)?);
            let zero = v.splat(0.0);
            let y_zero = v.cmp(FloatPredicate::OEQ, y, zero)?;
            let (r, z_kills) = match f {
                Factor::Times => (v.mul(y, z)?, v.cmp(FloatPredicate::OEQ, z, zero)?),
                Factor::Over => {
                    let size = v.fabs(z)?;
                    (
                        v.div(y, z)?,
                        v.cmp(FloatPredicate::OEQ, size, v.splat(f64::INFINITY))?,
                    )
                }
            };
            v.select(v.or(y_zero, z_kills)?, zero, r)?
        }
        Expr::Call(f, y) => {
            let y = expr(v, y, x)?;
            match f {
                Fun::Exp => math::call(v, Func::Exp, &[y])?,
                Fun::Log => math::call(v, Func::Log, &[y])?,
                Fun::Sqrt => v.sqrt(y)?,
                Fun::Abs => v.fabs(y)?,
                Fun::Tanh => math::call(v, Func::Tanh, &[y])?,
                Fun::Erfc => math::call(v, Func::Erfc, &[y])?,
            }
        }
        Expr::Pow(y, z) => {
            let (y, z) = (expr(v, y, x)?, expr(v, z, x)?);
            math::call(v, Func::Pow, &[y, z])?
        }
        Expr::Nan => v.splat(f64::NAN),
        Expr::Select(c, y, z) => {
            let c = cond(v, &c, x)?;
            let (y, z) = (expr(v, y, x)?, expr(v, z, x)?);
            v.select(c, y, z)?
        }
    })
}

/// The lane mask of rule condition `c` (ordered comparisons: false when a side is NaN).
fn cond<'ctx>(v: &V<'_, 'ctx>, c: &Cond, x: &[Option<Vv<'ctx>>; 4]) -> R<Vv<'ctx>> {
    let (l, r) = (expr(v, c.lhs, x)?, expr(v, c.rhs, x)?);
    let p = match c.cmp {
        Cmp::Lt => FloatPredicate::OLT,
        Cmp::Le => FloatPredicate::OLE,
        Cmp::Gt => FloatPredicate::OGT,
        Cmp::Ge => FloatPredicate::OGE,
    };
    v.cmp(p, l, r)
}

/// One adjoint step (as `clif::lower::step`): a guarded step selects per lane.
fn step<'ctx>(
    v: &V<'_, 'ctx>,
    vals: &mut Values<'ctx>,
    adj: &Adjoint,
    s: &Step,
    x: &[Option<Vv<'ctx>>; 4],
    guard: Option<Vv<'ctx>>,
) -> R<()> {
    match s {
        Step::Acc(acc) => {
            let Some(a) = adj.to[acc.arg.index()] else {
                return Ok(());
            };
            let old = vals.grad(a, adj.lane).unwrap_or_else(|| v.splat(0.0));
            let c = expr(v, &acc.expr, x)?;
            let new = if acc.sub {
                v.sub(old, c)?
            } else {
                v.add(old, c)?
            };
            let new = match guard {
                None => new,
                Some(g) => v.select(g, new, old)?,
            };
            vals.set_grad(a, adj.lane, Some(new));
        }
        Step::If(c, then, otherwise) => {
            let flag = cond(v, c, x)?;
            let not_flag = v.b.build_not(flag, "")?;
            let (t, e) = match guard {
                None => (flag, not_flag),
                Some(g) => (v.b.build_and(g, flag, "")?, v.b.build_and(g, not_flag, "")?),
            };
            step(v, vals, adj, &Step::Acc(*then), x, Some(t))?;
            if let Some(o) = otherwise {
                step(v, vals, adj, o, x, Some(e))?;
            }
        }
    }
    Ok(())
}

/// One adjoint rule application: its steps, in order.
fn adjoint<'ctx>(v: &V<'_, 'ctx>, vals: &mut Values<'ctx>, adj: &Adjoint) -> R<()> {
    // Only the operands the steps that run read (a reverse loop recomputes no others).
    let (ra, rb, rc) = adj.rule.reads(adj.to.map(|t| t.is_some()));
    let op =
        |x: Option<Operand>, read: bool| x.filter(|_| read).map(|x| vals.operand(v, x)).transpose();
    let x = [
        op(adj.x[0], ra)?,
        op(adj.x[1], rb)?,
        op(adj.x[2], rc)?,
        Some(vals.adjoint(v, adj.node, adj.lane)),
    ];
    for st in adj.rule.adjoint {
        step(v, vals, adj, st, &x, None)?;
    }
    Ok(())
}

/// A tangent definition's term for one step (as `clif::lower::tangent_term`).
fn tangent_term<'ctx>(
    v: &V<'_, 'ctx>,
    vals: &Values<'ctx>,
    t: &Tangent,
    s: &Step,
    x: &[Option<Vv<'ctx>>; 4],
) -> R<Option<(Vv<'ctx>, bool)>> {
    let acc = |a: &ops::Acc| -> R<Option<(Vv<'ctx>, bool)>> {
        let Some(d) = t.from[a.arg.index()] else {
            return Ok(None);
        };
        let x = [x[0], x[1], x[2], Some(vals.operand(v, d)?)];
        Ok(Some((expr(v, &a.expr, &x)?, a.sub)))
    };
    match s {
        Step::Acc(a) => acc(a),
        Step::If(c, then, otherwise) => {
            let flag = cond(v, c, x)?;
            let then = acc(then)?;
            let other = match otherwise {
                Some(o) => tangent_term(v, vals, t, o, x)?,
                None => None,
            };
            if then.is_none() && other.is_none() {
                return Ok(None);
            }
            let arm = |term: Option<(Vv<'ctx>, bool)>| -> R<Vv<'ctx>> {
                match term {
                    None => Ok(v.splat(0.0)),
                    Some((y, true)) => v.neg(y),
                    Some((y, false)) => Ok(y),
                }
            };
            let (a, b) = (arm(then)?, arm(other)?);
            Ok(Some((v.select(flag, a, b)?, false)))
        }
    }
}

/// A tangent definition: its terms summed in step order.
fn tangent<'ctx>(v: &V<'_, 'ctx>, vals: &Values<'ctx>, t: &Tangent) -> R<Vv<'ctx>> {
    let op = |x: Option<Operand>| x.map(|x| vals.operand(v, x)).transpose();
    let x = [op(t.x[0])?, op(t.x[1])?, op(t.x[2])?, None];
    let mut sum: Option<Vv<'ctx>> = None;
    for s in t.rule.adjoint {
        let Some((y, sub)) = tangent_term(v, vals, t, s, &x)? else {
            continue;
        };
        sum = Some(match (sum, sub) {
            (None, false) => y,
            (None, true) => v.neg(y)?,
            (Some(acc), false) => v.add(acc, y)?,
            (Some(acc), true) => v.sub(acc, y)?,
        });
    }
    Ok(sum.unwrap_or_else(|| v.splat(0.0)))
}

/// `nablac_normal` / `nablac_uniform(plo, phi, k, keys)`: draw `k` of the lanes' paths (their
/// index halves and `k` in 64-bit lanes) under the round keys `keys[0..20]` (`round_keys`),
/// exactly as `crate::philox` (TAPE-FORMAT.md, Draws).
fn draw_function<'ctx>(t: Vt<'ctx>, m: &Module<'ctx>, kind: DrawKind) -> R<FunctionValue<'ctx>> {
    let name = match kind {
        DrawKind::Normal => format!("nablac_normal_{}", t.w),
        DrawKind::Uniform => format!("nablac_uniform_{}", t.w),
    };
    if let Some(f) = m.get_function(&name) {
        return Ok(f);
    }
    let w64 = t.cx.i64_type().vec_type(t.w);
    let keys = w64.ptr_type(AddressSpace::default());
    let f = m.add_function(
        &name,
        t.fty
            .fn_type(&[w64.into(), w64.into(), w64.into(), keys.into()], false),
        Some(Linkage::Internal),
    );
    let b = t.cx.create_builder();
    b.position_at_end(t.cx.append_basic_block(f, "entry"));
    let v = V { t, b: &b, m };
    let p = |i: u32| {
        f.get_nth_param(i)
            .map(|p| p.into_vector_value())
            .ok_or(BuilderError::UnsetPosition)
    };
    let (plo, phi, k) = (p(0)?, p(1)?, p(2)?);
    let keys = f
        .get_nth_param(3)
        .ok_or(BuilderError::UnsetPosition)?
        .into_pointer_value();
    let uniform = kind == DrawKind::Uniform;
    let stream = VectorType::const_vector(&vec![
        t.cx.i64_type()
            .const_int(u64::from(uniform), false);
        t.w as usize
    ]);
    let x = philox(&v, [k, plo, phi, stream], keys)?;
    let y = box_muller(&v, x, uniform)?;
    b.build_return(Some(&y))?;
    Ok(f)
}

/// Philox4x32-10 over the lanes. Every 32-bit word lives in a 64-bit lane (high half zero), so
/// a round's products are single widening multiplies (`vpmuludq`), their halves a shift and a
/// mask, and no word is ever repacked: the words come back in those 64-bit lanes. Round r's keys
/// are `keys[2r]`, `keys[2r + 1]` (made once per call of the kernel, `round_keys`).
fn philox<'ctx>(
    v: &V<'_, 'ctx>,
    counter: [Vv<'ctx>; 4],
    keys: inkwell::values::PointerValue<'ctx>,
) -> R<[Vv<'ctx>; 4]> {
    let b = v.b;
    let w64 = v.t.cx.i64_type().vec_type(v.t.w);
    let wide = |c: u64| {
        VectorType::const_vector(&vec![v.t.cx.i64_type().const_int(c, false); v.t.w as usize])
    };
    let (m0, m1, s32, low) = (
        wide(u64::from(M0)),
        wide(u64::from(M1)),
        wide(32),
        wide(0xffff_ffff),
    );
    let _ = w64;
    let [mut c0, mut c1, mut c2, mut c3] = counter;
    let i64t = v.t.cx.i64_type();
    let key = |j: u64| -> R<Vv<'ctx>> {
        // SAFETY (generated code): `keys` holds the 20 round keys.
        let p = unsafe { b.build_in_bounds_gep(keys, &[i64t.const_int(j, false)], "")? };
        Ok(b.build_load(p, "")?.into_vector_value())
    };
    for r in 0..10u64 {
        let (k0, k1) = (key(2 * r)?, key(2 * r + 1)?);
        // The masks tell LLVM the high halves are zero (its `vpmuludq` pattern); they cost
        // nothing, the multiply reads only the low halves.
        let p0 = b.build_int_mul(b.build_and(c0, low, "")?, m0, "")?;
        let p1 = b.build_int_mul(b.build_and(c2, low, "")?, m1, "")?;
        let hi0 = b.build_right_shift(p0, s32, false, "")?;
        let lo0 = b.build_and(p0, low, "")?;
        let hi1 = b.build_right_shift(p1, s32, false, "")?;
        let lo1 = b.build_and(p1, low, "")?;
        let n0 = b.build_xor(b.build_xor(hi1, c1, "")?, k0, "")?;
        let n2 = b.build_xor(b.build_xor(hi0, c3, "")?, k1, "")?;
        (c0, c1, c2, c3) = (n0, lo1, n2, lo0);
    }
    Ok([c0, c1, c2, c3])
}

/// Exact f64 of 64-bit lanes below 2^52: `bits(2^52) | x` read as a double, minus 2^52.
fn small_u64_to_f64<'ctx>(v: &V<'_, 'ctx>, x: Vv<'ctx>) -> R<Vv<'ctx>> {
    let b = v.b;
    let f64v = v.t.cx.f64_type().vec_type(v.t.w);
    let magic = VectorType::const_vector(&vec![
        v.t.cx
            .i64_type()
            .const_int(0x4330_0000_0000_0000, false);
        v.t.w as usize
    ]);
    let y = b
        .build_bit_cast(b.build_or(x, magic, "")?, f64v, "")?
        .into_vector_value();
    let two52 = VectorType::const_vector(&vec![
        v.t.cx.f64_type().const_float(2f64.powi(52));
        v.t.w as usize
    ]);
    b.build_float_sub(y, two52, "")
}

/// The Philox words (in 64-bit lanes) to a uniform, or through Box–Muller to a normal (every
/// step in the kernel precision, in `clif::lower::draw`'s order, so the bits are the same up to
/// `log` and `cos`).
fn box_muller<'ctx>(v: &V<'_, 'ctx>, x: [Vv<'ctx>; 4], uniform: bool) -> R<Vv<'ctx>> {
    let b = v.b;
    let wide = |c: u64| {
        VectorType::const_vector(&vec![v.t.cx.i64_type().const_int(c, false); v.t.w as usize])
    };
    let shr = |w: Vv<'ctx>, s: u64| b.build_right_shift(w, wide(s), false, "");
    let (u1, u2) = if v.t.f64 {
        // ((hi << 32 | lo) >> s) as f64 = hi 2^(32-s) + (lo >> s), exact below 2^53.
        let word = |hi: Vv<'ctx>, lo: Vv<'ctx>, s: u64| -> R<Vv<'ctx>> {
            let h = small_u64_to_f64(v, hi)?;
            let l = small_u64_to_f64(v, shr(lo, s)?)?;
            v.fma(h, v.splat(2f64.powi(32 - s as i32)), l)
        };
        let (scale, s) = if uniform {
            (2f64.powi(-52), 12)
        } else {
            (2f64.powi(-53), 11)
        };
        let u1 = v.mul(v.add(word(x[0], x[1], s)?, v.splat(0.5))?, v.splat(scale))?;
        (u1, word(x[2], x[3], 11)?)
    } else {
        // Below 2^24, so exact as f32.
        let f = |w: Vv<'ctx>, s: u64| -> R<Vv<'ctx>> {
            let w = b.build_int_truncate(shr(w, s)?, v.t.i32ty, "")?;
            v.i32_to_float(w)
        };
        let (scale, s) = if uniform {
            (2f64.powi(-23), 9)
        } else {
            (2f64.powi(-24), 8)
        };
        let u1 = v.mul(v.add(f(x[0], s)?, v.splat(0.5))?, v.splat(scale))?;
        (u1, f(x[1], 8)?)
    };
    if uniform {
        return Ok(u1);
    }
    let scale = if v.t.f64 {
        2f64.powi(-53)
    } else {
        2f64.powi(-24)
    };
    let u2 = v.mul(u2, v.splat(scale))?;
    let l = v.log_unit(u1)?;
    let r = v.sqrt(v.mul(v.splat(-2.0), l)?)?;
    let tau = if v.t.f64 {
        std::f64::consts::TAU
    } else {
        f64::from(std::f32::consts::TAU)
    };
    let c = v.cos_draw(v.mul(v.splat(tau), u2)?)?;
    v.mul(r, c)
}

/// The 20 Philox round keys of `seed` (`(seed mod 2^32 + r W0, seed div 2^32 + r W1)` mod 2^32
/// for r = 0..10), each in 64-bit lanes, stored in a stack array of the entry block; returns it.
fn round_keys<'ctx>(
    b: &Builder<'ctx>,
    cx: &'ctx Context,
    w: u32,
    seed: IntValue<'ctx>,
) -> R<inkwell::values::PointerValue<'ctx>> {
    let (i64t, i32t) = (cx.i64_type(), cx.i32_type());
    let w64 = i64t.vec_type(w);
    let keys = b.build_array_alloca(w64, i64t.const_int(20, false), "keys")?;
    let lo = b.build_int_truncate(seed, i32t, "")?;
    let hi = b.build_int_truncate(
        b.build_right_shift(seed, i64t.const_int(32, false), false, "")?,
        i32t,
        "",
    )?;
    for r in 0..10u32 {
        for (j, (half, inc)) in [(lo, W0), (hi, W1)].into_iter().enumerate() {
            let k = b.build_int_add(
                half,
                i32t.const_int(u64::from(inc.wrapping_mul(r)), false),
                "",
            )?;
            let k = b.build_int_z_extend(k, i64t, "")?;
            let k = splat_value(b, w64, k.into())?;
            // SAFETY (generated code): index 2r + j < 20.
            let p = unsafe {
                b.build_in_bounds_gep(
                    keys,
                    &[i64t.const_int(u64::from(2 * r) + j as u64, false)],
                    "",
                )?
            };
            b.build_store(p, k)?;
        }
    }
    Ok(keys)
}

/// `x` in every lane.
fn splat_value<'ctx>(
    b: &Builder<'ctx>,
    ty: VectorType<'ctx>,
    x: inkwell::values::BasicValueEnum<'ctx>,
) -> R<Vv<'ctx>> {
    let zero = b.build_insert_element(
        ty.get_undef(),
        x,
        ty.get_context().i32_type().const_zero(),
        "",
    )?;
    b.build_shuffle_vector(
        zero,
        ty.get_undef(),
        ty.get_context()
            .i32_type()
            .vec_type(ty.get_size())
            .const_zero(),
        "",
    )
}

/// Builds the module of the block function `name` for `v` under `opts` (mode, precision, the
/// Greeks' squares).
pub(super) fn lower<'ctx>(
    cx: &'ctx Context,
    v: &Verified,
    schedule: &Schedule,
    opts: &crate::clif::Options,
    name: &str,
    lanes: u32,
) -> Result<Module<'ctx>, LlvmError> {
    let m = cx.create_module("nablac");
    build(cx, &m, v, schedule, opts, name, lanes).map_err(|e| LlvmError::Build(e.to_string()))?;
    m.verify()
        .map_err(|e| LlvmError::Build(format!("the module does not verify: {e}")))?;
    Ok(m)
}

fn build<'ctx>(
    cx: &'ctx Context,
    m: &Module<'ctx>,
    verified: &Verified,
    schedule: &Schedule,
    opts: &crate::clif::Options,
    name: &str,
    w: u32,
) -> R<()> {
    let precision = opts.precision;
    let tape = verified.tape();
    let t = Vt::new(cx, precision == Precision::F64, w);
    let (i64t, i32t) = (cx.i64_type(), cx.i32_type());
    let scalar = if t.f64 {
        cx.f64_type().into()
    } else {
        cx.f32_type().into()
    };
    let _: inkwell::types::BasicTypeEnum = scalar;
    let in_ptr = match scalar {
        inkwell::types::BasicTypeEnum::FloatType(f) => f.ptr_type(AddressSpace::default()),
        _ => return Err(missing("float type")),
    };
    let out_ptr = cx.f64_type().ptr_type(AddressSpace::default());
    let fty = cx.void_type().fn_type(
        &[
            in_ptr.into(),
            i64t.into(),
            i64t.into(),
            i64t.into(),
            out_ptr.into(),
        ],
        false,
    );
    let f = m.add_function(name, fty, None);
    let b = cx.create_builder();
    let entry = cx.append_basic_block(f, "entry");
    let body = cx.append_basic_block(f, "paths");
    let partial = cx.append_basic_block(f, "partial");
    let next = cx.append_basic_block(f, "next");
    let exit = cx.append_basic_block(f, "exit");
    b.position_at_end(entry);
    let v = V { t, b: &b, m };
    let param = |i: u32| f.get_nth_param(i).ok_or_else(|| missing("parameter"));
    let inputs = param(0)?.into_pointer_value();
    let seed = param(1)?.into_int_value();
    let first = param(2)?.into_int_value();
    let count = param(3)?.into_int_value();
    let out = param(4)?.into_pointer_value();

    let leaves = match schedule.body.last() {
        Some(Stmt::Leaves(l)) => l.clone(),
        _ => return Err(missing("leaves")),
    };
    let row = leaves.len() as u64;
    let buf = b.build_array_alloca(
        cx.f64_type(),
        i64t.const_int(row * u64::from(w), false),
        "rows",
    )?;
    let keys = round_keys(&b, cx, w, seed)?;
    // Normal draws, when most indices below the highest are used: made two at a time in a loop
    // at the top of each group (one call of the 2W-lane draw: two independent Philox and
    // Box-Muller chains interleaved, which the core overlaps), kept in a stack array.
    let mut normal_used = vec![false; tape.n_draws as usize];
    schedule.walk(&mut |s| {
        if let Stmt::Define {
            def:
                Def::Draw {
                    kind: DrawKind::Normal,
                    index,
                    stride,
                    ..
                },
            ..
        } = s
        {
            // A strided draw (in a loop) uses every index of its iterations.
            let end = if *stride == 0 {
                *index + 1
            } else {
                tape.n_draws
            };
            for k in (*index..end).step_by(stride.max(&1).to_owned() as usize) {
                if let Some(u) = normal_used.get_mut(k as usize) {
                    *u = true;
                }
            }
        }
    });
    let n_normals = normal_used.iter().rposition(|&u| u).map_or(0, |k| k + 1);
    let batched = n_normals >= 2 && 2 * normal_used.iter().filter(|&&u| u).count() >= n_normals;
    let n_even = n_normals.div_ceil(BATCH as usize) * BATCH as usize;
    let batch = if batched {
        let t2 = Vt::new(cx, t.f64, BATCH * w);
        let keys2 = round_keys(&b, cx, BATCH * w, seed)?;
        let store = b.build_array_alloca(t.fty, i64t.const_int(n_even as u64, false), "normals")?;
        Some((t2, keys2, store))
    } else {
        None
    };
    let mut vals = Values {
        val: vec![None; tape.len()],
        adj: vec![None; tape.len() * schedule.lanes],
        lanes: schedule.lanes,
        carried: Default::default(),
        prev: Default::default(),
    };
    // The bookmarks (`schedule.storage.local`): a stack array of the path group's vectors.
    let bookmarks = match schedule.storage.local {
        0 => None,
        n => Some(b.build_array_alloca(t.fty, i64t.const_int(u64::from(n), false), "bookmarks")?),
    };
    // Bookmark `at` of iteration `it` of a loop from iteration `first`.
    let bookmark =
        |at: u32, first: u32, it: IntValue<'ctx>| -> R<inkwell::values::PointerValue<'ctx>> {
            let base = bookmarks.ok_or_else(|| missing("bookmarks"))?;
            let off = i64t.const_int((i64::from(at) - i64::from(first)) as u64, true);
            let k = b.build_int_add(it, off, "")?;
            // SAFETY (generated code): at + (it - first) < the kernel's bookmarks.
            Ok(unsafe { b.build_in_bounds_gep(base, &[k], "")? })
        };
    let varying = &verified.info().path_dependent;
    // Path-independent definitions: once, in the entry block.
    let hoisted = schedule.hoisted(varying);
    for s in &schedule.body {
        if let Stmt::Define { node, def, .. } = s {
            if hoisted[node.index()] {
                let x = match *def {
                    Def::Input(k) => {
                        // SAFETY (of the generated code): the ABI gives one T per input.
                        let p = unsafe {
                            b.build_gep(inputs, &[i64t.const_int(u64::from(k), false)], "")?
                        };
                        let x = b.build_load(p, "")?;
                        splat_value(&b, t.fty, x)?
                    }
                    Def::Draw { .. } => return Err(missing("a path-independent draw")),
                    Def::Rule { rule, args } => {
                        let op = |a: Option<Operand>| a.map(|a| vals.operand(&v, a)).transpose();
                        let x = [op(args[0])?, op(args[1])?, None, None];
                        expr(&v, &rule.value, &x)?
                    }
                };
                vals.val[node.index()] = Some(x);
            }
        }
    }
    let nonzero = b.build_int_compare(IntPredicate::NE, count, i64t.const_zero(), "")?;
    b.build_conditional_branch(nonzero, body, exit)?;

    b.position_at_end(body);
    let i = b.build_phi(i64t, "i")?;
    i.add_incoming(&[(&i64t.const_zero(), entry)]);
    let iv = i.as_basic_value().into_int_value();
    let base = b.build_int_add(first, iv, "")?;
    let w64 = i64t.vec_type(w);
    let iota = VectorType::const_vector(
        &(0..u64::from(w))
            .map(|j| i64t.const_int(j, false))
            .collect::<Vec<_>>(),
    );
    let paths = b.build_int_add(splat_value(&b, w64, base.into())?, iota, "")?;
    // The path index's halves, each in 64-bit lanes (the draws' counter words).
    let plo = b.build_and(
        paths,
        VectorType::const_vector(&vec![i64t.const_int(0xffff_ffff, false); w as usize]),
        "",
    )?;
    let phi = b.build_right_shift(
        paths,
        VectorType::const_vector(&vec![i64t.const_int(32, false); w as usize]),
        false,
        "",
    )?;
    if let Some((t2, keys2, store)) = batch {
        let pre = b.get_insert_block().ok_or_else(|| missing("block"))?;
        let lp = cx.append_basic_block(f, "normals");
        let after = cx.append_basic_block(f, "path_body");
        b.build_unconditional_branch(lp)?;
        b.position_at_end(lp);
        let j = b.build_phi(i64t, "j")?;
        j.add_incoming(&[(&i64t.const_zero(), pre)]);
        let jv = j.as_basic_value().into_int_value();
        let both: Vec<_> = (0..BATCH * w)
            .map(|l| i32t.const_int(u64::from(l % w), false))
            .collect();
        let both = VectorType::const_vector(&both);
        let plo2 = b.build_shuffle_vector(plo, plo, both, "")?;
        let phi2 = b.build_shuffle_vector(phi, phi, both, "")?;
        let step: Vec<_> = (0..BATCH * w)
            .map(|l| i64t.const_int(u64::from(l / w), false))
            .collect();
        let k2 = b.build_int_add(
            splat_value(&b, i64t.vec_type(BATCH * w), jv.into())?,
            VectorType::const_vector(&step),
            "",
        )?;
        let g = draw_function(t2, m, DrawKind::Normal)?;
        let y = b
            .build_call(g, &[plo2.into(), phi2.into(), k2.into(), keys2.into()], "")?
            .try_as_basic_value()
            .basic()
            .ok_or_else(|| missing("draw"))?
            .into_vector_value();
        for half in 0..BATCH {
            let lanes: Vec<_> = (0..w)
                .map(|l| i32t.const_int(u64::from(half * w + l), false))
                .collect();
            let part = b.build_shuffle_vector(y, y, VectorType::const_vector(&lanes), "")?;
            let at = b.build_int_add(jv, i64t.const_int(u64::from(half), false), "")?;
            // SAFETY (generated code): j + half < n_even, the array's length.
            let p = unsafe { b.build_in_bounds_gep(store, &[at], "")? };
            b.build_store(p, part)?;
        }
        let jn = b.build_int_add(jv, i64t.const_int(u64::from(BATCH), false), "")?;
        j.add_incoming(&[(&jn, lp)]);
        let more = b.build_int_compare(
            IntPredicate::ULT,
            jn,
            i64t.const_int(n_even as u64, false),
            "",
        )?;
        b.build_conditional_branch(more, lp, after)?;
        b.position_at_end(after);
    }
    // A path-dependent definition's vectors; `it` is the enclosing loop's iteration.
    let lower_def = |vals: &Values<'ctx>, def: &Def, it: Option<IntValue<'ctx>>| -> R<Vv<'ctx>> {
        // Draw index + stride * it, as i64.
        let draw_index = |index: u32, stride: u32| -> R<IntValue<'ctx>> {
            let k = i64t.const_int(u64::from(index), false);
            match (stride, it) {
                (0, _) => Ok(k),
                (s, Some(it)) => {
                    let step = b.build_int_mul(it, i64t.const_int(u64::from(s), false), "")?;
                    Ok(b.build_int_add(k, step, "")?)
                }
                (_, None) => Err(missing("a strided draw outside a loop")),
            }
        };
        Ok(match *def {
            Def::Draw {
                kind: DrawKind::Normal,
                index,
                stride,
                ..
            } if batch.is_some() => {
                let store = batch.map(|b| b.2).ok_or_else(|| missing("normals"))?;
                let k = draw_index(index, stride)?;
                // SAFETY (generated code): the index < n_normals <= the array's length.
                let p = unsafe { b.build_in_bounds_gep(store, &[k], "")? };
                b.build_load(p, "")?.into_vector_value()
            }
            Def::Draw {
                kind,
                index,
                stride,
                ..
            } => {
                let g = draw_function(t, m, kind)?;
                let k = draw_index(index, stride)?;
                let k = splat_value(&b, i64t.vec_type(w), k.into())?;
                let args = [plo.into(), phi.into(), k.into(), keys.into()];
                b.build_call(g, &args, "")?
                    .try_as_basic_value()
                    .basic()
                    .ok_or_else(|| missing("draw"))?
                    .into_vector_value()
            }
            Def::Input(k) => {
                // SAFETY (of the generated code): the ABI gives one T per input.
                let p = unsafe { b.build_gep(inputs, &[i64t.const_int(u64::from(k), false)], "")? };
                let x = b.build_load(p, "")?;
                splat_value(&b, t.fty, x)?
            }
            Def::Rule { rule, args } => {
                let op = |a: Option<Operand>| a.map(|a| vals.operand(&v, a)).transpose();
                let x = [op(args[0])?, op(args[1])?, None, None];
                expr(&v, &rule.value, &x)?
            }
        })
    };
    for s in &schedule.body {
        match s {
            Stmt::Define { node, def, .. } => {
                if hoisted[node.index()] {
                    continue;
                }
                let x = lower_def(&vals, def, None)?;
                vals.val[node.index()] = Some(x);
            }
            Stmt::Tangent(tg) => {
                let y = tangent(&v, &vals, tg)?;
                vals.adj[tg.node.index() * vals.lanes + tg.lane] = Some(y);
            }
            Stmt::Seed { node, lane } => {
                vals.adj[node.index() * vals.lanes + lane] = Some(v.splat(1.0));
            }
            Stmt::Adjoint(adj) => adjoint(&v, &mut vals, adj)?,
            Stmt::MoveAdjoint { to, from, lane } => {
                let x = vals.grad(*from, *lane);
                vals.set_grad(*to, *lane, x);
            }
            Stmt::Loop(l) if l.reverse => {
                // A do-while loop from the last iteration down: the iteration and the adjoints
                // the body updates that live outside it (`Loop::outer_adjoints`) are phis.
                let outer = l.outer_adjoints();
                let pre = b.get_insert_block().ok_or_else(|| missing("block"))?;
                let lp = cx.append_basic_block(f, "reverse_loop");
                let after = cx.append_basic_block(f, "reverse_loop_end");
                let inits: Vec<Vv<'ctx>> = outer
                    .iter()
                    .map(|&(g, lane)| vals.grad(g, lane).unwrap_or_else(|| v.splat(0.0)))
                    .collect();
                b.build_unconditional_branch(lp)?;
                b.position_at_end(lp);
                let it = b.build_phi(i64t, "it")?;
                let last = u64::from(l.first + l.count - 1);
                it.add_incoming(&[(&i64t.const_int(last, false), pre)]);
                let mut phis = Vec::new();
                for (&(g, lane), x) in outer.iter().zip(&inits) {
                    let p = b.build_phi(t.fty, "")?;
                    p.add_incoming(&[(x, pre)]);
                    vals.set_grad(g, lane, Some(p.as_basic_value().into_vector_value()));
                    phis.push(p);
                }
                let itv = it.as_basic_value().into_int_value();
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
                            let p = bookmark(*at, l.first, itv)?;
                            let x = b.build_load(p, "")?.into_vector_value();
                            vals.carried.insert(Var::Copy(*node), x);
                        }
                        Stmt::Define { node, def, .. } => {
                            let x = lower_def(&vals, def, Some(itv))?;
                            vals.val[node.index()] = Some(x);
                        }
                        Stmt::DeclareAdjoints { grad, lanes } => {
                            for &lane in lanes {
                                vals.set_grad(*grad, lane, None);
                            }
                        }
                        Stmt::Adjoint(adj) => adjoint(&v, &mut vals, adj)?,
                        Stmt::MoveAdjoint { to, from, lane } => {
                            let x = vals.grad(*from, *lane);
                            vals.set_grad(*to, *lane, x);
                        }
                        _ => return Err(missing("a reverse loop's statement")),
                    }
                }
                let next: Vec<Vv<'ctx>> = outer
                    .iter()
                    .map(|&(g, lane)| vals.grad(g, lane).unwrap_or_else(|| v.splat(0.0)))
                    .collect();
                let latch = b.get_insert_block().ok_or_else(|| missing("block"))?;
                let it1 = b.build_int_sub(itv, i64t.const_int(1, false), "")?;
                it.add_incoming(&[(&it1, latch)]);
                for (p, x) in phis.iter().zip(&next) {
                    p.add_incoming(&[(x, latch)]);
                }
                let more = b.build_int_compare(
                    IntPredicate::UGT,
                    itv,
                    i64t.const_int(u64::from(l.first), false),
                    "",
                )?;
                b.build_conditional_branch(more, lp, after)?;
                b.position_at_end(after);
                for (&(g, lane), x) in outer.iter().zip(next) {
                    vals.set_grad(g, lane, Some(x));
                }
            }
            Stmt::Loop(l) => {
                // The iteration and the carried values are phis of the loop's block; its latch
                // is the exit's only predecessor, so after it the carried values are the last
                // iteration's.
                let pre = b.get_insert_block().ok_or_else(|| missing("block"))?;
                let lp = cx.append_basic_block(f, "loop");
                let after = cx.append_basic_block(f, "loop_end");
                let inits = l
                    .carried
                    .iter()
                    .map(|c| vals.operand(&v, c.init))
                    .collect::<R<Vec<_>>>()?;
                b.build_unconditional_branch(lp)?;
                b.position_at_end(lp);
                let it = b.build_phi(i64t, "it")?;
                it.add_incoming(&[(&i64t.const_int(u64::from(l.first), false), pre)]);
                let mut phis = Vec::new();
                for (c, x) in l.carried.iter().zip(&inits) {
                    let p = b.build_phi(t.fty, "")?;
                    p.add_incoming(&[(x, pre)]);
                    vals.carried
                        .insert(c.var, p.as_basic_value().into_vector_value());
                    phis.push(p);
                }
                let itv = it.as_basic_value().into_int_value();
                for s in &l.body {
                    match s {
                        Stmt::Define { node, def, .. } => {
                            let x = lower_def(&vals, def, Some(itv))?;
                            vals.val[node.index()] = Some(x);
                        }
                        Stmt::Tangent(tg) => {
                            let y = tangent(&v, &vals, tg)?;
                            vals.adj[tg.node.index() * vals.lanes + tg.lane] = Some(y);
                        }
                        Stmt::Store {
                            var,
                            slot:
                                Slot {
                                    class: Class::Local,
                                    index: at,
                                },
                        } => {
                            let x = vals.operand(&v, Operand::Var(*var))?;
                            b.build_store(bookmark(*at, l.first, itv)?, x)?;
                        }
                        _ => {
                            return Err(missing("a loop of anything but definitions and tangents"))
                        }
                    }
                }
                let next = l
                    .carried
                    .iter()
                    .map(|c| vals.operand(&v, c.next))
                    .collect::<R<Vec<_>>>()?;
                let latch = b.get_insert_block().ok_or_else(|| missing("block"))?;
                let it1 = b.build_int_add(itv, i64t.const_int(1, false), "")?;
                it.add_incoming(&[(&it1, latch)]);
                for (p, x) in phis.iter().zip(&next) {
                    p.add_incoming(&[(x, latch)]);
                }
                let more = b.build_int_compare(
                    IntPredicate::ULT,
                    it1,
                    i64t.const_int(u64::from(l.first + l.count), false),
                    "",
                )?;
                b.build_conditional_branch(more, lp, after)?;
                b.position_at_end(after);
                for (c, x) in l.carried.iter().zip(next) {
                    vals.carried.insert(c.var, x);
                }
            }
            Stmt::Leaves(_) => {}
            Stmt::Note(_) | Stmt::DeclareAdjoints { .. } => {}
            Stmt::Declare(_)
            | Stmt::Store { .. }
            | Stmt::Rekey
            | Stmt::OpaqueRead { .. }
            | Stmt::Block(_) => return Err(missing("a checkpointed statement")),
        }
    }
    // The leaves: a full group straight to `out`, a partial one through `buf`.
    let rem = b.build_int_sub(count, iv, "")?;
    let wide_w = i64t.const_int(u64::from(w), false);
    let full = b.build_int_compare(IntPredicate::UGE, rem, wide_w, "")?;
    let row_v = i64t.const_int(row, false);
    // SAFETY (generated code): out holds count rows.
    let here = unsafe { b.build_gep(out, &[b.build_int_mul(iv, row_v, "")?], "")? };
    let dst = b.build_select(full, here, buf, "")?.into_pointer_value();
    let to_f64 = |x: Vv<'ctx>| -> R<Vv<'ctx>> {
        if t.f64 {
            Ok(x)
        } else {
            b.build_float_ext(x, cx.f64_type().vec_type(w), "")
        }
    };
    // Every leaf first (a non-finite count zeroes its output's leaves before any is stored).
    let f64v = cx.f64_type().vec_type(w);
    let i64v = i64t.vec_type(w);
    let mut ys: Vec<Vv<'ctx>> = Vec::with_capacity(leaves.len());
    for leaf in leaves.iter() {
        let y = match *leaf {
            Leaf::Value(x) => to_f64(vals.operand(&v, x)?)?,
            Leaf::Square { of, shift } => {
                let s = *ys.get(of).ok_or_else(|| missing("square"))?;
                // The shift lies after the market in the inputs buffer, one T each.
                // SAFETY (of the generated code): the ABI gives one T per input and per shift.
                let p =
                    unsafe { b.build_gep(inputs, &[i64t.const_int(u64::from(shift), false)], "")? };
                let c = splat_value(&b, t.fty, b.build_load(p, "")?)?;
                let d = b.build_float_sub(s, to_f64(c)?, "")?;
                b.build_float_mul(d, d, "")?
            }
            Leaf::Adjoint(n, lane) => to_f64(vals.adjoint(&v, n, lane))?,
            Leaf::Zero => f64v.const_zero(),
            Leaf::NonFinite { first, end } => {
                // Finite: the exponent bits are not all ones.
                let exp = i64t.const_int(0x7ff0_0000_0000_0000, false);
                let exp = VectorType::const_vector(&vec![exp; w as usize]);
                let mut ok = None;
                for j in first..end {
                    if !matches!(leaves[j], Leaf::Value(_) | Leaf::Adjoint(..)) {
                        continue;
                    }
                    let bits = b.build_bit_cast(ys[j], i64v, "")?.into_vector_value();
                    let e = b.build_and(bits, exp, "")?;
                    let f = b.build_int_compare(IntPredicate::NE, e, exp, "")?;
                    ok = Some(match ok {
                        None => f,
                        Some(o) => b.build_and(o, f, "")?,
                    });
                }
                let ok = ok.ok_or_else(|| missing("an output's value to check"))?;
                for y in &mut ys[first..end] {
                    *y = b
                        .build_select(ok, *y, f64v.const_zero(), "")?
                        .into_vector_value();
                }
                let one =
                    VectorType::const_vector(&vec![cx.f64_type().const_float(1.0); w as usize]);
                b.build_select(ok, f64v.const_zero(), one, "")?
                    .into_vector_value()
            }
        };
        ys.push(y);
    }
    for (k, y) in ys.into_iter().enumerate() {
        for j in 0..u64::from(w) {
            let e = b.build_extract_element(y, i32t.const_int(j, false), "")?;
            // SAFETY (generated code): lane j's row lies inside dst.
            let p = unsafe { b.build_gep(dst, &[i64t.const_int(j * row + k as u64, false)], "")? };
            b.build_store(p, e)?;
        }
    }
    b.build_conditional_branch(full, next, partial)?;
    b.position_at_end(partial);
    let bytes = b.build_int_mul(rem, i64t.const_int(8 * row, false), "")?;
    let here8 = b.build_pointer_cast(here, cx.i8_type().ptr_type(AddressSpace::default()), "")?;
    let buf8 = b.build_pointer_cast(buf, cx.i8_type().ptr_type(AddressSpace::default()), "")?;
    b.build_memcpy(here8, 8, buf8, 8, bytes)?;
    b.build_unconditional_branch(next)?;
    b.position_at_end(next);
    let inext = b.build_int_add(iv, wide_w, "")?;
    i.add_incoming(&[(&inext, next)]);
    let more = b.build_int_compare(IntPredicate::ULT, inext, count, "")?;
    b.build_conditional_branch(more, body, exit)?;
    b.position_at_end(exit);
    b.build_return(None)?;
    Ok(())
}

//! Vector math in the module: `exp`, `log`, `cos`, `tanh`, `erfc`, `pow` over `<W x T>`, one
//! path per lane, so no scalar libm call stays in the hot loop (`sqrt` and `abs` are LLVM's
//! `llvm.sqrt` and `llvm.fabs`, exact).
//!
//! Each function is defined once per module (`internal`, built where a kernel uses it), from
//! FMA and integer bit operations only:
//!
//! | function | method | domain of the stated bound | bound (tests) |
//! |---|---|---|---|
//! | `exp` | `x = k ln2 + r` (FMA, two-part ln2), a degree-11 polynomial (f32: 6), `2^k` as two factors | every x | 1 ulp (normal results) |
//! | `log` | fdlibm's reduction `m in [sqrt(1/2), sqrt 2)`, `s = f/(2+f)`, a degree-6 polynomial in s² (f32: 3) | every x | 1 ulp |
//! | `cos` | `k = rint(x 2/pi)`, three-part pi/2 by FMA, polynomials in r² of degree 7 and 6 (f32: 4 and 3) | \|x\| <= 2^19 (f32: 2^10) | 2 ulp |
//! | `tanh` | `e/(e+2)`, `e = expm1(2\|x\|)` in the exp reduction | every x | 3 ulp |
//! | `erfc` | \|x\| < 0.5: 1 - erf Taylor; to 8: `exp(-x²) g(x)` with g a Chebyshev fit per octave (`scripts/erfcx-fit.py`); past 8: the asymptotic series; x < 0: 2 - erfc(-x); f32 in f64 | every x (f64: results above 2^-1022) | 4 ulp |
//! | `pow` | `exp(y) (1 + y_lo)`, `y + y_lo = b log a` (FMA); C's special cases | every a, b (C's special cases) | 2 + \|b ln a\| ulp: ln a's rounding, scaled (f32 in f64: 1 ulp) |
//!
//! The draws use `log_unit` and `cos_draw` (`V`): the same arithmetic as `log` and `cos` without
//! the edge cases their arguments (u1 in (0, 1], 2 pi u2 in [0, 2 pi)) cannot hit. The tests in
//! `tests.rs` check every function against the host libm on many arguments and the edges (0,
//! -0, subnormals, the overflow thresholds, infinities, NaN).

use inkwell::builder::{Builder, BuilderError};
use inkwell::context::Context;
use inkwell::intrinsics::Intrinsic;
use inkwell::module::{Linkage, Module};
use inkwell::types::VectorType;
use inkwell::values::{FunctionValue, VectorValue};
use inkwell::{FloatPredicate, IntPredicate};

pub(super) type R<T> = Result<T, BuilderError>;

/// The vector type of one kernel: `<W x T>` and its same-width integers.
#[derive(Copy, Clone)]
pub(super) struct Vt<'ctx> {
    pub cx: &'ctx Context,
    pub f64: bool,
    pub w: u32,
    /// `<W x T>`.
    pub fty: VectorType<'ctx>,
    /// `<W x iN>`, N the width of T.
    pub ity: VectorType<'ctx>,
    /// `<W x i32>`.
    pub i32ty: VectorType<'ctx>,
}

impl<'ctx> Vt<'ctx> {
    pub fn new(cx: &'ctx Context, f64: bool, w: u32) -> Self {
        let (fty, ity) = if f64 {
            (cx.f64_type().vec_type(w), cx.i64_type().vec_type(w))
        } else {
            (cx.f32_type().vec_type(w), cx.i32_type().vec_type(w))
        };
        Vt {
            cx,
            f64,
            w,
            fty,
            ity,
            i32ty: cx.i32_type().vec_type(w),
        }
    }

    /// The same lanes in f64 (f32 kernels evaluate `erfc` and `pow` there).
    pub fn wide(self) -> Self {
        Vt::new(self.cx, true, self.w)
    }

    fn mant_bits(self) -> u64 {
        if self.f64 {
            52
        } else {
            23
        }
    }
}

/// A builder for one vector type, with the arithmetic the lowering and the math functions use.
pub(super) struct V<'a, 'ctx> {
    pub t: Vt<'ctx>,
    pub b: &'a Builder<'ctx>,
    pub m: &'a Module<'ctx>,
}

impl<'a, 'ctx> V<'a, 'ctx> {
    pub fn with(&self, t: Vt<'ctx>) -> V<'a, 'ctx> {
        V {
            t,
            b: self.b,
            m: self.m,
        }
    }

    pub fn splat(&self, x: f64) -> VectorValue<'ctx> {
        let s = if self.t.f64 {
            self.t.cx.f64_type().const_float(x)
        } else {
            self.t.cx.f32_type().const_float(f64::from(x as f32))
        };
        VectorType::const_vector(&vec![s; self.t.w as usize])
    }

    /// `x` in every lane of the same-width integer vector.
    pub fn isplat(&self, x: i64) -> VectorValue<'ctx> {
        let ty = if self.t.f64 {
            self.t.cx.i64_type()
        } else {
            self.t.cx.i32_type()
        };
        VectorType::const_vector(&vec![ty.const_int(x as u64, true); self.t.w as usize])
    }

    pub fn i32splat(&self, x: u32) -> VectorValue<'ctx> {
        let c = self.t.cx.i32_type().const_int(u64::from(x), false);
        VectorType::const_vector(&vec![c; self.t.w as usize])
    }

    pub fn add(&self, x: VectorValue<'ctx>, y: VectorValue<'ctx>) -> R<VectorValue<'ctx>> {
        self.b.build_float_add(x, y, "")
    }
    pub fn sub(&self, x: VectorValue<'ctx>, y: VectorValue<'ctx>) -> R<VectorValue<'ctx>> {
        self.b.build_float_sub(x, y, "")
    }
    pub fn mul(&self, x: VectorValue<'ctx>, y: VectorValue<'ctx>) -> R<VectorValue<'ctx>> {
        self.b.build_float_mul(x, y, "")
    }
    pub fn div(&self, x: VectorValue<'ctx>, y: VectorValue<'ctx>) -> R<VectorValue<'ctx>> {
        self.b.build_float_div(x, y, "")
    }
    pub fn neg(&self, x: VectorValue<'ctx>) -> R<VectorValue<'ctx>> {
        self.b.build_float_neg(x, "")
    }
    pub fn cmp(
        &self,
        p: FloatPredicate,
        x: VectorValue<'ctx>,
        y: VectorValue<'ctx>,
    ) -> R<VectorValue<'ctx>> {
        self.b.build_float_compare(p, x, y, "")
    }
    pub fn icmp(
        &self,
        p: IntPredicate,
        x: VectorValue<'ctx>,
        y: VectorValue<'ctx>,
    ) -> R<VectorValue<'ctx>> {
        self.b.build_int_compare(p, x, y, "")
    }
    pub fn select(
        &self,
        c: VectorValue<'ctx>,
        x: VectorValue<'ctx>,
        y: VectorValue<'ctx>,
    ) -> R<VectorValue<'ctx>> {
        Ok(self.b.build_select(c, x, y, "")?.into_vector_value())
    }
    pub fn and(&self, x: VectorValue<'ctx>, y: VectorValue<'ctx>) -> R<VectorValue<'ctx>> {
        self.b.build_and(x, y, "")
    }
    pub fn or(&self, x: VectorValue<'ctx>, y: VectorValue<'ctx>) -> R<VectorValue<'ctx>> {
        self.b.build_or(x, y, "")
    }
    pub fn xor(&self, x: VectorValue<'ctx>, y: VectorValue<'ctx>) -> R<VectorValue<'ctx>> {
        self.b.build_xor(x, y, "")
    }
    pub fn iadd(&self, x: VectorValue<'ctx>, y: VectorValue<'ctx>) -> R<VectorValue<'ctx>> {
        self.b.build_int_add(x, y, "")
    }
    pub fn isub(&self, x: VectorValue<'ctx>, y: VectorValue<'ctx>) -> R<VectorValue<'ctx>> {
        self.b.build_int_sub(x, y, "")
    }
    pub fn shl(&self, x: VectorValue<'ctx>, y: VectorValue<'ctx>) -> R<VectorValue<'ctx>> {
        self.b.build_left_shift(x, y, "")
    }
    /// Logical (`sign = false`) or arithmetic right shift.
    pub fn shr(
        &self,
        x: VectorValue<'ctx>,
        y: VectorValue<'ctx>,
        sign: bool,
    ) -> R<VectorValue<'ctx>> {
        self.b.build_right_shift(x, y, sign, "")
    }
    pub fn to_int(&self, x: VectorValue<'ctx>) -> R<VectorValue<'ctx>> {
        Ok(self
            .b
            .build_bit_cast(x, self.t.ity, "")?
            .into_vector_value())
    }
    pub fn to_float(&self, x: VectorValue<'ctx>) -> R<VectorValue<'ctx>> {
        Ok(self
            .b
            .build_bit_cast(x, self.t.fty, "")?
            .into_vector_value())
    }
    /// `<W x i32>` to `<W x T>` (signed; exact for |x| < 2^24 in f32, always in f64).
    pub fn i32_to_float(&self, x: VectorValue<'ctx>) -> R<VectorValue<'ctx>> {
        self.b.build_signed_int_to_float(x, self.t.fty, "")
    }
    /// An integral `<W x T>` (|x| < 2^31) to `<W x i32>`.
    pub fn float_to_i32(&self, x: VectorValue<'ctx>) -> R<VectorValue<'ctx>> {
        self.b.build_float_to_signed_int(x, self.t.i32ty, "")
    }
    /// `<W x i32>` sign-extended to the same-width integers (a no-op in f32).
    pub fn i32_to_int(&self, x: VectorValue<'ctx>) -> R<VectorValue<'ctx>> {
        if self.t.f64 {
            self.b.build_int_s_extend(x, self.t.ity, "")
        } else {
            Ok(x)
        }
    }
    /// The same-width integers truncated to `<W x i32>` (a no-op in f32).
    pub fn int_to_i32(&self, x: VectorValue<'ctx>) -> R<VectorValue<'ctx>> {
        if self.t.f64 {
            self.b.build_int_truncate(x, self.t.i32ty, "")
        } else {
            Ok(x)
        }
    }

    /// An overloaded LLVM intrinsic on `<W x T>`.
    fn intrinsic(&self, name: &str, args: &[VectorValue<'ctx>]) -> R<VectorValue<'ctx>> {
        let f = Intrinsic::find(name)
            .and_then(|i| i.get_declaration(self.m, &[self.t.fty.into()]))
            .ok_or(BuilderError::UnsetPosition)?;
        let args: Vec<_> = args.iter().map(|&a| a.into()).collect();
        let call = self.b.build_call(f, &args, "")?;
        call.try_as_basic_value()
            .basic()
            .map(|v| v.into_vector_value())
            .ok_or(BuilderError::UnsetPosition)
    }
    pub fn fma(
        &self,
        x: VectorValue<'ctx>,
        y: VectorValue<'ctx>,
        z: VectorValue<'ctx>,
    ) -> R<VectorValue<'ctx>> {
        self.intrinsic("llvm.fma", &[x, y, z])
    }
    pub fn sqrt(&self, x: VectorValue<'ctx>) -> R<VectorValue<'ctx>> {
        self.intrinsic("llvm.sqrt", &[x])
    }
    pub fn fabs(&self, x: VectorValue<'ctx>) -> R<VectorValue<'ctx>> {
        self.intrinsic("llvm.fabs", &[x])
    }
    /// Round to nearest, ties to even (the default rounding mode).
    pub fn rint(&self, x: VectorValue<'ctx>) -> R<VectorValue<'ctx>> {
        self.intrinsic("llvm.rint", &[x])
    }
    pub fn copysign(&self, x: VectorValue<'ctx>, y: VectorValue<'ctx>) -> R<VectorValue<'ctx>> {
        self.intrinsic("llvm.copysign", &[x, y])
    }

    /// `c[0] + x (c[1] + x (c[2] + ...))` by FMA.
    fn horner(&self, x: VectorValue<'ctx>, c: &[f64]) -> R<VectorValue<'ctx>> {
        let mut acc = self.splat(c[c.len() - 1]);
        for &k in c[..c.len() - 1].iter().rev() {
            acc = self.fma(acc, x, self.splat(k))?;
        }
        Ok(acc)
    }

    fn is_nan(&self, x: VectorValue<'ctx>) -> R<VectorValue<'ctx>> {
        self.cmp(FloatPredicate::UNO, x, x)
    }

    /// `2^k` for integral `k` (`<W x i32>`) inside the normal exponent range.
    fn pow2(&self, k: VectorValue<'ctx>) -> R<VectorValue<'ctx>> {
        let bias = if self.t.f64 { 1023 } else { 127 };
        let e = self.i32_to_int(k)?;
        let e = self.iadd(e, self.isplat(bias))?;
        let e = self.shl(e, self.isplat(self.t.mant_bits() as i64))?;
        self.to_float(e)
    }

    /// `x = k ln2 + r`, |r| <= ln2/2: `(k as T, k as i32, r)`.
    fn reduce_ln2(
        &self,
        x: VectorValue<'ctx>,
    ) -> R<(VectorValue<'ctx>, VectorValue<'ctx>, VectorValue<'ctx>)> {
        let (hi, lo) = ln2_split(self.t.f64);
        let k = self.rint(self.mul(x, self.splat(std::f64::consts::LOG2_E))?)?;
        let mk = self.neg(k)?;
        let r = self.fma(mk, self.splat(hi), x)?;
        let r = self.fma(mk, self.splat(lo), r)?;
        Ok((k, self.float_to_i32(k)?, r))
    }

    /// `e^x` (module doc).
    pub fn exp(&self, x: VectorValue<'ctx>) -> R<VectorValue<'ctx>> {
        let lim = if self.t.f64 { 1000.0 } else { 150.0 };
        let lo = self.cmp(FloatPredicate::OLT, x, self.splat(-lim))?;
        let xc = self.select(lo, self.splat(-lim), x)?;
        let hi = self.cmp(FloatPredicate::OGT, xc, self.splat(lim))?;
        let xc = self.select(hi, self.splat(lim), xc)?;
        let nan = self.is_nan(x)?;
        let xc = self.select(nan, self.splat(0.0), xc)?;
        let (_, k, r) = self.reduce_ln2(xc)?;
        let p = self.horner(r, if self.t.f64 { EXP_F64 } else { EXP_F32 })?;
        // 2^k as two factors, so results near the overflow and underflow thresholds round once.
        let h = self.shr(k, self.i32splat(1), true)?;
        let s1 = self.pow2(h)?;
        let s2 = self.pow2(self.isub(k, h)?)?;
        let y = self.mul(self.mul(p, s1)?, s2)?;
        self.select(nan, x, y)
    }

    /// `e^x - 1` for x >= 0 below the tanh's limit (no special cases).
    fn expm1_pos(&self, x: VectorValue<'ctx>) -> R<VectorValue<'ctx>> {
        let (_, k, r) = self.reduce_ln2(x)?;
        let n = if self.t.f64 { 13 } else { 7 };
        // expm1(r) = r + r^2 (1/2 + r/6 + ...)
        let c: Vec<f64> = inverse_factorials(n + 1)[2..].to_vec();
        let q = self.horner(r, &c)?;
        let p = self.fma(self.mul(r, r)?, q, r)?;
        let s = self.pow2(k)?;
        let sm1 = self.sub(s, self.splat(1.0))?;
        self.fma(s, p, sm1)
    }

    /// `ln x` (module doc).
    pub fn log(&self, x: VectorValue<'ctx>) -> R<VectorValue<'ctx>> {
        self.log_in(x, true)
    }

    /// `ln x` for the draws' `u1`, a normal number in (0, 1]: no subnormal, zero, negative,
    /// infinite or NaN argument to handle, so none is checked (the same arithmetic otherwise).
    pub fn log_unit(&self, x: VectorValue<'ctx>) -> R<VectorValue<'ctx>> {
        self.log_in(x, false)
    }

    fn log_in(&self, x: VectorValue<'ctx>, edges: bool) -> R<VectorValue<'ctx>> {
        let f64 = self.t.f64;
        let (min_normal, up, up_bits) = if f64 {
            (f64::MIN_POSITIVE, 2f64.powi(54), 54)
        } else {
            (f64::from(f32::MIN_POSITIVE), 2f64.powi(24), 24)
        };
        let tiny = if edges {
            Some(self.cmp(FloatPredicate::OLT, x, self.splat(min_normal))?)
        } else {
            None
        };
        let xs = match tiny {
            Some(tiny) => self.select(tiny, self.mul(x, self.splat(up))?, x)?,
            None => x,
        };
        let bits = self.to_int(xs)?;
        let mb = self.t.mant_bits();
        let bias: i64 = if f64 { 1023 } else { 127 };
        let e = self.shr(bits, self.isplat(mb as i64), false)?;
        let e = self.int_to_i32(e)?;
        let zero_i = self.i32splat(0);
        let e = self.b.build_int_sub(e, self.i32splat(bias as u32), "")?;
        let e = match tiny {
            Some(tiny) => {
                let adj = self.select(tiny, self.i32splat(up_bits), zero_i)?;
                self.b.build_int_sub(e, adj, "")?
            }
            None => e,
        };
        let mant = self.and(bits, self.isplat(((1u64 << mb) - 1) as i64))?;
        let one_bits = (bias as u64) << mb;
        let m = self.to_float(self.or(mant, self.isplat(one_bits as i64))?)?;
        let big = self.cmp(FloatPredicate::OGT, m, self.splat(std::f64::consts::SQRT_2))?;
        let m = self.select(big, self.mul(m, self.splat(0.5))?, m)?;
        let e = self
            .b
            .build_int_add(e, self.select(big, self.i32splat(1), zero_i)?, "")?;
        let f = self.sub(m, self.splat(1.0))?;
        let s = self.div(f, self.add(f, self.splat(2.0))?)?;
        let z = self.mul(s, s)?;
        let rz = self.mul(z, self.horner(z, if f64 { LOG_F64 } else { LOG_F32 })?)?;
        let hfsq = self.mul(self.mul(f, f)?, self.splat(0.5))?;
        let dk = self.i32_to_float(e)?;
        let (hi, lo) = ln2_split(f64);
        // dk*ln2_hi - ((hfsq - (s*(hfsq+R) + dk*ln2_lo)) - f)
        let t = self.fma(s, self.add(hfsq, rz)?, self.mul(dk, self.splat(lo))?)?;
        let t = self.sub(self.sub(hfsq, t)?, f)?;
        let y = self.fma(dk, self.splat(hi), self.neg(t)?)?;
        if !edges {
            return Ok(y);
        }
        let zero = self.cmp(FloatPredicate::OEQ, x, self.splat(0.0))?;
        let y = self.select(zero, self.splat(f64::NEG_INFINITY), y)?;
        let neg = self.cmp(FloatPredicate::OLT, x, self.splat(0.0))?;
        let y = self.select(neg, self.splat(f64::NAN), y)?;
        let inf = self.cmp(FloatPredicate::OEQ, x, self.splat(f64::INFINITY))?;
        let y = self.select(inf, x, y)?;
        self.select(self.is_nan(x)?, x, y)
    }

    /// `cos x` (module doc).
    pub fn cos(&self, x: VectorValue<'ctx>) -> R<VectorValue<'ctx>> {
        self.cos_in(x, true)
    }

    /// `cos x` for the draws' `2 pi u2` in [0, 2 pi): not negative, finite, so neither `|x|`
    /// nor the infinity and NaN checks are made (the same arithmetic otherwise).
    pub fn cos_draw(&self, x: VectorValue<'ctx>) -> R<VectorValue<'ctx>> {
        self.cos_in(x, false)
    }

    fn cos_in(&self, x: VectorValue<'ctx>, edges: bool) -> R<VectorValue<'ctx>> {
        let ax = if edges { self.fabs(x)? } else { x };
        let k = self.rint(self.mul(ax, self.splat(std::f64::consts::FRAC_2_PI))?)?;
        let mk = self.neg(k)?;
        let mut r = ax;
        for p in pio2_split(self.t.f64) {
            r = self.fma(mk, self.splat(p), r)?;
        }
        let z = self.mul(r, r)?;
        // cos r = C(z); sin r = r + r z S(z)
        let (cc, sc) = if self.t.f64 {
            (COS_F64, SIN_F64)
        } else {
            (COS_F32, SIN_F32)
        };
        let c = self.horner(z, cc)?;
        let s = self.fma(self.mul(r, z)?, self.horner(z, sc)?, r)?;
        let q = self.float_to_i32(k)?;
        let odd = self.and(q, self.i32splat(1))?;
        let odd = self.icmp(IntPredicate::NE, odd, self.i32splat(0))?;
        let y = self.select(odd, s, c)?;
        // Quadrants 1 and 2 negate.
        let flip = self.and(
            self.b.build_int_add(q, self.i32splat(1), "")?,
            self.i32splat(2),
        )?;
        let flip = self.i32_to_int(flip)?;
        let shift = if self.t.f64 { 62 } else { 30 };
        let flip = self.shl(flip, self.isplat(shift))?;
        let y = self.to_float(self.xor(self.to_int(y)?, flip)?)?;
        if !edges {
            return Ok(y);
        }
        let inf = self.cmp(FloatPredicate::OEQ, ax, self.splat(f64::INFINITY))?;
        let y = self.select(inf, self.splat(f64::NAN), y)?;
        self.select(self.is_nan(x)?, x, y)
    }

    /// `tanh x` (module doc).
    pub fn tanh(&self, x: VectorValue<'ctx>) -> R<VectorValue<'ctx>> {
        let ax = self.fabs(x)?;
        let lim = if self.t.f64 { 40.0 } else { 20.0 };
        let y = self.mul(ax, self.splat(2.0))?;
        let big = self.cmp(FloatPredicate::UGT, y, self.splat(lim))?;
        let y = self.select(big, self.splat(lim), y)?;
        let e = self.expm1_pos(y)?;
        let t = self.div(e, self.add(e, self.splat(2.0))?)?;
        let t = self.copysign(t, x)?;
        self.select(self.is_nan(x)?, x, t)
    }

    /// `erfc x` (module doc); f32 kernels evaluate it in f64.
    pub fn erfc(&self, x: VectorValue<'ctx>) -> R<VectorValue<'ctx>> {
        if !self.t.f64 {
            let w = self.with(self.t.wide());
            let xd = self.b.build_float_ext(x, w.t.fty, "")?;
            let y = w.erfc(xd)?;
            return self.b.build_float_trunc(y, self.t.fty, "");
        }
        let ax = self.fabs(x)?;
        // |x| < 0.5: 1 - erf(x), erf(x) = x P(x^2) (Taylor).
        let x2 = self.mul(x, x)?;
        let small = self.sub(
            self.splat(1.0),
            self.mul(x, self.horner(x2, &erf_taylor(14))?)?,
        )?;
        // exp(-x^2) with x^2 = hi + lo exactly.
        let lo = self.fma(ax, ax, self.neg(x2)?)?;
        let e = self.exp(self.neg(x2)?)?;
        let e = self.fma(self.neg(e)?, lo, e)?;
        // g(|x|) on [0.5, 8): Chebyshev per octave, coefficients chosen per lane.
        let fits = erfcx_fits();
        let mut t = self.splat(0.0);
        let mut coef: Vec<VectorValue<'ctx>> = Vec::new();
        for (i, fit) in fits.iter().enumerate() {
            let inside = self.cmp(FloatPredicate::OGE, ax, self.splat(fit.a))?;
            // t = (|x| - mid) / half on this octave.
            let ti = self.mul(
                self.sub(ax, self.splat(0.5 * (fit.a + fit.b)))?,
                self.splat(2.0 / (fit.b - fit.a)),
            )?;
            if i == 0 {
                t = ti;
                coef = fit.c.iter().map(|&c| self.splat(c)).collect();
            } else {
                t = self.select(inside, ti, t)?;
                for (k, &c) in fit.c.iter().enumerate() {
                    coef[k] = self.select(inside, self.splat(c), coef[k])?;
                }
            }
        }
        // Clenshaw.
        let t2 = self.add(t, t)?;
        let (mut b1, mut b2) = (self.splat(0.0), self.splat(0.0));
        for &c in coef[1..].iter().rev() {
            let b0 = self.add(self.sub(self.mul(t2, b1)?, b2)?, c)?;
            b2 = b1;
            b1 = b0;
        }
        let mid = self.add(self.sub(self.mul(t, b1)?, b2)?, coef[0])?;
        // |x| >= 8: asymptotic series 1/(x sqrt pi) sum (-1)^k (2k-1)!! v^k, v = 1/(2x^2).
        let v = self.div(self.splat(0.5), x2)?;
        let asym = self.horner(v, &erfc_asymptotic(20))?;
        let asym = self.div(asym, self.mul(ax, self.splat(PI.sqrt()))?)?;
        let far = self.cmp(FloatPredicate::OGE, ax, self.splat(8.0))?;
        let g = self.select(far, asym, mid)?;
        let big = self.mul(e, g)?;
        let big = self.select(
            self.cmp(FloatPredicate::OGT, ax, self.splat(27.5))?,
            self.splat(0.0),
            big,
        )?;
        let neg = self.cmp(FloatPredicate::OLT, x, self.splat(0.0))?;
        let big = self.select(neg, self.sub(self.splat(2.0), big)?, big)?;
        let near = self.cmp(FloatPredicate::OLT, ax, self.splat(0.5))?;
        let y = self.select(near, small, big)?;
        self.select(self.is_nan(x)?, x, y)
    }

    /// `a^b` (module doc); f32 kernels evaluate it in f64.
    pub fn pow(&self, a: VectorValue<'ctx>, b: VectorValue<'ctx>) -> R<VectorValue<'ctx>> {
        if !self.t.f64 {
            let w = self.with(self.t.wide());
            let ad = self.b.build_float_ext(a, w.t.fty, "")?;
            let bd = self.b.build_float_ext(b, w.t.fty, "")?;
            let y = w.pow(ad, bd)?;
            return self.b.build_float_trunc(y, self.t.fty, "");
        }
        let l = self.log(self.fabs(a)?)?;
        let y = self.mul(b, l)?;
        let ylo = self.fma(b, l, self.neg(y)?)?;
        let e = self.exp(y)?;
        let ok = self.cmp(FloatPredicate::OLT, self.fabs(y)?, self.splat(700.0))?;
        let corrected = self.fma(e, ylo, e)?;
        let r = self.select(ok, corrected, e)?;
        // a with its sign bit set: a^b takes a's sign for odd integral b; a finite a < 0 with a
        // non-integral b gives NaN (C's pow; -0 and -inf give +0 or +inf there).
        let int = self.cmp(FloatPredicate::OEQ, self.rint(b)?, b)?;
        let hb = self.mul(b, self.splat(0.5))?;
        let odd = self.cmp(FloatPredicate::ONE, self.rint(hb)?, hb)?;
        let odd = self.and(int, odd)?;
        let signed = self.icmp(IntPredicate::SLT, self.to_int(a)?, self.isplat(0))?;
        let r = self.select(self.and(signed, odd)?, self.neg(r)?, r)?;
        let finite_neg = self.and(
            self.cmp(FloatPredicate::OLT, a, self.splat(0.0))?,
            self.cmp(FloatPredicate::ONE, a, self.splat(f64::NEG_INFINITY))?,
        )?;
        let nan = self.and(finite_neg, self.b.build_not(int, "")?)?;
        let r = self.select(nan, self.splat(f64::NAN), r)?;
        let one = self.splat(1.0);
        let r = self.select(self.cmp(FloatPredicate::OEQ, a, one)?, one, r)?;
        self.select(self.cmp(FloatPredicate::OEQ, b, self.splat(0.0))?, one, r)
    }
}

const PI: f64 = std::f64::consts::PI;

/// Near-minimax polynomials (Chebyshev fits in 50-digit arithmetic, mpmath's `chebyfit`),
/// coefficients from the constant term up: `exp(r)` on [-ln2/2, ln2/2]; log's `R(z)/z` with
/// `log(1+f) = 2s + s R`, `z = s^2` on [0, ((sqrt2-1)/(sqrt2+1))^2]; `cos(sqrt z)` and
/// `(sin(r)/r - 1)/z` on [0, (pi/4)^2]. The degree is the least whose fit error is well below
/// the precision's last bit where it enters the result (the error bounds in comments).
#[rustfmt::skip]
const EXP_F64: &[f64] = &[1.0, 1.0, 0.5000000000000019, 0.1666666666666668, 0.0416666666664881, 0.008333333333319601, 0.0013888888952314775, 0.00019841269890047113, 2.4801485482328494e-05, 2.755724091857897e-06, 2.763263963904103e-07, 2.5110037605963777e-08]; // degree 11, fit error 3.15e-18
#[rustfmt::skip]
const LOG_F64: &[f64] = &[0.666666666666667, 0.39999999999899505, 0.28571428625975487, 0.2222221113479508, 0.18182889125261723, 0.15331721600556042, 0.14616449685043406]; // degree 6, fit error 3.1e-16
#[rustfmt::skip]
const COS_F64: &[f64] = &[1.0, -0.5, 0.04166666666666645, -0.0013888888888861095, 2.4801587283881152e-05, -2.7557313097790086e-07, 2.0875582380663952e-09, -1.1353379638297575e-11]; // degree 7, fit error 3.03e-20
#[rustfmt::skip]
const SIN_F64: &[f64] = &[-0.16666666666666666, 0.008333333333333331, -0.00019841269841265065, 2.7557319219339167e-06, -2.5052106232447578e-08, 1.6058531618986147e-10, -7.586697117706918e-13]; // degree 6, fit error 1.16e-20
#[rustfmt::skip]
const EXP_F32: &[f64] = &[1.0, 1.000000037716214, 0.5000000047117757, 0.16666415514653277, 0.04166635289677516, 0.008375126398153335, 0.0013941108433972674]; // degree 6, fit error 1.95e-9
#[rustfmt::skip]
const LOG_F32: &[f64] = &[0.6666666655449709, 0.40000121839806124, 0.28550820815960665, 0.23330467216303835]; // degree 3, fit error 1.15e-9
#[rustfmt::skip]
const COS_F32: &[f64] = &[0.9999999999524894, -0.4999999961485761, 0.041666616692532826, -0.0013886617999647076, 2.4379831251175367e-05]; // degree 4, fit error 4.75e-11
#[rustfmt::skip]
const SIN_F32: &[f64] = &[-0.1666666666385529, 0.008333331874710208, -0.00019840086735384846, 2.724992580305979e-06]; // degree 3, fit error 2.81e-11

fn alt(j: usize) -> f64 {
    if j.is_multiple_of(2) {
        1.0
    } else {
        -1.0
    }
}

fn factorial(n: usize) -> f64 {
    (1..=n).map(|k| k as f64).product()
}

/// `1/k!` for k = 0..=n.
fn inverse_factorials(n: usize) -> Vec<f64> {
    (0..=n).map(|k| 1.0 / factorial(k)).collect()
}

/// erf(x) / x as a polynomial in x^2: `2/sqrt(pi) (-1)^n / (n! (2n+1))`.
fn erf_taylor(n: usize) -> Vec<f64> {
    (0..=n)
        .map(|k| 2.0 / PI.sqrt() * alt(k) / (factorial(k) * (2 * k + 1) as f64))
        .collect()
}

/// `(-1)^k (2k-1)!!` for k = 0..=n.
fn erfc_asymptotic(n: usize) -> Vec<f64> {
    let mut c = vec![1.0];
    for k in 1..=n {
        c.push(-c[k - 1] * (2 * k - 1) as f64);
    }
    c
}

/// ln 2 in two parts whose high part times any reduction's k is exact (fdlibm's for f64).
fn ln2_split(f64: bool) -> (f64, f64) {
    if f64 {
        (0.6931471803691238, 1.9082149292705877e-10)
    } else {
        let hi = f32::from_bits((std::f64::consts::LN_2 as f32).to_bits() & 0xffff_f000);
        (
            f64::from(hi),
            f64::from((std::f64::consts::LN_2 - f64::from(hi)) as f32),
        )
    }
}

/// pi/2 in parts for the FMA reduction of `cos` (fdlibm's pio2_1, pio2_2, pio2_2t in f64).
fn pio2_split(f64: bool) -> Vec<f64> {
    let parts = [
        1.5707963267341256,
        6.077100506303966e-11,
        2.0222662487959506e-21,
    ];
    if f64 {
        return parts.to_vec();
    }
    let hi = f32::from_bits((parts[0] as f32).to_bits() & 0xffff_f000);
    let rest = (parts[0] - f64::from(hi)) + parts[1];
    let mid = f32::from_bits((rest as f32).to_bits() & 0xffff_f000);
    let lo = ((rest - f64::from(mid)) + parts[2]) as f32;
    vec![f64::from(hi), f64::from(mid), f64::from(lo)]
}

/// A Chebyshev fit of `erfcx(x) = erfc(x) e^(x^2)` on `[a, b]`.
pub(super) struct Fit {
    pub a: f64,
    pub b: f64,
    pub c: Vec<f64>,
}

/// erfcx on the octaves [0.5, 1), [1, 2), [2, 4), [4, 8): Chebyshev coefficients (in t, the octave
/// mapped to [-1, 1]) from 50-digit arithmetic (`scripts/erfcx-fit.py`; a fit to the f64 libm's
/// erfc inherits its last-bit errors, which are not smooth, and misses by 10 ulp at the octaves' ends).
#[rustfmt::skip]
const ERFCX_FITS: [(f64, f64, &[f64]); 4] = [
    (0.5, 1.0, &[0.5142540300448141, -0.09353436157631646, 0.007349543567965961, -0.0005170287683170955, 3.327489181039832e-05, -1.9877609419315706e-06, 1.1137198399251981e-07, -5.898649609389129e-09, 2.9712990142852805e-10, -1.430488185776257e-11, 6.608616284265577e-13, -2.9395552899978545e-14, 1.2625028540389158e-15, -5.2483535009959205e-17, 2.1162858025358237e-18]),
    (1.0, 2.0, &[0.331427281639452, -0.0850021377067432, 0.009951127341466115, -0.0010810888102208325, 0.0001102324363119495, -1.0636830518218601e-05, 9.775012680479055e-07, -8.597922867888315e-08, 7.2677084117248425e-09, -5.923543840592542e-10, 4.6683928572294154e-11, -3.56612770156775e-12, 2.6458779519104523e-13, -1.9101658673527567e-14, 1.343976588479829e-15, -9.228790549094326e-17, 6.19267308464391e-18, -4.0652224326488762e-19]),
    (2.0, 4.0, &[0.1874295690262241, -0.05794652883669097, 0.008595247387396534, -0.0012284613640242594, 0.00016974366686180488, -2.2738329337044562e-05, 2.959844378804878e-06, -3.7513575581379714e-07, 4.6372828761738244e-08, -5.599455392564088e-09, 6.613160896679916e-10, -7.648271522199816e-11, 8.670904325876594e-12, -9.645456274382108e-13, 1.0536827959360625e-13, -1.1312630906760667e-14, 1.1945180669174577e-15, -1.241310752580407e-16, 1.270246323185436e-17, -1.280725873663855e-18]),
    (4.0, 8.0, &[0.09799557556862198, -0.03261716242283879, 0.005354444513048941, -0.0008675085617618387, 0.0001387834577332989, -2.1933248302183236e-05, 3.425716824410705e-06, -5.289955530513349e-07, 8.079076527537946e-08, -1.2207511691612988e-08, 1.8255151508559988e-09, -2.7024969193563974e-10, 3.961752303537055e-11, -5.752619043200236e-12, 8.275752891382595e-13, -1.1798167744445412e-13, 1.6671816868045593e-14, -2.335628745546585e-15, 3.244620004495789e-16, -4.470390173206754e-17, 6.10980111227626e-18, -8.284830681274416e-19, 1.114773431757112e-19]),
];

/// The fits of erfcx, padded to one length (Clenshaw runs per lane over selected coefficients).
pub(super) fn erfcx_fits() -> Vec<Fit> {
    let len = ERFCX_FITS.iter().map(|f| f.2.len()).max().unwrap_or(0);
    ERFCX_FITS
        .iter()
        .map(|&(a, b, c)| {
            let mut c = c.to_vec();
            c.resize(len, 0.0);
            Fit { a, b, c }
        })
        .collect()
}

/// Which vector function a call site wants.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub(super) enum Func {
    Exp,
    Log,
    /// No rule calls cos; the draws use [`V::cos_draw`] inline. The function stays for its test
    /// (which checks the arithmetic `cos_draw` shares).
    #[cfg_attr(not(test), allow(dead_code))]
    Cos,
    Tanh,
    Erfc,
    Pow,
}

impl Func {
    #[cfg(test)]
    pub const ALL: [Func; 6] = [
        Func::Exp,
        Func::Log,
        Func::Cos,
        Func::Tanh,
        Func::Erfc,
        Func::Pow,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Func::Exp => "exp",
            Func::Log => "log",
            Func::Cos => "cos",
            Func::Tanh => "tanh",
            Func::Erfc => "erfc",
            Func::Pow => "pow",
        }
    }

    pub fn arity(self) -> usize {
        if self == Func::Pow {
            2
        } else {
            1
        }
    }
}

/// The module's function `nablac_v<f>` on `t`'s vectors, defined on first use (internal; its
/// own builder, so the caller's position is kept).
pub(super) fn function<'ctx>(t: Vt<'ctx>, m: &Module<'ctx>, f: Func) -> R<FunctionValue<'ctx>> {
    let name = format!(
        "nablac_v{}_{}x{}",
        f.name(),
        t.w,
        if t.f64 { "f64" } else { "f32" }
    );
    if let Some(g) = m.get_function(&name) {
        return Ok(g);
    }
    let params = vec![t.fty.into(); f.arity()];
    let g = m.add_function(
        &name,
        t.fty.fn_type(&params, false),
        Some(Linkage::Internal),
    );
    let b = t.cx.create_builder();
    b.position_at_end(t.cx.append_basic_block(g, "entry"));
    let v = V { t, b: &b, m };
    let p = |i: u32| {
        g.get_nth_param(i)
            .map(|p| p.into_vector_value())
            .ok_or(BuilderError::UnsetPosition)
    };
    let y = match f {
        Func::Exp => v.exp(p(0)?)?,
        Func::Log => v.log(p(0)?)?,
        Func::Cos => v.cos(p(0)?)?,
        Func::Tanh => v.tanh(p(0)?)?,
        Func::Erfc => v.erfc(p(0)?)?,
        Func::Pow => v.pow(p(0)?, p(1)?)?,
    };
    b.build_return(Some(&y))?;
    Ok(g)
}

/// Calls `f` on `args` (the module's vector function).
pub(super) fn call<'ctx>(
    v: &V<'_, 'ctx>,
    f: Func,
    args: &[VectorValue<'ctx>],
) -> R<VectorValue<'ctx>> {
    let g = function(v.t, v.m, f)?;
    let args: Vec<_> = args.iter().map(|&a| a.into()).collect();
    v.b.build_call(g, &args, "")?
        .try_as_basic_value()
        .basic()
        .map(|x| x.into_vector_value())
        .ok_or(BuilderError::UnsetPosition)
}

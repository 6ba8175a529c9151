//! What differs between the three C-like kernel languages, in one value per language.
//!
//! Like tinygrad's `CStyleLanguage`: the emitter (`body.rs`) and the skeleton template
//! (`templates/kernel.txt`) are shared, and every spelling that differs between CUDA (as NVRTC
//! compiles it), OpenCL C 1.2 and GLSL 450 comes from a [`Dialect`]. The function and literal spellings
//! ([`Dialect::math`], [`Dialect::call`], [`literal`]) live here and nowhere else; the ops'
//! arithmetic is `crate::ops`'s table, which `body.rs` prints.

use super::manifest::{Precision, Target};
use crate::ops::Fun;

/// The spellings of one kernel language. Every field is plain text pasted into the source.
#[derive(Clone, Copy, Debug)]
pub struct Dialect {
    pub target: Target,
    /// The 32-bit unsigned integer type.
    pub uint: &'static str,
    /// Qualifiers in front of a helper function definition.
    pub fn_qual: &'static str,
    /// Prefix of every scalar kernel parameter where it is read (`pc.` for GLSL push constants).
    pub param: &'static str,
    /// The thread's index inside its workgroup, as a `uint` expression.
    pub local_id: &'static str,
    /// The workgroup's index, as a `uint` expression.
    pub group_id: &'static str,
    /// A workgroup barrier that also orders shared-memory accesses (a full statement).
    pub barrier: &'static str,
    /// Suffix of an f32 literal.
    pub f32_suffix: &'static str,
    /// Suffix of an f64 literal.
    pub f64_suffix: &'static str,
    /// Qualifier of every value the body declares, so that the shader compiler neither fuses a
    /// multiply and an add into one rounding nor reorders arithmetic: either would let a plain and
    /// a checkpointed kernel (whose code around the same node differs) round differently. CUDA
    /// gets that from `--fmad=false`, OpenCL from `FP_CONTRACT OFF`; GLSL needs `precise`
    /// (SPIR-V NoContraction), as lavapipe showed on the basket.
    pub precise: &'static str,
}

/// CUDA C++ as NVRTC compiles it: no `#include`, `extern "C" __global__` entry point.
pub const CUDA: Dialect = Dialect {
    target: Target::Cuda,
    uint: "unsigned int",
    fn_qual: "__device__ __forceinline__ ",
    param: "",
    local_id: "threadIdx.x",
    group_id: "blockIdx.x",
    barrier: "__syncthreads();",
    f32_suffix: "f",
    f64_suffix: "",
    precise: "",
};

/// OpenCL C 1.2 (PoCL, NVIDIA): `cl_khr_fp64` is always enabled, the partial sums are f64.
pub const OPENCL: Dialect = Dialect {
    target: Target::Opencl,
    uint: "uint",
    fn_qual: "",
    param: "",
    local_id: "(uint)get_local_id(0)",
    group_id: "(uint)get_group_id(0)",
    barrier: "barrier(CLK_LOCAL_MEM_FENCE);",
    f32_suffix: "f",
    f64_suffix: "",
    precise: "",
};

/// GLSL 450 for Vulkan 1.1+: scalars in the push-constant block `pc`, no 64-bit integers.
pub const GLSL: Dialect = Dialect {
    target: Target::Glsl,
    uint: "uint",
    fn_qual: "",
    param: "pc.",
    local_id: "gl_LocalInvocationID.x",
    group_id: "gl_WorkGroupID.x",
    barrier: "memoryBarrierShared(); barrier();",
    f32_suffix: "",
    f64_suffix: "lf",
    precise: "precise ",
};

/// A math function the kernels call.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum MathFn {
    Exp,
    Log,
    Sqrt,
    Cos,
    Abs,
    Tanh,
    Erfc,
    Pow,
    /// `fma(x, y, z)`: x · y + z rounded once (forward mode's tangent sums).
    Fma,
}

impl MathFn {
    /// The math function of a rule function.
    pub fn of(f: Fun) -> MathFn {
        match f {
            Fun::Exp => MathFn::Exp,
            Fun::Log => MathFn::Log,
            Fun::Sqrt => MathFn::Sqrt,
            Fun::Abs => MathFn::Abs,
            Fun::Tanh => MathFn::Tanh,
            Fun::Erfc => MathFn::Erfc,
        }
    }
}

impl Dialect {
    /// The dialect of a C-like target; `None` for `Target::Cpu`.
    pub fn of(target: Target) -> Option<Dialect> {
        match target {
            Target::Cuda => Some(CUDA),
            Target::Opencl => Some(OPENCL),
            Target::Glsl => Some(GLSL),
            Target::Cpu => None,
        }
    }

    /// The name of `f` at precision `p` (CUDA has `expf`/`exp`; OpenCL and GLSL overload).
    pub fn math(&self, f: MathFn, p: Precision) -> &'static str {
        let cuda_f32 = self.target == Target::Cuda && p == Precision::F32;
        match (f, cuda_f32) {
            (MathFn::Exp, true) => "expf",
            (MathFn::Exp, false) => "exp",
            (MathFn::Log, true) => "logf",
            (MathFn::Log, false) => "log",
            (MathFn::Sqrt, true) => "sqrtf",
            (MathFn::Sqrt, false) => "sqrt",
            (MathFn::Cos, true) => "cosf",
            (MathFn::Cos, false) => "cos",
            (MathFn::Abs, true) => "fabsf",
            (MathFn::Abs, false) => {
                if self.target == Target::Glsl {
                    "abs"
                } else {
                    "fabs"
                }
            }
            (MathFn::Tanh, true) => "tanhf",
            (MathFn::Erfc, true) => "erfcf",
            (MathFn::Pow, true) => "powf",
            (MathFn::Pow, false) => "pow",
            (MathFn::Fma, true) => "fmaf",
            (MathFn::Fma, false) => "fma",
            // GLSL has no erfc, and its tanh may overflow to NaN: the template defines these
            // (`helpers`).
            (MathFn::Tanh, false) if self.target == Target::Glsl => "nablac_tanh",
            (MathFn::Erfc, false) if self.target == Target::Glsl => "nablac_erfc",
            (MathFn::Tanh, false) => "tanh",
            (MathFn::Erfc, false) => "erfc",
        }
    }

    /// Does the language have `f` at f64? (GLSL 450 has no double exp, log, cos, tanh, erfc or
    /// pow; it has double sqrt, abs and fma.)
    pub fn has_f64(&self, f: MathFn) -> bool {
        self.target != Target::Glsl || matches!(f, MathFn::Sqrt | MathFn::Abs | MathFn::Fma)
    }

    /// A quiet NaN of precision `p`, as an expression.
    pub fn nan(&self, p: Precision) -> &'static str {
        match (self.target, p) {
            (Target::Cuda, Precision::F32) => "__int_as_float(0x7fc00000)",
            (Target::Cuda, Precision::F64) => "__longlong_as_double(0x7ff8000000000000LL)",
            (Target::Opencl, Precision::F32) => "as_float(0x7fc00000u)",
            (Target::Opencl, Precision::F64) => "as_double(0x7ff8000000000000UL)",
            (_, Precision::F32) => "uintBitsToFloat(0x7fc00000u)",
            (_, Precision::F64) => "packDouble2x32(uvec2(0u, 0x7ff80000u))",
        }
    }

    /// An expression that is true when the f64 `x` is finite: its exponent bits are not all
    /// ones. Read from the bits, so no compiler that assumes finite math can fold it away.
    pub fn finite(&self, x: &str) -> String {
        match self.target {
            Target::Cuda => format!("(__double2hiint({x}) & 0x7ff00000) != 0x7ff00000"),
            Target::Opencl => {
                format!("(as_ulong({x}) & 0x7ff0000000000000UL) != 0x7ff0000000000000UL")
            }
            _ => format!("(unpackDouble2x32({x}).y & 0x7ff00000u) != 0x7ff00000u"),
        }
    }

    /// Definitions of the helper functions the body calls: those the language lacks for the rule
    /// functions `used` (GLSL's `nablac_tanh` and `nablac_erfc`, f32 only) and, when `chains`,
    /// the chain factors in precision `p` ([`Dialect::chain_helpers`]); or nothing.
    pub fn helpers(&self, used: &[MathFn], chains: bool, p: Precision) -> String {
        let mut out = String::new();
        if self.target == Target::Glsl && used.contains(&MathFn::Tanh) {
            out.push_str(GLSL_TANH);
        }
        if self.target == Target::Glsl && used.contains(&MathFn::Erfc) {
            out.push_str(GLSL_ERFC);
        }
        if chains {
            out.push_str(&self.chain_helpers(p));
        }
        out
    }

    /// Definitions of the chain factors (`crate::ops::Expr::Chain`) in precision `p`:
    /// `chain_mul(x, y)` is `x * y` but 0 when x or y is 0, `chain_div(x, y)` is `x / y` but 0
    /// when x is 0 or y infinite, whatever the other operand, and `chain_fma(x, y, z)` is
    /// `fma(x, y, z)` but z when x or y is 0 (a tangent sum's fused term, `emit::body`).
    fn chain_helpers(&self, p: Precision) -> String {
        let (t, q, zero) = (real(p), self.fn_qual, self.literal(0.0, p));
        let fma = self.math(MathFn::Fma, p);
        // GLSL's `precise` does not reach into a called function: the product is declared so.
        let pr = self.precise;
        format!(
            "
// Chain factors (ops.rs): a zero factor makes the product 0, whatever the other (strong zero).
{q}{t} chain_mul({t} x, {t} y) {{ {pr}{t} r = x * y; return (x == {zero} || y == {zero}) ? {zero} : r; }}
{q}{t} chain_div({t} x, {t} y) {{ {pr}{t} r = x / y; return (x == {zero} || isinf(y)) ? {zero} : r; }}
{q}{t} chain_fma({t} x, {t} y, {t} z) {{ {pr}{t} r = {fma}(x, y, z); return (x == {zero} || y == {zero}) ? z : r; }}"
        )
    }

    /// `cos(2 pi u2)` of the Box–Muller step, on the variable `u2` of precision `p`.
    ///
    /// CUDA and OpenCL have `cospi`, which reduces its argument exactly (`2 * u2` is exact) and so
    /// needs no slow path: `cosf(6.2831855f * u2)` carries a Payne–Hanek reduction for huge
    /// arguments that `u2` in [0, 1) never reaches, yet ptxas emits it at every draw (a third of
    /// the 252-step Asian kernel's instructions and all its local-memory traffic). It is also the
    /// closer value of cos(2 pi u2): no rounding of 2 pi. GLSL has no `cospi`.
    pub fn cos_2pi(&self, p: Precision) -> String {
        let two = self.literal(2.0, p);
        match (self.target, p) {
            (Target::Cuda, Precision::F32) => format!("cospif({two} * u2)"),
            (Target::Cuda | Target::Opencl, _) => format!("cospi({two} * u2)"),
            _ => {
                let tau = match p {
                    Precision::F32 => self.literal(f64::from(std::f32::consts::TAU), p),
                    Precision::F64 => self.literal(std::f64::consts::TAU, p),
                };
                format!("{}({tau} * u2)", self.math(MathFn::Cos, p))
            }
        }
    }

    /// The square root of the Box–Muller step, whose argument `-2 ln u1` is a normal float in
    /// [2.3e-7, 34.7], or -0 where the f32 u1 rounds to 1. CUDA f32 calls `draw_sqrt` (the
    /// template defines it): IEEE `sqrtf`'s own fast path, inline, zeros apart; `sqrtf` itself
    /// branches to an out-of-line slow path for arguments below 2^-101, infinities and NaNs, and
    /// the call makes ptxas spill live registers around every draw. Elsewhere: `sqrt`.
    pub fn draw_sqrt(&self, p: Precision) -> &'static str {
        if self.inline_draw_sqrt(p) {
            "draw_sqrt"
        } else {
            self.math(MathFn::Sqrt, p)
        }
    }

    /// Whether the template must define `draw_sqrt` (see [`Dialect::draw_sqrt`]).
    pub fn inline_draw_sqrt(&self, p: Precision) -> bool {
        self.target == Target::Cuda && p == Precision::F32
    }

    /// A conversion of `expr` to type `ty` (`(ty)(expr)` in C, `ty(expr)` in GLSL).
    pub fn cast(&self, ty: &str, expr: &str) -> String {
        if self.target == Target::Glsl {
            format!("{ty}({expr})")
        } else {
            format!("({ty})({expr})")
        }
    }

    /// `x` through the opaque identity, as the body calls it: `opq(x, zero)`.
    pub fn opaque(&self, x: &str) -> String {
        format!("opq({x}, {}zero)", self.param)
    }

    /// The body of the opaque identity `opq(x, z)`: the bits of `x` XOR the run-time zero `z`.
    pub fn opaque_body(&self, p: Precision) -> &'static str {
        match (self.target, p) {
            (Target::Cuda, Precision::F32) => "__int_as_float(__float_as_int(x) ^ (int)z)",
            (Target::Cuda, Precision::F64) => {
                "__longlong_as_double(__double_as_longlong(x) ^ (long long)z)"
            }
            (Target::Opencl, Precision::F32) => "as_float(as_uint(x) ^ z)",
            (Target::Opencl, Precision::F64) => "as_double(as_ulong(x) ^ (ulong)z)",
            (_, Precision::F32) => "uintBitsToFloat(floatBitsToUint(x) ^ z)",
            (_, Precision::F64) => "packDouble2x32(unpackDouble2x32(x) ^ uvec2(z))",
        }
    }

    /// The high 32 bits of the 64-bit product of two uints `a` and `b` (the body of `mulhi`).
    pub fn mulhi_body(&self) -> &'static str {
        match self.target {
            Target::Cuda => "return __umulhi(a, b);",
            Target::Opencl => "return mul_hi(a, b);",
            _ => "uint hi; uint lo; umulExtended(a, b, hi, lo); return hi;",
        }
    }

    /// A call of rule function `f` on the rendered argument `x` at precision `p`, the argument
    /// through the opaque identity when `opaque` (the schedule's `opaque_math` says when).
    pub fn call(&self, f: Fun, p: Precision, x: &str, opaque: bool) -> String {
        let m = MathFn::of(f);
        if opaque {
            format!("{}({})", self.math(m, p), self.opaque(x))
        } else {
            format!("{}({x})", self.math(m, p))
        }
    }

    /// `pow(x, y)` at precision `p` (both arguments through the opaque identity when `opaque`).
    pub fn pow(&self, p: Precision, x: &str, y: &str, opaque: bool) -> String {
        let name = self.math(MathFn::Pow, p);
        if opaque {
            format!("{name}({}, {})", self.opaque(x), self.opaque(y))
        } else {
            format!("{name}({x}, {y})")
        }
    }

    /// A literal of precision `p` that parses back to exactly `x` rounded to `p` (see [`literal`]).
    pub fn literal(&self, x: f64, p: Precision) -> String {
        literal(x, p, self.f32_suffix, self.f64_suffix)
    }
}

/// GLSL's tanh, argument clamped where f32 tanh is already +-1 (tanh 10 = 1 - 4e-9), so that no
/// driver's exp-based tanh overflows to NaN; NaN stays NaN.
const GLSL_TANH: &str = "
float nablac_tanh(float x) { return isnan(x) ? x : tanh(clamp(x, -10.0, 10.0)); }
";

/// erfc in f32 (GLSL has none): Numerical Recipes' Chebyshev fit, fractional error below 1.2e-7
/// everywhere (Press et al., Numerical Recipes, 2nd ed., 6.2, erfcc).
const GLSL_ERFC: &str = "
float nablac_erfc(float x)
{
    precise float z = abs(x);
    precise float t = 1.0 / (1.0 + 0.5 * z);
    precise float r = t * exp(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418
        + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587
        + t * (-0.82215223 + t * 0.17087277)))))))));
    return (x >= 0.0) ? r : 2.0 - r;
}
";

/// The scalar type name of a precision (the same in all three languages).
pub fn real(p: Precision) -> &'static str {
    match p {
        Precision::F32 => "float",
        Precision::F64 => "double",
    }
}

/// `x` rounded to `p`, printed as the shortest decimal that parses back to the same bits, with a
/// `.0` when it has no fraction or exponent (so it is a floating literal in every language), the
/// precision's suffix, and parentheses around a negative value. `x` rounded to `p` must be finite
/// (`emit` refuses a constant that overflows f32).
pub fn literal(x: f64, p: Precision, f32_suffix: &str, f64_suffix: &str) -> String {
    let digits = match p {
        // Rust's `{:?}` is the shortest round-trip representation and always has `.` or `e`.
        Precision::F32 => format!("{:?}{f32_suffix}", x as f32),
        Precision::F64 => format!("{x:?}{f64_suffix}"),
    };
    if digits.starts_with('-') {
        format!("({digits})")
    } else {
        digits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_round_trip() {
        let xs = [
            0.5,
            100.0,
            1e-7,
            -2.5,
            1.0 / 3.0,
            0.1,
            6.02214076e23,
            -0.0,
            5e-324,
            f64::MAX,
            252.0,
        ];
        for &x in &xs {
            let s = literal(x, Precision::F64, "", "lf");
            let t = s
                .trim_start_matches('(')
                .trim_end_matches(')')
                .trim_end_matches("lf");
            assert_eq!(t.parse::<f64>().unwrap().to_bits(), x.to_bits(), "{s}");
            assert!(t.contains('.') || t.contains('e'), "{s}");
            if !(x as f32).is_finite() {
                continue; // emit refuses such a constant in f32 (EmitError::ConstOverflow)
            }
            let s = literal(x, Precision::F32, "f", "");
            let t = s
                .trim_start_matches('(')
                .trim_end_matches(')')
                .trim_end_matches('f');
            assert_eq!(
                t.parse::<f32>().unwrap().to_bits(),
                (x as f32).to_bits(),
                "{s}"
            );
        }
        assert_eq!(literal(0.1, Precision::F32, "f", ""), "0.1f");
        assert_eq!(literal(0.1, Precision::F64, "", "lf"), "0.1lf");
        assert_eq!(literal(-2.5, Precision::F64, "", ""), "(-2.5)");
        assert_eq!(literal(100.0, Precision::F32, "", ""), "100.0");
        assert_eq!(literal(1.0 / 3.0, Precision::F32, "f", ""), "0.33333334f");
    }

    #[test]
    fn spellings() {
        assert_eq!(CUDA.math(MathFn::Exp, Precision::F32), "expf");
        assert_eq!(CUDA.math(MathFn::Exp, Precision::F64), "exp");
        assert_eq!(OPENCL.math(MathFn::Abs, Precision::F32), "fabs");
        assert_eq!(GLSL.math(MathFn::Abs, Precision::F64), "abs");
        assert_eq!(GLSL.cast("double", "v1"), "double(v1)");
        assert_eq!(CUDA.cast("double", "v1"), "(double)(v1)");
        assert_eq!(
            GLSL.call(Fun::Exp, Precision::F32, "v1", true),
            "exp(opq(v1, pc.zero))"
        );
        assert_eq!(CUDA.call(Fun::Exp, Precision::F32, "v1", false), "expf(v1)");
        assert_eq!(CUDA.cos_2pi(Precision::F32), "cospif(2.0f * u2)");
        assert_eq!(CUDA.cos_2pi(Precision::F64), "cospi(2.0 * u2)");
        assert_eq!(OPENCL.cos_2pi(Precision::F32), "cospi(2.0f * u2)");
        assert_eq!(GLSL.cos_2pi(Precision::F32), "cos(6.2831855 * u2)");
        assert_eq!(CUDA.draw_sqrt(Precision::F32), "draw_sqrt");
        assert_eq!(CUDA.draw_sqrt(Precision::F64), "sqrt");
        assert_eq!(OPENCL.draw_sqrt(Precision::F32), "sqrt");
        assert_eq!(
            GLSL.finite("acc0"),
            "(unpackDouble2x32(acc0).y & 0x7ff00000u) != 0x7ff00000u"
        );
    }
}

//! The one table of op rules: what every arithmetic op computes and how its derivative flows,
//! stated once, as data.
//!
//! Every back end evaluates these rules and none spells an op's arithmetic itself: the kernel
//! schedule (`crate::schedule`) attaches each node's rule to its statements, the C-like printer
//! renders them as text (`emit::body`), the CPU lowering builds Cranelift instructions from them
//! (`clif::lower`), the f64 reference evaluates them (`reference`), and the middle end
//! reads which forward values an adjoint rule needs ([`Rule::reads`]) and which ops carry a
//! derivative at all ([`Rule::is_differentiable`]). Adding an op is one entry here plus its
//! spelling where a target lacks a function (the dialect's math names, the CPU's libm table).
//! The independent definition in `compiler/tests/definition` does NOT read this table: it is the
//! check on it.
//!
//! A rule's expressions read `A` and `B` (the arguments' forward values), `C` (the node's own
//! value) and `D` (the node's adjoint in the reverse sweep). Every adjoint step is linear in `D`:
//! the contribution to an argument is `expr` (added, or subtracted when `sub`), so replacing `D` by
//! an argument's tangent gives the same rule in forward mode. Evaluation order is the tree's:
//! `D * C / B` is `(D * C) / B`, and every printer must keep it (no reassociation), so that all
//! targets round alike.
//!
//! Every product and quotient along the chain from `D` is a *chain factor* ([`Expr::Chain`],
//! written `⊙` and `⊘` below): a strong zero, `x ⊙ y` is 0 when x or y is 0 and `x ⊘ y` is 0
//! when x is 0 or y is infinite (the factor 1/y is 0), whatever the other operand, infinite and
//! NaN included; otherwise they are `x * y` and `x / y`, the same bits. The chain rule's value
//! along a path of the graph is the product of its partials, and forward mode multiplies them
//! from the input's end, reverse mode from the output's: with IEEE products a zero partial on
//! one side of an infinite one gives 0 * inf = NaN in one order and 0 in the other (an adjoint 0
//! reaching `exp`'s infinite partial; a tangent -inf reaching `tanh`'s 0 partial), so the two
//! modes disagreed about which paths are non-finite. With the strong zero a path through a zero
//! partial contributes 0 in both orders (TAPE-FORMAT.md, the adjoint rules). Left over, as
//! TAPE-FORMAT.md states: infinite contributions that cancel in a sum (sqrt(x - x)), and products
//! that over- or underflow in one order only.
//!
//! | op | value | adjoint |
//! |---|---|---|
//! | `add a b` | a + b | da += d; db += d |
//! | `sub a b` | a - b | da += d; db -= d |
//! | `mul a b` | a * b | da += d⊙b; db += d⊙a |
//! | `div a b` | a / b | da += d⊘b; db -= d⊙c⊘b |
//! | `max a b` | a >= b ? a : b | if a >= b: da += d, else db += d |
//! | `min a b` | a <= b ? a : b | if a <= b: da += d, else db += d |
//! | `neg a` | -a | da -= d |
//! | `exp a` | e^a | da += d⊙c |
//! | `log a` | ln a | da += d⊘a |
//! | `sqrt a` | sqrt a | da += d*0.5⊘c |
//! | `abs a` | abs a | if a > 0: da += d, else if a < 0: da -= d |
//! | `lt a b` (`le`, `gt`, `ge`) | a < b ? 1 : 0 | none: not differentiable, so not active |
//! | `pow a b` | a > 0 ? a^b : NaN | da += d⊙b⊙a^(b-1); db += d⊙c⊙ln a |
//! | `tanh a` | tanh a | da += d⊙(1 - c*c) |
//! | `ncdf a` | 0.5 * erfc(-a / sqrt 2) | da += d⊙exp(-0.5*(a*a))/sqrt(2 pi) |

use crate::tape::Op;

/// Two-operand arithmetic inside a rule.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Arith {
    Add,
    Sub,
    Mul,
    Div,
}

impl Arith {
    /// The C operator.
    pub fn symbol(self) -> &'static str {
        match self {
            Arith::Add => "+",
            Arith::Sub => "-",
            Arith::Mul => "*",
            Arith::Div => "/",
        }
    }
}

/// An ordered comparison (false when either side is NaN).
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Cmp {
    Lt,
    Le,
    Gt,
    Ge,
}

impl Cmp {
    /// The C operator.
    pub fn symbol(self) -> &'static str {
        match self {
            Cmp::Lt => "<",
            Cmp::Le => "<=",
            Cmp::Gt => ">",
            Cmp::Ge => ">=",
        }
    }
}

/// A math function a rule calls; each target spells it (a dialect's math names, the CPU's libm).
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Fun {
    Exp,
    Log,
    Sqrt,
    Abs,
    Tanh,
    /// The complementary error function.
    Erfc,
}

/// A precision the rules can be evaluated in on the host (the reference's f64, and f32).
pub trait Real:
    Copy
    + PartialOrd
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
    + std::ops::Neg<Output = Self>
{
    /// `x` rounded to this precision.
    fn of(x: f64) -> Self;
    fn to_f64(self) -> f64;
    /// `f(x)`: Rust's std (which calls the host libm) and, for erfc, the `libm` crate.
    fn call(f: Fun, x: Self) -> Self;
    fn pow(self, y: Self) -> Self;
}

impl Real for f64 {
    fn of(x: f64) -> Self {
        x
    }
    fn to_f64(self) -> f64 {
        self
    }
    fn call(f: Fun, x: f64) -> f64 {
        match f {
            Fun::Exp => x.exp(),
            Fun::Log => x.ln(),
            Fun::Sqrt => x.sqrt(),
            Fun::Abs => x.abs(),
            Fun::Tanh => x.tanh(),
            Fun::Erfc => libm::erfc(x),
        }
    }
    fn pow(self, y: f64) -> f64 {
        self.powf(y)
    }
}

impl Real for f32 {
    fn of(x: f64) -> Self {
        x as f32
    }
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    fn call(f: Fun, x: f32) -> f32 {
        match f {
            Fun::Exp => x.exp(),
            Fun::Log => x.ln(),
            Fun::Sqrt => x.sqrt(),
            Fun::Abs => x.abs(),
            Fun::Tanh => x.tanh(),
            Fun::Erfc => libm::erfcf(x),
        }
    }
    fn pow(self, y: f32) -> f32 {
        self.powf(y)
    }
}

/// An expression over a node's operands (module doc).
#[derive(Copy, Clone, PartialEq, Debug)]
pub enum Expr {
    /// The first argument's forward value.
    A,
    /// The second argument's forward value.
    B,
    /// The node's own forward value.
    C,
    /// The node's adjoint.
    D,
    /// A literal, rounded to the kernel precision.
    Lit(f64),
    Neg(&'static Expr),
    Arith(Arith, &'static Expr, &'static Expr),
    Call(Fun, &'static Expr),
    /// `x^y` (the C library's `pow`; rules guard its domain themselves).
    Pow(&'static Expr, &'static Expr),
    /// A quiet NaN.
    Nan,
    /// `cond ? then : else`.
    Select(Cond, &'static Expr, &'static Expr),
    /// A chain factor (module doc): `x * y` or `x / y`, but 0 when a factor is 0 (x = 0; y = 0
    /// for `*`, y infinite for `/`), whatever the other.
    Chain(Factor, &'static Expr, &'static Expr),
}

/// The two chain factors (module doc): `x ⊙ y` and `x ⊘ y`.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Factor {
    Times,
    Over,
}

impl Factor {
    /// Is `x ⊙ y` (`x ⊘ y`) 0 by the strong zero? Every back end tests these same conditions.
    pub fn strong_zero<T: Real>(self, x: T, y: T) -> bool {
        let zero = T::of(0.0);
        x == zero
            || match self {
                Factor::Times => y == zero,
                Factor::Over => T::call(Fun::Abs, y) == T::of(f64::INFINITY),
            }
    }
}

/// `lhs cmp rhs`.
#[derive(Copy, Clone, PartialEq, Debug)]
pub struct Cond {
    pub cmp: Cmp,
    pub lhs: &'static Expr,
    pub rhs: &'static Expr,
}

/// Which argument an adjoint step feeds.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Arg {
    A,
    B,
}

impl Arg {
    /// The argument's position: 0 for `A`, 1 for `B`.
    pub fn index(self) -> usize {
        match self {
            Arg::A => 0,
            Arg::B => 1,
        }
    }
}

/// `d(arg) += expr`, or `-= expr` when `sub`; `expr` is linear in `D`.
#[derive(Copy, Clone, PartialEq, Debug)]
pub struct Acc {
    pub arg: Arg,
    pub sub: bool,
    pub expr: Expr,
}

/// One step of an adjoint rule.
#[derive(Copy, Clone, PartialEq, Debug)]
pub enum Step {
    Acc(Acc),
    /// `if cond { then } else { otherwise }` (a branch of `max`, `min`, `abs`).
    If(Cond, Acc, Option<&'static Step>),
}

/// An arithmetic op's rules: its value and its adjoint steps, in order.
#[derive(Copy, Clone, PartialEq, Debug)]
pub struct Rule {
    pub value: Expr,
    pub adjoint: &'static [Step],
}

impl Rule {
    /// Does the op pass a derivative to its arguments? (A node of an op that does not is
    /// constant as far as derivatives go: activity does not flow through it.)
    pub fn is_differentiable(&self) -> bool {
        !self.adjoint.is_empty()
    }

    /// Which of `A`, `B`, `C` the adjoint steps read when only the arguments `active` (`[a, b]`)
    /// receive adjoints: `(a, b, c)`. A step that feeds an inactive argument is never emitted, so
    /// its reads do not count (a branch's condition counts while any arm feeds an active
    /// argument). This is what the reverse sweep needs of the forward sweep.
    pub fn reads(&self, active: [bool; 2]) -> (bool, bool, bool) {
        let mut r = (false, false, false);
        for step in self.adjoint {
            step_reads(step, active, &mut r);
        }
        r
    }

    /// Calls `f` on every sub-expression of the value and the adjoint steps.
    pub fn visit(&self, f: &mut impl FnMut(&Expr)) {
        visit_expr(&self.value, f);
        for step in self.adjoint {
            visit_step(step, f);
        }
    }

    /// Every literal the rule uses (value and adjoint), so a back end can define them once.
    pub fn literals(&self, out: &mut Vec<f64>) {
        self.visit(&mut |e| {
            if let Expr::Lit(x) = *e {
                if !out.iter().any(|y| y.to_bits() == x.to_bits()) {
                    out.push(x)
                }
            }
        });
    }
}

fn visit_expr(e: &Expr, f: &mut impl FnMut(&Expr)) {
    f(e);
    match *e {
        Expr::A | Expr::B | Expr::C | Expr::D | Expr::Lit(_) | Expr::Nan => {}
        Expr::Neg(x) | Expr::Call(_, x) => visit_expr(x, f),
        Expr::Arith(_, x, y) | Expr::Chain(_, x, y) | Expr::Pow(x, y) => {
            visit_expr(x, f);
            visit_expr(y, f);
        }
        Expr::Select(c, x, y) => {
            visit_expr(c.lhs, f);
            visit_expr(c.rhs, f);
            visit_expr(x, f);
            visit_expr(y, f);
        }
    }
}

fn visit_step(step: &Step, f: &mut impl FnMut(&Expr)) {
    match step {
        Step::Acc(acc) => visit_expr(&acc.expr, f),
        Step::If(c, then, otherwise) => {
            visit_expr(c.lhs, f);
            visit_expr(c.rhs, f);
            visit_expr(&then.expr, f);
            if let Some(s) = otherwise {
                visit_step(s, f);
            }
        }
    }
}

/// Marks which of `A`, `B`, `C` the expression reads.
fn expr_reads(e: &Expr, r: &mut (bool, bool, bool)) {
    visit_expr(e, &mut |x| match x {
        Expr::A => r.0 = true,
        Expr::B => r.1 = true,
        Expr::C => r.2 = true,
        _ => {}
    });
}

/// Does `step` (or any arm of it) feed an argument in `active`?
fn step_feeds(step: &Step, active: [bool; 2]) -> bool {
    let feeds = |acc: &Acc| active[usize::from(acc.arg == Arg::B)];
    match step {
        Step::Acc(acc) => feeds(acc),
        Step::If(_, then, otherwise) => {
            feeds(then) || otherwise.is_some_and(|s| step_feeds(s, active))
        }
    }
}

fn step_reads(step: &Step, active: [bool; 2], r: &mut (bool, bool, bool)) {
    if !step_feeds(step, active) {
        return;
    }
    match step {
        Step::Acc(acc) => expr_reads(&acc.expr, r),
        Step::If(c, then, otherwise) => {
            expr_reads(c.lhs, r);
            expr_reads(c.rhs, r);
            if active[usize::from(then.arg == Arg::B)] {
                expr_reads(&then.expr, r);
            }
            if let Some(s) = otherwise {
                step_reads(s, active, r);
            }
        }
    }
}

// Short spellings for the table below.
const A: &Expr = &Expr::A;
const B: &Expr = &Expr::B;
const C: &Expr = &Expr::C;
const D: &Expr = &Expr::D;

const fn arith(op: Arith, x: &'static Expr, y: &'static Expr) -> Expr {
    Expr::Arith(op, x, y)
}
/// `x ⊙ y`, a chain factor's product.
const fn times(x: &'static Expr, y: &'static Expr) -> Expr {
    Expr::Chain(Factor::Times, x, y)
}
/// `x ⊘ y`, a chain factor's quotient.
const fn over(x: &'static Expr, y: &'static Expr) -> Expr {
    Expr::Chain(Factor::Over, x, y)
}
const fn acc(arg: Arg, expr: Expr) -> Acc {
    Acc {
        arg,
        sub: false,
        expr,
    }
}
const fn dec(arg: Arg, expr: Expr) -> Acc {
    Acc {
        arg,
        sub: true,
        expr,
    }
}
const fn cond(cmp: Cmp, lhs: &'static Expr, rhs: &'static Expr) -> Cond {
    Cond { cmp, lhs, rhs }
}

static ADD: Rule = Rule {
    value: arith(Arith::Add, A, B),
    adjoint: &[
        Step::Acc(acc(Arg::A, Expr::D)),
        Step::Acc(acc(Arg::B, Expr::D)),
    ],
};
static SUB: Rule = Rule {
    value: arith(Arith::Sub, A, B),
    adjoint: &[
        Step::Acc(acc(Arg::A, Expr::D)),
        Step::Acc(dec(Arg::B, Expr::D)),
    ],
};
static MUL: Rule = Rule {
    value: arith(Arith::Mul, A, B),
    adjoint: &[
        Step::Acc(acc(Arg::A, times(D, B))),
        Step::Acc(acc(Arg::B, times(D, A))),
    ],
};
static DIV: Rule = Rule {
    value: arith(Arith::Div, A, B),
    adjoint: &[
        Step::Acc(acc(Arg::A, over(D, B))),
        Step::Acc(dec(Arg::B, over(&times(D, C), B))),
    ],
};
/// `a CMP b ? a : b`, the whole adjoint to the argument chosen (ties to the first). A macro, not
/// a `const fn`: the adjoint's `&[...]` must be a static's own constant to live as long.
macro_rules! select {
    ($cmp:expr) => {
        Rule {
            value: Expr::Select(cond($cmp, A, B), A, B),
            adjoint: &[Step::If(
                cond($cmp, A, B),
                acc(Arg::A, Expr::D),
                Some(&Step::Acc(acc(Arg::B, Expr::D))),
            )],
        }
    };
}
static MAX: Rule = select!(Cmp::Ge);
static MIN: Rule = select!(Cmp::Le);
static NEG: Rule = Rule {
    value: Expr::Neg(A),
    adjoint: &[Step::Acc(dec(Arg::A, Expr::D))],
};
static EXP: Rule = Rule {
    value: Expr::Call(Fun::Exp, A),
    adjoint: &[Step::Acc(acc(Arg::A, times(D, C)))],
};
static LOG: Rule = Rule {
    value: Expr::Call(Fun::Log, A),
    adjoint: &[Step::Acc(acc(Arg::A, over(D, A)))],
};
static SQRT: Rule = Rule {
    value: Expr::Call(Fun::Sqrt, A),
    adjoint: &[Step::Acc(acc(
        Arg::A,
        over(&arith(Arith::Mul, D, &Expr::Lit(0.5)), C),
    ))],
};
static ABS: Rule = Rule {
    value: Expr::Call(Fun::Abs, A),
    adjoint: &[Step::If(
        cond(Cmp::Gt, A, &Expr::Lit(0.0)),
        acc(Arg::A, Expr::D),
        Some(&Step::If(
            cond(Cmp::Lt, A, &Expr::Lit(0.0)),
            dec(Arg::A, Expr::D),
            None,
        )),
    )],
};

/// `1 if a CMP b else 0`: no derivative (the indicator is flat wherever it is differentiable).
const fn indicator(cmp: Cmp) -> Rule {
    Rule {
        value: Expr::Select(cond(cmp, A, B), &Expr::Lit(1.0), &Expr::Lit(0.0)),
        adjoint: &[],
    }
}
static LT: Rule = indicator(Cmp::Lt);
static LE: Rule = indicator(Cmp::Le);
static GT: Rule = indicator(Cmp::Gt);
static GE: Rule = indicator(Cmp::Ge);
static POW: Rule = Rule {
    value: Expr::Select(
        cond(Cmp::Gt, A, &Expr::Lit(0.0)),
        &Expr::Pow(A, B),
        &Expr::Nan,
    ),
    adjoint: &[
        // d * b * a^(b - 1)
        Step::Acc(acc(
            Arg::A,
            times(
                &times(D, B),
                &Expr::Pow(A, &arith(Arith::Sub, B, &Expr::Lit(1.0))),
            ),
        )),
        // d * c * ln a
        Step::Acc(acc(Arg::B, times(&times(D, C), &Expr::Call(Fun::Log, A)))),
    ],
};
static TANH: Rule = Rule {
    value: Expr::Call(Fun::Tanh, A),
    // d * (1 - c * c)
    adjoint: &[Step::Acc(acc(
        Arg::A,
        times(
            D,
            &arith(Arith::Sub, &Expr::Lit(1.0), &arith(Arith::Mul, C, C)),
        ),
    ))],
};
/// sqrt(2).
const SQRT_2: f64 = std::f64::consts::SQRT_2;
/// sqrt(2 pi).
const SQRT_2PI: f64 = 2.5066282746310002;
static NCDF: Rule = Rule {
    // 0.5 * erfc(-a / sqrt 2)
    value: arith(
        Arith::Mul,
        &Expr::Lit(0.5),
        &Expr::Call(
            Fun::Erfc,
            &arith(Arith::Div, &Expr::Neg(A), &Expr::Lit(SQRT_2)),
        ),
    ),
    // d * exp(-0.5 * (a * a)) / sqrt(2 pi)
    adjoint: &[Step::Acc(acc(
        Arg::A,
        arith(
            Arith::Div,
            &times(
                D,
                &Expr::Call(
                    Fun::Exp,
                    &arith(Arith::Mul, &Expr::Lit(-0.5), &arith(Arith::Mul, A, A)),
                ),
            ),
            &Expr::Lit(SQRT_2PI),
        ),
    ))],
};

/// Forward mode's two forms of a tangent operand (`schedule`'s forward sweep): *absolute*, the
/// tangent t itself, or *relative*, a ρ with t = value · ρ. An exp's tangent is relative for free
/// (ρ = its argument's tangent), and products and quotients of relative tangents stay relative
/// (ρ's add), so a multiplicative chain (a GBM path: S_k = S_{k-1} · exp(x_k)) costs one add a
/// step and direction instead of a multiply and a fused multiply-add. No division ever makes a
/// relative tangent, so it is exact wherever the absolute one is (a zero value included).
#[derive(Copy, Clone, PartialEq, Debug)]
pub enum Relative {
    /// The node's relative tangent is argument `Arg`'s relative tangent, unchanged (`a · k`,
    /// `a / k`, `-a`, and `exp(a)` of an absolute one).
    PassOn(Arg),
    /// The node's relative tangent is this rule's tangent sum over the arguments' tangents.
    Rule(&'static Rule),
}

/// Do `op`'s tangent rules accept relative argument tangents ([`absolute_tangent`])? A node
/// whose every consumer does (and that is no output) may keep a relative tangent.
pub fn takes_relative(op: Op) -> bool {
    matches!(
        op,
        Op::Add | Op::Sub | Op::Mul | Op::Div | Op::Neg | Op::Exp
    )
}

/// The relative tangent of an `op` node whose arguments `has` a tangent in a direction, `rel`
/// telling which of them are relative; `None` where only an absolute one can be had without a
/// division (a sum, or a product with an absolute factor).
pub fn relative_tangent(op: Op, has: [bool; 2], rel: [bool; 2]) -> Option<Relative> {
    // Every argument with a tangent must be relative, except an exp's.
    let all_rel = (0..2).all(|k| !has[k] || rel[k]);
    Some(match op {
        Op::Exp if !rel[0] => Relative::PassOn(Arg::A),
        Op::Exp => Relative::Rule(&EXP_OF_RELATIVE),
        Op::Mul | Op::Div | Op::Neg if !all_rel => return None,
        Op::Mul | Op::Div | Op::Neg if has == [true, false] => Relative::PassOn(Arg::A),
        Op::Mul if has == [false, true] => Relative::PassOn(Arg::B),
        Op::Mul => Relative::Rule(&ADD),
        Op::Div if has == [false, true] => Relative::Rule(&DIV_OF_RELATIVE_DIVISOR),
        Op::Div => Relative::Rule(&SUB),
        _ => return None,
    })
}

/// The rule of an `op` node's absolute tangent when the arguments' tangents are relative where
/// `rel` says: `D` then stands for ρ, and each step's `D · x'` becomes `ρ · x · x'` simplified
/// (a product's or quotient's `ρ_a · A · B` is `ρ_a · C`). `op` must [`takes_relative`] if any is.
pub fn absolute_tangent(op: Op, rel: [bool; 2]) -> Option<&'static Rule> {
    let i = usize::from(rel[0]) + 2 * usize::from(rel[1]);
    Some(match (op, i) {
        (_, 0) => return rule(op),
        (Op::Add, _) => ADD_OF_RELATIVE[i - 1],
        (Op::Sub, _) => SUB_OF_RELATIVE[i - 1],
        (Op::Mul, _) => MUL_OF_RELATIVE[i - 1],
        (Op::Div, _) => DIV_OF_RELATIVE[i - 1],
        (Op::Exp, 1) => &EXP_ABSOLUTE_OF_RELATIVE,
        (Op::Neg, 1) => &NEG_ABSOLUTE_OF_RELATIVE,
        _ => return None,
    })
}

/// Every rule [`relative_tangent`] and [`absolute_tangent`] can give besides an op's own (the
/// corpus case `relative` makes forward mode run each of them).
pub fn relative_rules() -> Vec<&'static Rule> {
    let mut all: Vec<&'static Rule> = vec![
        &ADD,
        &SUB,
        &EXP_OF_RELATIVE,
        &DIV_OF_RELATIVE_DIVISOR,
        &EXP_ABSOLUTE_OF_RELATIVE,
        &NEG_ABSOLUTE_OF_RELATIVE,
    ];
    for table in [
        &ADD_OF_RELATIVE,
        &SUB_OF_RELATIVE,
        &MUL_OF_RELATIVE,
        &DIV_OF_RELATIVE,
    ] {
        all.extend(table.iter().copied());
    }
    all
}

/// `ρ_x · A · C`: exp's absolute tangent of a relative argument tangent.
static EXP_ABSOLUTE_OF_RELATIVE: Rule = Rule {
    value: Expr::Call(Fun::Exp, A),
    adjoint: &[Step::Acc(acc(Arg::A, times(&times(D, A), C)))],
};
/// `ρ_x · A`: exp's relative tangent of a relative argument tangent (its absolute one).
static EXP_OF_RELATIVE: Rule = Rule {
    value: Expr::Call(Fun::Exp, A),
    adjoint: &[Step::Acc(acc(Arg::A, times(D, A)))],
};
/// `k / b`'s relative tangent, `-ρ_b` (`k` without a tangent).
static DIV_OF_RELATIVE_DIVISOR: Rule = Rule {
    value: arith(Arith::Div, A, B),
    adjoint: &[Step::Acc(dec(Arg::B, Expr::D))],
};
/// `-(ρ · A)` is `ρ · C`.
static NEG_ABSOLUTE_OF_RELATIVE: Rule = Rule {
    value: Expr::Neg(A),
    adjoint: &[Step::Acc(acc(Arg::A, times(D, C)))],
};
// `absolute_tangent`'s rules for A relative, B relative, both.
static ADD_OF_RELATIVE: [&Rule; 3] = [&ADD_RA, &ADD_RB, &ADD_RR];
static ADD_RA: Rule = Rule {
    value: arith(Arith::Add, A, B),
    adjoint: &[
        Step::Acc(acc(Arg::A, times(D, A))),
        Step::Acc(acc(Arg::B, Expr::D)),
    ],
};
static ADD_RB: Rule = Rule {
    value: arith(Arith::Add, A, B),
    adjoint: &[
        Step::Acc(acc(Arg::A, Expr::D)),
        Step::Acc(acc(Arg::B, times(D, B))),
    ],
};
static ADD_RR: Rule = Rule {
    value: arith(Arith::Add, A, B),
    adjoint: &[
        Step::Acc(acc(Arg::A, times(D, A))),
        Step::Acc(acc(Arg::B, times(D, B))),
    ],
};
static SUB_OF_RELATIVE: [&Rule; 3] = [&SUB_RA, &SUB_RB, &SUB_RR];
static SUB_RA: Rule = Rule {
    value: arith(Arith::Sub, A, B),
    adjoint: &[
        Step::Acc(acc(Arg::A, times(D, A))),
        Step::Acc(dec(Arg::B, Expr::D)),
    ],
};
static SUB_RB: Rule = Rule {
    value: arith(Arith::Sub, A, B),
    adjoint: &[
        Step::Acc(acc(Arg::A, Expr::D)),
        Step::Acc(dec(Arg::B, times(D, B))),
    ],
};
static SUB_RR: Rule = Rule {
    value: arith(Arith::Sub, A, B),
    adjoint: &[
        Step::Acc(acc(Arg::A, times(D, A))),
        Step::Acc(dec(Arg::B, times(D, B))),
    ],
};
static MUL_OF_RELATIVE: [&Rule; 3] = [&MUL_RA, &MUL_RB, &MUL_RR];
static MUL_RA: Rule = Rule {
    value: arith(Arith::Mul, A, B),
    adjoint: &[
        Step::Acc(acc(Arg::A, times(D, C))),
        Step::Acc(acc(Arg::B, times(D, A))),
    ],
};
static MUL_RB: Rule = Rule {
    value: arith(Arith::Mul, A, B),
    adjoint: &[
        Step::Acc(acc(Arg::A, times(D, B))),
        Step::Acc(acc(Arg::B, times(D, C))),
    ],
};
static MUL_RR: Rule = Rule {
    value: arith(Arith::Mul, A, B),
    adjoint: &[
        Step::Acc(acc(Arg::A, times(D, C))),
        Step::Acc(acc(Arg::B, times(D, C))),
    ],
};
static DIV_OF_RELATIVE: [&Rule; 3] = [&DIV_RA, &DIV_RB, &DIV_RR];
static DIV_RA: Rule = Rule {
    value: arith(Arith::Div, A, B),
    adjoint: &[
        Step::Acc(acc(Arg::A, times(D, C))),
        Step::Acc(dec(Arg::B, over(&times(D, C), B))),
    ],
};
static DIV_RB: Rule = Rule {
    value: arith(Arith::Div, A, B),
    adjoint: &[
        Step::Acc(acc(Arg::A, over(D, B))),
        Step::Acc(dec(Arg::B, times(D, C))),
    ],
};
static DIV_RR: Rule = Rule {
    value: arith(Arith::Div, A, B),
    adjoint: &[
        Step::Acc(acc(Arg::A, times(D, C))),
        Step::Acc(dec(Arg::B, times(D, C))),
    ],
};

/// The rules of an arithmetic op; `None` for the leaves (`input`, `const`, `normal`,
/// `uniform`), whose values each back end loads or draws itself.
pub fn rule(op: Op) -> Option<&'static Rule> {
    Some(match op {
        Op::Input | Op::Const | Op::Normal | Op::Uniform => return None,
        Op::Add => &ADD,
        Op::Sub => &SUB,
        Op::Mul => &MUL,
        Op::Div => &DIV,
        Op::Max => &MAX,
        Op::Min => &MIN,
        Op::Neg => &NEG,
        Op::Exp => &EXP,
        Op::Log => &LOG,
        Op::Sqrt => &SQRT,
        Op::Abs => &ABS,
        Op::Lt => &LT,
        Op::Le => &LE,
        Op::Gt => &GT,
        Op::Ge => &GE,
        Op::Pow => &POW,
        Op::Tanh => &TANH,
        Op::Ncdf => &NCDF,
    })
}

/// The value of `e` given the operands (`D` included), in precision `T`; what the reference
/// computes.
pub fn eval<T: Real>(e: &Expr, x: &Operands<T>) -> T {
    eval_watching(e, x, &mut |_, _, _| {})
}

/// [`eval`], calling `chain(y, z, result)` on every chain factor `y ⊙ z` or `y ⊘ z` it
/// evaluates: how a test sees a product along the chain rule round (under- or overflow), the
/// one way besides cancelling infinities that forward and reverse mode can disagree about a
/// path's finiteness (TAPE-FORMAT.md).
pub fn eval_watching<T: Real, W: FnMut(T, T, T)>(e: &Expr, x: &Operands<T>, chain: &mut W) -> T {
    match *e {
        Expr::A => x.a,
        Expr::B => x.b,
        Expr::C => x.c,
        Expr::D => x.d,
        Expr::Lit(v) => T::of(v),
        Expr::Neg(y) => -eval_watching(y, x, chain),
        Expr::Arith(op, y, z) => {
            let (y, z) = (eval_watching(y, x, chain), eval_watching(z, x, chain));
            match op {
                Arith::Add => y + z,
                Arith::Sub => y - z,
                Arith::Mul => y * z,
                Arith::Div => y / z,
            }
        }
        Expr::Chain(f, y, z) => {
            let (y, z) = (eval_watching(y, x, chain), eval_watching(z, x, chain));
            let result = match f {
                _ if f.strong_zero(y, z) => T::of(0.0),
                Factor::Times => y * z,
                Factor::Over => y / z,
            };
            chain(y, z, result);
            result
        }
        Expr::Call(f, y) => T::call(f, eval_watching(y, x, chain)),
        Expr::Pow(y, z) => eval_watching(y, x, chain).pow(eval_watching(z, x, chain)),
        Expr::Nan => T::of(f64::NAN),
        Expr::Select(c, y, z) => {
            if eval_cond(&c, x) {
                eval_watching(y, x, chain)
            } else {
                eval_watching(z, x, chain)
            }
        }
    }
}

/// The truth of `c` given the operands.
pub fn eval_cond<T: Real>(c: &Cond, x: &Operands<T>) -> bool {
    let (l, r) = (eval(c.lhs, x), eval(c.rhs, x));
    match c.cmp {
        Cmp::Lt => l < r,
        Cmp::Le => l <= r,
        Cmp::Gt => l > r,
        Cmp::Ge => l >= r,
    }
}

/// The operand values an evaluation reads (unused ones may be anything).
#[derive(Copy, Clone, Debug)]
pub struct Operands<T> {
    pub a: T,
    pub b: T,
    pub c: T,
    pub d: T,
}

/// Applies `step`: `add(arg, sub, delta)` for the contribution that applies, if any.
pub fn eval_step<T: Real>(step: &Step, x: &Operands<T>, add: &mut impl FnMut(Arg, bool, T)) {
    eval_step_watching(step, x, add, &mut |_, _, _| {})
}

/// [`eval_step`], watching its chain factors as [`eval_watching`] does.
pub fn eval_step_watching<T: Real, W: FnMut(T, T, T)>(
    step: &Step,
    x: &Operands<T>,
    add: &mut impl FnMut(Arg, bool, T),
    chain: &mut W,
) {
    match step {
        Step::Acc(acc) => add(acc.arg, acc.sub, eval_watching(&acc.expr, x, chain)),
        Step::If(c, then, otherwise) => {
            if eval_cond(c, x) {
                eval_step_watching(&Step::Acc(*then), x, add, chain)
            } else if let Some(s) = otherwise {
                eval_step_watching(s, x, add, chain)
            }
        }
    }
}

//! The C-like printer: one line (or a few) of CUDA, OpenCL or GLSL per statement of the kernel's
//! schedule (`crate::schedule`), the per-path body the skeleton wraps.
//!
//! The printer decides spelling only: what runs, in which order and scope, with which operands,
//! is the schedule's. Names come from dense ids: `v12` a forward value, `r12` a reverse block's
//! opaque copy, `d12` an adjoint (`d12_1` in lane 1 when the kernel has several lanes).
//! Constants are literals at every use. Rule expressions print with the fewest parentheses that
//! keep the tree's evaluation order (`crate::ops`).

use super::dialect::{real, Dialect, MathFn};
use super::manifest::Precision;
use super::ScratchLayout;
use crate::ops::{Acc, Arith, Cond, Expr, Factor, Fun, Step};
use crate::schedule::{
    self, Adjoint, Class, Def, Grad, Key, Leaf, Operand, Schedule, Slot, Stmt, Tangent, Var,
};
use crate::tape::{DrawKind, NodeId, Tape};
use rustc_hash::FxHashMap as HashMap;

/// Everything the printer reads.
pub(super) struct Body<'a> {
    pub tape: &'a Tape,
    pub schedule: &'a Schedule,
    pub d: Dialect,
    pub p: Precision,
    pub annotate: bool,
    /// The scratch buffer's layout (scratch strategy only).
    pub layout: ScratchLayout,
    /// The 64-bit index type of the scratch address (C dialects only).
    pub index64: &'static str,
    /// Tangent definitions printed inside their one reader (`schedule::fused_products`).
    pub fused: HashMap<Var, Tangent>,
    /// The first iteration of the loop being printed (its bookmarks are indexed from it).
    pub loop_first: std::cell::Cell<u32>,
}

/// Lines of source with an indentation level.
struct Out {
    lines: Vec<String>,
    indent: usize,
}

impl Out {
    fn line(&mut self, text: impl AsRef<str>) {
        self.lines
            .push(format!("{}{}", "    ".repeat(self.indent), text.as_ref()));
    }
    fn open(&mut self, text: impl AsRef<str>) {
        self.line(text);
        self.indent += 1;
    }
    fn close(&mut self) {
        self.indent -= 1;
        self.line("}");
    }
}

impl<'a> Body<'a> {
    /// The type of a declared value or adjoint: the precision's, `precise` in GLSL (see
    /// `Dialect::precise`).
    fn decl_type(&self) -> String {
        format!("{}{}", self.d.precise, real(self.p))
    }

    fn lit(&self, x: f64) -> String {
        self.d.literal(x, self.p)
    }

    /// `{prefix}N`, or `{prefix}N_l` in lane l of a kernel with several lanes.
    fn laned(&self, prefix: &str, n: NodeId, lane: usize) -> String {
        if self.schedule.lanes == 1 {
            format!("{prefix}{}", n.0)
        } else {
            format!("{prefix}{}_{lane}", n.0)
        }
    }

    fn var(&self, v: Var) -> String {
        match v {
            Var::Value(n) => format!("v{}", n.0),
            Var::Copy(n) => format!("r{}", n.0),
            Var::Tangent(n, l) => self.laned("t", n, l),
            Var::Carried(n) => format!("c{}", n.0),
            Var::CarriedTangent(n, l) => self.laned("u", n, l),
        }
    }

    fn operand(&self, x: Operand) -> String {
        match x {
            Operand::Lit(v) => self.lit(v),
            Operand::Var(v) => self.var(v),
        }
    }

    /// The adjoint of `v` in lane `o`.
    fn dname(&self, v: NodeId, o: usize) -> String {
        self.gname(Grad::Of(v), o)
    }

    /// Adjoint `g` in lane `o`: `dN` (`dN_o`), a previous iteration's `eN` (`eN_o`).
    fn gname(&self, g: Grad, o: usize) -> String {
        match g {
            Grad::Of(v) => self.laned("d", v, o),
            Grad::Prev(v) => self.laned("e", v, o),
        }
    }

    /// Where `slot` lives, spelled per storage class (`schedule::storage`): the scratch
    /// buffer's address in its layout, or the local array's entry for the current iteration of
    /// the enclosing loop.
    fn place(&self, slot: Slot) -> String {
        match slot.class {
            Class::Scratch => self.scratch_at(slot.index),
            Class::Local => match (slot.index, self.loop_first.get()) {
                (at, 0) => format!("bm[{at}u + it]"),
                (at, first) => format!("bm[{at}u + (it - {first}u)]"),
            },
        }
    }

    /// A scalar kernel parameter as the body reads it.
    fn param(&self, name: &str) -> String {
        format!("{}{}", self.d.param, name)
    }

    fn note(&self, text: String, v: NodeId) -> String {
        if self.annotate {
            format!("{text} // {}", schedule::describe(self.tape, v))
        } else {
            text
        }
    }

    /// The right-hand side of a definition.
    fn def(&self, def: &Def) -> String {
        match *def {
            Def::Input(i) => format!("inputs[{i}]"),
            Def::Draw {
                kind,
                index,
                stride,
                key,
            } => {
                let f = match kind {
                    DrawKind::Normal => "draw_normal",
                    DrawKind::Uniform => "draw_uniform",
                };
                let (k0, k1) = match key {
                    Key::Kernel => ("key0", "key1"),
                    Key::Rekeyed => ("rk0", "rk1"),
                };
                let k = match stride {
                    0 => format!("{index}u"),
                    1 => format!("{index}u + it"),
                    s => format!("{index}u + {s}u * it"),
                };
                format!("{f}({k}, plo, phi, {k0}, {k1})")
            }
            Def::Rule { rule, args } => {
                let t = |x: Option<Operand>| x.map(|x| self.operand(x)).unwrap_or_default();
                let x = [t(args[0]), t(args[1]), String::new(), String::new()];
                self.expr(&rule.value, &x).0
            }
        }
    }

    /// The C text of a rule expression over operand texts `x` ([A, B, C, D]), with its
    /// precedence (0 select, 1 additive, 2 multiplicative, 3 unary, 4 primary); parentheses only
    /// where C needs them, so the tree's evaluation order is the text's.
    fn expr(&self, e: &Expr, x: &[String; 4]) -> (String, u8) {
        match *e {
            Expr::A => (x[0].clone(), 4),
            Expr::B => (x[1].clone(), 4),
            Expr::C => (x[2].clone(), 4),
            Expr::D => (x[3].clone(), 4),
            Expr::Lit(v) => (self.lit(v), 4),
            Expr::Neg(y) => {
                let (t, p) = self.expr(y, x);
                if p < 3 || t.starts_with('-') {
                    (format!("-({t})"), 3)
                } else {
                    (format!("-{t}"), 3)
                }
            }
            Expr::Arith(op, y, z) => {
                let prec = match op {
                    Arith::Add | Arith::Sub => 1,
                    Arith::Mul | Arith::Div => 2,
                };
                let (l, lp) = self.expr(y, x);
                let (r, rp) = self.expr(z, x);
                let l = if lp < prec { format!("({l})") } else { l };
                let r = if rp <= prec { format!("({r})") } else { r };
                (format!("{l} {} {r}", op.symbol()), prec)
            }
            Expr::Chain(f, y, z) => {
                let name = match f {
                    Factor::Times => "chain_mul",
                    Factor::Over => "chain_div",
                };
                let (y, z) = (self.expr(y, x).0, self.expr(z, x).0);
                (format!("{name}({y}, {z})"), 4)
            }
            Expr::Call(f, y) => {
                let opaque = self.schedule.opaque_call(Some(f));
                (self.d.call(f, self.p, &self.expr(y, x).0, opaque), 4)
            }
            Expr::Pow(y, z) => {
                let (y, z) = (self.expr(y, x).0, self.expr(z, x).0);
                (
                    self.d.pow(self.p, &y, &z, self.schedule.opaque_call(None)),
                    4,
                )
            }
            Expr::Nan => (self.d.nan(self.p).to_string(), 4),
            Expr::Select(c, y, z) => {
                let paren = |(t, p): (String, u8)| if p == 0 { format!("({t})") } else { t };
                let (y, z) = (paren(self.expr(y, x)), paren(self.expr(z, x)));
                (format!("({}) ? {y} : {z}", self.cond(&c, x)), 0)
            }
        }
    }

    /// `lhs OP rhs` of a rule condition.
    fn cond(&self, c: &Cond, x: &[String; 4]) -> String {
        let side = |e: &Expr| {
            let (t, p) = self.expr(e, x);
            if p < 3 {
                format!("({t})")
            } else {
                t
            }
        };
        format!("{} {} {}", side(c.lhs), c.cmp.symbol(), side(c.rhs))
    }

    /// One adjoint step as a statement, or `None` when it feeds no adjoint.
    fn step(&self, step: &Step, adj: &Adjoint, x: &[String; 4]) -> Option<String> {
        let acc = |acc: &Acc| {
            let to = adj.to[acc.arg.index()];
            to.map(|arg| {
                let sign = if acc.sub { '-' } else { '+' };
                let e = self.expr(&acc.expr, x).0;
                format!("{} {sign}= {e};", self.gname(arg, adj.lane))
            })
        };
        match step {
            Step::Acc(a) => acc(a),
            Step::If(c, then, otherwise) => {
                let c = self.cond(c, x);
                let other = otherwise.and_then(|s| self.step(s, adj, x));
                match (acc(then), other) {
                    (Some(t), Some(e)) => Some(format!("if ({c}) {t} else {e}")),
                    (Some(t), None) => Some(format!("if ({c}) {t}")),
                    (None, Some(e)) => Some(format!("if (!({c})) {e}")),
                    (None, None) => None,
                }
            }
        }
    }

    /// One adjoint step of a tangent definition as a term of its sum (`schedule::Tangent`), or
    /// `None` when it contributes nothing.
    fn tangent_term(&self, step: &Step, t: &Tangent, x: &[String; 4]) -> Option<Term> {
        let acc = |acc: &Acc| {
            let d = t.from[acc.arg.index()]?;
            if let (Expr::D, Operand::Var(v)) = (acc.expr, d) {
                if let Some(product) = self.fused.get(&v) {
                    let mut term = self.tangent_terms(product).pop()?;
                    term.sub ^= acc.sub;
                    return Some(term);
                }
            }
            let x = [x[0].clone(), x[1].clone(), x[2].clone(), self.operand(d)];
            let (text, prec) = self.expr(&acc.expr, &x);
            let factors = match acc.expr {
                Expr::Arith(Arith::Mul, y, z) | Expr::Chain(Factor::Times, y, z) => Some(Factors {
                    y: self.expr(y, &x),
                    z: self.expr(z, &x).0,
                    chain: matches!(acc.expr, Expr::Chain(..)),
                }),
                _ => None,
            };
            Some(Term {
                text,
                prec,
                sub: acc.sub,
                factors,
            })
        };
        match step {
            Step::Acc(a) => acc(a),
            Step::If(c, then, otherwise) => {
                let then = acc(then);
                let other = otherwise.and_then(|s| self.tangent_term(s, t, x));
                if then.is_none() && other.is_none() {
                    return None;
                }
                let arm = |term: Option<Term>| match term {
                    None => self.lit(0.0),
                    Some(t) if t.sub => negate(&t.text, t.prec),
                    Some(t) if t.prec == 0 => format!("({})", t.text),
                    Some(t) => t.text,
                };
                let c = self.cond(c, x);
                Some(Term {
                    text: format!("({c}) ? {} : {}", arm(then), arm(other)),
                    prec: 0,
                    sub: false,
                    factors: None,
                })
            }
        }
    }

    /// The terms of a tangent definition's sum, in step order.
    fn tangent_terms(&self, t: &Tangent) -> Vec<Term> {
        let op = |x: Option<Operand>| x.map(|x| self.operand(x)).unwrap_or_default();
        let x = [op(t.x[0]), op(t.x[1]), op(t.x[2]), String::new()];
        t.rule
            .adjoint
            .iter()
            .filter_map(|step| self.tangent_term(step, t, &x))
            .collect()
    }

    /// The right-hand side of a tangent definition: its terms summed in step order, each product
    /// after the first term added by one fused multiply-add (`fma(x, y, sum)`, one rounding:
    /// tangents are not compared bit for bit with any other kernel, only run with run, and the
    /// fused form is the cheaper and the more accurate). A sum whose first term is a product and
    /// whose second is not starts from the second (addition commutes).
    fn tangent(&self, t: &Tangent) -> String {
        let mut terms = self.tangent_terms(t);
        if terms.len() == 2 && terms[0].factors.is_some() && terms[1].factors.is_none() {
            terms.swap(0, 1);
        }
        let fma = self.d.math(MathFn::Fma, self.p);
        let mut sum: Option<String> = None;
        for term in terms {
            sum = Some(match (sum, term.factors) {
                (None, _) if term.sub => negate(&term.text, term.prec),
                (None, _) => term.text,
                (Some(acc), Some(f)) => {
                    let (y, yp) = f.y;
                    let y = if term.sub { negate(&y, yp) } else { y };
                    let fma = if f.chain { "chain_fma" } else { fma };
                    format!("{fma}({y}, {}, {acc})", f.z)
                }
                (Some(acc), None) => {
                    let rhs = if term.prec <= 1 {
                        format!("({})", term.text)
                    } else {
                        term.text
                    };
                    format!("{acc} {} {rhs}", if term.sub { '-' } else { '+' })
                }
            });
        }
        sum.unwrap_or_else(|| self.lit(0.0))
    }

    /// The scratch address of `slot` (C dialects).
    fn scratch_at(&self, slot: u32) -> String {
        let i64t = self.index64;
        match self.layout {
            ScratchLayout::Soa => format!(
                "scratch[({i64t}){slot}u * {} + gid]",
                self.param("invocations")
            ),
            ScratchLayout::Aos => format!(
                "scratch[({i64t})gid * {}u + {slot}u]",
                self.schedule.storage.scratch
            ),
        }
    }

    fn stmts(&self, out: &mut Out, stmts: &[Stmt]) {
        for s in stmts {
            self.stmt(out, s);
        }
    }

    fn stmt(&self, out: &mut Out, s: &Stmt) {
        match s {
            Stmt::Note(text) => out.line(format!("// {text}")),
            Stmt::Declare(values) => {
                for chunk in values.chunks(8) {
                    let decls: Vec<String> = chunk
                        .iter()
                        .map(|v| format!("{} v{};", self.decl_type(), v.0))
                        .collect();
                    out.line(decls.join(" "));
                }
            }
            Stmt::Define { node, def, declare } => {
                let ty = if *declare {
                    format!("{} ", self.decl_type())
                } else {
                    String::new()
                };
                let line = format!("{ty}v{} = {};", node.0, self.def(def));
                out.line(self.note(line, *node));
            }
            Stmt::Store { var, slot } => {
                let line = format!("{} = {};", self.place(*slot), self.var(*var));
                match var.straight_node() {
                    Some(node) => out.line(self.note(line, node)),
                    None => out.line(line),
                }
            }
            Stmt::Rekey => {
                let zero = self.param("zero");
                out.line(format!(
                    "{u} rk0 = key0 ^ {zero}; {u} rk1 = key1 ^ {zero};",
                    u = self.d.uint
                ));
            }
            Stmt::OpaqueRead { node, from } => {
                let src = match from {
                    Some(slot) => self.place(*slot),
                    None => format!("v{}", node.0),
                };
                let line = format!(
                    "{} r{} = {};",
                    self.decl_type(),
                    node.0,
                    self.d.opaque(&src)
                );
                out.line(self.note(line, *node));
            }
            Stmt::DeclareAdjoints { grad, lanes } => {
                let zero = self.lit(0.0);
                let decls: Vec<String> = lanes
                    .iter()
                    .map(|&o| format!("{} {} = {zero};", self.decl_type(), self.gname(*grad, o)))
                    .collect();
                out.line(decls.join(" "));
            }
            Stmt::MoveAdjoint { to, from, lane } => {
                out.line(format!(
                    "{} = {};",
                    self.gname(*to, *lane),
                    self.gname(*from, *lane)
                ));
            }
            Stmt::Seed { node, lane } => {
                out.line(format!("{} = {};", self.dname(*node, *lane), self.lit(1.0)));
            }
            Stmt::Adjoint(adj) => {
                let t = |x: Option<Operand>| x.map(|x| self.operand(x)).unwrap_or_default();
                let x = [
                    t(adj.x[0]),
                    t(adj.x[1]),
                    t(adj.x[2]),
                    self.dname(adj.node, adj.lane),
                ];
                for step in adj.rule.adjoint {
                    if let Some(line) = self.step(step, adj, &x) {
                        out.line(self.note(line, adj.node));
                    }
                }
            }
            Stmt::Tangent(t) if self.fused.contains_key(&Var::Tangent(t.node, t.lane)) => {}
            Stmt::Tangent(t) => {
                let name = self.var(Var::Tangent(t.node, t.lane));
                let line = format!("{} {name} = {};", self.decl_type(), self.tangent(t));
                out.line(self.note(line, t.node));
            }
            Stmt::Block(b) => {
                out.open(format!("{{ // {}", b.note));
                self.stmts(out, &b.body);
                out.close();
            }
            Stmt::Loop(l) => {
                out.line(format!("// {}", l.note()));
                let inits: Vec<String> = l
                    .carried
                    .iter()
                    .map(|c| {
                        format!(
                            "{} {} = {};",
                            self.decl_type(),
                            self.var(c.var),
                            self.operand(c.init)
                        )
                    })
                    .collect();
                for chunk in inits.chunks(4) {
                    out.line(chunk.join(" "));
                }
                let u = self.d.uint;
                out.open(if l.reverse {
                    format!(
                        "for ({u} it = {}u; it-- > {}u;) {{",
                        l.first + l.count,
                        l.first
                    )
                } else {
                    format!(
                        "for ({u} it = {}u; it < {}u; it++) {{",
                        l.first,
                        l.first + l.count
                    )
                });
                let outer = self.loop_first.replace(l.first);
                self.stmts(out, &l.body);
                self.loop_first.set(outer);
                let next: Vec<String> = l
                    .carried
                    .iter()
                    .map(|c| format!("{} = {};", self.var(c.var), self.operand(c.next)))
                    .collect();
                for chunk in next.chunks(4) {
                    out.line(chunk.join(" "));
                }
                out.close();
            }
            Stmt::Leaves(leaves) => {
                // The skeleton's accumulators start at zero, so a zero leaf needs no line.
                let zero = self.d.literal(0.0, Precision::F64);
                for (s, leaf) in leaves.iter().enumerate() {
                    match *leaf {
                        Leaf::Value(x) => out.line(format!(
                            "acc{s} = {};",
                            self.d.cast("double", &self.operand(x))
                        )),
                        Leaf::Square { of, shift } => {
                            out.line(format!(
                                "acc{s} = acc{of} - {};",
                                self.d.cast("double", &format!("inputs[{shift}]"))
                            ));
                            out.line(format!("acc{s} = acc{s} * acc{s};"));
                        }
                        Leaf::Adjoint(v, o) => out.line(format!(
                            "acc{s} = {};",
                            self.d.cast("double", &self.dname(v, o))
                        )),
                        Leaf::Zero => {}
                        Leaf::NonFinite { first, end } => {
                            let checked: Vec<String> = (first..end)
                                .filter(|&j| {
                                    matches!(leaves[j], Leaf::Value(_) | Leaf::Adjoint(..))
                                })
                                .map(|j| self.d.finite(&format!("acc{j}")))
                                .collect();
                            let one = self.d.literal(1.0, Precision::F64);
                            out.line(format!(
                                "acc{s} = ({}) ? {zero} : {one};",
                                checked.join(" && ")
                            ));
                            out.open(format!("if (acc{s} != {zero}) {{"));
                            for j in (first..end).filter(|&j| leaves[j] != Leaf::Zero) {
                                out.line(format!("acc{j} = {zero};"));
                            }
                            out.close();
                        }
                    }
                }
            }
        }
    }

    /// Renders the body (run only by threads whose path is below `paths`) at indentation `indent`.
    pub fn render(&self, indent: usize) -> String {
        let mut out = Out {
            lines: Vec::new(),
            indent,
        };
        let local = self.schedule.storage.local;
        if local > 0 {
            out.line(format!("{} bm[{local}];", self.decl_type()));
        }
        self.stmts(&mut out, &self.schedule.body);
        out.lines.join("\n")
    }

    /// The math functions the kernel's rules call (in `MathFn` order, each once).
    pub fn math_used(&self) -> Vec<MathFn> {
        let funs = [
            Fun::Exp,
            Fun::Log,
            Fun::Sqrt,
            Fun::Abs,
            Fun::Tanh,
            Fun::Erfc,
        ];
        let mut used: Vec<MathFn> = funs
            .into_iter()
            .filter(|&f| self.schedule.calls(Some(f)))
            .map(MathFn::of)
            .collect();
        if self.schedule.calls(None) {
            used.push(MathFn::Pow);
        }
        used
    }
}

/// One term of a tangent sum: its text and precedence, whether it is subtracted, and its two
/// factors (the first with its precedence) when it is a product.
struct Term {
    text: String,
    prec: u8,
    sub: bool,
    factors: Option<Factors>,
}

/// A product term's factors: the first with its precedence, and whether it is a chain factor
/// (`chain_fma` then fuses it, `fma` otherwise).
struct Factors {
    y: (String, u8),
    z: String,
    chain: bool,
}

/// `-e` for a term of precedence `p` (parenthesized unless it is primary and not already negative).
fn negate(e: &str, p: u8) -> String {
    if p < 3 || e.starts_with('-') {
        format!("-({e})")
    } else {
        format!("-{e}")
    }
}

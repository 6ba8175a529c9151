//! The straight-line body: forward lines, adjoint lines, segment blocks and the per-path leaves.
//!
//! Everything here materializes the plan (`crate::plan::Plan`) and nothing re-derives it: which
//! nodes exist (`activity.live`), which carry adjoints (`activity.active`), the segments, the
//! persistent values, the opaque reads, the re-keyed blocks and the scratch slots are read from
//! the plan as they are. Names come from dense ids only: `v12` a forward value, `d12` its adjoint
//! (`d12_1` for output 1's adjoint when the tape has several outputs), `r12` the opaque copy of a
//! persistent value inside a reverse block. Constants are literals at every use.
//!
//! Several outputs share one reverse sweep that carries a vector of adjoints, one lane per output
//! (so a checkpointed kernel recomputes each segment once, not once per output). Lane o runs the
//! adjoint rules of output o's backward cone only, exactly the nodes the reference's reverse sweep
//! for that output visits, so a non-finite value outside the cone never reaches its Greeks.

use super::dialect::{real, Dialect, MathFn};
use super::manifest::{Mode, Precision};
use super::ScratchLayout;
use crate::ops::{self, Acc, Arg, Arith, Cond, Expr, Step};
use crate::plan::Plan;
use crate::tape::{DrawKind, Node, NodeId, Tape};
use crate::verify::TapeInfo;
use std::collections::BTreeSet;

/// Where the scratch slots live, for the scratch strategy.
pub(super) struct Scratch {
    /// `slot_of[node]`: the scratch slot of a node, if it has one.
    pub slot_of: Vec<Option<u32>>,
    pub slots: u32,
    pub layout: ScratchLayout,
}

/// Everything the body renderer reads.
pub(super) struct Body<'a> {
    pub tape: &'a Tape,
    pub plan: &'a Plan,
    pub d: Dialect,
    pub p: Precision,
    pub mode: Mode,
    pub annotate: bool,
    pub scratch: Option<Scratch>,
    /// The 64-bit index type of the scratch address (C dialects only).
    pub index64: &'static str,
    /// The verifier's facts: each output's backward cone, the input nodes.
    pub info: &'a TapeInfo,
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
    fn live(&self, v: NodeId) -> bool {
        self.plan.activity.live[v.index()]
    }

    fn active(&self, v: NodeId) -> bool {
        self.plan.activity.active[v.index()] && self.live(v)
    }

    fn is_const(&self, v: NodeId) -> bool {
        matches!(self.tape.node(v), Node::Const(_))
    }

    fn is_persistent(&self, v: NodeId) -> bool {
        self.plan.segments.persistent.binary_search(&v).is_ok()
    }

    /// Does the kernel carry values across segment blocks (a checkpointed reverse kernel)?
    pub fn checkpointed(&self) -> bool {
        self.mode == Mode::Reverse && self.plan.segments.is_checkpointed()
    }

    fn lanes(&self) -> usize {
        self.tape.outputs.len()
    }

    /// Does `v` carry an adjoint in lane `o` (active, and in output o's differentiable cone)?
    fn in_lane(&self, v: NodeId, o: usize) -> bool {
        self.active(v) && self.info.cones.get(o).is_none_or(|cone| cone[v.index()])
    }

    /// The type of a declared value or adjoint: the precision's, `precise` in GLSL (see
    /// `Dialect::precise`).
    fn decl_type(&self) -> String {
        format!("{}{}", self.d.precise, real(self.p))
    }

    fn lit(&self, x: f64) -> String {
        self.d.literal(x, self.p)
    }

    /// The adjoint of `v` in lane `o`.
    fn dname(&self, v: NodeId, o: usize) -> String {
        if self.lanes() == 1 {
            format!("d{}", v.0)
        } else {
            format!("d{}_{}", v.0, o)
        }
    }

    /// A scalar kernel parameter as the body reads it.
    fn param(&self, name: &str) -> String {
        format!("{}{}", self.d.param, name)
    }

    /// The node in the text form, for annotations: `%18 = exp %17`.
    fn node_text(&self, v: NodeId) -> String {
        let rhs = match *self.tape.node(v) {
            Node::Input(i) => format!("input {}", self.tape.inputs[i as usize].name),
            Node::Const(k) => format!("const {:?}", self.tape.consts[k as usize]),
            Node::Draw(DrawKind::Normal, k) => format!("normal {k}"),
            Node::Draw(DrawKind::Uniform, k) => format!("uniform {k}"),
            Node::Unary(_, a) => format!("{} {a}", self.tape.node(v).op().name()),
            Node::Binary(_, a, b) => format!("{} {a} {b}", self.tape.node(v).op().name()),
        };
        format!("{v} = {rhs}")
    }

    fn note(&self, text: String, v: NodeId) -> String {
        if self.annotate {
            format!("{text} // {}", self.node_text(v))
        } else {
            text
        }
    }

    /// A forward value as an operand: a literal for a constant, else `name(v)`.
    fn operand(&self, v: NodeId, name: &dyn Fn(NodeId) -> String) -> String {
        match *self.tape.node(v) {
            Node::Const(k) => self.lit(self.tape.consts[k as usize]),
            _ => name(v),
        }
    }

    /// The right-hand side computing node `v`, reading its arguments through `name` and drawing
    /// with generator key `keys`.
    fn value_expr(&self, v: NodeId, name: &dyn Fn(NodeId) -> String, keys: (&str, &str)) -> String {
        match *self.tape.node(v) {
            Node::Input(i) => format!("inputs[{i}]"),
            Node::Const(k) => self.lit(self.tape.consts[k as usize]),
            Node::Draw(kind, k) => {
                let f = match kind {
                    DrawKind::Normal => "draw_normal",
                    DrawKind::Uniform => "draw_uniform",
                };
                format!("{f}({k}u, plo, phi, {}, {})", keys.0, keys.1)
            }
            Node::Unary(..) | Node::Binary(..) => {
                let rule = ops::rule(self.tape.node(v).op()).expect("arithmetic ops have rules");
                let x = self.operands(v, name, String::new());
                self.expr(&rule.value, &x).0
            }
        }
    }

    /// The texts of node `v`'s operands `[A, B, C, D]` (`d` is the adjoint's name, if any).
    fn operands(&self, v: NodeId, name: &dyn Fn(NodeId) -> String, d: String) -> [String; 4] {
        let mut args = self.tape.node(v).args().map(|a| self.operand(a, name));
        let a = args.next().unwrap_or_default();
        let b = args.next().unwrap_or_default();
        [a, b, name(v), d]
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
            Expr::Call(f, y) => (self.d.call(f, self.p, &self.expr(y, x).0), 4),
            Expr::Pow(y, z) => {
                let (y, z) = (self.expr(y, x).0, self.expr(z, x).0);
                (self.d.pow(self.p, &y, &z), 4)
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

    /// One adjoint step in lane `o` as a statement, or `None` when it feeds no active argument.
    fn step(&self, step: &Step, args: &[NodeId], o: usize, x: &[String; 4]) -> Option<String> {
        let acc = |acc: &Acc| {
            let arg = args[if acc.arg == Arg::A { 0 } else { 1 }];
            self.active(arg).then(|| {
                let sign = if acc.sub { '-' } else { '+' };
                let e = self.expr(&acc.expr, x).0;
                format!("{} {sign}= {e};", self.dname(arg, o))
            })
        };
        match step {
            Step::Acc(a) => acc(a),
            Step::If(c, then, otherwise) => {
                let c = self.cond(c, x);
                let other = otherwise.and_then(|s| self.step(s, args, o, x));
                match (acc(then), other) {
                    (Some(t), Some(e)) => Some(format!("if ({c}) {t} else {e}")),
                    (Some(t), None) => Some(format!("if ({c}) {t}")),
                    (None, Some(e)) => Some(format!("if (!({c})) {e}")),
                    (None, None) => None,
                }
            }
        }
    }

    /// The adjoint rules of node `v` (live, active), every lane, as `crate::ops` states them.
    fn adjoint_lines(&self, out: &mut Out, v: NodeId, name: &dyn Fn(NodeId) -> String) {
        let node = *self.tape.node(v);
        // Leaves read nothing; an input's adjoint is its Greek and stays where it is.
        let Some(rule) = ops::rule(node.op()) else {
            return;
        };
        let args: Vec<NodeId> = node.args().collect();
        for o in 0..self.lanes() {
            if !self.in_lane(v, o) {
                continue;
            }
            let x = self.operands(v, name, self.dname(v, o));
            for step in rule.adjoint {
                if let Some(line) = self.step(step, &args, o, &x) {
                    out.line(self.note(line, v));
                }
            }
        }
    }

    /// `real dN = 0;` for every lane of `v`.
    fn declare_adjoint(&self, out: &mut Out, v: NodeId) {
        let zero = self.lit(0.0);
        let decls: Vec<String> = (0..self.lanes())
            .filter(|&o| self.in_lane(v, o))
            .map(|o| format!("{} {} = {zero};", self.decl_type(), self.dname(v, o)))
            .collect();
        if !decls.is_empty() {
            out.line(decls.join(" "));
        }
    }

    /// Seeds each output's own lane with 1 (outputs that depend on no input have no adjoint).
    fn seed(&self, out: &mut Out) {
        for (o, output) in self.tape.outputs.iter().enumerate() {
            if self.active(output.node) {
                out.line(format!(
                    "{} = {};",
                    self.dname(output.node, o),
                    self.lit(1.0)
                ));
            }
        }
    }

    /// The scratch address of `slot` (C dialects).
    fn scratch_at(&self, slot: u32) -> String {
        let s = self.scratch.as_ref().expect("scratch layout");
        let i64t = self.index64;
        match s.layout {
            ScratchLayout::Soa => format!(
                "scratch[({i64t}){slot}u * {} + gid]",
                self.param("invocations")
            ),
            ScratchLayout::Aos => format!("scratch[({i64t})gid * {}u + {slot}u]", s.slots),
        }
    }

    fn slot(&self, v: NodeId) -> Option<u32> {
        self.scratch.as_ref().and_then(|s| s.slot_of[v.index()])
    }

    /// The leaves (`accS` for sum S, in the manifest's sum order) from the output values and adjoints.
    fn epilogue(&self, out: &mut Out, name: &dyn Fn(NodeId) -> String) {
        let n_in = self.tape.inputs.len();
        let per = if self.mode == Mode::Reverse {
            2 + n_in
        } else {
            2
        };
        let input_node = &self.info.input_nodes;
        for (o, output) in self.tape.outputs.iter().enumerate() {
            let base = o * per;
            let y = self.d.cast("double", &self.operand(output.node, name));
            out.line(format!("acc{} = {y};", base));
            out.line(format!("acc{} = acc{} * acc{};", base + 1, base, base));
            if self.mode == Mode::Reverse {
                for (i, &v) in input_node.iter().enumerate() {
                    if self.in_lane(v, o) {
                        let g = self.d.cast("double", &self.dname(v, o));
                        out.line(format!("acc{} = {g};", base + 2 + i));
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
        let plain = |v: NodeId| format!("v{}", v.0);
        let keys = ("key0", "key1");
        if !self.checkpointed() {
            out.line("// forward sweep");
            for v in self.tape.ids() {
                if self.live(v) && !self.is_const(v) {
                    let e = self.value_expr(v, &plain, keys);
                    out.line(self.note(format!("{} v{} = {e};", self.decl_type(), v.0), v));
                }
            }
            if self.mode == Mode::Reverse {
                out.line("// reverse sweep");
                for v in self.tape.ids().filter(|&v| self.active(v)) {
                    self.declare_adjoint(&mut out, v);
                }
                self.seed(&mut out);
                for v in self.tape.ids().rev().filter(|&v| self.active(v)) {
                    self.adjoint_lines(&mut out, v, &plain);
                }
            }
            out.line("// leaves");
            self.epilogue(&mut out, &plain);
            return out.lines.join("\n");
        }

        let sp = &self.plan.segments;
        let top: Vec<NodeId> = sp
            .persistent
            .iter()
            .copied()
            .filter(|&v| self.live(v) && !self.is_const(v))
            .collect();
        out.line(format!("// {} persistent values", top.len()));
        for chunk in top.chunks(8) {
            let decls: Vec<String> = chunk
                .iter()
                .map(|v| format!("{} v{};", self.decl_type(), v.0))
                .collect();
            out.line(decls.join(" "));
        }
        let count = sp.segments.len();
        out.line(format!(
            "// forward sweep: {count} segments; a block's locals die at its closing brace"
        ));
        for (s, seg) in sp.segments.iter().enumerate() {
            out.open(format!(
                "{{ // segment {s}: %{}..%{}",
                seg.range.start, seg.range.end
            ));
            for v in seg.range.clone().map(NodeId) {
                if !self.live(v) || self.is_const(v) {
                    continue;
                }
                let e = self.value_expr(v, &plain, keys);
                if self.is_persistent(v) {
                    out.line(self.note(format!("v{} = {e};", v.0), v));
                } else {
                    out.line(self.note(format!("{} v{} = {e};", self.decl_type(), v.0), v));
                }
                if let Some(slot) = self.slot(v) {
                    out.line(self.note(format!("{} = v{};", self.scratch_at(slot), v.0), v));
                }
            }
            out.close();
        }
        out.line(
            "// reverse sweep: last segment first; adjoints of persistent values live at top level",
        );
        for &v in top.iter().filter(|&&v| self.active(v)) {
            self.declare_adjoint(&mut out, v);
        }
        self.seed(&mut out);
        let zero = self.param("zero");
        for s in (0..count).rev() {
            let seg = &sp.segments[s];
            let opaque: BTreeSet<NodeId> =
                self.plan.opacity.opaque_reads[s].iter().copied().collect();
            out.open(format!(
                "{{ // segment {s} reverse: %{}..%{}",
                seg.range.start, seg.range.end
            ));
            let rekey = self.plan.opacity.rekey[s];
            if rekey {
                out.line(format!(
                    "{u} rk0 = key0 ^ {zero}; {u} rk1 = key1 ^ {zero};",
                    u = self.d.uint
                ));
            }
            let block_keys = if rekey { ("rk0", "rk1") } else { keys };
            for &r in &opaque {
                if !self.live(r) || self.is_const(r) {
                    continue;
                }
                let src = match self.slot(r) {
                    Some(slot) => self.scratch_at(slot),
                    None => format!("v{}", r.0),
                };
                out.line(self.note(
                    format!("{} r{} = {};", self.decl_type(), r.0, self.d.opaque(&src)),
                    r,
                ));
            }
            let name = |v: NodeId| {
                if opaque.contains(&v) {
                    format!("r{}", v.0)
                } else {
                    format!("v{}", v.0)
                }
            };
            for &v in &seg.recompute {
                let e = self.value_expr(v, &name, block_keys);
                out.line(self.note(format!("{} v{} = {e};", self.decl_type(), v.0), v));
            }
            for v in seg.range.clone().map(NodeId) {
                if self.active(v) && !self.is_persistent(v) {
                    self.declare_adjoint(&mut out, v);
                }
            }
            for v in seg.range.clone().rev().map(NodeId) {
                if self.active(v) {
                    self.adjoint_lines(&mut out, v, &name);
                }
            }
            out.close();
        }
        out.line("// leaves");
        self.epilogue(&mut out, &plain);
        out.lines.join("\n")
    }

    /// The math functions the rules of live nodes call (in `MathFn` order, each once).
    pub fn math_used(&self) -> Vec<MathFn> {
        let mut used = Vec::new();
        for v in self.tape.ids().filter(|&v| self.live(v)) {
            if let Some(rule) = ops::rule(self.tape.node(v).op()) {
                rule.visit(&mut |e| {
                    let f = match *e {
                        Expr::Call(f, _) => MathFn::of(f),
                        Expr::Pow(..) => MathFn::Pow,
                        _ => return,
                    };
                    if !used.contains(&f) {
                        used.push(f);
                    }
                });
            }
        }
        used
    }

    /// The kernel calls `opq`: it is checkpointed, or the dialect wraps the argument of some
    /// function a live node's rule calls.
    pub fn uses_opaque(&self) -> bool {
        self.checkpointed()
            || self
                .math_used()
                .into_iter()
                .any(|f| self.d.opaque_argument(f))
    }

    /// Which draw kinds the body calls (the skeleton defines only those: GLSL has no f64 `log`).
    pub fn draws_used(&self) -> (bool, bool) {
        let mut normal = false;
        let mut uniform = false;
        for v in self.tape.ids() {
            if self.live(v) {
                match self.tape.node(v) {
                    Node::Draw(DrawKind::Normal, _) => normal = true,
                    Node::Draw(DrawKind::Uniform, _) => uniform = true,
                    _ => {}
                }
            }
        }
        (normal, uniform)
    }

    /// Checks that the plan's segments only read what they may (their own nodes, persistent
    /// values, constants): `Err` names the first read that breaks it. A plan from
    /// `passes::plan` always passes; this keeps a foreign plan from producing source that
    /// reads a variable out of scope.
    pub fn check_reads(&self) -> Result<(), String> {
        if !self.checkpointed() {
            return Ok(());
        }
        let sp = &self.plan.segments;
        for (s, seg) in sp.segments.iter().enumerate() {
            for v in seg.range.clone().map(NodeId).filter(|&v| self.live(v)) {
                for a in self.tape.node(v).args() {
                    if !seg.range.contains(&a.0) && !self.is_persistent(a) && !self.is_const(a) {
                        return Err(format!("segment {s}: {v} reads {a}, which is neither in the segment nor persistent"));
                    }
                    if !self.live(a) {
                        return Err(format!("segment {s}: live {v} reads dead {a}"));
                    }
                }
            }
        }
        Ok(())
    }
}

//! The recording API: an active scalar with operator overloading that writes into a recorder.
//!
//! ```
//! use nablac::record::Recorder;
//! let rec = Recorder::new();
//! let spot = rec.input("spot", 100.0).unwrap();
//! let strike = rec.input("strike", 95.0).unwrap();
//! let z = rec.normal(0);
//! let payoff = (&spot * (1.0 + 0.2 * &z) - &strike).max(&rec.constant(0.0));
//! rec.output("payoff", &payoff).unwrap();
//! let tape = rec.finish().unwrap();
//! assert_eq!(tape.n_draws, 1);
//! ```
//!
//! Contract:
//! - Every call appends exactly the nodes it says, in call order: `input`, `constant`, `normal`,
//!   `uniform` one leaf node each; an operator or method one node; an `f64` operand first one `const`
//!   node (left operand before right). Nothing is folded, deduplicated or reordered.
//! - The constant pool holds each distinct f64 bit pattern once, in order of first use (so `0.0` and
//!   `-0.0` are two entries); every `constant` call still emits its own `const` node.
//! - Inputs are numbered in the order of `input` calls; outputs are kept in the order of `output` calls.
//! - The tape from `finish` obeys TAPE-FORMAT.md: valid unique names, finite recorded values and
//!   constants, arguments pointing backwards, at least one output, `n_draws = 1 + highest draw index`.
//! - Nothing panics. Mistakes that an operator cannot report at once (a non-finite constant, mixing
//!   variables of two recorders, a draw index of `u32::MAX`, more than `u32::MAX` nodes) are kept, the
//!   first one wins, and `finish` returns it.
//!
//! Every op of the IR is reachable: `input`, `constant`, `normal`, `uniform`, `+ - * /` (with `Var` or
//! `f64` on either side), `max`, `min`, unary `-`, `exp`, `ln` (op `log`), `sqrt`, `abs`.

use crate::tape::{is_valid_name, BinaryOp, DrawKind, Input, Node, NodeId, Output, Tape, UnaryOp};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ops::{Add, Div, Mul, Neg, Sub};
use std::rc::Rc;

/// A mistake made while recording, named with the place it was made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RecordError {
    #[error("{kind} name {name:?} is not valid: names match [A-Za-z_][A-Za-z0-9_]{{0,63}}")]
    InvalidName { kind: &'static str, name: String },
    #[error("{kind} name {name:?} is used twice")]
    DuplicateName { kind: &'static str, name: String },
    #[error("{what} is {value}, but tape values must be finite")]
    NonFinite { what: String, value: f64 },
    #[error("{what} uses a variable of another recorder")]
    ForeignVar { what: String },
    #[error("draw index {0} is too large: n_draws = 1 + index must fit in u32")]
    DrawIndex(u32),
    #[error("the tape has more than u32::MAX nodes")]
    TooManyNodes,
    #[error("the tape has no output: call Recorder::output at least once")]
    NoOutputs,
}

#[derive(Default)]
struct Inner {
    tape: Tape,
    pool: BTreeMap<u64, u32>,
    error: Option<RecordError>,
}

impl Inner {
    fn fail(&mut self, e: RecordError) {
        if self.error.is_none() {
            self.error = Some(e);
        }
    }

    fn push(&mut self, node: Node) -> NodeId {
        let n = self.tape.nodes.len();
        if n >= u32::MAX as usize {
            self.fail(RecordError::TooManyNodes);
            return NodeId(0);
        }
        self.tape.nodes.push(node);
        NodeId(n as u32)
    }

    fn constant(&mut self, x: f64) -> NodeId {
        if !x.is_finite() {
            let what = format!("constant (node %{})", self.tape.nodes.len());
            self.fail(RecordError::NonFinite { what, value: x });
        }
        let next = self.tape.consts.len() as u32;
        let k = *self.pool.entry(x.to_bits()).or_insert(next);
        if k == next {
            self.tape.consts.push(x);
        }
        self.push(Node::Const(k))
    }
}

/// Records one Monte Carlo path as a tape.
pub struct Recorder {
    inner: Rc<RefCell<Inner>>,
}

/// An active scalar: a node of a recorder's tape. Cheap to clone (a reference count and an id).
#[derive(Clone)]
pub struct Var {
    rec: Rc<RefCell<Inner>>,
    id: NodeId,
}

impl std::fmt::Debug for Var {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Var({})", self.id)
    }
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new()
    }
}

impl Recorder {
    /// An empty recorder.
    pub fn new() -> Recorder {
        Recorder {
            inner: Rc::new(RefCell::new(Inner::default())),
        }
    }

    fn var(&self, id: NodeId) -> Var {
        Var {
            rec: Rc::clone(&self.inner),
            id,
        }
    }

    /// A new input (next input index) recorded at `value`; the name must be valid and unused by inputs.
    pub fn input(&self, name: &str, value: f64) -> Result<Var, RecordError> {
        let mut inner = self.inner.borrow_mut();
        if !is_valid_name(name) {
            return Err(RecordError::InvalidName {
                kind: "input",
                name: name.to_string(),
            });
        }
        if inner.tape.inputs.iter().any(|i| i.name == name) {
            return Err(RecordError::DuplicateName {
                kind: "input",
                name: name.to_string(),
            });
        }
        if !value.is_finite() {
            return Err(RecordError::NonFinite {
                what: format!("input {name}'s value"),
                value,
            });
        }
        let index = inner.tape.inputs.len() as u32;
        inner.tape.inputs.push(Input {
            name: name.to_string(),
            value,
        });
        let id = inner.push(Node::Input(index));
        drop(inner);
        Ok(self.var(id))
    }

    /// A new `const` node of value `x` (pooled by bit pattern); a non-finite `x` fails `finish`.
    pub fn constant(&self, x: f64) -> Var {
        let id = self.inner.borrow_mut().constant(x);
        self.var(id)
    }

    fn draw(&self, kind: DrawKind, k: u32) -> Var {
        let mut inner = self.inner.borrow_mut();
        match k.checked_add(1) {
            Some(n) => inner.tape.n_draws = inner.tape.n_draws.max(n),
            None => inner.fail(RecordError::DrawIndex(k)),
        }
        let id = inner.push(Node::Draw(kind, k));
        drop(inner);
        self.var(id)
    }

    /// A new `normal k` node: the path's standard normal draw `k`.
    pub fn normal(&self, k: u32) -> Var {
        self.draw(DrawKind::Normal, k)
    }

    /// A new `uniform k` node: the path's uniform draw `k`.
    pub fn uniform(&self, k: u32) -> Var {
        self.draw(DrawKind::Uniform, k)
    }

    /// Names `v` an output (kept in call order); the name must be valid and unused by outputs.
    pub fn output(&self, name: &str, v: &Var) -> Result<(), RecordError> {
        if !Rc::ptr_eq(&self.inner, &v.rec) {
            return Err(RecordError::ForeignVar {
                what: format!("output {name}"),
            });
        }
        let mut inner = self.inner.borrow_mut();
        if !is_valid_name(name) {
            return Err(RecordError::InvalidName {
                kind: "output",
                name: name.to_string(),
            });
        }
        if inner.tape.outputs.iter().any(|o| o.name == name) {
            return Err(RecordError::DuplicateName {
                kind: "output",
                name: name.to_string(),
            });
        }
        inner.tape.outputs.push(Output {
            name: name.to_string(),
            node: v.id,
        });
        Ok(())
    }

    /// The number of nodes recorded so far.
    pub fn len(&self) -> usize {
        self.inner.borrow().tape.nodes.len()
    }

    /// Whether nothing has been recorded yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The recorded tape, or the first mistake made while recording (or `NoOutputs`).
    pub fn finish(self) -> Result<Tape, RecordError> {
        let mut inner = self.inner.borrow_mut();
        if let Some(e) = inner.error.take() {
            return Err(e);
        }
        if inner.tape.outputs.is_empty() {
            return Err(RecordError::NoOutputs);
        }
        inner.pool.clear();
        Ok(std::mem::take(&mut inner.tape))
    }
}

impl Var {
    /// The node this variable names.
    pub fn id(&self) -> NodeId {
        self.id
    }

    fn unary(&self, op: UnaryOp) -> Var {
        let id = self.rec.borrow_mut().push(Node::Unary(op, self.id));
        Var {
            rec: Rc::clone(&self.rec),
            id,
        }
    }

    fn binary(&self, op: BinaryOp, other: &Var) -> Var {
        let mut inner = self.rec.borrow_mut();
        let id = if Rc::ptr_eq(&self.rec, &other.rec) {
            inner.push(Node::Binary(op, self.id, other.id))
        } else {
            let what = format!("{op:?} at node %{}", inner.tape.nodes.len());
            inner.fail(RecordError::ForeignVar { what });
            self.id
        };
        drop(inner);
        Var {
            rec: Rc::clone(&self.rec),
            id,
        }
    }

    fn constant(&self, x: f64) -> Var {
        let id = self.rec.borrow_mut().constant(x);
        Var {
            rec: Rc::clone(&self.rec),
            id,
        }
    }

    /// A new `exp` node.
    pub fn exp(&self) -> Var {
        self.unary(UnaryOp::Exp)
    }

    /// A new `log` node (natural logarithm).
    pub fn ln(&self) -> Var {
        self.unary(UnaryOp::Log)
    }

    /// A new `sqrt` node.
    pub fn sqrt(&self) -> Var {
        self.unary(UnaryOp::Sqrt)
    }

    /// A new `abs` node.
    pub fn abs(&self) -> Var {
        self.unary(UnaryOp::Abs)
    }

    /// A new `max self w` node (ties go to `self`).
    pub fn max(&self, w: &Var) -> Var {
        self.binary(BinaryOp::Max, w)
    }

    /// A new `min self w` node (ties go to `self`).
    pub fn min(&self, w: &Var) -> Var {
        self.binary(BinaryOp::Min, w)
    }

    /// A new `lt self w` node: 1 if self < w, else 0 (format 2; no derivative).
    pub fn lt(&self, w: &Var) -> Var {
        self.binary(BinaryOp::Lt, w)
    }

    /// A new `le self w` node: 1 if self <= w, else 0 (format 2; no derivative).
    pub fn le(&self, w: &Var) -> Var {
        self.binary(BinaryOp::Le, w)
    }

    /// A new `gt self w` node: 1 if self > w, else 0 (format 2; no derivative).
    pub fn gt(&self, w: &Var) -> Var {
        self.binary(BinaryOp::Gt, w)
    }

    /// A new `ge self w` node: 1 if self >= w, else 0 (format 2; no derivative).
    pub fn ge(&self, w: &Var) -> Var {
        self.binary(BinaryOp::Ge, w)
    }

    /// A new `pow self w` node: self^w for self > 0, NaN otherwise (format 2).
    pub fn pow(&self, w: &Var) -> Var {
        self.binary(BinaryOp::Pow, w)
    }

    /// A new `tanh` node (format 2).
    pub fn tanh(&self) -> Var {
        self.unary(UnaryOp::Tanh)
    }

    /// A new `ncdf` node: the standard normal distribution function (format 2).
    pub fn ncdf(&self) -> Var {
        self.unary(UnaryOp::Ncdf)
    }
}

impl Neg for &Var {
    type Output = Var;
    /// A new `neg` node.
    fn neg(self) -> Var {
        self.unary(UnaryOp::Neg)
    }
}

impl Neg for Var {
    type Output = Var;
    /// A new `neg` node.
    fn neg(self) -> Var {
        self.unary(UnaryOp::Neg)
    }
}

macro_rules! binary_ops {
    ($($trait:ident $method:ident $op:ident),*) => {$(
        impl $trait<&Var> for &Var {
            type Output = Var;
            fn $method(self, rhs: &Var) -> Var { self.binary(BinaryOp::$op, rhs) }
        }
        impl $trait<Var> for &Var {
            type Output = Var;
            fn $method(self, rhs: Var) -> Var { self.binary(BinaryOp::$op, &rhs) }
        }
        impl $trait<&Var> for Var {
            type Output = Var;
            fn $method(self, rhs: &Var) -> Var { self.binary(BinaryOp::$op, rhs) }
        }
        impl $trait<Var> for Var {
            type Output = Var;
            fn $method(self, rhs: Var) -> Var { self.binary(BinaryOp::$op, &rhs) }
        }
        impl $trait<f64> for &Var {
            type Output = Var;
            fn $method(self, rhs: f64) -> Var { self.binary(BinaryOp::$op, &self.constant(rhs)) }
        }
        impl $trait<f64> for Var {
            type Output = Var;
            fn $method(self, rhs: f64) -> Var { self.binary(BinaryOp::$op, &self.constant(rhs)) }
        }
        impl $trait<&Var> for f64 {
            type Output = Var;
            fn $method(self, rhs: &Var) -> Var { rhs.constant(self).binary(BinaryOp::$op, rhs) }
        }
        impl $trait<Var> for f64 {
            type Output = Var;
            fn $method(self, rhs: Var) -> Var { rhs.constant(self).binary(BinaryOp::$op, &rhs) }
        }
    )*};
}

binary_ops!(Add add Add, Sub sub Sub, Mul mul Mul, Div div Div);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tape::Op;

    #[test]
    fn records_every_op_in_call_order() {
        let rec = Recorder::new();
        let x = rec.input("x", 2.0).unwrap(); // %0
        let y = rec.input("y", 3.0).unwrap(); // %1
        let c = rec.constant(0.5); // %2
        let z = rec.normal(4); // %3
        let u = rec.uniform(1); // %4
        let a = &x + &y; // %5
        let b = &a - &c; // %6
        let m = b * &z; // %7
        let d = &m / &u; // %8
        let mx = d.max(&x); // %9
        let mn = mx.min(&y); // %10
        let n = -&mn; // %11
        let e = n.exp(); // %12
        let l = e.ln(); // %13
        let s = l.sqrt(); // %14
        let ab = s.abs(); // %15
        let k1 = &ab + 1.0; // %16 const, %17 add
        let k2 = 2.0 * k1; // %18 const, %19 mul
        let k3 = 1.0 - k2; // %20 const 1.0 (pooled), %21 sub
        let k4 = k3 / 0.5; // %22 const 0.5 (pooled), %23 div
        let k5 = -k4; // %24
        let f2 = k5.lt(&x).le(&y).gt(&x).ge(&y).pow(&x).tanh().ncdf(); // %25..%31
        rec.output("out", &k5).unwrap();
        rec.output("format2", &f2).unwrap();
        rec.output("x_again", &x).unwrap();
        let tape = rec.finish().unwrap();
        let ops: Vec<Op> = tape.nodes.iter().map(|n| n.op()).collect();
        use Op::*;
        assert_eq!(
            ops,
            [
                Input, Input, Const, Normal, Uniform, Add, Sub, Mul, Div, Max, Min, Neg, Exp, Log,
                Sqrt, Abs, Const, Add, Const, Mul, Const, Sub, Const, Div, Neg, Lt, Le, Gt, Ge,
                Pow, Tanh, Ncdf
            ]
        );
        for op in Op::ALL {
            assert!(ops.contains(&op), "{op} is not reachable");
        }
        assert_eq!(tape.consts, [0.5, 1.0, 2.0]);
        assert_eq!(tape.nodes[2], Node::Const(0));
        assert_eq!(tape.nodes[16], Node::Const(1));
        assert_eq!(tape.nodes[18], Node::Const(2));
        assert_eq!(tape.nodes[20], Node::Const(1));
        assert_eq!(tape.nodes[22], Node::Const(0));
        // Operand order: f64 on the left becomes the first argument.
        assert_eq!(
            tape.nodes[19],
            Node::Binary(BinaryOp::Mul, NodeId(18), NodeId(17))
        );
        assert_eq!(
            tape.nodes[21],
            Node::Binary(BinaryOp::Sub, NodeId(20), NodeId(19))
        );
        assert_eq!(
            tape.nodes[23],
            Node::Binary(BinaryOp::Div, NodeId(21), NodeId(22))
        );
        assert_eq!(
            tape.nodes[9],
            Node::Binary(BinaryOp::Max, NodeId(8), NodeId(0))
        );
        assert_eq!(tape.nodes[3], Node::Draw(DrawKind::Normal, 4));
        assert_eq!(tape.n_draws, 5);
        assert_eq!(tape.n_draws, tape.draws_used());
        assert_eq!(
            tape.inputs
                .iter()
                .map(|i| (i.name.as_str(), i.value))
                .collect::<Vec<_>>(),
            [("x", 2.0), ("y", 3.0)]
        );
        assert_eq!(
            tape.outputs[0],
            Output {
                name: "out".into(),
                node: NodeId(24)
            }
        );
        assert_eq!(
            tape.outputs[1],
            Output {
                name: "format2".into(),
                node: NodeId(31)
            }
        );
        assert_eq!(
            tape.outputs[2],
            Output {
                name: "x_again".into(),
                node: NodeId(0)
            }
        );
        for (i, node) in tape.nodes.iter().enumerate() {
            assert!(node.args().all(|a| a.index() < i));
        }
    }

    #[test]
    fn pool_keeps_bit_patterns_in_first_use_order() {
        let rec = Recorder::new();
        let a = rec.constant(0.0);
        let _ = rec.constant(-0.0);
        let _ = rec.constant(3.0);
        let _ = rec.constant(0.0);
        rec.output("a", &a).unwrap();
        let tape = rec.finish().unwrap();
        assert_eq!(
            tape.consts.iter().map(|c| c.to_bits()).collect::<Vec<_>>(),
            [0, 1 << 63, 3f64.to_bits()]
        );
        assert_eq!(
            tape.nodes,
            [
                Node::Const(0),
                Node::Const(1),
                Node::Const(2),
                Node::Const(0)
            ]
        );
        assert_eq!(tape.n_draws, 0);
    }

    #[test]
    fn mistakes_are_reported() {
        let rec = Recorder::new();
        let x = rec.input("x", 1.0).unwrap();
        assert_eq!(
            rec.input("x", 2.0).unwrap_err(),
            RecordError::DuplicateName {
                kind: "input",
                name: "x".into()
            }
        );
        assert_eq!(
            rec.input("9x", 2.0).unwrap_err(),
            RecordError::InvalidName {
                kind: "input",
                name: "9x".into()
            }
        );
        assert!(matches!(
            rec.input("y", f64::NAN),
            Err(RecordError::NonFinite { .. })
        ));
        assert!(matches!(
            rec.input(&"a".repeat(65), 1.0),
            Err(RecordError::InvalidName { .. })
        ));
        rec.output("p", &x).unwrap();
        assert_eq!(
            rec.output("p", &x).unwrap_err(),
            RecordError::DuplicateName {
                kind: "output",
                name: "p".into()
            }
        );
        assert!(matches!(
            rec.output("a b", &x),
            Err(RecordError::InvalidName { .. })
        ));
        let other = Recorder::new();
        let w = other.input("w", 1.0).unwrap();
        assert!(matches!(
            rec.output("q", &w),
            Err(RecordError::ForeignVar { .. })
        ));
        // The failed calls added nothing.
        assert_eq!(rec.len(), 1);
        assert_eq!(rec.finish().unwrap().inputs.len(), 1);
        let msg = RecordError::InvalidName {
            kind: "input",
            name: "9x".into(),
        }
        .to_string();
        assert_eq!(
            msg,
            "input name \"9x\" is not valid: names match [A-Za-z_][A-Za-z0-9_]{0,63}"
        );
    }

    #[test]
    fn deferred_mistakes_fail_finish() {
        let rec = Recorder::new();
        let x = rec.input("x", 1.0).unwrap();
        let y = &x * f64::INFINITY;
        let _ = &y + f64::NAN; // only the first mistake is kept
        rec.output("y", &y).unwrap();
        let e = rec.finish().unwrap_err();
        assert_eq!(
            e,
            RecordError::NonFinite {
                what: "constant (node %1)".into(),
                value: f64::INFINITY
            }
        );

        let a = Recorder::new();
        let b = Recorder::new();
        let x = a.input("x", 1.0).unwrap();
        let w = b.input("w", 1.0).unwrap();
        let s = &x + &w;
        a.output("s", &s).unwrap();
        assert!(matches!(a.finish(), Err(RecordError::ForeignVar { .. })));
        b.output("w", &w).unwrap();
        assert!(b.finish().is_ok());

        let r = Recorder::new();
        let z = r.normal(u32::MAX);
        r.output("z", &z).unwrap();
        assert_eq!(r.finish().unwrap_err(), RecordError::DrawIndex(u32::MAX));

        let r = Recorder::new();
        let _ = r.input("x", 1.0).unwrap();
        assert_eq!(r.finish().unwrap_err(), RecordError::NoOutputs);
    }
}

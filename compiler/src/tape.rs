//! The tape IR: a straight-line program over real scalars (TAPE-FORMAT.md, versions 1 and 2).
//!
//! Nodes live in a `Vec<Node>` in evaluation order and are named by dense [`NodeId`]s (printed `%12`).
//! Every argument names an earlier node, so the list is already topologically sorted. Analyses never
//! add fields to nodes: they live in side tables keyed by id (see `verify::TapeInfo` and `passes`).
//!
//! The leaves: `input i` (the input's value; its adjoint is input i's Greek), `const k`
//! (`consts[k]`), `normal K` and `uniform K` (draw K of the path, TAPE-FORMAT.md). What every
//! arithmetic op computes and how its derivative flows is stated once, in `crate::ops`, which
//! every back end evaluates; this module only names the ops and their codes.
//!
//! A `Tape` value may be malformed (it is what a reader or a recorder produced); `verify::verify`
//! checks every rule of the format and returns the facts later stages need.

use std::fmt;

/// A node of the tape, by its position in evaluation order. Printed `%N`.
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct NodeId(pub u32);

impl NodeId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}", self.0)
    }
}

/// The operation codes of the binary form, one per op.
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
#[repr(u8)]
pub enum Op {
    Input = 0,
    Const = 1,
    Normal = 2,
    Uniform = 3,
    Add = 16,
    Sub = 17,
    Mul = 18,
    Div = 19,
    Max = 20,
    Min = 21,
    Lt = 22,
    Le = 23,
    Gt = 24,
    Ge = 25,
    Pow = 26,
    Neg = 32,
    Exp = 33,
    Log = 34,
    Sqrt = 35,
    Abs = 36,
    Tanh = 37,
    Ncdf = 38,
}

impl Op {
    /// Every op, in code order.
    pub const ALL: [Op; 22] = [
        Op::Input,
        Op::Const,
        Op::Normal,
        Op::Uniform,
        Op::Add,
        Op::Sub,
        Op::Mul,
        Op::Div,
        Op::Max,
        Op::Min,
        Op::Lt,
        Op::Le,
        Op::Gt,
        Op::Ge,
        Op::Pow,
        Op::Neg,
        Op::Exp,
        Op::Log,
        Op::Sqrt,
        Op::Abs,
        Op::Tanh,
        Op::Ncdf,
    ];

    pub fn code(self) -> u8 {
        self as u8
    }

    pub fn from_code(code: u8) -> Option<Op> {
        Op::ALL.iter().copied().find(|op| op.code() == code)
    }

    /// The op's name in the text form.
    pub fn name(self) -> &'static str {
        match self {
            Op::Input => "input",
            Op::Const => "const",
            Op::Normal => "normal",
            Op::Uniform => "uniform",
            Op::Add => "add",
            Op::Sub => "sub",
            Op::Mul => "mul",
            Op::Div => "div",
            Op::Max => "max",
            Op::Min => "min",
            Op::Neg => "neg",
            Op::Exp => "exp",
            Op::Log => "log",
            Op::Sqrt => "sqrt",
            Op::Abs => "abs",
            Op::Lt => "lt",
            Op::Le => "le",
            Op::Gt => "gt",
            Op::Ge => "ge",
            Op::Pow => "pow",
            Op::Tanh => "tanh",
            Op::Ncdf => "ncdf",
        }
    }

    /// The first tape format version that has the op (TAPE-FORMAT.md): 2 for `lt`, `le`, `gt`,
    /// `ge`, `pow`, `tanh` and `ncdf`, 1 for the rest.
    pub fn format(self) -> u16 {
        match self {
            Op::Lt | Op::Le | Op::Gt | Op::Ge | Op::Pow | Op::Tanh | Op::Ncdf => 2,
            _ => 1,
        }
    }

    pub fn from_name(name: &str) -> Option<Op> {
        Op::ALL.iter().copied().find(|op| op.name() == name)
    }

    /// How many node arguments the op reads (0 for leaves, whose argument is an index).
    pub fn arity(self) -> usize {
        match self {
            Op::Input | Op::Const | Op::Normal | Op::Uniform => 0,
            Op::Neg | Op::Exp | Op::Log | Op::Sqrt | Op::Abs | Op::Tanh | Op::Ncdf => 1,
            _ => 2,
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Two-argument arithmetic.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Max,
    Min,
    /// 1 if a < b else 0 (format 2; no derivative).
    Lt,
    Le,
    Gt,
    Ge,
    /// a^b for a > 0, NaN otherwise (format 2).
    Pow,
}

/// One-argument arithmetic.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum UnaryOp {
    Neg,
    Exp,
    Log,
    Sqrt,
    Abs,
    /// Format 2.
    Tanh,
    /// The standard normal distribution function (format 2).
    Ncdf,
}

/// Which generator a draw comes from (TAPE-FORMAT.md, Draws).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum DrawKind {
    Normal,
    Uniform,
}

/// One node: an op and its typed arguments.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Node {
    /// The value of input `i` (an index into `Tape::inputs`).
    Input(u32),
    /// `Tape::consts[k]`.
    Const(u32),
    /// Draw `k` of the path.
    Draw(DrawKind, u32),
    Unary(UnaryOp, NodeId),
    Binary(BinaryOp, NodeId, NodeId),
}

impl Node {
    pub fn op(&self) -> Op {
        match *self {
            Node::Input(_) => Op::Input,
            Node::Const(_) => Op::Const,
            Node::Draw(DrawKind::Normal, _) => Op::Normal,
            Node::Draw(DrawKind::Uniform, _) => Op::Uniform,
            Node::Unary(op, _) => match op {
                UnaryOp::Neg => Op::Neg,
                UnaryOp::Exp => Op::Exp,
                UnaryOp::Log => Op::Log,
                UnaryOp::Sqrt => Op::Sqrt,
                UnaryOp::Abs => Op::Abs,
                UnaryOp::Tanh => Op::Tanh,
                UnaryOp::Ncdf => Op::Ncdf,
            },
            Node::Binary(op, _, _) => match op {
                BinaryOp::Add => Op::Add,
                BinaryOp::Sub => Op::Sub,
                BinaryOp::Mul => Op::Mul,
                BinaryOp::Div => Op::Div,
                BinaryOp::Max => Op::Max,
                BinaryOp::Min => Op::Min,
                BinaryOp::Lt => Op::Lt,
                BinaryOp::Le => Op::Le,
                BinaryOp::Gt => Op::Gt,
                BinaryOp::Ge => Op::Ge,
                BinaryOp::Pow => Op::Pow,
            },
        }
    }

    /// The nodes this node reads, in argument order (empty for leaves).
    pub fn args(&self) -> impl Iterator<Item = NodeId> {
        let (a, b) = match *self {
            Node::Unary(_, a) => (Some(a), None),
            Node::Binary(_, a, b) => (Some(a), Some(b)),
            _ => (None, None),
        };
        a.into_iter().chain(b)
    }

    /// The binary form's `(op, a, b)` fields; an unused argument is 0.
    pub fn encode(&self) -> (u8, u32, u32) {
        let (a, b) = match *self {
            Node::Input(i) | Node::Const(i) | Node::Draw(_, i) => (i, 0),
            Node::Unary(_, a) => (a.0, 0),
            Node::Binary(_, a, b) => (a.0, b.0),
        };
        (self.op().code(), a, b)
    }

    /// Builds a node from the binary form's fields. Only the op code is checked here; argument
    /// ranges are the verifier's business.
    pub fn decode(code: u8, a: u32, b: u32) -> Option<Node> {
        let op = Op::from_code(code)?;
        Some(Node::from_op(op, a, b))
    }

    /// Builds a node of `op` with raw arguments `a` and `b` (ignored where the op has fewer).
    pub fn from_op(op: Op, a: u32, b: u32) -> Node {
        let (na, nb) = (NodeId(a), NodeId(b));
        match op {
            Op::Input => Node::Input(a),
            Op::Const => Node::Const(a),
            Op::Normal => Node::Draw(DrawKind::Normal, a),
            Op::Uniform => Node::Draw(DrawKind::Uniform, a),
            Op::Add => Node::Binary(BinaryOp::Add, na, nb),
            Op::Sub => Node::Binary(BinaryOp::Sub, na, nb),
            Op::Mul => Node::Binary(BinaryOp::Mul, na, nb),
            Op::Div => Node::Binary(BinaryOp::Div, na, nb),
            Op::Max => Node::Binary(BinaryOp::Max, na, nb),
            Op::Min => Node::Binary(BinaryOp::Min, na, nb),
            Op::Neg => Node::Unary(UnaryOp::Neg, na),
            Op::Exp => Node::Unary(UnaryOp::Exp, na),
            Op::Log => Node::Unary(UnaryOp::Log, na),
            Op::Sqrt => Node::Unary(UnaryOp::Sqrt, na),
            Op::Abs => Node::Unary(UnaryOp::Abs, na),
            Op::Tanh => Node::Unary(UnaryOp::Tanh, na),
            Op::Ncdf => Node::Unary(UnaryOp::Ncdf, na),
            Op::Lt => Node::Binary(BinaryOp::Lt, na, nb),
            Op::Le => Node::Binary(BinaryOp::Le, na, nb),
            Op::Gt => Node::Binary(BinaryOp::Gt, na, nb),
            Op::Ge => Node::Binary(BinaryOp::Ge, na, nb),
            Op::Pow => Node::Binary(BinaryOp::Pow, na, nb),
        }
    }
}

/// A named parameter the user wants sensitivities to, with the value it was recorded at.
#[derive(Clone, PartialEq, Debug)]
pub struct Input {
    pub name: String,
    pub value: f64,
}

/// A named node whose path average is a result.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Output {
    pub name: String,
    pub node: NodeId,
}

/// A recorded path. Nothing here is guaranteed well-formed until `verify::verify` says so.
#[derive(Clone, PartialEq, Debug, Default)]
pub struct Tape {
    /// In input-index order.
    pub inputs: Vec<Input>,
    pub outputs: Vec<Output>,
    /// The constant pool, read by `Node::Const`.
    pub consts: Vec<f64>,
    /// In evaluation order.
    pub nodes: Vec<Node>,
    /// 1 + the highest draw index used; 0 if none.
    pub n_draws: u32,
}

impl Tape {
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.index()]
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Every node id, in evaluation order.
    pub fn ids(&self) -> impl DoubleEndedIterator<Item = NodeId> + ExactSizeIterator {
        (0..self.nodes.len() as u32).map(NodeId)
    }

    /// The tape format version the tape needs: 2 if it uses a format-2 op, else 1 (so writers
    /// keep every version-1 tape byte-identical).
    pub fn format(&self) -> u16 {
        self.nodes
            .iter()
            .map(|n| n.op().format())
            .max()
            .unwrap_or(1)
    }

    /// `1 + highest draw index used`, or 0: the value `n_draws` must have in a tape built in memory.
    pub fn draws_used(&self) -> u32 {
        self.nodes
            .iter()
            .filter_map(|n| match n {
                Node::Draw(_, k) => Some(k + 1),
                _ => None,
            })
            .max()
            .unwrap_or(0)
    }
}

/// Names match `[A-Za-z_][A-Za-z0-9_]{0,63}` (TAPE-FORMAT.md), so they are valid identifiers in
/// every kernel dialect.
pub fn is_valid_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
        && b[1..]
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

/// One node's statement as the text form prints it (`%4 = mul %0 %3`,
/// `crate::format::text::write_text`), without a newline. Never panics: on a malformed tape an
/// out-of-range input or const index prints as `?K`.
pub fn node_statement(tape: &Tape, id: NodeId) -> String {
    use std::fmt::Write as _;
    let mut s = format!("{id} = ");
    match tape.nodes.get(id.index()) {
        None => s.push('?'),
        Some(node) => {
            s.push_str(node.op().name());
            match *node {
                Node::Input(k) => match tape.inputs.get(k as usize) {
                    Some(input) => {
                        let _ = write!(s, " {} {:?}", input.name, input.value);
                    }
                    None => {
                        let _ = write!(s, " ?{k}");
                    }
                },
                Node::Const(k) => match tape.consts.get(k as usize) {
                    Some(v) => {
                        let _ = write!(s, " {v:?}");
                    }
                    None => {
                        let _ = write!(s, " ?{k}");
                    }
                },
                Node::Draw(_, k) => {
                    let _ = write!(s, " {k}");
                }
                Node::Unary(_, a) => {
                    let _ = write!(s, " {a}");
                }
                Node::Binary(_, a, b) => {
                    let _ = write!(s, " {a} {b}");
                }
            }
        }
    }
    s
}

/// One output's statement (`output payoff = %6`), without a newline.
pub fn output_statement(output: &Output) -> String {
    format!("output {} = {}", output.name, output.node)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_codes_round_trip() {
        for op in Op::ALL {
            assert_eq!(Op::from_code(op.code()), Some(op));
            assert_eq!(Op::from_name(op.name()), Some(op));
            let node = Node::from_op(op, 3, 1);
            assert_eq!(node.op(), op);
            let (code, a, b) = node.encode();
            assert_eq!(Node::decode(code, a, b), Some(node));
        }
        assert_eq!(Op::from_code(4), None);
        assert_eq!(Op::from_code(255), None);
    }

    #[test]
    fn names() {
        assert!(is_valid_name("spot"));
        assert!(is_valid_name("_x9"));
        assert!(is_valid_name(&"a".repeat(64)));
        assert!(!is_valid_name(&"a".repeat(65)));
        assert!(!is_valid_name("9a"));
        assert!(!is_valid_name(""));
        assert!(!is_valid_name("a-b"));
        assert!(!is_valid_name("é"));
    }
}

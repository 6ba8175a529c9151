//! The kernel schedule: what one path of a kernel does, statement by statement, for every back end.
//!
//! Contract: [`Schedule::build`] turns a verified tape, its plan and a mode into a list of
//! target-neutral statements (forward definitions, draws, scratch spills, opaque reads, re-keys,
//! segment blocks with their scopes, adjoint declarations, seeds and accumulations per lane, and
//! the per-path leaves). The printers read it and nothing else about the kernel's structure: the
//! C-like printer (`emit::body`: CUDA, OpenCL, GLSL through a `Dialect`) prints one line per
//! statement, the CPU lowering (`clif::lower`) builds one group of instructions per statement,
//! and the register-pressure estimate ([`maxlive`]) counts over the same statements. None of
//! them matches on tape ops: a definition carries its rule from `crate::ops` (the one table of
//! values and derivatives) and operands that are already literals or named values.
//!
//! A *lane* is one column of adjoints carried by the one reverse sweep: today lane `o` is output
//! `o`'s adjoints, and it runs the rules of output o's backward cone only (so a non-finite value
//! outside the cone never reaches its Greeks). Tangent directions (forward mode) and markets
//! (ladders) become more lanes, not more printers.
//!
//! Names: [`Var::Value`] is node v's value (`vN` in C), defined by the forward sweep or recomputed
//! inside a reverse block; [`Var::Copy`] is a reverse block's opaque copy of a persistent value
//! (`rN`). Statements inside a [`Block`] that `declare` their value are local to it; a block's
//! locals die at its end. Guarantee: every `Var` a statement reads is defined earlier in the same
//! block or in an enclosing one (and is a constant's literal otherwise).

mod fused;
mod loops;
pub mod maxlive;
pub mod storage;
pub mod verify;

pub use fused::fused_products;
pub use storage::{Class, Slot, Storage};

use crate::ops::{self, Expr, Fun, Rule};
use crate::passes::{colour_inputs, Colouring};
use crate::plan::{Activity, Checkpoint, Plan};
use crate::tape::{DrawKind, Node, NodeId, Tape};
use crate::verify::{TapeInfo, Verified};
use nablac_abi::manifest::Mode;
use std::ops::Range;

/// The most bookmarks a path of a reverse kernel with loops holds (values: 16 KiB a thread in
/// f32). A GPU reserves a thread's local memory for every thread it can hold at once (an H100:
/// 270,336), so 4,096 values take 4.4 GB of it; a tape that would need more (the 10,000-step
/// Asian: 10,000) keeps the checkpointed reverse kernel until bookmarks every k ~ sqrt(n)
/// iterations land.
pub const MAX_BOOKMARKS: u32 = 4096;

/// The smallest loop region a price kernel keeps as a loop (nodes); shorter ones unroll.
pub const LOOP_MIN_NODES: u32 = 16;

/// A lane of the reverse sweep (today: an output's index).
pub type Lane = usize;

/// A named forward value (module doc).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Var {
    /// Node v's value: `vN`.
    Value(NodeId),
    /// The reverse block's opaque copy of persistent node v: `rN`.
    Copy(NodeId),
    /// Node v's tangent in a forward-mode lane (a direction): `tN` (`tN_l` with several lanes).
    Tangent(NodeId, Lane),
    /// A loop's carried value of body node v (named by its node in the loop's first
    /// iteration): `cN`. Before the loop its value before the first iteration, after each
    /// iteration that iteration's value of v, so after the loop the last iteration's.
    Carried(NodeId),
    /// A loop's carried tangent of body node v in a lane, as [`Var::Carried`] is its value:
    /// `uN` (`uN_l` with several lanes).
    CarriedTangent(NodeId, Lane),
}

impl Var {
    /// The node whose value or tangent this names, for the straight-line names (`Value`,
    /// `Tangent`); `None` for the copies and the carried variables.
    pub fn straight_node(self) -> Option<NodeId> {
        match self {
            Var::Value(v) | Var::Tangent(v, _) => Some(v),
            Var::Copy(_) | Var::Carried(_) | Var::CarriedTangent(..) => None,
        }
    }
}

/// The name of an adjoint (in every lane it has).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Grad {
    /// Node v's adjoint: `dN` (`dN_l` with several lanes).
    Of(NodeId),
    /// In a reverse [`Loop`]'s body: the adjoint of the previous iteration's body node v (named
    /// by its node in the loop's first iteration), which this iteration's rules accumulate:
    /// `eN` (`eN_l`).
    Prev(NodeId),
}

/// What a statement reads: a constant (as a literal at every use) or a named value.
#[derive(Copy, Clone, PartialEq, Debug)]
pub enum Operand {
    Lit(f64),
    Var(Var),
}

/// The generator key of a draw: the kernel's, or the re-keyed one of a reverse block.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Key {
    Kernel,
    Rekeyed,
}

/// How a definition computes its value.
#[derive(Copy, Clone, PartialEq, Debug)]
pub enum Def {
    /// Input k of the market.
    Input(u32),
    /// Draw `index + stride * i` of the path (TAPE-FORMAT.md, Draws) under key `key`, where
    /// `i` is the enclosing [`Loop`]'s iteration (`stride` is 0 outside loops).
    Draw {
        kind: DrawKind,
        index: u32,
        stride: u32,
        key: Key,
    },
    /// An arithmetic op: its rule's `value` over the arguments `[A, B]`.
    Rule {
        rule: &'static Rule,
        args: [Option<Operand>; 2],
    },
}

/// One adjoint rule application: `rule.adjoint`'s steps for node `node` in lane `lane`.
#[derive(Copy, Clone, PartialEq, Debug)]
pub struct Adjoint {
    pub node: NodeId,
    pub lane: Lane,
    pub rule: &'static Rule,
    /// The operands `A`, `B` (arguments) and `C` (the node's own value) as this block reads them;
    /// `None` where the node has no such argument.
    pub x: [Option<Operand>; 3],
    /// The adjoints the steps feed: `to[0]` for argument A, `to[1]` for B; `None` where that
    /// argument carries no adjoint (its steps are not run). The steps read the adjoint
    /// `Grad::Of(node)`.
    pub to: [Option<Grad>; 2],
}

/// The operands of `x` (`[A, B, C]`) that `rule`'s steps read when only the arguments `fed`
/// take part (`ops::Rule::reads`).
fn steps_read(
    rule: &Rule,
    x: [Option<Operand>; 3],
    fed: [bool; 2],
) -> impl Iterator<Item = Operand> {
    let (a, b, c) = rule.reads(fed);
    [(a, x[0]), (b, x[1]), (c, x[2])]
        .into_iter()
        .filter_map(|(read, x)| x.filter(|_| read))
}

impl Adjoint {
    /// The operands the steps that run read: what the reverse sweep needs of the forward sweep.
    pub fn reads(&self) -> impl Iterator<Item = Operand> + '_ {
        steps_read(self.rule, self.x, self.to.map(|t| t.is_some()))
    }
}

/// One tangent definition of forward mode: node `node`'s tangent in lane `lane` is the sum of
/// its rule's adjoint steps with `D` replaced by the tangent of the argument each step feeds
/// (`crate::ops`: every step is linear in `D`), in step order; a step whose argument has no
/// tangent in this lane (`from` is `None`) contributes nothing.
#[derive(Copy, Clone, PartialEq, Debug)]
pub struct Tangent {
    pub node: NodeId,
    pub lane: Lane,
    pub rule: &'static Rule,
    /// The operands `A`, `B` and `C`, as for [`Adjoint::x`].
    pub x: [Option<Operand>; 3],
    /// The tangents of arguments A and B in this lane: a literal (an input's own direction is 1)
    /// or a named tangent; `None` where it is structurally zero.
    pub from: [Option<Operand>; 2],
}

impl Tangent {
    /// Everything the definition reads: the operands its live steps read, and the tangents.
    pub fn reads(&self) -> impl Iterator<Item = Operand> + '_ {
        steps_read(self.rule, self.x, self.from.map(|t| t.is_some()))
            .chain(self.from.iter().flatten().copied())
    }
}

/// One per-path leaf, in the manifest's sum order (`nablac_abi::report::output_leaves` says what
/// each is; the leaves are computed in order, so a leaf reads only earlier ones).
#[derive(Copy, Clone, PartialEq, Debug)]
pub enum Leaf {
    /// A value converted to f64: an output's value, or in forward mode an output's tangent (a
    /// Greek).
    Value(Operand),
    /// The square of leaf `of` about the shift `inputs[shift]` (the inputs buffer's entry past
    /// the market, in the kernel's precision, converted to f64): `(leaf - c) * (leaf - c)`, f64.
    Square { of: usize, shift: u32 },
    /// The adjoint of `node` in `lane`, converted to f64: a Greek.
    Adjoint(NodeId, Lane),
    /// Zero (the input is outside the lane's cone: no adjoint reaches it).
    Zero,
    /// An output's non-finite count, the last of its leaves `first..end` (this one excluded):
    /// 1 when one of them that is a `Value` or an `Adjoint` is NaN or infinite, and then every
    /// leaf of `first..end` is 0 instead; else 0 and the others keep their values.
    NonFinite { first: usize, end: usize },
}

/// A scope: its statements, which part of the tape it covers, and a note for the reader.
#[derive(Clone, PartialEq, Debug)]
pub struct Block {
    pub note: String,
    pub range: Range<u32>,
    pub body: Vec<Stmt>,
}

/// A loop (a run of a region's iterations, `passes::reroll`; [`loops`] builds them): iterations
/// `first .. first + count` of its body, whose statements name each value (and tangent) by its
/// node in the loop's first iteration and are local to one iteration. Each `carried` variable
/// is declared before the loop with `init` and takes `next` (the iteration's value of it) at the
/// end of each iteration, so after the loop it holds the last iteration's.
#[derive(Clone, PartialEq, Debug)]
pub struct Loop {
    /// The region's nodes and its nodes per iteration (`passes::reroll::Region`).
    pub region: Range<u32>,
    pub period: u32,
    pub first: u32,
    pub count: u32,
    pub carried: Vec<Carry>,
    pub body: Vec<Stmt>,
    /// A reverse sweep's loop: the iterations run last first, and the body recomputes its
    /// iteration's values from the bookmarks (its [`Stmt::OpaqueRead`]s) before its adjoint rules.
    /// Its `carried` is empty; the adjoints it updates that live outside it are
    /// [`Loop::outer_adjoints`].
    pub reverse: bool,
}

impl Loop {
    /// A comment for the reader of generated source: the iterations and the region.
    pub fn note(&self) -> String {
        format!(
            "iterations {}..{} of %{}..%{} ({} nodes each){}",
            self.first,
            self.first + self.count,
            self.region.start,
            self.region.end,
            self.period,
            if self.reverse { ", last first" } else { "" }
        )
    }

    /// The adjoints (name, lane) a reverse loop's body updates that are declared outside it
    /// (the carried ones and those of values before the region), in order of first update:
    /// what an SSA lowering passes round the loop.
    pub fn outer_adjoints(&self) -> Vec<(Grad, Lane)> {
        let mut local: Vec<(Grad, Lane)> = Vec::new();
        let mut outer: Vec<(Grad, Lane)> = Vec::new();
        let mut note = |g: Grad, lane: Lane, local: &[(Grad, Lane)]| {
            if !local.contains(&(g, lane)) && !outer.contains(&(g, lane)) {
                outer.push((g, lane));
            }
        };
        for s in &self.body {
            match s {
                Stmt::DeclareAdjoints { grad, lanes } => {
                    local.extend(lanes.iter().map(|&l| (*grad, l)))
                }
                Stmt::Adjoint(a) => {
                    for g in a.to.iter().flatten() {
                        note(*g, a.lane, &local);
                    }
                }
                Stmt::MoveAdjoint { to, lane, .. } => note(*to, *lane, &local),
                _ => {}
            }
        }
        outer
    }
}

/// One carried variable of a [`Loop`].
#[derive(Copy, Clone, PartialEq, Debug)]
pub struct Carry {
    /// [`Var::Carried`] or [`Var::CarriedTangent`] of a body node.
    pub var: Var,
    /// Its value before the loop's first iteration (a literal zero where no iteration reads
    /// it: the rest of the tape reads only the last iteration's).
    pub init: Operand,
    /// What an iteration ends with: the body's `Var::Value` or `Var::Tangent` of the node.
    pub next: Operand,
}

/// One statement of the schedule (module doc).
#[derive(Clone, PartialEq, Debug)]
pub enum Stmt {
    /// A comment for the reader of generated source.
    Note(String),
    /// The persistent values, declared (not yet defined) in the enclosing scope.
    Declare(Vec<NodeId>),
    /// `Var::Value(node) = def`, declared here when `declare`, else assigned to its declaration.
    Define {
        node: NodeId,
        def: Def,
        declare: bool,
    },
    /// Store `var` in `slot` of this path ([`storage`]): a value crossing segments in the
    /// scratch buffer, or in a forward [`Loop`]'s body a carried value, as the iteration starts
    /// with it, in its bookmark (the iteration's slot of [`storage::Class::Local`]).
    Store {
        var: Var,
        slot: Slot,
    },
    /// Re-key the generator for the rest of the block: `key ^ zero`.
    Rekey,
    /// `Var::Copy(node) = opaque(value)`, the value read from slot `from` if any, else from
    /// `Var::Value(node)`. In a reverse [`Loop`]'s body `from` is the iteration's bookmark: the
    /// carried value of `node` the iteration started from in the forward sweep.
    OpaqueRead {
        node: NodeId,
        from: Option<Slot>,
    },
    /// The adjoint `grad` in `lanes`, declared and zero.
    DeclareAdjoints {
        grad: Grad,
        lanes: Vec<Lane>,
    },
    /// Adjoint `to` in `lane` takes the value of `from` (a reverse loop's iteration passing
    /// the previous iteration's adjoints on; after the loop, the first iteration's to the
    /// values it started from, whose adjoints are still zero there).
    MoveAdjoint {
        to: Grad,
        from: Grad,
        lane: Lane,
    },
    /// Node's adjoint in `lane` is 1 (an output's own lane).
    Seed {
        node: NodeId,
        lane: Lane,
    },
    Adjoint(Adjoint),
    /// `Var::Tangent(node, lane) = ...` (forward mode), declared here.
    Tangent(Tangent),
    Block(Block),
    Loop(Loop),
    /// The per-path leaves, in sum order.
    Leaves(Vec<Leaf>),
}

/// A kernel's schedule (module doc).
#[derive(Clone, PartialEq, Debug)]
pub struct Schedule {
    pub mode: Mode,
    /// The leaves include the Greeks' squares (`ScheduleOptions::greek_stderr` in a mode with
    /// Greeks).
    pub greek_stderr: bool,
    /// Lanes: one adjoint lane per output in reverse mode, one tangent direction per colour of
    /// inputs in forward mode (`passes::colour_inputs`; 1 in price mode, which uses none).
    pub lanes: usize,
    /// Segments of the checkpointed reverse sweep; 1 for a plain or price kernel.
    pub segments: usize,
    /// The checkpoint strategy; `Off` for a plain or price kernel.
    pub strategy: Checkpoint,
    /// Slots per path of each storage class ([`storage::assign`]): scratch under the scratch
    /// strategy, local with reverse loops (their bookmarks); 0 otherwise.
    pub storage: Storage,
    /// Calls of the exponential family take their arguments through the opaque identity
    /// (`passes::opaque_math_arguments`, decided per target by the opacity plan's rule).
    pub opaque_math: bool,
    pub body: Vec<Stmt>,
}

/// What the schedule is for.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct ScheduleOptions {
    pub mode: Mode,
    /// See [`Schedule::opaque_math`].
    pub opaque_math: bool,
    /// Sum the squares of the Greeks (`greek_sq:O:I`) for their standard errors (modes with
    /// Greeks only).
    pub greek_stderr: bool,
    /// Price and forward mode: the tape's loop regions (`passes::reroll`) as [`Loop`]s where
    /// their iterations repeat ([`loops`]), not unrolled.
    pub loops: bool,
}

impl ScheduleOptions {
    /// `mode`, no opaque math arguments, the Greeks' squares summed, unrolled.
    pub fn new(mode: Mode) -> Self {
        ScheduleOptions {
            mode,
            opaque_math: false,
            greek_stderr: true,
            loops: false,
        }
    }

    /// [`ScheduleOptions::new`] with the tape's loop regions as loops.
    pub fn looped(mode: Mode) -> Self {
        ScheduleOptions {
            loops: true,
            ..ScheduleOptions::new(mode)
        }
    }
}

/// The node in the tape's text form, for annotations of generated code: `%18 = exp %17`,
/// `%0 = input spot` (inputs without their default value).
pub fn describe(tape: &Tape, v: NodeId) -> String {
    let rhs = match *tape.node(v) {
        Node::Input(i) => format!("input {}", tape.inputs[i as usize].name),
        Node::Const(k) => format!("const {:?}", tape.consts[k as usize]),
        Node::Draw(DrawKind::Normal, k) => format!("normal {k}"),
        Node::Draw(DrawKind::Uniform, k) => format!("uniform {k}"),
        Node::Unary(_, a) => format!("{} {a}", tape.node(v).op().name()),
        Node::Binary(_, a, b) => format!("{} {a} {b}", tape.node(v).op().name()),
    };
    format!("{v} = {rhs}")
}

/// The tangent a rule passes on unchanged when only the arguments with `from` tangents feed it:
/// its only contributing step is `d(arg) += D` for an argument with a tangent, whose tangent it
/// then is (so forward mode defines no copy for `add`, or `sub` with a constant subtrahend).
fn passed_on(rule: &Rule, from: [Option<Operand>; 2]) -> Option<Operand> {
    let mut only = None;
    for step in rule.adjoint {
        match step {
            ops::Step::Acc(acc) => {
                let Some(t) = from[acc.arg.index()] else {
                    continue;
                };
                if only.is_some() || acc.sub || acc.expr != Expr::D {
                    return None;
                }
                only = Some(t);
            }
            // A branching step depends on the values, not only on the tangents.
            ops::Step::If(..) => return None,
        }
    }
    only
}

/// The lanes of a kernel in `mode`: an adjoint lane per output (reverse), a tangent direction
/// per colour of inputs (forward, `colouring`), one otherwise.
fn lanes(tape: &Tape, mode: Mode, colouring: &Colouring) -> usize {
    match mode {
        Mode::Reverse => tape.outputs.len(),
        Mode::Forward => (colouring.colours as usize).max(1),
        Mode::Price => 1,
    }
}

/// The facts the builder reads, gathered once.
struct Builder<'a> {
    tape: &'a Tape,
    live: &'a [bool],
    active: &'a [bool],
    info: &'a TapeInfo,
    mode: Mode,
    lanes: usize,
    /// Sum the Greeks' squares (`ScheduleOptions::greek_stderr`).
    greek_stderr: bool,
    /// The markets of a laddered tape (`crate::ladder`); `None`: one market.
    ladder: Option<&'a crate::ladder::Ladder>,
}

impl Builder<'_> {
    fn live(&self, v: NodeId) -> bool {
        self.live[v.index()]
    }

    fn active(&self, v: NodeId) -> bool {
        self.active[v.index()] && self.live(v)
    }

    fn is_const(&self, v: NodeId) -> bool {
        matches!(self.tape.node(v), Node::Const(_))
    }

    /// Does `v` carry an adjoint in lane `o` (active, and in output o's differentiable cone)?
    fn in_lane(&self, v: NodeId, o: Lane) -> bool {
        self.active(v) && self.info.in_cone(o, v)
    }

    /// Node `v` as an operand: a constant's literal, else the value `name` gives it.
    fn operand(&self, v: NodeId, name: &dyn Fn(NodeId) -> Var) -> Operand {
        match *self.tape.node(v) {
            Node::Const(k) => Operand::Lit(self.tape.consts[k as usize]),
            _ => Operand::Var(name(v)),
        }
    }

    /// How node `v` (live, not a constant) is computed, its arguments read through `name`.
    fn def(&self, v: NodeId, name: &dyn Fn(NodeId) -> Var, key: Key) -> Def {
        match *self.tape.node(v) {
            Node::Input(i) => Def::Input(self.ladder.map_or(i, |l| l.input_slot[i as usize])),
            Node::Draw(kind, index) => Def::Draw {
                kind,
                index,
                stride: 0,
                key,
            },
            node => {
                let rule = ops::rule(node.op()).expect("arithmetic ops have rules");
                let mut args = node.args().map(|a| self.operand(a, name));
                Def::Rule {
                    rule,
                    args: [args.next(), args.next()],
                }
            }
        }
    }

    /// The operands `[A, B, C]` a rule of node `v` reads: its arguments and its own value, through
    /// `name`.
    fn rule_operands(&self, v: NodeId, name: &dyn Fn(NodeId) -> Var) -> [Option<Operand>; 3] {
        let mut args = self.tape.node(v).args();
        [
            args.next().map(|a| self.operand(a, name)),
            args.next().map(|a| self.operand(a, name)),
            Some(Operand::Var(name(v))),
        ]
    }

    fn define(&self, v: NodeId, name: &dyn Fn(NodeId) -> Var, key: Key, declare: bool) -> Stmt {
        Stmt::Define {
            node: v,
            def: self.def(v, name, key),
            declare,
        }
    }

    /// `DeclareAdjoints` for the lanes of `v` (nothing when it has none).
    fn declare_adjoints(&self, out: &mut Vec<Stmt>, v: NodeId) {
        let lanes: Vec<Lane> = (0..self.lanes).filter(|&o| self.in_lane(v, o)).collect();
        if !lanes.is_empty() {
            out.push(Stmt::DeclareAdjoints {
                grad: Grad::Of(v),
                lanes,
            });
        }
    }

    /// Seeds each output's own lane (outputs that depend on no input have no adjoint).
    fn seeds(&self, out: &mut Vec<Stmt>) {
        for (o, output) in self.tape.outputs.iter().enumerate() {
            if self.active(output.node) {
                out.push(Stmt::Seed {
                    node: output.node,
                    lane: o,
                });
            }
        }
    }

    /// The adjoint rules of node `v` (live, active) in every lane it has, reading through `name`.
    fn adjoints(&self, out: &mut Vec<Stmt>, v: NodeId, name: &dyn Fn(NodeId) -> Var) {
        let node = *self.tape.node(v);
        // Leaves read nothing; an input's adjoint is its Greek and stays where it is.
        let Some(rule) = ops::rule(node.op()) else {
            return;
        };
        let args: Vec<NodeId> = node.args().collect();
        let to = [0, 1].map(|i| {
            args.get(i)
                .copied()
                .filter(|&a| self.active(a))
                .map(Grad::Of)
        });
        if to == [None, None] {
            return;
        }
        let x = self.rule_operands(v, name);
        for lane in (0..self.lanes).filter(|&o| self.in_lane(v, o)) {
            out.push(Stmt::Adjoint(Adjoint {
                node: v,
                lane,
                rule,
                x,
                to,
            }));
        }
    }

    /// The leaves in sum order (`manifest::sum_names`), market by market for a laddered tape
    /// (`crate::ladder`): per output its value and its square about the output's first shift,
    /// when the mode has Greeks `greek(o, i)` for every input i (and their squares about the next
    /// shifts when `greek_stderr`), and the non-finite count; `o` and `i` index this tape's
    /// outputs and inputs (a market's copies). A Greek no adjoint or tangent reaches (the input
    /// outside output o's cone) is zero whatever `greek` says, and so is its square. Shifts are
    /// numbered as `manifest::shift_names` lists them, market by market, after the markets in the
    /// inputs buffer.
    fn leaves(&self, greek: &dyn Fn(usize, usize) -> Leaf) -> Stmt {
        let (markets, base) = match self.ladder {
            Some(l) => (l.markets as usize, &l.base),
            None => (1, self.tape),
        };
        let output_of = |m: usize, o: usize| self.ladder.map_or(o, |l| l.output_of[m][o]);
        let input_of = |m: usize, i: usize| self.ladder.map_or(i, |l| l.input_of[m][i] as usize);
        let n_in = base.inputs.len();
        let mut leaves = Vec::new();
        let mut shift = (markets * n_in) as u32;
        let mut next_shift = || {
            shift += 1;
            shift - 1
        };
        for m in 0..markets {
            for o in 0..base.outputs.len() {
                let lo = output_of(m, o);
                let first = leaves.len();
                let out_node = self.tape.outputs[lo].node;
                leaves.push(Leaf::Value(self.operand(out_node, &Var::Value)));
                leaves.push(Leaf::Square {
                    of: first,
                    shift: next_shift(),
                });
                if self.mode.has_greeks() {
                    for i in 0..n_in {
                        let li = input_of(m, i);
                        leaves.push(if self.in_lane(self.info.input_nodes[li], lo) {
                            greek(lo, li)
                        } else {
                            Leaf::Zero
                        });
                    }
                    if self.greek_stderr {
                        for g in first + 2..first + 2 + n_in {
                            let shift = next_shift();
                            leaves.push(match leaves[g] {
                                Leaf::Zero => Leaf::Zero,
                                _ => Leaf::Square { of: g, shift },
                            });
                        }
                    }
                }
                let end = leaves.len();
                leaves.push(Leaf::NonFinite { first, end });
            }
        }
        Stmt::Leaves(leaves)
    }

    /// Reverse mode's Greek: output o's lane's adjoint of input i.
    fn adjoint_greek(&self, o: usize, i: usize) -> Leaf {
        Leaf::Adjoint(self.info.input_nodes[i], o)
    }

    fn plain(&self) -> Vec<Stmt> {
        let mut out = vec![Stmt::Note("forward sweep".into())];
        for v in self.tape.ids() {
            if self.live(v) && !self.is_const(v) {
                out.push(self.define(v, &Var::Value, Key::Kernel, true));
            }
        }
        if self.mode == Mode::Reverse {
            out.push(Stmt::Note("reverse sweep".into()));
            for v in self.tape.ids() {
                self.declare_adjoints(&mut out, v);
            }
            self.seeds(&mut out);
            for v in self.tape.ids().rev().filter(|&v| self.active(v)) {
                self.adjoints(&mut out, v, &Var::Value);
            }
        }
        out.push(Stmt::Note("leaves".into()));
        out.push(self.leaves(&|o, i| self.adjoint_greek(o, i)));
        out
    }

    /// Forward mode: one sweep defining each value and, right after it, its tangent in every
    /// direction where it is not structurally zero (an input seeds 1, a literal, in its colour's
    /// direction); the leaves take each output's tangent in input i's direction as its Greek
    /// with respect to i (colouring guarantees no other input of that direction reaches it).
    fn forward(&self, colouring: &Colouring) -> Vec<Stmt> {
        let n_in = self.tape.inputs.len();
        let directions = self.lanes;
        // Each node's tangent per direction: its operand, and whether it is relative
        // (`ops::Relative`: t = value · operand); `None` where it is structurally zero.
        let mut tangent: Vec<Vec<Option<(Operand, bool)>>> = vec![Vec::new(); self.tape.len()];
        let keeps_relative = self.keeps_relative();
        let mut out = vec![Stmt::Note(if directions == n_in {
            format!("forward sweep with {directions} tangent directions, one per input")
        } else {
            format!(
                "forward sweep with {directions} tangent directions for {n_in} inputs \
                 (inputs that meet in no output share one)"
            )
        })];
        for v in self.tape.ids() {
            if !self.live(v) || self.is_const(v) {
                continue;
            }
            out.push(self.define(v, &Var::Value, Key::Kernel, true));
            if !self.active(v) {
                continue;
            }
            let node = *self.tape.node(v);
            let mut t = vec![None; directions];
            if let Node::Input(i) = node {
                if let Some(c) = colouring.colour[i as usize] {
                    t[c as usize] = Some((Operand::Lit(1.0), false));
                }
            } else if let Some(rule) = ops::rule(node.op()) {
                let args: Vec<NodeId> = node.args().collect();
                let x = self.rule_operands(v, &Var::Value);
                for (lane, slot) in t.iter_mut().enumerate() {
                    let arg = [0, 1].map(|k| {
                        args.get(k)
                            .and_then(|a| tangent[a.index()].get(lane).copied().flatten())
                    });
                    if arg == [None, None] {
                        continue;
                    }
                    let from = arg.map(|a| a.map(|(t, _)| t));
                    let has = arg.map(|a| a.is_some());
                    let rel = arg.map(|a| a.is_some_and(|(_, r)| r));
                    let relative = keeps_relative[v.index()]
                        .then(|| ops::relative_tangent(node.op(), has, rel))
                        .flatten();
                    let rule = match relative {
                        Some(ops::Relative::PassOn(k)) => {
                            *slot = Some((from[k.index()].expect("an argument's tangent"), true));
                            continue;
                        }
                        Some(ops::Relative::Rule(r)) => r,
                        None if rel == [false, false] => {
                            // A rule that passes one argument's tangent on unchanged (add, sub's
                            // first argument, ...) names it again rather than copying it.
                            if let Some(same) = passed_on(rule, from) {
                                *slot = Some((same, false));
                                continue;
                            }
                            rule
                        }
                        None => ops::absolute_tangent(node.op(), rel)
                            .expect("a relative tangent reaches only ops that take one"),
                    };
                    out.push(Stmt::Tangent(Tangent {
                        node: v,
                        lane,
                        rule,
                        x,
                        from,
                    }));
                    *slot = Some((Operand::Var(Var::Tangent(v, lane)), relative.is_some()));
                }
            }
            tangent[v.index()] = t;
        }
        out.push(Stmt::Note("leaves".into()));
        // The output's tangent in input i's direction is d output / d input i: no other input of
        // that colour reaches this output.
        out.push(self.leaves(&|o, i| {
            let out_node = self.tape.outputs[o].node;
            colouring.colour[i]
                .and_then(|c| tangent[out_node.index()].get(c as usize).copied().flatten())
                .map_or(Leaf::Zero, |(t, relative)| {
                    debug_assert!(!relative, "an output's tangent is absolute");
                    Leaf::Value(t)
                })
        }));
        out
    }

    /// Which nodes may keep a relative tangent (`ops::Relative`): those whose every consumer's
    /// rule takes one (`ops::takes_relative`) and that are no output (a Greek is absolute).
    fn keeps_relative(&self) -> Vec<bool> {
        let mut keeps = vec![true; self.tape.len()];
        for v in self.tape.ids() {
            let op = self.tape.node(v).op();
            for a in self.tape.node(v).args() {
                keeps[a.index()] &= ops::takes_relative(op);
            }
        }
        for o in &self.tape.outputs {
            keeps[o.node.index()] = false;
        }
        keeps
    }

    fn checkpointed(&self, plan: &Plan) -> Vec<Stmt> {
        let sp = &plan.segments;
        let is_persistent = sp.persistent_mask(self.tape.len());
        // The plan's storage for the values crossing segments: scratch under its scratch
        // strategy (`storage::assign` lays the slots out), registers otherwise.
        let mut slot_of = vec![None; self.tape.len()];
        if sp.strategy == Checkpoint::Scratch {
            for v in &sp.scratch_slots {
                slot_of[v.index()] = Some(Slot::of(Class::Scratch));
            }
        }
        let top: Vec<NodeId> = sp
            .persistent
            .iter()
            .copied()
            .filter(|&v| self.live(v) && !self.is_const(v))
            .collect();
        let count = sp.segments.len();
        let mut out = vec![
            Stmt::Note(format!("{} persistent values", top.len())),
            Stmt::Declare(top.clone()),
            Stmt::Note(format!(
                "forward sweep: {count} segments; a block's locals die at its closing brace"
            )),
        ];
        for (s, seg) in sp.segments.iter().enumerate() {
            let mut body = Vec::new();
            for v in seg.range.clone().map(NodeId) {
                if !self.live(v) || self.is_const(v) {
                    continue;
                }
                let persistent = is_persistent[v.index()];
                body.push(self.define(v, &Var::Value, Key::Kernel, !persistent));
                if let Some(slot) = slot_of[v.index()] {
                    body.push(Stmt::Store {
                        var: Var::Value(v),
                        slot,
                    });
                }
            }
            out.push(Stmt::Block(Block {
                note: format!("segment {s}: %{}..%{}", seg.range.start, seg.range.end),
                range: seg.range.clone(),
                body,
            }));
        }
        out.push(Stmt::Note(
            "reverse sweep: last segment first; adjoints of persistent values live at top level"
                .into(),
        ));
        for &v in &top {
            self.declare_adjoints(&mut out, v);
        }
        self.seeds(&mut out);
        for s in (0..count).rev() {
            let seg = &sp.segments[s];
            let mut body = Vec::new();
            let key = if plan.opacity.rekey[s] {
                body.push(Stmt::Rekey);
                Key::Rekeyed
            } else {
                Key::Kernel
            };
            let mut opaque = vec![false; self.tape.len()];
            let mut reads: Vec<NodeId> = plan.opacity.opaque_reads[s].clone();
            reads.sort_unstable();
            reads.dedup();
            for r in reads {
                opaque[r.index()] = true;
                if self.live(r) && !self.is_const(r) {
                    body.push(Stmt::OpaqueRead {
                        node: r,
                        from: slot_of[r.index()],
                    });
                }
            }
            let name = |v: NodeId| {
                if opaque[v.index()] {
                    Var::Copy(v)
                } else {
                    Var::Value(v)
                }
            };
            for &v in &seg.recompute {
                body.push(self.define(v, &name, key, true));
            }
            for v in seg.range.clone().map(NodeId) {
                if !is_persistent[v.index()] {
                    self.declare_adjoints(&mut body, v);
                }
            }
            for v in seg.range.clone().rev().map(NodeId) {
                if self.active(v) {
                    self.adjoints(&mut body, v, &name);
                }
            }
            out.push(Stmt::Block(Block {
                note: format!(
                    "segment {s} reverse: %{}..%{}",
                    seg.range.start, seg.range.end
                ),
                range: seg.range.clone(),
                body,
            }));
        }
        out.push(Stmt::Note("leaves".into()));
        out.push(self.leaves(&|o, i| self.adjoint_greek(o, i)));
        out
    }
}

impl Schedule {
    /// The schedule of the kernel for verified tape `v` under `plan` (from `passes::plan` on the
    /// same tape, its shape checked by the caller) in `opts.mode`: checkpointed when the plan has
    /// several segments and the mode is reverse, else plain.
    pub fn build(v: &Verified, plan: &Plan, opts: ScheduleOptions) -> Schedule {
        Self::new(v, &plan.activity, Some(plan), opts)
    }

    /// The plain schedule (one segment) of verified tape `v`: what the CPU code runs (forward mode:
    /// the forward schedule).
    pub fn plain(v: &Verified, opts: ScheduleOptions) -> Schedule {
        Self::new(v, &v.info().activity, None, opts)
    }

    fn new(
        v: &Verified,
        activity: &Activity,
        plan: Option<&Plan>,
        opts: ScheduleOptions,
    ) -> Schedule {
        let colouring = colour_inputs(v);
        let b = Builder {
            tape: v.tape(),
            live: &activity.live,
            active: &activity.active,
            info: v.info(),
            mode: opts.mode,
            lanes: lanes(v.tape(), opts.mode, &colouring),
            greek_stderr: opts.greek_stderr,
            ladder: v.ladder(),
        };
        // A reverse sweep with loops: the plain schedule rerolled, where some iteration loops
        // (it then needs no checkpoint plan: the loops' bookmarks take its place).
        let regions = || v.regions();
        // Each candidate body with its storage laid out (`storage::assign`).
        let laid_out = |mut body: Vec<Stmt>| {
            let storage = storage::assign(&mut body);
            (body, storage)
        };
        let looped_reverse = (opts.loops && opts.mode == Mode::Reverse)
            .then(|| loops::reroll_reverse(v.tape(), regions(), b.plain()))
            .flatten()
            .map(laid_out);
        // Under a checkpoint plan, only where the loops keep no more values alive than the
        // checkpointed sweep (a tape whose iterations mostly differ, the bucketed Asian's, keeps
        // its straight-line rest alive through the whole reverse sweep otherwise).
        let live = |body: &[Stmt]| {
            let mut s = Schedule::empty(opts);
            s.body = body.to_vec();
            maxlive::max_live(&s, v.tape().len())
        };
        // The checkpointed sweep, built once: the loops' rival, and the body where they lose.
        let checkpointed =
            plan.filter(|p| opts.mode == Mode::Reverse && p.segments.is_checkpointed());
        let checkpointed_body = checkpointed.map(|p| laid_out(b.checkpointed(p)));
        let looped_reverse = looped_reverse.filter(|(body, storage)| {
            storage.local <= MAX_BOOKMARKS
                && checkpointed_body
                    .as_ref()
                    .is_none_or(|(c, _)| live(body) <= live(c))
        });
        let checkpointed = checkpointed.filter(|_| looped_reverse.is_none());
        let (body, storage) = match (opts.mode, looped_reverse, checkpointed_body) {
            (_, Some(laid), _) => laid,
            (Mode::Forward, ..) => laid_out(b.forward(&colouring)),
            (_, None, Some(c)) => c,
            _ => laid_out(b.plain()),
        };
        // A straight-line price or forward sweep, rerolled where its iterations repeat (it
        // stores nothing).
        let body = if opts.loops && opts.mode != Mode::Reverse {
            loops::reroll(v.tape(), regions(), body)
        } else {
            body
        };
        let sp = checkpointed.map(|p| &p.segments);
        Schedule {
            mode: opts.mode,
            greek_stderr: opts.greek_stderr && opts.mode.has_greeks(),
            lanes: b.lanes,
            segments: sp.map_or(1, |sp| sp.segments.len()),
            strategy: sp.map_or(Checkpoint::Off, |sp| sp.strategy),
            storage,
            opaque_math: opts.opaque_math,
            body,
        }
    }

    /// A schedule of `opts` with no statements (what max_live of a candidate body reads).
    fn empty(opts: ScheduleOptions) -> Schedule {
        Schedule {
            mode: opts.mode,
            greek_stderr: opts.greek_stderr,
            lanes: 1,
            segments: 1,
            strategy: Checkpoint::Off,
            storage: Storage::default(),
            opaque_math: opts.opaque_math,
            body: Vec::new(),
        }
    }

    /// The per-path leaves: a row of sums (every market's, for a laddered tape).
    pub fn leaf_count(&self) -> usize {
        let mut n = 0;
        self.walk(&mut |s| {
            if let Stmt::Leaves(l) = s {
                n = l.len();
            }
        });
        n
    }

    /// Is this a checkpointed reverse kernel (values carried across segment blocks)?
    pub fn is_checkpointed(&self) -> bool {
        self.segments > 1
    }

    /// The definitions a CPU lowering runs once per call, before the paths (indexed by node):
    /// those of the top level that no draw reaches (`path_dependent`, the verifier's) and that
    /// read only literals and other such definitions, not a loop's values.
    pub fn hoisted(&self, path_dependent: &[bool]) -> Vec<bool> {
        let mut hoisted = vec![false; path_dependent.len()];
        for s in &self.body {
            if let Stmt::Define { node, def, .. } = s {
                let reads_hoisted = match def {
                    Def::Rule { args, .. } => args.iter().flatten().all(|a| match a {
                        Operand::Lit(_) => true,
                        Operand::Var(Var::Value(x)) => hoisted[x.index()],
                        Operand::Var(_) => false,
                    }),
                    Def::Input(_) | Def::Draw { .. } => true,
                };
                hoisted[node.index()] = !path_dependent[node.index()] && reads_hoisted;
            }
        }
        hoisted
    }

    /// Calls `f` on every statement, blocks before their contents, in order.
    pub fn walk(&self, f: &mut impl FnMut(&Stmt)) {
        fn go(stmts: &[Stmt], f: &mut impl FnMut(&Stmt)) {
            for s in stmts {
                f(s);
                match s {
                    Stmt::Block(b) => go(&b.body, f),
                    Stmt::Loop(l) => go(&l.body, f),
                    _ => {}
                }
            }
        }
        go(&self.body, f);
    }

    /// The rules the kernel's definitions use, each once, in order of first use (their value
    /// and adjoint expressions are what the kernel may call).
    pub fn rules(&self) -> Vec<&'static Rule> {
        let mut rules: Vec<&'static Rule> = Vec::new();
        self.walk(&mut |s| {
            if let Stmt::Define {
                def: Def::Rule { rule, .. },
                ..
            } = s
            {
                if !rules.iter().any(|r| std::ptr::eq(*r, *rule)) {
                    rules.push(rule);
                }
            }
        });
        rules
    }

    /// Does an adjoint or tangent statement use a chain factor (`ops::Expr::Chain`; the C-like
    /// kernels then define `Dialect::helpers`' chain_mul, chain_div and chain_fma)?
    pub fn uses_chain_factors(&self) -> bool {
        let mut used = false;
        self.walk(&mut |s| {
            let rule = match s {
                Stmt::Adjoint(a) => a.rule,
                Stmt::Tangent(t) => t.rule,
                _ => return,
            };
            rule.visit(&mut |e| used |= matches!(e, Expr::Chain(..)));
        });
        used
    }

    /// Does some rule of the kernel call `f`, or `pow` when `f` is `None`?
    pub fn calls(&self, f: Option<Fun>) -> bool {
        self.rules().iter().any(|rule| {
            let mut found = false;
            rule.visit(&mut |e| {
                found |= match (*e, f) {
                    (Expr::Call(g, _), Some(f)) => g == f,
                    (Expr::Pow(..), None) => true,
                    _ => false,
                }
            });
            found
        })
    }

    /// Which draw kinds the kernel makes: `(normal, uniform)`.
    pub fn draws(&self) -> (bool, bool) {
        let (mut normal, mut uniform) = (false, false);
        self.walk(&mut |s| {
            if let Stmt::Define {
                def: Def::Draw { kind, .. },
                ..
            } = s
            {
                match kind {
                    DrawKind::Normal => normal = true,
                    DrawKind::Uniform => uniform = true,
                }
            }
        });
        (normal, uniform)
    }

    /// Does the kernel pass the argument(s) of a call of `f` (`pow` when `None`) through the
    /// opaque identity? Where `opaque_math` says so, for the exponential family
    /// (`passes::OPAQUE_MATH`) and `pow`.
    pub fn opaque_call(&self, f: Option<Fun>) -> bool {
        self.opaque_math && f.is_none_or(|f| crate::passes::OPAQUE_MATH.contains(&f))
    }

    /// Does the kernel call the opaque identity (it is checkpointed, restores bookmarks, or it
    /// passes some call's arguments through it)?
    pub fn uses_opaque(&self) -> bool {
        self.is_checkpointed()
            || self.storage.local > 0
            || self.calls(None) && self.opaque_call(None)
            || crate::passes::OPAQUE_MATH
                .iter()
                .any(|&f| self.calls(Some(f)) && self.opaque_call(Some(f)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reverse kernel loops under the default plan while its bookmarks fit
    /// ([`MAX_BOOKMARKS`]: the Asian bookmarks its price each step), recomputes each step from
    /// them, and past that keeps the checkpointed sweep.
    #[test]
    fn reverse_kernels_loop_while_their_bookmarks_fit() {
        let reverse = |steps: u32| {
            let v = crate::passes::fixtures::asian(steps);
            let plan = crate::passes::plan(&v, &Default::default());
            Schedule::build(&v, &plan, ScheduleOptions::looped(Mode::Reverse))
        };
        let fits = reverse(MAX_BOOKMARKS);
        assert_eq!((fits.storage.local, fits.segments), (MAX_BOOKMARKS, 1));
        let loops: Vec<&Loop> = fits
            .body
            .iter()
            .filter_map(|s| match s {
                Stmt::Loop(l) => Some(l),
                _ => None,
            })
            .collect();
        assert_eq!(loops.len(), 2);
        assert!(!loops[0].reverse && loops[1].reverse);
        assert_eq!((loops[1].first, loops[1].count), (0, MAX_BOOKMARKS));
        let restores = loops[1]
            .body
            .iter()
            .filter(|s| {
                matches!(s, Stmt::OpaqueRead { from: Some(slot), .. } if slot.class == Class::Local)
            })
            .count();
        assert_eq!(restores, 1);
        let past = reverse(MAX_BOOKMARKS + 1);
        assert_eq!(past.storage.local, 0);
        assert!(past.is_checkpointed());
    }

    /// The corpus case `relative` runs every rule of relative tangents in forward mode (its
    /// Greeks equal reverse mode's and the f64 definition in the runtime's corpus tests), and
    /// the Asian path's prices and exps keep relative tangents: a step costs one add a direction
    /// for the path, one multiply-add for the running sum (`ops::Relative`).
    #[test]
    fn relative_tangents_cover_their_rules_and_the_gbm_path() {
        let cases = crate::corpus::load(&crate::corpus::dir()).unwrap();
        let case = cases
            .iter()
            .find(|c| c.name == "relative")
            .expect("corpus case relative");
        let s = Schedule::plain(&case.tape, ScheduleOptions::new(Mode::Forward));
        let mut used: Vec<&'static Rule> = Vec::new();
        s.walk(&mut |st| {
            if let Stmt::Tangent(t) = st {
                used.push(t.rule);
            }
        });
        for rule in ops::relative_rules() {
            assert!(
                used.iter().any(|&r| std::ptr::eq(r, rule)),
                "not run: {rule:?}"
            );
        }

        let per_step = |steps: u32| {
            use crate::products::{record, Market, Options, Product};
            let o = Options {
                steps,
                ..Options::defaults(Product::AsianCall)
            };
            let asian = record(Product::AsianCall, &o, &Market::default()).unwrap();
            let v = crate::verify::verify(asian).unwrap();
            let s = Schedule::plain(&v, ScheduleOptions::new(Mode::Forward));
            let mut tangents = 0;
            s.walk(&mut |st| tangents += usize::from(matches!(st, Stmt::Tangent(_))));
            tangents
        };
        // A step's definitions: the draw's term and the exponent's sum for vol and maturity (2
        // each; the C printers fuse them into one multiply-add), the path's relative tangent for
        // vol, maturity, rate (1 each: an add) and the spot's absolute one (a multiply), the
        // running sum's for the four (1 each): 12, where absolute tangents took 15 (18 operations).
        assert_eq!(per_step(13) - per_step(12), 12);
    }
}

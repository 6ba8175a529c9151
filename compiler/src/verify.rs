//! The verifier: checks every semantic rule of TAPE-FORMAT.md on an in-memory [`Tape`] and returns
//! the facts later stages need ([`TapeInfo`]).
//!
//! Contract:
//! - [`check`] is the one place where each semantic rule lives: names valid (`[A-Za-z_][A-Za-z0-9_]{0,63}`)
//!   and unique among inputs and among outputs; recorded values and constants finite; at least one
//!   output; output nodes, input, const and draw indices in range; arguments point backwards; each
//!   input index read by exactly one `input` node; `n_draws` = 1 + the highest draw index used (0 if
//!   none); every count fits in a u32. It never panics, whatever the tape holds.
//! - Checks run in a fixed order (inputs, outputs, consts, nodes in evaluation order, then the
//!   tape-wide rules), so the first broken rule reported is deterministic. In the binary layout this
//!   is also file order.
//! - Every [`VerifyError`] names the rule and its [`Place`] inside the tape; readers map the place to a
//!   byte offset or a line and column (`crate::format`), and [`annotate`] renders it as a marked
//!   listing for the command line.
//! - [`verify`] = [`check`] + the facts ([`TapeInfo`]): reader counts, the node of each input, each
//!   output's backward cone, which nodes depend on the path's draws, and the activity and liveness
//!   computed by `crate::passes` (not re-derived here). It returns a [`Verified`] tape, the only
//!   value that planning, compiling, emitting and the reference accept: nothing downstream
//!   re-validates a tape or recomputes one of these facts.

use crate::ops;
use crate::passes;
use crate::plan::{Activity, Liveness};
use crate::tape::{is_valid_name, node_statement, output_statement, Node, NodeId, Tape};
use std::collections::BTreeMap;

/// A tape that keeps every rule of TAPE-FORMAT.md, with its facts. Only [`verify`] makes one, so
/// holding a `Verified` is the proof; it reads as the tape it wraps (`Deref<Target = Tape>`).
#[derive(Clone, PartialEq, Debug)]
pub struct Verified {
    tape: Tape,
    info: TapeInfo,
    /// The ladder a laddered tape was expanded under (`crate::ladder::expand`); `None` for a
    /// one-market tape.
    ladder: Option<Box<crate::ladder::Ladder>>,
    /// The tape's loop regions, found on first use ([`Verified::regions`]).
    regions: RegionCache,
}

/// A cache of a fact derived from the tape: not part of the value (two tapes compare equal
/// whether or not either has computed it).
#[derive(Clone, Default, Debug)]
struct RegionCache(std::sync::OnceLock<Vec<passes::reroll::Region>>);

impl PartialEq for RegionCache {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Verified {
    /// The tape's loop regions of at least `schedule::LOOP_MIN_NODES` nodes
    /// ([`passes::reroll::reroll`]), found once: every schedule built of this tape (auto mode's
    /// candidates, the kernel) and the size rules read the same regions.
    pub fn regions(&self) -> &[passes::reroll::Region] {
        self.regions
            .0
            .get_or_init(|| passes::reroll::reroll(&self.tape, crate::schedule::LOOP_MIN_NODES))
    }

    /// The tape.
    pub fn tape(&self) -> &Tape {
        &self.tape
    }

    /// Its facts.
    pub fn info(&self) -> &TapeInfo {
        &self.info
    }

    /// How this tape maps onto its one-market tape, if it is a laddered one.
    pub fn ladder(&self) -> Option<&crate::ladder::Ladder> {
        self.ladder.as_deref()
    }

    /// The number of markets a kernel of this tape takes (1 unless laddered).
    pub fn markets(&self) -> u32 {
        self.ladder.as_ref().map_or(1, |l| l.markets)
    }

    /// The inputs that may differ between the markets of a laddered tape (empty otherwise), in
    /// input order: the manifest's `ladder_inputs`.
    pub fn ladder_inputs(&self) -> Vec<String> {
        self.ladder
            .as_ref()
            .map_or(Vec::new(), |l| l.varying_names())
    }

    /// The tape whose names, defaults and hash a host sees: the one-market tape of a laddered
    /// tape, else this one.
    pub fn base(&self) -> &Tape {
        self.ladder.as_ref().map_or(&self.tape, |l| &l.base)
    }

    /// This laddered tape, remembering `ladder` (only `ladder::expand` calls it).
    pub(crate) fn with_ladder(mut self, ladder: crate::ladder::Ladder) -> Verified {
        self.ladder = Some(Box::new(ladder));
        self
    }

    /// The tape back, giving up the proof.
    pub fn into_tape(self) -> Tape {
        self.tape
    }
}

impl std::ops::Deref for Verified {
    type Target = Tape;
    fn deref(&self) -> &Tape {
        &self.tape
    }
}

/// The most outputs x nodes whose cones `verify` keeps (one byte each: 128 MiB).
pub const MAX_CONE_CELLS: usize = 1 << 27;

/// What the later stages need to know about a verified tape.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct TapeInfo {
    /// `uses[i]`: how many argument slots read node i, plus how many outputs name it
    /// (`mul %1 %1` counts two).
    pub uses: Vec<u32>,
    /// `input_nodes[k]`: the one `input` node reading input k.
    pub input_nodes: Vec<NodeId>,
    /// `cones[o][v]`: output o depends differentiably on node v (v is the output, or a
    /// differentiable op in the cone reads v): the nodes whose adjoint in output o's lane can be
    /// nonzero are the active ones in its cone. Empty for a tape with one output, whose cone is
    /// `activity.active`, and for one of more than [`MAX_CONE_CELLS`] outputs x nodes (then
    /// every node counts as in every cone: colouring shares fewer directions, and a reverse
    /// kernel of such a tape is over `budget::STATEMENT_BUDGET` anyway).
    pub cones: Vec<Vec<bool>>,
    /// `path_dependent[v]`: node v is a draw or reads one, so it varies from path to path.
    pub path_dependent: Vec<bool>,
    /// From `passes::activity`.
    pub activity: Activity,
    /// From `passes::liveness`.
    pub liveness: Liveness,
}

impl TapeInfo {
    /// Is node `v` in output `o`'s differentiable cone? Every node is with one output (whose cone
    /// is the active set: combine with activity, as every caller does).
    pub fn in_cone(&self, o: usize, v: NodeId) -> bool {
        self.cones.get(o).is_none_or(|cone| cone[v.index()])
    }

    /// The most forward values alive at once (the maximum of `liveness.alive`; 0 for no nodes).
    pub fn max_live(&self) -> u32 {
        self.liveness.alive.iter().copied().max().unwrap_or(0)
    }
}

/// Which field of an input a rule is about.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum InputField {
    Name,
    Value,
}

/// Which field of an output a rule is about.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum OutputField {
    Name,
    Node,
}

/// Which field of a node a rule is about: the op, the first argument (or a leaf's index), the second.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum NodeField {
    Op,
    A,
    B,
}

/// Where in a tape a rule is broken, independent of any file form.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Place {
    /// The tape as a whole (a count, or "no outputs").
    Tape,
    /// The `n_draws` field.
    NDraws,
    Input {
        index: u32,
        field: InputField,
    },
    Output {
        index: u32,
        field: OutputField,
    },
    Const(u32),
    Node {
        id: NodeId,
        field: NodeField,
    },
}

/// A broken semantic rule, with the place. The message names the rule.
#[derive(Clone, PartialEq, Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("too many {what}: {count} (a tape holds at most 4294967295)")]
    TooMany { what: &'static str, count: usize },
    #[error("input {input}: invalid name {name:?} (names match [A-Za-z_][A-Za-z0-9_]{{0,63}})")]
    InvalidInputName { input: u32, name: String },
    #[error("input {input}: duplicate name `{name}` (also input {first}; input names are unique)")]
    DuplicateInputName {
        input: u32,
        first: u32,
        name: String,
    },
    #[error("input {input} (`{name}`): recorded value {value} is not finite")]
    NonFiniteValue {
        input: u32,
        name: String,
        value: f64,
    },
    #[error("output {output}: invalid name {name:?} (names match [A-Za-z_][A-Za-z0-9_]{{0,63}})")]
    InvalidOutputName { output: u32, name: String },
    #[error(
        "output {output}: duplicate name `{name}` (also output {first}; output names are unique)"
    )]
    DuplicateOutputName {
        output: u32,
        first: u32,
        name: String,
    },
    #[error(
        "output {output} (`{name}`): node {node} is out of range (the tape has {n_nodes} nodes)"
    )]
    OutputOutOfRange {
        output: u32,
        name: String,
        node: NodeId,
        n_nodes: usize,
    },
    #[error("no outputs (a tape has at least one output)")]
    NoOutputs,
    #[error("const {index}: value {value} is not finite")]
    NonFiniteConst { index: u32, value: f64 },
    #[error("{node}: input index {index} is out of range (the tape has {n_inputs} inputs)")]
    InputIndexOutOfRange {
        node: NodeId,
        index: u32,
        n_inputs: usize,
    },
    #[error("{node}: const index {index} is out of range (the const pool has {n_consts} entries)")]
    ConstIndexOutOfRange {
        node: NodeId,
        index: u32,
        n_consts: usize,
    },
    #[error("{node}: draw index {index} is not below n_draws = {n_draws}")]
    DrawIndexTooHigh {
        node: NodeId,
        index: u32,
        n_draws: u32,
    },
    #[error(
        "{node}: argument {slot} = {arg} does not point backwards (arguments name earlier nodes)"
    )]
    ArgNotBackwards {
        node: NodeId,
        slot: char,
        arg: NodeId,
    },
    #[error("{node}: input {input} is already read by {first} (each input index is used by exactly one input node)")]
    InputUsedTwice {
        node: NodeId,
        input: u32,
        first: NodeId,
    },
    #[error("input {input} (`{name}`) is read by no input node (each input index is used by exactly one input node)")]
    InputUnused { input: u32, name: String },
    #[error("n_draws = {n_draws}, but 1 + the highest draw index used is {expected}")]
    NDrawsMismatch { n_draws: u32, expected: u32 },
}

impl VerifyError {
    /// Where the rule is broken.
    pub fn place(&self) -> Place {
        use VerifyError::*;
        let node = |id: NodeId, field| Place::Node { id, field };
        match *self {
            TooMany { .. } | NoOutputs => Place::Tape,
            InvalidInputName { input, .. }
            | DuplicateInputName { input, .. }
            | InputUnused { input, .. } => Place::Input {
                index: input,
                field: InputField::Name,
            },
            NonFiniteValue { input, .. } => Place::Input {
                index: input,
                field: InputField::Value,
            },
            InvalidOutputName { output, .. } | DuplicateOutputName { output, .. } => {
                Place::Output {
                    index: output,
                    field: OutputField::Name,
                }
            }
            OutputOutOfRange { output, .. } => Place::Output {
                index: output,
                field: OutputField::Node,
            },
            NonFiniteConst { index, .. } => Place::Const(index),
            InputIndexOutOfRange { node: id, .. }
            | ConstIndexOutOfRange { node: id, .. }
            | DrawIndexTooHigh { node: id, .. }
            | InputUsedTwice { node: id, .. } => node(id, NodeField::A),
            ArgNotBackwards { node: id, slot, .. } => node(
                id,
                if slot == 'a' {
                    NodeField::A
                } else {
                    NodeField::B
                },
            ),
            NDrawsMismatch { .. } => Place::NDraws,
        }
    }

    /// The node the rule is about, if it is about one.
    pub fn node(&self) -> Option<NodeId> {
        match self.place() {
            Place::Node { id, .. } => Some(id),
            _ => None,
        }
    }
}

/// Checks every semantic rule (module doc) and returns the first one broken, in the fixed order.
pub fn check(tape: &Tape) -> Result<(), VerifyError> {
    let counts = [
        ("nodes", tape.nodes.len()),
        ("inputs", tape.inputs.len()),
        ("outputs", tape.outputs.len()),
        ("consts", tape.consts.len()),
    ];
    for (what, count) in counts {
        if u32::try_from(count).is_err() {
            return Err(VerifyError::TooMany { what, count });
        }
    }
    // Indices below fit in u32 now.
    let mut seen: BTreeMap<&str, u32> = BTreeMap::new();
    for (k, input) in tape.inputs.iter().enumerate() {
        let k = k as u32;
        if !is_valid_name(&input.name) {
            return Err(VerifyError::InvalidInputName {
                input: k,
                name: input.name.clone(),
            });
        }
        if let Some(&first) = seen.get(input.name.as_str()) {
            return Err(VerifyError::DuplicateInputName {
                input: k,
                first,
                name: input.name.clone(),
            });
        }
        seen.insert(&input.name, k);
        if !input.value.is_finite() {
            return Err(VerifyError::NonFiniteValue {
                input: k,
                name: input.name.clone(),
                value: input.value,
            });
        }
    }
    let mut seen: BTreeMap<&str, u32> = BTreeMap::new();
    for (j, output) in tape.outputs.iter().enumerate() {
        let j = j as u32;
        if !is_valid_name(&output.name) {
            return Err(VerifyError::InvalidOutputName {
                output: j,
                name: output.name.clone(),
            });
        }
        if let Some(&first) = seen.get(output.name.as_str()) {
            return Err(VerifyError::DuplicateOutputName {
                output: j,
                first,
                name: output.name.clone(),
            });
        }
        seen.insert(&output.name, j);
        if output.node.index() >= tape.nodes.len() {
            return Err(VerifyError::OutputOutOfRange {
                output: j,
                name: output.name.clone(),
                node: output.node,
                n_nodes: tape.nodes.len(),
            });
        }
    }
    if tape.outputs.is_empty() {
        return Err(VerifyError::NoOutputs);
    }
    for (k, &value) in tape.consts.iter().enumerate() {
        if !value.is_finite() {
            return Err(VerifyError::NonFiniteConst {
                index: k as u32,
                value,
            });
        }
    }
    let mut input_node: Vec<Option<NodeId>> = vec![None; tape.inputs.len()];
    for (i, node) in tape.nodes.iter().enumerate() {
        let id = NodeId(i as u32);
        match *node {
            Node::Input(k) => match input_node.get_mut(k as usize) {
                None => {
                    return Err(VerifyError::InputIndexOutOfRange {
                        node: id,
                        index: k,
                        n_inputs: tape.inputs.len(),
                    })
                }
                Some(Some(first)) => {
                    return Err(VerifyError::InputUsedTwice {
                        node: id,
                        input: k,
                        first: *first,
                    })
                }
                Some(slot) => *slot = Some(id),
            },
            Node::Const(k) => {
                if k as usize >= tape.consts.len() {
                    return Err(VerifyError::ConstIndexOutOfRange {
                        node: id,
                        index: k,
                        n_consts: tape.consts.len(),
                    });
                }
            }
            Node::Draw(_, k) => {
                if k >= tape.n_draws {
                    return Err(VerifyError::DrawIndexTooHigh {
                        node: id,
                        index: k,
                        n_draws: tape.n_draws,
                    });
                }
            }
            Node::Unary(_, a) => backwards(id, 'a', a)?,
            Node::Binary(_, a, b) => {
                backwards(id, 'a', a)?;
                backwards(id, 'b', b)?;
            }
        }
    }
    if let Some(k) = input_node.iter().position(Option::is_none) {
        return Err(VerifyError::InputUnused {
            input: k as u32,
            name: tape.inputs[k].name.clone(),
        });
    }
    let expected = tape.draws_used();
    if tape.n_draws != expected {
        return Err(VerifyError::NDrawsMismatch {
            n_draws: tape.n_draws,
            expected,
        });
    }
    Ok(())
}

fn backwards(node: NodeId, slot: char, arg: NodeId) -> Result<(), VerifyError> {
    if arg < node {
        Ok(())
    } else {
        Err(VerifyError::ArgNotBackwards { node, slot, arg })
    }
}

/// Checks every rule ([`check`]) and, for a valid tape, returns it [`Verified`], with its facts.
pub fn verify(tape: Tape) -> Result<Verified, VerifyError> {
    check(&tape)?;
    let mut uses = vec![0u32; tape.len()];
    let mut input_nodes = vec![NodeId(0); tape.inputs.len()];
    let mut path_dependent = vec![false; tape.len()];
    for (i, node) in tape.nodes.iter().enumerate() {
        if let Node::Input(k) = *node {
            input_nodes[k as usize] = NodeId(i as u32);
        }
        for a in node.args() {
            uses[a.index()] = uses[a.index()].saturating_add(1);
        }
        path_dependent[i] =
            matches!(node, Node::Draw(..)) || node.args().any(|a| path_dependent[a.index()]);
    }
    for out in &tape.outputs {
        uses[out.node.index()] = uses[out.node.index()].saturating_add(1);
    }
    let cones = if tape.outputs.len() < 2
        || tape.outputs.len().saturating_mul(tape.len()) > MAX_CONE_CELLS
    {
        Vec::new()
    } else {
        tape.outputs
            .iter()
            .map(|out| {
                let mut cone = vec![false; tape.len()];
                cone[out.node.index()] = true;
                for v in tape.ids().rev() {
                    let node = tape.node(v);
                    let passes = ops::rule(node.op()).is_some_and(|r| r.is_differentiable());
                    if cone[v.index()] && passes {
                        for a in node.args() {
                            cone[a.index()] = true;
                        }
                    }
                }
                cone
            })
            .collect()
    };
    let info = TapeInfo {
        uses,
        input_nodes,
        cones,
        path_dependent,
        activity: passes::activity(&tape),
        liveness: passes::liveness(&tape),
    };
    Ok(Verified {
        tape,
        info,
        ladder: None,
        regions: RegionCache::default(),
    })
}

/// Lines of context printed before and after the marked statement.
const CONTEXT: usize = 3;

/// A few lines of the tape's text listing around `node`, the node's statement underlined with `^`
/// and followed by `; error: message` (the Cranelift verifier's style). Never panics: a node out of
/// range marks nothing and lists the tape's last lines; malformed nodes print with `?` markers.
pub fn annotate(tape: &Tape, node: NodeId, message: &str) -> String {
    let n = tape.len();
    let i = node.index();
    let (lo, hi) = if i < n {
        (i.saturating_sub(CONTEXT), (i + CONTEXT).min(n - 1))
    } else {
        (n.saturating_sub(CONTEXT), n.saturating_sub(1))
    };
    let mut out = String::new();
    if lo > 0 {
        out.push_str("  ...\n");
    }
    for p in lo..n.min(hi + 1) {
        let line = node_statement(tape, NodeId(p as u32));
        out.push_str("  ");
        out.push_str(&line);
        out.push('\n');
        if p == i {
            out.push_str("  ");
            out.push_str(&"^".repeat(line.chars().count().max(1)));
            out.push('\n');
            push_error(&mut out, message);
        }
    }
    if hi + 1 < n {
        out.push_str("  ...\n");
    }
    if i >= n {
        push_error(
            &mut out,
            &format!("{node} is not a node of this tape ({n} nodes): {message}"),
        );
    }
    out
}

fn push_error(out: &mut String, message: &str) {
    out.push_str("; error: ");
    out.push_str(message);
    out.push('\n');
}

/// Renders a verifier error for the command line: the message, then the marked listing when the
/// error is about a node or an output. Never panics.
pub fn render(tape: &Tape, err: &VerifyError) -> String {
    let message = err.to_string();
    match err.place() {
        Place::Node { id, .. } => annotate(tape, id, &message),
        Place::Output { index, .. } => match tape.outputs.get(index as usize) {
            Some(out) => {
                let line = output_statement(out);
                format!(
                    "  {line}\n  {}\n; error: {message}\n",
                    "^".repeat(line.chars().count())
                )
            }
            None => format!("; error: {message}\n"),
        },
        Place::Input { index, .. } => {
            // Point at the input's node when it has one.
            let at = tape
                .nodes
                .iter()
                .position(|n| *n == Node::Input(index))
                .map(|p| NodeId(p as u32));
            match at {
                Some(id) => annotate(tape, id, &message),
                None => format!("; error: {message}\n"),
            }
        }
        _ => format!("; error: {message}\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tape::{BinaryOp, DrawKind, Input, Output, UnaryOp};
    use crate::testing::{arb_tape, random_tape};
    use proptest::prelude::*;

    /// TAPE-FORMAT.md's example.
    fn example() -> Tape {
        Tape {
            inputs: vec![
                Input {
                    name: "spot".into(),
                    value: 100.0,
                },
                Input {
                    name: "strike".into(),
                    value: 95.0,
                },
            ],
            outputs: vec![Output {
                name: "payoff".into(),
                node: NodeId(6),
            }],
            consts: vec![0.5],
            nodes: vec![
                Node::Input(0),
                Node::Input(1),
                Node::Const(0),
                Node::Draw(DrawKind::Normal, 0),
                Node::Binary(BinaryOp::Mul, NodeId(0), NodeId(3)),
                Node::Binary(BinaryOp::Sub, NodeId(4), NodeId(1)),
                Node::Binary(BinaryOp::Max, NodeId(5), NodeId(2)),
            ],
            n_draws: 1,
        }
    }

    fn err(tape: &Tape) -> VerifyError {
        check(tape).expect_err("tape should be refused")
    }

    #[test]
    fn example_info() {
        let t = example();
        let info = verify(t.clone()).unwrap().info().clone();
        assert_eq!(info.uses, [1, 1, 1, 1, 1, 1, 1]);
        assert_eq!(info.input_nodes, [NodeId(0), NodeId(1)]);
        assert_eq!(
            info.activity.active,
            [true, true, false, false, true, true, true]
        );
        assert_eq!(info.activity.live, [true; 7]);
        assert_eq!(info.liveness, passes::liveness(&t));
        // before %4: spot, strike, 0.5, z alive; before %5: strike, 0.5, %4.
        assert_eq!(info.liveness.alive, [0, 1, 2, 3, 4, 3, 2, 1]);
        assert_eq!(info.max_live(), 4);
    }

    #[test]
    fn uses_count_every_slot_and_outputs() {
        let mut t = example();
        t.nodes
            .push(Node::Binary(BinaryOp::Mul, NodeId(6), NodeId(6)));
        t.outputs.push(Output {
            name: "sq".into(),
            node: NodeId(7),
        });
        t.outputs.push(Output {
            name: "again".into(),
            node: NodeId(7),
        });
        let info = verify(t.clone()).unwrap().info().clone();
        assert_eq!(info.uses, [1, 1, 1, 1, 1, 1, 3, 2]);
    }

    #[test]
    fn refusals_name_rule_and_place() {
        let mut t = example();
        t.inputs[1].name = "9x".into();
        let e = err(&t);
        assert_eq!(
            e.place(),
            Place::Input {
                index: 1,
                field: InputField::Name
            }
        );
        assert!(
            e.to_string().contains("input 1: invalid name \"9x\""),
            "{e}"
        );

        let mut t = example();
        t.inputs[1].name = "spot".into();
        let e = err(&t);
        assert_eq!(
            e,
            VerifyError::DuplicateInputName {
                input: 1,
                first: 0,
                name: "spot".into()
            }
        );
        assert!(
            e.to_string()
                .contains("duplicate name `spot` (also input 0"),
            "{e}"
        );

        let mut t = example();
        t.inputs[0].value = f64::NAN;
        let e = err(&t);
        assert_eq!(
            e.place(),
            Place::Input {
                index: 0,
                field: InputField::Value
            }
        );
        assert!(
            e.to_string()
                .contains("input 0 (`spot`): recorded value NaN is not finite"),
            "{e}"
        );

        let mut t = example();
        t.outputs[0].name = "a b".into();
        assert!(err(&t)
            .to_string()
            .contains("output 0: invalid name \"a b\""));

        let mut t = example();
        t.outputs.push(Output {
            name: "payoff".into(),
            node: NodeId(1),
        });
        let e = err(&t);
        assert_eq!(
            e.place(),
            Place::Output {
                index: 1,
                field: OutputField::Name
            }
        );
        assert!(
            e.to_string()
                .contains("output 1: duplicate name `payoff` (also output 0"),
            "{e}"
        );

        let mut t = example();
        t.outputs[0].node = NodeId(7);
        let e = err(&t);
        assert_eq!(
            e.place(),
            Place::Output {
                index: 0,
                field: OutputField::Node
            }
        );
        assert!(
            e.to_string()
                .contains("node %7 is out of range (the tape has 7 nodes)"),
            "{e}"
        );

        let mut t = example();
        t.outputs.clear();
        assert_eq!(err(&t), VerifyError::NoOutputs);
        assert!(err(&t).to_string().contains("no outputs"));

        let mut t = example();
        t.consts[0] = f64::INFINITY;
        let e = err(&t);
        assert_eq!(e.place(), Place::Const(0));
        assert!(
            e.to_string().contains("const 0: value inf is not finite"),
            "{e}"
        );

        let mut t = example();
        t.nodes[1] = Node::Input(2);
        let e = err(&t);
        assert_eq!(e.node(), Some(NodeId(1)));
        assert!(
            e.to_string()
                .contains("%1: input index 2 is out of range (the tape has 2 inputs)"),
            "{e}"
        );

        let mut t = example();
        t.nodes[2] = Node::Const(1);
        assert!(err(&t)
            .to_string()
            .contains("%2: const index 1 is out of range (the const pool has 1 entries)"));

        let mut t = example();
        t.nodes[3] = Node::Draw(DrawKind::Uniform, 1);
        let e = err(&t);
        assert_eq!(
            e,
            VerifyError::DrawIndexTooHigh {
                node: NodeId(3),
                index: 1,
                n_draws: 1
            }
        );
        assert!(e
            .to_string()
            .contains("%3: draw index 1 is not below n_draws = 1"));

        let mut t = example();
        t.n_draws = 3;
        let e = err(&t);
        assert_eq!(e.place(), Place::NDraws);
        assert!(
            e.to_string()
                .contains("n_draws = 3, but 1 + the highest draw index used is 1"),
            "{e}"
        );

        let mut t = example();
        t.nodes[5] = Node::Binary(BinaryOp::Sub, NodeId(4), NodeId(5));
        let e = err(&t);
        assert_eq!(
            e.place(),
            Place::Node {
                id: NodeId(5),
                field: NodeField::B
            }
        );
        assert!(
            e.to_string()
                .contains("%5: argument b = %5 does not point backwards"),
            "{e}"
        );

        let mut t = example();
        t.nodes[4] = Node::Unary(UnaryOp::Exp, NodeId(9));
        let e = err(&t);
        assert_eq!(
            e.place(),
            Place::Node {
                id: NodeId(4),
                field: NodeField::A
            }
        );
        assert!(
            e.to_string()
                .contains("%4: argument a = %9 does not point backwards"),
            "{e}"
        );

        let mut t = example();
        t.nodes[1] = Node::Input(0);
        let e = err(&t);
        assert!(
            e.to_string().contains("%1: input 0 is already read by %0"),
            "{e}"
        );

        let mut t = example();
        t.inputs.push(Input {
            name: "vol".into(),
            value: 0.2,
        });
        let e = err(&t);
        assert_eq!(
            e.place(),
            Place::Input {
                index: 2,
                field: InputField::Name
            }
        );
        assert!(
            e.to_string()
                .contains("input 2 (`vol`) is read by no input node"),
            "{e}"
        );
    }

    #[test]
    fn annotate_marks_the_node() {
        let t = example();
        let text = annotate(&t, NodeId(4), "boom");
        let expected = "  ...\n  %1 = input strike 95.0\n  %2 = const 0.5\n  %3 = normal 0\n  %4 = mul %0 %3\n  ^^^^^^^^^^^^^^\n; error: boom\n  %5 = sub %4 %1\n  %6 = max %5 %2\n";
        assert_eq!(text, expected);
        // Out-of-range and malformed tapes never panic.
        let out = annotate(&t, NodeId(99), "x");
        assert!(
            out.ends_with("; error: %99 is not a node of this tape (7 nodes): x\n"),
            "{out}"
        );
        assert!(annotate(&Tape::default(), NodeId(0), "x").contains("error"));
        let mut bad = example();
        bad.nodes[2] = Node::Const(7);
        bad.nodes[0] = Node::Input(9);
        let out = annotate(&bad, NodeId(2), "m");
        assert!(out.contains("%2 = const ?7"), "{out}");
        assert!(out.contains("%0 = input ?9"), "{out}");
        let e = err(&bad);
        let r = render(&bad, &e);
        assert!(
            r.contains("%0 = input ?9\n  ^^^^^^^^^^^^^\n; error: %0: input index 9"),
            "{r}"
        );
    }

    #[test]
    fn render_outputs() {
        let mut t = example();
        t.outputs[0].node = NodeId(70);
        let r = render(&t, &err(&t));
        let expected = format!(
            "  output payoff = %70\n  {}\n; error: output 0",
            "^".repeat(19)
        );
        assert!(r.starts_with(&expected), "{r}");
    }

    #[test]
    fn random_tapes_verify() {
        for seed in 0..20 {
            let t = random_tape(seed, 300);
            let info = verify(t.clone()).unwrap().info().clone();
            assert_eq!(info.input_nodes.len(), t.inputs.len());
            let total: u32 = info.uses.iter().sum();
            let slots: usize = t.nodes.iter().map(|n| n.args().count()).sum();
            assert_eq!(total as usize, slots + t.outputs.len());
        }
    }

    proptest! {
        #[test]
        fn arb_tapes_verify(tape in arb_tape()) {
            let info = verify(tape.clone()).unwrap().info().clone();
            for (k, id) in info.input_nodes.iter().enumerate() {
                prop_assert_eq!(tape.nodes[id.index()], Node::Input(k as u32));
            }
            prop_assert_eq!(info.max_live(), *info.liveness.alive.iter().max().unwrap());
        }

        /// Any tape, however broken, is checked without a panic; annotate and render never panic.
        #[test]
        fn check_never_panics(
            nodes in prop::collection::vec((0u8..40, 0u32..12, 0u32..12), 0..20),
            n_inputs in 0usize..3, n_consts in 0usize..3, n_draws in 0u32..4,
            outs in prop::collection::vec(0u32..25, 0..3),
        ) {
            let tape = Tape {
                inputs: (0..n_inputs).map(|k| Input { name: format!("i{}", k % 2), value: k as f64 }).collect(),
                outputs: outs.iter().map(|&n| Output { name: format!("o{n}"), node: NodeId(n) }).collect(),
                consts: (0..n_consts).map(|k| k as f64).collect(),
                nodes: nodes.iter().filter_map(|&(c, a, b)| Node::decode(c, a, b)).collect(),
                n_draws,
            };
            match check(&tape) {
                Ok(()) => { verify(tape.clone()).unwrap(); }
                Err(e) => { let _ = render(&tape, &e); }
            }
            let _ = annotate(&tape, NodeId(3), "x");
        }
    }
}

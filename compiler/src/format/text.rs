//! The text form (`.ntape`, TAPE-FORMAT.md "Text form"): one statement a line, `#` comments,
//! `nablatape 1` first, `%N = OP ARGS` nodes counting up from 0, then `output NAME = %N`.
//!
//! Tokens are separated by whitespace (so `%3=add` is one token, refused). Numbers: node references
//! and draw indices are ASCII digits that fit in a u32; values and constants are whatever Rust's f64
//! parser reads (non-finite results are refused by the verifier, at the literal). Inputs are numbered
//! by first appearance and constants pooled by bit pattern in order of first use, so the result is
//! always canonical (`format` module doc). Reading is one pass over the lines; memory is linear in
//! the text's length.

use super::{FormatError, Rule};
use crate::tape::{Input, Node, NodeId, Op, Output, Tape};
use crate::verify::{self, InputField, NodeField, OutputField, Place};
use std::collections::BTreeMap;

/// The header of a tape that needs format `version` (1 or 2): `nablatape 1`, `nablatape 2`.
pub fn header(version: u16) -> String {
    format!("nablatape {version}")
}

// The statements are the tape's own (`crate::tape`): the verifier's annotations print them too.
pub use crate::tape::{node_statement, output_statement};

/// Writes `tape` in the text form: the header, one line per node, one per output, each ending in
/// `\n`. For a valid tape, `read_text` of the result is `canonicalize(tape)`. Never panics.
pub fn write_text(tape: &Tape) -> String {
    let mut s = String::with_capacity(16 + 24 * (tape.nodes.len() + tape.outputs.len()));
    s.push_str(&header(tape.format()));
    s.push('\n');
    for id in 0..tape.nodes.len() {
        s.push_str(&node_statement(tape, NodeId(id as u32)));
        s.push('\n');
    }
    for out in &tape.outputs {
        s.push_str(&output_statement(out));
        s.push('\n');
    }
    s
}

/// A whitespace-separated token and its 1-based column (in characters).
#[derive(Copy, Clone)]
struct Token<'a> {
    text: &'a str,
    col: usize,
}

/// The tokens of a line before any `#`, and the column just after the last one.
fn tokenize(line: &str) -> (Vec<Token<'_>>, usize) {
    let line = match line.find('#') {
        Some(p) => &line[..p],
        None => line,
    };
    let mut tokens = Vec::new();
    let mut start: Option<(usize, usize)> = None; // (byte, col)
    let mut col = 0;
    for (byte, ch) in line.char_indices() {
        col += 1;
        if ch.is_whitespace() {
            if let Some((b, c)) = start.take() {
                tokens.push(Token {
                    text: &line[b..byte],
                    col: c,
                });
            }
        } else if start.is_none() {
            start = Some((byte, col));
        }
    }
    if let Some((b, c)) = start {
        tokens.push(Token {
            text: &line[b..],
            col: c,
        });
    }
    (tokens, col + 1)
}

/// ASCII digits that fit in a u32 (no sign, no spaces).
fn digits_u32(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Where each item of the tape was read, for mapping verifier places to lines and columns.
#[derive(Default)]
struct Positions {
    /// Per node: line, op column, first-argument column, second-argument column.
    nodes: Vec<(usize, usize, usize, usize)>,
    /// Per input: line, name column, value column.
    inputs: Vec<(usize, usize, usize)>,
    /// Per output: line, name column, node column.
    outputs: Vec<(usize, usize, usize)>,
    /// Per pool entry: line and column of its first literal.
    consts: Vec<(usize, usize)>,
    /// The line after the last.
    end: usize,
}

impl Positions {
    fn of(&self, place: Place) -> (usize, usize) {
        let k = |i: u32| i as usize;
        let fallback = (self.end, 1);
        match place {
            Place::Tape | Place::NDraws => fallback,
            Place::Input { index, field } => self
                .inputs
                .get(k(index))
                .map(|&(l, n, v)| (l, if field == InputField::Name { n } else { v }))
                .unwrap_or(fallback),
            Place::Output { index, field } => self
                .outputs
                .get(k(index))
                .map(|&(l, n, v)| (l, if field == OutputField::Name { n } else { v }))
                .unwrap_or(fallback),
            Place::Const(index) => self.consts.get(k(index)).copied().unwrap_or(fallback),
            Place::Node { id, field } => self
                .nodes
                .get(id.index())
                .map(|&(l, op, a, b)| {
                    (
                        l,
                        match field {
                            NodeField::Op => op,
                            NodeField::A => a,
                            NodeField::B => b,
                        },
                    )
                })
                .unwrap_or(fallback),
        }
    }
}

/// The reader's state between lines.
struct Reader {
    tape: Tape,
    pos: Positions,
    const_of_bits: BTreeMap<u64, u32>,
    /// The version the header declared; 0 before the header.
    version: u16,
    in_outputs: bool,
}

/// Reads a text tape (TAPE-FORMAT.md), checking every rule; refuses with the rule and the
/// `line:column`. The result is canonical. Never panics; memory is linear in `bytes.len()`.
pub fn read_text(bytes: &[u8]) -> Result<Tape, FormatError> {
    let text = match std::str::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            let good = &bytes[..e.valid_up_to()];
            let line = 1 + good.iter().filter(|&&b| b == b'\n').count();
            let line_start = good.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
            // The prefix is valid UTF-8, so this cannot fail; count characters for the column.
            let col = 1 + std::str::from_utf8(&good[line_start..]).map_or(0, |s| s.chars().count());
            return Err(FormatError::at_line(line, col, Rule::TextUtf8));
        }
    };
    let mut r = Reader {
        tape: Tape::default(),
        pos: Positions::default(),
        const_of_bits: BTreeMap::new(),
        version: 0,
        in_outputs: false,
    };
    let mut n_lines = 0;
    for (i, line) in text.split('\n').enumerate() {
        n_lines = i + 1;
        let line = line.strip_suffix('\r').unwrap_or(line);
        let (tokens, end_col) = tokenize(line);
        if tokens.is_empty() {
            continue;
        }
        r.statement(i + 1, &tokens, end_col)?;
    }
    r.pos.end = n_lines + 1;
    if r.version == 0 {
        return Err(FormatError::at_line(1, 1, Rule::MissingHeader));
    }
    // 1 + the highest draw index; an index of u32::MAX cannot be below any n_draws, and the verifier
    // says so at its node.
    r.tape.n_draws = r
        .tape
        .nodes
        .iter()
        .filter_map(|n| match *n {
            Node::Draw(_, k) => Some(k.saturating_add(1)),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    match verify::check(&r.tape) {
        Ok(()) => Ok(r.tape),
        Err(e) => {
            let (line, col) = r.pos.of(e.place());
            Err(FormatError::at_line(line, col, Rule::Verify(e)))
        }
    }
}

impl Reader {
    fn statement(&mut self, line: usize, t: &[Token], end_col: usize) -> Result<(), FormatError> {
        let err = |col: usize, rule: Rule| FormatError::at_line(line, col, rule);
        // The token at `i`, or "expected WHAT" at the end of the line.
        let need = |i: usize, what: &str| -> Result<Token, FormatError> {
            t.get(i)
                .copied()
                .ok_or_else(|| err(end_col, Rule::Expected(what.to_string())))
        };
        let no_more = |i: usize| -> Result<(), FormatError> {
            match t.get(i) {
                None => Ok(()),
                Some(tok) => {
                    let rest: Vec<&str> = t[i..].iter().map(|x| x.text).collect();
                    Err(err(tok.col, Rule::Trailing(rest.join(" "))))
                }
            }
        };
        let node_ref = |tok: Token| -> Result<(NodeId, usize), FormatError> {
            match tok.text.strip_prefix('%') {
                Some(d) => match digits_u32(d) {
                    Some(m) => Ok((NodeId(m), tok.col)),
                    None => Err(err(
                        tok.col,
                        Rule::BadLiteral {
                            what: "node reference",
                            found: tok.text.into(),
                        },
                    )),
                },
                None => Err(err(
                    tok.col,
                    Rule::Expected(format!("a node reference `%M`, found `{}`", tok.text)),
                )),
            }
        };

        if self.version == 0 {
            if t[0].text != "nablatape" {
                return Err(err(t[0].col, Rule::MissingHeader));
            }
            let v = need(1, "the version `1` or `2` after `nablatape`")?;
            self.version = match v.text {
                "1" => 1,
                "2" => 2,
                _ => return Err(err(v.col, Rule::TextVersion(v.text.into()))),
            };
            no_more(2)?;
            return Ok(());
        }

        if t[0].text == "output" {
            let name = need(1, "an output name")?;
            let eq = need(2, "`=` after the output name")?;
            if eq.text != "=" {
                return Err(err(
                    eq.col,
                    Rule::Expected(format!("`=`, found `{}`", eq.text)),
                ));
            }
            let (node, node_col) = node_ref(need(3, "the output's node `%N`")?)?;
            no_more(4)?;
            self.in_outputs = true;
            self.tape.outputs.push(Output {
                name: name.text.into(),
                node,
            });
            self.pos.outputs.push((line, name.col, node_col));
            return Ok(());
        }

        if t[0].text.starts_with('%') {
            if self.in_outputs {
                return Err(err(t[0].col, Rule::NodeAfterOutput));
            }
            let expected = self.tape.nodes.len();
            let found = t[0].text.strip_prefix('%').and_then(digits_u32);
            if found.map(|n| n as usize) != Some(expected) {
                let expected = u32::try_from(expected).unwrap_or(u32::MAX);
                return Err(err(
                    t[0].col,
                    Rule::Numbering {
                        expected,
                        found: t[0].text.into(),
                    },
                ));
            }
            let eq = need(1, "`=` after the node number")?;
            if eq.text != "=" {
                return Err(err(
                    eq.col,
                    Rule::Expected(format!("`=`, found `{}`", eq.text)),
                ));
            }
            let op_tok = need(2, "an op")?;
            let op = Op::from_name(op_tok.text)
                .ok_or_else(|| err(op_tok.col, Rule::UnknownOp(op_tok.text.into())))?;
            if op.format() > self.version {
                return Err(err(
                    op_tok.col,
                    Rule::OpNeedsVersion {
                        node: self.tape.nodes.len() as u32,
                        op: op.name(),
                        version: self.version,
                    },
                ));
            }
            let (node, a_col, b_col, next) = match op {
                Op::Input => {
                    let name = need(3, "the input's name")?;
                    let value = need(4, "the input's recorded value")?;
                    let v: f64 = value.text.parse().map_err(|_| {
                        err(
                            value.col,
                            Rule::BadLiteral {
                                what: "value",
                                found: value.text.into(),
                            },
                        )
                    })?;
                    let k = u32::try_from(self.tape.inputs.len()).unwrap_or(u32::MAX);
                    self.tape.inputs.push(Input {
                        name: name.text.into(),
                        value: v,
                    });
                    self.pos.inputs.push((line, name.col, value.col));
                    (Node::Input(k), name.col, name.col, 5)
                }
                Op::Const => {
                    let lit = need(3, "the constant")?;
                    let v: f64 = lit.text.parse().map_err(|_| {
                        err(
                            lit.col,
                            Rule::BadLiteral {
                                what: "const",
                                found: lit.text.into(),
                            },
                        )
                    })?;
                    let next = u32::try_from(self.tape.consts.len()).unwrap_or(u32::MAX);
                    let k = *self.const_of_bits.entry(v.to_bits()).or_insert(next);
                    if k == next {
                        self.tape.consts.push(v);
                        self.pos.consts.push((line, lit.col));
                    }
                    (Node::Const(k), lit.col, lit.col, 4)
                }
                Op::Normal | Op::Uniform => {
                    let tok = need(3, "the draw index")?;
                    let k = digits_u32(tok.text).ok_or_else(|| {
                        err(
                            tok.col,
                            Rule::BadLiteral {
                                what: "draw index",
                                found: tok.text.into(),
                            },
                        )
                    })?;
                    (Node::from_op(op, k, 0), tok.col, tok.col, 4)
                }
                _ if op.arity() == 1 => {
                    let (a, a_col) = node_ref(need(3, "the argument `%M`")?)?;
                    (Node::from_op(op, a.0, 0), a_col, a_col, 4)
                }
                _ => {
                    let (a, a_col) = node_ref(need(3, "the first argument `%M`")?)?;
                    let (b, b_col) = node_ref(need(4, "the second argument `%M`")?)?;
                    (Node::from_op(op, a.0, b.0), a_col, b_col, 5)
                }
            };
            no_more(next)?;
            self.tape.nodes.push(node);
            self.pos.nodes.push((line, op_tok.col, a_col, b_col));
            return Ok(());
        }

        Err(err(
            t[0].col,
            Rule::Expected(format!(
                "a statement `%N = OP ARGS` or `output NAME = %N`, found `{}`",
                t[0].text
            )),
        ))
    }
}

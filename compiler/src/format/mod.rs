//! Reading and writing tapes: the binary form (`.bin`) and the text form (`.ntape`), told apart by
//! content (the magic `NTAP`), never by file name. TAPE-FORMAT.md is the contract.
//!
//! # Reading
//!
//! [`read`] accepts every file that keeps every rule of TAPE-FORMAT.md and refuses every other with
//! a [`FormatError`] naming the broken rule and the place: a byte offset for the binary form, a
//! `line:column` (both 1-based, columns in characters) for the text form. Readers check the encoding
//! rules themselves (magic, version, flags, reserved, sizes, CRC, UTF-8, op codes, padding, syntax)
//! and leave every semantic rule to `crate::verify::check`, mapping its [`Place`] back to the file.
//! No reader panics, hangs, or allocates by a count it has not first checked against the bytes that
//! are actually there: a header claiming 4,000,000,000 nodes in a 40-byte file is refused after
//! reading 32 bytes.
//!
//! The binary reader checks in this order: header fields; the section walk (every length against the
//! remaining bytes; "truncated at offset X while reading Y"); the total size; the CRC; then the
//! contents (UTF-8 names, op codes, padding, unused arguments); then the semantic rules. So a flipped
//! bit anywhere but in a length field reports a CRC mismatch.
//!
//! # Canonical form
//!
//! The text form cannot carry the const-pool layout or the input numbering (it numbers inputs by
//! first appearance and writes constants inline), so the CANONICAL form of a tape is:
//!
//! - input nodes appear in input-index order (node of input 0 first, then input 1, ...);
//! - the const pool holds each distinct f64 bit pattern once, in order of first use, every entry
//!   used (`0.0` and `-0.0` are distinct entries).
//!
//! Everything else (names, values, node fields, outputs, `n_draws`) is carried by both forms as is.
//! The binary reader accepts any valid file, canonical or not, and returns the tape as stored;
//! the text reader always yields a canonical tape; [`canonicalize`] maps a tape to its canonical
//! form (same program, same results). Guarantees, for every valid tape `t`:
//!
//! - `read(&write_binary(t)) == t` and, for a valid binary `b`, `write_binary(&read(b)) == b`;
//! - `read(write_text(t).as_bytes()) == canonicalize(t)`;
//! - canonical binary → text → binary and text (as [`write_text`] prints it) → binary → text are
//!   byte-identical round trips;
//! - [`content_hash`] is the SHA-256 of the canonical binary, so both forms of a tape hash alike.
//!
//! Floats print in text with Rust's `{:?}` (the shortest string that parses back to the same bits:
//! `100.0`, `1e-7`, `-0.0`) and parse with Rust's `f64` parser.

pub mod binary;
pub mod text;

use crate::tape::{Node, Tape};
use crate::verify::VerifyError;
use sha2::{Digest, Sha256};
use std::fmt;

pub use binary::{read_binary, write_binary, MAGIC};
pub use text::{read_text, write_text};

/// Where in a file a rule is broken.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Location {
    /// A byte offset into a binary tape.
    Offset(u64),
    /// A 1-based line and column (in characters) of a text tape.
    LineCol { line: usize, col: usize },
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Location::Offset(o) => write!(f, "byte offset {o}"),
            Location::LineCol { line, col } => write!(f, "line {line}:{col}"),
        }
    }
}

/// Which rule a file breaks. Each rule has its own message.
#[derive(Clone, PartialEq, Debug, thiserror::Error)]
pub enum Rule {
    // --- binary encoding ---
    #[error("bad magic {found:?} (a binary tape starts with `NTAP`)")]
    BadMagic { found: Vec<u8> },
    #[error("unsupported version {0} (this reader knows versions 1 and 2)")]
    Version(u16),
    #[error("unknown flag bits {0:#06x} (flags must be 0 in version 1)")]
    UnknownFlags(u16),
    #[error("reserved field is {0:#010x} (must be 0)")]
    Reserved(u32),
    #[error("truncated while reading {what}: {needed} bytes needed, {left} left")]
    Truncated {
        what: String,
        needed: u64,
        left: u64,
    },
    #[error("sizes don't add up: the sections and the CRC end at byte {expected}, but the file has {actual} bytes")]
    SizeMismatch { expected: u64, actual: u64 },
    #[error(
        "CRC mismatch: stored {stored:#010x}, computed {computed:#010x} over the bytes before it"
    )]
    Crc { stored: u32, computed: u32 },
    #[error("{what}: name is not valid UTF-8")]
    BadUtf8 { what: String },
    #[error("unknown op code {code} at node %{node}")]
    UnknownOpCode { node: u32, code: u8 },
    #[error("node %{node}: op `{op}` needs tape format 2, but the tape says version {version}")]
    OpNeedsVersion {
        node: u32,
        op: &'static str,
        version: u16,
    },
    #[error("node %{node}: padding bytes must be 0, found {found:02x?}")]
    Padding { node: u32, found: [u8; 3] },
    #[error("node %{node}: unused argument b is {value} (an unused argument is 0)")]
    UnusedArg { node: u32, value: u32 },
    // --- text syntax ---
    #[error("the text is not valid UTF-8")]
    TextUtf8,
    #[error("missing header: the first statement must be `nablatape 1` or `nablatape 2`")]
    MissingHeader,
    #[error("unsupported version `{0}` (the header is `nablatape 1` or `nablatape 2`)")]
    TextVersion(String),
    #[error("node numbering gap: expected %{expected}, found `{found}` (nodes count up from %0)")]
    Numbering { expected: u32, found: String },
    #[error("unknown op `{0}`")]
    UnknownOp(String),
    #[error("bad {what} literal `{found}`")]
    BadLiteral { what: &'static str, found: String },
    #[error("expected {0}")]
    Expected(String),
    #[error("trailing tokens `{0}` after the statement")]
    Trailing(String),
    #[error("node statement after an output (outputs follow the nodes)")]
    NodeAfterOutput,
    // --- semantic rules, checked by the verifier ---
    #[error("{0}")]
    Verify(VerifyError),
}

/// A refused tape: the rule it breaks and where.
#[derive(Clone, PartialEq, Debug, thiserror::Error)]
#[error("{at}: {rule}")]
pub struct FormatError {
    pub at: Location,
    pub rule: Rule,
}

impl FormatError {
    pub(crate) fn at_offset(offset: u64, rule: Rule) -> FormatError {
        FormatError {
            at: Location::Offset(offset),
            rule,
        }
    }

    pub(crate) fn at_line(line: usize, col: usize, rule: Rule) -> FormatError {
        FormatError {
            at: Location::LineCol { line, col },
            rule,
        }
    }
}

/// Reads a tape in either form, told apart by the magic `NTAP`; the result has passed
/// `verify::check`. Bytes that look binary (a control byte among the first four) but lack the magic
/// are refused as a binary with a bad magic.
pub fn read(bytes: &[u8]) -> Result<Tape, FormatError> {
    let head = &bytes[..bytes.len().min(4)];
    let looks_binary = head
        .iter()
        .any(|&b| b < 0x20 && !matches!(b, b' ' | b'\t' | b'\r' | b'\n'));
    let truncated_magic = !bytes.is_empty() && bytes.len() < 4 && MAGIC.starts_with(bytes);
    if bytes.starts_with(&MAGIC) || looks_binary || truncated_magic {
        read_binary(bytes)
    } else {
        read_text(bytes)
    }
}

/// The canonical form of `tape` (module doc): input nodes in input-index order, the const pool
/// deduplicated by bit pattern in order of first use. Same program and results; idempotent. Never
/// panics: on a malformed tape, out-of-range input and const indices are left as they are and
/// unread inputs keep their relative order after the read ones.
pub fn canonicalize(tape: &Tape) -> Tape {
    let mut input_map: Vec<Option<u32>> = vec![None; tape.inputs.len()];
    let mut inputs = Vec::with_capacity(tape.inputs.len());
    let mut consts: Vec<f64> = Vec::new();
    let mut const_of_bits: std::collections::BTreeMap<u64, u32> = Default::default();
    let mut nodes = Vec::with_capacity(tape.nodes.len());
    for node in &tape.nodes {
        let node = match *node {
            Node::Input(k) => match input_map.get_mut(k as usize) {
                Some(slot @ None) => {
                    let new = inputs.len() as u32;
                    *slot = Some(new);
                    inputs.push(tape.inputs[k as usize].clone());
                    Node::Input(new)
                }
                Some(Some(new)) => Node::Input(*new),
                None => Node::Input(k),
            },
            Node::Const(k) => match tape.consts.get(k as usize) {
                Some(&v) => {
                    let next = consts.len() as u32;
                    let new = *const_of_bits.entry(v.to_bits()).or_insert(next);
                    if new == next {
                        consts.push(v);
                    }
                    Node::Const(new)
                }
                None => Node::Const(k),
            },
            other => other,
        };
        nodes.push(node);
    }
    for (k, slot) in input_map.iter().enumerate() {
        if slot.is_none() {
            inputs.push(tape.inputs[k].clone());
        }
    }
    Tape {
        inputs,
        outputs: tape.outputs.clone(),
        consts,
        nodes,
        n_draws: tape.n_draws,
    }
}

/// Whether `tape` is in canonical form (`canonicalize(tape)` writes the same bytes).
pub fn is_canonical(tape: &Tape) -> bool {
    write_binary(&canonicalize(tape)) == write_binary(tape)
}

/// The SHA-256 (lowercase hex, 64 characters) of the canonical binary form of `tape`: equal for a
/// tape and its canonical form, whichever form it was read from.
pub fn content_hash(tape: &Tape) -> String {
    let digest = Sha256::digest(write_binary(&canonicalize(tape)));
    let mut hex = String::with_capacity(64);
    for byte in digest.iter() {
        hex.push_str(&format!("{byte:02x}"));
    }
    hex
}

#[cfg(test)]
mod tests;

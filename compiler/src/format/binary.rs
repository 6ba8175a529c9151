//! The binary form (`.bin`, TAPE-FORMAT.md "Binary form"): little-endian, a 32-byte header, the
//! sections, a CRC-32 of everything before it.
//!
//! Reading happens in two passes over the bytes. The first walks the sections and checks every
//! length against the bytes left, without allocating; only when the sizes add up to the file
//! length and the CRC matches does the second pass allocate (by counts now known to fit in the file)
//! and decode. Every index is bounds-checked and all arithmetic on untrusted numbers is in u64 or
//! checked, so no input panics.

use super::{FormatError, Location, Rule};
use crate::tape::{Input, Node, NodeId, Output, Tape};
use crate::verify::{self, InputField, NodeField, OutputField, Place};

/// The first four bytes of every binary tape.
pub const MAGIC: [u8; 4] = *b"NTAP";
/// The newest version this crate reads; a writer writes `Tape::format()` (1 unless the tape uses
/// a format-2 op), so every version-1 tape stays byte-identical.
pub const VERSION: u16 = 2;
/// Header size in bytes.
pub const HEADER_LEN: usize = 32;
/// One node record: (u8 op, u8 0, u16 0, u32 a, u32 b).
pub const NODE_LEN: usize = 12;

/// A bounds-checked cursor: `pos <= bytes.len()` always.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn left(&self) -> u64 {
        (self.bytes.len() - self.pos) as u64
    }

    fn take(&mut self, n: u64, what: impl FnOnce() -> String) -> Result<&'a [u8], FormatError> {
        let left = self.left();
        if n > left {
            return Err(FormatError::at_offset(
                self.pos as u64,
                Rule::Truncated {
                    what: what(),
                    needed: n,
                    left,
                },
            ));
        }
        // n <= left fits in usize.
        let start = self.pos;
        self.pos += n as usize;
        Ok(&self.bytes[start..self.pos])
    }

    fn u16(&mut self, what: impl FnOnce() -> String) -> Result<u16, FormatError> {
        let b = self.take(2, what)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self, what: impl FnOnce() -> String) -> Result<u32, FormatError> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn f64(&mut self, what: impl FnOnce() -> String) -> Result<f64, FormatError> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(f64::from_le_bytes(a))
    }

    /// A u16 length, then that many bytes.
    fn name(&mut self, what: &dyn Fn() -> String) -> Result<&'a [u8], FormatError> {
        let len = self.u16(|| format!("{} length", what()))?;
        self.take(u64::from(len), what)
    }
}

struct Header {
    version: u16,
    n_inputs: u32,
    n_outputs: u32,
    n_consts: u32,
    n_nodes: u32,
    n_draws: u32,
}

fn read_header(c: &mut Cursor) -> Result<Header, FormatError> {
    let magic = c.take(4, || "the magic".into())?;
    if magic != MAGIC {
        return Err(FormatError::at_offset(
            0,
            Rule::BadMagic {
                found: magic.to_vec(),
            },
        ));
    }
    let version = c.u16(|| "the version".into())?;
    if !(1..=VERSION).contains(&version) {
        return Err(FormatError::at_offset(4, Rule::Version(version)));
    }
    let flags = c.u16(|| "the flags".into())?;
    if flags != 0 {
        return Err(FormatError::at_offset(6, Rule::UnknownFlags(flags)));
    }
    let n_inputs = c.u32(|| "n_inputs".into())?;
    let n_outputs = c.u32(|| "n_outputs".into())?;
    let n_consts = c.u32(|| "n_consts".into())?;
    let n_nodes = c.u32(|| "n_nodes".into())?;
    let n_draws = c.u32(|| "n_draws".into())?;
    let reserved = c.u32(|| "the reserved field".into())?;
    if reserved != 0 {
        return Err(FormatError::at_offset(28, Rule::Reserved(reserved)));
    }
    Ok(Header {
        version,
        n_inputs,
        n_outputs,
        n_consts,
        n_nodes,
        n_draws,
    })
}

/// Where each item starts, for mapping verifier places to offsets.
struct Offsets {
    inputs: Vec<u64>,
    input_values: Vec<u64>,
    outputs: Vec<u64>,
    consts: u64,
    nodes: u64,
}

/// Reads a binary tape (TAPE-FORMAT.md), checking every rule; refuses with the rule and the byte
/// offset. Never panics and never allocates more than a small multiple of `bytes.len()`.
pub fn read_binary(bytes: &[u8]) -> Result<Tape, FormatError> {
    // Pass 1: structure only, no allocation.
    let mut c = Cursor { bytes, pos: 0 };
    let h = read_header(&mut c)?;
    for k in 0..h.n_inputs {
        c.name(&|| format!("input {k} name"))?;
        c.take(8, || format!("input {k} value"))?;
    }
    for j in 0..h.n_outputs {
        c.take(4, || format!("output {j} node"))?;
        c.name(&|| format!("output {j} name"))?;
    }
    let n_consts = h.n_consts;
    c.take(u64::from(n_consts) * 8, || format!("{n_consts} consts"))?;
    let n_nodes = h.n_nodes;
    c.take(u64::from(n_nodes) * NODE_LEN as u64, || {
        format!("{n_nodes} nodes")
    })?;
    let crc_at = c.pos;
    let stored = c.u32(|| "the CRC".into())?;
    if c.pos != bytes.len() {
        return Err(FormatError::at_offset(
            c.pos as u64,
            Rule::SizeMismatch {
                expected: c.pos as u64,
                actual: bytes.len() as u64,
            },
        ));
    }
    let computed = crc32fast::hash(&bytes[..crc_at]);
    if stored != computed {
        return Err(FormatError::at_offset(
            crc_at as u64,
            Rule::Crc { stored, computed },
        ));
    }

    // Pass 2: decode. Every count now fits in the file, so allocating by it is safe.
    let mut c = Cursor {
        bytes,
        pos: HEADER_LEN,
    };
    let mut off = Offsets {
        inputs: Vec::with_capacity(h.n_inputs as usize),
        input_values: Vec::with_capacity(h.n_inputs as usize),
        outputs: Vec::with_capacity(h.n_outputs as usize),
        consts: 0,
        nodes: 0,
    };
    let mut inputs = Vec::with_capacity(h.n_inputs as usize);
    for k in 0..h.n_inputs {
        off.inputs.push(c.pos as u64);
        let what = || format!("input {k} name");
        let name_at = c.pos + 2;
        let name = decode_name(c.name(&what)?, name_at, what)?;
        off.input_values.push(c.pos as u64);
        let value = c.f64(|| format!("input {k} value"))?;
        inputs.push(Input { name, value });
    }
    let mut outputs = Vec::with_capacity(h.n_outputs as usize);
    for j in 0..h.n_outputs {
        off.outputs.push(c.pos as u64);
        let node = NodeId(c.u32(|| format!("output {j} node"))?);
        let what = || format!("output {j} name");
        let name_at = c.pos + 2;
        let name = decode_name(c.name(&what)?, name_at, what)?;
        outputs.push(Output { name, node });
    }
    off.consts = c.pos as u64;
    let mut consts = Vec::with_capacity(h.n_consts as usize);
    for k in 0..h.n_consts {
        consts.push(c.f64(|| format!("const {k}"))?);
    }
    off.nodes = c.pos as u64;
    let mut nodes = Vec::with_capacity(h.n_nodes as usize);
    for i in 0..h.n_nodes {
        let at = c.pos as u64;
        let rec = c.take(NODE_LEN as u64, || format!("node %{i}"))?;
        let code = rec[0];
        let pad = [rec[1], rec[2], rec[3]];
        let a = u32::from_le_bytes([rec[4], rec[5], rec[6], rec[7]]);
        let b = u32::from_le_bytes([rec[8], rec[9], rec[10], rec[11]]);
        let Some(node) = Node::decode(code, a, b) else {
            return Err(FormatError::at_offset(
                at,
                Rule::UnknownOpCode { node: i, code },
            ));
        };
        if node.op().format() > h.version {
            return Err(FormatError::at_offset(
                at,
                Rule::OpNeedsVersion {
                    node: i,
                    op: node.op().name(),
                    version: h.version,
                },
            ));
        }
        if pad != [0, 0, 0] {
            return Err(FormatError::at_offset(
                at + 1,
                Rule::Padding {
                    node: i,
                    found: pad,
                },
            ));
        }
        if node.op().arity() < 2 && b != 0 {
            return Err(FormatError::at_offset(
                at + 8,
                Rule::UnusedArg { node: i, value: b },
            ));
        }
        nodes.push(node);
    }
    let tape = Tape {
        inputs,
        outputs,
        consts,
        nodes,
        n_draws: h.n_draws,
    };
    match verify::check(&tape) {
        Ok(()) => Ok(tape),
        Err(e) => Err(FormatError {
            at: Location::Offset(place_offset(&off, e.place())),
            rule: Rule::Verify(e),
        }),
    }
}

fn decode_name(
    bytes: &[u8],
    at: usize,
    what: impl FnOnce() -> String,
) -> Result<String, FormatError> {
    match std::str::from_utf8(bytes) {
        Ok(s) => Ok(s.to_owned()),
        Err(e) => Err(FormatError::at_offset(
            (at + e.valid_up_to()) as u64,
            Rule::BadUtf8 { what: what() },
        )),
    }
}

/// The byte offset of a verifier place in the file described by `off`.
fn place_offset(off: &Offsets, place: Place) -> u64 {
    let get = |v: &[u64], k: u32| v.get(k as usize).copied().unwrap_or(0);
    match place {
        Place::Tape => 12, // n_outputs: the only tape-wide rule a file can break is "no outputs"
        Place::NDraws => 24,
        Place::Input {
            index,
            field: InputField::Name,
        } => get(&off.inputs, index),
        Place::Input {
            index,
            field: InputField::Value,
        } => get(&off.input_values, index),
        Place::Output {
            index,
            field: OutputField::Node,
        } => get(&off.outputs, index),
        Place::Output {
            index,
            field: OutputField::Name,
        } => get(&off.outputs, index) + 4,
        Place::Const(k) => off.consts + 8 * u64::from(k),
        Place::Node { id, field } => {
            off.nodes
                + NODE_LEN as u64 * u64::from(id.0)
                + match field {
                    NodeField::Op => 0,
                    NodeField::A => 4,
                    NodeField::B => 8,
                }
        }
    }
}

/// Writes `tape` in the binary form exactly as it is (no canonicalization; see the module doc of
/// `format`). For a tape that passes `verify::check`, `read_binary` gives it back. Never panics;
/// counts and name lengths beyond the format's fields are cut to fit (such a tape is invalid anyway).
pub fn write_binary(tape: &Tape) -> Vec<u8> {
    let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    let mut out = Vec::with_capacity(
        HEADER_LEN
            + 4
            + tape.consts.len() * 8
            + tape.nodes.len() * NODE_LEN
            + tape.inputs.len() * 24,
    );
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&tape.format().to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    for n in [
        tape.inputs.len(),
        tape.outputs.len(),
        tape.consts.len(),
        tape.nodes.len(),
    ] {
        out.extend_from_slice(&count(n).to_le_bytes());
    }
    out.extend_from_slice(&tape.n_draws.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    let name = |out: &mut Vec<u8>, s: &str| {
        let b = &s.as_bytes()[..s.len().min(u16::MAX as usize)];
        out.extend_from_slice(&(b.len() as u16).to_le_bytes());
        out.extend_from_slice(b);
    };
    for input in tape.inputs.iter().take(u32::MAX as usize) {
        name(&mut out, &input.name);
        out.extend_from_slice(&input.value.to_le_bytes());
    }
    for output in tape.outputs.iter().take(u32::MAX as usize) {
        out.extend_from_slice(&output.node.0.to_le_bytes());
        name(&mut out, &output.name);
    }
    for c in tape.consts.iter().take(u32::MAX as usize) {
        out.extend_from_slice(&c.to_le_bytes());
    }
    for node in tape.nodes.iter().take(u32::MAX as usize) {
        let (code, a, b) = node.encode();
        out.extend_from_slice(&[code, 0, 0, 0]);
        out.extend_from_slice(&a.to_le_bytes());
        out.extend_from_slice(&b.to_le_bytes());
    }
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

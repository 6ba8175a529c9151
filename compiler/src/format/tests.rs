//! Tests of both forms: known answers, every refusal (rule and place), round trips, no panics.

use super::*;
use crate::tape::{BinaryOp, DrawKind, Input, NodeId, Output, UnaryOp};
use crate::testing::{arb_tape, random_tape};
use crate::verify;
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

const EXAMPLE_TEXT: &str = "nablatape 1
%0 = input spot 100.0
%1 = input strike 95.0
%2 = const 0.5
%3 = normal 0
%4 = mul %0 %3
%5 = sub %4 %1
%6 = max %5 %2
output payoff = %6
";

/// The example as TAPE-FORMAT.md prints it (integers without `.0`, no trailing newline games).
const SPEC_TEXT: &str = "    nablatape 1
    %0 = input spot 100
    %1 = input strike 95
    %2 = const 0.5
    %3 = normal 0
    %4 = mul %0 %3
    %5 = sub %4 %1
    %6 = max %5 %2
    output payoff = %6
";

/// Offsets in the example's binary.
const INPUT1: usize = 46;
const OUTPUT0: usize = 62;
const CONSTS: usize = 74;
const NODES: usize = 82;
const CRC_AT: usize = 166;

/// The example's binary, byte by byte (computed independently with Python's struct and zlib.crc32).
fn example_bytes() -> Vec<u8> {
    let hex = "4e544150010000000200000001000000010000000700000001000000000000000400\
               73706f7400000000000059400600737472696b650000000000c057400600000006\
               007061796f6666000000000000e03f00000000000000000000000000000000010000\
               0000000000010000000000000000000000020000000000000000000000120000000000\
               0000030000001100000004000000010000001400000005000000020000005a65e3b6";
    let hex: Vec<u8> = hex.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    hex.chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

/// Recomputes the trailing CRC after a test edits the bytes.
fn restamp(bytes: &mut [u8]) {
    let n = bytes.len();
    if n >= 4 {
        let crc = crc32fast::hash(&bytes[..n - 4]);
        bytes[n - 4..].copy_from_slice(&crc.to_le_bytes());
    }
}

fn put_u32(bytes: &mut [u8], at: usize, v: u32) {
    bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Edits the example's bytes, restamps the CRC, and returns the refusal.
fn refuse_bin(edit: impl FnOnce(&mut Vec<u8>)) -> FormatError {
    let mut b = example_bytes();
    edit(&mut b);
    restamp(&mut b);
    read(&b).expect_err("should be refused")
}

fn refuse_tape(t: &Tape) -> FormatError {
    read(&write_binary(t)).expect_err("should be refused")
}

fn refuse_text(text: &str) -> FormatError {
    read(text.as_bytes()).expect_err("should be refused")
}

/// Asserts the place and that the message contains `needle`.
#[track_caller]
fn assert_at_offset(e: &FormatError, offset: u64, needle: &str) {
    assert_eq!(e.at, Location::Offset(offset), "{e}");
    let msg = e.to_string();
    assert!(msg.starts_with(&format!("byte offset {offset}: ")), "{msg}");
    assert!(msg.contains(needle), "`{msg}` lacks `{needle}`");
}

#[track_caller]
fn assert_at_line(e: &FormatError, line: usize, col: usize, needle: &str) {
    assert_eq!(e.at, Location::LineCol { line, col }, "{e}");
    let msg = e.to_string();
    assert!(msg.starts_with(&format!("line {line}:{col}: ")), "{msg}");
    assert!(msg.contains(needle), "`{msg}` lacks `{needle}`");
}

// ---------- known answers ----------

#[test]
fn example_binary_known_answer() {
    let bytes = write_binary(&example());
    assert_eq!(bytes.len(), 170);
    assert_eq!(bytes, example_bytes());
    assert_eq!(&bytes[CRC_AT..], &0xb6e3_655au32.to_le_bytes());
    assert_eq!(read(&bytes).unwrap(), example());
    assert_eq!(
        content_hash(&example()),
        "3c14126ebdbec5f21eb4a1d4b8d538ebb382fa45a880426b647bfaa2e80f43fe"
    );
}

#[test]
fn example_text_known_answer() {
    assert_eq!(write_text(&example()), EXAMPLE_TEXT);
    assert_eq!(read(EXAMPLE_TEXT.as_bytes()).unwrap(), example());
    assert_eq!(read(SPEC_TEXT.as_bytes()).unwrap(), example());
    // Text → binary gives the known bytes; content hashes agree across forms.
    let t = read(SPEC_TEXT.as_bytes()).unwrap();
    assert_eq!(write_binary(&t), example_bytes());
    assert_eq!(
        content_hash(&t),
        content_hash(&read(&example_bytes()).unwrap())
    );
}

#[test]
fn comments_blank_lines_crlf_and_tabs() {
    let text = "# a call payoff\n\nnablatape 1   # header\r\n%0 = input spot 100\t# S\n  \n%1 = input strike 95\n%2\t=\tconst 5e-1\n%3 = normal 0\n%4 = mul %0 %3\n%5 = sub %4 %1\n%6 = max %5 %2\r\n#end\noutput payoff = %6";
    assert_eq!(read(text.as_bytes()).unwrap(), example());
}

#[test]
fn floats_print_shortest_and_round_trip() {
    let values = [
        100.0,
        1e-7,
        -0.0,
        0.0,
        0.1,
        1e300,
        5e-324,
        f64::MAX,
        f64::MIN_POSITIVE,
        -2.5,
        1e16,
        123456789.125,
    ];
    let mut t = Tape::default();
    for (k, &v) in values.iter().enumerate() {
        t.inputs.push(Input {
            name: format!("x{k}"),
            value: v,
        });
        t.nodes.push(Node::Input(k as u32));
        t.consts.push(v);
    }
    for k in 0..values.len() {
        t.nodes.push(Node::Const(k as u32));
    }
    t.outputs.push(Output {
        name: "y".into(),
        node: NodeId(0),
    });
    let text = write_text(&t);
    assert!(text.contains("%0 = input x0 100.0\n"), "{text}");
    assert!(text.contains("%1 = input x1 1e-7\n"), "{text}");
    assert!(text.contains("%2 = input x2 -0.0\n"), "{text}");
    assert!(text.contains("%6 = input x6 5e-324\n"), "{text}");
    assert!(text.contains("= const -0.0\n%15 = const 0.0\n"), "{text}");
    let back = read(text.as_bytes()).unwrap();
    assert_eq!(write_binary(&back), write_binary(&t));
    for (a, b) in back.consts.iter().zip(&values) {
        assert_eq!(a.to_bits(), b.to_bits());
    }
}

// ---------- canonical form ----------

#[test]
fn canonicalize_renumbers_inputs_and_pools_consts() {
    // Input 1 read first, const pool with an unused entry, a duplicate and first-use order reversed.
    let t = Tape {
        inputs: vec![
            Input {
                name: "b".into(),
                value: 2.0,
            },
            Input {
                name: "a".into(),
                value: 1.0,
            },
        ],
        outputs: vec![Output {
            name: "y".into(),
            node: NodeId(5),
        }],
        consts: vec![9.0, 0.5, 3.0, 0.5],
        nodes: vec![
            Node::Input(1),
            Node::Const(2),
            Node::Const(3),
            Node::Input(0),
            Node::Const(1),
            Node::Binary(BinaryOp::Add, NodeId(0), NodeId(3)),
        ],
        n_draws: 0,
    };
    verify::check(&t).unwrap();
    assert!(!is_canonical(&t));
    let c = canonicalize(&t);
    assert_eq!(
        c.inputs,
        [
            Input {
                name: "a".into(),
                value: 1.0
            },
            Input {
                name: "b".into(),
                value: 2.0
            }
        ]
    );
    assert_eq!(c.consts, [3.0, 0.5]);
    assert_eq!(
        c.nodes,
        [
            Node::Input(0),
            Node::Const(0),
            Node::Const(1),
            Node::Input(1),
            Node::Const(1),
            Node::Binary(BinaryOp::Add, NodeId(0), NodeId(3))
        ]
    );
    assert!(is_canonical(&c));
    assert_eq!(canonicalize(&c), c);
    // The binary reader keeps the non-canonical layout; text gives the canonical one.
    let b = write_binary(&t);
    assert_eq!(write_binary(&read(&b).unwrap()), b);
    assert_eq!(read(write_text(&t).as_bytes()).unwrap(), c);
    assert_eq!(content_hash(&t), content_hash(&c));
    assert_ne!(content_hash(&t), content_hash(&example()));
}

#[test]
fn canonicalize_never_panics_on_malformed() {
    let mut t = example();
    t.nodes[0] = Node::Input(7);
    t.nodes[2] = Node::Const(9);
    let c = canonicalize(&t);
    assert_eq!(c.nodes[0], Node::Input(7));
    assert_eq!(c.nodes[2], Node::Const(9));
    // Input 0 is now unread: kept after the read one.
    assert_eq!(c.inputs[0].name, "strike");
    assert_eq!(c.inputs[1].name, "spot");
}

// ---------- binary refusals ----------

/// A version-2 header on a tape without a format-2 op reads (readers take both versions) and is
/// written back as version 1, every other byte the same (found by fuzzing read_binary, whose
/// round-trip check wanted every byte).
#[test]
fn a_version_2_tape_without_format_2_ops_reads_and_writes_back_as_version_1() {
    let mut b = example_bytes();
    b[4..6].copy_from_slice(&2u16.to_le_bytes());
    restamp(&mut b);
    let t = read_binary(&b).unwrap();
    let w = write_binary(&t);
    assert_eq!(w[4..6], 1u16.to_le_bytes());
    assert_eq!(w[6..w.len() - 4], b[6..b.len() - 4]);
    assert_eq!(t, read_binary(&example_bytes()).unwrap());
}

#[test]
fn binary_header_refusals() {
    let mut b = example_bytes();
    b[0] = b'X';
    assert_at_offset(
        &read_binary(&b).unwrap_err(),
        0,
        "bad magic [88, 84, 65, 80] (a binary tape starts with `NTAP`)",
    );
    // Binary-looking bytes without the magic are refused as binary by `read` too.
    let e = read(b"\x00\x01\x02\x03rest").unwrap_err();
    assert_at_offset(&e, 0, "bad magic");
    assert_at_offset(
        &read(b"NT").unwrap_err(),
        0,
        "truncated while reading the magic: 4 bytes needed, 2 left",
    );
    assert_at_offset(
        &refuse_bin(|b| b[4] = 3),
        4,
        "unsupported version 3 (this reader knows versions 1 and 2)",
    );
    assert_at_offset(
        &refuse_bin(|b| b[4] = 0),
        4,
        "unsupported version 0 (this reader knows versions 1 and 2)",
    );
    assert_at_offset(&refuse_bin(|b| b[7] = 0x80), 6, "unknown flag bits 0x8000");
    assert_at_offset(
        &refuse_bin(|b| b[29] = 1),
        28,
        "reserved field is 0x00000100 (must be 0)",
    );
    assert_at_offset(
        &read(&example_bytes()[..20]).unwrap_err(),
        20,
        "truncated while reading n_nodes: 4 bytes needed, 0 left",
    );
}

#[test]
fn binary_size_refusals() {
    let b = example_bytes();
    assert_at_offset(
        &read(&b[..40]).unwrap_err(),
        38,
        "truncated while reading input 0 value: 8 bytes needed, 2 left",
    );
    assert_at_offset(
        &read(&b[..100]).unwrap_err(),
        NODES as u64,
        "truncated while reading 7 nodes: 84 bytes needed, 18 left",
    );
    assert_at_offset(
        &read(&b[..168]).unwrap_err(),
        CRC_AT as u64,
        "truncated while reading the CRC: 4 bytes needed, 2 left",
    );
    assert_at_offset(
        &read(&b[..INPUT1 + 3]).unwrap_err(),
        INPUT1 as u64 + 2,
        "truncated while reading input 1 name: 6 bytes needed, 1 left",
    );
    let mut long = b.clone();
    long.push(0);
    assert_at_offset(
        &read(&long).unwrap_err(),
        170,
        "sizes don't add up: the sections and the CRC end at byte 170, but the file has 171 bytes",
    );
    // A count that is too small also leaves bytes over (1 node fewer: 12 bytes extra).
    let e = refuse_bin(|b| put_u32(b, 20, 6));
    assert!(
        matches!(
            e.rule,
            Rule::SizeMismatch {
                expected: 158,
                actual: 170
            }
        ),
        "{e}"
    );
}

#[test]
fn huge_counts_are_refused_cheaply() {
    // 4,000,000,000 nodes claimed in a 40-byte file: refused at the node section, nothing allocated.
    let mut b = example_bytes()[..32].to_vec();
    for field in [8, 12, 16] {
        put_u32(&mut b, field, 0);
    }
    put_u32(&mut b, 20, 4_000_000_000);
    b.extend_from_slice(&[0; 8]);
    assert_eq!(b.len(), 40);
    let e = read(&b).unwrap_err();
    assert_at_offset(
        &e,
        32,
        "truncated while reading 4000000000 nodes: 48000000000 bytes needed, 8 left",
    );
    // The same for every other count; the input walk stops at the first missing byte.
    for (field, needle) in [
        (
            8,
            "truncated while reading input 0 value: 8 bytes needed, 6 left",
        ),
        (
            12,
            "truncated while reading output 1 node: 4 bytes needed, 2 left",
        ),
        (
            16,
            "truncated while reading 4000000000 consts: 32000000000 bytes needed, 8 left",
        ),
    ] {
        let mut c = b.clone();
        put_u32(&mut c, 20, 0);
        put_u32(&mut c, field, 4_000_000_000);
        let e = read(&c).unwrap_err();
        assert!(e.to_string().contains(needle), "{e}");
    }
    let mut c = b.clone();
    put_u32(&mut c, 8, u32::MAX);
    put_u32(&mut c, 12, u32::MAX);
    put_u32(&mut c, 16, u32::MAX);
    put_u32(&mut c, 20, u32::MAX);
    assert!(matches!(read(&c).unwrap_err().rule, Rule::Truncated { .. }));
}

#[test]
fn binary_crc_refusal() {
    let mut b = example_bytes();
    b[CONSTS] ^= 1;
    let e = read(&b).unwrap_err();
    let computed = crc32fast::hash(&b[..CRC_AT]);
    assert_at_offset(
        &e,
        CRC_AT as u64,
        &format!("CRC mismatch: stored 0xb6e3655a, computed {computed:#010x}"),
    );
}

#[test]
fn binary_content_refusals() {
    assert_at_offset(
        &refuse_bin(|b| b[36] = 0xff),
        36,
        "input 0 name: name is not valid UTF-8",
    );
    assert_at_offset(
        &refuse_bin(|b| b[OUTPUT0 + 8] = 0xc3),
        OUTPUT0 as u64 + 8,
        "output 0 name: name is not valid UTF-8",
    );
    assert_at_offset(
        &refuse_bin(|b| b[NODES + 48] = 4),
        (NODES + 48) as u64,
        "unknown op code 4 at node %4",
    );
    assert_at_offset(
        &refuse_bin(|b| b[NODES + 36 + 2] = 1),
        (NODES + 37) as u64,
        "node %3: padding bytes must be 0, found [00, 01, 00]",
    );
    assert_at_offset(
        &refuse_bin(|b| put_u32(b, NODES + 36 + 8, 5)),
        (NODES + 44) as u64,
        "node %3: unused argument b is 5",
    );
    // A unary op's b is unused too.
    let mut t = example();
    t.nodes.push(Node::Unary(UnaryOp::Exp, NodeId(6)));
    let mut b = write_binary(&t);
    let at = b.len() - 4 - 12 + 8;
    put_u32(&mut b, at, 3);
    restamp(&mut b);
    assert_at_offset(
        &read(&b).unwrap_err(),
        at as u64,
        "node %7: unused argument b is 3",
    );
}

#[test]
fn binary_semantic_refusals() {
    let n = |i: usize, field: usize| (NODES + 12 * i + field) as u64;
    // Names: `spot` → `sp-t` (same length) is invalid.
    assert_at_offset(
        &refuse_bin(|b| b[36] = b'-'),
        32,
        "input 0: invalid name \"sp-t\"",
    );
    assert_at_offset(
        &refuse_bin(|b| b[OUTPUT0 + 6] = b'9'),
        OUTPUT0 as u64 + 4,
        "output 0: invalid name \"9ayoff\"",
    );
    let mut t = example();
    t.inputs[1].name = "spot".into();
    assert_at_offset(
        &refuse_tape(&t),
        INPUT1 as u64,
        "input 1: duplicate name `spot` (also input 0",
    );
    let mut t = example();
    t.outputs.push(Output {
        name: "payoff".into(),
        node: NodeId(0),
    });
    assert_at_offset(
        &refuse_tape(&t),
        OUTPUT0 as u64 + 12 + 4,
        "output 1: duplicate name `payoff`",
    );
    // Values and consts.
    assert_at_offset(
        &refuse_bin(|b| b[INPUT1 + 8..INPUT1 + 16].copy_from_slice(&f64::NAN.to_le_bytes())),
        (INPUT1 + 8) as u64,
        "input 1 (`strike`): recorded value NaN is not finite",
    );
    assert_at_offset(
        &refuse_bin(|b| b[CONSTS..CONSTS + 8].copy_from_slice(&f64::NEG_INFINITY.to_le_bytes())),
        CONSTS as u64,
        "const 0: value -inf is not finite",
    );
    // Node rules.
    assert_at_offset(
        &refuse_bin(|b| put_u32(b, NODES + 60 + 4, 5)),
        n(5, 4),
        "%5: argument a = %5 does not point backwards",
    );
    assert_at_offset(
        &refuse_bin(|b| put_u32(b, NODES + 72 + 8, 9)),
        n(6, 8),
        "%6: argument b = %9 does not point backwards",
    );
    assert_at_offset(
        &refuse_bin(|b| put_u32(b, NODES + 12 + 4, 2)),
        n(1, 4),
        "%1: input index 2 is out of range (the tape has 2 inputs)",
    );
    assert_at_offset(
        &refuse_bin(|b| put_u32(b, NODES + 12 + 4, 0)),
        n(1, 4),
        "%1: input 0 is already read by %0",
    );
    assert_at_offset(
        &refuse_bin(|b| put_u32(b, NODES + 24 + 4, 1)),
        n(2, 4),
        "%2: const index 1 is out of range",
    );
    assert_at_offset(
        &refuse_bin(|b| put_u32(b, NODES + 36 + 4, 1)),
        n(3, 4),
        "%3: draw index 1 is not below n_draws = 1",
    );
    assert_at_offset(
        &refuse_bin(|b| put_u32(b, 24, 2)),
        24,
        "n_draws = 2, but 1 + the highest draw index used is 1",
    );
    // An input that no node reads (index 2 of 3).
    let mut t = example();
    t.inputs.push(Input {
        name: "vol".into(),
        value: 0.2,
    });
    assert_at_offset(
        &refuse_tape(&t),
        OUTPUT0 as u64,
        "input 2 (`vol`) is read by no input node",
    );
    // Outputs.
    assert_at_offset(
        &refuse_bin(|b| put_u32(b, OUTPUT0, 7)),
        OUTPUT0 as u64,
        "output 0 (`payoff`): node %7 is out of range (the tape has 7 nodes)",
    );
    let mut t = example();
    t.outputs.clear();
    assert_at_offset(
        &refuse_tape(&t),
        12,
        "no outputs (a tape has at least one output)",
    );
}

// ---------- text refusals ----------

/// The example text with line `line` (1-based) replaced.
fn with_line(line: usize, new: &str) -> String {
    let mut lines: Vec<&str> = EXAMPLE_TEXT.lines().collect();
    lines[line - 1] = new;
    lines.join("\n") + "\n"
}

#[test]
fn text_syntax_refusals() {
    assert_at_line(
        &refuse_text(""),
        1,
        1,
        "missing header: the first statement must be `nablatape 1`",
    );
    assert_at_line(&refuse_text("# only a comment\n\n"), 1, 1, "missing header");
    assert_at_line(
        &refuse_text("\n%0 = input spot 1\n"),
        2,
        1,
        "missing header",
    );
    assert_at_line(
        &refuse_text(&with_line(1, "nablatape 3")),
        1,
        11,
        "unsupported version `3` (the header is `nablatape 1` or `nablatape 2`)",
    );
    assert_at_line(
        &refuse_text(&with_line(1, "nablatape")),
        1,
        10,
        "expected the version `1` or `2` after `nablatape`",
    );
    assert_at_line(
        &refuse_text(&with_line(1, "nablatape 1 x y")),
        1,
        13,
        "trailing tokens `x y` after the statement",
    );
    assert_at_line(
        &refuse_text(&with_line(4, "%3 = const 0.5")),
        4,
        1,
        "node numbering gap: expected %2, found `%3`",
    );
    assert_at_line(
        &refuse_text(&with_line(4, "%x = const 0.5")),
        4,
        1,
        "node numbering gap: expected %2, found `%x`",
    );
    assert_at_line(
        &refuse_text(&with_line(4, "%2 := const 0.5")),
        4,
        4,
        "expected `=`, found `:=`",
    );
    assert_at_line(
        &refuse_text(&with_line(6, "%4 = pow %0 %3")),
        6,
        6,
        "node %4: op `pow` needs tape format 2, but the tape says version 1",
    );
    assert_at_line(
        &refuse_text(&with_line(6, "%4 = power %0 %3")),
        6,
        6,
        "unknown op `power`",
    );
    assert_at_line(&refuse_text(&with_line(6, "%4 =")), 6, 5, "expected an op");
    assert_at_line(
        &refuse_text(&with_line(4, "%2 = const 0.5x")),
        4,
        12,
        "bad const literal `0.5x`",
    );
    assert_at_line(
        &refuse_text(&with_line(2, "%0 = input spot 1,0")),
        2,
        17,
        "bad value literal `1,0`",
    );
    assert_at_line(
        &refuse_text(&with_line(2, "%0 = input spot")),
        2,
        16,
        "expected the input's recorded value",
    );
    assert_at_line(
        &refuse_text(&with_line(5, "%3 = normal -1")),
        5,
        13,
        "bad draw index literal `-1`",
    );
    assert_at_line(
        &refuse_text(&with_line(5, "%3 = normal 4294967296")),
        5,
        13,
        "bad draw index literal",
    );
    assert_at_line(
        &refuse_text(&with_line(6, "%4 = mul %0 %3 %1")),
        6,
        16,
        "trailing tokens `%1` after the statement",
    );
    assert_at_line(
        &refuse_text(&with_line(6, "%4 = mul %0")),
        6,
        12,
        "expected the second argument `%M`",
    );
    assert_at_line(
        &refuse_text(&with_line(6, "%4 = mul %0 3")),
        6,
        13,
        "expected a node reference `%M`, found `3`",
    );
    assert_at_line(
        &refuse_text(&with_line(6, "%4 = mul %0 %99999999999")),
        6,
        13,
        "bad node reference literal `%99999999999`",
    );
    assert_at_line(
        &refuse_text(&with_line(9, "output payoff %6")),
        9,
        15,
        "expected `=`, found `%6`",
    );
    assert_at_line(
        &refuse_text(&with_line(9, "output payoff =")),
        9,
        16,
        "expected the output's node `%N`",
    );
    assert_at_line(
        &refuse_text(&with_line(9, "print %6")),
        9,
        1,
        "expected a statement `%N = OP ARGS` or `output NAME = %N`, found `print`",
    );
    let after = format!("{EXAMPLE_TEXT}%7 = neg %6\n");
    assert_at_line(
        &refuse_text(&after),
        10,
        1,
        "node statement after an output (outputs follow the nodes)",
    );
    let bad = [b"nablatape 1\n%0 = input sp".as_slice(), b"\xe9t 1\n"].concat();
    assert_at_line(
        &read(&bad).unwrap_err(),
        2,
        14,
        "the text is not valid UTF-8",
    );
}

#[test]
fn text_semantic_refusals() {
    assert_at_line(
        &refuse_text(&with_line(6, "%4 = mul %0 %4")),
        6,
        13,
        "%4: argument b = %4 does not point backwards",
    );
    assert_at_line(
        &refuse_text(&with_line(6, "%4 = exp %7")),
        6,
        10,
        "%4: argument a = %7 does not point backwards",
    );
    assert_at_line(
        &refuse_text(&with_line(4, "%2 = const inf")),
        4,
        12,
        "const 0: value inf is not finite",
    );
    assert_at_line(
        &refuse_text(&with_line(4, "%2 = const NaN")),
        4,
        12,
        "const 0: value NaN is not finite",
    );
    assert_at_line(
        &refuse_text(&with_line(3, "%1 = input strike -infinity")),
        3,
        19,
        "input 1 (`strike`): recorded value -inf is not finite",
    );
    assert_at_line(
        &refuse_text(&with_line(3, "%1 = input 9strike 95")),
        3,
        12,
        "input 1: invalid name \"9strike\"",
    );
    assert_at_line(
        &refuse_text(&with_line(3, "%1 = input spot 95")),
        3,
        12,
        "input 1: duplicate name `spot` (also input 0",
    );
    assert_at_line(
        &refuse_text(&with_line(9, "output pay-off = %6")),
        9,
        8,
        "output 0: invalid name \"pay-off\"",
    );
    assert_at_line(
        &refuse_text(&with_line(9, "output payoff = %7")),
        9,
        17,
        "output 0 (`payoff`): node %7 is out of range (the tape has 7 nodes)",
    );
    let two = format!("{EXAMPLE_TEXT}output payoff = %5\n");
    assert_at_line(
        &refuse_text(&two),
        10,
        8,
        "output 1: duplicate name `payoff` (also output 0",
    );
    // No outputs: reported just past the end.
    let none = EXAMPLE_TEXT.replace("output payoff = %6\n", "");
    assert_at_line(
        &refuse_text(&none),
        10,
        1,
        "no outputs (a tape has at least one output)",
    );
    // The largest draw index can never be below n_draws (a u32): refused, not overflowed.
    assert_at_line(
        &refuse_text(&with_line(5, "%3 = normal 4294967295")),
        5,
        13,
        "%3: draw index 4294967295 is not below n_draws = 4294967295",
    );
    // Inputs and outputs may share a name (they are unique among inputs and among outputs).
    let shared = with_line(9, "output spot = %6");
    assert_eq!(read(shared.as_bytes()).unwrap().outputs[0].name, "spot");
}

// ---------- properties ----------

/// A non-canonical but valid variant of `t`: inputs permuted, the const pool reversed with a
/// duplicate and an unused entry added.
fn scramble(t: &Tape, seed: u64) -> Tape {
    let n = t.inputs.len();
    let mut perm: Vec<usize> = (0..n).collect(); // perm[new] = old
    let mut s = seed | 1;
    for i in (1..n).rev() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        perm.swap(i, (s % (i as u64 + 1)) as usize);
    }
    let mut new_of_old = vec![0u32; n];
    for (new, &old) in perm.iter().enumerate() {
        new_of_old[old] = new as u32;
    }
    let mut consts: Vec<f64> = t.consts.iter().rev().copied().collect();
    consts.push(42.0); // unused
    let dup = consts.len() as u32;
    consts.push(t.consts.first().copied().unwrap_or(0.0)); // a duplicate of const 0
    let m = t.consts.len() as u32;
    let mut first_const_seen = false;
    let nodes = t
        .nodes
        .iter()
        .map(|node| match *node {
            Node::Input(k) => Node::Input(new_of_old[k as usize]),
            Node::Const(0) if !first_const_seen => {
                first_const_seen = true;
                Node::Const(dup) // the first use of const 0 reads the duplicate
            }
            Node::Const(k) => Node::Const(m - 1 - k),
            other => other,
        })
        .collect();
    Tape {
        inputs: perm.iter().map(|&old| t.inputs[old].clone()).collect(),
        outputs: t.outputs.clone(),
        consts,
        nodes,
        n_draws: t.n_draws,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Canonical binary → tape → binary and → text → binary are byte-identical; text as
    /// write_text prints it → binary → text too.
    #[test]
    fn round_trips_are_byte_identical(t in arb_tape()) {
        let bin = write_binary(&t);
        let back = read(&bin).unwrap();
        prop_assert_eq!(write_binary(&back), bin.clone());
        let text = write_text(&t);
        let from_text = read(text.as_bytes()).unwrap();
        prop_assert_eq!(write_binary(&from_text), bin.clone());
        prop_assert_eq!(write_text(&read(&write_binary(&from_text)).unwrap()), text);
        prop_assert!(is_canonical(&t));
        prop_assert_eq!(content_hash(&t), content_hash(&from_text));
    }

    /// A valid non-canonical binary is accepted as is; through text it becomes canonical.
    #[test]
    fn non_canonical_binaries(t in arb_tape(), seed in any::<u64>()) {
        let v = scramble(&t, seed);
        verify::check(&v).unwrap();
        let bin = write_binary(&v);
        prop_assert_eq!(write_binary(&read(&bin).unwrap()), bin);
        prop_assert_eq!(write_binary(&canonicalize(&v)), write_binary(&t));
        let via_text = read(write_text(&v).as_bytes()).unwrap();
        prop_assert_eq!(write_binary(&via_text), write_binary(&t));
        prop_assert_eq!(content_hash(&v), content_hash(&t));
    }

    /// Arbitrary bytes: no panic (with and without the magic and a valid CRC).
    #[test]
    fn arbitrary_bytes_never_panic(mut bytes in prop::collection::vec(any::<u8>(), 0..300), magic in any::<bool>()) {
        let _ = read(&bytes);
        if magic {
            let mut b = MAGIC.to_vec();
            b.extend_from_slice(&[1, 0, 0, 0]);
            b.append(&mut bytes);
            restamp(&mut b);
            if let Ok(t) = read(&b) {
                prop_assert_eq!(write_binary(&t), b);
            }
        }
    }

    /// Arbitrary text made of tape-like tokens: no panic; what is accepted round-trips.
    #[test]
    fn arbitrary_text_never_panics(
        body in prop::collection::vec(
            prop_oneof![
                Just("%0".to_string()), Just("%1".to_string()), Just("%2".to_string()), Just("%99".to_string()),
                Just("=".to_string()), Just("input".to_string()), Just("const".to_string()),
                Just("normal".to_string()), Just("uniform".to_string()), Just("add".to_string()),
                Just("exp".to_string()), Just("output".to_string()), Just("x".to_string()),
                Just("1.5".to_string()), Just("inf".to_string()), Just("0".to_string()),
                Just("4294967295".to_string()), Just("\n".to_string()), Just("#".to_string()),
                Just("\r".to_string()), Just("é".to_string()), "[ -~]{0,6}",
            ],
            0..60),
        header in any::<bool>(),
    ) {
        let mut text = if header { "nablatape 1\n".to_string() } else { String::new() };
        text.push_str(&body.join(" "));
        if let Ok(t) = read(text.as_bytes()) {
            let printed = write_text(&t);
            prop_assert_eq!(read(printed.as_bytes()).unwrap(), t);
        }
    }

    /// Any string at all: no panic.
    #[test]
    fn any_string_never_panics(s in ".{0,200}") {
        let _ = read(s.as_bytes());
        let _ = read(format!("nablatape 1\n{s}").as_bytes());
    }

    /// Mutations of a valid binary (byte flips, truncation, insertion), with the CRC restamped or
    /// not: never a panic, and whatever is accepted is written back byte for byte.
    #[test]
    fn mutated_binaries_never_panic(
        t in arb_tape(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..4), 1..6),
        stamp in any::<bool>(),
    ) {
        let mut b = write_binary(&t);
        for (at, byte, kind) in edits {
            if b.is_empty() { break; }
            let i = at.index(b.len());
            match kind {
                0 | 1 => b[i] = byte,
                2 => b.truncate(i),
                _ => b.insert(i, byte),
            }
        }
        if stamp { restamp(&mut b); }
        if let Ok(back) = read(&b) {
            prop_assert_eq!(write_binary(&back), b);
        }
    }
}

#[test]
fn random_tapes_round_trip() {
    for seed in 0..20 {
        let t = random_tape(seed, 5000);
        let bin = write_binary(&t);
        let text = write_text(&t);
        assert_eq!(write_binary(&read(text.as_bytes()).unwrap()), bin);
        assert_eq!(write_text(&read(&bin).unwrap()), text);
    }
}

/// Every tape of the snapshot corpus reads, and its printed form round-trips byte for byte through
/// the binary form.
#[test]
fn corpus_tapes_round_trip() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/in");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "ntape"))
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no corpus in {}", dir.display());
    for path in paths {
        let bytes = std::fs::read(&path).unwrap();
        let t = read(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(is_canonical(&t), "{}", path.display());
        let text = write_text(&t);
        let bin = write_binary(&t);
        assert_eq!(
            write_binary(&read(text.as_bytes()).unwrap()),
            bin,
            "{}",
            path.display()
        );
        assert_eq!(write_text(&read(&bin).unwrap()), text, "{}", path.display());
    }
}

//! Fused ladders: one kernel for M markets of one tape, sharing the draws and every node that no
//! varying input reaches.
//!
//! Contract: [`expand`] turns a verified tape and a [`LadderSpec`] (M, which inputs vary across
//! the markets) into a verified *laddered* tape that carries its [`Ladder`]: every node that
//! depends on none of the varying inputs (draws, constants, the market-free part of each step)
//! appears once, every other node once per market, copies of one node next to each other at its
//! place. Each market's nodes therefore read the same operands in the same order as the one-market
//! tape's, and every later stage (plan, schedule, printers) runs on the laddered tape unchanged:
//! the reverse sweep gives each market's outputs their own lanes (the shared nodes' adjoints are
//! taken per lane, in the one-market order), forward mode's colouring puts the M copies of a
//! varying input into one direction (they meet in no output), so the directions are the
//! one-market kernel's. What the ladder adds is where values live in the ABI:
//!
//! - the inputs buffer holds M markets of the one-market tape's inputs (market m's input i at
//!   `m * n_inputs + i`), then M blocks of the one-market shifts; an input that does not vary is
//!   read from market 0's row (a host puts one value there for the whole group);
//! - a row of sums is M blocks of the one-market kernel's sums, market by market.
//!
//! Guarantee (tested on every backend): market m of a fused run has the bits of a one-market run
//! of the same tape, seed and paths at market m.

use crate::tape::{Input, Node, NodeId, Output, Tape};
use crate::verify::{verify, Verified, VerifyError};

pub use nablac_abi::manifest::MAX_MARKETS;

/// What to fuse: `markets` input sets, of which the inputs marked in `varying` may differ.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct LadderSpec {
    pub markets: u32,
    /// One flag per input of the one-market tape.
    pub varying: Vec<bool>,
}

/// How a laddered tape maps onto its one-market tape (module doc).
#[derive(Clone, PartialEq, Debug)]
pub struct Ladder {
    pub markets: u32,
    /// One flag per input of the one-market tape.
    pub varying: Vec<bool>,
    /// The one-market tape: the names, defaults and hash a host sees.
    pub base: Tape,
    /// Laddered input index -> index in the inputs buffer.
    pub input_slot: Vec<u32>,
    /// `input_of[m][i]`: the laddered input that is one-market input i in market m.
    pub input_of: Vec<Vec<u32>>,
    /// `output_of[m][o]`: the laddered output that is one-market output o in market m (one
    /// output for every market when no varying input reaches it).
    pub output_of: Vec<Vec<usize>>,
}

/// Why a ladder could not be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LadderError {
    #[error("markets={0} is out of range: 1 ..= {MAX_MARKETS}")]
    Markets(u32),
    #[error("the ladder names {got} inputs' flags for a tape of {want} inputs")]
    Flags { got: usize, want: usize },
    #[error("the laddered tape of {markets} markets is not valid ({0}): the tape is too large to fuse that many markets", markets = .1)]
    Verify(VerifyError, u32),
}

/// The name of market m's copy of `name` (index `k` in its list), unique and valid.
fn market_name(name: &str, k: usize, m: u32) -> String {
    let n = format!("{name}_m{m}");
    if n.len() <= 64 {
        n
    } else {
        format!("x{k}_m{m}")
    }
}

/// The laddered tape of `tape` under `spec` (module doc). One market is the tape itself, with
/// the identity ladder.
pub fn expand(tape: &Verified, spec: &LadderSpec) -> Result<Verified, LadderError> {
    let base: &Tape = tape;
    if spec.markets == 0 || spec.markets > MAX_MARKETS {
        return Err(LadderError::Markets(spec.markets));
    }
    if spec.varying.len() != base.inputs.len() {
        return Err(LadderError::Flags {
            got: spec.varying.len(),
            want: base.inputs.len(),
        });
    }
    let m_count = spec.markets as usize;
    // depends[v]: a varying input reaches node v.
    let mut depends = vec![false; base.len()];
    for v in base.ids() {
        depends[v.index()] = match *base.node(v) {
            Node::Input(i) => spec.varying[i as usize] && m_count > 1,
            n => n.args().any(|a| depends[a.index()]),
        };
    }
    let n_in = base.inputs.len();
    let mut out = Tape {
        consts: base.consts.clone(),
        n_draws: base.n_draws,
        ..Tape::default()
    };
    let mut input_slot = Vec::new();
    let mut input_of = vec![vec![0u32; n_in]; m_count];
    // copies[v][m]: node v's laddered id in market m (the same id for every m when shared).
    let mut copies: Vec<Vec<NodeId>> = Vec::with_capacity(base.len());
    for v in base.ids() {
        let node = *base.node(v);
        let per_market = if depends[v.index()] { m_count } else { 1 };
        let mut ids = Vec::with_capacity(per_market);
        for m in 0..per_market {
            let id = NodeId(out.nodes.len() as u32);
            let copy = match node {
                Node::Input(i) => {
                    let k = out.inputs.len() as u32;
                    let Input { name, value } = &base.inputs[i as usize];
                    out.inputs.push(Input {
                        name: if per_market > 1 {
                            market_name(name, i as usize, m as u32)
                        } else {
                            name.clone()
                        },
                        value: *value,
                    });
                    input_slot.push((m * n_in) as u32 + i);
                    if per_market > 1 {
                        input_of[m][i as usize] = k;
                    } else {
                        for row in input_of.iter_mut() {
                            row[i as usize] = k;
                        }
                    }
                    Node::Input(k)
                }
                Node::Unary(op, a) => Node::Unary(op, at(&copies, a, m)),
                Node::Binary(op, a, b) => Node::Binary(op, at(&copies, a, m), at(&copies, b, m)),
                leaf => leaf,
            };
            out.nodes.push(copy);
            ids.push(id);
        }
        copies.push(ids);
    }
    let mut output_of = vec![vec![0usize; base.outputs.len()]; m_count];
    for (o, Output { name, node }) in base.outputs.iter().enumerate() {
        let ids = &copies[node.index()];
        for (m, &id) in ids.iter().enumerate() {
            let k = out.outputs.len();
            out.outputs.push(Output {
                name: if ids.len() > 1 {
                    market_name(name, o, m as u32)
                } else {
                    name.clone()
                },
                node: id,
            });
            if ids.len() > 1 {
                output_of[m][o] = k;
            } else {
                for row in output_of.iter_mut() {
                    row[o] = k;
                }
            }
        }
    }
    let ladder = Ladder {
        markets: spec.markets,
        varying: spec.varying.clone(),
        base: base.clone(),
        input_slot,
        input_of,
        output_of,
    };
    let v = verify(out).map_err(|e| LadderError::Verify(e, spec.markets))?;
    Ok(v.with_ladder(ladder))
}

/// `tape` fused under `spec`: its laddered tape ([`expand`]) for more than one market, the tape
/// itself (no ladder, a one-market kernel) for one.
pub fn fuse<'a>(
    tape: &'a Verified,
    spec: &LadderSpec,
) -> Result<std::borrow::Cow<'a, Verified>, LadderError> {
    Ok(if spec.markets == 1 {
        std::borrow::Cow::Borrowed(tape)
    } else {
        std::borrow::Cow::Owned(expand(tape, spec)?)
    })
}

/// Node `a`'s laddered id in market m (its only id when shared).
fn at(copies: &[Vec<NodeId>], a: NodeId, m: usize) -> NodeId {
    let ids = &copies[a.index()];
    ids[m.min(ids.len() - 1)]
}

impl Ladder {
    /// The names of the inputs that vary across the markets, in input order.
    pub fn varying_names(&self) -> Vec<String> {
        self.base
            .inputs
            .iter()
            .zip(&self.varying)
            .filter(|(_, &v)| v)
            .map(|(i, _)| i.name.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::products::{record, Market, Options, Product};

    fn tape(p: Product) -> Verified {
        verify(record(p, &Options::defaults(p), &Market::default()).unwrap()).unwrap()
    }

    fn varying(t: &Tape, names: &[&str]) -> Vec<bool> {
        t.inputs
            .iter()
            .map(|i| names.contains(&i.name.as_str()))
            .collect()
    }

    #[test]
    fn a_spot_ladder_of_the_asian_repeats_two_operations_a_step_per_market() {
        let asian = tape(Product::AsianCall);
        let spec = |markets| LadderSpec {
            markets,
            varying: varying(&asian, &["spot"]),
        };
        let one = expand(&asian, &spec(1)).unwrap();
        let seven = expand(&asian, &spec(7)).unwrap();
        assert_eq!(one.len(), asian.len());
        // The nodes spot reaches: the input, the price path's multiply and the running sum's
        // add a step, and the payoff's few nodes at the end.
        let per_market = (seven.len() - asian.len()) / 6;
        assert_eq!((seven.len() - asian.len()) % 6, 0);
        assert!(
            (2 * 252..2 * 252 + 12).contains(&per_market),
            "{per_market} nodes a market"
        );
        assert_eq!(seven.n_draws, 252, "the draws are shared");
        let l = seven.ladder().unwrap();
        assert_eq!(l.varying_names(), ["spot"]);
        // spot has 7 copies (slots m * 5 + 0), the other inputs one (market 0's row).
        assert_eq!(seven.inputs.len(), 7 + 4);
        let spot_slots: Vec<u32> = (0..7)
            .map(|m| l.input_slot[l.input_of[m][0] as usize])
            .collect();
        assert_eq!(spot_slots, [0, 5, 10, 15, 20, 25, 30]);
        for m in 0..7 {
            assert_eq!(
                l.input_slot[l.input_of[m][1] as usize], 1,
                "strike from market 0"
            );
            let o = &seven.outputs[l.output_of[m][0]];
            assert_eq!(o.name, format!("price_m{m}"));
        }
    }

    #[test]
    fn an_output_no_varying_input_reaches_is_shared_and_bad_specs_are_refused() {
        // price = spot * exp(vol * z), other = vol * z: only price depends on spot.
        let text = "nablatape 1\n%0 = input spot 100.0\n%1 = input vol 0.2\n%2 = normal 0\n\
                    %3 = mul %1 %2\n%4 = exp %3\n%5 = mul %0 %4\noutput price = %5\noutput other = %3\n";
        let t = verify(crate::format::read_text(text.as_bytes()).unwrap()).unwrap();
        let v = expand(
            &t,
            &LadderSpec {
                markets: 3,
                varying: vec![true, false],
            },
        )
        .unwrap();
        let l = v.ladder().unwrap();
        assert_eq!(v.len(), 6 + 2 * 2, "spot and the last multiply, twice more");
        assert_eq!(
            l.output_of[0][1], l.output_of[2][1],
            "other is one output for all"
        );
        assert_ne!(l.output_of[0][0], l.output_of[2][0]);
        for markets in [0, MAX_MARKETS + 1] {
            let e = expand(
                &t,
                &LadderSpec {
                    markets,
                    varying: vec![true, false],
                },
            );
            assert_eq!(e.unwrap_err(), LadderError::Markets(markets));
        }
        let e = expand(
            &t,
            &LadderSpec {
                markets: 2,
                varying: vec![true],
            },
        );
        assert_eq!(e.unwrap_err(), LadderError::Flags { got: 1, want: 2 });
    }
}

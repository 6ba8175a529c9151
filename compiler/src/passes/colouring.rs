//! Colouring: which inputs share a tangent direction in forward mode.
//!
//! Two inputs *conflict* when some output depends differentiably on both (input node i in output
//! o's cone, `TapeInfo::in_cone`; with one output, every active input): their tangents would meet in
//! that output's tangent and could not be told apart. Inputs that never meet in one output can
//! share a direction, and each output's tangent in a direction is then the Greek of the one input
//! of that colour it depends on. The conflict graph (an edge per conflicting pair) is coloured
//! greedily: inputs in input order, each taking the smallest colour none of its neighbours has;
//! it is walked through the input-output dependence graph (petgraph), never built
//! ([`colour_inputs`]). Guarantee: no two inputs of one
//! colour reach one output; an input no output depends on has no colour (and no direction).
//!
//! A portfolio of 20 Europeans on 20 separate spots with one shared rate needs 2 directions: the
//! spots take colour 0 (they never meet), the rate, meeting every spot, colour 1.

use crate::verify::Verified;
use petgraph::graph::{NodeIndex, UnGraph};

/// The directions of forward mode.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Colouring {
    /// `colour[i]`: input i's direction; `None` when no output depends on it.
    pub colour: Vec<Option<u32>>,
    /// The number of directions (colours used).
    pub colours: u32,
}

/// `reaches[o][i]`: output o depends differentiably on input i.
fn dependence(v: &Verified) -> Vec<Vec<bool>> {
    let info = v.info();
    let act = &info.activity;
    let active = |n: usize| act.active[n] && act.live[n];
    (0..v.outputs.len())
        .map(|o| {
            info.input_nodes
                .iter()
                .map(|&n| active(n.index()) && info.in_cone(o, n))
                .collect()
        })
        .collect()
}

/// Colours the inputs of `v` (module doc).
///
/// The conflict graph is never built: it has a clique per output (every pair of the inputs one
/// output depends on), quadratic in the inputs; a tape of 10,000 inputs and one output spent
/// minutes adding its 5e7 edges. The greedy colouring runs on the bipartite input-output
/// dependence graph instead (petgraph, an edge per (input, output) pair): an input's neighbours
/// in the conflict graph are the inputs that share an output with it, so the colours its
/// earlier neighbours took are the union, over its outputs, of the colours that output's
/// earlier inputs took (a bit set per output). Same order, same choice, same colours.
pub fn colour_inputs(v: &Verified) -> Colouring {
    let n_in = v.inputs.len();
    let reaches = dependence(v);
    // Vertices 0..n_in: the inputs; n_in..: the outputs.
    let mut graph: UnGraph<(), ()> = UnGraph::new_undirected();
    for _ in 0..n_in + reaches.len() {
        graph.add_node(());
    }
    for (o, r) in reaches.iter().enumerate() {
        for i in (0..n_in).filter(|&i| r[i]) {
            graph.add_edge(NodeIndex::new(i), NodeIndex::new(n_in + o), ());
        }
    }
    // used[o]: the colours of the inputs of output o coloured so far, as bits.
    let mut used: Vec<Vec<u64>> = vec![Vec::new(); reaches.len()];
    let mut colour: Vec<Option<u32>> = vec![None; n_in];
    let mut taken: Vec<u64> = Vec::new();
    for (i, slot) in colour.iter_mut().enumerate() {
        let outputs: Vec<usize> = graph
            .neighbors(NodeIndex::new(i))
            .map(|o| o.index() - n_in)
            .collect();
        if outputs.is_empty() {
            continue; // no output depends on it: no direction
        }
        taken.clear();
        for &o in &outputs {
            if taken.len() < used[o].len() {
                taken.resize(used[o].len(), 0);
            }
            for (t, u) in taken.iter_mut().zip(&used[o]) {
                *t |= u;
            }
        }
        // The smallest colour no neighbour has.
        let word = taken
            .iter()
            .position(|&w| w != u64::MAX)
            .unwrap_or(taken.len());
        let c = word * 64 + taken.get(word).map_or(0, |w| w.trailing_ones() as usize);
        for &o in &outputs {
            if used[o].len() <= c / 64 {
                used[o].resize(c / 64 + 1, 0);
            }
            used[o][c / 64] |= 1 << (c % 64);
        }
        *slot = Some(c as u32);
    }
    let colours = colour.iter().flatten().map(|c| c + 1).max().unwrap_or(0);
    Colouring { colour, colours }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Recorder;
    use crate::testing::verified;

    /// `n` Europeans, option k on its own spot input, all sharing one rate; strikes, vols and
    /// maturities are constants. One output per option.
    fn portfolio(n: usize) -> Verified {
        let r = Recorder::new();
        let spots: Vec<_> = (0..n)
            .map(|k| r.input(&format!("spot{k}"), 100.0).unwrap())
            .collect();
        let rate = r.input("rate", 0.05).unwrap();
        for (k, s) in spots.iter().enumerate() {
            let z = r.normal(k as u32);
            let st = s * (&rate - 0.02 + 0.2 * z).exp();
            let pay = (st - 100.0).max(&r.constant(0.0));
            let price = (-&rate).exp() * pay;
            r.output(&format!("price{k}"), &price).unwrap();
        }
        verified(&r.finish().expect("a valid tape"))
    }

    #[test]
    fn a_portfolio_on_separate_spots_needs_two_directions() {
        let c = colour_inputs(&portfolio(20));
        assert_eq!(c.colours, 2);
        assert!(c.colour[..20].iter().all(|&c| c == Some(0)));
        assert_eq!(c.colour[20], Some(1));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]

        /// On random tapes: no two inputs of one colour reach one output; exactly the inputs some
        /// output depends on are coloured; colours are 0..colours, each used.
        #[test]
        fn colourings_are_valid(tape in crate::testing::arb_tape()) {
            let v = verified(&tape);
            let c = colour_inputs(&v);
            let reaches = dependence(&v);
            for r in &reaches {
                let mut seen = std::collections::BTreeSet::new();
                for (i, &on) in r.iter().enumerate() {
                    if on {
                        proptest::prop_assert!(seen.insert(c.colour[i].expect("a reached input is coloured")));
                    }
                }
            }
            for (i, col) in c.colour.iter().enumerate() {
                proptest::prop_assert_eq!(col.is_some(), reaches.iter().any(|r| r[i]));
            }
            for k in 0..c.colours {
                proptest::prop_assert!(c.colour.contains(&Some(k)));
            }
            proptest::prop_assert_eq!(c.colour, greedy_on_the_conflict_graph(&reaches));
        }
    }

    /// The colouring as the module doc defines it, on the conflict graph built edge by edge
    /// (quadratic; what `colour_inputs` once did).
    fn greedy_on_the_conflict_graph(reaches: &[Vec<bool>]) -> Vec<Option<u32>> {
        let n_in = reaches.first().map_or(0, Vec::len);
        let mut conflicts = vec![std::collections::BTreeSet::new(); n_in];
        for r in reaches {
            let on: Vec<usize> = (0..n_in).filter(|&i| r[i]).collect();
            for &a in &on {
                conflicts[a].extend(on.iter().copied().filter(|&b| b != a));
            }
        }
        let mut colour: Vec<Option<u32>> = vec![None; n_in];
        for i in 0..n_in {
            if reaches.iter().any(|r| r[i]) {
                let taken: Vec<u32> = conflicts[i].iter().filter_map(|&j| colour[j]).collect();
                colour[i] = (0..).find(|c| !taken.contains(c));
            }
        }
        colour
    }

    /// One output over many inputs: every input its own direction, and past 64 colours (the
    /// bit sets' second word). 3,000 inputs: the conflict graph would have 4.5M edges.
    #[test]
    fn one_output_over_many_inputs_gives_each_its_own_direction() {
        let r = Recorder::new();
        let z = r.normal(0);
        let mut acc = r.constant(0.0);
        for k in 0..3000 {
            acc = acc + r.input(&format!("x{k}"), 1.0).unwrap() * &z;
        }
        r.output("y", &acc).unwrap();
        let c = colour_inputs(&verified(&r.finish().expect("a valid tape")));
        assert_eq!(c.colours, 3000);
        assert!(c
            .colour
            .iter()
            .enumerate()
            .all(|(i, &k)| k == Some(i as u32)));
    }
}

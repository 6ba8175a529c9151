//! Colouring: which inputs share a tangent direction in forward mode.
//!
//! Two inputs *conflict* when some output depends differentiably on both (input node i in output
//! o's cone, `TapeInfo::in_cone`; with one output, every active input): their tangents would meet in
//! that output's tangent and could not be told apart. Inputs that never meet in one output can
//! share a direction, and each output's tangent in a direction is then the Greek of the one input
//! of that colour it depends on. The conflict graph (petgraph, one vertex per input that some
//! output depends on, an edge per conflicting pair) is coloured greedily: inputs in input order,
//! each taking the smallest colour none of its neighbours has. Guarantee: no two inputs of one
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
pub fn colour_inputs(v: &Verified) -> Colouring {
    let n_in = v.inputs.len();
    let reaches = dependence(v);
    let mut graph: UnGraph<usize, ()> = UnGraph::new_undirected();
    let mut vertex: Vec<Option<NodeIndex>> = vec![None; n_in];
    for (i, slot) in vertex.iter_mut().enumerate() {
        if reaches.iter().any(|r| r[i]) {
            *slot = Some(graph.add_node(i));
        }
    }
    for r in &reaches {
        let on: Vec<NodeIndex> = (0..n_in)
            .filter(|&i| r[i])
            .filter_map(|i| vertex[i])
            .collect();
        for (k, &a) in on.iter().enumerate() {
            for &b in &on[k + 1..] {
                graph.update_edge(a, b, ());
            }
        }
    }
    let mut colour_of: Vec<Option<u32>> = vec![None; graph.node_count()];
    for x in graph.node_indices() {
        let taken: Vec<u32> = graph
            .neighbors(x)
            .filter_map(|y| colour_of[y.index()])
            .collect();
        let c = (0..).find(|c| !taken.contains(c)).unwrap_or(0);
        colour_of[x.index()] = Some(c);
    }
    let colour: Vec<Option<u32>> = vertex
        .iter()
        .map(|x| x.and_then(|x| colour_of[x.index()]))
        .collect();
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
        }
    }
}

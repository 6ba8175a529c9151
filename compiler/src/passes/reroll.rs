//! Rerolling: the periodic structure of a recorded tape, found and represented as loop regions.
//!
//! A 252-step product is one step recorded 252 times. [`reroll`] finds runs of nodes that
//! repeat with a period: node `j` of every iteration has the same op, its arguments are either
//! nodes before the region ([`Arg::Outer`], the same in every iteration, or [`Arg::Indexed`],
//! one per iteration: a bucketed vol), earlier nodes of the same iteration ([`Arg::Local`]) or
//! a node of the previous iteration ([`Arg::Carried`], with its value before the first
//! iteration), and a draw's index advances by a constant each iteration. Nothing after a
//! region reads an iteration other than its last, so a loop needs to keep only the carried
//! values. Guarantee: [`unroll`] of a tape's regions gives back the tape's nodes, node for node
//! (the property the tests check on every product and on random tapes).

use crate::tape::{DrawKind, Node, NodeId, Tape};

/// How one argument of a body node is found in iteration `i`.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Arg {
    /// The same node, before the region, in every iteration.
    Outer(NodeId),
    /// One node before the region per iteration (`nodes[i]`).
    Indexed(Vec<NodeId>),
    /// Body node `j` of the same iteration (an earlier one).
    Local(u32),
    /// Body node `from` of the previous iteration; in the first, the node `init` before the
    /// region.
    Carried { from: u32, init: NodeId },
}

/// What a body node is, apart from its arguments.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Shape {
    /// An input or a constant: the same node in every iteration.
    Leaf(Node),
    /// Draw `first + i * stride` of kind `kind` in iteration `i`.
    Draw {
        kind: DrawKind,
        first: u32,
        stride: u32,
    },
    Unary(crate::tape::UnaryOp),
    Binary(crate::tape::BinaryOp),
}

/// One node of the loop body.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct BodyNode {
    pub shape: Shape,
    pub args: Vec<Arg>,
}

/// A loop region: nodes `start .. start + period * count` are `count` iterations of `body`.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Region {
    pub start: u32,
    pub period: u32,
    pub count: u32,
    pub body: Vec<BodyNode>,
    /// The body nodes whose last-iteration value the rest of the tape (or an output) reads.
    pub exits: Vec<u32>,
}

impl Region {
    pub fn end(&self) -> u32 {
        self.start + self.period * self.count
    }

    /// The tape node of body node `j` in iteration `i`.
    pub fn id(&self, i: u32, j: u32) -> NodeId {
        NodeId(self.start + i * self.period + j)
    }

    fn arg(&self, a: &Arg, i: u32) -> NodeId {
        match a {
            Arg::Outer(x) => *x,
            Arg::Indexed(xs) => xs[i as usize],
            Arg::Local(j) => self.id(i, *j),
            Arg::Carried { init, .. } if i == 0 => *init,
            Arg::Carried { from, .. } => self.id(i - 1, *from),
        }
    }

    /// Body node `j` of iteration `i`, as the tape has it.
    pub fn node(&self, i: u32, j: u32) -> Node {
        let b = &self.body[j as usize];
        match b.shape {
            Shape::Leaf(n) => n,
            Shape::Draw {
                kind,
                first,
                stride,
            } => Node::Draw(kind, first + i * stride),
            Shape::Unary(op) => Node::Unary(op, self.arg(&b.args[0], i)),
            Shape::Binary(op) => Node::Binary(op, self.arg(&b.args[0], i), self.arg(&b.args[1], i)),
        }
    }

    /// The node before the region that body node `from`'s carried value starts from, where
    /// an iteration reads it (one per node: `reroll` finds no region that would need two).
    pub fn init(&self, from: u32) -> Option<NodeId> {
        self.body
            .iter()
            .flat_map(|b| &b.args)
            .find_map(|a| match a {
                Arg::Carried { from: f, init } if *f == from => Some(*init),
                _ => None,
            })
    }

    /// The body nodes a loop keeps across iterations: those the next iteration reads
    /// ([`Region::carried`]) and the [`Region::exits`], in order.
    pub fn kept(&self) -> Vec<u32> {
        let carried = self.carried();
        (0..self.period)
            .filter(|j| carried.contains(j) || self.exits.contains(j))
            .collect()
    }

    /// The draws one iteration makes.
    pub fn draws_per_iteration(&self) -> u32 {
        self.body
            .iter()
            .filter(|b| matches!(b.shape, Shape::Draw { .. }))
            .count() as u32
    }

    /// The body nodes whose value the next iteration reads (the loop's carried values), in
    /// order, each once.
    pub fn carried(&self) -> Vec<u32> {
        let mut c: Vec<u32> = self
            .body
            .iter()
            .flat_map(|b| b.args.iter())
            .filter_map(|a| match a {
                Arg::Carried { from, .. } => Some(*from),
                _ => None,
            })
            .collect();
        c.sort_unstable();
        c.dedup();
        c
    }
}

/// The regions of `tape`, in order and disjoint, each of at least two iterations and
/// `min_nodes` nodes (module doc). A tape with no period has none.
pub fn reroll(tape: &Tape, min_nodes: u32) -> Vec<Region> {
    let n = tape.len() as u32;
    let periods = candidate_periods(tape);
    let users = users_of(tape);
    let mut regions = Vec::new();
    let mut pos = 0;
    while pos + 2 <= n {
        let best = |s: u32| {
            periods
                .iter()
                .filter_map(|&p| grow(tape, s, p))
                .max_by_key(|r| (r.period * r.count, std::cmp::Reverse(r.period)))
        };
        let Some(mut r) = best(pos) else {
            pos += 1;
            continue;
        };
        // A region starting within the first period may cover more (a prologue node that
        // happens to match): take the one that reaches furthest.
        for s in pos + 1..(pos + r.period).min(n) {
            if let Some(q) = best(s) {
                if q.end() > r.end() {
                    r = q;
                }
            }
        }
        match exits_last(&users, r) {
            Some(r) if r.period * r.count >= min_nodes.max(2) => {
                pos = r.end();
                regions.push(r);
            }
            _ => pos += 1,
        }
    }
    regions
}

/// Gives back the tape's nodes from its regions and the nodes outside them.
pub fn unroll(tape: &Tape, regions: &[Region]) -> Vec<Node> {
    let mut out = Vec::with_capacity(tape.len());
    let mut next = 0u32;
    for r in regions {
        out.extend_from_slice(&tape.nodes[next as usize..r.start as usize]);
        for i in 0..r.count {
            for j in 0..r.period {
                out.push(r.node(i, j));
            }
        }
        next = r.end();
    }
    out.extend_from_slice(&tape.nodes[next as usize..]);
    out
}

/// The periods worth trying: 1..=16, and the distances between draws a few indices apart (a
/// time step draws the same number of times each step).
fn candidate_periods(tape: &Tape) -> Vec<u32> {
    let mut at = vec![None; tape.n_draws as usize];
    for (i, node) in tape.nodes.iter().enumerate() {
        if let Node::Draw(_, k) = *node {
            at[k as usize].get_or_insert(i as u32);
        }
    }
    let mut counts = std::collections::BTreeMap::new();
    for m in 1..=16usize {
        for w in (0..at.len().saturating_sub(m)).step_by(1 + at.len() / 64) {
            if let (Some(a), Some(b)) = (at[w], at[w + m]) {
                if b > a {
                    *counts.entry(b - a).or_insert(0u32) += 1;
                }
            }
        }
    }
    let mut by_count: Vec<(u32, u32)> = counts.into_iter().collect();
    by_count.sort_by_key(|&(p, c)| (std::cmp::Reverse(c), p));
    let mut periods: Vec<u32> = (1..=16).collect();
    periods.extend(by_count.iter().take(32).map(|&(p, _)| p));
    periods.sort_unstable();
    periods.dedup();
    periods
}

/// The template of period `p` at `s` from its first two iterations, grown over as many
/// iterations as follow it; `None` without two.
fn grow(tape: &Tape, s: u32, p: u32) -> Option<Region> {
    let n = tape.len() as u32;
    if s + 2 * p > n {
        return None;
    }
    let node = |i: u32| tape.nodes[i as usize];
    let mut body = Vec::with_capacity(p as usize);
    for j in 0..p {
        let (n0, n1) = (node(s + j), node(s + p + j));
        let shape = match (n0, n1) {
            (Node::Input(_) | Node::Const(_), _) if n0 == n1 => Shape::Leaf(n0),
            (Node::Draw(k0, a), Node::Draw(k1, b)) if k0 == k1 && b >= a => Shape::Draw {
                kind: k0,
                first: a,
                stride: b - a,
            },
            (Node::Unary(o0, _), Node::Unary(o1, _)) if o0 == o1 => Shape::Unary(o0),
            (Node::Binary(o0, ..), Node::Binary(o1, ..)) if o0 == o1 => Shape::Binary(o0),
            _ => return None,
        };
        let mut args = Vec::new();
        for (a0, a1) in n0.args().zip(n1.args()) {
            let arg = if a1.0 >= s + p {
                let l = a1.0 - (s + p);
                if l >= j || a0.0 != s + l {
                    return None;
                }
                Arg::Local(l)
            } else if a1.0 >= s {
                if a0.0 >= s {
                    return None;
                }
                Arg::Carried {
                    from: a1.0 - s,
                    init: a0,
                }
            } else if a0.0 >= s {
                return None;
            } else if a0 == a1 {
                Arg::Outer(a0)
            } else {
                Arg::Indexed(vec![a0, a1])
            };
            args.push(arg);
        }
        body.push(BodyNode { shape, args });
    }
    // One carried value per body node: every read of it starts from the same node (else the
    // loop starts an iteration later).
    let mut init_of = rustc_hash::FxHashMap::default();
    for a in body.iter().flat_map(|b| &b.args) {
        if let Arg::Carried { from, init } = a {
            if *init_of.entry(*from).or_insert(*init) != *init {
                return None;
            }
        }
    }
    let mut r = Region {
        start: s,
        period: p,
        count: 2,
        body,
        exits: Vec::new(),
    };
    // Each further iteration is checked whole before the region takes it (no copy of the
    // body per iteration: a 100,000-step tape grows here once per candidate period).
    'iterations: while r.end() + p <= n {
        let (i, end) = (r.count, r.end());
        for (j, b) in r.body.iter().enumerate() {
            let got = node(end + j as u32);
            let same_shape = match (b.shape, got) {
                (Shape::Leaf(x), g) => x == g,
                (
                    Shape::Draw {
                        kind,
                        first,
                        stride,
                    },
                    Node::Draw(k, d),
                ) => {
                    kind == k && u64::from(first) + u64::from(i) * u64::from(stride) == u64::from(d)
                }
                (Shape::Unary(o), Node::Unary(g, _)) => o == g,
                (Shape::Binary(o), Node::Binary(g, ..)) => o == g,
                _ => false,
            };
            if !same_shape {
                break 'iterations;
            }
            for (a, g) in b.args.iter().zip(got.args()) {
                let ok = match a {
                    Arg::Local(l) => g == r.id(i, *l),
                    Arg::Carried { from, .. } => g == r.id(i - 1, *from),
                    // A node before the region: the same one, or one per iteration.
                    Arg::Outer(x) => g == *x || g.0 < s,
                    Arg::Indexed(_) => g.0 < s,
                };
                if !ok {
                    break 'iterations;
                }
            }
        }
        for (j, b) in r.body.iter_mut().enumerate() {
            let got = node(end + j as u32);
            for (a, g) in b.args.iter_mut().zip(got.args()) {
                match a {
                    Arg::Outer(x) if g != *x => {
                        *a = Arg::Indexed(vec![*x; i as usize].into_iter().chain([g]).collect());
                    }
                    Arg::Indexed(xs) => xs.push(g),
                    _ => {}
                }
            }
        }
        r.count += 1;
    }
    Some(r)
}

/// For each node, the nodes that read it (`u32::MAX` for an output).
fn users_of(tape: &Tape) -> Vec<Vec<u32>> {
    let mut users = vec![Vec::new(); tape.len()];
    for (i, node) in tape.nodes.iter().enumerate() {
        for a in node.args() {
            users[a.index()].push(i as u32);
        }
    }
    for o in &tape.outputs {
        users[o.node.index()].push(u32::MAX);
    }
    users
}

/// `r` shortened until nothing after it reads an iteration other than its last (a loop keeps
/// only the last iteration's values); `None` when fewer than two iterations would be left.
fn exits_last(users: &[Vec<u32>], mut r: Region) -> Option<Region> {
    loop {
        let end = r.end();
        let last = r.start + (r.count - 1) * r.period;
        let escaping = (r.start..last).find(|&v| users[v as usize].iter().any(|&u| u >= end));
        match escaping {
            None => {
                r.exits = (0..r.period)
                    .filter(|&j| users[(last + j) as usize].iter().any(|&u| u >= end))
                    .collect();
                return Some(r);
            }
            Some(v) => {
                let i = (v - r.start) / r.period;
                if i + 1 < 2 {
                    return None;
                }
                r.count = i + 1;
                for b in &mut r.body {
                    for a in &mut b.args {
                        if let Arg::Indexed(xs) = a {
                            xs.truncate(r.count as usize);
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::products::Product;
    use proptest::prelude::*;

    /// `p`'s tape over `steps` steps (a basket of `assets`), from the passes' fixtures.
    fn product(p: Product, steps: u32, assets: u32) -> Tape {
        let v = match p {
            Product::Basket => crate::passes::fixtures::basket(assets, steps),
            p => crate::passes::fixtures::product(p, Some(steps)),
        };
        v.tape().clone()
    }

    fn assert_round_trip(t: &Tape, regions: &[Region]) {
        assert_eq!(unroll(t, regions), t.nodes, "unrolling gives back the tape");
        for w in regions.windows(2) {
            assert!(w[0].end() <= w[1].start, "disjoint, in order");
        }
    }

    /// Every built-in time-stepping product rerolls into one region of all its steps, and
    /// unrolls back to the tape node for node.
    #[test]
    fn every_product_rerolls_fully() {
        for (p, steps, assets) in [
            (Product::AsianCall, 252, 3),
            (Product::AsianPut, 64, 3),
            (Product::Barrier, 252, 3),
            (Product::Barrier, 52, 3),
            (Product::Basket, 16, 8),
            (Product::Basket, 5, 3),
        ] {
            let t = product(p, steps, assets);
            let r = reroll(&t, 16);
            assert_round_trip(&t, &r);
            assert_eq!(r.len(), 1, "{p:?} {steps}: {r:?}");
            assert_eq!(r[0].count, steps, "{p:?}: every step is an iteration");
            assert_eq!(
                r[0].draws_per_iteration(),
                if p == Product::Basket { assets } else { 1 },
                "{p:?}"
            );
        }
        // One step has no period.
        let t = product(Product::EuropeanCall, 1, 3);
        assert!(reroll(&t, 16).is_empty());
    }

    /// The bucketed Asian's vol changes by bucket: one region, its vol-dependent invariants
    /// indexed by iteration.
    #[test]
    fn a_bucketed_tape_rerolls_with_indexed_invariants() {
        let text = std::process::Command::new("python3")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../scripts/bucketed-asian.py"
            ))
            .args(["--steps", "252", "--buckets", "12"])
            .output();
        let out = text.expect("python3 runs scripts/bucketed-asian.py");
        assert!(out.status.success());
        let t = crate::format::read(&out.stdout).unwrap();
        let r = reroll(&t, 16);
        assert_round_trip(&t, &r);
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!(r[0].count, 252);
        assert!(r[0]
            .body
            .iter()
            .flat_map(|b| &b.args)
            .any(|a| matches!(a, Arg::Indexed(_))));
    }

    /// A tape built from a random step repeated with random invariants, a random prologue and
    /// an epilogue reading the last iteration.
    fn stepped_tape(seed: u64, period: u32, count: u32) -> (Tape, u32, u32) {
        let mut rng = crate::testing::SplitMix(seed);
        let mut t = crate::testing::random_tape(seed, 6 + (rng.below(6) as usize));
        t.outputs.clear();
        let pro = t.len() as u32;
        let draws0 = t.n_draws;
        // The step: each body node an op over outer nodes, earlier locals or carried values.
        let mut body = Vec::new();
        for j in 0..period {
            let pick = |rng: &mut crate::testing::SplitMix| -> Arg {
                match rng.below(4) {
                    0 => Arg::Outer(NodeId(rng.below(u64::from(pro)) as u32)),
                    1 => Arg::Indexed(
                        (0..count)
                            .map(|_| NodeId(rng.below(u64::from(pro)) as u32))
                            .collect(),
                    ),
                    2 if j > 0 => Arg::Local(rng.below(u64::from(j)) as u32),
                    _ => Arg::Carried {
                        from: rng.below(u64::from(period)) as u32,
                        init: NodeId(rng.below(u64::from(pro)) as u32),
                    },
                }
            };
            let b = match rng.below(5) {
                0 => BodyNode {
                    shape: Shape::Draw {
                        kind: DrawKind::Normal,
                        first: draws0 + j,
                        stride: period,
                    },
                    args: vec![],
                },
                1 => BodyNode {
                    shape: Shape::Unary(crate::tape::UnaryOp::Neg),
                    args: vec![pick(&mut rng)],
                },
                2 => BodyNode {
                    shape: Shape::Binary(crate::tape::BinaryOp::Mul),
                    args: vec![pick(&mut rng), pick(&mut rng)],
                },
                _ => BodyNode {
                    shape: Shape::Binary(crate::tape::BinaryOp::Add),
                    args: vec![pick(&mut rng), pick(&mut rng)],
                },
            };
            body.push(b);
        }
        let region = Region {
            start: pro,
            period,
            count,
            body,
            exits: Vec::new(),
        };
        for i in 0..count {
            for j in 0..period {
                let node = region.node(i, j);
                if let Node::Draw(_, k) = node {
                    t.n_draws = t.n_draws.max(k + 1);
                }
                t.nodes.push(node);
            }
        }
        // The epilogue: sums of the last iteration's values.
        let mut acc = region.id(count - 1, 0);
        for j in 1..period {
            t.nodes.push(Node::Binary(
                crate::tape::BinaryOp::Add,
                acc,
                region.id(count - 1, j),
            ));
            acc = NodeId(t.len() as u32 - 1);
        }
        t.outputs.push(crate::tape::Output {
            name: "y".into(),
            node: acc,
        });
        (t, pro, region.end())
    }

    /// Price and forward schedules with loops, interpreted, give the bits of the unrolled
    /// ones, and pass the schedule verifier; the loops of each mode.
    fn assert_loops_keep_the_bits(t: &Tape, what: &str) -> [usize; 3] {
        use crate::schedule::{Schedule, ScheduleOptions, Stmt};
        use nablac_abi::manifest::Mode;
        let v = crate::verify::verify(t.clone()).unwrap();
        [Mode::Price, Mode::Forward, Mode::Reverse].map(|mode| {
            let plain = Schedule::plain(&v, ScheduleOptions::new(mode));
            let looped = Schedule::plain(&v, ScheduleOptions::looped(mode));
            crate::schedule::verify::verify(&looped, &v).unwrap();
            let inputs: Vec<f64> = t.inputs.iter().map(|i| i.value).collect();
            for path in [0, 1, 77] {
                let a = crate::testing::run_schedule(&plain, &inputs, 9, path);
                let b = crate::testing::run_schedule(&looped, &inputs, 9, path);
                let bits = |r: &[f64]| r.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&a), bits(&b), "{what} {mode:?}: path {path}");
            }
            looped
                .body
                .iter()
                .filter(|s| matches!(s, Stmt::Loop(_)))
                .count()
        })
    }

    #[test]
    fn loops_keep_the_bits_of_the_unrolled_schedule() {
        for (p, steps, assets) in [
            (Product::AsianCall, 252, 3),
            (Product::Barrier, 52, 3),
            (Product::Basket, 16, 8),
            (Product::Digital, 1, 3),
        ] {
            let loops = assert_loops_keep_the_bits(&product(p, steps, assets), &format!("{p:?}"));
            // A one-step digital has no period; the others loop over their steps, in every mode.
            assert_eq!(loops.map(|l| l > 0), [steps > 1; 3], "{p:?}: loops");
        }
        for c in crate::corpus::load(&crate::corpus::dir()).unwrap() {
            assert_loops_keep_the_bits(c.tape.tape(), &c.name);
        }
        let (mut looped, mut regions) = ([0; 3], 0);
        for seed in 0..64 {
            let (t, _, _) = stepped_tape(seed, 1 + (seed % 9) as u32, 3 + (seed % 17) as u32);
            let loops = assert_loops_keep_the_bits(&t, &format!("stepped {seed}"));
            if !reroll(&t, crate::schedule::LOOP_MIN_NODES).is_empty() {
                regions += 1;
            }
            for m in 0..3 {
                looped[m] += usize::from(loops[m] > 0);
            }
        }
        // Many random steps are dead but in the last iteration (nothing to loop); the seeds
        // are fixed, and these many loop in each mode.
        assert!(
            regions >= 40 && looped.iter().all(|&l| l >= 10),
            "{looped:?} of {regions}"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Unrolling gives back any tape, with or without a period.
        #[test]
        fn unrolling_any_tape_gives_it_back(seed in any::<u64>(), n in 1usize..200) {
            let t = crate::testing::random_tape(seed, n);
            let r = reroll(&t, 2);
            prop_assert_eq!(unroll(&t, &r), t.nodes);
        }

        /// A repeated random step is found as one region covering its iterations (but perhaps
        /// the first, where a carried value's start happens to match) and unrolls back.
        #[test]
        fn a_repeated_random_step_rerolls(seed in any::<u64>(), period in 1u32..12, count in 3u32..40) {
            let (t, start, end) = stepped_tape(seed, period, count);
            crate::verify::verify(t.clone()).unwrap();
            let r = reroll(&t, 2);
            prop_assert_eq!(unroll(&t, &r), t.nodes.clone());
            let covered: u32 = r
                .iter()
                .map(|r| r.end().min(end).saturating_sub(r.start.max(start)))
                .sum();
            prop_assert!(covered >= end - start - 2 * period, "{} of {}: {:?}", covered, end - start, r);
        }
    }
}

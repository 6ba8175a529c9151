//! Tests of segmentation, opacity, the pipeline, max_live and explain.

use super::fixtures::{asian, european};
use super::*;
use crate::plan::{Checkpoint, Plan, SegmentOptions};
use crate::tape::{BinaryOp, Input, Node, NodeId, Output, Tape, UnaryOp};
use crate::testing::arb_tape;
use crate::testing::verified;
use proptest::prelude::*;

fn opts(segments: Option<u32>) -> SegmentOptions {
    SegmentOptions {
        segments,
        ..SegmentOptions::default()
    }
}

fn scratch(seg_len: Option<u32>) -> SegmentOptions {
    SegmentOptions {
        strategy: Checkpoint::Scratch,
        seg_len,
        ..SegmentOptions::default()
    }
}

fn ids(v: &[u32]) -> Vec<NodeId> {
    v.iter().copied().map(NodeId).collect()
}

// ---- acceptance: the 252-step Asian ----

#[test]
fn asian_252_persistent_and_crossing_per_segment_count() {
    let t = asian(252);
    for (s, persistent) in [(2, 10), (4, 14), (8, 22), (16, 38), (32, 70)] {
        let p = plan(&verified(&t), &opts(Some(s)));
        assert_eq!(p.segments.segments.len(), s as usize, "S={s}");
        assert_eq!(p.segments.persistent.len(), persistent, "S={s}");
        // Every cut lands on a step boundary where exactly seven values cross: strike, rate,
        // maturity, drift (%11), vol·√dt (%13), the running spot and the running sum.
        assert_eq!(p.segments.crossing, vec![7; s as usize - 1], "S={s}");
    }
}

#[test]
fn asian_252_sixteen_segments_in_detail() {
    let t = asian(252);
    let p = plan(&verified(&t), &SegmentOptions::default()); // 1536 >= 768 nodes: on, 16 segments
    let sp = &p.segments;
    assert_eq!(sp.strategy, Checkpoint::Registers);
    assert_eq!(
        sp.cuts,
        ids(&[98, 194, 290, 386, 482, 578, 674, 770, 866, 962, 1058, 1154, 1250, 1346, 1442])
    );
    assert!(sp.crossing.iter().all(|&c| c <= 7));
    // Cut 98 = step 14's running-sum node: its previous sum %92 and its spot %97 cross (strike,
    // rate and maturity cross too, but segment 1 does not read them). The reverse block reads
    // back only the spot: a sum's adjoint rule needs no forward value, so the running sums of
    // segment 1 are not recomputed and %92 is not read back.
    assert_eq!(sp.segments[1].bookmarks, ids(&[11, 13, 97]));
    // Per step the block recomputes the draw, vol·√dt·draw, + drift, exp and the spot (5 of the
    // step's 6 nodes), for its 16 steps, except the last spot %193, which crosses the next cut.
    assert_eq!(sp.segments[1].recompute.len(), 16 * 5 - 1);
    assert!(!sp.segments[1].recompute.contains(&NodeId(98)));
    assert_eq!(sp.segments[1].draws.len(), 16);
    assert_eq!(sp.segments[1].draws[0], NodeId(99));
    // The inputs, the output, %11, %13 and two chain values per cut.
    assert_eq!(
        &sp.persistent[..9],
        &ids(&[0, 1, 2, 3, 4, 11, 13, 92, 97])[..]
    );
    assert_eq!(*sp.persistent.last().unwrap(), NodeId(1535));
    assert!(sp.scratch_slots.is_empty());
    // Opacity: every reverse block re-keys (all have draws) and reads its bookmarks opaquely;
    // segment 0 also reads the inputs and %11, %13 opaquely (defined inside it).
    assert_eq!(p.opacity.rekey, vec![true; 16]);
    assert_eq!(p.opacity.opaque_reads[0], ids(&[0, 2, 3, 4, 11, 13]));
    assert_eq!(p.opacity.opaque_reads[1], sp.segments[1].bookmarks);
    // The payoff segment reads strike, rate and maturity back.
    let last = sp.segments.last().unwrap();
    assert_eq!(last.bookmarks, ids(&[1, 3, 4, 11, 13, 1436, 1441]));
}

#[test]
fn asian_252_max_live() {
    let t = asian(252);
    let p = plan(&verified(&t), &SegmentOptions::default());
    // Plain: three per step (draw, exp, previous spot) = 756, four prelude values the prelude's
    // adjoints read for their active arguments (vol, %8, %10, %12: no longer %5 and %13, which
    // only adjoints into constants and draws would read), five payoff values, and the output
    // itself, which the leaves read at the end.
    assert_eq!(max_live_plain(&verified(&t)), 756 + 4 + 5 + 1);
    let e = explain(&verified(&t), &p);
    assert_eq!(e.max_live_plain, 766);
    // Checkpointed: the 38 persistent values plus one segment's recomputed locals at a time (the
    // output among them, held until the leaves read it after the reverse sweep).
    assert_eq!(e.max_live_checkpointed, 69);
    assert!(e.max_live_checkpointed < 38 + 3 * 16 + 10);
    // More segments hold fewer values at once (32 segments keep 70 persistent, but each block
    // recomputes only 8 steps).
    let got: Vec<(u32, u32)> = [2, 4, 8, 16, 32]
        .into_iter()
        .map(|s| {
            (
                s,
                max_live_checkpointed(&verified(&t), &plan(&verified(&t), &opts(Some(s)))),
            )
        })
        .collect();
    assert_eq!(got, [(2, 390), (4, 201), (8, 109), (16, 69), (32, 61)]);
    assert!(got.windows(2).all(|w| w[1].1 < w[0].1), "{got:?}");
}

#[test]
fn default_switch_and_knobs() {
    let long = asian(252);
    let short = asian(100); // 624 nodes
    assert_eq!(short.len(), 624);
    assert_eq!(
        plan(&verified(&short), &SegmentOptions::default())
            .segments
            .segments
            .len(),
        1
    );
    let lowered = SegmentOptions {
        ckpt_nodes: 600,
        ..SegmentOptions::default()
    };
    // On, it cuts ~100-node segments: ceil(624 / 100) = 7.
    assert_eq!(plan(&verified(&short), &lowered).segments.segments.len(), 7);
    assert_eq!(
        plan(&verified(&short), &opts(Some(5)))
            .segments
            .segments
            .len(),
        5
    );
    assert_eq!(
        plan(&verified(&long), &opts(Some(1)))
            .segments
            .segments
            .len(),
        1
    );
    assert_eq!(
        plan(&verified(&long), &opts(Some(0)))
            .segments
            .segments
            .len(),
        1
    );
    let off = SegmentOptions {
        strategy: Checkpoint::Off,
        segments: Some(8),
        ..SegmentOptions::default()
    };
    let p = plan(&verified(&long), &off);
    assert_eq!(p.segments.segments.len(), 1);
    assert_eq!(p.segments.strategy, Checkpoint::Off);
}

#[test]
fn scratch_strategy_fills_slots() {
    let t = asian(252);
    let p = plan(&verified(&t), &scratch(Some(200))); // ceil(1536 / 200) = 8 segments
    let sp = &p.segments;
    assert_eq!(sp.strategy, Checkpoint::Scratch);
    assert_eq!(sp.segments.len(), 8);
    assert_eq!(sp.persistent.len(), 22);
    // Slots: the crossing values some reverse block reads back: strike, rate, maturity, drift,
    // vol·√dt, the running spot at each of the 7 cuts, and the running sum at the last cut (the
    // payoff's max reads it). The 6 other sums cross too, but no adjoint rule needs them, so they
    // get no slot: 13 of the 19 crossing values.
    assert_eq!(sp.scratch_slots.len(), 13);
    assert!(!sp.scratch_slots.contains(&NodeId(0)));
    assert!(!sp.scratch_slots.contains(&NodeId(2)));
    assert!(!sp.scratch_slots.contains(&NodeId(1535)));
    assert!(sp.scratch_slots.contains(&NodeId(1)));
    // The default segment length is 100 nodes: ceil(1536 / 100) = 16 segments.
    assert_eq!(
        plan(&verified(&t), &scratch(None)).segments.segments.len(),
        16
    );
    assert_eq!(
        plan(&verified(&t), &scratch(Some(100)))
            .segments
            .segments
            .len(),
        16
    );
    assert_eq!(
        plan(&verified(&t), &scratch(Some(2000)))
            .segments
            .segments
            .len(),
        1
    );
    assert!(plan(&verified(&t), &scratch(Some(2000)))
        .segments
        .scratch_slots
        .is_empty());
    // seg_len 0 is read as 1; S is then reduced to n.
    assert_eq!(
        plan(&european(), &scratch(Some(0))).segments.segments.len(),
        24
    );
}

// ---- small hand-checked cases ----

/// %0 = input x; %1 = exp %0; %2 = mul %1 %0; output %2.
fn tiny() -> Tape {
    Tape {
        inputs: vec![Input {
            name: "x".into(),
            value: 1.0,
        }],
        outputs: vec![Output {
            name: "y".into(),
            node: NodeId(2),
        }],
        consts: vec![],
        nodes: vec![
            Node::Input(0),
            Node::Unary(UnaryOp::Exp, NodeId(0)),
            Node::Binary(BinaryOp::Mul, NodeId(1), NodeId(0)),
        ],
        n_draws: 0,
    }
}

#[test]
fn max_live_by_hand() {
    // Steps: x; e = exp x; m = e*x; adjoint of m reads e, x; adjoint of e reads e; the leaves
    // read m. Alive before each step: 0, 1, 2, 3 (x, e, m), 2 (e, m), 1 (m).
    let t = tiny();
    assert_eq!(max_live_plain(&verified(&t)), 3);
    assert_eq!(alive_profile_plain(&verified(&t)), vec![0, 2, 3]);
}

#[test]
fn more_segments_than_nodes_is_reduced() {
    let t = tiny();
    let p = plan(&verified(&t), &opts(Some(10)));
    assert_eq!(p.segments.segments.len(), 3);
    assert_eq!(p.segments.cuts, ids(&[1, 2]));
    // x crosses both cuts, e crosses cut 2.
    assert_eq!(p.segments.crossing, vec![1, 2]);
    assert_eq!(p.segments.persistent, ids(&[0, 1, 2]));
    // Everything persists, so nothing is recomputed; a block reads opaquely what its adjoint
    // rules read (the input's block reads nothing; exp reads its result; mul both arguments).
    assert_eq!(
        p.opacity.opaque_reads,
        vec![vec![], ids(&[1]), ids(&[0, 1])]
    );
    assert_eq!(p.opacity.rekey, vec![false; 3]);
    // Held at once: e, m (read by the leaves at the end) and the copies of x and e while the
    // last block's adjoint of m reads them.
    assert_eq!(max_live_checkpointed(&verified(&t), &p), 4);
}

#[test]
fn dead_nodes_do_not_count_towards_the_segment_length() {
    // The European (24 live nodes) with 1,000 dead draws after it: 1,024 nodes, but no kernel
    // computes the dead ones, so the default plan stays plain (it was cut into 11 segments).
    let e = european();
    let mut t = e.tape().clone();
    let first = t.n_draws;
    for k in 0..1000 {
        t.nodes
            .push(Node::Draw(crate::tape::DrawKind::Normal, first + k));
    }
    t.n_draws = t.draws_used();
    assert_eq!(t.len(), 1024);
    let p = plan(&verified(&t), &SegmentOptions::default());
    assert_eq!(p.segments.segments.len(), 1);
    let p = plan(
        &verified(&t),
        &SegmentOptions {
            strategy: Checkpoint::Scratch,
            ..SegmentOptions::default()
        },
    );
    assert_eq!(
        p.segments.segments.len(),
        1,
        "24 live nodes: one 100-node segment"
    );
}

#[test]
fn dead_nodes_never_cross() {
    // %0 x; %1 exp x; %2..%9 a chain of neg from %1; %10 = log %1 (dead: nothing reads it);
    // %11 = add %9 %0 is the output. %1's only read after the chain is dead.
    let mut nodes = vec![Node::Input(0), Node::Unary(UnaryOp::Exp, NodeId(0))];
    for i in 2..10 {
        nodes.push(Node::Unary(UnaryOp::Neg, NodeId(i - 1)));
    }
    nodes.push(Node::Unary(UnaryOp::Log, NodeId(1)));
    nodes.push(Node::Binary(BinaryOp::Add, NodeId(9), NodeId(0)));
    let t = Tape {
        inputs: vec![Input {
            name: "x".into(),
            value: 1.0,
        }],
        outputs: vec![Output {
            name: "y".into(),
            node: NodeId(11),
        }],
        consts: vec![],
        nodes,
        n_draws: 0,
    };
    let p = plan(&verified(&t), &opts(Some(2)));
    assert!(!p.activity.live[10]);
    let cut = p.segments.cuts[0].0;
    assert!((2..10).contains(&cut), "cut {cut}");
    // Only x and the chain value at the cut cross; %1 (read by the dead %10) does not.
    assert_eq!(p.segments.crossing, vec![2]);
    assert!(!p.segments.persistent.contains(&NodeId(1)) || cut == 2);
    assert!(!p.segments.persistent.contains(&NodeId(10)));
}

#[test]
fn one_segment_is_the_plain_plan() {
    let t = european();
    let p = plan(&verified(&t), &SegmentOptions::default());
    let sp = &p.segments;
    assert_eq!(sp.segments.len(), 1);
    assert_eq!(sp.segments[0].range, 0..24);
    assert!(sp.cuts.is_empty() && sp.crossing.is_empty() && sp.scratch_slots.is_empty());
    assert_eq!(sp.persistent, ids(&[0, 1, 2, 3, 4, 23]));
    assert!(sp.segments[0].bookmarks.is_empty());
    assert!(sp.segments[0].recompute.is_empty() && sp.segments[0].draws.is_empty());
    assert_eq!(p.opacity.opaque_reads, vec![Vec::<NodeId>::new()]);
    assert_eq!(p.opacity.rekey, vec![false]);
    assert_eq!(
        max_live_checkpointed(&verified(&t), &p),
        max_live_plain(&verified(&t))
    );
}

#[test]
fn check_plan_rejects_broken_plans() {
    let t = asian(8);
    let good = plan(&verified(&t), &opts(Some(4)));
    assert_eq!(check_plan(&t, &good), Ok(()));
    type Mutation = Box<dyn Fn(&mut Plan)>;
    let broken: Vec<(&str, Mutation)> = vec![
        (
            "persistent",
            Box::new(|p| {
                p.segments.persistent.remove(6);
            }),
        ),
        ("cut", Box::new(|p| p.segments.cuts[1].0 += 1)),
        ("crossing", Box::new(|p| p.segments.crossing[0] += 1)),
        (
            "bookmarks",
            Box::new(|p| {
                p.segments.segments[2].bookmarks.pop();
            }),
        ),
        (
            "draws",
            Box::new(|p| {
                p.segments.segments[1].draws.clear();
            }),
        ),
        (
            "opaque",
            Box::new(|p| {
                p.opacity.opaque_reads[1].clear();
            }),
        ),
        ("rekey", Box::new(|p| p.opacity.rekey[0] = false)),
        (
            "scratch",
            Box::new(|p| p.segments.scratch_slots.push(NodeId(0))),
        ),
        (
            "strategy",
            Box::new(|p| p.segments.strategy = Checkpoint::Off),
        ),
        ("activity", Box::new(|p| p.activity.live[3] = false)),
    ];
    for (what, f) in broken {
        let mut p = good.clone();
        f(&mut p);
        let e = check_plan(&t, &p).expect_err(what);
        assert!(!e.to_string().is_empty());
    }
    // A persistent value dropped from the set also breaks a forward line or the set rule.
    let mut p = good.clone();
    p.segments.persistent.retain(|v| v.0 != 13);
    assert!(check_plan(&t, &p).is_err());
}

// ---- explain ----

#[test]
fn explain_json_keys_and_values() {
    let t = asian(252);
    let p = plan(&verified(&t), &SegmentOptions::default());
    let v = serde_json::to_value(explain(&verified(&t), &p)).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(|k| k.as_str()).collect();
    let mut want = vec![
        "nodes",
        "active",
        "segments",
        "cuts",
        "crossing",
        "persistent",
        "max_live_plain",
        "max_live_checkpointed",
    ];
    want.sort();
    let mut got = keys.clone();
    got.sort();
    assert_eq!(got, want);
    assert_eq!(v["nodes"], 1536);
    // Everything but the 5 constants and the 252 draws carries an adjoint.
    assert_eq!(v["active"], 1536 - 5 - 252);
    assert_eq!(v["segments"], 16);
    assert_eq!(v["cuts"][0], 98);
    assert_eq!(v["crossing"][14], 7);
    assert_eq!(v["persistent"], 38);
    assert_eq!(v["max_live_plain"], 766);
}

#[test]
fn explain_text_and_svg() {
    let t = asian(252);
    let p = plan(&verified(&t), &SegmentOptions::default());
    let text = explain_text(&verified(&t), &p);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "1536 nodes, 1279 active; 16 segments (registers); 38 persistent; max live 766 plain, 69 checkpointed"
    );
    assert_eq!(lines.len(), 2 + 16 + 1);
    assert!(lines[18].starts_with("crossing: values crossing the cut"));
    assert_eq!(
        lines[2].split_whitespace().collect::<Vec<_>>(),
        ["0", "%0..%98", "98", "-", "0", "14", "6"]
    );
    assert_eq!(
        lines[3].split_whitespace().collect::<Vec<_>>(),
        ["1", "%98..%194", "96", "7", "3", "16", "3"]
    );
    let svg = explain_svg(&verified(&t), &p);
    assert!(svg.starts_with("<svg"), "{}", &svg[..80.min(svg.len())]);
    assert!(svg.trim_end().ends_with("</svg>"));
    for needle in [
        "plain vs checkpointed (16 segments)",
        "node position",
        "forward values alive",
        "plain (max 766)",
        "checkpointed (max 69)",
    ] {
        assert!(svg.contains(needle), "missing {needle}");
    }
    // Deterministic.
    assert_eq!(svg, explain_svg(&verified(&t), &p));
    // The plain picture of a short tape draws too.
    let e = european();
    let pe = plan(&verified(&e), &SegmentOptions::default());
    assert!(explain_svg(&verified(&e), &pe).contains("plain kernel (not checkpointed)"));
    // Profiles: the plain curve peaks at the end of the tape, the checkpointed one stays low.
    let plain = alive_profile_plain(&verified(&t));
    let ckpt = alive_profile_checkpointed(&verified(&t), &p);
    assert_eq!(plain.iter().max(), Some(&766));
    assert_eq!(ckpt.iter().max(), Some(&69));
    assert!(plain[1400] > 600 && ckpt[1400] < 90);
}

// ---- property tests on random tapes ----

/// Position-by-position recount of the crossing rule, independent of the pass's difference array.
fn crosses(t: &Tape, live: &[bool], v: usize, c: usize) -> bool {
    if !live[v] || matches!(t.nodes[v], Node::Const(_)) || v >= c {
        return false;
    }
    let read_late = t
        .nodes
        .iter()
        .enumerate()
        .skip(c)
        .any(|(i, node)| live[i] && node.args().any(|a| a.index() == v));
    read_late || t.outputs.iter().any(|o| o.node.index() == v)
}

fn strategy_of(k: u8) -> Checkpoint {
    [Checkpoint::Off, Checkpoint::Registers, Checkpoint::Scratch][k as usize % 3]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn random_plans_keep_their_invariants(
        t in arb_tape(),
        s in 0u32..12,
        k in 0u8..3,
        seg_len in 0u32..20,
    ) {
        let o = SegmentOptions { strategy: strategy_of(k), segments: if s == 0 { None } else { Some(s) }, ckpt_nodes: 20, seg_len: Some(seg_len) };
        let p = plan(&verified(&t), &o); // checks check_plan in debug builds
        prop_assert_eq!(check_plan(&t, &p), Ok(()));
        let sp = &p.segments;
        let n = t.len();
        let live_nodes = p.activity.live.iter().filter(|&&l| l).count();
        prop_assert_eq!(sp.segments.len() as u32, segment_count(live_nodes, &o));
        prop_assert!(sp.segments.len() <= n.max(1));
        // Crossing counts against a brute-force recount; the persistent set is exactly
        // crossings ∪ inputs ∪ outputs.
        let live = &p.activity.live;
        let mut expect = std::collections::BTreeSet::new();
        for (j, c) in sp.cuts.iter().enumerate() {
            let crossing: Vec<usize> = (0..n).filter(|&v| crosses(&t, live, v, c.index())).collect();
            prop_assert_eq!(crossing.len() as u32, sp.crossing[j]);
            expect.extend(crossing);
        }
        for (i, node) in t.nodes.iter().enumerate() {
            if matches!(node, Node::Input(_)) { expect.insert(i); }
        }
        for o in &t.outputs { expect.insert(o.node.index()); }
        let persistent: Vec<usize> = sp.persistent.iter().map(|v| v.index()).collect();
        prop_assert_eq!(persistent, expect.into_iter().collect::<Vec<_>>());
        // Each segment's forward lines read only its nodes, persistent values, constants.
        for seg in &sp.segments {
            for i in seg.range.clone() {
                if !live[i as usize] { continue; }
                for a in t.nodes[i as usize].args() {
                    prop_assert!(seg.range.contains(&a.0) || sp.persistent.contains(&a) || matches!(t.node(a), Node::Const(_)));
                }
            }
        }
        // Each cut is a best position of its (clamped) window: none in the window crosses less.
        let cross = crossing_profile(&live_last_read(&t, live));
        let count = sp.segments.len();
        if count > 1 {
            let w = (n / (4 * count)).max(1);
            for (j, c) in sp.cuts.iter().enumerate() {
                let target = (j + 1) * n / count;
                let lo = target.saturating_sub(w).max(if j == 0 { 1 } else { sp.cuts[j - 1].index() + 1 });
                let hi = (target + w).min(n - count + j + 1);
                for q in lo..=hi {
                    prop_assert!(cross[q] >= cross[c.index()]);
                }
            }
        }
        // One segment is the plain plan.
        if count == 1 {
            prop_assert!(sp.cuts.is_empty());
            prop_assert!(p.opacity.opaque_reads.iter().all(|r| r.is_empty()));
            prop_assert_eq!(max_live_checkpointed(&verified(&t), &p), max_live_plain(&verified(&t)));
        }
        // explain agrees with the plan and never panics.
        let e = explain(&verified(&t), &p);
        prop_assert_eq!(e.persistent as usize, sp.persistent.len());
        prop_assert_eq!(e.segments as usize, count);
        prop_assert!(explain_svg(&verified(&t), &p).contains("</svg>"));
    }

    #[test]
    fn one_segment_gives_the_plain_plan(t in arb_tape()) {
        let p = plan(&verified(&t), &opts(Some(1)));
        prop_assert_eq!(p.segments.segments.len(), 1);
        prop_assert!(p.segments.cuts.is_empty() && p.segments.crossing.is_empty());
        prop_assert_eq!(p.segments.strategy, Checkpoint::Off);
        prop_assert_eq!(&p.opacity.opaque_reads, &vec![Vec::<NodeId>::new()]);
        prop_assert_eq!(&p.opacity.rekey, &vec![false]);
        let mut io: Vec<NodeId> = t.ids().filter(|&v| matches!(t.node(v), Node::Input(_))).collect();
        io.extend(t.outputs.iter().map(|o| o.node));
        io.sort();
        io.dedup();
        prop_assert_eq!(&p.segments.persistent, &io);
    }
}

#[test]
#[ignore = "writes /tmp/explain_asian252.svg for a look"]
fn write_explain_svg() {
    let t = asian(252);
    let p = plan(&verified(&t), &SegmentOptions::default());
    std::fs::write("/tmp/explain_asian252.svg", explain_svg(&verified(&t), &p)).unwrap();
}

#[test]
fn long_tapes_and_many_segments_stay_fast() {
    // 12,024 nodes cut into every possible segment (S = n) and into 16: each plan, its check and
    // its explain finish well under a second in a debug build (everything is O(n log n)).
    let t = asian(2000);
    let start = std::time::Instant::now();
    let every = plan(&verified(&t), &opts(Some(u32::MAX)));
    assert_eq!(every.segments.segments.len(), t.len());
    assert_eq!(every.segments.cuts.len(), t.len() - 1);
    let e = explain(&verified(&t), &every);
    assert!(e.max_live_checkpointed > 0);
    let p16 = plan(&verified(&t), &opts(Some(16)));
    assert_eq!(p16.segments.persistent.len(), 38);
    assert!(start.elapsed().as_secs() < 20, "{:?}", start.elapsed());
}

#[test]
#[ignore = "prints the explain table"]
fn print_explain_text() {
    let t = asian(252);
    println!(
        "{}",
        explain_text(
            &verified(&t),
            &plan(&verified(&t), &SegmentOptions::default())
        )
    );
    println!(
        "{}",
        explain_text(&european(), &plan(&european(), &SegmentOptions::default()))
    );
}

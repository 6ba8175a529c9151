//! max_live: how many forward values a kernel that computes the Greeks holds at once.
//!
//! Definition. The kernel runs a *schedule* of steps; each step reads some forward values and may
//! define one. A value is alive from the step that defines it until the last step that reads it
//! (a value nobody reads is never alive). At each step we count the values alive *just before* it
//! runs, i.e. defined at an earlier step and read at this step or later (the convention of
//! `Liveness::alive`); max_live is the largest such count. Constants are never counted (they are
//! re-materialized at every use); dead nodes are never computed; adjoints are not forward values and
//! are not counted.
//!
//! The plain schedule: one forward step per live non-constant node in order (reading its
//! arguments), one step reading the outputs, then one reverse step per live *active* node from the
//! highest down, reading [`adjoint_reads`](super::adjoint_reads).
//!
//! The checkpointed schedule (S > 1): the same forward steps and output step; then for each segment
//! from the last to the first, its reverse block: one step per opaque read (ascending; it reads
//! the persistent value and defines a block-local copy), one step per recomputed node
//! (`Segment::recompute`; it reads block-local copies, recomputed locals and
//! nothing else), then the segment's adjoint rules from its highest live active node down, reading
//! the block's copies. So a persistent value lives from its definition to its last opaque read, and
//! a recomputed local from its recomputation to its last read inside the block. With S = 1 the
//! checkpointed schedule is the plain one. The schedule is the same for both strategies: with the
//! scratch strategy a crossing value sits in its slot rather than a register, but it is still counted
//! (max_live measures the values a path holds, wherever they are).
//!
//! Each step is attributed to a node position (its node; an opaque read to its segment's first
//! node; the output step to node n-1), which gives the profile drawn by `explain_svg`: per
//! position, the most values alive before any of its steps (a position without steps, a constant
//! or a dead node, repeats the one before it).

use super::adjoint_reads;
use crate::plan::{Activity, Plan};
use crate::tape::{Node, NodeId, Tape};

/// A simulated schedule: the lifetime of every value and the position of every step.
struct Sim {
    /// (definition step, last read step) per value.
    values: Vec<(usize, usize)>,
    /// The node position each step is attributed to.
    pos: Vec<u32>,
}

impl Sim {
    fn new() -> Self {
        Sim {
            values: Vec::new(),
            pos: Vec::new(),
        }
    }
    /// Starts a step attributed to `pos`; returns its index.
    fn step(&mut self, pos: u32) -> usize {
        self.pos.push(pos);
        self.pos.len() - 1
    }
    fn read(&mut self, value: Option<usize>, t: usize) {
        if let Some(v) = value {
            self.values[v].1 = self.values[v].1.max(t);
        }
    }
    fn define(&mut self, t: usize) -> usize {
        self.values.push((t, t));
        self.values.len() - 1
    }
    /// The number of values alive just before each step.
    fn alive(&self) -> Vec<u32> {
        let steps = self.pos.len();
        let mut delta = vec![0i64; steps + 2];
        for &(def, last) in &self.values {
            if last > def {
                delta[def + 1] += 1;
                delta[last + 1] -= 1;
            }
        }
        let mut count = 0i64;
        delta[..steps]
            .iter()
            .map(|d| {
                count += d;
                count as u32
            })
            .collect()
    }
    /// Per node position (0..n), the most values alive before any step attributed to it; a
    /// position with no step (a constant, a dead node) repeats the position before it.
    fn profile(&self, n: usize) -> Vec<u32> {
        let mut out: Vec<Option<u32>> = vec![None; n];
        for (t, a) in self.alive().into_iter().enumerate() {
            if let Some(slot) = out.get_mut(self.pos[t] as usize) {
                *slot = Some(slot.map_or(a, |s| s.max(a)));
            }
        }
        let mut prev = 0;
        out.into_iter()
            .map(|v| {
                prev = v.unwrap_or(prev);
                prev
            })
            .collect()
    }
}

/// Runs the forward steps and the output step; returns each node's forward value (None for
/// constants and dead nodes).
fn forward(sim: &mut Sim, tape: &Tape, activity: &Activity) -> Vec<Option<usize>> {
    let n = tape.len();
    let mut fwd: Vec<Option<usize>> = vec![None; n];
    for (i, node) in tape.nodes.iter().enumerate() {
        if !activity.live[i] || matches!(node, Node::Const(_)) {
            continue;
        }
        let t = sim.step(i as u32);
        for a in node.args() {
            sim.read(fwd[a.index()], t);
        }
        fwd[i] = Some(sim.define(t));
    }
    let t = sim.step(n.saturating_sub(1) as u32);
    for out in &tape.outputs {
        sim.read(fwd[out.node.index()], t);
    }
    fwd
}

fn plain_sim(tape: &Tape, activity: &Activity) -> Sim {
    let mut sim = Sim::new();
    let fwd = forward(&mut sim, tape, activity);
    for i in (0..tape.len()).rev() {
        if activity.live[i] && activity.active[i] {
            let t = sim.step(i as u32);
            for r in adjoint_reads(&tape.nodes[i], NodeId(i as u32), &activity.active) {
                sim.read(fwd[r.index()], t);
            }
        }
    }
    sim
}

fn checkpointed_sim(tape: &Tape, plan: &Plan) -> Sim {
    let act = &plan.activity;
    let sp = &plan.segments;
    if !sp.is_checkpointed() {
        return plain_sim(tape, act);
    }
    let mut sim = Sim::new();
    let fwd = forward(&mut sim, tape, act);
    let n = tape.len();
    // What a block reads each node as: its copy, its recomputed local, or (should the plan lack an
    // opaque read) the forward value. Entries a block sets are restored after it (O(n) in all).
    let mut cur: Vec<Option<usize>> = fwd.clone();
    let mut touched: Vec<usize> = Vec::new();
    for s in (0..sp.segments.len()).rev() {
        let seg = &sp.segments[s];
        for i in touched.drain(..) {
            cur[i] = fwd[i];
        }
        let empty = Vec::new();
        for &p in plan.opacity.opaque_reads.get(s).unwrap_or(&empty) {
            let t = sim.step(seg.range.start);
            sim.read(fwd.get(p.index()).copied().flatten(), t);
            if p.index() < n {
                cur[p.index()] = Some(sim.define(t));
                touched.push(p.index());
            }
        }
        for &v in &seg.recompute {
            let t = sim.step(v.0);
            for a in tape.node(v).args() {
                sim.read(cur[a.index()], t);
            }
            cur[v.index()] = Some(sim.define(t));
            touched.push(v.index());
        }
        for i in seg.range.clone().rev() {
            let i = i as usize;
            if act.live[i] && act.active[i] {
                let t = sim.step(i as u32);
                for r in adjoint_reads(&tape.nodes[i], NodeId(i as u32), &act.active) {
                    sim.read(cur[r.index()], t);
                }
            }
        }
    }
    sim
}

/// The most forward values the plain kernel holds at once (the module doc defines it).
pub fn max_live_plain(tape: &Tape, activity: &Activity) -> u32 {
    plain_sim(tape, activity)
        .alive()
        .into_iter()
        .max()
        .unwrap_or(0)
}

/// The most forward values the plan's kernel holds at once (equal to the plain one for S = 1).
pub fn max_live_checkpointed(tape: &Tape, plan: &Plan) -> u32 {
    checkpointed_sim(tape, plan)
        .alive()
        .into_iter()
        .max()
        .unwrap_or(0)
}

/// Per node position, the most values the plain kernel holds at a step attributed to it.
pub fn alive_profile_plain(tape: &Tape, activity: &Activity) -> Vec<u32> {
    plain_sim(tape, activity).profile(tape.len())
}

/// Per node position, the most values the plan's kernel holds at a step attributed to it.
pub fn alive_profile_checkpointed(tape: &Tape, plan: &Plan) -> Vec<u32> {
    checkpointed_sim(tape, plan).profile(tape.len())
}

//! max_live: how many forward values a kernel holds at once, counted over its schedule.
//!
//! Definition. The schedule's statements are run in order; a statement that reads forward values
//! or defines one is a *step*. A value is alive from the step that defines it until the last step
//! that reads it (a value nobody reads is never alive). At each step we count the values alive
//! *just before* it runs, i.e. defined at an earlier step and read at this step or later (the
//! convention of `Liveness::alive`); max_live is the largest such count. Constants are literals and
//! never counted; adjoints are not forward values and are not counted.
//!
//! Steps: a definition reads the values its rule reads and defines its node's value; an opaque
//! read reads the persistent value and defines the block's copy; an adjoint application reads
//! what its steps read (`Adjoint::reads`); a tangent definition (forward mode) reads what its steps
//! read and the arguments' tangents, and defines a tangent, which counts like a value; the leaves
//! read the outputs (and in forward mode their tangents). Declarations, seeds,
//! re-keys, notes and scratch spills (a store of the value just defined) are not steps. A value
//! declared in a block dies at its end (a name read later refers to the enclosing definition
//! again). With the scratch strategy a crossing value sits in its slot rather than a register,
//! but it is still counted: max_live measures the values a path holds, wherever they are.
//!
//! Each step is attributed to a node position (its node; an opaque read to its block's first
//! node; the leaves to node n-1), which gives the profile drawn by `explain_svg`: per position,
//! the most values alive before any of its steps (a position without steps, a constant or a dead
//! node, repeats the one before it).

use super::{Class, Def, Operand, Schedule, ScheduleOptions, Stmt, Var};
use crate::plan::Plan;
use crate::verify::Verified;
use nablac_abi::manifest::Mode;
use rustc_hash::FxHashMap as HashMap;

/// A run of the schedule: the lifetime of every value and the position of every step.
struct Sim {
    /// (definition step, last read step) per value.
    values: Vec<(usize, usize)>,
    /// The node position each step is attributed to.
    pos: Vec<u32>,
    /// The value each name refers to now.
    current: HashMap<Var, usize>,
    /// Also count adjoints (`storage_slots`): the lifetime index of each (node, lane) adjoint.
    adjoints: Option<HashMap<(super::Grad, super::Lane), usize>>,
    /// Every access in order, (step, value, writes): reads, definitions and adjoint updates
    /// (`spill_traffic`).
    accesses: Vec<(usize, usize, bool)>,
}

impl Sim {
    fn step(&mut self, pos: u32) -> usize {
        self.pos.push(pos);
        self.pos.len() - 1
    }

    fn read(&mut self, x: Option<Operand>, t: usize) {
        if let Some(Operand::Var(var)) = x {
            if let Some(&v) = self.current.get(&var) {
                self.values[v].1 = self.values[v].1.max(t);
                self.accesses.push((t, v, false));
            }
        }
    }

    /// An adjoint written at step `t` (an accumulation reads it too): alive from its first
    /// write, and to this step at least.
    fn touch_adjoint(&mut self, key: (super::Grad, super::Lane), t: usize) {
        let Some(adj) = self.adjoints.as_mut() else {
            return;
        };
        let v = match adj.get(&key) {
            Some(&v) => {
                self.values[v].1 = self.values[v].1.max(t);
                v
            }
            None => {
                self.values.push((t, t));
                adj.insert(key, self.values.len() - 1);
                self.values.len() - 1
            }
        };
        self.accesses.push((t, v, true));
    }

    /// Defines `var` at step `t`; returns what the name referred to before.
    fn define(&mut self, var: Var, t: usize) -> (Var, Option<usize>) {
        self.values.push((t, t));
        let v = self.values.len() - 1;
        self.accesses.push((t, v, true));
        let old = self.current.insert(var, v);
        (var, old)
    }

    /// Runs `stmts` as one scope; `first` is the position its opaque reads are attributed to.
    fn run(&mut self, stmts: &[Stmt], first: u32, last: u32) {
        self.run_then(stmts, first, last, &[]);
    }

    /// [`Sim::run`], the scope ending with a loop iteration's carried values taking their
    /// `next` (read at a last step of the scope, before its locals die).
    fn run_then(&mut self, stmts: &[Stmt], first: u32, last: u32, carried: &[super::Carry]) {
        let mut restore: Vec<(Var, Option<usize>)> = Vec::new();
        for s in stmts {
            match s {
                Stmt::Define { node, def, declare } => {
                    let t = self.step(node.0);
                    if let Def::Rule { args, .. } = def {
                        for &a in args {
                            self.read(a, t);
                        }
                    }
                    let old = self.define(Var::Value(*node), t);
                    if *declare {
                        restore.push(old);
                    }
                }
                // A bookmark's read defines the copy only (the value it was stored from is
                // another iteration's); a read from scratch or from the value keeps the value
                // alive up to it, as the estimate has always counted.
                Stmt::OpaqueRead { node, from } => {
                    let t = self.step(first);
                    if !matches!(from, Some(slot) if slot.class == Class::Local) {
                        self.read(Some(Operand::Var(Var::Value(*node))), t);
                    }
                    restore.push(self.define(Var::Copy(*node), t));
                }
                Stmt::Adjoint(adj) => {
                    let t = self.step(adj.node.0);
                    for x in adj.reads() {
                        self.read(Some(x), t);
                    }
                    if self.adjoints.is_some() {
                        self.touch_adjoint((super::Grad::Of(adj.node), adj.lane), t);
                        for to in adj.to.into_iter().flatten() {
                            self.touch_adjoint((to, adj.lane), t);
                        }
                    }
                }
                Stmt::Seed { node, lane } if self.adjoints.is_some() => {
                    let t = self.step(node.0);
                    self.touch_adjoint((super::Grad::Of(*node), *lane), t);
                }
                Stmt::MoveAdjoint { to, from, lane } if self.adjoints.is_some() => {
                    let t = self.step(first);
                    self.touch_adjoint((*from, *lane), t);
                    self.touch_adjoint((*to, *lane), t);
                }
                // A declaration starts a new adjoint (a loop body's, each iteration).
                Stmt::DeclareAdjoints { grad, lanes } => {
                    if let Some(adj) = self.adjoints.as_mut() {
                        for &l in lanes {
                            adj.remove(&(*grad, l));
                        }
                    }
                }
                // A bookmark's store reads its carried value; a spill to scratch stands
                // right after its value's definition and adds nothing.
                Stmt::Store { var, slot } if slot.class == Class::Local => {
                    let t = self.step(first);
                    self.read(Some(Operand::Var(*var)), t);
                }
                Stmt::Tangent(tan) => {
                    let t = self.step(tan.node.0);
                    for x in tan.reads() {
                        self.read(Some(x), t);
                    }
                    restore.push(self.define(Var::Tangent(tan.node, tan.lane), t));
                }
                Stmt::Leaves(leaves) => {
                    let t = self.step(last);
                    for leaf in leaves {
                        match *leaf {
                            super::Leaf::Value(x) => self.read(Some(x), t),
                            super::Leaf::Adjoint(node, lane) => {
                                self.touch_adjoint((super::Grad::Of(node), lane), t)
                            }
                            _ => {}
                        }
                    }
                }
                Stmt::Block(b) => self.run(&b.body, b.range.start, last),
                Stmt::Loop(l) => {
                    // Every iteration, as the unrolled kernel runs them: each ends reading its
                    // `next` values, which the carried variables then hold (they belong to
                    // the enclosing scope: the rest of the tape reads them).
                    let t = self.step(first);
                    for c in &l.carried {
                        self.read(Some(c.init), t);
                        self.define(c.var, t);
                    }
                    for _ in 0..l.count {
                        self.run_then(&l.body, first, last, &l.carried);
                    }
                }
                Stmt::Note(_)
                | Stmt::Declare(_)
                | Stmt::Store { .. }
                | Stmt::Rekey
                | Stmt::MoveAdjoint { .. }
                | Stmt::Seed { .. } => {}
            }
        }
        let mut next = Vec::new();
        if !carried.is_empty() {
            let end = self.step(first);
            for c in carried {
                self.read(Some(c.next), end);
                next.push((c.var, end));
            }
        }
        for (var, old) in restore.into_iter().rev() {
            match old {
                Some(v) => self.current.insert(var, v),
                None => self.current.remove(&var),
            };
        }
        for (var, end) in next {
            self.define(var, end);
        }
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
}

fn simulate(schedule: &Schedule, nodes: usize) -> Sim {
    simulate_with(schedule, nodes, false)
}

fn simulate_with(schedule: &Schedule, nodes: usize, adjoints: bool) -> Sim {
    let mut sim = Sim {
        values: Vec::new(),
        pos: Vec::new(),
        current: HashMap::default(),
        adjoints: adjoints.then(HashMap::default),
        accesses: Vec::new(),
    };
    let last = nodes.saturating_sub(1) as u32;
    sim.run(&schedule.body, 0, last);
    sim
}

/// The most forward values the kernel of `schedule` (for a tape of `nodes` nodes) holds at once.
pub fn max_live(schedule: &Schedule, nodes: usize) -> u32 {
    simulate(schedule, nodes)
        .alive()
        .into_iter()
        .max()
        .unwrap_or(0)
}

/// The storage a path of the kernel of `schedule` needs: the most values, tangents and adjoints
/// alive at once (an adjoint from its first write, a seed or an accumulation, to its last read),
/// so the slots a kernel that reuses storage by liveness holds per path (per SIMD lane on the
/// CPU: LLVM's register allocator and stack colouring do the reuse).
pub fn storage_slots(schedule: &Schedule, nodes: usize) -> u32 {
    simulate_with(schedule, nodes, true)
        .alive()
        .into_iter()
        .max()
        .unwrap_or(0)
}

/// The memory traffic of a kernel of `schedule` whose thread keeps at most `registers` of its
/// values, tangents and adjoints in registers: the loads and stores per path of the fewest
/// spills (Belady's rule: when a register is needed and none is free, the held value read
/// again furthest in the future leaves; a value leaves free when it is never read again).
/// A value that leaves costs a store where it was written since it last came in (adjoints
/// accumulate, so each update dirties them), and each later read of it a load. A lower bound on
/// what a register allocator achieves, and a better spill measure than `max_live - registers`:
/// a value held across a long stretch without use costs two accesses, one read in every
/// segment of a checkpointed sweep many.
pub fn spill_traffic(schedule: &Schedule, nodes: usize, registers: u32) -> u64 {
    storage_and_spills(schedule, nodes, registers).1
}

/// [`storage_slots`] and [`spill_traffic`] from one run of the schedule.
pub fn storage_and_spills(schedule: &Schedule, nodes: usize, registers: u32) -> (u32, u64) {
    let sim = simulate_with(schedule, nodes, true);
    let slots = sim.alive().into_iter().max().unwrap_or(0);
    (slots, fewest_spills(&sim.accesses, registers))
}

/// Belady's count over `acc` (see [`spill_traffic`]).
fn fewest_spills(acc: &[(usize, usize, bool)], registers: u32) -> u64 {
    use std::collections::BinaryHeap;
    // For each access, the index of the same value's next access (usize::MAX: none).
    let mut next = vec![usize::MAX; acc.len()];
    let mut seen: HashMap<usize, usize> = HashMap::default();
    for i in (0..acc.len()).rev() {
        if let Some(&j) = seen.get(&acc[i].1) {
            next[i] = j;
        }
        seen.insert(acc[i].1, i);
    }
    let cap = registers.max(1) as usize;
    // Held values: value -> (its next access, dirty); a max-heap of (next access, value) with
    // stale entries skipped.
    let mut held: HashMap<usize, (usize, bool)> = HashMap::default();
    let mut heap: BinaryHeap<(usize, usize)> = BinaryHeap::new();
    let mut spilled: rustc_hash::FxHashSet<usize> = rustc_hash::FxHashSet::default();
    let mut traffic = 0u64;
    for (i, &(_, v, writes)) in acc.iter().enumerate() {
        let dirty = match held.get(&v) {
            Some(&(_, d)) => d || writes,
            None => {
                // A load (an adjoint's update reads what it adds to, too).
                traffic += u64::from(spilled.contains(&v));
                while held.len() >= cap {
                    let Some((n, victim)) = heap.pop() else { break };
                    match held.get(&victim) {
                        Some(&(m, d)) if m == n => {
                            held.remove(&victim);
                            spilled.insert(victim);
                            traffic += u64::from(d); // a store
                        }
                        _ => {} // stale
                    }
                }
                writes
            }
        };
        if next[i] == usize::MAX {
            // Never read again: its register is free at once.
            held.remove(&v);
        } else {
            held.insert(v, (next[i], dirty));
            heap.push((next[i], v));
        }
    }
    traffic
}

/// Per node position (0..nodes), the most values alive before any step attributed to it; a
/// position with no step repeats the position before it.
pub fn alive_profile(schedule: &Schedule, nodes: usize) -> Vec<u32> {
    let sim = simulate(schedule, nodes);
    let mut out: Vec<Option<u32>> = vec![None; nodes];
    for (t, a) in sim.alive().into_iter().enumerate() {
        if let Some(slot) = out.get_mut(sim.pos[t] as usize) {
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

/// The plain reverse kernel's max_live (what `nablac inspect` and `explain` report).
pub fn max_live_plain(v: &Verified) -> u32 {
    max_live(
        &Schedule::plain(v, ScheduleOptions::new(Mode::Reverse)),
        v.len(),
    )
}

/// The reverse kernel's max_live under `plan` (equal to the plain one for one segment).
pub fn max_live_checkpointed(v: &Verified, plan: &Plan) -> u32 {
    let s = Schedule::build(v, plan, ScheduleOptions::new(Mode::Reverse));
    max_live(&s, v.len())
}

/// The plain reverse kernel's alive profile.
pub fn alive_profile_plain(v: &Verified) -> Vec<u32> {
    alive_profile(
        &Schedule::plain(v, ScheduleOptions::new(Mode::Reverse)),
        v.len(),
    )
}

/// The reverse kernel's alive profile under `plan`.
pub fn alive_profile_checkpointed(v: &Verified, plan: &Plan) -> Vec<u32> {
    let s = Schedule::build(v, plan, ScheduleOptions::new(Mode::Reverse));
    alive_profile(&s, v.len())
}

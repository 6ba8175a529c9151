//! Loops in the schedule: a straight-line price or forward sweep rerolled over the tape's loop
//! regions (`passes::reroll`), and a plain reverse schedule rerolled in both its sweeps
//! ([`reroll_reverse`]: bookmarks, and a reverse loop that restores and recomputes).
//!
//! Contract: [`reroll`] takes the straight-line schedule's statements (definitions and tangents
//! in node order, then the leaves) and returns them with each run of a region's iterations
//! whose statements are the same up to the shift by the period as one [`Loop`]. Comparing the
//! built statements, not the tape, is what makes one rule serve every mode: an iteration whose
//! statements differ from the next one's (the Asian's first, whose running sum starts at a
//! constant and so has no tangent to add; an iteration where a node is dead) stays
//! straight-line, and the loop starts after it.
//!
//! Guarantee: every iteration of a loop runs exactly the statements that iteration has in the
//! straight-line schedule, with the same operands and the same fused products
//! ([`super::fused_products`]), so a back end printing the loop computes the bits it computes
//! for the straight-line schedule. Where that cannot hold (an iteration reads a value two
//! iterations back, the rest of the tape reads an iteration of a loop other than its last, a
//! fused multiply-add would straddle a loop's iteration), the region stays straight-line.

use super::{fused::fused_pairs, Carry, Class, Def, Grad, Loop, Operand, Slot, Stmt, Var};
use crate::passes::reroll::{Region, Shape};
use crate::tape::{NodeId, Tape};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::collections::BTreeSet;

/// `stmts` (a price or forward schedule's straight-line statements) with `regions` rerolled
/// (module doc).
pub(super) fn reroll(tape: &Tape, regions: &[Region], stmts: Vec<Stmt>) -> Vec<Stmt> {
    let mut straight = HashSet::default();
    loop {
        match build(tape, regions, &straight, &stmts) {
            Ok(out) => return out.stmts,
            // The failing iteration stays straight-line (each try adds one, so this ends).
            Err(at) => assert!(straight.insert(at), "a new straight-line iteration"),
        }
    }
}

/// Where node `v` lies in region `r`: `(iteration, body node)`.
fn place(r: &Region, v: NodeId) -> Option<(u32, u32)> {
    (r.start..r.end())
        .contains(&v.0)
        .then(|| ((v.0 - r.start) / r.period, (v.0 - r.start) % r.period))
}

/// The node a straight-line statement defines (its value or a tangent).
fn defined(s: &Stmt) -> Option<NodeId> {
    defines(s).and_then(Var::straight_node)
}

/// The variable a straight-line statement defines.
fn defines(s: &Stmt) -> Option<Var> {
    match s {
        Stmt::Define { node, .. } => Some(Var::Value(*node)),
        Stmt::Tangent(t) => Some(Var::Tangent(t.node, t.lane)),
        _ => None,
    }
}

/// The operand slots of a statement, at fixed positions (a definition's arguments; a
/// tangent's `x` and `from`).
fn slots(s: &Stmt) -> Vec<Option<Operand>> {
    match s {
        Stmt::Define {
            def: Def::Rule { args, .. },
            ..
        } => args.to_vec(),
        Stmt::Tangent(t) => t.x.iter().chain(&t.from).copied().collect(),
        _ => Vec::new(),
    }
}

fn slots_mut(s: &mut Stmt) -> Vec<&mut Option<Operand>> {
    match s {
        Stmt::Define {
            def: Def::Rule { args, .. },
            ..
        } => args.iter_mut().collect(),
        Stmt::Tangent(t) => t.x.iter_mut().chain(t.from.iter_mut()).collect(),
        _ => Vec::new(),
    }
}

/// The variables a statement reads.
fn reads(s: &Stmt) -> Vec<Var> {
    let ops: Vec<Operand> = match s {
        Stmt::Leaves(leaves) => leaves
            .iter()
            .filter_map(|l| match *l {
                super::Leaf::Value(x) => Some(x),
                _ => None,
            })
            .collect(),
        _ => slots(s).into_iter().flatten().collect(),
    };
    ops.into_iter()
        .filter_map(|x| match x {
            Operand::Var(v) => Some(v),
            Operand::Lit(_) => None,
        })
        .collect()
}

/// One region's statements, cut by iteration.
struct Iterations<'a> {
    r: &'a Region,
    /// `stmts[starts[i]..starts[i + 1]]` is iteration i's.
    stmts: &'a [Stmt],
    starts: Vec<usize>,
    /// The straight-line schedule's fused products ([`super::fused_products`]).
    fused: &'a HashSet<Var>,
}

impl Iterations<'_> {
    fn of(&self, i: u32) -> &[Stmt] {
        &self.stmts[self.starts[i as usize]..self.starts[i as usize + 1]]
    }

    /// Which of iteration i's statements define a fused product: a loop's iterations agree
    /// on it (the last iteration's product, read once where the others are also read by the
    /// next iteration, is fused where theirs are not).
    fn fusion(&self, i: u32) -> Vec<bool> {
        self.of(i)
            .iter()
            .map(|s| defines(s).is_some_and(|v| self.fused.contains(&v)))
            .collect()
    }

    /// Iteration i's statements named as a loop starting at iteration `base` names them: its
    /// own nodes by their copies in iteration `base`, the previous iteration's as carried
    /// variables, draws by iteration 0's index and the stride. `None` where it reads a value
    /// two or more iterations back.
    fn form(&self, i: u32, base: u32) -> Option<Vec<Stmt>> {
        let r = self.r;
        let shift = |v: NodeId| place(r, v).map(|(_, j)| r.id(base, j));
        let rename = |v: Var| -> Option<Var> {
            let Some(x) = v.straight_node() else {
                return Some(v);
            };
            match place(r, x) {
                None => Some(v),
                Some((k, j)) if k == i => Some(match v {
                    Var::Value(_) => Var::Value(r.id(base, j)),
                    Var::Tangent(_, l) => Var::Tangent(r.id(base, j), l),
                    _ => unreachable!("a straight-line name"),
                }),
                Some((k, j)) if k + 1 == i => Some(match v {
                    Var::Value(_) => Var::Carried(r.id(base, j)),
                    Var::Tangent(_, l) => Var::CarriedTangent(r.id(base, j), l),
                    _ => unreachable!("a straight-line name"),
                }),
                Some(_) => None,
            }
        };
        self.of(i)
            .iter()
            .map(|s| {
                let mut s = s.clone();
                match &mut s {
                    Stmt::Define { node, def, .. } => {
                        let (_, j) = place(r, *node)?;
                        *node = shift(*node)?;
                        if let Def::Draw { index, stride, .. } = def {
                            let Shape::Draw {
                                first, stride: s, ..
                            } = r.body[j as usize].shape
                            else {
                                return None;
                            };
                            *index = first;
                            *stride = s;
                        }
                    }
                    Stmt::Tangent(t) => t.node = shift(t.node)?,
                    _ => return None,
                }
                for slot in slots_mut(&mut s) {
                    if let Some(Operand::Var(v)) = slot {
                        *v = rename(*v)?;
                    }
                }
                Some(s)
            })
            .collect()
    }

    /// Does iteration `i` (named as `form`, `base` = i) run `template` when the template's
    /// carried variables start from what iteration i reads in their place? Those starts, read
    /// before the loop (so none is iteration i's own), and each the same wherever it is read.
    fn starts_of(&self, i: u32, form: &[Stmt], template: &[Stmt]) -> Option<HashMap<Var, Operand>> {
        if form.len() != template.len() {
            return None;
        }
        let mut inits: HashMap<Var, Operand> = HashMap::default();
        for ((f, t), c) in form.iter().zip(template).zip(self.of(i)) {
            let mut f = f.clone();
            let concrete = slots(c);
            for ((fs, ts), cs) in slots_mut(&mut f).into_iter().zip(slots(t)).zip(concrete) {
                let Some(Operand::Var(cv @ (Var::Carried(_) | Var::CarriedTangent(..)))) = ts
                else {
                    continue;
                };
                let init = cs?;
                if let Operand::Var(v) = init {
                    if v.straight_node()
                        .and_then(|x| place(self.r, x))
                        .map(|p| p.0)
                        == Some(i)
                    {
                        return None;
                    }
                }
                if *inits.entry(cv).or_insert(init) != init {
                    return None;
                }
                *fs = ts;
            }
            if f != *t {
                return None;
            }
        }
        Some(inits)
    }
}

/// How a region's iterations are printed.
enum Piece {
    /// Iterations `first..end` as one loop of `template`, its carried variables starting from
    /// `inits` (those the template reads).
    Loop {
        first: u32,
        end: u32,
        template: Vec<Stmt>,
        inits: HashMap<Var, Operand>,
    },
    /// One iteration, straight-line.
    Straight(u32),
}

/// The pieces of a region's iterations, none of those `straight` says inside a loop.
fn pieces(it: &Iterations, straight: &dyn Fn(u32) -> bool) -> Vec<Piece> {
    let count = it.r.count;
    let mut out = Vec::new();
    let mut i = 0;
    while i < count {
        if i + 1 < count && !straight(i) && !straight(i + 1) {
            let first = it.form(i, i);
            let template = it.form(i + 1, i).filter(|t| !t.is_empty());
            let fusion = it.fusion(i + 1);
            if let (Some(f), Some(t), true) = (first, template, it.fusion(i) == fusion) {
                if let Some(inits) = it.starts_of(i, &f, &t) {
                    let mut end = i + 2;
                    while end < count
                        && !straight(end)
                        && it.fusion(end) == fusion
                        && it.form(end, i).as_ref() == Some(&t)
                    {
                        end += 1;
                    }
                    out.push(Piece::Loop {
                        first: i,
                        end,
                        template: t,
                        inits,
                    });
                    i = end;
                    continue;
                }
            }
        }
        out.push(Piece::Straight(i));
        i += 1;
    }
    out
}

/// A region's iteration: `(region, iteration)`.
type At = (usize, u32);

/// The statements with the regions rerolled, and where each looped value went.
struct Built {
    stmts: Vec<Stmt>,
    /// The carried variable that holds, after its loop, the last iteration's value of a node.
    after: HashMap<Var, Var>,
    /// Per node: (loop number, iteration) where it is computed inside a loop.
    looped: Vec<Option<(usize, u32)>>,
}

/// The statements with the regions rerolled, the iterations `straight` lists straight-line;
/// `Err(at)`: iteration `at` of a loop cannot keep the straight-line bits (module doc).
fn build(
    tape: &Tape,
    regions: &[Region],
    straight: &HashSet<At>,
    stmts: &[Stmt],
) -> Result<Built, At> {
    let region_of = |v: NodeId| regions.iter().position(|r| place(r, v).is_some());
    let at = |v: NodeId| -> At {
        let r = region_of(v).expect("a looped node is in a region");
        (r, place(&regions[r], v).expect("in its region").0)
    };
    // The last statement that reads each variable, by its node (the leaves read last).
    let mut last_read: HashMap<Var, u32> = HashMap::default();
    for s in stmts {
        let at = defined(s).map_or(u32::MAX, |v| v.0);
        for v in reads(s) {
            let e = last_read.entry(v).or_insert(at);
            *e = (*e).max(at);
        }
    }
    let pairs = fused_pairs(stmts);
    let fused: HashSet<Var> = pairs.keys().copied().collect();
    // Per node: (loop number, iteration) where it is printed inside a loop.
    let mut looped: Vec<Option<(usize, u32)>> = vec![None; tape.len()];
    let mut after: HashMap<Var, Var> = HashMap::default();
    let rename = |after: &HashMap<Var, Var>,
                  looped: &[Option<(usize, u32)>],
                  x: Operand|
     -> Result<Operand, At> {
        let Operand::Var(v) = x else { return Ok(x) };
        match v.straight_node() {
            Some(n) if looped[n.index()].is_some() => {
                after.get(&v).map(|&c| Operand::Var(c)).ok_or_else(|| at(n))
            }
            _ => Ok(x),
        }
    };
    let straight_stmt = |after: &HashMap<Var, Var>,
                         looped: &[Option<(usize, u32)>],
                         s: &Stmt|
     -> Result<Stmt, At> {
        let mut s = s.clone();
        if let Stmt::Leaves(leaves) = &mut s {
            for l in leaves {
                if let super::Leaf::Value(x) = l {
                    *x = rename(after, looped, *x)?;
                }
            }
        }
        for slot in slots_mut(&mut s).into_iter().flatten() {
            *slot = rename(after, looped, *slot)?;
        }
        Ok(s)
    };
    let mut out = Vec::new();
    let mut loops = 0;
    let mut k = 0;
    while k < stmts.len() {
        let Some(ri) = defined(&stmts[k]).and_then(region_of) else {
            out.push(straight_stmt(&after, &looped, &stmts[k])?);
            k += 1;
            continue;
        };
        let r = &regions[ri];
        let end = k + stmts[k..]
            .iter()
            .position(|s| defined(s).is_none_or(|v| place(r, v).is_none()))
            .unwrap_or(stmts.len() - k);
        let mut starts = Vec::with_capacity(r.count as usize + 1);
        let mut at = k;
        for i in 0..=r.count {
            while at < end && defined(&stmts[at]).is_some_and(|v| v.0 < r.id(i, 0).0) {
                at += 1;
            }
            starts.push(at - k);
        }
        *starts.last_mut().expect("count + 1 starts") = end - k;
        let it = Iterations {
            r,
            stmts: &stmts[k..end],
            starts,
            fused: &fused,
        };
        for piece in pieces(&it, &|i| straight.contains(&(ri, i))) {
            match piece {
                Piece::Straight(i) => {
                    for s in it.of(i) {
                        out.push(straight_stmt(&after, &looped, s)?);
                    }
                }
                Piece::Loop {
                    first,
                    end,
                    mut template,
                    inits,
                } => {
                    // What the body reads before the region: its names where the loop stands.
                    for s in &mut template {
                        for slot in slots_mut(s).into_iter().flatten() {
                            let outer = match *slot {
                                Operand::Var(v) => v.straight_node().is_some_and(|n| n.0 < r.start),
                                Operand::Lit(_) => false,
                            };
                            if outer {
                                *slot = rename(&after, &looped, *slot)?;
                            }
                        }
                    }
                    // Carried: what the body reads of the previous iteration, and what the
                    // rest reads of the last one; keyed (body node, lane) for their order.
                    let mut kept: BTreeSet<(u32, Option<usize>)> = BTreeSet::new();
                    for s in &template {
                        for v in reads(s) {
                            match v {
                                Var::Carried(n) => kept.insert((n.0 - r.id(first, 0).0, None)),
                                Var::CarriedTangent(n, l) => {
                                    kept.insert((n.0 - r.id(first, 0).0, Some(l)))
                                }
                                _ => false,
                            };
                        }
                    }
                    let next_start = r.id(end, 0).0;
                    for s in it.of(end - 1) {
                        let v = defines(s).expect("a region's statements define");
                        if last_read.get(&v).is_some_and(|&at| at >= next_start) {
                            let (_, j) = place(r, defined(s).expect("defines")).expect("in r");
                            kept.insert((
                                j,
                                match v {
                                    Var::Tangent(_, l) => Some(l),
                                    _ => None,
                                },
                            ));
                        }
                    }
                    let mut carried = Vec::new();
                    for &(j, lane) in &kept {
                        let (var, next, last) = match lane {
                            None => (
                                Var::Carried(r.id(first, j)),
                                Var::Value(r.id(first, j)),
                                Var::Value(r.id(end - 1, j)),
                            ),
                            Some(l) => (
                                Var::CarriedTangent(r.id(first, j), l),
                                Var::Tangent(r.id(first, j), l),
                                Var::Tangent(r.id(end - 1, j), l),
                            ),
                        };
                        let init = match inits.get(&var) {
                            Some(&x) => rename(&after, &looped, x)?,
                            None => Operand::Lit(0.0),
                        };
                        carried.push(Carry {
                            var,
                            init,
                            next: Operand::Var(next),
                        });
                        after.insert(last, var);
                    }
                    for i in first..end {
                        for j in 0..r.period {
                            looped[r.id(i, j).index()] = Some((loops, i));
                        }
                    }
                    loops += 1;
                    out.push(Stmt::Loop(Loop {
                        region: r.start..r.end(),
                        period: r.period,
                        first,
                        count: end - first,
                        carried,
                        body: template,
                        reverse: false,
                    }));
                }
            }
        }
        k = end;
    }
    // A fused product and its reader stay in one iteration of a loop, or both straight-line.
    for (&v, &(_, reader)) in &pairs {
        let producer = v.straight_node().expect("a tangent");
        let (p, q) = (looped[producer.index()], looped[reader.index()]);
        if (p.is_some() || q.is_some()) && p != q {
            return Err(at(if p.is_some() { producer } else { reader }));
        }
    }
    Ok(Built {
        stmts: out,
        after,
        looped,
    })
}

/// The plain reverse schedule `plain` ([`super::Builder::plain`]: the forward sweep's
/// definitions, the adjoint declarations, the seeds, the adjoint rules last node first, the
/// leaves) with `regions` rerolled in both sweeps; `None` where no iteration loops.
///
/// The forward sweep loops as a price sweep does ([`reroll`]), and each of its loops stores the
/// carried values each iteration starts from in the path's bookmarks. Its reverse is a loop of
/// the same iterations, last first: an iteration restores its bookmarks through the opaque
/// identity, recomputes its values under the re-keyed generator (as a checkpointed segment
/// does: the bits of the forward sweep's), declares its own adjoints and runs its rules in the
/// straight-line order. The adjoints of the carried values pass between iterations: an
/// iteration's rules accumulate the previous one's into [`Grad::Prev`], which its end moves into
/// the carried `Grad::Of`; after the loop the first iteration's go to the values it started
/// from, whose adjoints no rule has touched yet. So every adjoint receives the terms of the
/// straight-line schedule, in its order, from the same zero: the bits of the plain kernel.
/// Where that cannot hold (an iteration's rules differ from the next one's, the values a loop
/// starts from already have adjoint terms), the iteration stays straight-line, as in [`reroll`].
pub(super) fn reroll_reverse(
    tape: &Tape,
    regions: &[Region],
    plain: Vec<Stmt>,
) -> Option<Vec<Stmt>> {
    let split = plain
        .iter()
        .position(|s| matches!(s, Stmt::Note(n) if n == "reverse sweep"))?;
    let tail_at = plain.len().checked_sub(2)?;
    let mut forward = plain[..split].to_vec();
    forward.extend_from_slice(&plain[tail_at..]);
    let rev = &plain[split..tail_at];
    let mut straight = HashSet::default();
    loop {
        let out = build(tape, regions, &straight, &forward)
            .and_then(|built| reverse(regions, built, rev));
        match out {
            Ok(out) => {
                let loops = out.iter().any(|s| matches!(s, Stmt::Loop(_)));
                return loops.then_some(out);
            }
            Err(at) => assert!(straight.insert(at), "a new straight-line iteration"),
        }
    }
}

/// A reverse statement's names in iteration `i` of a loop starting at `base`: its own nodes by
/// their copies in iteration `base`, the previous iteration's values as the restored copies
/// (`Var::Copy`) and adjoints as [`Grad::Prev`] (left as they are when `raw`, for the loop's
/// first iteration, which reads what the loop starts from); `None` where it names a value two
/// or more iterations back.
fn reverse_form(r: &Region, i: u32, base: u32, raw: bool, stmts: &[Stmt]) -> Option<Vec<Stmt>> {
    let value = |x: Operand| -> Option<Operand> {
        let Operand::Var(Var::Value(n)) = x else {
            return Some(x);
        };
        match place(r, n) {
            None => Some(x),
            Some((k, j)) if k == i => Some(Operand::Var(Var::Value(r.id(base, j)))),
            Some((k, _)) if k + 1 == i && raw => Some(x),
            Some((k, j)) if k + 1 == i => Some(Operand::Var(Var::Copy(r.id(base, j)))),
            Some(_) => None,
        }
    };
    let grad = |g: Grad| -> Option<Grad> {
        let Grad::Of(n) = g else { return Some(g) };
        match place(r, n) {
            None => Some(g),
            Some((k, j)) if k == i => Some(Grad::Of(r.id(base, j))),
            Some((k, _)) if k + 1 == i && raw => Some(g),
            Some((k, j)) if k + 1 == i => Some(Grad::Prev(r.id(base, j))),
            Some(_) => None,
        }
    };
    let own = |n: NodeId| place(r, n).filter(|p| p.0 == i).map(|(_, j)| r.id(base, j));
    stmts
        .iter()
        .map(|s| {
            Some(match s {
                Stmt::DeclareAdjoints {
                    grad: Grad::Of(n),
                    lanes,
                } => Stmt::DeclareAdjoints {
                    grad: Grad::Of(own(*n)?),
                    lanes: lanes.clone(),
                },
                Stmt::Adjoint(a) => {
                    let mut a = *a;
                    a.node = own(a.node)?;
                    for x in a.x.iter_mut().flatten() {
                        *x = value(*x)?;
                    }
                    for t in a.to.iter_mut().flatten() {
                        *t = grad(*t)?;
                    }
                    Stmt::Adjoint(a)
                }
                _ => return None,
            })
        })
        .collect()
}

/// The reverse sweep `rev` of the plain schedule rerolled over the loops of `built` (its
/// forward sweep and leaves, rerolled): see [`reroll_reverse`].
fn reverse(regions: &[Region], built: Built, rev: &[Stmt]) -> Result<Vec<Stmt>, At> {
    let Built {
        mut stmts,
        after,
        looped,
    } = built;
    let tail = stmts.split_off(stmts.len() - 2);
    let node_of = |s: &Stmt| match s {
        Stmt::DeclareAdjoints {
            grad: Grad::Of(n), ..
        } => Some(*n),
        Stmt::Adjoint(a) => Some(a.node),
        Stmt::Seed { node, .. } => Some(*node),
        _ => None,
    };
    // The forward loops, by number, with their regions.
    let loops: Vec<(usize, Loop)> = stmts
        .iter()
        .filter_map(|s| match s {
            Stmt::Loop(l) => Some(l.clone()),
            _ => None,
        })
        .map(|l| {
            let ri = regions
                .iter()
                .position(|r| r.start == l.region.start)
                .expect("a loop's region");
            (ri, l)
        })
        .collect();
    // Each loop's reverse statements, iteration by iteration (declarations first).
    let mut of_iteration: Vec<Vec<Vec<Stmt>>> = loops
        .iter()
        .map(|(_, l)| vec![Vec::new(); l.count as usize])
        .collect();
    for s in rev {
        if let Some((k, i)) = node_of(s).and_then(|n| looped[n.index()]) {
            if matches!(s, Stmt::Seed { .. }) {
                continue;
            }
            let first = loops[k].1.first;
            of_iteration[k][(i - first) as usize].push(s.clone());
        }
    }
    // A looped node's name after its loop: its loop's last iteration's, by the base node.
    let base_after = |n: NodeId| -> Result<NodeId, At> {
        match after.get(&Var::Value(n)) {
            Some(Var::Carried(b)) => Ok(*b),
            _ => {
                let (k, i) = looped[n.index()].expect("a looped node");
                Err((loops[k].0, i))
            }
        }
    };
    let outer_value = |x: Operand| -> Result<Operand, At> {
        match x {
            Operand::Var(Var::Value(n)) if looped[n.index()].is_some() => {
                base_after(n).map(|b| Operand::Var(Var::Carried(b)))
            }
            _ => Ok(x),
        }
    };
    let outer_grad = |g: Grad| -> Result<Grad, At> {
        match g {
            Grad::Of(n) if looped[n.index()].is_some() => base_after(n).map(Grad::Of),
            _ => Ok(g),
        }
    };

    // The reverse loops, their carried adjoints (declared outside) and hand-offs.
    struct Reversed {
        body: Vec<Stmt>,
        /// `DeclareAdjoints` of the carried values' adjoints, outside the loop.
        declare: Vec<Stmt>,
        /// After the loop: (the node the loop's first iteration started from, base node, lane).
        handoff: Vec<(NodeId, NodeId, usize)>,
        /// The carried values the body restores: (base node, bookmark).
        restored: Vec<NodeId>,
    }
    let mut reversed: Vec<Option<Reversed>> = Vec::new();
    for (k, (ri, l)) in loops.iter().enumerate() {
        let r = &regions[*ri];
        let its = &of_iteration[k];
        if its.iter().all(|s| s.is_empty()) {
            reversed.push(None);
            continue;
        }
        let template =
            reverse_form(r, l.first + 1, l.first, false, &its[1]).ok_or((*ri, l.first + 1))?;
        for i in l.first + 2..l.first + l.count {
            let form = reverse_form(r, i, l.first, false, &its[(i - l.first) as usize]);
            if form.as_ref() != Some(&template) {
                return Err((*ri, i));
            }
        }
        // The first iteration: the template where it reads what the loop starts from.
        let blame = (*ri, l.first);
        let first = reverse_form(r, l.first, l.first, true, &its[0]).ok_or(blame)?;
        if first.len() != template.len() {
            return Err(blame);
        }
        let init_of = |b: NodeId| {
            l.carried
                .iter()
                .find(|c| c.var == Var::Carried(b))
                .map(|c| c.init)
        };
        let mut handoff: Vec<(NodeId, NodeId, usize)> = Vec::new();
        for (f, t) in first.iter().zip(&template) {
            let (Stmt::Adjoint(fa), Stmt::Adjoint(ta)) = (f, t) else {
                if f != t {
                    return Err(blame);
                }
                continue;
            };
            let mut fa = *fa;
            for (fx, tx) in fa.x.iter_mut().zip(ta.x) {
                if let (Some(x), Some(Operand::Var(Var::Copy(b)))) = (*fx, tx) {
                    if Some(outer_value(x)?) != init_of(b) {
                        return Err(blame);
                    }
                    *fx = tx;
                }
            }
            for (ft, tt) in fa.to.iter_mut().zip(ta.to) {
                let Some(Grad::Prev(b)) = tt else { continue };
                match *ft {
                    None => {}
                    Some(Grad::Of(x))
                        if looped[x.index()].is_none()
                            && init_of(b) == Some(Operand::Var(Var::Value(x))) =>
                    {
                        let h = (x, b, ta.lane);
                        if !handoff.contains(&h) {
                            if handoff
                                .iter()
                                .any(|&(y, c, o)| o == h.2 && (y == x) != (c == b))
                            {
                                return Err(blame);
                            }
                            handoff.push(h);
                        }
                    }
                    Some(_) => return Err(blame),
                }
                *ft = tt;
            }
            if fa != *ta {
                return Err(blame);
            }
        }
        // The body: restore, recompute, declare, the rules, pass the adjoints on.
        let carried: Vec<NodeId> = l
            .carried
            .iter()
            .filter_map(|c| match c.var {
                Var::Carried(b) => Some(b),
                _ => None,
            })
            .collect();
        let mut recompute = Vec::new();
        let mut reads_copy: BTreeSet<u32> = BTreeSet::new();
        let copy = |x: &mut Operand, reads: &mut BTreeSet<u32>| {
            if let Operand::Var(Var::Carried(b)) | Operand::Var(Var::Copy(b)) = *x {
                if carried.contains(&b) {
                    reads.insert(b.0);
                    *x = Operand::Var(Var::Copy(b));
                }
            }
        };
        for s in &l.body {
            let mut s = s.clone();
            if let Stmt::Define { def, .. } = &mut s {
                match def {
                    Def::Draw { key, .. } => *key = super::Key::Rekeyed,
                    Def::Rule { args, .. } => args
                        .iter_mut()
                        .flatten()
                        .for_each(|x| copy(x, &mut reads_copy)),
                    Def::Input(_) => {}
                }
            }
            recompute.push(s);
        }
        let mut declare = Vec::new();
        let mut decls = Vec::new();
        let mut rules = Vec::new();
        let mut moves = Vec::new();
        for s in &template {
            match s {
                Stmt::DeclareAdjoints {
                    grad: Grad::Of(b),
                    lanes,
                } if carried.contains(b) => {
                    declare.push(s.clone());
                    decls.push(Stmt::DeclareAdjoints {
                        grad: Grad::Prev(*b),
                        lanes: lanes.clone(),
                    });
                    moves.extend(lanes.iter().map(|&lane| Stmt::MoveAdjoint {
                        to: Grad::Of(*b),
                        from: Grad::Prev(*b),
                        lane,
                    }));
                }
                Stmt::DeclareAdjoints { .. } => decls.push(s.clone()),
                Stmt::Adjoint(a) => {
                    // The names of values before the region, where the loop stands.
                    let outside = |n: NodeId| place(r, n).is_none();
                    let mut a = *a;
                    for x in a.x.iter_mut().flatten() {
                        if matches!(*x, Operand::Var(Var::Value(n)) if outside(n)) {
                            *x = outer_value(*x)?;
                        }
                        copy(x, &mut reads_copy);
                    }
                    for t in a.to.iter_mut().flatten() {
                        if matches!(*t, Grad::Of(n) if outside(n)) {
                            *t = outer_grad(*t)?;
                        }
                    }
                    rules.push(Stmt::Adjoint(a));
                }
                _ => unreachable!("reverse_form keeps declarations and rules"),
            }
        }
        // Only what the rules read is recomputed (as a checkpointed segment recomputes), and
        // only what that reads restored.
        let mut needed: HashSet<Var> = rules
            .iter()
            .flat_map(|s| match s {
                Stmt::Adjoint(a) => a.reads().collect::<Vec<_>>(),
                _ => Vec::new(),
            })
            .filter_map(|x| match x {
                Operand::Var(v) => Some(v),
                Operand::Lit(_) => None,
            })
            .collect();
        let mut kept = Vec::new();
        for s in recompute.into_iter().rev() {
            if let Stmt::Define { node, def, .. } = &s {
                if !needed.contains(&Var::Value(*node)) {
                    continue;
                }
                if let Def::Rule { args, .. } = def {
                    needed.extend(args.iter().flatten().filter_map(|x| match x {
                        Operand::Var(v) => Some(*v),
                        Operand::Lit(_) => None,
                    }));
                }
            }
            kept.push(s);
        }
        kept.reverse();
        let recompute = kept;
        reads_copy.retain(|&b| needed.contains(&Var::Copy(NodeId(b))));
        let restored: Vec<NodeId> = reads_copy.iter().map(|&b| NodeId(b)).collect();
        let draws = recompute.iter().any(|s| {
            matches!(
                s,
                Stmt::Define {
                    def: Def::Draw { .. },
                    ..
                }
            )
        });
        let mut body = if draws { vec![Stmt::Rekey] } else { Vec::new() };
        body.extend(restored.iter().map(|&b| Stmt::OpaqueRead {
            node: b,
            from: Some(Slot::of(Class::Local)),
        }));
        body.extend(recompute);
        body.extend(decls);
        body.extend(rules);
        body.extend(moves);
        reversed.push(Some(Reversed {
            body,
            declare,
            handoff,
            restored,
        }));
    }

    // Bookmarks: each forward loop stores what its reverse loop restores, in the local class
    // (one slot per iteration; `storage::assign` lays them out).
    let mut k = 0;
    for s in &mut stmts {
        if let Stmt::Loop(l) = s {
            let stores = reversed[k]
                .iter()
                .flat_map(|rv| &rv.restored)
                .map(|&b| Stmt::Store {
                    var: Var::Carried(b),
                    slot: Slot::of(Class::Local),
                });
            l.body.splice(0..0, stores);
            k += 1;
        }
    }

    // The reverse sweep: the straight-line statements renamed, each loop where its last
    // iteration's rules stood.
    let mut out = stmts;
    let mut touched: HashSet<(NodeId, usize)> = HashSet::default();
    let mut declared_loop = vec![false; loops.len()];
    let mut emitted = vec![false; loops.len()];
    for s in rev {
        let Some(n) = node_of(s) else {
            out.push(s.clone());
            continue;
        };
        match (looped[n.index()], s) {
            (Some((k, _)), Stmt::DeclareAdjoints { .. }) => {
                if !std::mem::replace(&mut declared_loop[k], true) {
                    if let Some(rv) = &reversed[k] {
                        out.extend(rv.declare.iter().cloned());
                    }
                }
            }
            (Some(_), Stmt::Seed { node, lane }) => {
                let b = base_after(*node)?;
                touched.insert((b, *lane));
                out.push(Stmt::Seed {
                    node: b,
                    lane: *lane,
                });
            }
            (Some((k, _)), _) => {
                if std::mem::replace(&mut emitted[k], true) {
                    continue;
                }
                let (ri, l) = &loops[k];
                let rv = reversed[k].as_ref().expect("a loop with rules is reversed");
                let lp = Loop {
                    region: l.region.clone(),
                    period: l.period,
                    first: l.first,
                    count: l.count,
                    carried: Vec::new(),
                    body: rv.body.clone(),
                    reverse: true,
                };
                for (g, lane) in lp.outer_adjoints() {
                    if let Grad::Of(x) = g {
                        touched.insert((x, lane));
                    }
                }
                out.push(Stmt::Loop(lp));
                for &(x, b, lane) in &rv.handoff {
                    if !touched.insert((x, lane)) {
                        return Err((*ri, l.first));
                    }
                    out.push(Stmt::MoveAdjoint {
                        to: Grad::Of(x),
                        from: Grad::Of(b),
                        lane,
                    });
                }
            }
            (None, Stmt::Adjoint(a)) => {
                let mut a = *a;
                for x in a.x.iter_mut().flatten() {
                    *x = outer_value(*x)?;
                }
                for t in a.to.iter_mut().flatten() {
                    *t = outer_grad(*t)?;
                    if let Grad::Of(x) = *t {
                        touched.insert((x, a.lane));
                    }
                }
                out.push(Stmt::Adjoint(a));
            }
            (None, Stmt::Seed { node, lane }) => {
                touched.insert((*node, *lane));
                out.push(s.clone());
            }
            (None, _) => out.push(s.clone()),
        }
    }
    // The Greeks read the inputs' adjoints where the straight-line schedule has them.
    if let Some(Stmt::Leaves(leaves)) = tail.last() {
        for l in leaves {
            if let super::Leaf::Adjoint(n, _) = *l {
                if let Some((k, i)) = looped[n.index()] {
                    return Err((loops[k].0, i));
                }
            }
        }
    }
    out.extend(tail);
    Ok(out)
}

//! Loops in the schedule: a straight-line price or forward sweep rerolled over the tape's loop
//! regions (`passes::reroll`).
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

use super::{fused::fused_pairs, Carry, Def, Loop, Operand, Stmt, Var};
use crate::passes::reroll::{Region, Shape};
use crate::tape::{NodeId, Tape};
use std::collections::{BTreeSet, HashMap, HashSet};

/// `stmts` (a price or forward schedule's straight-line statements) with `regions` rerolled
/// (module doc).
pub(super) fn reroll(tape: &Tape, regions: &[Region], stmts: Vec<Stmt>) -> Vec<Stmt> {
    let mut straight = HashSet::new();
    loop {
        match build(tape, regions, &straight, &stmts) {
            Ok(out) => return out,
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
        let mut inits: HashMap<Var, Operand> = HashMap::new();
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

/// The statements with the regions rerolled, the iterations `straight` lists straight-line;
/// `Err(at)`: iteration `at` of a loop cannot keep the straight-line bits (module doc).
fn build(
    tape: &Tape,
    regions: &[Region],
    straight: &HashSet<At>,
    stmts: &[Stmt],
) -> Result<Vec<Stmt>, At> {
    let region_of = |v: NodeId| regions.iter().position(|r| place(r, v).is_some());
    let at = |v: NodeId| -> At {
        let r = region_of(v).expect("a looped node is in a region");
        (r, place(&regions[r], v).expect("in its region").0)
    };
    // The last statement that reads each variable, by its node (the leaves read last).
    let mut last_read: HashMap<Var, u32> = HashMap::new();
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
    let mut after: HashMap<Var, Var> = HashMap::new();
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
    Ok(out)
}

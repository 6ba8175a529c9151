//! Forward mode's fused products: which tangent definitions the C-like printers print inside
//! their one reader, as a fused multiply-add.
//!
//! The decision is the schedule's, not a printer's, because it changes the bits: a loop
//! ([`super::loops`]) keeps the bits of the straight-line kernel only where every fused pair
//! stays in one statement list of both.

use super::{Loop, Operand, Stmt, Tangent, Var};
use crate::ops::{Acc, Arith, Expr, Factor, Step};
use crate::tape::NodeId;
use rustc_hash::FxHashMap as HashMap;

/// Forward mode's product tangents that their only reader adds: a definition whose sum is one
/// product (`t = x * y`, e.g. `vol`'s tangent of `vol * z`) read once, as a plain term of a
/// later tangent sum of the same statement list (`u = p + t`), is printed inside that sum,
/// where it becomes a fused multiply-add (`u = fma(x, y, p)`): one operation instead of two.
/// Reads count everywhere (loops' carried values and the leaves included); each loop body is a
/// statement list of its own.
pub fn fused_products(body: &[Stmt]) -> HashMap<Var, Tangent> {
    fused_pairs(body)
        .into_iter()
        .map(|(v, (product, _))| (v, product))
        .collect()
}

/// [`fused_products`] with the node of each product's reader.
pub(super) fn fused_pairs(body: &[Stmt]) -> HashMap<Var, (Tangent, NodeId)> {
    let mut reads: HashMap<Var, usize> = HashMap::default();
    count_reads(body, &mut |x| {
        if let Operand::Var(v @ Var::Tangent(..)) = x {
            *reads.entry(v).or_default() += 1;
        }
    });
    let mut fused = HashMap::default();
    fuse_list(body, &reads, &mut fused);
    fused
}

fn count_reads(stmts: &[Stmt], count: &mut impl FnMut(Operand)) {
    for s in stmts {
        match s {
            Stmt::Tangent(t) => t.from.iter().flatten().for_each(|&x| count(x)),
            Stmt::Leaves(leaves) => leaves.iter().for_each(|l| {
                if let super::Leaf::Value(x) = *l {
                    count(x)
                }
            }),
            Stmt::Loop(Loop { carried, body, .. }) => {
                carried.iter().for_each(|c| {
                    count(c.init);
                    count(c.next);
                });
                count_reads(body, count);
            }
            Stmt::Block(b) => count_reads(&b.body, count),
            _ => {}
        }
    }
}

fn fuse_list(
    stmts: &[Stmt],
    reads: &HashMap<Var, usize>,
    fused: &mut HashMap<Var, (Tangent, NodeId)>,
) {
    let mut products: HashMap<Var, Tangent> = HashMap::default();
    for s in stmts {
        let t = match s {
            Stmt::Tangent(t) => t,
            Stmt::Loop(l) => {
                fuse_list(&l.body, reads, fused);
                continue;
            }
            _ => continue,
        };
        // A reader's plain terms (`d(arg) += D`) whose tangent is a product read only here.
        for step in t.rule.adjoint {
            if let Step::Acc(Acc {
                arg, expr: Expr::D, ..
            }) = step
            {
                if let Some(Operand::Var(v)) = t.from[arg.index()] {
                    if reads.get(&v) == Some(&1) {
                        if let Some(p) = products.remove(&v) {
                            fused.insert(v, (p, t.node));
                        }
                    }
                }
            }
        }
        let mut live = t.rule.adjoint.iter().filter(|step| match step {
            Step::Acc(a) => t.from[a.arg.index()].is_some(),
            Step::If(..) => true,
        });
        if let (Some(Step::Acc(a)), None) = (live.next(), live.next()) {
            if !a.sub
                && matches!(
                    a.expr,
                    Expr::Arith(Arith::Mul, ..) | Expr::Chain(Factor::Times, ..)
                )
            {
                products.insert(Var::Tangent(t.node, t.lane), *t);
            }
        }
    }
}

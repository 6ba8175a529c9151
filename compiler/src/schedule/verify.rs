//! The schedule's verifier, as Cranelift has one for its IR: the rules every printer relies on,
//! checked on a built [`Schedule`] rather than trusted. `compile::compile` runs it on every
//! kernel's schedule in debug builds (the tests), and a pass that rewrites a schedule runs it
//! after itself.
//!
//! The rules: every value, opaque copy and tangent a statement reads is defined earlier in its
//! block or an enclosing one (a block's locals die at its end); a value assigned rather than
//! declared (`Define { declare: false }`) has its declaration (`Declare`) in an enclosing scope;
//! every adjoint a seed, a rule application or a leaf touches is declared (`DeclareAdjoints`)
//! in a visible scope; a re-keyed draw follows a `Rekey` in its scope; every draw's index is
//! within the tape's draws; a leaf squares, and a non-finite count covers, only earlier leaves.
//! Storage (`schedule::storage`): every slot lies within its class's slots of the kernel, no two
//! values share one, and a value is read from a slot only after it was stored there; scratch is
//! stored and read outside loops; a local slot (a bookmark, one per iteration) is stored in a
//! forward loop and read in a reverse loop of the same iterations.

use super::{Class, Def, Grad, Key, Leaf, Operand, Schedule, Slot, Stmt, Var};
use crate::tape::NodeId;
use crate::verify::Verified;
use rustc_hash::FxHashSet as HashSet;

/// The first rule a schedule breaks, and where (the path of block indices to the statement).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("statement {at}: {what}")]
pub struct ScheduleError {
    /// Statement indices from the top, one per enclosing block: `3.12` is statement 12 of the
    /// block that is statement 3.
    pub at: String,
    pub what: String,
}

#[derive(Default)]
struct Scope {
    defined: HashSet<Var>,
    declared: HashSet<NodeId>,
    adjoints: HashSet<(Grad, usize)>,
    rekeyed: bool,
}

struct Checker<'a> {
    scopes: Vec<Scope>,
    /// The stores so far: the slots each takes (its class, first slot, slots) and the loop it
    /// stands in (first iteration, iterations; `(0, 1)` outside loops), by the node stored.
    stored: Vec<Stored>,
    path: Vec<usize>,
    draws: u32,
    schedule: &'a Schedule,
    in_loop: bool,
    /// The loop being checked: (first iteration, iterations, reverse).
    current: Option<(u32, u32, bool)>,
}

/// One store's slots (`Checker::stored`).
#[derive(Clone, PartialEq, Eq)]
struct Stored {
    node: NodeId,
    class: Class,
    slots: std::ops::Range<u32>,
    iterations: (u32, u32),
}

impl Checker<'_> {
    /// The iterations (first, count) a store (`read` false) or a read of `slot` stands in, by
    /// its class's rule (module doc): `(0, 1)` for scratch outside loops, the loop's for a
    /// bookmark in a forward loop (a store) or a reverse one (a read).
    fn iterations(&self, slot: &Slot, by: &str, read: bool) -> Result<(u32, u32), ScheduleError> {
        match (slot.class, self.current) {
            (Class::Scratch, None) => Ok((0, 1)),
            (Class::Scratch, Some(_)) => self.fail(format!("{by} uses scratch inside a loop")),
            (Class::Local, Some((first, count, reverse))) if reverse == read => Ok((first, count)),
            (Class::Local, _) => self.fail(format!(
                "{by} uses a bookmark outside a {} loop",
                if read { "reverse" } else { "forward" }
            )),
        }
    }

    fn fail<T>(&self, what: String) -> Result<T, ScheduleError> {
        let at = self
            .path
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(".");
        Err(ScheduleError { at, what })
    }

    fn visible(&self, v: Var) -> bool {
        self.scopes.iter().any(|s| s.defined.contains(&v))
    }

    fn has_adjoint(&self, g: Grad, lane: usize) -> bool {
        self.scopes.iter().any(|s| s.adjoints.contains(&(g, lane)))
    }

    fn read(&self, o: Operand, by: &str) -> Result<(), ScheduleError> {
        match o {
            Operand::Lit(_) => Ok(()),
            Operand::Var(v) if self.visible(v) => Ok(()),
            Operand::Var(v) => self.fail(format!("{by} reads {v:?}, not defined in scope")),
        }
    }

    fn adjoint(&self, node: NodeId, lane: usize, by: &str) -> Result<(), ScheduleError> {
        self.grad(Grad::Of(node), lane, by)
    }

    fn grad(&self, g: Grad, lane: usize, by: &str) -> Result<(), ScheduleError> {
        let node = match g {
            Grad::Of(n) => format!("{n}"),
            Grad::Prev(n) => format!("the previous iteration's {n}"),
        };
        if lane >= self.schedule.lanes {
            return self.fail(format!(
                "{by} names lane {lane} of {node}, past the kernel's {} lanes",
                self.schedule.lanes
            ));
        }
        if !self.has_adjoint(g, lane) {
            return self.fail(format!(
                "{by} touches the adjoint of {node} in lane {lane}, not declared in scope"
            ));
        }
        Ok(())
    }

    fn top(&mut self) -> &mut Scope {
        self.scopes.last_mut().expect("a scope")
    }

    fn stmts(&mut self, body: &[Stmt]) -> Result<(), ScheduleError> {
        for (i, s) in body.iter().enumerate() {
            self.path.push(i);
            self.stmt(s)?;
            self.path.pop();
        }
        Ok(())
    }

    fn stmt(&mut self, s: &Stmt) -> Result<(), ScheduleError> {
        match s {
            Stmt::Note(_) => {}
            Stmt::Declare(nodes) => self.top().declared.extend(nodes.iter().copied()),
            Stmt::Define { node, def, declare } => {
                match def {
                    Def::Input(_) => {}
                    Def::Draw {
                        index, key, stride, ..
                    } => {
                        if *stride > 0 && !self.in_loop {
                            return self.fail(format!("{node} draws by a stride outside a loop"));
                        }
                        if *index >= self.draws {
                            return self.fail(format!(
                                "{node} draws index {index}, past the tape's {} draws",
                                self.draws
                            ));
                        }
                        if *key == Key::Rekeyed && !self.scopes.iter().any(|s| s.rekeyed) {
                            return self.fail(format!(
                                "{node} draws under the re-keyed generator, with no Rekey in scope"
                            ));
                        }
                    }
                    Def::Rule { args, .. } => {
                        for a in args.iter().flatten() {
                            self.read(*a, &format!("the definition of {node}"))?;
                        }
                    }
                }
                let v = Var::Value(*node);
                if *declare {
                    self.top().defined.insert(v);
                } else {
                    // An assignment defines the value where it was declared.
                    match self
                        .scopes
                        .iter_mut()
                        .rev()
                        .find(|s| s.declared.contains(node))
                    {
                        Some(scope) => {
                            scope.defined.insert(v);
                        }
                        None => {
                            return self
                                .fail(format!("{node} is assigned without a declaration in scope"))
                        }
                    }
                }
            }
            Stmt::Store { var, slot } => {
                self.read(Operand::Var(*var), "a store")?;
                let Some(node) = super::storage::stored_node(*var) else {
                    return self.fail(format!("{var:?} is stored, not a value or a carried value"));
                };
                let iterations = self.iterations(slot, &format!("the store of {node}"), false)?;
                let slots = slot.index..slot.index + iterations.1;
                let kernel = self.schedule.storage.slots(slot.class);
                if slots.end > kernel {
                    return self.fail(format!(
                        "{node} is stored in {:?} slots {}..{}, past the kernel's {kernel}",
                        slot.class, slots.start, slots.end
                    ));
                }
                let overlaps = |s: &Stored| {
                    s.class == slot.class && s.slots.start < slots.end && slots.start < s.slots.end
                };
                if let Some(other) = self.stored.iter().find(|s| overlaps(s) && s.node != node) {
                    return self.fail(format!(
                        "{node} is stored in {:?} slots {}..{}, which {} holds",
                        slot.class, slots.start, slots.end, other.node
                    ));
                }
                self.stored.push(Stored {
                    node,
                    class: slot.class,
                    slots,
                    iterations,
                });
            }
            Stmt::Rekey => self.top().rekeyed = true,
            Stmt::OpaqueRead { node, from } => {
                match from {
                    Some(slot) => {
                        let by = format!("the opaque read of {node}");
                        let iterations = self.iterations(slot, &by, true)?;
                        let stored = |s: &&Stored| {
                            s.node == *node
                                && s.class == slot.class
                                && s.slots.start == slot.index
                                && s.iterations == iterations
                        };
                        if !self.stored.iter().any(|s| stored(&s)) {
                            return self.fail(format!(
                                "{by} loads {:?} slot {} before {node} is stored there (in a \
                                 loop of the same iterations, for a bookmark)",
                                slot.class, slot.index
                            ));
                        }
                    }
                    None => self.read(Operand::Var(Var::Value(*node)), "an opaque read")?,
                }
                self.top().defined.insert(Var::Copy(*node));
            }
            Stmt::DeclareAdjoints { grad, lanes } => {
                if matches!(grad, Grad::Prev(_)) && self.current.is_none_or(|c| !c.2) {
                    return self.fail(format!("{grad:?} is declared outside a reverse loop"));
                }
                for &l in lanes {
                    self.top().adjoints.insert((*grad, l));
                    self.grad(*grad, l, "a declaration")?;
                }
            }
            Stmt::MoveAdjoint { to, from, lane } => {
                self.grad(*to, *lane, "a move")?;
                self.grad(*from, *lane, "a move")?;
            }
            Stmt::Seed { node, lane } => self.adjoint(*node, *lane, "a seed")?,
            Stmt::Adjoint(a) => {
                let by = format!("the adjoint rule of {} in lane {}", a.node, a.lane);
                for o in a.reads() {
                    self.read(o, &by)?;
                }
                self.adjoint(a.node, a.lane, &by)?;
                for t in a.to.iter().flatten() {
                    self.grad(*t, a.lane, &by)?;
                }
            }
            Stmt::Tangent(t) => {
                if t.lane >= self.schedule.lanes {
                    return self.fail(format!(
                        "the tangent of {} names lane {}, past the kernel's {} lanes",
                        t.node, t.lane, self.schedule.lanes
                    ));
                }
                let by = format!("the tangent of {} in lane {}", t.node, t.lane);
                for o in t.reads() {
                    self.read(o, &by)?;
                }
                self.top().defined.insert(Var::Tangent(t.node, t.lane));
            }
            Stmt::Block(b) => {
                self.scopes.push(Scope::default());
                self.stmts(&b.body)?;
                self.scopes.pop();
            }
            Stmt::Loop(l) => {
                if self.in_loop {
                    return self.fail("a loop inside a loop".into());
                }
                for c in &l.carried {
                    if !matches!(c.var, Var::Carried(_) | Var::CarriedTangent(..)) {
                        return self
                            .fail(format!("{:?} is carried, not a carried variable", c.var));
                    }
                    if self.visible(c.var) {
                        return self.fail(format!("{:?} is carried by two loops", c.var));
                    }
                    self.read(c.init, "a carried value's start")?;
                    self.top().defined.insert(c.var);
                }
                if l.reverse && !l.carried.is_empty() {
                    return self.fail("a reverse loop carries values".into());
                }
                self.scopes.push(Scope::default());
                self.in_loop = true;
                self.current = Some((l.first, l.count, l.reverse));
                self.stmts(&l.body)?;
                self.current = None;
                for c in &l.carried {
                    self.read(c.next, "a carried value's update")?;
                }
                self.in_loop = false;
                self.scopes.pop();
            }
            Stmt::Leaves(leaves) => {
                for (i, l) in leaves.iter().enumerate() {
                    match *l {
                        Leaf::Value(o) => self.read(o, &format!("leaf {i}"))?,
                        Leaf::Adjoint(node, lane) => {
                            self.adjoint(node, lane, &format!("leaf {i}"))?
                        }
                        Leaf::Square { of, .. } if of >= i => {
                            return self
                                .fail(format!("leaf {i} squares leaf {of}, not an earlier one"))
                        }
                        Leaf::NonFinite { first, end } if first > end || end > i => {
                            return self.fail(format!(
                                "leaf {i} counts leaves {first}..{end}, not a range of earlier ones"
                            ))
                        }
                        _ => {}
                    }
                }
            }
        }
        Ok(())
    }
}

/// Checks `schedule`, built for `tape`, against the rules of the module doc: `Err` names the
/// first statement that breaks one.
pub fn verify(schedule: &Schedule, tape: &Verified) -> Result<(), ScheduleError> {
    let mut c = Checker {
        scopes: vec![Scope::default()],
        stored: Vec::new(),
        path: Vec::new(),
        draws: tape.tape().n_draws,
        schedule,
        in_loop: false,
        current: None,
    };
    c.stmts(&schedule.body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::fixtures::asian;
    use crate::schedule::{Block, ScheduleOptions};
    use nablac_abi::manifest::Mode;

    /// Every schedule the builder makes passes: plain and checkpointed (both strategies), in
    /// every mode, on the products and on random tapes.
    #[test]
    fn the_builders_schedules_verify() {
        use crate::plan::{Checkpoint, SegmentOptions};
        let mut tapes = vec![asian(64), asian(7)];
        let corpus = crate::corpus::load(&crate::corpus::dir()).unwrap();
        tapes.extend(corpus.into_iter().map(|c| c.tape));
        tapes.extend(
            (0..200)
                .map(|seed| crate::verify::verify(crate::testing::random_tape(seed, 40)).unwrap()),
        );
        for v in &tapes {
            for mode in [Mode::Price, Mode::Forward, Mode::Reverse] {
                let o = ScheduleOptions::new(mode);
                verify(&Schedule::plain(v, o), v).unwrap();
                for strategy in [Checkpoint::Registers, Checkpoint::Scratch] {
                    let plan = crate::passes::plan(
                        v,
                        &SegmentOptions {
                            strategy,
                            segments: Some(4),
                            ..SegmentOptions::default()
                        },
                    );
                    verify(&Schedule::build(v, &plan, o), v)
                        .unwrap_or_else(|e| panic!("{mode:?} {strategy:?}: {e}"));
                }
            }
        }
    }

    /// The 64-step Asian and its reverse kernel checkpointed in 4 segments under the scratch
    /// strategy: the schedule the broken-on-purpose tests break.
    fn scratch_reverse() -> (Verified, Schedule) {
        use crate::plan::{Checkpoint, SegmentOptions};
        let v = asian(64);
        let plan = crate::passes::plan(
            &v,
            &SegmentOptions {
                strategy: Checkpoint::Scratch,
                segments: Some(4),
                ..SegmentOptions::default()
            },
        );
        let schedule = Schedule::build(&v, &plan, ScheduleOptions::new(Mode::Reverse));
        (v, schedule)
    }

    /// Each rule, broken on purpose, is caught and named.
    #[test]
    fn a_broken_schedule_is_caught_where_it_breaks() {
        let (v, good) = scratch_reverse();
        verify(&good, &v).unwrap();
        let blocks = || {
            good.body
                .iter()
                .filter(|s| matches!(s, Stmt::Block(_)))
                .count()
        };
        assert_eq!(blocks(), 8, "4 forward and 4 reverse blocks");
        // A value read after its block closed: move the last reverse block's body first.
        let first_block = good
            .body
            .iter()
            .position(|s| matches!(s, Stmt::Block(_)))
            .unwrap();
        let mut early = good.clone();
        let last = early
            .body
            .iter()
            .rposition(|s| matches!(s, Stmt::Block(_)))
            .unwrap();
        let moved = early.body.remove(last);
        early.body.insert(first_block, moved);
        let e = verify(&early, &v).unwrap_err();
        assert!(
            e.what.contains("not defined in scope")
                || e.what.contains("is stored there")
                || e.what.contains("not declared"),
            "{e}"
        );
        // A draw past the tape's draws.
        let mut far = good.clone();
        let Some(Stmt::Block(Block { body, .. })) = far.body.get_mut(first_block) else {
            panic!("a block")
        };
        let d = body
            .iter_mut()
            .find_map(|s| match s {
                Stmt::Define {
                    def: Def::Draw { index, .. },
                    ..
                } => Some(index),
                _ => None,
            })
            .unwrap();
        *d = 64;
        let e = verify(&far, &v).unwrap_err();
        assert!(e.what.contains("past the tape's 64 draws"), "{e}");
        assert!(e.at.starts_with(&format!("{first_block}.")), "{e}");
        // A leaf squaring a later one.
        let mut sq = good.clone();
        let Some(Stmt::Leaves(leaves)) = sq.body.last_mut() else {
            panic!("leaves last")
        };
        leaves[1] = Leaf::Square { of: 5, shift: 0 };
        assert!(verify(&sq, &v).unwrap_err().what.contains("squares leaf 5"));
    }

    /// Every slot's statements, in place: `f` on each store and read of `class`, top level,
    /// blocks and loops alike.
    fn slots_of(body: &mut [Stmt], class: Class, f: &mut impl FnMut(&mut Slot, bool)) {
        for s in body {
            match s {
                Stmt::Store { slot, .. } if slot.class == class => f(slot, true),
                Stmt::OpaqueRead {
                    from: Some(slot), ..
                } if slot.class == class => f(slot, false),
                Stmt::Block(b) => slots_of(&mut b.body, class, f),
                Stmt::Loop(l) => slots_of(&mut l.body, class, f),
                _ => {}
            }
        }
    }

    /// The storage rules, each broken on purpose: a scratch slot past the kernel's, two values
    /// in one slot, a bookmark read from a slot its loop did not store.
    #[test]
    fn broken_storage_is_caught() {
        let (v, good) = scratch_reverse();
        verify(&good, &v).unwrap();
        assert!(good.storage.scratch > 1);
        let mut past = good.clone();
        let slots = past.storage.scratch;
        slots_of(&mut past.body, Class::Scratch, &mut |s, _| s.index = slots);
        let e = verify(&past, &v).unwrap_err();
        assert!(e.what.contains("past the kernel's"), "{e}");
        let mut shared = good.clone();
        slots_of(&mut shared.body, Class::Scratch, &mut |s, store| {
            if store {
                s.index = 0
            }
        });
        let e = verify(&shared, &v).unwrap_err();
        assert!(e.what.contains("which %"), "{e}");

        let plan = crate::passes::plan(&v, &Default::default());
        let looped = Schedule::build(&v, &plan, ScheduleOptions::looped(Mode::Reverse));
        verify(&looped, &v).unwrap();
        assert!(looped.storage.local > 0);
        let mut wrong = looped.clone();
        wrong.storage.local += 1;
        slots_of(&mut wrong.body, Class::Local, &mut |s, store| {
            if !store {
                s.index += 1
            }
        });
        let e = verify(&wrong, &v).unwrap_err();
        assert!(e.what.contains("is stored there"), "{e}");
    }
}

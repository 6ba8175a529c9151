//! Storage as data: where a value of the schedule lives beyond the statements that define and
//! read it.
//!
//! A value lives in a variable of the path (a register, as far as the schedule goes: the
//! target's allocator may still spill it) unless the schedule stores it in a [`Slot`] of a
//! storage [`Class`]: [`Stmt::Store`] writes it, [`Stmt::OpaqueRead`] reads it back through the
//! opaque identity. The builders say which class a stored value takes (the checkpoint plan's
//! strategy for the values crossing segments, the loops' bookmarks for carried values); they
//! leave every slot's index to [`assign`], the one pass that lays out each class and counts its
//! slots per path ([`Storage`]). The printers spell each class (`emit::body`: the scratch
//! buffer's address in its layout, the local array `bm[]`; the CPU lowerings: the scratch row,
//! a stack slot). A new storage class is a variant here, its layout in [`assign`] and its
//! spelling in each printer (the GPU issue adds per-workgroup shared memory).
//!
//! Guarantee after [`assign`]: every value stored in a class has one slot of it (a [`Class::Local`]
//! value one per iteration of its loop, contiguous), slots are dense from 0 in order of first
//! store, and every read of a class names the slot its value was stored in.

use super::{Loop, Stmt, Var};
use crate::tape::NodeId;
use rustc_hash::FxHashMap;

/// A storage class (module doc).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Class {
    /// The kernel's scratch buffer (global memory on a GPU), one slot per value per path: the
    /// checkpointed sweep's values crossing segments under `Checkpoint::Scratch`. Stored and
    /// read outside loops.
    Scratch,
    /// A per-thread array (GPU local memory, the CPU's stack): a reverse kernel's bookmarks, one
    /// slot per iteration of the loop that stores it (the slot of iteration `it` of a loop of
    /// first iteration `first` is `index + it - first`). Stored in a forward loop, read in the
    /// reverse loop of the same iterations.
    Local,
}

/// A value's place in a class: its first slot (module doc).
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct Slot {
    pub class: Class,
    pub index: u32,
}

impl Slot {
    /// A slot of `class` whose index [`assign`] decides.
    pub fn of(class: Class) -> Slot {
        Slot { class, index: 0 }
    }
}

/// Slots per path of each class: what a kernel reserves (the scratch buffer's row, the local
/// array).
#[derive(Copy, Clone, PartialEq, Eq, Default, Debug)]
pub struct Storage {
    pub scratch: u32,
    pub local: u32,
}

impl Storage {
    /// The slots per path of `class`.
    pub fn slots(&self, class: Class) -> u32 {
        match class {
            Class::Scratch => self.scratch,
            Class::Local => self.local,
        }
    }

    fn slots_mut(&mut self, class: Class) -> &mut u32 {
        match class {
            Class::Scratch => &mut self.scratch,
            Class::Local => &mut self.local,
        }
    }
}

/// The node a stored name is found by: the node it is the value of (a carried value by its
/// node in the loop's first iteration, which no other loop names); `None` for a name that no
/// class stores (a copy, a tangent). A read of the slot names the same node.
pub fn stored_node(var: Var) -> Option<NodeId> {
    match var {
        Var::Value(v) | Var::Carried(v) => Some(v),
        Var::Copy(_) | Var::Tangent(..) | Var::CarriedTangent(..) => None,
    }
}

/// Lays out every class's slots over `body` (module doc) and returns their counts. A store of
/// a name without a slot key (a copy, a tangent) or a read of a value never stored is a
/// schedule builder's bug: [`super::verify`] reports it, so `assign` leaves such a slot as it
/// is.
pub fn assign(body: &mut [Stmt]) -> Storage {
    let mut at: FxHashMap<(Class, NodeId), u32> = FxHashMap::default();
    let mut storage = Storage::default();
    walk(body, 1, &mut at, &mut storage);
    storage
}

fn walk(
    body: &mut [Stmt],
    iterations: u32,
    at: &mut FxHashMap<(Class, NodeId), u32>,
    storage: &mut Storage,
) {
    for s in body {
        match s {
            Stmt::Store { var, slot } => {
                if let Some(node) = stored_node(*var) {
                    let next = storage.slots_mut(slot.class);
                    slot.index = *at.entry((slot.class, node)).or_insert_with(|| {
                        let first = *next;
                        *next += iterations;
                        first
                    });
                }
            }
            Stmt::OpaqueRead {
                node,
                from: Some(slot),
            } => {
                if let Some(&index) = at.get(&(slot.class, *node)) {
                    slot.index = index;
                }
            }
            Stmt::Block(b) => walk(&mut b.body, iterations, at, storage),
            Stmt::Loop(Loop { body, count, .. }) => walk(body, *count, at, storage),
            _ => {}
        }
    }
}

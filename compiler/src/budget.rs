//! The size budget: how many statements a kernel of a tape would have, counted before anything
//! is built, and the limit past which `compile` refuses rather than spend minutes and gigabytes.
//!
//! A reverse kernel runs one adjoint lane per output over that output's differentiable cone, so
//! its size is the sum of the cones (outputs x nodes at worst: 8,000 outputs on a 16,000-node
//! chain, `python3 scripts/chain-tape.py 16000 8000`, came to 96 million statements and, before
//! this budget, ran out of memory past 13 GB; now `nablac T --target cuda --mode reverse` says so). A forward kernel's
//! size is its directions x the active nodes; a price kernel's, its nodes. Guarantee: every mode
//! whose count is at most [`STATEMENT_BUDGET`] is built; a count over it is an error that says
//! which mode would fit.

use crate::verify::Verified;
use nablac_abi::manifest::Mode;

/// The most statements a kernel may have (forward values, tangents and adjoints together).
/// The largest kernels of the benchmarks have about 100,000 (the 52-bucket tape's forward
/// kernel: 56 directions over 1,842 nodes); at this budget a kernel's source is a few hundred
/// MB and takes tens of seconds to emit.
pub const STATEMENT_BUDGET: u64 = 8_000_000;

/// The statements a `mode` kernel of `v` has, about (module doc): the forward sweep's nodes
/// plus, for forward mode, a tangent per direction per active node and, for reverse mode, an
/// adjoint per output per active node of its cone.
pub fn statements(v: &Verified, mode: Mode) -> u64 {
    let info = v.info();
    let act = &info.activity;
    let active = |i: usize| act.active[i] && act.live[i];
    let nodes = v.len() as u64;
    match mode {
        Mode::Price => nodes,
        Mode::Forward => {
            let directions = u64::from(crate::passes::colour_inputs(v).colours);
            let n_active = (0..v.len()).filter(|&i| active(i)).count() as u64;
            nodes + directions.saturating_mul(n_active)
        }
        Mode::Reverse => {
            let lanes: u64 = if info.cones.is_empty() {
                // One output, or cones too large to keep (`TapeInfo::cones`): every active node
                // in every lane.
                let n_active = (0..v.len()).filter(|&i| active(i)).count() as u64;
                n_active.saturating_mul(v.outputs.len() as u64)
            } else {
                info.cones
                    .iter()
                    .map(|cone| (0..v.len()).filter(|&i| active(i) && cone[i]).count() as u64)
                    .sum()
            };
            nodes + lanes
        }
    }
}

/// Why a kernel was not built: `statements` over the budget, with the modes that fit.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("a {mode} kernel of this tape would have about {statements} statements, over the budget of {budget} ({outputs} outputs on {nodes} nodes){hint}")]
pub struct OverBudget {
    pub mode: &'static str,
    pub statements: u64,
    /// The budget it is over ([`STATEMENT_BUDGET`]).
    pub budget: u64,
    pub outputs: usize,
    pub nodes: usize,
    /// What to do instead: a mode within the budget, or splitting the outputs.
    pub hint: String,
}

/// `Ok` when a `mode` kernel of `v` fits the budget, else what would (module doc).
pub fn check(v: &Verified, mode: Mode) -> Result<(), OverBudget> {
    check_within(v, mode, STATEMENT_BUDGET)
}

/// [`check`] against `budget` statements (the tests' small budgets).
fn check_within(v: &Verified, mode: Mode, budget: u64) -> Result<(), OverBudget> {
    let count = statements(v, mode);
    if count <= budget {
        return Ok(());
    }
    let others: Vec<&str> = [Mode::Forward, Mode::Reverse]
        .into_iter()
        .filter(|&m| m != mode && statements(v, m) <= budget)
        .map(|m| m.name())
        .collect();
    let hint = if others.is_empty() && v.outputs.len() <= 1 {
        ": the tape is too long for one kernel; record the product over shorter tapes".to_string()
    } else if others.is_empty() {
        ": split the tape's outputs over several tapes".to_string()
    } else {
        format!(
            ": --mode {} fits (or split the tape's outputs over several tapes)",
            others.join(" or --mode ")
        )
    };
    Err(OverBudget {
        mode: mode.name(),
        statements: count,
        budget,
        outputs: v.outputs.len(),
        nodes: v.len(),
        hint,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chain of `n` nodes on one input with `outputs` outputs at its last nodes.
    fn chain(n: usize, outputs: usize) -> Verified {
        let mut t = String::from("nablatape 1\n%0 = input x 1.0\n%1 = const 1.5\n%2 = mul %0 %1\n");
        for i in 3..n {
            t.push_str(&format!("%{i} = add %{} %1\n", i - 1));
        }
        for k in 0..outputs {
            t.push_str(&format!("output y{k} = %{}\n", n - 1 - k));
        }
        crate::verify::verify(crate::format::read_text(t.as_bytes()).unwrap()).unwrap()
    }

    #[test]
    fn reverse_counts_each_outputs_cone_and_forward_its_directions() {
        let v = chain(100, 3);
        // Cones: node 0 and nodes 2..=99-k, 99 - k nodes (the constant is not active).
        assert_eq!(statements(&v, Mode::Price), 100);
        assert_eq!(statements(&v, Mode::Reverse), 100 + 99 + 98 + 97);
        assert_eq!(statements(&v, Mode::Forward), 100 + 99);
        assert!(check(&v, Mode::Reverse).is_ok());
    }

    #[test]
    fn many_outputs_on_a_long_tape_are_refused_in_reverse_and_pointed_to_forward() {
        let v = chain(8_000, 2_000);
        let e = check(&v, Mode::Reverse).unwrap_err();
        assert!(e.statements > STATEMENT_BUDGET);
        assert!(e.to_string().contains("--mode forward fits"), "{e}");
        assert!(check(&v, Mode::Forward).is_ok());
    }

    /// A one-output tape too long for any mode (a 1e7-node chain is refused so: 20M statements)
    /// is told to be recorded shorter, not to split outputs it does not have.
    #[test]
    fn a_tape_too_long_for_every_mode_is_told_so() {
        let v = chain(1_000, 1);
        let e = check_within(&v, Mode::Forward, 500)
            .unwrap_err()
            .to_string();
        assert!(e.contains("the tape is too long for one kernel"), "{e}");
        assert!(!e.contains("split"), "{e}");
        let many = chain(1_000, 3);
        let e = check_within(&many, Mode::Reverse, 2_500)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--mode forward fits"), "{e}");
    }
}

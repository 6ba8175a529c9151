//! `nablac inspect TAPE [--json]`: what a tape holds.

use super::TapeArg;
use anyhow::Result;
use clap::Args;
use nablac::tape::Op;
use nablac::verify::Verified;
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Args, Debug)]
pub struct InspectArgs {
    #[command(flatten)]
    tape: TapeArg,
    /// Print JSON: nodes, inputs, outputs, draws, ops, active, max_live, max_live_forward,
    /// loops, hash.
    #[arg(long)]
    json: bool,
}

/// The summary, with the JSON keys the issue fixes.
#[derive(Serialize)]
pub struct Summary {
    pub nodes: usize,
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    pub draws: u32,
    /// Op name → count, in op-code order.
    pub ops: BTreeMap<&'static str, usize>,
    pub active: usize,
    /// The most forward values a plain (uncheckpointed) adjoint kernel holds at once: what the
    /// reverse sweep would keep alive without a checkpoint plan (`nablac explain` shows the plan's).
    pub max_live: u32,
    /// The most values alive at once in a forward-only (price) sweep.
    pub max_live_forward: u32,
    /// The loop regions the rerolling pass finds (`nablac::passes::reroll`).
    pub loops: Vec<Loop>,
    pub hash: String,
}

/// One loop region of the tape: nodes `start..end`, `iterations` of `period` nodes.
#[derive(Serialize)]
pub struct Loop {
    pub start: u32,
    pub end: u32,
    pub period: u32,
    pub iterations: u32,
    /// The body nodes (by their node in the first iteration) the next iteration reads.
    pub carried: Vec<u32>,
    pub draws_per_iteration: u32,
}

/// The smallest region `inspect` reports (nodes): the smallest a kernel loops over.
const MIN_LOOP_NODES: u32 = nablac::schedule::LOOP_MIN_NODES;

pub fn summarize(v: &Verified) -> Summary {
    let (tape, info) = (v.tape(), v.info());
    let mut ops = BTreeMap::new();
    for node in &tape.nodes {
        *ops.entry(node.op().name()).or_insert(0) += 1;
    }
    Summary {
        nodes: tape.len(),
        inputs: tape.inputs.iter().map(|i| i.name.clone()).collect(),
        outputs: tape.outputs.iter().map(|o| o.name.clone()).collect(),
        draws: tape.n_draws,
        ops,
        active: info.activity.active.iter().filter(|a| **a).count(),
        max_live: nablac::passes::max_live_plain(v),
        max_live_forward: info.max_live(),
        loops: nablac::passes::reroll::reroll(tape, MIN_LOOP_NODES)
            .iter()
            .map(|r| Loop {
                start: r.start,
                end: r.end(),
                period: r.period,
                iterations: r.count,
                carried: r.carried().iter().map(|j| r.start + j).collect(),
                draws_per_iteration: r.draws_per_iteration(),
            })
            .collect(),
        hash: nablac::format::content_hash(tape),
    }
}

pub fn run(args: &InspectArgs) -> Result<()> {
    use std::fmt::Write as _;
    let tape = super::load_tape(&args.tape.tape)?;
    let s = summarize(&tape);
    if args.json {
        return super::print_report(&super::json_text(&s, false)?, false);
    }
    let mut t = String::new();
    let inputs: Vec<String> = tape
        .inputs
        .iter()
        .map(|i| format!("{}={:?}", i.name, i.value))
        .collect();
    writeln!(t, "tape      {}", super::shown(&args.tape.tape, "<stdin>"))?;
    writeln!(t, "nodes     {} ({} active)", s.nodes, s.active)?;
    writeln!(t, "inputs    {}", inputs.join(" "))?;
    writeln!(t, "outputs   {}", s.outputs.join(" "))?;
    writeln!(t, "draws     {}", s.draws)?;
    writeln!(
        t,
        "max live  {} values alive at once in a plain adjoint kernel, {} in a price-only sweep",
        s.max_live, s.max_live_forward
    )?;
    if s.loops.is_empty() {
        writeln!(
            t,
            "loops     none (no period of {MIN_LOOP_NODES} nodes or more)"
        )?;
    }
    for l in &s.loops {
        let carried: Vec<String> = l.carried.iter().map(|c| format!("%{c}")).collect();
        writeln!(
            t,
            "loop      %{}..%{}: {} iterations of {} nodes, {} draws each, carrying {} ({})",
            l.start,
            l.end,
            l.iterations,
            l.period,
            l.draws_per_iteration,
            carried.join(" "),
            l.carried.len()
        )?;
    }
    writeln!(t, "hash      {}", s.hash)?;
    write!(t, "ops")?;
    for op in Op::ALL {
        if let Some(n) = s.ops.get(op.name()) {
            write!(t, "\n  {:<8} {n}", op.name())?;
        }
    }
    super::print_report(&t, false)
}

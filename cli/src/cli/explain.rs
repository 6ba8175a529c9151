//! `nablac explain TAPE [--segments N] [--json] [--plot FILE.svg]`: the checkpoint plan.

use super::{CheckpointArg, Given, PrecisionArg, TapeArg, TargetArg};
use anyhow::{bail, Result};
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct ExplainArgs {
    #[command(flatten)]
    tape: TapeArg,
    /// Segments: 1 is the plain kernel; N > 1 forces N segments. Default: automatic.
    #[arg(long, value_name = "N")]
    segments: Option<u32>,
    /// Checkpoint strategy to plan for.
    #[arg(long, value_enum, default_value = "registers")]
    checkpoint: CheckpointArg,
    /// Register recompute switches itself on for tapes of at least N nodes.
    #[arg(long, value_name = "N", default_value_t = nablac::plan::DEFAULT_CKPT_NODES)]
    ckpt_nodes: u32,
    /// Nodes per segment when --segments does not say (both strategies) [default: 100].
    #[arg(long, value_name = "N")]
    seg_len: Option<u32>,
    /// What to explain: the reverse kernel's checkpoint plan, forward mode's tangent directions
    /// (how many, and which inputs share each) and loops, the price kernel's loops, or what
    /// `--mode auto` compiles for --target and why (each candidate kernel's work, storage slots
    /// and estimated cost) [default: reverse; auto when --target or --precision is given].
    #[arg(long, value_enum, default_value = "reverse")]
    mode: ExplainMode,
    /// The target `--mode auto` chooses for [default: cpu]; on cpu it also reports the storage
    /// the chosen kernel needs (slots of one SIMD vector each).
    #[arg(long, value_enum)]
    target: Option<TargetArg>,
    /// The precision `--mode auto` chooses for. Default: f64 on cpu, f32 on GPUs.
    #[arg(long, value_enum)]
    precision: Option<PrecisionArg>,
    /// Print JSON: nodes, active, segments, cuts, crossing, persistent, max_live_plain,
    /// max_live_checkpointed (with --mode forward: inputs, directions, colouring {input: direction},
    /// loops [{start, end, period, first, count, values, tangents}]; with --mode price: loops;
    /// with --mode auto: model, kernel (the choice), estimates [{kernel, mode, segments, work,
    /// ns_per_path}]).
    #[arg(long)]
    json: bool,
    /// Write an SVG of the values alive along the tape, plain and checkpointed, to FILE.svg
    /// (`-`: standard output; the plan then goes to standard error).
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
}

/// What `explain` reports.
#[derive(Copy, Clone, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum ExplainMode {
    Reverse,
    Forward,
    Price,
    Auto,
}

pub fn run(args: &ExplainArgs, given: &Given) -> Result<()> {
    // `explain TAPE --target T` asks what would be compiled for T: auto mode.
    let implied_auto = !given.has("mode") && (given.has("target") || given.has("precision"));
    if implied_auto {
        return auto(args, given);
    }
    if args.mode != ExplainMode::Auto {
        for (id, flag) in [("target", "--target"), ("precision", "--precision")] {
            if given.has(id) {
                bail!(
                    "{flag} is for --mode auto (the plan and the directions do not depend on it)"
                );
            }
        }
    }
    if args.mode == ExplainMode::Auto {
        return auto(args, given);
    }
    if matches!(args.mode, ExplainMode::Forward | ExplainMode::Price) {
        for (id, flag) in [
            ("segments", "--segments"),
            ("checkpoint", "--checkpoint"),
            ("ckpt_nodes", "--ckpt-nodes"),
            ("seg_len", "--seg-len"),
            ("plot", "--plot"),
        ] {
            if given.has(id) {
                let mode = if args.mode == ExplainMode::Price {
                    "price"
                } else {
                    "forward"
                };
                bail!(
                    "{flag} does nothing with --mode {mode}: a {mode} kernel has no checkpoint \
                     plan (its report is {})",
                    if mode == "price" {
                        "its loops"
                    } else {
                        "the tangent directions and the loops"
                    }
                );
            }
        }
        let tape = super::load_tape(&args.tape.tape)?;
        let text = match (args.mode, args.json) {
            (ExplainMode::Forward, true) => {
                super::json_text(&nablac::passes::explain_forward(&tape), false)?
            }
            (ExplainMode::Forward, false) => nablac::passes::explain_forward_text(&tape)
                .trim_end()
                .to_string(),
            (_, json) => {
                let loops = nablac::passes::explain_loops(&tape, nablac::emit::Mode::Price);
                if json {
                    super::json_text(&serde_json::json!({ "loops": loops }), false)?
                } else if loops.is_empty() {
                    "price mode: no loops (no repeated steps; `nablac inspect` lists the tape's)"
                        .to_string()
                } else {
                    format!(
                        "price mode: {} loop{} (iterations outside them are straight-line; \
                         --unroll: none)\n{}",
                        loops.len(),
                        if loops.len() == 1 { "" } else { "s" },
                        nablac::passes::explain_loops_text(&loops).trim_end()
                    )
                }
            }
        };
        super::print_report(&text, false)?;
        return Ok(());
    }
    if let Some(p) = &args.plot {
        super::check_svg_name(p)?;
    }
    let req = nablac::driver::Request {
        checkpoint: Some(args.checkpoint.into()),
        segments: args.segments,
        ckpt_nodes: given.has("ckpt_nodes").then_some(args.ckpt_nodes),
        seg_len: args.seg_len,
        ..nablac::driver::Request::default()
    };
    nablac::driver::check_segmenting(&req, nablac::plan::Checkpoint::Registers)
        .map_err(super::honour::spelled)?;
    let tape = super::load_tape(&args.tape.tape)?;
    let opts = nablac::plan::SegmentOptions {
        strategy: args.checkpoint.into(),
        segments: args.segments,
        ckpt_nodes: args.ckpt_nodes,
        seg_len: args.seg_len,
    };
    let plan = nablac::passes::plan(&tape, &opts);
    let explain = nablac::passes::explain(&tape, &plan);
    let plot_on_stdout = match &args.plot {
        Some(path) => super::write_svg(
            path,
            &nablac::passes::explain_svg(&tape, &plan),
            "the plot of live values and cuts along the tape",
        )?,
        None => false,
    };
    // The GPU targets' reverse kernel under the default plan loops instead (`--unroll`, or a
    // plan asked for, gives the checkpointed kernel above).
    let loops = nablac::passes::explain_loops(&tape, nablac::emit::Mode::Reverse);
    let text = if args.json {
        let mut j = serde_json::to_value(&explain)?;
        j["loops"] = serde_json::to_value(&loops)?;
        super::json_text(&j, plot_on_stdout)?
    } else {
        let mut t = nablac::passes::explain_text(&tape, &plan)
            .trim_end()
            .to_string();
        if !loops.is_empty() {
            t.push_str(&format!(
                "\nGPU targets, default plan: the reverse kernel loops instead (--unroll or a \
                 plan asked for compiles the checkpointed one above)\n{}",
                nablac::passes::explain_loops_text(&loops).trim_end()
            ));
        }
        t
    };
    super::print_report(&text, plot_on_stdout)?;
    Ok(())
}

/// `explain --mode auto`: the cost model's choice for the target, with the checkpoint options
/// as the reverse candidate's plan.
fn auto(args: &ExplainArgs, given: &Given) -> Result<()> {
    if given.has("plot") {
        bail!("--plot draws the checkpoint plan: use it with --mode reverse");
    }
    let target = super::compile::target(args.target.unwrap_or(TargetArg::Cpu));
    if target == nablac::emit::Target::Cpu {
        for (id, flag) in [
            ("segments", "--segments"),
            ("checkpoint", "--checkpoint"),
            ("ckpt_nodes", "--ckpt-nodes"),
            ("seg_len", "--seg-len"),
        ] {
            if given.has(id) {
                bail!("{flag} is not for the cpu target: its reverse kernel is never checkpointed");
            }
        }
    }
    let tape = super::load_tape(&args.tape.tape)?;
    // The reverse candidate's plan is the checkpoint options'; the mode is left to the model.
    let gpu = target != nablac::emit::Target::Cpu;
    let req = nablac::driver::Request {
        target: Some(target),
        precision: args.precision.map(|p| match p {
            PrecisionArg::F32 => nablac::emit::Precision::F32,
            PrecisionArg::F64 => nablac::emit::Precision::F64,
        }),
        checkpoint: gpu.then(|| args.checkpoint.into()),
        segments: args.segments.filter(|_| gpu),
        ckpt_nodes: gpu.then_some(args.ckpt_nodes),
        seg_len: args.seg_len.filter(|_| gpu),
        ..nablac::driver::Request::default()
    };
    let choice = nablac::cost::choose(&tape, &nablac::driver::base_options(&req))
        .map_err(super::honour::spelled)?;
    let precision = choice.options.precision;
    let text = if args.json {
        super::json_text(&choice, false)?
    } else {
        let mut t = nablac::cost::choice_text(&choice).trim_end().to_string();
        if target == nablac::emit::Target::Cpu {
            if let Some(e) = choice.estimates.iter().find(|e| e.kernel == choice.kernel) {
                t.push_str(&cpu_storage(e.work.storage_slots, precision));
            }
        }
        t
    };
    super::print_report(&text, false)?;
    Ok(())
}

/// The CPU kernel's storage, as `explain --target cpu` reports it: `slots` values, tangents and
/// adjoints at once per path, each slot one SIMD vector of the LLVM back end's lanes.
fn cpu_storage(slots: u32, precision: nablac::emit::Precision) -> String {
    #[cfg(feature = "llvm")]
    let lanes = nablac::llvm::lanes(precision);
    #[cfg(not(feature = "llvm"))]
    let lanes = 1u32;
    let bytes = match precision {
        nablac::emit::Precision::F64 => 8,
        nablac::emit::Precision::F32 => 4,
    };
    format!(
        "\nstorage: {slots} slots (the values, tangents and adjoints alive at once, storage reused by liveness), each {lanes} paths wide: {} KiB per call of {lanes} paths",
        (u64::from(slots) * u64::from(lanes) * bytes).div_ceil(1024)
    )
}

//! The compile policy, once: from a request whose every option may be left out to the options a
//! kernel is compiled with, and the kernel.
//!
//! A [`Request`] holds what a caller asked for (`None`: the measured default). [`check`] refuses
//! what no tape would use (an option the target, the mode or the rest of the checkpoint options
//! make meaningless: nothing is silently ignored); [`options`] resolves the rest against the
//! tape: the defaults of the target, the ladder of fused markets, `--mode auto`'s choice by the
//! cost model (reverse when checkpoint options are given), for a run the fused market count
//! (`cost::fused_markets`) and the CPU back end (LLVM within its limits, else Cranelift);
//! [`compile`] compiles with them. [`check_kernel`] refuses compile options for a kernel
//! compiled already. The command line, and any other front end, parses into a `Request` and
//! prints: it holds no policy.
//!
//! Errors name options by their [`Request`] field ([`Opt`]); [`DriverError::spell`] lets each
//! front end spell them its own way (the CLI as flags: `--segments 8`; the library's `Display`
//! as fields: `segments=8`).

use crate::compile::{CompileError, CompileOptions, Compiled, CpuBackend};
use crate::cost::Choice;
use crate::emit::{Manifest, Mode, Precision, ScratchLayout, Target};
use crate::plan::{Checkpoint, SegmentOptions};
use crate::verify::Verified;
use std::fmt;

/// What a caller asks to compile: every option optional, `None` the measured default.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Request {
    /// Default: cpu.
    pub target: Option<Target>,
    /// `None`: auto (the cost model's choice; reverse when checkpoint options are given).
    pub mode: Option<Mode>,
    /// Default: f64 on the CPU, f32 on GPUs.
    pub precision: Option<Precision>,
    /// Default: off on the CPU, register recompute on GPUs (switched on for long tapes).
    pub checkpoint: Option<Checkpoint>,
    /// `Some(1)`: one segment (plain); default: by `seg_len` or the plan's rule.
    pub segments: Option<u32>,
    /// Register recompute switches itself on at this many nodes (default
    /// `plan::DEFAULT_CKPT_NODES`).
    pub ckpt_nodes: Option<u32>,
    /// Nodes per segment where `segments` does not say.
    pub seg_len: Option<u32>,
    /// The scratch buffer's layout (`checkpoint = scratch` only); default: structure of arrays.
    pub scratch_layout: Option<ScratchLayout>,
    /// Threads per workgroup (GPU targets); default 128.
    pub workgroup_size: Option<u32>,
    /// A comment naming the tape node on every generated line (GPU targets).
    pub annotate: Option<bool>,
    /// CUDA launch bounds (`CompileOptions::min_blocks`).
    pub min_blocks: Option<u32>,
    /// The CPU code's back end; default: the fastest this build has for the kernel's size.
    pub cpu_backend: Option<CpuBackend>,
    /// Sum the Greeks' squares for their standard errors; default true.
    pub greek_stderr: Option<bool>,
    /// Markets fused into one kernel; default one, or for a run's ladder the measured count.
    pub markets: Option<u32>,
    /// The inputs that may differ between fused markets; empty: every input (or a run's
    /// laddered ones).
    pub ladder_inputs: Vec<String>,
    /// Price and forward kernels: the tape's loop regions as loops (`CompileOptions::loops`);
    /// default on (`Some(false)`: unrolled, the command line's `--unroll`).
    pub loops: Option<bool>,
}

/// Most markets one run prices (a ladder's grid, from any front end): each is a report.
pub const MAX_RUN_MARKETS: usize = 100_000;

/// What a run adds to a request: the inputs its ladder varies, how many markets it prices and
/// how many paths each, which choose the fused market count and the CPU back end.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Run {
    pub laddered: Vec<String>,
    /// Markets to price (1 without a ladder).
    pub markets: u32,
    pub paths: u64,
}

/// A compile option, named by its [`Request`] field.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Opt {
    Target,
    Mode,
    Precision,
    Checkpoint,
    Segments,
    CkptNodes,
    SegLen,
    ScratchLayout,
    WorkgroupSize,
    Annotate,
    MinBlocks,
    CpuBackend,
    GreekStderr,
    Markets,
    LadderInputs,
    Loops,
}

impl Opt {
    /// Every option, in [`Request`]'s field order.
    pub const ALL: [Opt; 16] = [
        Opt::Target,
        Opt::Mode,
        Opt::Precision,
        Opt::Checkpoint,
        Opt::Segments,
        Opt::CkptNodes,
        Opt::SegLen,
        Opt::ScratchLayout,
        Opt::WorkgroupSize,
        Opt::Annotate,
        Opt::MinBlocks,
        Opt::CpuBackend,
        Opt::GreekStderr,
        Opt::Markets,
        Opt::LadderInputs,
        Opt::Loops,
    ];

    /// The option whose field is `name`.
    pub fn of_field(name: &str) -> Option<Opt> {
        Opt::ALL.into_iter().find(|o| o.field() == name)
    }

    /// The field of [`Request`] (and of [`CompileOptions`]) that holds it.
    pub fn field(self) -> &'static str {
        match self {
            Opt::Target => "target",
            Opt::Mode => "mode",
            Opt::Precision => "precision",
            Opt::Checkpoint => "checkpoint",
            Opt::Segments => "segments",
            Opt::CkptNodes => "ckpt_nodes",
            Opt::SegLen => "seg_len",
            Opt::ScratchLayout => "scratch_layout",
            Opt::WorkgroupSize => "workgroup_size",
            Opt::Annotate => "annotate",
            Opt::MinBlocks => "min_blocks",
            Opt::CpuBackend => "cpu_backend",
            Opt::GreekStderr => "greek_stderr",
            Opt::Markets => "markets",
            Opt::LadderInputs => "ladder_inputs",
            Opt::Loops => "loops",
        }
    }
}

/// One piece of a message that names options.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Part {
    Text(String),
    /// An option, with the value it was given where the message depends on it.
    Opt(Opt, Option<String>),
}

/// A message that names options, for each front end to spell ([`Refusal::spell`]).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Refusal(pub Vec<Part>);

impl Refusal {
    /// `template` with each `{}` replaced by the next of `opts`, in order.
    pub fn new(template: &str, opts: &[(Opt, Option<String>)]) -> Refusal {
        let mut parts = Vec::new();
        let mut opts = opts.iter();
        for (i, text) in template.split("{}").enumerate() {
            if i > 0 {
                let (o, v) = opts.next().expect("a {} without its option");
                parts.push(Part::Opt(*o, v.clone()));
            }
            if !text.is_empty() {
                parts.push(Part::Text(text.to_string()));
            }
        }
        debug_assert!(opts.next().is_none(), "an option without its {{}}");
        Refusal(parts)
    }

    /// The message with each option spelled by `name` (option, value).
    pub fn spell(&self, name: &dyn Fn(Opt, Option<&str>) -> String) -> String {
        self.0
            .iter()
            .map(|p| match p {
                Part::Text(t) => t.clone(),
                Part::Opt(o, v) => name(*o, v.as_deref()),
            })
            .collect()
    }
}

/// The library's spelling of an option: its field, `= value` where given.
pub fn field_name(o: Opt, value: Option<&str>) -> String {
    match value {
        Some(v) => format!("{}={v}", o.field()),
        None => o.field().to_string(),
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.spell(&field_name))
    }
}

/// Why a request cannot be compiled.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DriverError {
    /// An option no kernel of this request would use, or one out of its range.
    #[error("{0}")]
    Refused(Refusal),
    #[error(transparent)]
    Compile(#[from] CompileError),
}

impl DriverError {
    /// Does the message name options (and so read differently in each front end's words)?
    pub fn names_options(&self) -> bool {
        match self {
            DriverError::Refused(_) => true,
            DriverError::Compile(e) => e.refusal().is_some(),
        }
    }

    /// The message with options spelled by `name` (see [`Refusal::spell`]); errors that name no
    /// option read as their `Display`.
    pub fn spell(&self, name: &dyn Fn(Opt, Option<&str>) -> String) -> String {
        match self {
            DriverError::Refused(r) => r.spell(name),
            DriverError::Compile(e) => match e.refusal() {
                Some(r) => r.spell(name),
                None => e.to_string(),
            },
        }
    }
}

fn refuse<T>(template: &str, opts: &[(Opt, Option<String>)]) -> Result<T, DriverError> {
    Err(DriverError::Refused(Refusal::new(template, opts)))
}

fn bare(o: Opt) -> (Opt, Option<String>) {
    (o, None)
}

fn with(o: Opt, v: impl ToString) -> (Opt, Option<String>) {
    (o, Some(v.to_string()))
}

/// The strategy a target checkpoints with by default.
fn default_checkpoint(target: Target) -> Checkpoint {
    CompileOptions::new(target).segments.strategy
}

impl Request {
    fn target(&self) -> Target {
        self.target.unwrap_or(Target::Cpu)
    }

    /// The options given that only a checkpointed reverse kernel reads (a strategy other than
    /// off, more than one segment, `ckpt_nodes`, `seg_len`, `scratch_layout`), in that order.
    fn checkpointing(&self) -> Vec<(Opt, Option<String>)> {
        let mut given = Vec::new();
        if let Some(c) = self.checkpoint.filter(|&c| c != Checkpoint::Off) {
            given.push(with(Opt::Checkpoint, c.name()));
        }
        if let Some(n) = self.segments.filter(|&n| n > 1) {
            given.push(with(Opt::Segments, n));
        }
        if self.ckpt_nodes.is_some() {
            given.push(bare(Opt::CkptNodes));
        }
        if self.seg_len.is_some() {
            given.push(bare(Opt::SegLen));
        }
        if self.scratch_layout.is_some() {
            given.push(bare(Opt::ScratchLayout));
        }
        given
    }

    /// Were options given that only a checkpointed reverse kernel reads? (Auto mode then
    /// compiles reverse rather than ignore them.)
    pub fn asks_for_checkpointing(&self) -> bool {
        !self.checkpointing().is_empty()
    }
}

/// Refuses the options no kernel of `req` would use, before any tape is read: options the
/// target, the mode or the rest of the checkpoint options make meaningless. (What a target
/// cannot do at all, `checkpoint = scratch` on glsl and cpu or `min_blocks` past cuda, the
/// compiler refuses itself.)
pub fn check(req: &Request) -> Result<(), DriverError> {
    let target = req.target();
    if req.cpu_backend.is_some() && target != Target::Cpu {
        let b = req.cpu_backend.unwrap_or_default().name();
        return refuse(
            &format!("{{}} is for the cpu target, not {}", target.name()),
            &[with(Opt::CpuBackend, b)],
        );
    }
    if target == Target::Cpu {
        let mut unused = req.checkpointing();
        if req.workgroup_size.is_some() {
            unused.push(bare(Opt::WorkgroupSize));
        }
        if req.annotate == Some(true) {
            unused.push(bare(Opt::Annotate));
        }
        // `checkpoint = scratch` the compiler refuses itself, with its words.
        if let Some(first) = unused
            .into_iter()
            .find(|(o, v)| !(*o == Opt::Checkpoint && v.as_deref() == Some("scratch")))
        {
            return refuse(
                "{} is not for the cpu target: the CPU kernel keeps a path's values in cache and \
                 reads only {} and {}",
                &[first, bare(Opt::Mode), bare(Opt::Precision)],
            );
        }
    }
    if req.loops == Some(true) && req.mode == Some(Mode::Reverse) {
        if req.target() == Target::Cpu {
            return refuse(
                "{} with {} is for the GPU targets: the cpu target's reverse kernel is \
                 unrolled (it keeps every value, so a loop would only recompute them)",
                &[bare(Opt::Loops), with(Opt::Mode, "reverse")],
            );
        }
        let plan = [
            (
                Opt::Checkpoint,
                req.checkpoint.is_some_and(|c| c != Checkpoint::Registers),
            ),
            (Opt::Segments, req.segments.is_some()),
            (Opt::SegLen, req.seg_len.is_some()),
        ];
        if let Some((o, _)) = plan.into_iter().find(|p| p.1) {
            return refuse(
                "{} with {} does nothing with {}: a reverse loop's bookmarks take the place of \
                 the segments (leave {} out for the checkpointed kernel)",
                &[
                    bare(Opt::Loops),
                    with(Opt::Mode, "reverse"),
                    bare(o),
                    bare(Opt::Loops),
                ],
            );
        }
    }
    if req.mode == Some(Mode::Price) && req.greek_stderr.is_some() {
        return refuse(
            "{} does nothing with {}: a price kernel has no Greeks",
            &[bare(Opt::GreekStderr), with(Opt::Mode, "price")],
        );
    }
    if let Some(mode) = req
        .mode
        .filter(|m| matches!(m, Mode::Price | Mode::Forward))
    {
        if let Some(first) = req.checkpointing().into_iter().next() {
            let m = mode.name();
            return refuse(
                &format!(
                    "{{}} does nothing with {{}}: a {m} kernel has no reverse sweep to checkpoint"
                ),
                &[first, with(Opt::Mode, m)],
            );
        }
    }
    check_segmenting(req, default_checkpoint(target))
}

/// The checks of the checkpoint options among themselves (shared with `explain`'s plan):
/// options that the strategy (`default` where `req` names none) or the segment count make
/// meaningless.
pub fn check_segmenting(req: &Request, default: Checkpoint) -> Result<(), DriverError> {
    let strategy = req.checkpoint.unwrap_or(default);
    let off = with(Opt::Checkpoint, "off");
    if strategy == Checkpoint::Off {
        if let Some(n) = req.segments.filter(|&n| n > 1) {
            return refuse(
                "{} contradicts {} (the plain kernel has one segment)",
                &[with(Opt::Segments, n), off],
            );
        }
        for (o, given) in [
            (Opt::CkptNodes, req.ckpt_nodes.is_some()),
            (Opt::SegLen, req.seg_len.is_some()),
        ] {
            if given {
                return refuse(
                    "{} does nothing with {} (there is nothing to segment)",
                    &[bare(o), off],
                );
            }
        }
    }
    if let Some(n) = req.segments {
        for (o, given) in [
            (Opt::CkptNodes, req.ckpt_nodes.is_some()),
            (Opt::SegLen, req.seg_len.is_some()),
        ] {
            if given {
                return refuse(
                    "{} does nothing with {}: it chooses the segment count only when {} does not",
                    &[bare(o), with(Opt::Segments, n), bare(Opt::Segments)],
                );
            }
        }
    }
    if req.ckpt_nodes.is_some() && strategy == Checkpoint::Scratch {
        return refuse(
            "{} does nothing with {}: it is when register recompute switches itself on (scratch \
             checkpointing goes by {})",
            &[
                bare(Opt::CkptNodes),
                with(Opt::Checkpoint, "scratch"),
                bare(Opt::SegLen),
            ],
        );
    }
    if req.scratch_layout.is_some() && strategy != Checkpoint::Scratch {
        return refuse(
            "{} does nothing with {}: it lays out the scratch buffer of {}",
            &[
                bare(Opt::ScratchLayout),
                with(Opt::Checkpoint, strategy.name()),
                with(Opt::Checkpoint, "scratch"),
            ],
        );
    }
    Ok(())
}

/// The options `req` compiles with, before auto mode and a run's choices: the target's
/// defaults overridden by what `req` gives.
pub fn base_options(req: &Request) -> CompileOptions {
    let mut c = CompileOptions::new(req.target());
    c.mode = req.mode.unwrap_or(Mode::Reverse);
    c.precision = req.precision.unwrap_or(c.precision);
    c.segments = SegmentOptions {
        strategy: req.checkpoint.unwrap_or(c.segments.strategy),
        segments: req.segments,
        ckpt_nodes: req.ckpt_nodes.unwrap_or(c.segments.ckpt_nodes),
        seg_len: req.seg_len,
    };
    c.scratch_layout = req.scratch_layout.unwrap_or(c.scratch_layout);
    c.workgroup_size = req.workgroup_size.unwrap_or(c.workgroup_size);
    c.annotate = req.annotate.unwrap_or(c.annotate);
    c.min_blocks = req.min_blocks;
    c.cpu_backend = req.cpu_backend.unwrap_or(c.cpu_backend);
    c.greek_stderr = req.greek_stderr.unwrap_or(c.greek_stderr);
    c.loops = req.loops.unwrap_or(c.loops);
    c
}

/// The ladder `req.markets` and `req.ladder_inputs` ask for on `tape`, with `laddered` the
/// inputs a run's ladder varies (`None`: one market). A run's ladder without `markets` gets one
/// market here; [`options`] then fuses by the measured rule.
fn ladder(
    tape: &Verified,
    req: &Request,
    laddered: &[String],
) -> Result<Option<crate::ladder::LadderSpec>, DriverError> {
    if req.markets.is_none() && laddered.is_empty() {
        if !req.ladder_inputs.is_empty() {
            return refuse(
                "{} names what varies across fused markets: give {} too",
                &[bare(Opt::LadderInputs), with(Opt::Markets, "M")],
            );
        }
        return Ok(None);
    }
    let markets = req.markets.unwrap_or(1);
    let max = crate::ladder::MAX_MARKETS;
    if markets == 0 || markets > max {
        return refuse(
            &format!("{{}} is out of range: 1 ..= {max}"),
            &[with(Opt::Markets, markets)],
        );
    }
    let names: Vec<&str> = tape.inputs.iter().map(|i| i.name.as_str()).collect();
    if let Some(v) = req
        .ladder_inputs
        .iter()
        .find(|v| !names.contains(&v.as_str()))
    {
        return refuse(
            &format!(
                "{{}}: the tape has no input {v} (inputs: {})",
                names.join(", ")
            ),
            &[with(Opt::LadderInputs, v)],
        );
    }
    let all = req.ladder_inputs.is_empty() && laddered.is_empty();
    Ok(Some(crate::ladder::LadderSpec {
        markets,
        varying: names
            .iter()
            .map(|n| {
                all || req.ladder_inputs.iter().any(|v| v == n) || laddered.iter().any(|l| l == n)
            })
            .collect(),
    }))
}

/// The options a kernel of `tape` is compiled with, and the cost model's choice where auto
/// mode made one.
#[derive(Clone, PartialEq, Debug)]
pub struct Resolved {
    pub options: CompileOptions,
    pub choice: Option<Choice>,
}

impl Resolved {
    /// Compiles the kernel of `tape` these options resolve to, from the schedule auto mode
    /// built for its choice where there is one (`cost::Choice::schedule`, taken: it is
    /// scheduled once).
    pub fn compile(&mut self, tape: &Verified) -> Result<Compiled, CompileError> {
        let schedule = self.choice.as_mut().and_then(|c| c.schedule.take());
        crate::compile::compile_scheduled(tape, &self.options, schedule)
    }
}

/// Resolves `req` against `tape` (see the module doc); `run`, where the kernel is compiled to
/// be run, chooses the fused market count and the CPU back end by the measured rules. Does not
/// repeat [`check`]: call it first, before the tape is read.
pub fn options(tape: &Verified, req: &Request, run: Option<&Run>) -> Result<Resolved, DriverError> {
    let laddered = run.map_or(&[][..], |r| &r.laddered[..]);
    let mut o = base_options(req);
    o.ladder = ladder(tape, req, laddered)?;
    let mut choice = None;
    if req.mode.is_none() && !req.asks_for_checkpointing() {
        let c = crate::cost::choose(tape, &o)?;
        o = c.options.clone();
        choice = Some(c);
    }
    if let Some(run) = run {
        let cpu = o.target == Target::Cpu;
        if cpu {
            // The back end the fused-market rule prices the compile of (chosen again below, for
            // the fused kernel's size).
            o.cpu_backend = req.cpu_backend.unwrap_or_else(CpuBackend::fastest);
        }
        if !run.laddered.is_empty() && req.markets.is_none() {
            // As many markets per kernel as pay, compile time included.
            let (fused, _) = crate::cost::fused_markets(tape, &o, run.markets, run.paths)?;
            if let Some(l) = &mut o.ladder {
                l.markets = fused;
            }
        }
        if cpu {
            // The fused kernel's tape has at most markets x the nodes.
            let markets = o.ladder.as_ref().map_or(1, |l| l.markets as usize);
            let sums = crate::compile::per_path_sums(tape, o.mode, markets);
            o.cpu_backend = req.cpu_backend.unwrap_or_else(|| {
                let nodes = crate::compile::printed_nodes(tape, &o);
                CpuBackend::fastest_for(nodes.saturating_mul(markets), sums)
            });
        }
    }
    Ok(Resolved { options: o, choice })
}

/// [`check`], [`options`], then `compile::compile`: the kernel `req` asks for of `tape`.
pub fn compile(
    tape: &Verified,
    req: &Request,
    run: Option<&Run>,
) -> Result<(Resolved, Compiled), DriverError> {
    check(req)?;
    let mut r = options(tape, req, run)?;
    let k = r.compile(tape)?;
    Ok((r, k))
}

/// Refuses compile options for `name`, a kernel compiled already with manifest `m`: its mode,
/// precision and Greeks' squares are fixed, so those are accepted only when they state what the
/// manifest says (`mode: None`, auto, accepts any); every other compile option is refused.
pub fn check_kernel(name: &str, m: &Manifest, req: &Request) -> Result<(), DriverError> {
    let what = format!(
        "{name} is a kernel compiled already ({}, {}, {})",
        m.target.name(),
        m.precision.name(),
        m.mode.name()
    );
    if let Some(p) = req.precision.filter(|&p| p != m.precision) {
        let p = p.name();
        return refuse(
            &format!("{{}} cannot apply: {what}; compile its tape with {{}} and run that"),
            &[with(Opt::Precision, p), with(Opt::Precision, p)],
        );
    }
    if let Some(mode) = req.mode.filter(|&x| x != m.mode) {
        let x = mode.name();
        return refuse(
            &format!("{{}} cannot apply: {what}; compile its tape with {{}} and run that"),
            &[with(Opt::Mode, x), with(Opt::Mode, x)],
        );
    }
    if let Some(g) = req.greek_stderr.filter(|&g| g != m.greek_stderr) {
        let had = if m.greek_stderr { "with" } else { "without" };
        return refuse(
            &format!("{{}} cannot apply: {what}, {had} the Greeks' squares; compile its tape with {{}} and run that"),
            &[with(Opt::GreekStderr, g), with(Opt::GreekStderr, g)],
        );
    }
    let given = [
        (Opt::Checkpoint, req.checkpoint.is_some()),
        (Opt::Segments, req.segments.is_some()),
        (Opt::CkptNodes, req.ckpt_nodes.is_some()),
        (Opt::SegLen, req.seg_len.is_some()),
        (Opt::ScratchLayout, req.scratch_layout.is_some()),
        (Opt::WorkgroupSize, req.workgroup_size.is_some()),
        (Opt::Annotate, req.annotate.is_some()),
        (Opt::MinBlocks, req.min_blocks.is_some()),
        (Opt::Markets, req.markets.is_some()),
        (Opt::LadderInputs, !req.ladder_inputs.is_empty()),
        (Opt::CpuBackend, req.cpu_backend.is_some()),
        (Opt::Loops, req.loops.is_some()),
    ];
    if let Some((o, _)) = given.into_iter().find(|g| g.1) {
        return refuse(
            &format!("{{}} applies when compiling a tape, and {what}: run it without {{}}, or compile its tape with it"),
            &[bare(o), bare(o)],
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(o: Opt, v: Option<&str>) -> String {
        let f = format!("--{}", o.field().replace('_', "-"));
        match v {
            Some(v) => format!("{f} {v}"),
            None => f,
        }
    }

    #[test]
    fn refusals_name_fields_and_each_front_end_spells_them() {
        let req = Request {
            target: Some(Target::Cuda),
            checkpoint: Some(Checkpoint::Off),
            segments: Some(8),
            ..Request::default()
        };
        let e = check(&req).unwrap_err();
        assert_eq!(
            e.to_string(),
            "segments=8 contradicts checkpoint=off (the plain kernel has one segment)"
        );
        assert_eq!(
            e.spell(&flags),
            "--segments 8 contradicts --checkpoint off (the plain kernel has one segment)"
        );
    }

    #[test]
    fn options_left_out_are_the_measured_defaults() {
        let tape = crate::passes::fixtures::asian(252);
        // Auto mode on the GPU is the cost model's choice, and it says so.
        let gpu = Request {
            target: Some(Target::Cuda),
            ..Request::default()
        };
        let r = options(&tape, &gpu, None).unwrap();
        let choice = r.choice.expect("auto mode chose");
        assert_eq!(r.options, choice.options);
        assert_eq!(r.options.precision, Precision::F32);
        // Checkpoint options imply reverse mode, and no choice is made.
        let seg = Request {
            segments: Some(8),
            ..gpu.clone()
        };
        let r = options(&tape, &seg, None).unwrap();
        assert!(r.choice.is_none());
        assert_eq!(r.options.mode, Mode::Reverse);
        assert_eq!(r.options.segments.segments, Some(8));
        // A run on the CPU gets the fastest back end this build has.
        let run = Run {
            markets: 1,
            paths: 1000,
            ..Run::default()
        };
        let r = options(&tape, &Request::default(), Some(&run)).unwrap();
        assert_eq!(r.options.cpu_backend, CpuBackend::fastest());
        assert_eq!(r.options.precision, Precision::F64);
        // A compile without a run keeps the reference back end, unless asked.
        let r = options(&tape, &Request::default(), None).unwrap();
        assert_eq!(r.options.cpu_backend, CpuBackend::Cranelift);
        // A run's ladder without a market count fuses by the measured rule.
        let ladder = Run {
            laddered: vec!["spot".into()],
            markets: 7,
            paths: 1 << 20,
        };
        let r = options(&tape, &gpu, Some(&ladder)).unwrap();
        let l = r.options.ladder.expect("a ladder");
        assert!(l.markets >= 1 && l.markets <= 7);
        assert_eq!(l.varying, [true, false, false, false, false]);
    }

    #[test]
    fn options_a_kernel_compiled_already_cannot_take_are_refused() {
        let tape = crate::passes::fixtures::european();
        let (_, k) = compile(&tape, &Request::default(), None).unwrap();
        let ok = Request {
            mode: Some(k.manifest.mode),
            precision: Some(k.manifest.precision),
            ..Request::default()
        };
        check_kernel("k.clif", &k.manifest, &ok).unwrap();
        let bad = Request {
            segments: Some(4),
            ..Request::default()
        };
        let e = check_kernel("k.clif", &k.manifest, &bad).unwrap_err();
        assert!(e.to_string().starts_with("segments applies when compiling a tape, and k.clif is a kernel compiled already (cpu, f64, "), "{e}");
        assert!(e.spell(&flags).contains("run it without --segments"), "{e}");
    }
}

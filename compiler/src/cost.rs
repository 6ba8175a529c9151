//! `--mode auto`: the choice between forward and reverse mode, and of checkpointing for reverse,
//! by a cost model.
//!
//! Each candidate kernel's per-path work is counted on its schedule ([`Work::of`]): draws,
//! arithmetic definitions (recomputations included), derivative terms (the live steps of tangent
//! and adjoint statements), leaves (f64 sums) and the loads and stores of what spills beyond the
//! registers a GPU thread has ([`Work::spill_traffic`]). A [`CostModel`] prices each count in
//! nanoseconds per path; its weights were fitted (`scripts/fit-cost.py`) on kernel times measured
//! side by side: [`H200`] on the H200 (CUDA, f32, 16M paths, `scripts/gpu/modes-bench.sh`),
//! [`CPU`] on the development machine (the LLVM back end, f64, one thread). [`choose`] builds every
//! candidate's schedule, prices it and takes the cheapest; `nablac explain --mode auto` prints
//! the estimates. Guarantee: the choice is a pure function of the tape and the options.

use crate::compile::{check_ranges, min_blocks, CompileError, CompileOptions};
use crate::emit::{Mode, Target};
use crate::ops::{Acc, Arith, Expr, Factor, Rule, Step};
use crate::plan::SegmentOptions;
use crate::schedule::maxlive::{max_live, storage_and_spills};
use crate::schedule::{Class, Def, Schedule, Stmt};
use crate::verify::Verified;

/// One kernel's work per path, counted on its schedule.
#[derive(Copy, Clone, PartialEq, Eq, Debug, Default, serde::Serialize)]
pub struct Work {
    /// Draws evaluated (a checkpointed reverse sweep evaluates each twice).
    pub draws: u64,
    /// Arithmetic definitions evaluated, recomputations and opaque reads included.
    pub ops: u64,
    /// Calls, powers and divisions evaluated, in definitions and derivative terms alike (each
    /// costs several instructions on every target).
    pub heavy: u64,
    /// Tangent arithmetic (forward mode): per tangent statement of n live terms, n - 1 adds
    /// (a term that multiplies fuses with an add) and one multiply more when every term does.
    pub tangent_ops: u64,
    /// The tangent terms that multiply (each one multiply more where the compiler does not
    /// fuse it with its add: Cranelift).
    pub tangent_multiplies: u64,
    /// Adjoint arithmetic (reverse mode): one add or fused multiply-add per live term of an
    /// adjoint statement (an accumulation into an adjoint).
    pub adjoint_ops: u64,
    /// Per-path sums the kernel reduces (f64).
    pub leaves: u64,
    /// The most values held at once (`schedule::maxlive`).
    pub max_live: u32,
    /// Of those, the ones in registers (at most the kernel's register budget): the more, the
    /// fewer threads a GPU multiprocessor keeps resident to hide latency.
    pub register_live: u32,
    /// Values held beyond the kernel's register budget (GPU targets: they spill).
    pub excess_live: u32,
    /// Loads and stores a path makes where values, tangents and adjoints beyond the register
    /// budget spill, with the fewest spills (`maxlive::spill_traffic`; 0 on the CPU).
    pub spill_traffic: u64,
    /// Values, tangents and adjoints held at once (`maxlive::storage_slots`): the storage
    /// slots a path needs where storage is reused by liveness (per SIMD lane on the CPU).
    pub storage_slots: u32,
}

impl Work {
    /// Adds the work of `stmts`, run `times` times (a loop's body once per iteration).
    fn count(&mut self, stmts: &[Stmt], times: u64) {
        for s in stmts {
            match s {
                Stmt::Define {
                    def: Def::Rule { rule, .. },
                    ..
                } => {
                    self.ops += times;
                    self.heavy += times * heavy(&rule.value);
                }
                Stmt::Define {
                    def: Def::Draw { .. },
                    ..
                } => self.draws += times,
                // An opaque read of a value or a scratch slot is an op, as fitted; a
                // bookmark's (a reverse loop's restore) was not counted when the model was fitted
                // and is not now.
                Stmt::OpaqueRead { from, .. } if !matches!(from, Some(slot) if slot.class == Class::Local) => {
                    self.ops += times
                }
                Stmt::Adjoint(a) => {
                    // Each term accumulates into an adjoint: one add, or one fused multiply-add.
                    let (terms, _, h) = live_steps(a.rule, a.to.map(|t| t.is_some()));
                    self.adjoint_ops += times * terms;
                    self.heavy += times * h;
                }
                Stmt::Tangent(t) => {
                    // A sum of n terms: n - 1 adds, each fused with a term's multiply, and one
                    // multiply more when every term multiplies.
                    let (terms, scaled, h) = live_steps(t.rule, t.from.map(|f| f.is_some()));
                    self.tangent_ops +=
                        times * (terms.saturating_sub(1) + u64::from(terms > 0 && scaled == terms));
                    self.tangent_multiplies += times * scaled;
                    self.heavy += times * h;
                }
                Stmt::Leaves(l) => self.leaves += times * l.len() as u64,
                Stmt::Block(b) => self.count(&b.body, times),
                Stmt::Loop(l) => self.count(&l.body, times * u64::from(l.count)),
                _ => {}
            }
        }
    }

    /// The work of `schedule` (of a tape of `nodes` nodes) where a thread has `registers`
    /// registers for values (`u32::MAX`: no limit, the CPU's stack).
    pub fn of(schedule: &Schedule, nodes: usize, registers: u32) -> Work {
        let mut w = Work::default();
        w.count(&schedule.body, 1);
        w.max_live = max_live(schedule, nodes);
        w.register_live = w.max_live.min(registers);
        w.excess_live = w.max_live.saturating_sub(registers);
        // No limit (the CPU): nothing spills, and the count is 0.
        (w.storage_slots, w.spill_traffic) = storage_and_spills(schedule, nodes, registers);
        w
    }
}

impl Work {
    /// Register pressure: the values in registers times the definitions evaluated, / 256. A
    /// GPU thread that holds more values leaves fewer threads resident on its multiprocessor
    /// to hide the latency of its work (`scripts/fit-cost.py` computes the same).
    pub fn pressure(&self) -> f64 {
        f64::from(self.register_live) * (self.draws + self.ops) as f64 / 256.0
    }
}

/// Calls, powers and divisions in `e`.
fn heavy(e: &Expr) -> u64 {
    match e {
        Expr::A | Expr::B | Expr::C | Expr::D | Expr::Lit(_) | Expr::Nan => 0,
        Expr::Neg(x) => heavy(x),
        Expr::Arith(op, x, y) => u64::from(*op == Arith::Div) + heavy(x) + heavy(y),
        Expr::Chain(f, x, y) => u64::from(*f == Factor::Over) + heavy(x) + heavy(y),
        Expr::Call(_, x) => 1 + heavy(x),
        Expr::Pow(x, y) => 1 + heavy(x) + heavy(y),
        Expr::Select(c, x, y) => heavy(c.lhs) + heavy(c.rhs) + heavy(x) + heavy(y),
    }
}

/// The steps of `rule`'s adjoint that run when only the arguments `fed` take part: how many,
/// how many of them multiply (their expression is not the bare derivative `D`), and their heavy
/// operations.
fn live_steps(rule: &Rule, fed: [bool; 2]) -> (u64, u64, u64) {
    let acc = |a: &Acc| fed[a.arg.index()].then(|| (u64::from(a.expr != Expr::D), heavy(&a.expr)));
    let (mut terms, mut scaled, mut h) = (0, 0, 0);
    for step in rule.adjoint {
        let cost = match step {
            Step::Acc(a) => acc(a),
            Step::If(c, a, other) => {
                let arms = [
                    acc(a),
                    other.and_then(|o| match o {
                        Step::Acc(b) => acc(b),
                        Step::If(..) => None,
                    }),
                ];
                arms.iter().any(Option::is_some).then(|| {
                    let m = arms.iter().flatten().map(|x| x.0).max().unwrap_or(0);
                    (
                        m,
                        heavy(c.lhs)
                            + heavy(c.rhs)
                            + arms.iter().flatten().map(|x| x.1).sum::<u64>(),
                    )
                })
            }
        };
        if let Some((m, c)) = cost {
            terms += 1;
            scaled += m;
            h += c;
        }
    }
    (terms, scaled, h)
}

/// Nanoseconds per path of each unit of [`Work`] (fitted; see the module doc).
#[derive(Copy, Clone, PartialEq, Debug, serde::Serialize)]
pub struct CostModel {
    /// Where the weights were measured.
    pub name: &'static str,
    /// False for a model without measured weights: `choose` then takes reverse mode with the
    /// base options, and every estimate is NaN (`null` in JSON).
    pub fitted: bool,
    /// Per path, whatever the tape: the kernel's loop, its generator key and result stores.
    pub path: f64,
    pub draw: f64,
    pub op: f64,
    pub heavy: f64,
    pub tangent_op: f64,
    pub tangent_multiply: f64,
    pub adjoint_op: f64,
    pub leaf: f64,
    /// Per unit of [`Work::pressure`].
    pub pressure: f64,
    /// Per load or store of [`Work::spill_traffic`].
    pub spill_access: f64,
}

impl CostModel {
    /// Estimated nanoseconds per path of a kernel doing `w` (NaN for a model not fitted).
    pub fn ns_per_path(&self, w: &Work) -> f64 {
        if !self.fitted {
            return f64::NAN;
        }
        self.path
            + self.draw * w.draws as f64
            + self.op * w.ops as f64
            + self.heavy * w.heavy as f64
            + self.tangent_op * w.tangent_ops as f64
            + self.tangent_multiply * w.tangent_multiplies as f64
            + self.adjoint_op * w.adjoint_ops as f64
            + self.leaf * w.leaves as f64
            + self.pressure * w.pressure()
            + self.spill_access * w.spill_traffic as f64
    }

    /// The model for kernels of `target`: the H200's for the GPU targets (measured on CUDA;
    /// OpenCL and Vulkan run the same GPU), this machine's for the CPU.
    pub fn for_target(target: Target) -> &'static CostModel {
        match target {
            Target::Cpu => &CPU,
            _ => &H200,
        }
    }
}

/// Fitted by `NABLAC=target/release/nablac python3 scripts/fit-cost.py --fit cuda MODES.txt` on the
/// H200 kernel times of 2026-12-04 (BENCHMARKS.md: six tapes x price, forward, reverse default and
/// plain, and the 52-bucket tape's price, forward and reverse; 16M paths, f32): on all seven tapes
/// it picks the measured fastest of forward and reverse, and of plain and checkpointed reverse.
/// Spills are priced per access (`Work::spill_traffic`): the earlier per-value weight chose
/// reverse for the 52-bucket tape, whose checkpointed kernel reloads its spilled adjoints in
/// segment after segment, where forward measured 1.40 times faster. The model has no occupancy
/// step: the 24-bucket tape's forward kernel at 226 registers (two resident workgroups) was a
/// miss on an H100 (reverse 1.21-1.37x faster, BENCHMARKS.md 2026-12-05) until
/// `compile::FORWARD_MIN_BLOCKS` bounded it to 168 (forward 1.22x faster, 2026-12-06); and it
/// is why wide reverse kernels keep their launch bounds (see `compile::DEFAULT_MIN_BLOCKS`).
pub const H200: CostModel = CostModel {
    name: "H200 (CUDA f32, 2026-12-05 fit of the 2026-12-04 times)",
    fitted: true,
    path: 0.0,
    draw: 9.3066e-04,
    op: 4.0014e-04,
    heavy: 7.9308e-04,
    tangent_op: 0.0,
    tangent_multiply: 1.0871e-04,
    adjoint_op: 1.6022e-04,
    leaf: 2.2318e-03,
    pressure: 1.9335e-04,
    spill_access: 6.5049e-03,
};

/// Fitted by `NABLAC=target/release/nablac python3 scripts/fit-cost.py --measure-cpu cpu.txt
/// --paths 16384` (and again with `--paths 65536`), then `--fit cpu` on both files at once
/// (`scripts/fit-data/cpu-2026-12-07.txt`), on this machine (2 vCPU AMD EPYC Zen 4 with
/// AVX-512, the LLVM back end's 8 f64 lanes), f64, one thread, 2026-12-07 (BENCHMARKS.md):
/// eleven tapes (the benchmark tapes and two user-style ones, a 2-asset barrier basket and an
/// autocallable) x price, forward and reverse, every estimate within 14% of its time; the
/// choice is the measured fastest on ten tapes and a tie (3%) on the eleventh. The
/// nanoseconds are this machine's: elsewhere read the ratios.
pub const CPU: CostModel = CostModel {
    name: "CPU (LLVM f64, AVX-512 Zen 4, one thread, 2026-12-07)",
    fitted: true,
    path: 7.2049e+00,
    draw: 3.6471e+00,
    op: 1.6028e-02,
    heavy: 7.0603e-01,
    tangent_op: 9.6222e-02,
    tangent_multiply: 1.3573e-02,
    adjoint_op: 1.3661e-01,
    leaf: 1.2931e+00,
    pressure: 0.0,
    spill_access: 0.0,
};

/// One candidate kernel of the automatic choice, with its work and estimated cost.
#[derive(Clone, PartialEq, Debug, serde::Serialize)]
pub struct Estimate {
    /// `price` (for comparison; never chosen), `forward`, `reverse` (the default checkpoint
    /// plan) or `reverse-plain` (one segment, where the default plan has several).
    pub kernel: &'static str,
    pub mode: Mode,
    /// The segments of its plan (1: plain).
    pub segments: u32,
    pub work: Work,
    pub ns_per_path: f64,
    /// CPU target: the kernel is past LLVM's size limits (`CpuBackend::fastest_for`), so a
    /// run gets Cranelift, far slower on such a kernel than the model (fitted on LLVM's) says.
    pub past_llvm: bool,
}

/// The automatic choice: the options to compile with and every estimate behind it.
#[derive(Clone, PartialEq, Debug, serde::Serialize)]
pub struct Choice {
    pub model: &'static CostModel,
    /// The chosen kernel (one of `estimates`' names).
    pub kernel: &'static str,
    #[serde(skip)]
    pub options: CompileOptions,
    pub estimates: Vec<Estimate>,
    /// The chosen kernel's schedule, built for its estimate, where the kernel compiles from it
    /// (a GPU target and no ladder: the CPU code runs the plain schedule, a fused ladder another
    /// tape's), so that `compile` does not build it twice ([`crate::compile::compile_scheduled`]).
    #[serde(skip)]
    pub schedule: Option<Schedule>,
}

/// The kernel `--mode auto` compiles for `tape` with `base`'s target, precision and the rest of
/// its options (its mode is ignored; its checkpoint options are the reverse candidate's plan):
/// the cheapest of forward, reverse with `base`'s plan and, where that plan is checkpointed and
/// `base` does not fix the segment count, the plain reverse kernel.
///
/// On the CPU a candidate past LLVM's size limits (`Estimate::past_llvm`) is chosen only when
/// every candidate is: it runs on Cranelift, and the CPU model is fitted on LLVM's times. On
/// the 10,000-step Asian (60,024 nodes) the unrolled reverse kernel, estimated 55 us a path
/// against forward's 57, ran 2,180 us a path (1M paths, 2 threads, 1,090 s) where the forward
/// kernel, a loop LLVM takes, ran 56 us (29 s): `nablac run T.bin --target cpu --mode
/// reverse|forward --paths 1000000` on this 2-core machine (BENCHMARKS.md, 2026-12-07).
///
/// Errors: an option out of its range, as [`crate::compile::compile`] would refuse it.
pub fn choose(tape: &Verified, base: &CompileOptions) -> Result<Choice, CompileError> {
    check_ranges(base)?;
    let model = CostModel::for_target(base.target);
    // One plan for the base options (price and forward kernels ignore it), and the plain one
    // where the base plan is checkpointed and its segment count is not fixed.
    let base_plan = crate::passes::plan(tape, &base.segments);
    let plain = SegmentOptions {
        segments: Some(1),
        ..base.segments
    };
    let mut candidates: Vec<(&'static str, Mode, SegmentOptions, &crate::plan::Plan)> = vec![
        ("price", Mode::Price, base.segments, &base_plan),
        ("forward", Mode::Forward, base.segments, &base_plan),
        ("reverse", Mode::Reverse, base.segments, &base_plan),
    ];
    let plain_plan;
    if base.segments.segments.is_none()
        && base.target != Target::Cpu
        && base_plan.segments.is_checkpointed()
    {
        plain_plan = crate::passes::plan(tape, &plain);
        candidates.push(("reverse-plain", Mode::Reverse, plain, &plain_plan));
    }
    let eligible = |e: &&Estimate| {
        if model.fitted {
            e.mode != Mode::Price
        } else {
            e.kernel == "reverse"
        }
    };
    // The chosen schedule is kept for `compile` where it is the kernel's (see `Choice`).
    let reuse = base.target != Target::Cpu && base.ladder.is_none();
    let mut kept: Option<(&'static str, f64, Schedule)> = None;
    let mut estimates = Vec::new();
    for (kernel, mode, segments, plan) in candidates {
        // A kernel over the size budget is not a candidate (its schedule is not even built).
        if mode != Mode::Price && crate::budget::check(tape, mode).is_err() {
            continue;
        }
        let opts = CompileOptions {
            mode,
            segments,
            ..base.clone()
        };
        let (segments, work, schedule) = kernel_work(tape, plan, &opts);
        let past_llvm = base.target == Target::Cpu
            && crate::compile::CpuBackend::fastest() == crate::compile::CpuBackend::Llvm
            && crate::compile::CpuBackend::fastest_for(
                crate::compile::printed_nodes(tape, &opts),
                crate::compile::per_path_sums(tape, mode, 1),
            ) == crate::compile::CpuBackend::Cranelift;
        let e = Estimate {
            kernel,
            mode,
            segments,
            ns_per_path: model.ns_per_path(&work),
            work,
            past_llvm,
        };
        // The cheapest eligible schedule so far (the first of equals, as `min_by` below).
        if reuse && eligible(&&e) && kept.as_ref().is_none_or(|k| e.ns_per_path < k.1) {
            kept = Some((kernel, e.ns_per_path, schedule));
        }
        estimates.push(e);
    }
    let all_past_llvm = estimates.iter().filter(eligible).all(|e| e.past_llvm);
    let best = estimates
        .iter()
        .filter(eligible)
        .filter(|e| all_past_llvm || !e.past_llvm)
        .min_by(|a, b| a.ns_per_path.total_cmp(&b.ns_per_path));
    let Some(best) = best else {
        // Neither forward nor reverse fits the budget: the error says so (reverse's is the
        // larger count, so forward's error is the one to report).
        crate::budget::check(tape, Mode::Forward)?;
        crate::budget::check(tape, Mode::Reverse)?;
        unreachable!("a mode that fits the budget is a candidate");
    };
    let options = CompileOptions {
        mode: best.mode,
        segments: if best.kernel == "reverse-plain" {
            plain
        } else {
            base.segments
        },
        ..base.clone()
    };
    let schedule = kept.filter(|k| k.0 == best.kernel).map(|k| k.2);
    Ok(Choice {
        model,
        kernel: best.kernel,
        options,
        estimates,
        schedule,
    })
}

/// One candidate of [`fused_markets`]: M markets per kernel, its work and the estimated cost of
/// the whole ladder (`groups` launches of it, and the kernel's one compile).
#[derive(Clone, PartialEq, Debug, serde::Serialize)]
pub struct FusedEstimate {
    pub markets: u32,
    pub groups: u32,
    pub work: Work,
    /// Estimated nanoseconds per path for the whole ladder: `groups` x the kernel's ns/path.
    pub ns_per_path: f64,
    /// Estimated seconds to compile the kernel once ([`compile_seconds`]; 0 where no model).
    pub compile_s: f64,
    /// The whole ladder's estimated seconds: its paths at `ns_per_path`, plus `compile_s`.
    pub total_s: f64,
}

/// Estimated seconds LLVM takes to optimise and compile a CPU kernel of `work` (the LLVM back
/// end, O3, on the 2-core machine of BENCHMARKS.md, 2026-12-06): `0.095 + 1.90 * (S / 1e4)^1.24`
/// with S = arithmetic + adjoint + tangent statements + 8 per call, power or division (the
/// vector math each brings is inlined). Fitted on the 252-step barrier and Asian tapes fused
/// 1..6 markets and the European, 10 kernels from 0.10 to 28 s, within 27% of each measured
/// load (`nablac run TAPE --paths 1024 --ladder spot=80:120:M --markets M --json`, load time,
/// `NABLAC_CACHE_DIR=off`). Superlinear: fusing M markets costs more than M compiles of one,
/// which is what keeps a long CPU ladder from fusing whole.
pub fn compile_seconds(target: Target, backend: crate::compile::CpuBackend, work: &Work) -> f64 {
    if target != Target::Cpu || backend != crate::compile::CpuBackend::Llvm {
        // Cranelift compiles in linear time, fast next to a run; GPU compile times are not yet
        // modelled (their fusion is bounded by the spill term instead).
        return 0.0;
    }
    let s = (work.ops + work.adjoint_ops + work.tangent_ops + 8 * work.heavy) as f64;
    0.095 + 1.90 * (s / 1e4).powf(1.24)
}

/// How many markets one kernel should fuse for a ladder of `count` markets of `tape` compiled
/// with `opts` (its mode resolved; its `ladder.varying` says which inputs vary, its
/// `ladder.markets` is ignored), each run over `paths` paths: the M in 1 ..= min(count,
/// [`MAX_MARKETS`]) whose ceil(count / M) launches plus the kernel's one compile
/// ([`compile_seconds`]) cost least under the target's measured [`CostModel`], the larger M on
/// a tie. The register budget enters through the model's spill term (values beyond a GPU
/// thread's registers), so a GPU stops fusing where the fused kernel would spill more than the
/// shared draws save. Without a fitted model: the largest M that spills nothing beyond what one
/// market spills. Returns the chosen M and every candidate's estimate.
///
/// [`MAX_MARKETS`]: crate::ladder::MAX_MARKETS
pub fn fused_markets(
    tape: &Verified,
    opts: &CompileOptions,
    count: u32,
    paths: u64,
) -> Result<(u32, Vec<FusedEstimate>), CompileError> {
    check_ranges(opts)?;
    let model = CostModel::for_target(opts.target);
    let varying = opts
        .ladder
        .as_ref()
        .map_or_else(|| vec![true; tape.inputs.len()], |l| l.varying.clone());
    let top = count.clamp(1, crate::ladder::MAX_MARKETS);
    let mut estimates = Vec::new();
    for m in 1..=top {
        let spec = crate::ladder::LadderSpec {
            markets: m,
            varying: varying.clone(),
        };
        let t = crate::ladder::fuse(tape, &spec)?;
        let (_, work, _) = kernel_work(&t, &crate::passes::plan(&t, &opts.segments), opts);
        let groups = count.max(1).div_ceil(m);
        let ns_per_path = f64::from(groups) * model.ns_per_path(&work);
        let compile_s = compile_seconds(opts.target, opts.cpu_backend, &work);
        estimates.push(FusedEstimate {
            markets: m,
            groups,
            ns_per_path,
            compile_s,
            total_s: paths as f64 * ns_per_path * 1e-9 + compile_s,
            work,
        });
    }
    let best = if model.fitted {
        estimates
            .iter()
            .rev()
            .min_by(|a, b| a.total_s.total_cmp(&b.total_s))
    } else {
        let one = estimates[0].work.excess_live;
        estimates.iter().rev().find(|e| e.work.excess_live <= one)
    };
    Ok((best.map_or(1, |e| e.markets), estimates))
}

/// The segment count and work of the kernel `opts` compiles `tape` to under `plan`, and the
/// schedule they were read from.
fn kernel_work(
    tape: &Verified,
    plan: &crate::plan::Plan,
    opts: &CompileOptions,
) -> (u32, Work, Schedule) {
    let schedule = Schedule::build(tape, plan, opts.schedule_options());
    let registers = match opts.target {
        Target::Cpu => u32::MAX,
        _ => registers(opts, plan, || max_live(&schedule, tape.len())),
    };
    let work = Work::of(&schedule, tape.len(), registers);
    (schedule.segments as u32, work, schedule)
}

/// Registers a GPU thread of the kernel `opts` compiles to has for values: 255 (the most a CUDA
/// thread addresses), or what a launch-bounds hint leaves (65536 per multiprocessor shared by
/// `min_blocks` workgroups).
fn registers(
    opts: &CompileOptions,
    plan: &crate::plan::Plan,
    max_live: impl FnOnce() -> u32,
) -> u32 {
    match min_blocks(opts, plan, max_live) {
        Some(n) if n > 0 => (65536 / opts.workgroup_size.saturating_mul(n).max(1)).min(255),
        _ => 255,
    }
}

/// The choice as text for `nablac explain --mode auto`: the model, one line per candidate with
/// its estimate and work, and the chosen one marked.
pub fn choice_text(c: &Choice) -> String {
    use std::fmt::Write as _;
    // The weights are one machine's: its nanoseconds are not this host's, the ratios carry.
    let mut s = format!(
        "auto mode ({}): {}\nns/path as on the machine of the fit; the ratios to the price kernel carry to other machines better\n",
        c.model.name, c.kernel
    );
    let price = c
        .estimates
        .iter()
        .find(|e| e.mode == Mode::Price)
        .map_or(f64::NAN, |e| e.ns_per_path);
    for e in &c.estimates {
        let w = &e.work;
        let estimate = if e.ns_per_path.is_nan() {
            format!("{:>9} ns/path", "-")
        } else {
            format!(
                "{:>9.3} ns/path ({:.2}x price)",
                e.ns_per_path,
                e.ns_per_path / price
            )
        };
        let _ = writeln!(
            s,
            "{} {:<13} {estimate}  draws {} ops {} heavy {} tangent ops {} adjoint ops {} leaves {} max_live {} over registers {} spill accesses {} storage slots {}",
            if e.kernel == c.kernel { '*' } else { ' ' },
            e.kernel,
            w.draws,
            w.ops,
            w.heavy,
            w.tangent_ops,
            w.adjoint_ops,
            w.leaves,
            w.max_live,
            w.excess_live,
            w.spill_traffic,
            w.storage_slots
        );
        if e.past_llvm {
            let _ = writeln!(
                s,
                "  {:<13} past LLVM's size limits: runs on Cranelift, far slower than this \
                 estimate (auto takes it only when every kernel is)",
                ""
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::read_text;
    use crate::schedule::maxlive::spill_traffic;
    use crate::schedule::ScheduleOptions;
    use crate::verify::verify;

    fn tape(text: &str) -> Verified {
        verify(read_text(text.as_bytes()).unwrap()).unwrap()
    }

    /// `price = spot * exp(vol * z)`, two inputs, one draw.
    const SMALL: &str = "nablatape 1
%0 = input spot 100.0
%1 = input vol 0.2
%2 = normal 0
%3 = mul %1 %2
%4 = exp %3
%5 = mul %0 %4
output price = %5
";

    fn work(v: &Verified, mode: Mode) -> Work {
        let s = Schedule::plain(v, ScheduleOptions::new(mode));
        Work::of(&s, v.len(), u32::MAX)
    }

    #[test]
    fn work_is_counted_on_the_schedule() {
        let v = tape(SMALL);
        let price = work(&v, Mode::Price);
        assert_eq!(
            (price.draws, price.ops, price.heavy, price.leaves),
            (1, 3, 1, 3),
            "3 rules (mul, exp, mul), 1 call (exp), leaves value, its square, non-finite count"
        );
        assert_eq!((price.tangent_ops, price.adjoint_ops), (0, 0));
        // Forward, 2 directions: t3_vol = z (1 multiply); exp's tangent is relative, t3 itself
        // (0); t5_spot = v4 (1: a literal 1 times v4), t5_vol = t3 * v5 (1: the relative
        // tangent times the product). Leaves: the price's 3 and each Greek with its square.
        let fwd = work(&v, Mode::Forward);
        assert_eq!((fwd.tangent_ops, fwd.adjoint_ops, fwd.leaves), (3, 0, 7));
        // Reverse: d5 feeds spot and v4 (2 terms), exp feeds v3 (1), mul feeds vol (1).
        let rev = work(&v, Mode::Reverse);
        assert_eq!((rev.tangent_ops, rev.adjoint_ops, rev.leaves), (0, 4, 7));
        assert_eq!(rev.max_live, crate::passes::max_live_plain(&v));
        assert_eq!(rev.excess_live, 0);
        let tight = Work::of(
            &Schedule::plain(&v, ScheduleOptions::new(Mode::Reverse)),
            v.len(),
            1,
        );
        assert_eq!(tight.excess_live, rev.max_live - 1);
        assert_eq!(tight.register_live, 1);
        // Storage: price and forward hold only values and tangents (max_live counts both; the
        // exp's relative tangent is t3 itself, no value of its own); reverse holds its 4 values
        // (spot, z, exp, the price) and the seeded adjoint d5 when the sweep starts.
        assert_eq!((price.max_live, price.storage_slots), (3, 3));
        assert_eq!((fwd.max_live, fwd.storage_slots), (3, 3));
        assert_eq!((rev.max_live, rev.storage_slots), (4, 5));
    }

    /// On the CPU, auto mode leaves a kernel past LLVM's limits (Cranelift's, measured 40x
    /// slower than its estimate on the 10,000-step Asian's reverse kernel) for one LLVM takes:
    /// there the forward kernel, a loop, whatever the near-tie of their estimates.
    #[test]
    fn auto_mode_on_the_cpu_prefers_a_kernel_llvm_takes() {
        if crate::compile::CpuBackend::fastest() != crate::compile::CpuBackend::Llvm {
            return;
        }
        let v = crate::passes::fixtures::asian(10_000);
        let c = choose(&v, &CompileOptions::new(Target::Cpu)).unwrap();
        let past = |k: &str| {
            c.estimates
                .iter()
                .find(|e| e.kernel == k)
                .unwrap()
                .past_llvm
        };
        assert_eq!((past("forward"), past("reverse")), (false, true));
        assert_eq!(c.kernel, "forward");
        assert!(choice_text(&c).contains("past LLVM's size limits"));
        // Unrolled, both are past the limits: the model's choice stands.
        let unrolled = CompileOptions {
            loops: false,
            ..CompileOptions::new(Target::Cpu)
        };
        let c = choose(&v, &unrolled).unwrap();
        assert!(c
            .estimates
            .iter()
            .all(|e| e.past_llvm || e.mode == Mode::Price));
    }

    /// A kernel with loops does the work of its unrolled twin: the same statements run (each
    /// loop body once per iteration), so the same counts, and it holds as many values at once.
    /// (Spill traffic beyond the registers differs: a carried value's move starts a new value
    /// where the unrolled kernel keeps the old one; 611 against 365 on the 52-step barrier's
    /// forward kernel at 16 registers, 176 against 244 on the basket's.)
    #[test]
    fn loops_count_the_work_of_the_unrolled_kernel() {
        use crate::products::Product;
        for (p, steps) in [
            (Product::AsianCall, 52),
            (Product::Barrier, 52),
            (Product::Basket, 8),
        ] {
            let v = crate::passes::fixtures::product(p, Some(steps));
            for mode in [Mode::Price, Mode::Forward] {
                let plain = Schedule::plain(&v, ScheduleOptions::new(mode));
                let looped = Schedule::plain(&v, ScheduleOptions::looped(mode));
                assert!(looped.body.iter().any(|s| matches!(s, Stmt::Loop(_))));
                for registers in [u32::MAX, 16] {
                    let (a, b) = (
                        Work::of(&plain, v.len(), registers),
                        Work::of(&looped, v.len(), registers),
                    );
                    let counts = |w: &Work| {
                        (
                            w.draws,
                            w.ops,
                            w.heavy,
                            w.tangent_ops,
                            w.tangent_multiplies,
                            w.leaves,
                        )
                    };
                    assert_eq!(counts(&a), counts(&b), "{p:?} {mode:?}");
                    assert_eq!(a.max_live, b.max_live, "{p:?} {mode:?}");
                }
            }
        }
    }

    /// Spill traffic: none within the registers, never more with more registers, and for the
    /// plain reverse Asian (each forward value written once, read once in the reverse sweep)
    /// exactly a store and a load per value beyond the budget.
    #[test]
    fn spill_traffic_counts_the_loads_and_stores_of_the_fewest_spills() {
        let v = tape(SMALL);
        for mode in [Mode::Price, Mode::Forward, Mode::Reverse] {
            let s = Schedule::plain(&v, ScheduleOptions::new(mode));
            let slots = crate::schedule::maxlive::storage_slots(&s, v.len());
            assert_eq!(spill_traffic(&s, v.len(), slots), 0, "{mode:?}");
            let t: Vec<u64> = (1..=slots).map(|r| spill_traffic(&s, v.len(), r)).collect();
            assert!(t.windows(2).all(|w| w[0] >= w[1]), "{mode:?} {t:?}");
            assert!(
                t[0] > 0,
                "{mode:?}: one register cannot hold {slots} values"
            );
        }
        let o = crate::products::Options {
            steps: 252,
            ..crate::products::Options::defaults(crate::products::Product::AsianCall)
        };
        let asian = crate::products::record(
            crate::products::Product::AsianCall,
            &o,
            &crate::products::Market::default(),
        )
        .unwrap();
        let v = verify(asian).unwrap();
        let s = Schedule::plain(&v, ScheduleOptions::new(Mode::Reverse));
        let slots = crate::schedule::maxlive::storage_slots(&s, v.len());
        assert!(slots > 700, "{slots}");
        assert_eq!(spill_traffic(&s, v.len(), 255), 2 * u64::from(slots - 255));
    }

    #[test]
    fn the_choice_is_the_cheapest_estimate_and_its_options_compile_it() {
        // Without a fitted model the choice is reverse mode, and no estimate is a number.
        let unfitted = CostModel {
            fitted: false,
            ..CPU
        };
        assert!(unfitted.ns_per_path(&Work::default()).is_nan());
        for target in [Target::Cpu, Target::Cuda, Target::Opencl, Target::Glsl] {
            let c = choose(&tape(SMALL), &CompileOptions::new(target)).unwrap();
            let best = c
                .estimates
                .iter()
                .filter(|e| e.mode != Mode::Price)
                .map(|e| e.ns_per_path)
                .fold(f64::INFINITY, f64::min);
            let chosen = c.estimates.iter().find(|e| e.kernel == c.kernel).unwrap();
            assert_eq!(chosen.ns_per_path, best);
            assert_eq!(c.options.mode, chosen.mode);
            assert!(c.estimates.iter().all(|e| e.ns_per_path > 0.0), "{c:?}");
        }
    }

    /// The committed CPU model against the times it was fitted on (BENCHMARKS.md, 2026-12-07:
    /// the mean of the 16,384- and 65,536-path runs, ns per path, the built-in tapes): every
    /// estimate within 30% (issue 26, point 7), and the choice the measured fastest where the
    /// two differ by more than 5%. A change to the counting in `Work::of` that leaves the
    /// weights behind fails here: refit with `scripts/fit-cost.py` and update both.
    #[test]
    fn the_cpu_model_holds_on_the_times_it_was_fitted_on() {
        use crate::passes::fixtures::{asian, basket, european, product};
        use crate::products::Product;
        // (tape, measured price, forward, reverse, the kernel to choose where not a tie)
        let measured = [
            ("asian252", asian(252), [1155.6, 1359.7, 1355.4], None),
            ("asian64", asian(64), [301.2, 367.6, 356.0], None),
            (
                "barrier252",
                product(Product::Barrier, Some(252)),
                [1587.7, 3138.6, 2201.9],
                Some("reverse"),
            ),
            ("basket8", basket(8, 16), [619.7, 668.7, 697.5], None),
            ("european", european(), [17.2, 33.2, 34.8], None),
        ];
        for (name, tape, ns, choice) in measured {
            let c = choose(&tape, &CompileOptions::new(Target::Cpu)).unwrap();
            for (kernel, ns) in ["price", "forward", "reverse"].into_iter().zip(ns) {
                let e = c.estimates.iter().find(|e| e.kernel == kernel).unwrap();
                let off = e.ns_per_path / ns - 1.0;
                assert!(off.abs() < 0.30, "{name} {kernel}: {ns} measured, {e:?}");
            }
            if let Some(k) = choice {
                assert_eq!(c.kernel, k, "{name}: {c:?}");
            }
        }
    }

    #[test]
    fn the_fused_market_rule_fuses_a_short_spot_ladder_whole() {
        use crate::products::{record, Market, Options, Product};
        let asian = crate::verify::verify(
            record(
                Product::AsianCall,
                &Options::defaults(Product::AsianCall),
                &Market::default(),
            )
            .unwrap(),
        )
        .unwrap();
        let spot = |mode| CompileOptions {
            mode,
            ladder: Some(crate::ladder::LadderSpec {
                markets: 1,
                varying: vec![true, false, false, false, false],
            }),
            ..CompileOptions::new(Target::Cuda)
        };
        // A 7-market spot ladder of the price fits in registers fused: one launch.
        let (m, est) = fused_markets(&asian, &spot(Mode::Price), 7, 1 << 20).unwrap();
        assert_eq!(m, 7, "{est:?}");
        assert_eq!(est.len(), 7);
        assert!(est.iter().all(|e| e.groups == 7u32.div_ceil(e.markets)));
        // Shared draws: fused markets cost less per market than one launch each.
        assert!(
            est[6].ns_per_path < 7.0 * est[0].ns_per_path / 2.0,
            "{est:?}"
        );
        // The chosen M is the cheapest estimate.
        let best = est
            .iter()
            .map(|e| e.ns_per_path)
            .fold(f64::INFINITY, f64::min);
        assert_eq!(est[m as usize - 1].ns_per_path, best);
        // The CPU has no register budget; with every input varying the markets still share
        // the draws, so a 3-market ladder fuses whole.
        let all = CompileOptions {
            ladder: None,
            ..CompileOptions::new(Target::Cpu)
        };
        let (m, est) = fused_markets(&asian, &all, 3, 1 << 20).unwrap();
        assert_eq!(m, 3, "{est:?}");
    }

    /// On the CPU's LLVM back end a long ladder of a long tape fuses only as far as the
    /// superlinear compile pays: a 13-market ladder of the 252-step barrier at a million paths
    /// does not fuse whole, and its estimated compile stays near a few single compiles, not
    /// the 15 of a 13-market kernel (issue 26: a measured 126 s load against 8.7).
    #[test]
    fn a_cpu_ladder_fuses_only_as_far_as_the_compile_pays() {
        use crate::compile::CpuBackend;
        use crate::products::{record, Market, Options, Product};
        let barrier = crate::verify::verify(
            record(
                Product::Barrier,
                &Options {
                    steps: 252,
                    ..Options::defaults(Product::Barrier)
                },
                &Market::default(),
            )
            .unwrap(),
        )
        .unwrap();
        let opts = |backend| CompileOptions {
            mode: Mode::Reverse,
            cpu_backend: backend,
            ladder: Some(crate::ladder::LadderSpec {
                markets: 1,
                varying: vec![true, false, false, false, false],
            }),
            ..CompileOptions::new(Target::Cpu)
        };
        let (m, est) = fused_markets(&barrier, &opts(CpuBackend::Llvm), 13, 1_000_000).unwrap();
        assert!(m < 13, "{m}: {est:?}");
        let one = est[0].compile_s;
        assert!(one > 1.0 && one < 10.0, "{one}");
        assert!(est[12].compile_s > 13.0 * one, "superlinear: {est:?}");
        assert!(est[m as usize - 1].compile_s < 5.0 * one, "{m}: {est:?}");
        let best = est.iter().map(|e| e.total_s).fold(f64::INFINITY, f64::min);
        assert_eq!(est[m as usize - 1].total_s, best);
        // Cranelift's compile is not modelled (linear and short): the run alone decides.
        let (_, est) =
            fused_markets(&barrier, &opts(CpuBackend::Cranelift), 13, 1_000_000).unwrap();
        assert!(est.iter().all(|e| e.compile_s == 0.0));
    }
}

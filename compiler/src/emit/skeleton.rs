//! The kernel skeleton: `templates/kernel.txt`, rendered by askama around the straight-line body.
//!
//! The template holds the bindings, the path index, Philox and the draws, the reduction and the
//! epilogue for all three dialects; every spelling that differs comes from the [`Dialect`].

use super::body::Body;
use super::dialect::{real, Dialect, MathFn};
use super::manifest::{Checkpoint, Mode, Precision, Target};
use super::{EmitError, EmitOptions};
use askama::Template;

/// The template's fields (all plain text or flags).
#[derive(Template)]
#[template(path = "kernel.txt", escape = "none")]
struct Skeleton {
    version: &'static str,
    kind: String,
    tape_hash: String,
    cuda: bool,
    opencl: bool,
    glsl: bool,
    entry: &'static str,
    real: &'static str,
    uint: &'static str,
    fn_qual: &'static str,
    p: &'static str,
    local_id: &'static str,
    group_id: &'static str,
    barrier: &'static str,
    wg: usize,
    /// `, N` for `__launch_bounds__(WG, N)`, or empty.
    min_blocks: String,
    n_sums: usize,
    /// The sums in batches of at most `batch`, each batch reduced over one barrier a level.
    batches: Vec<Vec<usize>>,
    batch: usize,
    /// Doubles of the workgroup's shared array: `batch` leaves per thread.
    sh_len: usize,
    partial_index: String,
    /// A leaf past the run's paths: -0.0, the identity of + (TAPE-FORMAT.md, Results).
    padding: String,
    scratch: bool,
    opaque: bool,
    /// Exponential-family arguments go through `opq` (`passes::opaque_math_arguments`).
    opaque_exp: bool,
    /// Definitions of math functions the language lacks (`Dialect::helpers`), or empty.
    helpers: String,
    draws: bool,
    normal: bool,
    uniform: bool,
    f64: bool,
    opq_body: &'static str,
    mulhi_body: &'static str,
    u_x0: String,
    u_x1: String,
    u_x2: String,
    u_x3: String,
    half: String,
    two21: String,
    ulp: String,
    /// The uniform draw's integer parts and scale (`uniform_open`).
    v_x0: String,
    v_x1: String,
    two20: String,
    vulp: String,
    minus_two: String,
    cos_2pi: String,
    /// The square root the normal draw calls (`Dialect::draw_sqrt`).
    draw_sqrt: &'static str,
    inline_draw_sqrt: bool,
    log: &'static str,
    body: String,
}

/// The entry point's name in the source (GLSL's is always `main`).
pub(super) fn entry_point(target: Target) -> &'static str {
    match target {
        Target::Glsl => "main",
        _ => "nablac_main",
    }
}

/// What kind of kernel this is, in words (for the header comment and the manifest docs).
pub(super) fn kind(body: &Body<'_>) -> String {
    let s = body.schedule;
    match (s.mode, s.strategy) {
        (Mode::Price, _) => "price kernel".into(),
        (Mode::Forward, _) => format!("forward kernel, {} tangent directions", s.lanes),
        (Mode::Reverse, Checkpoint::Off) => "plain reverse kernel".into(),
        (Mode::Reverse, Checkpoint::Registers) => {
            format!(
                "checkpointed reverse kernel, register recompute, {} segments",
                s.segments
            )
        }
        (Mode::Reverse, Checkpoint::Scratch) => format!(
            "checkpointed reverse kernel, scratch buffer ({}), {} segments",
            body.layout.name(),
            s.segments
        ),
    }
}

/// Sums reduced together (one barrier a tree level for all of them): as many as 8 KiB of shared
/// memory holds at one f64 per thread (8 at the default workgroup of 128). One barrier a level
/// per sum made the forward kernel of the 252-step Asian (13 sums) wait at 104 barriers a
/// workgroup; 8 at a time, at 16, it ran 4% faster on an H100 (BENCHMARKS.md, 2026-12-05). 8 KiB
/// stays within every target's guaranteed local memory (Vulkan's least is 16 KiB).
fn reduction_batch(workgroup_size: u32) -> usize {
    (1024 / workgroup_size.max(1)).max(1) as usize
}

/// Renders the whole kernel source.
pub(super) fn render(body: &Body<'_>, opts: &EmitOptions) -> Result<String, EmitError> {
    let d: Dialect = body.d;
    let p = opts.precision;
    let f64 = p == Precision::F64;
    let glsl = opts.target == Target::Glsl;
    let (normal, uniform) = body.schedule.draws();
    let n_sums = body.schedule.leaf_count();
    let wg = opts.workgroup_size as usize;
    let batch = reduction_batch(opts.workgroup_size).min(n_sums.max(1));
    let batches: Vec<Vec<usize>> = (0..n_sums)
        .collect::<Vec<_>>()
        .chunks(batch)
        .map(<[usize]>::to_vec)
        .collect();
    let partial_index = if glsl {
        format!("group * {n_sums}u + ")
    } else {
        format!("({})group * {n_sums}u + ", body.index64)
    };
    let (u_x0, u_x1, u_x2, u_x3, ulp) = if f64 {
        (
            d.cast("double", "x.x"),
            d.cast("double", "x.y >> 11u"),
            d.cast("double", "x.z"),
            d.cast("double", "x.w >> 11u"),
            d.literal(2f64.powi(-53), p),
        )
    } else {
        (
            d.cast("float", "x.x >> 8u"),
            d.cast("float", "x.y >> 8u"),
            String::new(),
            String::new(),
            d.literal(2f64.powi(-24), p),
        )
    };
    let (v_x0, v_x1, vulp) = if f64 {
        (
            d.cast("double", "x.x"),
            d.cast("double", "x.y >> 12u"),
            d.literal(2f64.powi(-52), p),
        )
    } else {
        (
            d.cast("float", "x.x >> 9u"),
            String::new(),
            d.literal(2f64.powi(-23), p),
        )
    };
    let sk = Skeleton {
        version: env!("CARGO_PKG_VERSION"),
        kind: kind(body),
        tape_hash: crate::format::content_hash(body.tape),
        cuda: opts.target == Target::Cuda,
        opencl: opts.target == Target::Opencl,
        glsl,
        entry: entry_point(opts.target),
        real: real(p),
        uint: d.uint,
        fn_qual: d.fn_qual,
        p: d.param,
        local_id: d.local_id,
        group_id: d.group_id,
        barrier: d.barrier,
        wg,
        min_blocks: opts.min_blocks.map_or(String::new(), |n| format!(", {n}")),
        n_sums,
        batches,
        batch,
        sh_len: batch * wg,
        partial_index,
        padding: d.literal(-0.0, Precision::F64),
        scratch: body.schedule.strategy == Checkpoint::Scratch,
        opaque: body.schedule.uses_opaque(),
        opaque_exp: body.schedule.opaque_math,
        helpers: d.helpers(&body.math_used(), body.schedule.uses_chain_factors(), p),
        draws: normal || uniform,
        normal,
        uniform,
        f64,
        opq_body: d.opaque_body(p),
        mulhi_body: d.mulhi_body(),
        u_x0,
        u_x1,
        u_x2,
        u_x3,
        half: d.literal(0.5, p),
        two21: d.literal(2097152.0, p),
        ulp,
        v_x0,
        v_x1,
        two20: d.literal(1048576.0, p),
        vulp,
        minus_two: d.literal(-2.0, p),
        cos_2pi: d.cos_2pi(p),
        draw_sqrt: d.draw_sqrt(p),
        inline_draw_sqrt: d.inline_draw_sqrt(p),
        log: d.math(MathFn::Log, p),
        body: body.render(2),
    };
    sk.render().map_err(|e| EmitError::Render {
        template: "kernel.txt",
        message: e.to_string(),
    })
}

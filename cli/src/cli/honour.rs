//! The command line's compile options as the driver's request (`nablac::driver`), and the
//! driver's errors in the command line's words.
//!
//! No option is silently ignored: the driver refuses an option that the target, a kernel
//! compiled already, the compile mode or the rest of the checkpoint options make meaningless,
//! before anything is compiled, run or written. For that a request field is `Some` only where
//! the command line gave the flag ([`Given`]), whatever clap's default. The policy is the
//! driver's; this file only maps flags to fields and fields back to flags.

use super::{CompileOpts, Given, LayoutArg, ModeArg, PrecisionArg};
use anyhow::{bail, Result};
use nablac::driver::{DriverError, Opt, Request};
use nablac::emit::{Precision, Target};

/// The flag that sets `o`, followed by `value` where the message gives one.
pub fn flag(o: Opt, value: Option<&str>) -> String {
    let f = match o {
        Opt::WorkgroupSize => "--workgroup".to_string(),
        // The command line turns loops off; only a library or Python request turns them on.
        Opt::Loops => "--unroll".to_string(),
        o => format!("--{}", o.field().replace('_', "-")),
    };
    match value {
        Some(v) => format!("{f} {v}"),
        None => f,
    }
}

/// A driver's (or the compiler's) error with its options spelled as flags.
pub fn spelled(e: impl Into<DriverError>) -> anyhow::Error {
    let e = e.into();
    if e.names_options() {
        anyhow::anyhow!(e.spell(&flag))
    } else {
        // Keeps the error's chain of causes.
        anyhow::Error::new(e)
    }
}

/// The driver's request for `target` from the command line's compile options: a field is set
/// only where its flag was given.
pub fn request(target: Target, o: &CompileOpts, given: &Given) -> Request {
    let has = |id: &str| given.has(id);
    Request {
        target: Some(target),
        mode: match o.mode {
            ModeArg::Auto => None,
            m => Some(m.into()),
        },
        precision: o.precision.map(|p| match p {
            PrecisionArg::F32 => Precision::F32,
            PrecisionArg::F64 => Precision::F64,
        }),
        checkpoint: o.checkpoint.map(Into::into),
        segments: o.segments,
        ckpt_nodes: has("ckpt_nodes").then_some(o.ckpt_nodes),
        seg_len: o.seg_len,
        scratch_layout: has("scratch_layout").then_some(match o.scratch_layout {
            LayoutArg::Soa => nablac::emit::ScratchLayout::Soa,
            LayoutArg::Aos => nablac::emit::ScratchLayout::Aos,
        }),
        workgroup_size: has("workgroup").then_some(o.workgroup),
        annotate: has("annotate").then_some(o.annotate),
        min_blocks: o.min_blocks,
        cpu_backend: None,
        greek_stderr: has("greek_stderr").then_some(o.greek_stderr),
        markets: o.markets,
        ladder_inputs: o.ladder_inputs.clone(),
        loops: has("unroll").then_some(!o.unroll),
    }
}

/// The refusals of [`nablac::driver::check`], in the command line's words.
pub fn check(req: &Request) -> Result<()> {
    nablac::driver::check(req).map_err(spelled)
}

/// Which target a compiled kernel's file name says, by extension.
pub fn target_of_extension(path: &std::path::Path) -> Option<(Target, &'static str)> {
    match path.extension()?.to_str()? {
        "cu" => Some((Target::Cuda, ".cu")),
        "cl" => Some((Target::Opencl, ".cl")),
        "comp" => Some((Target::Glsl, ".comp")),
        "clif" => Some((Target::Cpu, ".clif")),
        "ll" => Some((Target::Cpu, ".ll")),
        _ => None,
    }
}

/// The target to compile for: `--target`, else the output's extension. A contradiction between
/// the two, or neither, is an error.
pub fn compile_target(asked: Option<Target>, out: &std::path::Path) -> Result<Target> {
    let by_name = target_of_extension(out);
    match (asked, by_name) {
        (Some(t), Some((e, ext))) if t != e => bail!(
            "--target {} contradicts the output's name {}: {ext} names a kernel for {} (name it for \
             its target: .cu cuda, .cl opencl, .comp glsl, .clif or .ll cpu)",
            t.name(),
            out.display(),
            e.name()
        ),
        (Some(t), _) => Ok(t),
        (None, Some((e, _))) => Ok(e),
        (None, None) => bail!(
            "cannot tell the target from the output's name {}: give --target, or name it .cu \
             (cuda), .cl (opencl), .comp (glsl), .clif or .ll (cpu)",
            if super::is_stdio(out) {
                "- (standard output)".to_string()
            } else {
                out.display().to_string()
            }
        ),
    }
}

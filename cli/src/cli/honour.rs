//! No option is silently ignored: an option that the target, a kernel compiled already, the
//! compile mode or the rest of the checkpoint options make meaningless is refused here, before
//! anything is compiled, run or written.
//!
//! The compiler refuses what a target cannot do at all (`--checkpoint scratch` on glsl and cpu,
//! `--min-blocks` past cuda); these are the options it would accept and then not use (the CPU
//! lowering reads only the mode and precision; a price kernel has no reverse sweep; the
//! segment count, once given, overrides `--seg-len` and `--ckpt-nodes`).

use super::{CheckpointArg, CompileOpts, Given, ModeArg, PrecisionArg};
use anyhow::{bail, Result};
use nablac::emit::{Manifest, Mode, Precision, Target};

/// The checkpoint options, as `explain` and the compiler take them.
pub struct Segmenting {
    pub checkpoint: Option<CheckpointArg>,
    pub default_checkpoint: CheckpointArg,
    pub segments: Option<u32>,
}

fn checkpoint_name(c: CheckpointArg) -> &'static str {
    match c {
        CheckpointArg::Registers => "registers",
        CheckpointArg::Scratch => "scratch",
        CheckpointArg::Off => "off",
    }
}

/// The checks shared by compiling and `explain`: options that the strategy or the segment count
/// make meaningless. `scratch_layout` is false where the command has no such option.
pub fn check_segmenting(s: &Segmenting, given: &Given) -> Result<()> {
    let strategy = s.checkpoint.unwrap_or(s.default_checkpoint);
    let segments = s.segments.filter(|_| given.has("segments"));
    if strategy == CheckpointArg::Off {
        if let Some(n) = segments.filter(|&n| n > 1) {
            bail!("--segments {n} contradicts --checkpoint off (the plain kernel has one segment)");
        }
        for (id, flag) in [("ckpt_nodes", "--ckpt-nodes"), ("seg_len", "--seg-len")] {
            if given.has(id) {
                bail!("{flag} does nothing with --checkpoint off (there is nothing to segment)");
            }
        }
    }
    if let Some(n) = segments {
        for (id, flag) in [("ckpt_nodes", "--ckpt-nodes"), ("seg_len", "--seg-len")] {
            if given.has(id) {
                bail!(
                    "{flag} does nothing with --segments {n}: it chooses the segment count only \
                     when --segments does not"
                );
            }
        }
    }
    if given.has("ckpt_nodes") && strategy == CheckpointArg::Scratch {
        bail!(
            "--ckpt-nodes does nothing with --checkpoint scratch: it is when register recompute \
             switches itself on (scratch checkpointing goes by --seg-len)"
        );
    }
    if given.has("scratch_layout") && strategy != CheckpointArg::Scratch {
        bail!(
            "--scratch-layout does nothing with --checkpoint {}: it lays out the scratch buffer \
             of --checkpoint scratch",
            checkpoint_name(strategy)
        );
    }
    Ok(())
}

/// The checkpointing options `o` asks for (a strategy other than off, more than one segment,
/// `--ckpt-nodes`, `--seg-len`, `--scratch-layout`), then the flags of `more` the command line
/// gave, as the user spelled them.
fn checkpointing_given(o: &CompileOpts, given: &Given, more: &[(&str, &str)]) -> Vec<String> {
    let mut unused: Vec<String> = Vec::new();
    if let Some(c) = o.checkpoint.filter(|&c| c != CheckpointArg::Off) {
        unused.push(format!("--checkpoint {}", checkpoint_name(c)));
    }
    if let Some(n) = o.segments.filter(|&n| n > 1) {
        unused.push(format!("--segments {n}"));
    }
    let flags = [
        ("ckpt_nodes", "--ckpt-nodes"),
        ("seg_len", "--seg-len"),
        ("scratch_layout", "--scratch-layout"),
    ];
    for &(id, flag) in flags.iter().chain(more) {
        if given.has(id) {
            unused.push(flag.to_string());
        }
    }
    unused
}

/// Were options given that only a checkpointed reverse kernel reads? (`--mode auto` then
/// compiles reverse mode rather than ignore them.)
pub fn checkpointing_asked(o: &CompileOpts, given: &Given) -> bool {
    !checkpointing_given(o, given, &[]).is_empty()
}

/// The options a compile of a tape for `target` would not use.
pub fn check_compile(target: Target, o: &CompileOpts, given: &Given) -> Result<()> {
    if target == Target::Cpu {
        let why =
            "the CPU kernel keeps a path's values in cache and reads only --mode and --precision";
        let unused = checkpointing_given(
            o,
            given,
            &[("workgroup", "--workgroup"), ("annotate", "--annotate")],
        );
        // `--checkpoint scratch` and `--min-blocks N` the compiler refuses itself, with its words.
        if let Some(first) = unused
            .into_iter()
            .find(|u| !u.starts_with("--checkpoint scratch"))
        {
            bail!("{first} is not for the cpu target: {why}");
        }
    }
    if o.mode == ModeArg::Price && given.has("greek_stderr") {
        bail!("--greek-stderr does nothing with --mode price: a price kernel has no Greeks");
    }
    if matches!(o.mode, ModeArg::Price | ModeArg::Forward) {
        let mode = Mode::from(o.mode).name();
        let unused = checkpointing_given(o, given, &[]);
        if let Some(first) = unused.first() {
            bail!(
                "{first} does nothing with --mode {mode}: a {mode} kernel has no reverse sweep to \
                 checkpoint"
            );
        }
    }
    check_segmenting(
        &Segmenting {
            checkpoint: o.checkpoint,
            default_checkpoint: if target == Target::Cpu {
                CheckpointArg::Off
            } else {
                CheckpointArg::Registers
            },
            segments: o.segments,
        },
        given,
    )
}

/// The compile options given for a kernel compiled already (`nablac run KERNEL`): a kernel's mode
/// and precision are fixed, so those options are accepted only when they state what its manifest
/// says; every other compile option is refused.
pub fn check_kernel(name: &str, m: &Manifest, o: &CompileOpts, given: &Given) -> Result<()> {
    let what = format!(
        "{name} is a kernel compiled already ({}, {}, {})",
        m.target.name(),
        m.precision.name(),
        m.mode.name()
    );
    if given.has("precision") {
        let asked = match o.precision {
            Some(PrecisionArg::F32) => Precision::F32,
            Some(PrecisionArg::F64) => Precision::F64,
            None => m.precision,
        };
        if asked != m.precision {
            bail!(
                "--precision {} cannot apply: {what}; compile its tape with --precision {} and \
                 run that",
                asked.name(),
                asked.name()
            );
        }
    }
    // `--mode auto` accepts whatever mode the kernel was compiled in.
    if given.has("mode") && o.mode != ModeArg::Auto {
        let asked: Mode = o.mode.into();
        if asked != m.mode {
            bail!(
                "--mode {} cannot apply: {what}; compile its tape with --mode {} and run that",
                asked.name(),
                asked.name()
            );
        }
    }
    if given.has("greek_stderr") && o.greek_stderr != m.greek_stderr {
        bail!(
            "--greek-stderr {} cannot apply: {what}, {} the Greeks' squares; compile its tape \
             with --greek-stderr {} and run that",
            o.greek_stderr,
            if m.greek_stderr { "with" } else { "without" },
            o.greek_stderr
        );
    }
    for (id, flag) in [
        ("checkpoint", "--checkpoint"),
        ("segments", "--segments"),
        ("ckpt_nodes", "--ckpt-nodes"),
        ("seg_len", "--seg-len"),
        ("scratch_layout", "--scratch-layout"),
        ("workgroup", "--workgroup"),
        ("annotate", "--annotate"),
        ("min_blocks", "--min-blocks"),
        ("markets", "--markets"),
        ("ladder_inputs", "--ladder-inputs"),
    ] {
        if given.has(id) {
            bail!("{flag} applies when compiling a tape, and {what}: run it without {flag}, or compile its tape with it");
        }
    }
    Ok(())
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

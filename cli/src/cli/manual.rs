//! `nablac completions SHELL` and `nablac man [SUBCOMMAND]`: generated from the parser itself
//! (`super::command()`), so they cannot disagree with `--help`. Both print on standard output,
//! to be redirected where the shell or `man` looks:
//!
//! ```text
//! nablac completions bash > ~/.local/share/bash-completion/completions/nablac
//! nablac man > ~/.local/share/man/man1/nablac.1; nablac man run > .../nablac-run.1
//! ```

use anyhow::{bail, Result};
use clap::Args;
use clap_complete::Shell;

#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    shell: Shell,
}

#[derive(Args, Debug)]
pub struct ManArgs {
    /// A subcommand's page (nablac-SUBCOMMAND(1)) instead of nablac(1).
    #[arg(value_name = "SUBCOMMAND")]
    subcommand: Option<String>,
}

pub fn completions(args: &CompletionsArgs, mut cmd: clap::Command) -> Result<()> {
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "nablac", &mut out);
    super::output::write_stdout(&out)
}

pub fn man(args: &ManArgs, mut cmd: clap::Command) -> Result<()> {
    cmd.build();
    let page = match &args.subcommand {
        None => cmd.clone(),
        Some(name) => {
            let Some(sub) = cmd
                .get_subcommands()
                .find(|s| s.get_name() == name && !matches!(name.as_str(), "help"))
            else {
                bail!(
                    "no subcommand {name}: the pages are for {}",
                    super::SUBCOMMANDS.join(", ")
                );
            };
            sub.clone()
                .display_name(format!("nablac-{name}"))
                .bin_name(format!("nablac {name}"))
        }
    };
    let source = format!("nablac {}", cmd_version());
    let mut out = Vec::new();
    clap_mangen::Man::new(page)
        .source(source)
        .render(&mut out)?;
    super::output::write_stdout(&out)
}

fn cmd_version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

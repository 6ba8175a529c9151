//! The `nablac` command line: a thin layer over the library (one options struct and `run()` per
//! subcommand). Errors print as `error: ...` with their cause chain and exit with status 1,
//! usage errors included (see `cli/mod.rs` for the conventions every subcommand follows).

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    cli::main()
}

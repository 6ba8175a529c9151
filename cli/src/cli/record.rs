//! `nablac record <product> ... -o FILE`: record a product's path as a tape.

use super::output::Staged;
use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct RecordArgs {
    /// european, european-put, asian, asian-put, barrier or basket.
    product: String,
    /// Time steps (monitoring dates for the barrier).
    #[arg(long, value_name = "N")]
    steps: Option<u32>,
    /// Assets in the basket.
    #[arg(long, value_name = "N")]
    assets: Option<u32>,
    /// Record an input at another value, e.g. --market spot=105 (repeatable).
    #[arg(long = "market", value_name = "NAME=VALUE", value_parser = super::parse_market)]
    market: Vec<(String, f64)>,
    /// Barrier level (barrier product).
    #[arg(long, value_name = "LEVEL")]
    barrier: Option<f64>,
    /// Width of the barrier's smoothing, as a fraction of the barrier level.
    #[arg(long, value_name = "W")]
    smoothing: Option<f64>,
    /// Correlation between every pair of basket assets.
    #[arg(long, value_name = "RHO")]
    rho: Option<f64>,
    /// Output file: binary for `.bin`, text for `.ntape`.
    #[arg(short, long, value_name = "FILE")]
    output: PathBuf,
}

pub fn run(args: &RecordArgs) -> Result<()> {
    let text = match args.output.extension().and_then(|e| e.to_str()) {
        Some("bin") => false,
        Some("ntape") => true,
        _ => bail!(
            "cannot tell the format of {}: name it FILE.bin (binary) or FILE.ntape (text)",
            args.output.display()
        ),
    };
    let product = nablac::products::Product::from_name(&args.product)?;
    let mut options = nablac::products::Options::defaults(product);
    if let Some(n) = args.steps {
        options.steps = n;
    }
    if let Some(n) = args.assets {
        options.assets = n;
    }
    if let Some(b) = args.barrier {
        options.barrier = b;
    }
    if let Some(w) = args.smoothing {
        options.smoothing = w;
    }
    if let Some(r) = args.rho {
        options.rho = r;
    }
    let mut market = nablac::products::Market::default();
    for (name, value) in &args.market {
        market.set(name, *value)?;
    }
    let tape = nablac::products::record(product, &options, &market)
        .with_context(|| format!("cannot record {}", args.product))?;
    let bytes = if text {
        nablac::format::write_text(&tape).into_bytes()
    } else {
        nablac::format::write_binary(&tape)
    };
    let mut out = Staged::new();
    out.write(&args.output, &bytes)?;
    out.commit()?;
    eprintln!(
        "recorded {} ({} nodes, {} inputs, {} draws) to {}",
        args.product,
        tape.len(),
        tape.inputs.len(),
        tape.n_draws,
        args.output.display()
    );
    Ok(())
}

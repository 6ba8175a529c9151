//! `nablac record <product> ... -o FILE`: record a product's path as a tape.

use super::output::Staged;
use super::{is_stdio, Given};
use anyhow::{bail, Context, Result};
use clap::builder::PossibleValue;
use clap::Args;
use nablac::products::{Market, Options, Product};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The product options of the command line: (argument id, flag), in the order help lists them.
const OPTIONS: [(&str, &str); 5] = [
    ("steps", "--steps"),
    ("barrier", "--barrier"),
    ("smoothing", "--smoothing"),
    ("assets", "--assets"),
    ("rho", "--rho"),
];

/// The options `product` reads (`nablac::products` documents which; the rest it would ignore, so
/// the command line refuses them).
fn reads(product: Product) -> &'static [&'static str] {
    match product {
        Product::EuropeanCall | Product::EuropeanPut | Product::Digital => &[],
        Product::AsianCall | Product::AsianPut => &["steps"],
        Product::Barrier => &["steps", "barrier", "smoothing"],
        Product::Basket => &["steps", "assets", "rho"],
    }
}

fn option_value(o: &Options, id: &str) -> String {
    match id {
        "steps" => o.steps.to_string(),
        "assets" => o.assets.to_string(),
        "barrier" => o.barrier.to_string(),
        "smoothing" => o.smoothing.to_string(),
        "rho" => o.rho.to_string(),
        _ => unreachable!("not a product option: {id}"),
    }
}

fn flag(id: &str) -> &'static str {
    OPTIONS
        .iter()
        .find(|(i, _)| *i == id)
        .map(|(_, f)| *f)
        .expect("a product option")
}

fn describe(p: Product) -> &'static str {
    match p {
        Product::EuropeanCall => "European call",
        Product::EuropeanPut => "European put",
        Product::Digital => "cash-or-nothing call",
        Product::AsianCall => "arithmetic Asian call",
        Product::AsianPut => "arithmetic Asian put",
        Product::Barrier => "up-and-out barrier call, smoothed",
        Product::Basket => "basket call, equal weights",
    }
}

/// `record --help`'s list of products with the options each reads and their defaults.
pub fn products_help() -> String {
    let mut s = String::from(
        "Products, the options each reads and their defaults (any other is refused):\n",
    );
    for p in Product::ALL {
        let d = Options::defaults(p);
        let opts: Vec<String> = reads(p)
            .iter()
            .map(|id| format!("{} {}", flag(id), option_value(&d, id)))
            .collect();
        let opts = if opts.is_empty() {
            "(no options)".to_string()
        } else {
            opts.join("  ")
        };
        s += &format!("  {:<13} {:<34} {opts}\n", p.name(), describe(p));
    }
    let m = Market::default();
    let market: Vec<String> = Market::NAMES
        .iter()
        .zip(m.values())
        .map(|(n, v)| format!("{n} {v}"))
        .collect();
    s += &format!(
        "Inputs are recorded at {} unless --market NAME=VALUE says otherwise.",
        market.join(", ")
    );
    s
}

/// The products with the aliases `Product::from_name` reads, for parsing, help and completions.
fn product_values() -> Vec<PossibleValue> {
    Product::ALL
        .iter()
        .map(|&p| {
            let aliases: &[&str] = match p {
                Product::EuropeanCall => &["european-call", "call"],
                Product::EuropeanPut => &["put"],
                Product::Digital => &["digital-call", "cash-or-nothing"],
                Product::AsianCall => &["asian-call"],
                Product::AsianPut => &[],
                Product::Barrier => &["barrier-call", "up-and-out"],
                Product::Basket => &["basket-call"],
            };
            PossibleValue::new(p.name())
                .aliases(aliases.iter().copied())
                .help(describe(p))
        })
        .collect()
}

#[derive(Args, Debug)]
#[command(allow_negative_numbers = true)] // --rho -0.2, --barrier -5 (then refused by its range)
pub struct RecordArgs {
    /// The product (each reads the options listed below).
    #[arg(value_name = "PRODUCT", value_parser = clap::builder::PossibleValuesParser::new(product_values()))]
    product: String,
    /// Time steps: averaging dates (asian), monitoring dates (barrier), steps (basket);
    /// 1 ..= 1,000,000.
    #[arg(long, value_name = "N")]
    steps: Option<u32>,
    /// Assets in the basket, 1 ..= 64.
    #[arg(long, value_name = "N")]
    assets: Option<u32>,
    /// Record an input at another value, e.g. --market spot=105 (repeatable).
    #[arg(long = "market", value_name = "NAME=VALUE", value_parser = super::parse_market)]
    market: Vec<(String, f64)>,
    /// Barrier level (barrier), finite and positive.
    #[arg(long, value_name = "LEVEL")]
    barrier: Option<f64>,
    /// Width of the barrier's smoothing, as a fraction of the barrier level (barrier), finite
    /// and positive.
    #[arg(long, value_name = "W")]
    smoothing: Option<f64>,
    /// Correlation between every pair of basket assets (basket), -1/(assets - 1) < RHO < 1.
    #[arg(long, value_name = "RHO")]
    rho: Option<f64>,
    /// Output file: binary for `.bin`, text for `.ntape`; `-` writes text to standard output.
    #[arg(short, long, value_name = "FILE")]
    output: PathBuf,
    /// Print JSON: product, tape, format, options, market, nodes, inputs, outputs, draws, hash.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct JsonRecord {
    product: &'static str,
    /// The file written, `-` for standard output.
    tape: String,
    /// `binary` or `text`.
    format: &'static str,
    /// The options the product read, at the values it was recorded with.
    options: BTreeMap<&'static str, serde_json::Value>,
    market: BTreeMap<&'static str, f64>,
    nodes: usize,
    inputs: Vec<String>,
    outputs: Vec<String>,
    draws: u32,
    hash: String,
}

pub fn run(args: &RecordArgs, given: &Given) -> Result<()> {
    let text = if is_stdio(&args.output) {
        true
    } else {
        match args.output.extension().and_then(|e| e.to_str()) {
            Some("bin") => false,
            Some("ntape") => true,
            _ => bail!(
                "cannot tell the format of {}: name it FILE.bin (binary) or FILE.ntape (text), or - \
                 (text on standard output)",
                args.output.display()
            ),
        }
    };
    let product = Product::from_name(&args.product)?;
    let read = reads(product);
    for (id, f) in OPTIONS {
        if given.has(id) && !read.contains(&id) {
            let takes: Vec<&str> = read.iter().map(|id| flag(id)).collect();
            bail!(
                "{f} is not an option of {}: it reads {}",
                product.name(),
                if takes.is_empty() {
                    "none (see nablac record --help)".to_string()
                } else {
                    takes.join(", ")
                }
            );
        }
    }
    let mut options = Options::defaults(product);
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
    let mut market = Market::default();
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
    let to_stdout = is_stdio(&args.output);
    if to_stdout {
        super::output::write_stdout(&bytes)?;
    } else {
        let mut out = Staged::new();
        out.write(&args.output, &bytes)?;
        out.commit()?;
    }
    if args.json {
        let j = JsonRecord {
            product: product.name(),
            tape: args.output.display().to_string(),
            format: if text { "text" } else { "binary" },
            options: read
                .iter()
                .map(|&id| {
                    let v: serde_json::Value = match id {
                        "steps" => options.steps.into(),
                        "assets" => options.assets.into(),
                        "barrier" => options.barrier.into(),
                        "smoothing" => options.smoothing.into(),
                        "rho" => options.rho.into(),
                        _ => unreachable!(),
                    };
                    (id, v)
                })
                .collect(),
            market: Market::NAMES.into_iter().zip(market.values()).collect(),
            nodes: tape.len(),
            inputs: tape.inputs.iter().map(|i| i.name.clone()).collect(),
            outputs: tape.outputs.iter().map(|o| o.name.clone()).collect(),
            draws: tape.n_draws,
            hash: nablac::format::content_hash(&tape),
        };
        super::print_report(&super::json_text(&j, to_stdout)?, to_stdout)?;
        return Ok(());
    }
    note!(
        "recorded {} ({} nodes, {} inputs, {} draws) to {}",
        product.name(),
        tape.len(),
        tape.inputs.len(),
        tape.n_draws,
        super::shown(&args.output, "<stdout>")
    );
    Ok(())
}

//! Tapes for the passes' tests, from the product recorder (`crate::products`) at the default market.
//! Random tapes come from `crate::testing::arb_tape`.

use crate::products::{record, Market, Options, Product};
use crate::verify::Verified;

/// `product` with `steps` steps (other options at their defaults), recorded at the default market.
pub fn product(product: Product, steps: Option<u32>) -> Verified {
    let mut options = Options::defaults(product);
    if let Some(steps) = steps {
        options.steps = steps;
    }
    match record(product, &options, &Market::default()) {
        Ok(tape) => crate::verify::verify(tape).expect("a recorded tape verifies"),
        Err(e) => panic!("recording {} failed: {e}", product.name()),
    }
}

/// The basket of `assets` correlated assets over `steps` steps (other options at their defaults).
pub fn basket(assets: u32, steps: u32) -> Verified {
    let options = Options {
        assets,
        steps,
        ..Options::defaults(Product::Basket)
    };
    crate::verify::verify(record(Product::Basket, &options, &Market::default()).unwrap())
        .expect("a recorded tape verifies")
}

/// The arithmetic Asian call over `steps` steps: 15 + 6·steps + 9 nodes, the reference layout.
pub fn asian(steps: u32) -> Verified {
    product(Product::AsianCall, Some(steps))
}

/// The European call: 24 nodes, one draw.
pub fn european() -> Verified {
    product(Product::EuropeanCall, None)
}

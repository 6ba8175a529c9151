//! Products recorded as tapes: European, digital, arithmetic Asian, up-and-out barrier, basket.
//!
//! Every product is a tape with the five inputs `spot, strike, vol, rate, maturity` (input indices
//! 0..4, in that order, recorded at the [`Market`] values; default 100, 100, 0.2, 0.03, 1) and one
//! output `price`: the discounted payoff of one path. The underlying follows geometric Brownian motion
//! under the risk-neutral measure, `S(t + dt) = S(t) exp((rate - vol^2/2) dt + vol sqrt(dt) Z)`, with
//! `N` equal steps `dt = maturity / N`; step `i` reads draw `i` (`normal i`), except the basket (below).
//! The discount factor is `exp(-(rate * maturity))`. Nodes are emitted exactly as listed here, in order.
//!
//! **European call / put** (`european`, `european-put`; one draw):
//!
//! ```text
//! %0..%4 inputs; %5 = mul vol vol; %6 = const 0.5; %7 = mul %6 %5; %8 = sub rate %7; %9 = mul %8 maturity;
//! %10 = sqrt maturity; %11 = mul vol %10; %12 = normal 0; %13 = mul %11 %12; %14 = add %9 %13;
//! %15 = exp %14; %16 = mul spot %15 (S_T); %17 = sub %16 strike (put: sub strike %16); %18 = const 0;
//! %19 = max %17 %18; %20 = mul rate maturity; %21 = neg %20; %22 = exp %21; %23 = mul %19 %22 = price
//! ```
//!
//! **Digital (cash-or-nothing) call** (`digital`; one draw; tape format 2): pays 1 at maturity when
//! the terminal spot exceeds the strike, discounted. The European's nodes %0..%16 (S_T), then
//!
//! ```text
//! %17 = gt %16 strike (the indicator); %18 = mul rate maturity; %19 = neg %18; %20 = exp %19;
//! %21 = mul %17 %20 = price
//! ```
//!
//! The indicator carries no derivative, so the pathwise delta and vega are 0 (the closed form's are
//! not: a pathwise estimator misses the jump); rate and maturity get the discount's.
//!
//! **Arithmetic Asian call / put** (`asian`, `asian-put`; `steps` N, default 252): `15 + 6N + 9` nodes
//! (1,536 for N = 252), the reference layout:
//!
//! ```text
//! %0..%4 inputs; %5 = mul vol vol; %6 = const 0.5; %7 = mul %6 %5; %8 = sub rate %7; %9 = const N;
//! %10 = div maturity %9 (dt); %11 = mul %8 %10 (drift); %12 = sqrt %10; %13 = mul vol %12 (vol sqrt dt);
//! %14 = const 0 (running sum).
//! step i = 0..N-1, b = 15 + 6i: %b = normal i; %b+1 = mul %13 %b; %b+2 = add %11 %b+1; %b+3 = exp %b+2;
//!   %b+4 = mul S_prev %b+3 (S_i; S_prev = %0 for i = 0); %b+5 = add Sum_prev %b+4 (Sum_prev = %14 for i = 0).
//! payoff, e = 15 + 6N: %e = const N; %e+1 = div Sum %e (average); %e+2 = sub %e+1 strike (put: sub strike
//!   %e+1); %e+3 = const 0; %e+4 = max %e+2 %e+3; %e+5 = mul rate maturity; %e+6 = neg %e+5;
//!   %e+7 = exp %e+6 (discount factor); %e+8 = mul %e+4 %e+7 = price.
//! ```
//!
//! **Up-and-out barrier call** (`barrier`; `steps` N, default 52; `barrier` B, default 120;
//! `smoothing` h, default 0.01): monitored at the end of every step (dates i T / N, i = 1..N, maturity
//! included). Knock-out is smoothed so that pathwise Greeks exist: the survival weight at a date is the
//! logistic step
//!
//! ```text
//! w(S) = 1 / (1 + exp(min((S - B) / (h B), 40)))
//! ```
//!
//! (w = 1/2 at the barrier, e^-1 / (1 + e^-1) ~ 0.27 one width `h B` above it, ~ 0.73 one width below;
//! the clamp at 40 keeps `exp` finite for any spot and changes the weight by less than 5e-18). The path's
//! weight is the product of its N date weights, and `price = W * max(S_T - K, 0) * exp(-(rate maturity))`.
//! As h -> 0 this tends to the discretely monitored up-and-out call. B and h are constants (no Greek).
//! Layout: the preamble %0..%14 as the Asian's, except %14 is `const 1` (the running weight); then
//! constants `B`, `1 / (h B)`, `40`, `1` once; per step: the Asian's five spot nodes, then `sub S_i B`,
//! `mul . 1/(hB)`, `min . 40`, `exp`, `add 1 .`, `div 1 .`, `mul W_prev .` (12 nodes); then the
//! European's payoff on S_T (`sub`, `const 0`, `max`, discount `mul neg exp`, `mul`) and `mul W .`
//! (8 nodes): `15 + 4 + 12N + 8` nodes in all (651 for N = 52).
//!
//! **Basket call** (`basket`; `assets` n, default 3; `rho`, default 0.5; `steps` N, default 1): n assets,
//! each starting at the common input `spot` with the common input `vol`, equally weighted: payoff
//! `max((1/n) sum_j S_j(T) - K, 0)` discounted. Design choice: the inputs stay the five market names, so
//! `delta` and `vega` are the basket's parallel delta and vega (the Greeks of one common spot and vol)
//! and the [`Market`] and CLI need no per-asset names. Correlation is constant, `corr(j, k) = rho`: the
//! Cholesky factor L of that matrix is computed in f64 when recording and enters the tape as constants
//! (one `const` node per nonzero entry, per use). At step s, asset j's shock is
//! `sum_{k <= j} L[j][k] * normal (s n + k)`, so draw `s n + k` is factor k of step s. Valid rho:
//! `-1/(n-1) < rho < 1` (positive definite).
//!
//! Options that a product does not read are ignored (`steps` for the European, `assets` and `rho` for
//! all but the basket, `barrier` and `smoothing` for all but the barrier).

use crate::record::{RecordError, Recorder, Var};
use crate::tape::Tape;

/// Why a product could not be recorded.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProductError {
    #[error("unknown product {0:?}: expected one of european, european-put, digital, asian, asian-put, barrier, basket")]
    UnknownProduct(String),
    #[error("unknown market parameter {0:?}: expected one of spot, strike, vol, rate, maturity")]
    UnknownMarket(String),
    #[error("market parameter {name} = {value} is not finite")]
    NonFiniteMarket { name: String, value: f64 },
    #[error("option {name} = {value}: {why}")]
    BadOption {
        name: &'static str,
        value: String,
        why: String,
    },
    #[error(transparent)]
    Record(#[from] RecordError),
}

/// One set of input values: the values the tape's five inputs are recorded at.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Market {
    pub spot: f64,
    pub strike: f64,
    pub vol: f64,
    pub rate: f64,
    pub maturity: f64,
}

impl Default for Market {
    /// spot 100, strike 100, vol 0.2, rate 0.03, maturity 1.
    fn default() -> Self {
        Market {
            spot: 100.0,
            strike: 100.0,
            vol: 0.2,
            rate: 0.03,
            maturity: 1.0,
        }
    }
}

impl Market {
    /// The input names, in input-index order.
    pub const NAMES: [&'static str; 5] = ["spot", "strike", "vol", "rate", "maturity"];

    /// Sets the parameter called `name` (one of [`Market::NAMES`]) to a finite `value`.
    pub fn set(&mut self, name: &str, value: f64) -> Result<(), ProductError> {
        let slot = match name {
            "spot" => &mut self.spot,
            "strike" => &mut self.strike,
            "vol" => &mut self.vol,
            "rate" => &mut self.rate,
            "maturity" => &mut self.maturity,
            _ => return Err(ProductError::UnknownMarket(name.to_string())),
        };
        if !value.is_finite() {
            return Err(ProductError::NonFiniteMarket {
                name: name.to_string(),
                value,
            });
        }
        *slot = value;
        Ok(())
    }

    /// The values in input-index order (spot, strike, vol, rate, maturity).
    pub fn values(&self) -> [f64; 5] {
        [self.spot, self.strike, self.vol, self.rate, self.maturity]
    }
}

/// The products nablac can record.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Product {
    EuropeanCall,
    EuropeanPut,
    Digital,
    AsianCall,
    AsianPut,
    Barrier,
    Basket,
}

impl Product {
    /// Every product, in the order listed to users.
    pub const ALL: [Product; 7] = [
        Product::EuropeanCall,
        Product::EuropeanPut,
        Product::Digital,
        Product::AsianCall,
        Product::AsianPut,
        Product::Barrier,
        Product::Basket,
    ];

    /// The product's canonical name (what `from_name` reads back).
    pub fn name(self) -> &'static str {
        match self {
            Product::EuropeanCall => "european",
            Product::EuropeanPut => "european-put",
            Product::Digital => "digital",
            Product::AsianCall => "asian",
            Product::AsianPut => "asian-put",
            Product::Barrier => "barrier",
            Product::Basket => "basket",
        }
    }

    /// The product called `name`: a canonical name, or `european-call`, `call`, `put`,
    /// `digital-call`, `cash-or-nothing`, `asian-call`, `barrier-call`, `up-and-out`, `basket-call`.
    pub fn from_name(name: &str) -> Result<Product, ProductError> {
        Ok(match name {
            "european" | "european-call" | "call" => Product::EuropeanCall,
            "european-put" | "put" => Product::EuropeanPut,
            "digital" | "digital-call" | "cash-or-nothing" => Product::Digital,
            "asian" | "asian-call" => Product::AsianCall,
            "asian-put" => Product::AsianPut,
            "barrier" | "barrier-call" | "up-and-out" => Product::Barrier,
            "basket" | "basket-call" => Product::Basket,
            _ => return Err(ProductError::UnknownProduct(name.to_string())),
        })
    }
}

/// The shape of a product: time steps, basket size, barrier level and smoothing, correlation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Options {
    /// Equal time steps (Asian averaging dates, barrier monitoring dates, basket steps), 1..=1,000,000.
    pub steps: u32,
    /// Basket assets, 1..=64.
    pub assets: u32,
    /// Barrier level (absolute, same units as spot), finite and > 0.
    pub barrier: f64,
    /// Barrier smoothing width relative to the barrier level, finite and > 0.
    pub smoothing: f64,
    /// Basket pairwise correlation, in (-1/(assets-1), 1).
    pub rho: f64,
}

/// The most time steps a product may have.
pub const MAX_STEPS: u32 = 1_000_000;
/// The most basket assets.
pub const MAX_ASSETS: u32 = 64;

impl Options {
    /// The defaults of `product`: steps 1 (European, basket), 252 (Asian), 52 (barrier); assets 3;
    /// barrier 120; smoothing 0.01; rho 0.5.
    pub fn defaults(product: Product) -> Options {
        let steps = match product {
            Product::AsianCall | Product::AsianPut => 252,
            Product::Barrier => 52,
            Product::EuropeanCall | Product::EuropeanPut | Product::Digital | Product::Basket => 1,
        };
        Options {
            steps,
            assets: 3,
            barrier: 120.0,
            smoothing: 0.01,
            rho: 0.5,
        }
    }
}

fn bad(name: &'static str, value: impl ToString, why: &str) -> ProductError {
    ProductError::BadOption {
        name,
        value: value.to_string(),
        why: why.to_string(),
    }
}

/// Records `product` with `options` at the input values of `market`; the tape is well-formed.
pub fn record(product: Product, options: &Options, market: &Market) -> Result<Tape, ProductError> {
    let o = options;
    if o.steps == 0 || o.steps > MAX_STEPS {
        return Err(bad("steps", o.steps, "must be between 1 and 1000000"));
    }
    let rec = Recorder::new();
    let m = Inputs::record(&rec, market)?;
    let price = match product {
        Product::EuropeanCall => european(&rec, &m, true),
        Product::EuropeanPut => european(&rec, &m, false),
        Product::Digital => digital(&rec, &m),
        Product::AsianCall => asian(&rec, &m, o.steps, true),
        Product::AsianPut => asian(&rec, &m, o.steps, false),
        Product::Barrier => {
            if !(o.barrier.is_finite() && o.barrier > 0.0) {
                return Err(bad("barrier", o.barrier, "must be finite and positive"));
            }
            if !(o.smoothing.is_finite()
                && o.smoothing > 0.0
                && (o.smoothing * o.barrier).is_normal())
            {
                return Err(bad("smoothing", o.smoothing, "must be finite and positive"));
            }
            barrier(&rec, &m, o.steps, o.barrier, o.smoothing)
        }
        Product::Basket => {
            if o.assets == 0 || o.assets > MAX_ASSETS {
                return Err(bad("assets", o.assets, "must be between 1 and 64"));
            }
            if u64::from(o.assets) * u64::from(o.steps) > u64::from(MAX_STEPS) {
                return Err(bad(
                    "steps",
                    o.steps,
                    "assets * steps must be at most 1000000",
                ));
            }
            let l = cholesky_constant(o.assets as usize, o.rho).ok_or_else(|| {
                bad(
                    "rho",
                    o.rho,
                    "the correlation matrix must be positive definite: -1/(assets-1) < rho < 1",
                )
            })?;
            basket(&rec, &m, o.steps, &l)
        }
    };
    rec.output("price", &price)?;
    Ok(rec.finish()?)
}

struct Inputs {
    spot: Var,
    strike: Var,
    vol: Var,
    rate: Var,
    maturity: Var,
}

impl Inputs {
    fn record(rec: &Recorder, m: &Market) -> Result<Inputs, ProductError> {
        let [spot, strike, vol, rate, maturity] = m.values();
        for (name, v) in Market::NAMES.iter().zip(m.values()) {
            if !v.is_finite() {
                return Err(ProductError::NonFiniteMarket {
                    name: name.to_string(),
                    value: v,
                });
            }
        }
        Ok(Inputs {
            spot: rec.input("spot", spot)?,
            strike: rec.input("strike", strike)?,
            vol: rec.input("vol", vol)?,
            rate: rec.input("rate", rate)?,
            maturity: rec.input("maturity", maturity)?,
        })
    }

    /// rate - 0.5 * vol * vol (nodes: mul vol vol; const 0.5; mul; sub).
    fn mu(&self, rec: &Recorder) -> Var {
        let v2 = &self.vol * &self.vol;
        let half = rec.constant(0.5);
        &self.rate - &half * &v2
    }

    /// (drift, vol sqrt(dt)) of one of `steps` equal steps: the Asian preamble %5..%13.
    fn step(&self, rec: &Recorder, steps: u32) -> (Var, Var) {
        let mu = self.mu(rec);
        let n = rec.constant(f64::from(steps));
        let dt = &self.maturity / &n;
        let drift = &mu * &dt;
        let vsdt = &self.vol * dt.sqrt();
        (drift, vsdt)
    }

    /// exp(-(rate * maturity)).
    fn discount(&self) -> Var {
        (-(&self.rate * &self.maturity)).exp()
    }

    /// max(x - strike, 0) * discount (call) or max(strike - x, 0) * discount (put).
    fn payoff(&self, rec: &Recorder, x: &Var, call: bool) -> Var {
        let intrinsic = if call {
            x - &self.strike
        } else {
            &self.strike - x
        };
        let zero = rec.constant(0.0);
        let pos = intrinsic.max(&zero);
        pos * self.discount()
    }
}

fn european(rec: &Recorder, m: &Inputs, call: bool) -> Var {
    let drift = m.mu(rec) * &m.maturity;
    let vst = &m.vol * m.maturity.sqrt();
    let z = rec.normal(0);
    let st = &m.spot * (drift + vst * z).exp();
    m.payoff(rec, &st, call)
}

fn digital(rec: &Recorder, m: &Inputs) -> Var {
    let drift = m.mu(rec) * &m.maturity;
    let vst = &m.vol * m.maturity.sqrt();
    let z = rec.normal(0);
    let st = &m.spot * (drift + vst * z).exp();
    let pays = st.gt(&m.strike);
    let discount = (-(&m.rate * &m.maturity)).exp();
    pays * discount
}

fn asian(rec: &Recorder, m: &Inputs, steps: u32, call: bool) -> Var {
    let (drift, vsdt) = m.step(rec, steps);
    let mut sum = rec.constant(0.0);
    let mut s = m.spot.clone();
    for i in 0..steps {
        let z = rec.normal(i);
        s = &s * (&drift + &vsdt * &z).exp();
        sum = &sum + &s;
    }
    let n = rec.constant(f64::from(steps));
    let average = sum / n;
    m.payoff(rec, &average, call)
}

fn barrier(rec: &Recorder, m: &Inputs, steps: u32, level: f64, smoothing: f64) -> Var {
    let (drift, vsdt) = m.step(rec, steps);
    let mut weight = rec.constant(1.0);
    let b = rec.constant(level);
    let inv_width = rec.constant(1.0 / (smoothing * level));
    let clamp = rec.constant(40.0);
    let one = rec.constant(1.0);
    let mut s = m.spot.clone();
    for i in 0..steps {
        let z = rec.normal(i);
        s = &s * (&drift + &vsdt * &z).exp();
        let x = ((&s - &b) * &inv_width).min(&clamp);
        let w = &one / (&one + x.exp());
        weight = &weight * &w;
    }
    let vanilla = m.payoff(rec, &s, true);
    weight * vanilla
}

/// The lower Cholesky factor of the n x n matrix with unit diagonal and `rho` elsewhere, or None if
/// that matrix is not positive definite (or rho is not finite).
pub fn cholesky_constant(n: usize, rho: f64) -> Option<Vec<Vec<f64>>> {
    if !rho.is_finite() {
        return None;
    }
    let c = |i: usize, j: usize| if i == j { 1.0 } else { rho };
    let mut l = vec![vec![0.0f64; n]; n];
    for i in 0..n {
        for j in 0..=i {
            let s: f64 = (0..j).map(|k| l[i][k] * l[j][k]).sum();
            if i == j {
                let d = c(i, i) - s;
                if d.is_nan() || d <= 1e-12 {
                    return None;
                }
                l[i][j] = d.sqrt();
            } else {
                l[i][j] = (c(i, j) - s) / l[j][j];
            }
        }
    }
    Some(l)
}

fn basket(rec: &Recorder, m: &Inputs, steps: u32, l: &[Vec<f64>]) -> Var {
    let n = l.len();
    let (drift, vsdt) = m.step(rec, steps);
    let mut s: Vec<Var> = vec![m.spot.clone(); n];
    for step in 0..steps {
        let z: Vec<Var> = (0..n)
            .map(|k| rec.normal(step * n as u32 + k as u32))
            .collect();
        for (j, row) in l.iter().enumerate() {
            let mut shock: Option<Var> = None;
            for (k, &ljk) in row.iter().enumerate().take(j + 1) {
                if ljk == 0.0 {
                    continue;
                }
                let term = rec.constant(ljk) * &z[k];
                shock = Some(match shock {
                    None => term,
                    Some(acc) => acc + term,
                });
            }
            // Row j of a positive definite factor has L[j][j] > 0, so the shock always exists.
            let shock = shock.unwrap_or_else(|| rec.constant(0.0));
            s[j] = &s[j] * (&drift + &vsdt * shock).exp();
        }
    }
    let mut total = s[0].clone();
    for sj in &s[1..] {
        total = total + sj;
    }
    let average = total / rec.constant(n as f64);
    m.payoff(rec, &average, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::{evaluate, evaluate_path};
    use crate::tape::{BinaryOp, DrawKind, Node, NodeId, Op, UnaryOp};
    use crate::testing::verified;
    use crate::verify::Verified;

    fn tape(p: Product) -> Verified {
        verified(&record(p, &Options::defaults(p), &Market::default()).unwrap())
    }

    fn bin(op: BinaryOp, a: u32, b: u32) -> Node {
        Node::Binary(op, NodeId(a), NodeId(b))
    }

    fn un(op: UnaryOp, a: u32) -> Node {
        Node::Unary(op, NodeId(a))
    }

    #[test]
    fn asian_252_is_the_reference_layout() {
        use BinaryOp::*;
        let t = tape(Product::AsianCall);
        assert_eq!(t.len(), 1536);
        assert_eq!(t.len(), 15 + 6 * 252 + 9);
        assert_eq!(t.n_draws, 252);
        let names: Vec<&str> = t.inputs.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, Market::NAMES);
        assert_eq!(
            t.inputs.iter().map(|i| i.value).collect::<Vec<_>>(),
            [100.0, 100.0, 0.2, 0.03, 1.0]
        );
        assert_eq!(t.consts, [0.5, 252.0, 0.0]);
        let pre = [
            Node::Input(0),
            Node::Input(1),
            Node::Input(2),
            Node::Input(3),
            Node::Input(4),
            bin(Mul, 2, 2),
            Node::Const(0),
            bin(Mul, 6, 5),
            bin(Sub, 3, 7),
            Node::Const(1),
            bin(Div, 4, 9),
            bin(Mul, 8, 10),
            un(UnaryOp::Sqrt, 10),
            bin(Mul, 2, 12),
            Node::Const(2),
        ];
        assert_eq!(t.nodes[..15], pre);
        for i in 0..252u32 {
            let b = 15 + 6 * i;
            let (prev_s, prev_sum) = if i == 0 { (0, 14) } else { (b - 2, b - 1) };
            let step = [
                Node::Draw(DrawKind::Normal, i),
                bin(Mul, 13, b),
                bin(Add, 11, b + 1),
                un(UnaryOp::Exp, b + 2),
                bin(Mul, prev_s, b + 3),
                bin(Add, prev_sum, b + 4),
            ];
            assert_eq!(t.nodes[b as usize..b as usize + 6], step, "step {i}");
        }
        assert_eq!(t.nodes[15], Node::Draw(DrawKind::Normal, 0));
        assert_eq!(t.nodes[18].op(), Op::Exp);
        let e = 15 + 6 * 252;
        let payoff = [
            Node::Const(1),
            bin(Div, e - 1, e),
            bin(Sub, e + 1, 1),
            Node::Const(2),
            bin(Max, e + 2, e + 3),
            bin(Mul, 3, 4),
            un(UnaryOp::Neg, e + 5),
            un(UnaryOp::Exp, e + 6),
            bin(Mul, e + 4, e + 7),
        ];
        assert_eq!(t.nodes[e as usize..], payoff);
        assert_eq!(t.outputs.len(), 1);
        assert_eq!(
            (t.outputs[0].name.as_str(), t.outputs[0].node),
            ("price", NodeId(1535))
        );

        let put = tape(Product::AsianPut);
        assert_eq!(put.len(), 1536);
        assert_eq!(put.nodes[e as usize + 2], bin(Sub, 1, e + 1));
        assert_eq!(put.nodes[..e as usize + 2], t.nodes[..e as usize + 2]);
        let short = record(
            Product::AsianCall,
            &Options {
                steps: 4,
                ..Options::defaults(Product::AsianCall)
            },
            &Market::default(),
        )
        .unwrap();
        assert_eq!(short.len(), 15 + 24 + 9);
        assert_eq!(short.consts, [0.5, 4.0, 0.0]);
    }

    #[test]
    fn european_layout() {
        use BinaryOp::*;
        let t = tape(Product::EuropeanCall);
        assert_eq!(t.len(), 24);
        assert_eq!(t.n_draws, 1);
        assert_eq!(t.nodes[12], Node::Draw(DrawKind::Normal, 0));
        assert_eq!(t.nodes[16], bin(Mul, 0, 15));
        assert_eq!(t.nodes[17], bin(Sub, 16, 1));
        assert_eq!(t.nodes[19], bin(Max, 17, 18));
        assert_eq!(t.nodes[23], bin(Mul, 19, 22));
        let p = tape(Product::EuropeanPut);
        assert_eq!(p.nodes[17], bin(Sub, 1, 16));
    }

    #[test]
    fn digital_layout_and_closed_form() {
        use BinaryOp::*;
        let t = tape(Product::Digital);
        assert_eq!(t.len(), 22);
        assert_eq!(t.format(), 2);
        assert_eq!(t.nodes[16], bin(Mul, 0, 15));
        assert_eq!(t.nodes[17], bin(Gt, 16, 1));
        assert_eq!(t.nodes[21], bin(Mul, 17, 20));
        // exp(-rT) N(d2) within 4 standard errors; the pathwise delta and vega are 0 (the
        // indicator has no derivative) and rho is -T * price, path by path.
        let m = Market::default();
        let paths = 200_000u64;
        let rep = evaluate(&verified(&t), &m.values(), 7, paths).unwrap();
        let o = &rep.outputs[0];
        let exact = crate::closed_form::digital_call(&m);
        assert!((exact - 0.504572).abs() < 1e-6, "closed form {exact}");
        assert!(
            (o.value - exact).abs() < 4.0 * o.stderr,
            "{} ± {} vs {exact}",
            o.value,
            o.stderr
        );
        assert_eq!(o.greeks[0].1, 0.0);
        assert_eq!(o.greeks[2].1, 0.0);
        assert!((o.greeks[3].1 + m.maturity * o.value).abs() < 1e-12);
    }

    #[test]
    fn barrier_and_basket_shapes() {
        let t = tape(Product::Barrier);
        assert_eq!(t.len(), 15 + 4 + 12 * 52 + 8);
        assert_eq!(t.len(), 651);
        assert_eq!(t.n_draws, 52);
        assert_eq!(t.consts, [0.5, 52.0, 1.0, 120.0, 1.0 / 1.2, 40.0, 0.0]);
        let b = tape(Product::Basket);
        assert_eq!(b.n_draws, 3);
        let l = cholesky_constant(3, 0.5).unwrap();
        // L L^T reproduces the correlation matrix.
        for i in 0..3 {
            for j in 0..3 {
                let c: f64 = (0..3).map(|k| l[i][k] * l[j][k]).sum();
                assert!((c - if i == j { 1.0 } else { 0.5 }).abs() < 1e-15);
            }
        }
        assert_eq!(l[0], [1.0, 0.0, 0.0]);
        assert!(cholesky_constant(3, -0.5).is_none());
        assert!(cholesky_constant(3, 1.0).is_none());
        assert!(cholesky_constant(3, -0.49).is_some());
        assert!(cholesky_constant(1, 0.99).is_some());
        let b2 = record(
            Product::Basket,
            &Options {
                steps: 2,
                assets: 5,
                ..Options::defaults(Product::Basket)
            },
            &Market::default(),
        )
        .unwrap();
        assert_eq!(b2.n_draws, 10);
        // Every tape is well-formed: arguments point backwards, n_draws is exact.
        for p in Product::ALL {
            let t = tape(p);
            assert_eq!(t.n_draws, t.draws_used(), "{}", p.name());
            for (i, n) in t.nodes.iter().enumerate() {
                assert!(n.args().all(|a| a.index() < i));
            }
            assert_eq!(Product::from_name(p.name()), Ok(p));
            // Canonical const pool: distinct bit patterns, in order of first use, every entry used.
            let mut first_use: Vec<u32> = Vec::new();
            for n in &t.nodes {
                if let Node::Const(k) = *n {
                    if !first_use.contains(&k) {
                        first_use.push(k);
                    }
                }
            }
            assert_eq!(first_use, (0..t.consts.len() as u32).collect::<Vec<_>>());
            let mut bits: Vec<u64> = t.consts.iter().map(|c| c.to_bits()).collect();
            bits.sort_unstable();
            bits.dedup();
            assert_eq!(bits.len(), t.consts.len());
            // Inputs: node i is input i for the five market inputs, and nowhere else.
            let inputs: Vec<usize> = (0..t.len())
                .filter(|&i| t.nodes[i].op() == Op::Input)
                .collect();
            assert_eq!(inputs, [0, 1, 2, 3, 4]);
        }
    }

    #[test]
    fn names_options_and_market_errors() {
        assert_eq!(Product::from_name("call"), Ok(Product::EuropeanCall));
        assert_eq!(Product::from_name("put"), Ok(Product::EuropeanPut));
        assert_eq!(Product::from_name("asian-call"), Ok(Product::AsianCall));
        assert_eq!(
            Product::from_name("lookback"),
            Err(ProductError::UnknownProduct("lookback".into()))
        );
        let mut m = Market::default();
        m.set("vol", 0.3).unwrap();
        assert_eq!(m.vol, 0.3);
        assert_eq!(
            m.set("volatility", 0.3),
            Err(ProductError::UnknownMarket("volatility".into()))
        );
        assert!(matches!(
            m.set("spot", f64::NAN),
            Err(ProductError::NonFiniteMarket { .. })
        ));
        assert_eq!(m.spot, 100.0);
        let d = Options::defaults(Product::Basket);
        let err = |p: Product, o: Options| record(p, &o, &Market::default()).unwrap_err();
        assert!(matches!(
            err(Product::AsianCall, Options { steps: 0, ..d }),
            ProductError::BadOption { name: "steps", .. }
        ));
        assert!(matches!(
            err(Product::Basket, Options { assets: 0, ..d }),
            ProductError::BadOption { name: "assets", .. }
        ));
        assert!(matches!(
            err(Product::Basket, Options { rho: 1.0, ..d }),
            ProductError::BadOption { name: "rho", .. }
        ));
        assert!(matches!(
            err(Product::Barrier, Options { barrier: -1.0, ..d }),
            ProductError::BadOption {
                name: "barrier",
                ..
            }
        ));
        assert!(matches!(
            err(
                Product::Barrier,
                Options {
                    smoothing: 0.0,
                    ..d
                }
            ),
            ProductError::BadOption {
                name: "smoothing",
                ..
            }
        ));
        let bad_market = Market {
            rate: f64::INFINITY,
            ..Market::default()
        };
        assert!(matches!(
            record(Product::EuropeanCall, &d, &bad_market),
            Err(ProductError::NonFiniteMarket { .. })
        ));
        assert_eq!(
            err(Product::Basket, Options { rho: 1.0, ..d }).to_string(),
            "option rho = 1: the correlation matrix must be positive definite: -1/(assets-1) < rho < 1"
        );
    }

    #[test]
    fn european_matches_black_scholes() {
        let m = Market::default();
        let t = tape(Product::EuropeanCall);
        let x = m.values();
        let paths = 200_000u64;
        let (mut s, mut s2) = ([0.0f64; 3], [0.0f64; 3]);
        for p in 0..paths {
            let r = evaluate_path(&verified(&t), &x, 11, p).unwrap();
            for (k, v) in [r.outputs[0], r.greeks[0][0], r.greeks[0][2]]
                .into_iter()
                .enumerate()
            {
                s[k] += v;
                s2[k] += v * v;
            }
        }
        let n = paths as f64;
        let bs = crate::closed_form::black_scholes(true, &m);
        let (price, delta, vega) = (bs.price, bs.greeks[0], bs.greeks[2]);
        assert!((price - 9.4134).abs() < 1e-3, "closed form {price}");
        let rep = evaluate(&verified(&t), &x, 11, paths).unwrap();
        let o = &rep.outputs[0];
        for (k, (name, exact)) in [("price", price), ("delta", delta), ("vega", vega)]
            .into_iter()
            .enumerate()
        {
            let mean = s[k] / n;
            let se = ((s2[k] / n - mean * mean) * n / (n - 1.0)).sqrt() / n.sqrt();
            let got = match k {
                0 => o.value,
                1 => o.greeks[0].1,
                _ => o.greeks[2].1,
            };
            assert!(
                (got - mean).abs() < 1e-9 * (1.0 + mean.abs()),
                "{name}: report {got} vs mean {mean}"
            );
            assert!(
                (got - exact).abs() < 4.0 * se,
                "{name}: {got} vs Black-Scholes {exact} (se {se})"
            );
            if k == 0 {
                assert!((o.stderr - se).abs() < 1e-6 * se);
            }
        }
    }

    /// The reference Greeks equal central bump-and-revalue differences of the reference price with the
    /// same seed and paths (the same draws), input by input. Smooth parts agree to ~1e-10 relative;
    /// a path whose payoff kink falls inside the bump adds up to ~1/paths (seen: 2.7e-5 for the
    /// 4-asset basket), hence the 1e-4 tolerance.
    fn check_greeks_by_bumping(p: Product, o: &Options, paths: u64, rel_tol: f64) {
        let t = record(p, o, &Market::default()).unwrap();
        let x = Market::default().values();
        let rep = evaluate(&verified(&t), &x, 5, paths).unwrap();
        let out = &rep.outputs[0];
        assert!(out.value > 0.0, "{}: price {}", p.name(), out.value);
        for i in 0..5 {
            let h = 1e-5 * x[i].abs().max(0.1);
            let mut up = x;
            up[i] += h;
            let mut dn = x;
            dn[i] -= h;
            let vu = evaluate(&verified(&t), &up, 5, paths).unwrap().outputs[0].value;
            let vd = evaluate(&verified(&t), &dn, 5, paths).unwrap().outputs[0].value;
            let fd = (vu - vd) / (2.0 * h);
            let g = out.greeks[i].1;
            assert_eq!(out.greeks[i].0, Market::NAMES[i]);
            assert!(
                (g - fd).abs() <= rel_tol * (g.abs() + 1e-3 * out.value.abs()),
                "{} d/d{}: adjoint {g} vs bump {fd}",
                p.name(),
                Market::NAMES[i]
            );
        }
    }

    #[test]
    fn european_greeks_match_bumping() {
        for p in [Product::EuropeanCall, Product::EuropeanPut] {
            check_greeks_by_bumping(p, &Options::defaults(p), 20_000, 1e-4);
        }
    }

    #[test]
    fn asian_greeks_match_bumping() {
        for p in [Product::AsianCall, Product::AsianPut] {
            check_greeks_by_bumping(p, &Options::defaults(p), 1_000, 1e-4);
        }
    }

    #[test]
    fn barrier_greeks_match_bumping() {
        let o = Options::defaults(Product::Barrier);
        check_greeks_by_bumping(Product::Barrier, &o, 4_000, 1e-4);
        // A wider smoothing, and fewer dates.
        check_greeks_by_bumping(
            Product::Barrier,
            &Options {
                smoothing: 0.05,
                steps: 12,
                ..o
            },
            4_000,
            1e-4,
        );
    }

    #[test]
    fn basket_greeks_match_bumping() {
        let o = Options::defaults(Product::Basket);
        check_greeks_by_bumping(Product::Basket, &o, 10_000, 1e-4);
        check_greeks_by_bumping(
            Product::Basket,
            &Options {
                assets: 4,
                steps: 3,
                rho: -0.2,
                ..o
            },
            4_000,
            1e-4,
        );
    }

    #[test]
    fn barrier_price_is_below_the_vanilla_and_tends_to_it_far_away() {
        let m = Market::default();
        let x = m.values();
        let vanilla = evaluate(&tape(Product::EuropeanCall), &x, 1, 20_000)
            .unwrap()
            .outputs[0]
            .value;
        let o = Options::defaults(Product::Barrier);
        let knocked = evaluate(
            &verified(&record(Product::Barrier, &o, &m).unwrap()),
            &x,
            1,
            20_000,
        )
        .unwrap()
        .outputs[0]
            .value;
        let far = Options { barrier: 1e4, ..o };
        let untouched = evaluate(
            &verified(&record(Product::Barrier, &far, &m).unwrap()),
            &x,
            1,
            20_000,
        )
        .unwrap()
        .outputs[0]
            .value;
        assert!(
            knocked > 0.5 && knocked < 0.5 * vanilla,
            "barrier {knocked} vs vanilla {vanilla}"
        );
        assert!(
            (untouched - vanilla).abs() < 0.05 * vanilla,
            "far barrier {untouched} vs vanilla {vanilla}"
        );
    }

    #[test]
    fn basket_with_one_asset_is_the_european_in_distribution() {
        let m = Market::default();
        let o = Options {
            assets: 1,
            ..Options::defaults(Product::Basket)
        };
        let t = record(Product::Basket, &o, &m).unwrap();
        let e = tape(Product::EuropeanCall);
        // Same draw 0, same GBM terminal value (the basket divides by 1 and uses dt = T / 1).
        for p in 0..50 {
            let a = evaluate_path(&verified(&t), &m.values(), 3, p).unwrap();
            let b = evaluate_path(&verified(&e), &m.values(), 3, p).unwrap();
            assert!((a.outputs[0] - b.outputs[0]).abs() <= 1e-12 * (1.0 + b.outputs[0].abs()));
        }
        // A perfectly diversifying correlation lowers the price.
        let hi = evaluate(&tape(Product::Basket), &m.values(), 3, 20_000)
            .unwrap()
            .outputs[0]
            .value;
        let lo_t = record(
            Product::Basket,
            &Options {
                rho: 0.0,
                ..Options::defaults(Product::Basket)
            },
            &m,
        )
        .unwrap();
        let lo = evaluate(&verified(&lo_t), &m.values(), 3, 20_000)
            .unwrap()
            .outputs[0]
            .value;
        assert!(
            lo < hi && hi < 10.45 && lo > 4.0,
            "rho 0: {lo}, rho 0.5: {hi}"
        );
    }
}

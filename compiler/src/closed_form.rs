//! Closed forms to check Monte Carlo results against: Black–Scholes for the European products.
//!
//! [`black_scholes`] gives the price of a European call or put under the model the products
//! record (geometric Brownian motion, constant rate and vol, no dividends) and its derivative by
//! each of the five inputs, in the products' input order (spot, strike, vol, rate, maturity). The
//! normal distribution function is accurate to about 1e-14 absolute.

use crate::products::Market;

/// A price and its derivatives by spot, strike, vol, rate and maturity (input order).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Priced {
    pub price: f64,
    pub greeks: [f64; 5],
}

/// The standard normal distribution function.
pub fn norm_cdf(x: f64) -> f64 {
    0.5 * erfc(-x / std::f64::consts::SQRT_2)
}

/// The standard normal density.
pub fn norm_pdf(x: f64) -> f64 {
    (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt()
}

/// The complementary error function: the Maclaurin series of erf below 2.5 in magnitude, the
/// continued fraction of erfc above it (each converges fast where it is used).
pub fn erfc(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let z = x.abs();
    let tail = if z < 2.5 {
        // erf z = 2/sqrt(pi) * sum (-1)^n z^(2n+1) / (n! (2n+1))
        let (mut term, mut sum, mut n) = (z, z, 0.0f64);
        while term.abs() > 1e-17 * sum.abs() {
            n += 1.0;
            term *= -z * z / n;
            sum += term / (2.0 * n + 1.0);
        }
        1.0 - 2.0 / std::f64::consts::PI.sqrt() * sum
    } else {
        // erfc z = exp(-z^2)/sqrt(pi) / (z + (1/2)/(z + 1/(z + (3/2)/(z + 2/(z + ...))))),
        // evaluated bottom-up from a depth where it has converged.
        let mut f = z;
        for k in (1..=60).rev() {
            f = z + (k as f64 / 2.0) / f;
        }
        (-z * z).exp() / std::f64::consts::PI.sqrt() / f
    };
    if x >= 0.0 {
        tail
    } else {
        2.0 - tail
    }
}

/// The Black–Scholes price of a cash-or-nothing call paying 1 at maturity when S_T > K:
/// `exp(-r T) N(d2)`.
pub fn digital_call(m: &Market) -> f64 {
    let sd = m.vol * m.maturity.sqrt();
    let d2 = ((m.spot / m.strike).ln() + (m.rate - 0.5 * m.vol * m.vol) * m.maturity) / sd;
    (-m.rate * m.maturity).exp() * norm_cdf(d2)
}

/// Black–Scholes price and Greeks of a European call (`call`) or put at `m`.
pub fn black_scholes(call: bool, m: &Market) -> Priced {
    let (s, k, v, r, t) = (m.spot, m.strike, m.vol, m.rate, m.maturity);
    let sd = v * t.sqrt();
    let d1 = ((s / k).ln() + (r + 0.5 * v * v) * t) / sd;
    let d2 = d1 - sd;
    let df = (-r * t).exp();
    let vega = s * norm_pdf(d1) * t.sqrt();
    let decay = s * norm_pdf(d1) * v / (2.0 * t.sqrt());
    if call {
        let (n1, n2) = (norm_cdf(d1), norm_cdf(d2));
        Priced {
            price: s * n1 - k * df * n2,
            greeks: [n1, -df * n2, vega, k * t * df * n2, decay + r * k * df * n2],
        }
    } else {
        let (n1, n2) = (norm_cdf(-d1), norm_cdf(-d2));
        Priced {
            price: k * df * n2 - s * n1,
            greeks: [
                -n1,
                df * n2,
                vega,
                -k * t * df * n2,
                decay - r * k * df * n2,
            ],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_distribution_values() {
        for (x, want) in [
            (0.0, 0.5),
            (1.0, 0.8413447460685429),
            (-2.0, 0.02275013194817922),
            (2.4999, 0.9937885816250555),
            (2.5001, 0.9937920872851848),
            (3.5, 0.9997673709209645),
            // Either side of the switch from series to continued fraction (|x| = 2.5 sqrt 2).
            (3.5354, 0.9997964208405775),
            (3.5357, 0.9997966518693739),
            (-3.5357, 0.00020334813062610404),
            (-3.5354, 0.00020357915942246143),
            (-6.0, 9.865876450377012e-10),
        ] {
            let got = norm_cdf(x);
            assert!((got - want).abs() < 1e-14, "Phi({x}) = {got}, want {want}");
        }
        assert!((erfc(-0.5) - 1.5204998778130465).abs() < 1e-14);
    }

    #[test]
    fn black_scholes_values_and_parity() {
        let m = Market::default(); // 100, 100, 0.2, 0.03, 1
        let c = black_scholes(true, &m);
        let p = black_scholes(false, &m);
        assert!((c.price - 9.413403383853016).abs() < 1e-10, "{}", c.price);
        // Put-call parity, and its derivatives: C - P = S - K e^(-rT).
        let df = (-m.rate * m.maturity).exp();
        assert!((c.price - p.price - (m.spot - m.strike * df)).abs() < 1e-12);
        let parity = [
            1.0,
            -df,
            0.0,
            m.strike * m.maturity * df,
            m.rate * m.strike * df,
        ];
        for (i, want) in parity.iter().enumerate() {
            assert!(
                (c.greeks[i] - p.greeks[i] - want).abs() < 1e-12,
                "input {i}"
            );
        }
        // Each Greek is the derivative of the price: central differences.
        for call in [true, false] {
            for (i, &xi) in m.values().iter().enumerate() {
                let h = 1e-5 * xi;
                let at = |d: f64| {
                    let mut y = m;
                    y.set(Market::NAMES[i], xi + d).unwrap();
                    black_scholes(call, &y).price
                };
                let fd = (at(h) - at(-h)) / (2.0 * h);
                let g = black_scholes(call, &m).greeks[i];
                assert!(
                    (fd - g).abs() < 1e-6 * (1.0 + g.abs()),
                    "{call} {i}: {fd} vs {g}"
                );
            }
        }
    }
}

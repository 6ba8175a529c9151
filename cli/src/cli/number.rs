//! How the text reports print numbers, in one place (the JSON reports print every f64 exactly).
//!
//! - An estimate and its standard error: the error to two significant digits, the estimate to the
//!   same decimal place (`4.92 ± 0.22`, `0.5812 ± 0.0031`), so every printed digit means
//!   something. Fixed notation while the numbers are of a readable size, else scientific with the
//!   error's place kept (`9.78e38 ± 3.5e36`).
//! - A number without an error (a Greek whose squares were not summed): 15
//!   significant digits, fixed notation in the same readable range, else scientific.
//! - A number the user gave (a ladder's input): the shortest form that reads back to it.
//! - Zero errors print as `0`, non-finite numbers as `NaN`, `inf`, `-inf`.

/// Fixed notation for magnitudes in [`FIXED_MIN`, `FIXED_MAX`) (and zero), scientific outside.
const FIXED_MIN: f64 = 1e-4;
const FIXED_MAX: f64 = 1e9;

/// Significant digits of a number printed without an error (what an f64 result holds).
const PLAIN_DIGITS: i32 = 15;

/// The decimal exponent of a finite, non-zero `x`: `floor(log10 |x|)`, exact at powers of ten.
fn exponent(x: f64) -> i32 {
    // `{:e}` prints the shortest representation, whose exponent is exact (log10 rounds).
    let s = format!("{:e}", x.abs());
    s.rsplit_once('e')
        .and_then(|(_, e)| e.parse().ok())
        .unwrap_or(0)
}

fn readable(x: f64) -> bool {
    x == 0.0 || (FIXED_MIN..FIXED_MAX).contains(&x.abs())
}

/// `value` without an error (module doc).
pub fn plain(value: f64) -> String {
    if !value.is_finite() {
        return format!("{value}");
    }
    if value == 0.0 {
        return "0".into();
    }
    let e = exponent(value);
    if readable(value) {
        let decimals = (PLAIN_DIGITS - 1 - e).clamp(0, 20) as usize;
        format!("{value:.decimals$}")
    } else {
        format!("{value:.*e}", (PLAIN_DIGITS - 1) as usize)
    }
}

/// A value the user gave (a market or ladder input): the shortest form that reads back to it
/// (`82.5`, `1e39`).
pub fn given(value: f64) -> String {
    if readable(value) || !value.is_finite() {
        format!("{value}")
    } else {
        format!("{value:e}")
    }
}

/// `(value, error)` as printed side by side: the error to two significant digits and the value
/// to the same decimal place (module doc).
pub fn estimate(value: f64, error: f64) -> (String, String) {
    if !value.is_finite() {
        return (format!("{value}"), plain(error));
    }
    if !error.is_finite() || error <= 0.0 {
        return (plain(value), plain(error));
    }
    // The error's last printed digit is at 10^place.
    let place = exponent(error) - 1;
    if readable(value) && readable(error) && place >= -15 {
        let decimals = (-place).max(0) as usize;
        // An error that rounds up to a new decade (9.96 -> 10) keeps two digits: "10".
        return (format!("{value:.decimals$}"), format!("{error:.decimals$}"));
    }
    let digits = if value == 0.0 {
        0
    } else {
        (exponent(value) - place).max(0) as usize
    };
    (format!("{value:.digits$e}"), format!("{error:.1e}"))
}

/// A whole number as a user writes it on the command line: digits (`1000000`, `1_000_000`) or
/// decimal scientific notation that names an integer exactly (`1e6`, `2.5e3`); refused with the
/// reason otherwise (`1.5`, `1e-3`, `1e30` past `max`). Exact: `1.0000000000000000001e19` is
/// 10000000000000000001, read as decimal digits, never through an f64.
pub fn whole(s: &str, max: u64) -> Result<u64, String> {
    let t = s.trim().replace('_', "");
    let (mantissa, exp) = match t.find(['e', 'E']) {
        Some(i) => (&t[..i], &t[i + 1..]),
        None => (t.as_str(), "0"),
    };
    let exp: i64 = exp
        .strip_prefix('+')
        .unwrap_or(exp)
        .parse()
        .map_err(|_| format!("'{s}' is not a whole number"))?;
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if int.is_empty() && frac.is_empty()
        || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())
    {
        return Err(format!("'{s}' is not a whole number"));
    }
    // digits * 10^(exp - frac.len()), with trailing zeros of the fraction dropped first.
    let frac = frac.trim_end_matches('0');
    let digits = format!("{int}{frac}");
    let shift = exp - frac.len() as i64;
    let too_big = || format!("'{s}' is more than {max}");
    let mut n: u128 = 0;
    for b in digits.bytes() {
        n = n * 10 + u128::from(b - b'0');
        if n > u128::from(u64::MAX) {
            return Err(too_big());
        }
    }
    if shift < 0 {
        let unit = 10u128.checked_pow((-shift) as u32).unwrap_or(u128::MAX);
        if !n.is_multiple_of(unit) || unit == u128::MAX && n != 0 {
            return Err(format!("'{s}' is not a whole number"));
        }
        n /= unit;
    } else if n != 0 {
        for _ in 0..shift {
            n *= 10;
            if n > u128::from(max) {
                return Err(too_big());
            }
        }
    }
    u64::try_from(n)
        .ok()
        .filter(|&v| v <= max)
        .ok_or_else(too_big)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_numbers_read_in_scientific_notation_when_exact() {
        let w = |s| whole(s, u64::MAX);
        assert_eq!(w("1000000"), Ok(1_000_000));
        assert_eq!(w("1_000_000"), Ok(1_000_000));
        assert_eq!(w("1e6"), Ok(1_000_000));
        assert_eq!(w("1E6"), Ok(1_000_000));
        assert_eq!(w("2.5e3"), Ok(2500));
        assert_eq!(w("1.50e1"), Ok(15));
        assert_eq!(w("1e+2"), Ok(100));
        assert_eq!(w("0"), Ok(0));
        assert_eq!(w("0e400"), Ok(0));
        assert_eq!(w("100e-2"), Ok(1));
        assert_eq!(w("18446744073709551615"), Ok(u64::MAX));
        assert_eq!(
            w("1.0000000000000000001e19"),
            Ok(10_000_000_000_000_000_001)
        );
        for bad in [
            "1.5", "1e-3", "-1", "e6", "1e", "1e6.0", "", "one", "1.2.3", "0x10", "inf",
        ] {
            assert!(w(bad).unwrap_err().contains("not a whole number"), "{bad}");
        }
        assert!(w("1e20").unwrap_err().contains("more than"));
        assert!(w("18446744073709551616").unwrap_err().contains("more than"));
        assert_eq!(
            whole("9.223372036854775807e18", i64::MAX as u64),
            Ok(i64::MAX as u64)
        );
        assert!(whole("1e19", i64::MAX as u64)
            .unwrap_err()
            .contains("more than"));
    }

    #[test]
    fn an_estimate_is_printed_to_its_error_s_second_digit() {
        let p = |v, e| {
            let (a, b) = estimate(v, e);
            format!("{a} ± {b}")
        };
        assert_eq!(p(4.924200499781257, 0.2160), "4.92 ± 0.22");
        assert_eq!(p(0.58123, 0.0031), "0.5812 ± 0.0031");
        assert_eq!(p(-0.58123, 0.0031), "-0.5812 ± 0.0031");
        assert_eq!(p(1234.5678, 12.3), "1235 ± 12");
        assert_eq!(p(1234.5678, 123.0), "1235 ± 123");
        assert_eq!(p(5.0, 0.01), "5.000 ± 0.010");
        assert_eq!(p(0.0, 0.25), "0.00 ± 0.25");
        // Outside the readable range: scientific, the value to the error's place.
        assert_eq!(p(9.779202582081217e38, 3.49e36), "9.779e38 ± 3.5e36");
        assert_eq!(p(1.23456e-7, 2.1e-9), "1.235e-7 ± 2.1e-9");
        assert_eq!(p(3.0, 1e-17), "3.000000000000000000e0 ± 1.0e-17");
        // No error to speak of, or no value.
        assert_eq!(p(13.492726497550983, f64::NAN), "13.4927264975510 ± NaN");
        assert_eq!(p(2.5, 0.0), "2.50000000000000 ± 0");
        assert_eq!(p(f64::NAN, f64::NAN), "NaN ± NaN");
        assert_eq!(p(f64::INFINITY, 1.0), "inf ± 1.00000000000000");
    }

    #[test]
    fn a_plain_number_has_fifteen_significant_digits() {
        assert_eq!(plain(0.0), "0");
        assert_eq!(plain(-0.0), "0");
        assert_eq!(plain(100.0), "100.000000000000");
        assert_eq!(plain(0.001), "0.00100000000000000");
        assert_eq!(plain(1e-5), "1.00000000000000e-5");
        assert_eq!(plain(-2.5e12), "-2.50000000000000e12");
        assert_eq!(plain(f64::NEG_INFINITY), "-inf");
    }

    #[test]
    fn a_given_number_reads_back() {
        assert_eq!(given(82.5), "82.5");
        assert_eq!(given(80.0), "80");
        assert_eq!(given(1e39), "1e39");
        assert_eq!(given(-3.25e-7), "-3.25e-7");
    }

    #[test]
    fn exponents_are_exact_at_powers_of_ten() {
        for e in -300..300 {
            let x: f64 = format!("1e{e}").parse().unwrap();
            assert_eq!(exponent(x), e);
            assert_eq!(exponent(-x), e);
            let below = f64::from_bits(x.to_bits() - 1);
            assert_eq!(exponent(below), e - 1, "{below:e}");
        }
    }
}

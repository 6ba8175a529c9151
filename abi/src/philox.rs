//! Philox4x32-10 and the draws of TAPE-FORMAT.md, in Rust: the reference every kernel must match bit for bit.
//!
//! Contract (TAPE-FORMAT.md, Draws): draw `k` of path `path` under `seed` is a pure function of
//! `(seed, path, k)`:
//!
//! ```text
//! counter = (k, path mod 2^32, path div 2^32, 0 for normal | 1 for uniform)
//! key     = (seed mod 2^32, seed div 2^32)
//! (x0, x1, x2, x3) = philox4x32_10(counter, key)
//! fp32: u1 = ((x0 >> 8) + 0.5) * 2^-24                       u2 = (x1 >> 8) * 2^-24
//! fp64: u1 = ((((x0 << 32) | x1) >> 11) + 0.5) * 2^-53       u2 = (((x2 << 32) | x3) >> 11) * 2^-53
//! normal  = sqrt(-2 ln u1) * cos(2 pi u2)
//! uniform (from the uniform counter): fp32 ((x0 >> 9) + 0.5) * 2^-23,
//!                                     fp64 ((((x0 << 32) | x1) >> 12) + 0.5) * 2^-52
//! ```
//!
//! Evaluation order, in the draw's precision (f32 or f64) throughout: the integer is converted to the
//! float type exactly (it has at most 24 resp. 53 bits), then `+ 0.5` (rounded to nearest even), then
//! `* 2^-24` resp. `* 2^-53` (exact); `2 pi` is the precision's `TAU` constant, multiplied by `u2`;
//! then `sqrt(-2 * ln(u1)) * cos(TAU * u2)`. Note: the `+ 0.5` is exact only for integers below 2^23
//! (f32) resp. 2^52 (f64); above, it rounds to nearest even, so `u1` is in (0, 1], not (0, 1): in f32
//! `u1 = 1` when `x0 >> 8 = 2^24 - 1` (probability 2^-24), in f64 when the 53-bit integer is `2^53 - 1`.
//! The uniform draw keeps one bit fewer, so every step is exact and it lies strictly in (0, 1).
//! A normal draw is then exactly 0; never NaN or infinite. The f32 and f64 draws read different bits
//! (f32: x0, x1; f64: all four words), so they are not roundings of each other.

/// Philox multiplier applied to counter word 0.
pub const M0: u32 = 0xD251_1F53;
/// Philox multiplier applied to counter word 2.
pub const M1: u32 = 0xCD9E_8D57;
/// Weyl increment of key word 0.
pub const W0: u32 = 0x9E37_79B9;
/// Weyl increment of key word 1.
pub const W1: u32 = 0xBB67_AE85;

#[inline]
fn mulhilo(m: u32, x: u32) -> (u32, u32) {
    let p = u64::from(m) * u64::from(x);
    ((p >> 32) as u32, p as u32)
}

/// Philox4x32 with ten rounds (Salmon et al., SC'11), exactly as Random123's `philox4x32_R(10, ...)`.
pub fn philox4x32_10(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let [mut c0, mut c1, mut c2, mut c3] = counter;
    let [mut k0, mut k1] = key;
    for _ in 0..10 {
        let (hi0, lo0) = mulhilo(M0, c0);
        let (hi1, lo1) = mulhilo(M1, c2);
        let n0 = hi1 ^ c1 ^ k0;
        let n1 = lo1;
        let n2 = hi0 ^ c3 ^ k1;
        let n3 = lo0;
        c0 = n0;
        c1 = n1;
        c2 = n2;
        c3 = n3;
        k0 = k0.wrapping_add(W0);
        k1 = k1.wrapping_add(W1);
    }
    [c0, c1, c2, c3]
}

/// The Philox output block for draw `k` of `path` under `seed`; `stream` is 0 for normal, 1 for uniform.
pub fn draw_block(seed: u64, path: u64, k: u32, stream: u32) -> [u32; 4] {
    philox4x32_10(
        [k, path as u32, (path >> 32) as u32, stream],
        [seed as u32, (seed >> 32) as u32],
    )
}

const TWO_POW_M53: f64 = 1.0 / 9_007_199_254_740_992.0; // 2^-53
const TWO_POW_M24: f32 = 1.0 / 16_777_216.0; // 2^-24
const TWO_POW_M52: f64 = 1.0 / 4_503_599_627_370_496.0; // 2^-52
const TWO_POW_M23: f32 = 1.0 / 8_388_608.0; // 2^-23

/// The f64 pair `(u1, u2)` of a Philox block: `u1` in (0, 1], `u2` in [0, 1).
pub fn uniforms_f64(x: [u32; 4]) -> (f64, f64) {
    let a = ((u64::from(x[0]) << 32) | u64::from(x[1])) >> 11;
    let b = ((u64::from(x[2]) << 32) | u64::from(x[3])) >> 11;
    ((a as f64 + 0.5) * TWO_POW_M53, b as f64 * TWO_POW_M53)
}

/// The f32 pair `(u1, u2)` of a Philox block: `u1` in (0, 1], `u2` in [0, 1).
pub fn uniforms_f32(x: [u32; 4]) -> (f32, f32) {
    (
        ((x[0] >> 8) as f32 + 0.5) * TWO_POW_M24,
        (x[1] >> 8) as f32 * TWO_POW_M24,
    )
}

/// Box–Muller in f64: `sqrt(-2 ln u1) * cos(TAU * u2)`.
pub fn box_muller_f64(u1: f64, u2: f64) -> f64 {
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Box–Muller in f32: `sqrt(-2 ln u1) * cos(TAU * u2)`, every step rounded to f32.
pub fn box_muller_f32(u1: f32, u2: f32) -> f32 {
    (-2.0f32 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos()
}

/// Standard normal draw `k` of `path` under `seed`, computed in f64 (finite for every argument).
pub fn normal_f64(seed: u64, path: u64, k: u32) -> f64 {
    let (u1, u2) = uniforms_f64(draw_block(seed, path, k, 0));
    box_muller_f64(u1, u2)
}

/// The f64 uniform of a Philox block: `((((x0 << 32) | x1) >> 12) + 0.5) * 2^-52`, exactly
/// representable, so strictly inside (0, 1).
pub fn uniform_of_f64(x: [u32; 4]) -> f64 {
    let a = ((u64::from(x[0]) << 32) | u64::from(x[1])) >> 12;
    (a as f64 + 0.5) * TWO_POW_M52
}

/// The f32 uniform of a Philox block: `((x0 >> 9) + 0.5) * 2^-23`, exactly representable, so
/// strictly inside (0, 1).
pub fn uniform_of_f32(x: [u32; 4]) -> f32 {
    ((x[0] >> 9) as f32 + 0.5) * TWO_POW_M23
}

/// Uniform draw `k` of `path` under `seed`, computed in f64: in (0, 1), never 0 or 1.
pub fn uniform_f64(seed: u64, path: u64, k: u32) -> f64 {
    uniform_of_f64(draw_block(seed, path, k, 1))
}

/// Standard normal draw `k` of `path` under `seed`, computed in f32 (finite for every argument).
pub fn normal_f32(seed: u64, path: u64, k: u32) -> f32 {
    let (u1, u2) = uniforms_f32(draw_block(seed, path, k, 0));
    box_muller_f32(u1, u2)
}

/// Uniform draw `k` of `path` under `seed`, computed in f32: in (0, 1), never 0 or 1.
pub fn uniform_f32(seed: u64, path: u64, k: u32) -> f32 {
    uniform_of_f32(draw_block(seed, path, k, 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniforms_stay_inside_the_open_interval_at_the_extreme_counters() {
        let top = [u32::MAX; 4];
        let bottom = [0; 4];
        assert!(uniform_of_f32(top) < 1.0 && uniform_of_f32(bottom) > 0.0);
        assert!(uniform_of_f64(top) < 1.0 && uniform_of_f64(bottom) > 0.0);
        assert_eq!(uniform_of_f32(top), 1.0 - 2f32.powi(-24));
        assert_eq!(uniform_of_f64(top), 1.0 - 2f64.powi(-53));
        assert_eq!(uniform_of_f32(bottom), 2f32.powi(-24));
        assert_eq!(uniform_of_f64(bottom), 2f64.powi(-53));
        // The normal's u1 still rounds to 1 at the top (and Box–Muller gives -0 there, not NaN).
        assert_eq!(uniforms_f32(top).0, 1.0);
        // Seed 15626855, path 0, uniform 0: x0 >> 8 = 2^24 - 1, where the old f32 uniform (the
        // normal's u1 formula) was exactly 1 and log(1 - u) was -inf.
        let x = draw_block(15_626_855, 0, 0, 1);
        assert_eq!(x[0] >> 8, (1 << 24) - 1);
        assert!(uniform_f32(15_626_855, 0, 0) < 1.0);
        assert!((1.0 - uniform_f32(15_626_855, 0, 0)).ln().is_finite());
    }

    #[test]
    fn known_answers() {
        // TAPE-FORMAT.md and Random123's kat_vectors.
        assert_eq!(
            philox4x32_10([0; 4], [0; 2]),
            [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]
        );
        assert_eq!(
            philox4x32_10([u32::MAX; 4], [u32::MAX; 2]),
            [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]
        );
        assert_eq!(
            philox4x32_10(
                [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
                [0xa4093822, 0x299f31d0]
            ),
            [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]
        );
    }

    #[test]
    fn counter_and_key_layout() {
        let (seed, path, k) = (0x0123_4567_89ab_cdef_u64, 0xfedc_ba98_7654_3210_u64, 7u32);
        let n = philox4x32_10([7, 0x7654_3210, 0xfedc_ba98, 0], [0x89ab_cdef, 0x0123_4567]);
        let u = philox4x32_10([7, 0x7654_3210, 0xfedc_ba98, 1], [0x89ab_cdef, 0x0123_4567]);
        assert_eq!(draw_block(seed, path, k, 0), n);
        assert_eq!(draw_block(seed, path, k, 1), u);
        let (u1, u2) = uniforms_f64(n);
        assert_eq!(
            normal_f64(seed, path, k).to_bits(),
            box_muller_f64(u1, u2).to_bits()
        );
        assert_eq!(
            uniform_f64(seed, path, k).to_bits(),
            uniform_of_f64(u).to_bits()
        );
        let (v1, v2) = uniforms_f32(n);
        assert_eq!(
            normal_f32(seed, path, k).to_bits(),
            box_muller_f32(v1, v2).to_bits()
        );
        assert_eq!(
            uniform_f32(seed, path, k).to_bits(),
            uniform_of_f32(u).to_bits()
        );
    }

    #[test]
    fn uniform_formulas_at_the_edges() {
        assert_eq!(uniforms_f64([0; 4]), (0.5 * TWO_POW_M53, 0.0));
        assert_eq!(uniforms_f32([0; 4]), (0.5 * TWO_POW_M24, 0.0));
        // Below 2^52 (2^23) the + 0.5 is exact; at and above it rounds to nearest even.
        assert_eq!(
            uniforms_f64([0x7fff_ffff, u32::MAX, 0x8000_0000, 0]),
            (0.5 - 0.5 * TWO_POW_M53, 0.5)
        );
        assert_eq!(uniforms_f64([0x8000_0000, 0, 0, 0]).0, 0.5);
        assert_eq!(
            uniforms_f64([0x8000_0000, 0x800, 0, 0]).0,
            0.5 + 2.0 * TWO_POW_M53
        );
        assert_eq!(
            uniforms_f32([0x7fff_ffff, 0x8000_0000, 0, 0]),
            (0.5 - 0.5 * TWO_POW_M24, 0.5)
        );
        assert_eq!(uniforms_f32([0x8000_0000, 0, 0, 0]).0, 0.5);
        assert_eq!(
            uniforms_f32([0x8000_0100, 0, 0, 0]).0,
            0.5 + 2.0 * TWO_POW_M24
        );
        // The largest integers round up to exactly 1, and the draw is then 0, not NaN.
        let (u1, u2) = uniforms_f64([u32::MAX; 4]);
        assert_eq!(u1, 1.0);
        assert_eq!(u2, 1.0 - TWO_POW_M53);
        assert_eq!(box_muller_f64(u1, u2), 0.0);
        let (v1, v2) = uniforms_f32([u32::MAX; 4]);
        assert_eq!(v1, 1.0);
        assert_eq!(v2, 1.0 - TWO_POW_M24);
        assert_eq!(box_muller_f32(v1, v2), 0.0);
        // The smallest u1 gives the largest normal, finite.
        let big = box_muller_f64(0.5 * TWO_POW_M53, 0.0);
        assert!(big.is_finite() && big > 8.0 && big < 8.7, "{big}");
        let big32 = box_muller_f32(0.5 * TWO_POW_M24, 0.0);
        assert!(big32.is_finite() && big32 > 5.0 && big32 < 6.0, "{big32}");
    }

    #[test]
    fn first_draws_are_pinned() {
        // The f64 normal of (0, 0, 0) from the known-answer block, by the formula written out.
        let a = ((0x6627e8d5_u64 << 32) | 0xe169c58d) >> 11;
        let b = ((0xbc57ac4c_u64 << 32) | 0x9b00dbd8) >> 11;
        let u1 = (a as f64 + 0.5) / 9_007_199_254_740_992.0;
        let u2 = b as f64 / 9_007_199_254_740_992.0;
        let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
        assert_eq!(normal_f64(0, 0, 0).to_bits(), z.to_bits());
        let v1 = ((0x6627e8d5_u32 >> 8) as f32 + 0.5) / 16_777_216.0;
        let v2 = (0xe169c58d_u32 >> 8) as f32 / 16_777_216.0;
        let w = (-2.0f32 * v1.ln()).sqrt() * (2.0 * std::f32::consts::PI * v2).cos();
        assert_eq!(normal_f32(0, 0, 0).to_bits(), w.to_bits());
    }

    #[test]
    fn normal_moments() {
        let n = 20_000u64;
        let (mut s1, mut s2, mut u) = (0.0, 0.0, 0.0);
        let (mut t1, mut t2) = (0.0, 0.0);
        for p in 0..n {
            let z = normal_f64(42, p, 3);
            s1 += z;
            s2 += z * z;
            let x = uniform_f64(42, p, 3);
            assert!(x > 0.0 && x <= 1.0);
            u += x;
            let w = f64::from(normal_f32(42, p, 3));
            t1 += w;
            t2 += w * w;
            assert!(uniform_f32(42, p, 3) > 0.0);
        }
        let nf = n as f64;
        assert!((s1 / nf).abs() < 4.0 / nf.sqrt());
        assert!((s2 / nf - 1.0).abs() < 0.05);
        assert!((t1 / nf).abs() < 4.0 / nf.sqrt());
        assert!((t2 / nf - 1.0).abs() < 0.05);
        assert!((u / nf - 0.5).abs() < 4.0 * (1.0 / 12.0f64 / nf).sqrt());
    }
}

//! The CPU target's kernel ABI (manifest version 1), as data.
//!
//! A CPU kernel is CLIF text (Cranelift IR) holding one function, named by
//! `manifest.entry_point`, written in the [`TEXT_CALL_CONV`] calling convention (the loader
//! rewrites every signature to the host's C convention, so the text does not depend on the host):
//!
//! ```text
//! fn(inputs: *const T, seed: u64, first_path: u64, count: u64, out: *mut f64)
//! ```
//!
//! Every parameter is one `i64` in the text ([`ENTRY_PARAMS`], in order); there are no results.
//!
//! - `inputs`: one `T` (f32 or f64, the manifest's precision) per input, in `manifest.inputs` order.
//! - `seed`: the Philox key `(seed mod 2^32, seed div 2^32)`.
//! - paths `first_path .. first_path + count` run in order, by their global index (so draws do not
//!   depend on how a run is split); `count = 0` writes nothing.
//! - `out`: `count` rows of `manifest.sums.len()` f64; row `j` holds path `first_path + j`'s leaves
//!   in `manifest.sums` order.
//!
//! The kernel does no reduction: the host sums each column in the fixed tree order of
//! [`crate::report`]. The only functions a kernel may import are the host libm's, named in
//! [`LIBM`] per precision, with signatures `(T, ..., T) -> T` of the table's arity: for `exp`,
//! `log` and `cos` the functions Rust's `f64::exp`,
//! `f64::ln`, `f64::cos` (and the f32 ones) call, so JIT results match Rust references bit for bit.
//! Adding a function is one line in [`LIBM`] (and its address in the runtime's symbol table).

use crate::manifest::Precision;

/// The calling convention the CLIF text is written in, as Cranelift spells it (`CallConv`'s
/// `Display`/`FromStr`).
pub const TEXT_CALL_CONV: &str = "system_v";

/// The entry point's parameters, in order; each is one `i64` in the text (a pointer or a `u64`).
pub const ENTRY_PARAMS: &[&str] = &["inputs", "seed", "first_path", "count", "out"];

/// One libm function a kernel may import: its symbol in f64 (the C name, e.g. `exp`), in f32
/// (e.g. `expf`), and its number of arguments (the signature is `(T, ..., T) -> T`).
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct Libm {
    pub f64: &'static str,
    pub f32: &'static str,
    pub arity: usize,
}

impl Libm {
    /// The symbol for a kernel of `precision`.
    pub fn name(&self, precision: Precision) -> &'static str {
        match precision {
            Precision::F64 => self.f64,
            Precision::F32 => self.f32,
        }
    }
}

/// Every libm function a CPU kernel may import: the one table the compiler and the runtime read.
#[rustfmt::skip]
pub const LIBM: &[Libm] = &[
    Libm { f64: "exp", f32: "expf", arity: 1 },
    Libm { f64: "log", f32: "logf", arity: 1 },
    Libm { f64: "cos", f32: "cosf", arity: 1 },
    Libm { f64: "tanh", f32: "tanhf", arity: 1 },
    Libm { f64: "erfc", f32: "erfcf", arity: 1 },
    Libm { f64: "pow", f32: "powf", arity: 2 },
];

/// The symbol of libm function `f64_name` (its C name in f64, e.g. `"exp"`) for `precision`;
/// `None` if a kernel may not import it.
pub fn libm_name(f64_name: &str, precision: Precision) -> Option<&'static str> {
    LIBM.iter()
        .find(|f| f.f64 == f64_name)
        .map(|f| f.name(precision))
}

/// The symbols a kernel of `precision` may import with their numbers of arguments, in [`LIBM`]
/// order.
pub fn libm_names(precision: Precision) -> impl Iterator<Item = (&'static str, usize)> {
    LIBM.iter().map(move |f| (f.name(precision), f.arity))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libm_table() {
        assert_eq!(libm_name("exp", Precision::F32), Some("expf"));
        assert_eq!(libm_name("cos", Precision::F64), Some("cos"));
        assert_eq!(libm_name("expf", Precision::F64), None);
        let f32: Vec<_> = libm_names(Precision::F32).map(|(name, _)| name).collect();
        assert_eq!(f32, ["expf", "logf", "cosf", "tanhf", "erfcf", "powf"]);
        assert_eq!(libm_names(Precision::F64).last(), Some(("pow", 2)));
        // Names are unique across both precisions, so a symbol says its precision.
        let mut all: Vec<_> = LIBM.iter().flat_map(|f| [f.f64, f.f32]).collect();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n);
        assert_eq!(ENTRY_PARAMS.len(), 5);
    }
}

//! The CPU kernel ABI (`nablac_abi::cpu`, shared with the runtime's loader) as the Cranelift
//! values the lowering needs; the runtime builds the same values from the same data.

use crate::emit::manifest::Precision;
use cranelift_codegen::ir::{types, AbiParam, Signature};
use cranelift_codegen::isa::CallConv;
use nablac_abi::cpu::{ENTRY_PARAMS, LIBM};

/// The calling convention the CLIF text is written in (`nablac_abi::cpu::TEXT_CALL_CONV`).
pub(super) const CALL_CONV: CallConv = CallConv::SystemV;

/// The entry point's signature in the text: one `i64` per `ENTRY_PARAMS` entry, no results.
pub(super) fn entry_signature() -> Signature {
    let mut abi = Signature::new(CALL_CONV);
    abi.params = vec![AbiParam::new(types::I64); ENTRY_PARAMS.len()];
    abi
}

/// The symbol and arity of libm function `f64_name` for a kernel of `precision`, from
/// `nablac_abi::cpu::LIBM`.
pub(super) fn libm(f64_name: &str, precision: Precision) -> (&'static str, usize) {
    let f = LIBM
        .iter()
        .find(|f| f.f64 == f64_name)
        .unwrap_or_else(|| panic!("{f64_name} is in nablac_abi::cpu::LIBM"));
    (f.name(precision), f.arity)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    #[test]
    fn built_from_the_abi() {
        assert_eq!(
            CallConv::from_str(nablac_abi::cpu::TEXT_CALL_CONV),
            Ok(CALL_CONV)
        );
        assert_eq!(libm("exp", Precision::F32), ("expf", 1));
        assert_eq!(libm("pow", Precision::F64), ("pow", 2));
        assert_eq!(entry_signature().params.len(), 5);
    }
}

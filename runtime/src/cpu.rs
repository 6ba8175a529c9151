//! The CPU backend's kernel: CLIF text (Cranelift IR, as `nablac --target cpu` writes it) parsed,
//! checked against its manifest and JIT-compiled for the host.
//!
//! # ABI (manifest version 1)
//!
//! The ABI is written down once, as data, in `nablac_abi::cpu` (the entry point's parameters, the
//! text's calling convention [`TEXT_CALL_CONV`], the libm functions a kernel may import,
//! [`LIBM`]); the compiler's lowering builds its signatures from the same data. In short:
//!
//! ```text
//! fn(inputs: *const T, seed: u64, first_path: u64, count: u64, out: *mut f64)
//! ```
//!
//! one row of `manifest.sums.len()` f64 leaves per path, in `manifest.sums` order, no reduction:
//! the host sums each column in the fixed tree order of [`crate::report`]. [`load`] rewrites every
//! signature to the host's C convention, so the text does not depend on the host.
//!
//! # Trust
//!
//! Before anything runs, the function is checked: the entry signature is the ABI's, the imports
//! are only the libm functions of its precision with their `(T, ..., T) -> T` signatures (`pow`:
//! `(T, T) -> T`), no global values are
//! referenced, and Cranelift's verifier accepts the IR. A kernel is still trusted code (it reads
//! and writes through the pointers it is given): load only what nablac emitted.

use crate::manifest::{Manifest, Precision, Target};
use crate::RuntimeError;
use cranelift_codegen::ir::{types, AbiParam, ExternalName, Function, Signature, UserExternalName};
use cranelift_codegen::isa::CallConv;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, Linkage, Module};

pub use nablac_abi::cpu::{libm_name, libm_names, Libm, ENTRY_PARAMS, LIBM};

/// The calling convention CLIF text is written in (`nablac_abi::cpu::TEXT_CALL_CONV`; rewritten
/// to the host's by [`load`]).
pub const TEXT_CALL_CONV: CallConv = CallConv::SystemV;

/// The entry point's signature in the text: one `i64` per `ENTRY_PARAMS` entry, no results.
pub fn entry_signature() -> Signature {
    let mut abi = Signature::new(TEXT_CALL_CONV);
    abi.params = vec![AbiParam::new(types::I64); ENTRY_PARAMS.len()];
    abi
}

/// The f64 values one path writes for `manifest`: `manifest.row_len()` (every market's sums),
/// checked against its mode, inputs and outputs.
pub fn row_len(manifest: &Manifest) -> Result<usize, RuntimeError> {
    if manifest.input_defaults.len() != manifest.inputs.len() || manifest.outputs.is_empty() {
        return Err(RuntimeError::Manifest(format!(
            "{} inputs with {} defaults and {} outputs",
            manifest.inputs.len(),
            manifest.input_defaults.len(),
            manifest.outputs.len()
        )));
    }
    manifest.layout().map_err(RuntimeError::Manifest)?;
    let max = crate::manifest::MAX_MARKETS;
    if manifest.markets == 0 || manifest.markets > max {
        return Err(RuntimeError::Manifest(format!(
            "markets {} (1 ..= {max})",
            manifest.markets
        )));
    }
    Ok(manifest.row_len())
}

/// Does `source` hold LLVM IR text (rather than CLIF)? LLVM's printer starts every module with
/// `; ModuleID`.
pub fn is_llvm_ir(source: &str) -> bool {
    source.trim_start().starts_with("; ModuleID")
}

/// CLIF functions of more instructions than this get Cranelift's single-pass register
/// allocator (linear time) instead of the backtracking one (see `compile`).
const SINGLE_PASS_INSTS: usize = 200_000;

/// Parses CLIF text holding exactly one function named `manifest.entry_point`, then [`compile`]s it;
/// or, LLVM IR text (told apart by its first line, [`is_llvm_ir`]), JIT-compiles it
/// through LLVM (feature `llvm`; without it such a kernel is refused, naming the feature).
pub fn load(source: &str, manifest: &Manifest) -> Result<Compiled, RuntimeError> {
    if is_llvm_ir(source) {
        return load_llvm(source, manifest);
    }
    check_entity_numbers(source)?;
    let funcs = cranelift_reader::parse_functions(source)
        .map_err(|e| RuntimeError::Kernel(format!("CLIF does not parse: {e}")))?;
    let [func] = <[Function; 1]>::try_from(funcs).map_err(|f| {
        RuntimeError::Kernel(format!("CLIF holds {} functions, expected one", f.len()))
    })?;
    let want = format!("%{}", manifest.entry_point);
    if func.name.to_string() != want {
        return Err(RuntimeError::Kernel(format!(
            "CLIF function is {}, the manifest's entry point is {want}",
            func.name
        )));
    }
    compile(func, manifest)
}

/// Refuses CLIF whose entity numbers (`v7`, `block3`, `ss0`, ...) exceed its length. The parser
/// makes room for every number up to the largest it reads, so a 12 KB file naming `v4000000000`
/// made it allocate gigabytes (found by fuzz/fuzz_targets/loaders.rs). Every entity nablac writes
/// is defined in the text, so its numbers stay below the text's length.
fn check_entity_numbers(source: &str) -> Result<(), RuntimeError> {
    let bytes = source.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i].is_ascii_digit() && i > 0 && bytes[i - 1].is_ascii_alphabetic() {
            let start = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            // Back over the ASCII word before the digits (bytes, so never inside a character).
            let mut word = start;
            while word > 0 && (bytes[word - 1].is_ascii_alphanumeric() || bytes[word - 1] == b'_') {
                word -= 1;
            }
            let prefix = &source[word..start];
            let entity = matches!(
                prefix,
                "v" | "block" | "ss" | "dss" | "gv" | "sig" | "fn" | "jt" | "const" | "inst"
            );
            let n = source[start..i].parse::<u64>().unwrap_or(u64::MAX);
            if entity && n > bytes.len() as u64 {
                return Err(RuntimeError::Kernel(format!(
                    "CLIF names {prefix}{} in {} bytes of text: an entity number larger than \
                     the text is refused (nablac's kernels number what they define)",
                    &source[start..i],
                    bytes.len()
                )));
            }
        } else {
            i += 1;
        }
    }
    Ok(())
}

#[cfg(feature = "llvm")]
fn load_llvm(source: &str, manifest: &Manifest) -> Result<Compiled, RuntimeError> {
    check_cpu_target(manifest)?;
    let row = row_len(manifest)?;
    let (jit, address, cache_hit) = crate::llvm::compile(source, manifest)?;
    // SAFETY: `crate::llvm::compile` checked the entry point's type against the ABI; the C
    // calling convention of the LLVM function is the host's.
    let entry = unsafe { std::mem::transmute::<usize, Entry>(address) };
    Ok(Compiled {
        module: None,
        _llvm: Some(jit),
        cache_hit: Some(cache_hit),
        entry,
        precision: manifest.precision,
        n_inputs: manifest.market_values_len(),
        n_shifts: manifest.shifts_len(),
        row,
    })
}

#[cfg(not(feature = "llvm"))]
fn load_llvm(_: &str, _: &Manifest) -> Result<Compiled, RuntimeError> {
    Err(RuntimeError::Kernel(
        "this kernel is LLVM IR (nablac's LLVM CPU back end), and this build of the runtime has \
         no LLVM JIT: build it with `--features llvm`"
            .into(),
    ))
}

fn check_cpu_target(manifest: &Manifest) -> Result<(), RuntimeError> {
    if manifest.target != Target::Cpu {
        return Err(RuntimeError::Manifest(format!(
            "target is {}, the CPU backend loads cpu",
            manifest.target.name()
        )));
    }
    Ok(())
}

mod libm {
    extern "C" {
        pub fn exp(x: f64) -> f64;
        pub fn log(x: f64) -> f64;
        pub fn cos(x: f64) -> f64;
        pub fn expf(x: f32) -> f32;
        pub fn logf(x: f32) -> f32;
        pub fn cosf(x: f32) -> f32;
        pub fn tanh(x: f64) -> f64;
        pub fn erfc(x: f64) -> f64;
        pub fn pow(x: f64, y: f64) -> f64;
        pub fn tanhf(x: f32) -> f32;
        pub fn erfcf(x: f32) -> f32;
        pub fn powf(x: f32, y: f32) -> f32;
    }
}

/// The host's libm functions a kernel may import, by symbol name (the ones Rust's `f64::exp`,
/// `f64::ln`, `f64::cos` and their f32 twins call, so JIT draws equal `crate::philox` bit for bit):
/// the address of every symbol in [`LIBM`] (a test checks that none is missing).
pub fn libm_symbols() -> [(&'static str, *const u8); 12] {
    type F1 = unsafe extern "C" fn(f64) -> f64;
    type G1 = unsafe extern "C" fn(f32) -> f32;
    [
        ("tanh", libm::tanh as F1 as *const u8),
        ("erfc", libm::erfc as F1 as *const u8),
        (
            "pow",
            libm::pow as unsafe extern "C" fn(f64, f64) -> f64 as *const u8,
        ),
        ("tanhf", libm::tanhf as G1 as *const u8),
        ("erfcf", libm::erfcf as G1 as *const u8),
        (
            "powf",
            libm::powf as unsafe extern "C" fn(f32, f32) -> f32 as *const u8,
        ),
        (
            "exp",
            libm::exp as unsafe extern "C" fn(f64) -> f64 as *const u8,
        ),
        (
            "log",
            libm::log as unsafe extern "C" fn(f64) -> f64 as *const u8,
        ),
        (
            "cos",
            libm::cos as unsafe extern "C" fn(f64) -> f64 as *const u8,
        ),
        (
            "expf",
            libm::expf as unsafe extern "C" fn(f32) -> f32 as *const u8,
        ),
        (
            "logf",
            libm::logf as unsafe extern "C" fn(f32) -> f32 as *const u8,
        ),
        (
            "cosf",
            libm::cosf as unsafe extern "C" fn(f32) -> f32 as *const u8,
        ),
    ]
}

type Entry = unsafe extern "C" fn(*const u8, u64, u64, u64, *mut f64);

/// A JIT-compiled CPU kernel: callable from any number of threads at once.
pub struct Compiled {
    module: Option<JITModule>,
    /// The LLVM module that owns `entry`'s code, for an LLVM kernel (held, never read: dropping
    /// it frees the code).
    #[cfg(feature = "llvm")]
    _llvm: Option<crate::llvm::Jit>,
    /// Whether the machine code came from the kernel cache (LLVM); None for Cranelift's, which
    /// is not cached (it compiles in linear time).
    cache_hit: Option<bool>,
    entry: Entry,
    precision: Precision,
    n_inputs: usize,
    /// Values after the markets in the inputs buffer (`markets` blocks of `manifest.shifts`).
    n_shifts: usize,
    row: usize,
}

// SAFETY: the module's code and data are immutable after `finalize_definitions`; the entry
// function only reads its inputs and writes its own `out` rows, so concurrent calls are sound.
unsafe impl Send for Compiled {}
unsafe impl Sync for Compiled {}

impl Drop for Compiled {
    fn drop(&mut self) {
        if let Some(module) = self.module.take() {
            // SAFETY: `entry` dies with `self`; no call can be in flight while we are dropped.
            unsafe { module.free_memory() };
        }
    }
}

impl std::fmt::Debug for Compiled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compiled")
            .field("precision", &self.precision)
            .field("n_inputs", &self.n_inputs)
            .field("n_shifts", &self.n_shifts)
            .field("row", &self.row)
            .finish()
    }
}

fn bad(what: impl Into<String>) -> RuntimeError {
    RuntimeError::Kernel(what.into())
}

/// Checks `func` against the ABI and `manifest`, then compiles it for the host. Errors name the
/// broken rule; never panics on a malformed function.
pub fn compile(mut func: Function, manifest: &Manifest) -> Result<Compiled, RuntimeError> {
    check_cpu_target(manifest)?;
    let row = row_len(manifest)?;
    let n_inputs = manifest.market_values_len();
    let ty = match manifest.precision {
        Precision::F64 => types::F64,
        Precision::F32 => types::F32,
    };
    let abi = entry_signature();
    if func.signature != abi {
        return Err(bad(format!(
            "entry signature is {}, expected {abi}",
            func.signature
        )));
    }
    if !func.global_values.is_empty() {
        return Err(bad(
            "the kernel references global values; CPU kernels may not",
        ));
    }
    let allowed: Vec<(&str, usize)> = libm_names(manifest.precision).collect();
    let libm_signature = |arity: usize| {
        let mut sig = Signature::new(TEXT_CALL_CONV);
        sig.params = vec![AbiParam::new(ty); arity];
        sig.returns.push(AbiParam::new(ty));
        sig
    };

    let mut flags = settings::builder();
    let set = |f: &mut settings::Builder, k: &str, v: &str| {
        f.set(k, v)
            .map_err(|e| RuntimeError::Host(format!("cranelift flag {k}={v}: {e}")))
    };
    set(&mut flags, "opt_level", "speed")?;
    set(&mut flags, "use_colocated_libcalls", "false")?;
    set(&mut flags, "is_pic", "false")?;
    if func.dfg.num_insts() > SINGLE_PASS_INSTS {
        // The backtracking allocator's spill handling is superlinear in the values alive at
        // once: 8,000 outputs alive until their leaves (`scripts/chain-tape.py 16000 8000`,
        // `nablac run --mode forward --cpu-backend cranelift --paths 64`) took it 117 s, the
        // single-pass one 2.75 s (2.89 at the review). Allocation never changes what an
        // instruction computes, so the bits are the same.
        set(&mut flags, "regalloc_algorithm", "single_pass")?;
    }
    let isa = cranelift_native::builder()
        .map_err(|e| RuntimeError::Host(format!("host machine is not supported: {e}")))?
        .finish(settings::Flags::new(flags))
        .map_err(|e| RuntimeError::Host(format!("building the host ISA: {e}")))?;
    let cc = isa.default_call_conv();
    let mut jb = JITBuilder::with_isa(isa, default_libcall_names());
    for (name, ptr) in libm_symbols() {
        jb.symbol(name, ptr);
    }
    let mut module = JITModule::new(jb);

    // Imports: only the libm functions of this precision, renamed to the module's function ids.
    let refs: Vec<_> = func.dfg.ext_funcs.keys().collect();
    for fref in refs {
        let data = func.dfg.ext_funcs[fref].clone();
        let name = match &data.name {
            ExternalName::TestCase(t) => String::from_utf8_lossy(t.raw()).into_owned(),
            other => {
                return Err(bad(format!(
                    "import {} is not a libm name",
                    other.display(None)
                )))
            }
        };
        let Some(&(_, arity)) = allowed.iter().find(|(n, _)| *n == name) else {
            let names: Vec<&str> = allowed.iter().map(|(n, _)| *n).collect();
            return Err(bad(format!("import %{name} is not one of {names:?}")));
        };
        let wanted = libm_signature(arity);
        if func.dfg.signatures[data.signature] != wanted {
            return Err(bad(format!(
                "import %{name} has signature {}",
                func.dfg.signatures[data.signature]
            )));
        }
        let mut sig = wanted;
        sig.call_conv = cc;
        let id = module
            .declare_function(&name, Linkage::Import, &sig)
            .map_err(|e| RuntimeError::Host(format!("declaring {name}: {e}")))?;
        let user = func.declare_imported_user_function(UserExternalName {
            namespace: 0,
            index: id.as_u32(),
        });
        func.dfg.ext_funcs[fref].name = ExternalName::user(user);
        func.dfg.ext_funcs[fref].colocated = false;
    }
    func.signature.call_conv = cc;
    for sig in func.dfg.signatures.values_mut() {
        sig.call_conv = cc;
    }
    let entry_name = manifest.entry_point.clone();
    let id = module
        .declare_function(&entry_name, Linkage::Export, &func.signature)
        .map_err(|e| RuntimeError::Host(format!("declaring {entry_name}: {e}")))?;
    let mut ctx = module.make_context();
    ctx.func = func;
    if let Err(e) = module.define_function(id, &mut ctx) {
        let detail = match &e {
            cranelift_module::ModuleError::Compilation(
                cranelift_codegen::CodegenError::Verifier(v),
            ) => {
                format!("{v}")
            }
            other => format!("{other}"),
        };
        return Err(bad(format!("compiling {entry_name}: {detail}")));
    }
    module
        .finalize_definitions()
        .map_err(|e| RuntimeError::Host(format!("finalizing {entry_name}: {e}")))?;
    let ptr = module.get_finalized_function(id);
    // SAFETY: the function was checked to have the ABI's signature in the host call convention.
    let entry = unsafe { std::mem::transmute::<*const u8, Entry>(ptr) };
    Ok(Compiled {
        module: Some(module),
        #[cfg(feature = "llvm")]
        _llvm: None,
        cache_hit: None,
        entry,
        precision: manifest.precision,
        n_inputs,
        n_shifts: manifest.shifts_len(),
        row,
    })
}

impl Compiled {
    /// Whether the machine code came from the kernel cache: Some for LLVM code, None for
    /// Cranelift's (never cached).
    pub fn cache_hit(&self) -> Option<bool> {
        self.cache_hit
    }

    /// Which JIT built it: "LLVM JIT" or "Cranelift JIT".
    pub fn jit(&self) -> &'static str {
        if self.module.is_some() {
            "Cranelift JIT"
        } else {
            "LLVM JIT"
        }
    }
}

impl Compiled {
    /// f64 values each path writes: the manifest's `sums`, in order.
    pub fn row_len(&self) -> usize {
        self.row
    }

    /// Runs paths `first_path .. first_path + out.len() / row_len()` at `inputs` (converted to the
    /// kernel precision) and writes one row of per-path leaves each into `out`.
    pub fn run(
        &self,
        inputs: &[f64],
        seed: u64,
        first_path: u64,
        out: &mut [f64],
    ) -> Result<(), RuntimeError> {
        let full = self.n_inputs + self.n_shifts;
        if inputs.len() != self.n_inputs && inputs.len() != full {
            return Err(RuntimeError::Run(format!(
                "{} input values given, the kernel has {} inputs and {} shifts",
                inputs.len(),
                self.n_inputs,
                self.n_shifts
            )));
        }
        // The market alone: the squares are taken about 0.
        let mut padded;
        let inputs = if inputs.len() == full {
            inputs
        } else {
            padded = inputs.to_vec();
            padded.resize(full, 0.0);
            &padded[..]
        };
        if !out.len().is_multiple_of(self.row) {
            return Err(RuntimeError::Run(format!(
                "output length {} is not a multiple of the row {}",
                out.len(),
                self.row
            )));
        }
        let count = (out.len() / self.row) as u64;
        if count == 0 {
            return Ok(());
        }
        let one = [0.0f64; 1];
        match self.precision {
            Precision::F64 => {
                let ptr = if inputs.is_empty() {
                    one.as_ptr() as *const u8
                } else {
                    inputs.as_ptr() as *const u8
                };
                // SAFETY: `inputs` holds n_inputs f64 and `out` holds count rows of `row` f64.
                unsafe { (self.entry)(ptr, seed, first_path, count, out.as_mut_ptr()) };
            }
            Precision::F32 => {
                let mut v: Vec<f32> = inputs.iter().map(|&x| x as f32).collect();
                v.push(0.0);
                // SAFETY: as above, with the inputs converted to f32.
                unsafe {
                    (self.entry)(
                        v.as_ptr() as *const u8,
                        seed,
                        first_path,
                        count,
                        out.as_mut_ptr(),
                    )
                };
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    /// The Cranelift values here are the ones `nablac_abi::cpu` describes.
    #[test]
    fn built_from_the_abi() {
        assert_eq!(
            CallConv::from_str(nablac_abi::cpu::TEXT_CALL_CONV),
            Ok(TEXT_CALL_CONV)
        );
        let symbols = libm_symbols();
        for f in LIBM {
            for name in [f.f64, f.f32] {
                assert!(
                    symbols.iter().any(|(s, _)| *s == name),
                    "libm_symbols lacks {name}"
                );
            }
        }
        assert_eq!(symbols.len(), 2 * LIBM.len());
    }

    /// Found by fuzz/fuzz_targets/loaders.rs: a value number far beyond the text made
    /// cranelift-reader allocate gigabytes (an out-of-memory in the fuzzer); now it is refused
    /// before the parser sees it, and ordinary numbers pass.
    #[test]
    fn huge_entity_numbers_are_refused_before_parsing() {
        let src = "function %k(i64) system_v {\nblock0(v0: i64):\n    v4000000000 = iadd v0, v0\n    return\n}\n";
        let e = check_entity_numbers(src).unwrap_err();
        assert!(e.to_string().contains("v4000000000"), "{e}");
        let ok = "function %k_f64(i64) system_v {\n    sig0 = (f64) -> f64 system_v\nblock0(v0: i64):\n    v1 = iconst.i64 0x7ff0_0000\n    return\n}\n";
        assert_eq!(check_entity_numbers(ok), Ok(()));
        // And a character of several bytes before a name is no slicing problem (the fuzzer's
        // second find, in this function's first version).
        assert_eq!(check_entity_numbers("sig0 = (\u{fffd}f64) v1"), Ok(()));
    }
}

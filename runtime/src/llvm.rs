//! The LLVM CPU kernels (feature `llvm`): LLVM IR text, as `nablac::llvm::emit` writes it,
//! parsed, checked, optimised for this host (O3 with the host's CPU name and features, so AVX2
//! or AVX-512 code where the CPU has it) and compiled to an object file through inkwell, which
//! ORC's LLJIT links into the process.
//!
//! # Cache
//!
//! The object file is kept in the kernel cache beside the GPU binaries ([`crate::gpu::cache`]:
//! a verified header, atomic replacement, `NABLAC_CACHE_DIR`), keyed on the IR text, the host's
//! triple, CPU name and features, and this LLVM's version and options. A second load of the
//! same kernel (a second run, another market: markets are arguments) links the cached object
//! and skips LLVM's optimiser and code generator, which are most of a long tape's load time.
//!
//! The entry point has the CPU ABI of [`crate::cpu`] (the manifest is the same), so
//! [`crate::cpu::Compiled`] runs it through the same call, over threads, with the same
//! fixed-order sums.
//!
//! # Trust
//!
//! Before anything is compiled: the module verifies; it defines the manifest's entry point with
//! the ABI's type `void (T*, i64, i64, i64, double*)`; every function it declares without a body
//! is an LLVM intrinsic (`llvm.*`: no libm, no other symbol of the process); it has no global
//! variables. A kernel is still trusted code (it reads and writes through the pointers it is
//! given): load only what nablac emitted.

use crate::manifest::{Manifest, Precision};
use crate::RuntimeError;
use inkwell::context::Context;
use inkwell::llvm_sys;
use inkwell::memory_buffer::MemoryBuffer;
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{
    CodeModel, FileType, InitializationConfig, RelocMode, Target, TargetMachine,
};
use inkwell::types::BasicMetadataTypeEnum;
use inkwell::OptimizationLevel;
use llvm_sys::error::{LLVMDisposeErrorMessage, LLVMErrorRef, LLVMGetErrorMessage};
use llvm_sys::orc2::lljit::{
    LLVMOrcCreateLLJIT, LLVMOrcCreateLLJITBuilder, LLVMOrcDisposeLLJIT, LLVMOrcLLJITAddObjectFile,
    LLVMOrcLLJITGetGlobalPrefix, LLVMOrcLLJITGetMainJITDylib, LLVMOrcLLJITLookup, LLVMOrcLLJITRef,
};
use llvm_sys::orc2::{
    LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess, LLVMOrcJITDylibAddGenerator,
};

/// A kernel's code linked into the process by an LLJIT instance, which owns it.
pub struct Jit {
    jit: LLVMOrcLLJITRef,
}

// SAFETY: a `Jit` is made on the compiling thread and then only dropped (the code it owns is
// called through a plain function pointer); an LLJIT may be disposed of from any thread.
unsafe impl Send for Jit {}

impl Drop for Jit {
    fn drop(&mut self) {
        // SAFETY: made by LLVMOrcCreateLLJIT and disposed of once; the error of a failed
        // teardown has nowhere to go, and is consumed with its message.
        unsafe {
            let _ = take_error(LLVMOrcDisposeLLJIT(self.jit));
        }
    }
}

/// The message of `err` (consuming it), or None for success.
///
/// # Safety
/// `err` is an LLVMErrorRef returned to us and not yet consumed.
unsafe fn take_error(err: LLVMErrorRef) -> Option<String> {
    if err.is_null() {
        return None;
    }
    let m = LLVMGetErrorMessage(err);
    let text = std::ffi::CStr::from_ptr(m).to_string_lossy().into_owned();
    LLVMDisposeErrorMessage(m);
    Some(text)
}

/// The stack of the thread LLVM compiles on (see [`compile`]); `LLVM_MAX_NODES` (compiler) was
/// measured on the 8 MiB main stack, so this leaves a wide margin.
const OPTIMISER_STACK: usize = 256 << 20;

/// What the object code depends on beside the IR: the LLVM that compiled it and how (bumped
/// when the pipeline below changes, so an old entry is never linked).
const OBJECT_FORMAT: &str = "llvm 14 default<O3> large-code-model 1";

fn bad(what: impl Into<String>) -> RuntimeError {
    RuntimeError::Kernel(what.into())
}

/// This host as LLVM sees it: (triple, CPU name, CPU features).
fn host() -> Result<(inkwell::targets::TargetTriple, String, String), RuntimeError> {
    Target::initialize_native(&InitializationConfig::default())
        .map_err(|e| RuntimeError::Host(format!("LLVM has no target for this host: {e}")))?;
    Ok((
        TargetMachine::get_default_triple(),
        TargetMachine::get_host_cpu_name().to_string(),
        TargetMachine::get_host_cpu_features().to_string(),
    ))
}

/// Checks, optimises and compiles `source` (or takes its object code from the cache), links it
/// and returns the code, the address of `manifest.entry_point`, and whether the object came
/// from the cache. LLVM's optimiser recurses along dependency chains (a frame per link in
/// Reassociate), so all of it runs on a thread of its own whose stack does not depend on the
/// caller's (a test thread has 2 MiB): [`OPTIMISER_STACK`], reserved, and touched only as deep
/// as it goes.
pub fn compile(source: &str, manifest: &Manifest) -> Result<(Jit, usize, bool), RuntimeError> {
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("nablac-llvm".into())
            .stack_size(OPTIMISER_STACK)
            .spawn_scoped(s, || compile_here(source, manifest))
            .map_err(|e| RuntimeError::Host(format!("no thread for LLVM: {e}")))?
            .join()
            .map_err(|_| RuntimeError::Host("LLVM panicked compiling the kernel".into()))?
    })
}

/// [`compile`] on the calling thread.
fn compile_here(source: &str, manifest: &Manifest) -> Result<(Jit, usize, bool), RuntimeError> {
    let (triple, cpu, features) = host()?;
    let host_id = format!("{} {cpu} {features}", triple.as_str().to_string_lossy());
    let key = crate::gpu::cache::key(
        "llvm-object",
        &host_id,
        &[OBJECT_FORMAT.to_string(), manifest.entry_point.clone()],
        source,
    );
    let (object, hit) = match crate::gpu::cache::get(&key, "o") {
        Some(o) => (o, true),
        None => {
            let o = object_code(source, manifest, &triple, &cpu, &features)?;
            crate::gpu::cache::put(&key, "o", &o);
            (o, false)
        }
    };
    let (jit, address) = link(&object, &manifest.entry_point)?;
    Ok((jit, address, hit))
}

/// Parses, checks (module doc), optimises and compiles `source` for this host: the object
/// file's bytes.
fn object_code(
    source: &str,
    manifest: &Manifest,
    triple: &inkwell::targets::TargetTriple,
    cpu: &str,
    features: &str,
) -> Result<Vec<u8>, RuntimeError> {
    let cx = Context::create();
    let buffer = MemoryBuffer::create_from_memory_range_copy(source.as_bytes(), "kernel");
    let module = cx
        .create_module_from_ir(buffer)
        .map_err(|e| bad(format!("LLVM IR does not parse: {}", e.to_string().trim())))?;
    module
        .verify()
        .map_err(|e| bad(format!("LLVM IR does not verify: {}", e.to_string().trim())))?;
    if module.get_first_global().is_some() {
        return Err(bad(
            "the kernel defines global variables; CPU kernels may not",
        ));
    }
    let name = &manifest.entry_point;
    let entry = module
        .get_function(name)
        .filter(|f| f.count_basic_blocks() > 0)
        .ok_or_else(|| {
            bad(format!(
                "the module defines no function {name} (the manifest's entry point)"
            ))
        })?;
    let t = match manifest.precision {
        Precision::F64 => cx.f64_type(),
        Precision::F32 => cx.f32_type(),
    };
    let i64t = cx.i64_type();
    let params: [BasicMetadataTypeEnum; 5] = [
        t.ptr_type(Default::default()).into(),
        i64t.into(),
        i64t.into(),
        i64t.into(),
        cx.f64_type().ptr_type(Default::default()).into(),
    ];
    let want = cx.void_type().fn_type(&params, false);
    if entry.get_type() != want {
        return Err(bad(format!(
            "{name} has type {}, the ABI's is {}",
            entry.get_type().print_to_string(),
            want.print_to_string()
        )));
    }
    let mut f = module.get_first_function();
    while let Some(g) = f {
        let gname = g.get_name().to_string_lossy().into_owned();
        if g.count_basic_blocks() == 0 && !gname.starts_with("llvm.") {
            return Err(bad(format!(
                "the kernel imports {gname}; it may call only LLVM intrinsics"
            )));
        }
        f = g.get_next_function();
    }

    let target = Target::from_triple(triple)
        .map_err(|e| RuntimeError::Host(format!("LLVM target {triple}: {e}")))?;
    // JITDefault: the large code model, as MCJIT compiled these kernels before (constants are
    // reached by absolute address, so the object links wherever its sections land).
    let tm = target
        .create_target_machine(
            triple,
            cpu,
            features,
            OptimizationLevel::Aggressive,
            RelocMode::Default,
            CodeModel::JITDefault,
        )
        .ok_or_else(|| RuntimeError::Host(format!("no LLVM target machine for {triple} {cpu}")))?;
    module.set_triple(triple);
    module.set_data_layout(&tm.get_target_data().get_data_layout());
    let mut f = module.get_first_function();
    while let Some(g) = f {
        if g.count_basic_blocks() > 0 {
            // With AVX-512, 512-bit vector types are legal (LLVM may otherwise split a kernel's
            // <8 x double> in two where it prefers 256-bit vectors).
            let width = if features.contains("+avx512f") {
                "512"
            } else {
                "256"
            };
            for (k, v) in [
                ("target-cpu", cpu),
                ("target-features", features),
                ("min-legal-vector-width", width),
            ] {
                g.add_attribute(
                    inkwell::attributes::AttributeLoc::Function,
                    cx.create_string_attribute(k, v),
                );
            }
        }
        f = g.get_next_function();
    }
    module
        .run_passes("default<O3>", &tm, PassBuilderOptions::create())
        .map_err(|e| RuntimeError::Host(format!("optimising {name}: {e}")))?;
    let object = tm
        .write_to_memory_buffer(&module, FileType::Object)
        .map_err(|e| RuntimeError::Host(format!("compiling {name}: {e}")))?;
    Ok(object.as_slice().to_vec())
}

/// Links an object file into the process through a new LLJIT (the process's own symbols
/// resolve what the code generator calls, e.g. libm for an intrinsic it does not inline) and
/// returns it with the address of `entry`.
fn link(object: &[u8], entry: &str) -> Result<(Jit, usize), RuntimeError> {
    let host = |what: &str, e: String| RuntimeError::Host(format!("LLVM JIT, {what}: {e}"));
    let name = std::ffi::CString::new(entry)
        .map_err(|_| bad(format!("entry point {entry:?} holds a NUL")))?;
    // SAFETY: each call gets the handles the previous ones returned; ownership moves as the
    // C API says (the builder and the object buffer to the JIT, the generator to the dylib);
    // every error is consumed by `take_error`; `Jit` disposes of the JIT once.
    unsafe {
        let mut jit: LLVMOrcLLJITRef = std::ptr::null_mut();
        if let Some(e) = take_error(LLVMOrcCreateLLJIT(&mut jit, LLVMOrcCreateLLJITBuilder())) {
            return Err(host("creating it", e));
        }
        let jit = Jit { jit };
        let dylib = LLVMOrcLLJITGetMainJITDylib(jit.jit);
        let mut generator = std::ptr::null_mut();
        if let Some(e) = take_error(LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(
            &mut generator,
            LLVMOrcLLJITGetGlobalPrefix(jit.jit),
            None,
            std::ptr::null_mut(),
        )) {
            return Err(host("the process's symbols", e));
        }
        LLVMOrcJITDylibAddGenerator(dylib, generator);
        let buffer = MemoryBuffer::create_from_memory_range_copy(object, "kernel.o");
        let raw = buffer.as_mut_ptr();
        std::mem::forget(buffer); // owned by the JIT from here
        if let Some(e) = take_error(LLVMOrcLLJITAddObjectFile(jit.jit, dylib, raw)) {
            return Err(host("adding the object", e));
        }
        let mut address = 0;
        if let Some(e) = take_error(LLVMOrcLLJITLookup(jit.jit, &mut address, name.as_ptr())) {
            return Err(host(&format!("linking {entry}"), e));
        }
        if address == 0 {
            return Err(host(&format!("linking {entry}"), "address 0".into()));
        }
        Ok((jit, address as usize))
    }
}

//! The LLVM CPU kernels (feature `llvm`): LLVM IR text, as `nablac::llvm::emit` writes it,
//! parsed, checked, optimised for this host (O3 with the host's CPU name and features, so AVX2
//! or AVX-512 code where the CPU has it) and JIT-compiled by MCJIT, through inkwell.
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
use inkwell::execution_engine::ExecutionEngine;
use inkwell::memory_buffer::MemoryBuffer;
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{CodeModel, InitializationConfig, RelocMode, Target, TargetMachine};
use inkwell::types::BasicMetadataTypeEnum;
use inkwell::OptimizationLevel;
use std::mem::ManuallyDrop;

/// Does `source` hold LLVM IR text (rather than CLIF)? LLVM's printer starts every module with
/// `; ModuleID`.
pub fn is_llvm_ir(source: &str) -> bool {
    source.trim_start().starts_with("; ModuleID")
}

/// A JIT-compiled LLVM module: its engine (which owns the code) and the context it lives in.
pub struct Jit {
    // Dropped before `context` (fields drop in order; `Drop` below makes it explicit).
    engine: ManuallyDrop<ExecutionEngine<'static>>,
    context: ManuallyDrop<Box<Context>>,
}

// SAFETY: a `Jit` is made on the compiling thread and then only dropped (the code it owns is
// called through a plain function pointer); an LLVM context may move between threads, it only
// must not be used by two at once, and nothing uses it after `compile` returns.
unsafe impl Send for Jit {}

impl Drop for Jit {
    fn drop(&mut self) {
        // SAFETY: the engine borrows the context; it goes first, and neither is used again.
        unsafe {
            ManuallyDrop::drop(&mut self.engine);
            ManuallyDrop::drop(&mut self.context);
        }
    }
}

/// The stack of the thread LLVM compiles on (see [`compile`]); `LLVM_MAX_NODES` (compiler) was
/// measured on the 8 MiB main stack, so this leaves a wide margin.
const OPTIMISER_STACK: usize = 256 << 20;

fn bad(what: impl Into<String>) -> RuntimeError {
    RuntimeError::Kernel(what.into())
}

/// Parses, checks (module doc), optimises and JIT-compiles `source`; returns the module and the
/// address of `manifest.entry_point`. LLVM's optimiser recurses along dependency chains (a
/// frame per link in Reassociate), so all of it runs on a thread of its own whose stack does not
/// depend on the caller's (a test thread has 2 MiB): [`OPTIMISER_STACK`], reserved, and touched
/// only as deep as it goes.
pub fn compile(source: &str, manifest: &Manifest) -> Result<(Jit, usize), RuntimeError> {
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
fn compile_here(source: &str, manifest: &Manifest) -> Result<(Jit, usize), RuntimeError> {
    let context = Box::new(Context::create());
    // SAFETY: the context is boxed (its address is fixed) and outlives every value made in it:
    // `Jit` drops the engine, which owns the module, before the context.
    let cx: &'static Context = unsafe { &*(context.as_ref() as *const Context) };
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

    Target::initialize_native(&InitializationConfig::default())
        .map_err(|e| RuntimeError::Host(format!("LLVM has no target for this host: {e}")))?;
    let triple = TargetMachine::get_default_triple();
    let target = Target::from_triple(&triple)
        .map_err(|e| RuntimeError::Host(format!("LLVM target {triple}: {e}")))?;
    let cpu = TargetMachine::get_host_cpu_name().to_string();
    let features = TargetMachine::get_host_cpu_features().to_string();
    let tm = target
        .create_target_machine(
            &triple,
            &cpu,
            &features,
            OptimizationLevel::Aggressive,
            RelocMode::Default,
            CodeModel::JITDefault,
        )
        .ok_or_else(|| RuntimeError::Host(format!("no LLVM target machine for {triple} {cpu}")))?;
    module.set_triple(&triple);
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
                ("target-cpu", cpu.as_str()),
                ("target-features", features.as_str()),
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
    let engine = module
        .create_jit_execution_engine(OptimizationLevel::Aggressive)
        .map_err(|e| RuntimeError::Host(format!("LLVM JIT for {name}: {e}")))?;
    let address = engine
        .get_function_address(name)
        .map_err(|e| RuntimeError::Host(format!("compiling {name}: {e}")))?;
    let jit = Jit {
        engine: ManuallyDrop::new(engine),
        context: ManuallyDrop::new(context),
    };
    Ok((jit, address))
}

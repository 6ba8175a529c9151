//! Any manifest JSON and kernel bytes to the runtime's loaders: never a panic or a crash, only
//! `Ok` or an error. The input is the manifest, a 0xFF byte (which UTF-8 text never holds), then
//! the kernel source (lossily UTF-8).
//!
//! - the manifest as given: parsed as a host parses it (serde_json), its checks (`layout`,
//!   `cpu::row_len`, the fingerprint) and `Backend::Cpu.load` (which refuses a pair whose
//!   fingerprint, version, target or driver options are wrong);
//! - the same pair made to pass those checks (version, target cpu, compile options, sealed for
//!   the source): `Backend::Cpu.load` then parses the CLIF text with cranelift-reader, checks it
//!   against the CPU kernel ABI and JIT-compiles it. Nothing is run: arbitrary code that the
//!   loader accepts may do anything.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nablac_runtime::manifest::{self, Manifest, Target};
use nablac_runtime::Backend;

fuzz_target!(|data: &[u8]| {
    let (json, source) = match data.iter().position(|&b| b == 0xFF) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    let source = String::from_utf8_lossy(source);
    let Ok(mut m) = serde_json::from_slice::<Manifest>(json) else {
        return;
    };
    let _ = m.layout();
    let _ = nablac_runtime::cpu::row_len(&m);
    let _ = m.fingerprint_of(&source);
    let as_given = Backend::Cpu.load(&source, &m);
    if let Ok(k) = &as_given {
        assert_eq!(k.manifest(), &m);
    }
    m.manifest_version = manifest::MANIFEST_VERSION;
    m.target = Target::Cpu;
    m.compile_options = manifest::compile_options(Target::Cpu);
    m.seal(&source);
    if let Ok(k) = Backend::Cpu.load(&source, &m) {
        assert_eq!(k.manifest(), &m);
        assert!(k.default_market().len() == m.input_defaults.len());
    }
});

//! The snapshot corpus: `tests/in/*.ntape`, each with an optional sidecar `.toml` of options.
//!
//! One loader for every stage's golden tests (plans, kernels, compiler checks, runtime agreement),
//! so they all glob the same cases in the same (sorted) order.

use crate::verify::Verified;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// A case's options, from its sidecar `NAME.toml`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CaseOptions {
    /// Segment counts to plan and emit (1 = the plain kernel).
    pub segments: Vec<u32>,
}

impl Default for CaseOptions {
    fn default() -> Self {
        CaseOptions { segments: vec![1] }
    }
}

/// One corpus case.
#[derive(Clone, Debug)]
pub struct Case {
    /// The file stem, e.g. `asian8`.
    pub name: String,
    pub path: PathBuf,
    pub tape: Verified,
    pub options: CaseOptions,
}

/// The corpus directory: `$NABLAC_CORPUS_DIR` when set (a test binary run away from its
/// checkout, as on the GPU machine), else this repository's `tests/in`.
pub fn dir() -> PathBuf {
    match std::env::var_os("NABLAC_CORPUS_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/in"),
    }
}

/// Every case in `dir`, sorted by name; each tape read and verified. An error names the file.
pub fn load(dir: &Path) -> Result<Vec<Case>, String> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "ntape"))
        .collect();
    paths.sort();
    let mut cases = Vec::new();
    for path in paths {
        let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let tape = crate::format::read(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        let tape = crate::verify::verify(tape).map_err(|e| format!("{}: {e}", path.display()))?;
        let sidecar = path.with_extension("toml");
        let options = if sidecar.exists() {
            let text = std::fs::read_to_string(&sidecar)
                .map_err(|e| format!("{}: {e}", sidecar.display()))?;
            basic_toml::from_str(&text).map_err(|e| format!("{}: {e}", sidecar.display()))?
        } else {
            CaseOptions::default()
        };
        let name = path
            .file_stem()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        cases.push(Case {
            name,
            path,
            tape,
            options,
        });
    }
    Ok(cases)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_corpus_loads() {
        let cases = super::load(&super::dir()).unwrap();
        let names: Vec<&str> = cases.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "asian8",
                "barrier",
                "basket3",
                "digital",
                "european",
                "format2",
                "portfolio",
                "random",
                "relative"
            ]
        );
        let asian = &cases[0];
        assert_eq!(asian.options.segments, [1, 2]);
        assert_eq!(asian.tape.len(), 15 + 6 * 8 + 9);
        assert_eq!(cases[4].options.segments, [1]);
    }
}

//! Writing results so that a failure never leaves a half-written file behind.

use anyhow::{Context, Result};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Files staged beside their destinations and renamed into place together by `commit`. Dropping
/// a `Staged` without committing removes the staged files: an error leaves nothing written.
#[derive(Default)]
pub struct Staged {
    files: Vec<(PathBuf, PathBuf)>,
}

impl Staged {
    pub fn new() -> Self {
        Self::default()
    }

    /// Writes `bytes` to a temporary file next to `dest`.
    pub fn write(&mut self, dest: &Path, bytes: &[u8]) -> Result<()> {
        let name = dest
            .file_name()
            .with_context(|| format!("output path {} names no file", dest.display()))?;
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(".nablac-{}.tmp", std::process::id()));
        let tmp = dest.with_file_name(tmp_name);
        let mut f =
            fs::File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
        self.files.push((tmp.clone(), dest.to_path_buf()));
        f.write_all(bytes)
            .and_then(|_| f.sync_all())
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        Ok(())
    }

    /// Moves every staged file into place.
    pub fn commit(mut self) -> Result<()> {
        for (tmp, dest) in std::mem::take(&mut self.files) {
            fs::rename(&tmp, &dest)
                .with_context(|| format!("cannot move {} to {}", tmp.display(), dest.display()))?;
        }
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        for (tmp, _) in &self.files {
            let _ = fs::remove_file(tmp);
        }
    }
}

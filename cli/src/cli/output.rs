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

    /// Writes `bytes` to a temporary file next to `dest`. Refuses a `dest` that exists and is not
    /// a regular file (a directory, a device node, a FIFO): nablac replaces only regular files.
    pub fn write(&mut self, dest: &Path, bytes: &[u8]) -> Result<()> {
        let name = dest
            .file_name()
            .with_context(|| format!("output path {} names no file", dest.display()))?;
        if let Ok(meta) = fs::symlink_metadata(dest) {
            let meta = if meta.file_type().is_symlink() {
                fs::metadata(dest).unwrap_or(meta)
            } else {
                meta
            };
            if !meta.is_file() {
                anyhow::bail!(
                    "refusing to write {}: it exists and is not a regular file",
                    dest.display()
                );
            }
        }
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

    /// Moves every staged file into place. A rename that fails leaves no temporary file behind
    /// (the destinations were checked by `write`, so that is a race with another process).
    pub fn commit(mut self) -> Result<()> {
        while !self.files.is_empty() {
            let (tmp, dest) = self.files.remove(0);
            if let Err(e) = fs::rename(&tmp, &dest) {
                let _ = fs::remove_file(&tmp);
                return Err(e).with_context(|| {
                    format!("cannot move {} to {}", tmp.display(), dest.display())
                });
            }
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

/// Writes `bytes` to standard output in one go and flushes it (`-o -`). Called once everything
/// else has succeeded, so a refused command writes nothing there either.
pub fn write_stdout(bytes: &[u8]) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|_| out.flush())
        .context("cannot write standard output")
}

//! The server's bundles directory: uploads staged beside the stored
//! bundles while they are checked, and bundles stored under their content
//! hash, so that nothing a request names becomes a path.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The name of a stored bundle's file: its content's SHA-256.
fn bundle_file(bytes: &[u8]) -> String {
    format!("{}.weir", weir_engine::bundle::sha256_hex(bytes))
}

/// Whether `file` may name a file of the bundles directory: records written
/// by earlier versions named theirs after the topology.
pub(super) fn is_plain_file_name(file: &str) -> bool {
    !file.is_empty() && !file.starts_with('.') && !file.contains('/') && !file.contains('\\')
}

/// An uploaded bundle written beside the stored ones while it is checked;
/// removed unless [`Staged::keep`] stores it.
pub(super) struct Staged {
    /// Where the upload is staged.
    pub(super) path: PathBuf,
    file: String,
}

/// Staged files are named `.<counter>.staged`; a restarted server removes
/// the ones a crash left behind.
pub(super) const STAGED_SUFFIX: &str = ".staged";

impl Staged {
    pub(super) fn write(bundles: &Path, bytes: &[u8]) -> Result<Staged> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        std::fs::create_dir_all(bundles).context("creating the bundles directory")?;
        let path = bundles.join(format!(".{}{STAGED_SUFFIX}", NEXT.fetch_add(1, Ordering::Relaxed)));
        std::fs::write(&path, bytes).context("storing the bundle")?;
        Ok(Staged { path, file: bundle_file(bytes) })
    }

    /// Stores the bundle under its content hash (a file that is there
    /// already holds the same bytes).
    pub(super) fn keep(self, bundles: &Path) -> Result<String> {
        std::fs::rename(&self.path, bundles.join(&self.file)).context("storing the bundle")?;
        Ok(self.file.clone())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

//! Compiled components cached on disk, so a second start does not recompile.
//!
//! An entry's name is the SHA-256 of the component's bytes together with the
//! engine's compatibility hash: a new Wasmtime or different engine settings
//! miss the cache rather than load code compiled for something else.

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Where compiled components are kept.
#[derive(Clone, Debug)]
pub struct ComponentCache {
    dir: PathBuf,
}

/// Whether a load found the component already compiled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Loaded compiled code from the cache.
    Hit,
    /// Compiled the component and stored the result.
    Miss,
}

/// Feeds `Hash` output into SHA-256.
struct ShaHasher(Sha256);

impl Hasher for ShaHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
    fn finish(&self) -> u64 {
        unreachable!("only the digest is read")
    }
}

impl ComponentCache {
    /// A cache in `dir`, created on first use.
    pub fn new(dir: impl Into<PathBuf>) -> ComponentCache {
        ComponentCache { dir: dir.into() }
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn entry_path(&self, engine: &Engine, wasm: &[u8]) -> PathBuf {
        let mut hasher = ShaHasher(Sha256::new());
        hasher.write(wasm);
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let digest = hasher.0.finalize();
        let name = hex::encode(digest);
        self.dir.join(format!("{name}.cwasm"))
    }

    /// The compiled form of `wasm`, from the cache when it is there.
    pub fn load(&self, engine: &Engine, wasm: &[u8]) -> Result<(Component, CacheOutcome)> {
        let path = self.entry_path(engine, wasm);
        if path.exists() {
            // SAFETY: entries are written only by `store` below, from
            // `Engine::precompile_component`, under a name that covers the
            // source bytes and the engine's compatibility hash; the rename
            // makes each entry appear whole or not at all.
            match unsafe { Component::deserialize_file(engine, &path) } {
                Ok(component) => return Ok((component, CacheOutcome::Hit)),
                Err(e) => tracing::warn!("ignoring unreadable cache entry {}: {e}", path.display()),
            }
        }
        let compiled = engine.precompile_component(wasm)?;
        // SAFETY: the bytes were produced just now by this engine.
        let component = unsafe { Component::deserialize(engine, &compiled)? };
        if let Err(e) = self.store(&path, &compiled) {
            tracing::warn!("could not cache the compiled component in {}: {e:#}", self.dir.display());
        }
        Ok((component, CacheOutcome::Miss))
    }

    fn store(&self, path: &Path, compiled: &[u8]) -> Result<()> {
        std::fs::create_dir_all(&self.dir).with_context(|| format!("creating {}", self.dir.display()))?;
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, compiled)?;
        std::fs::rename(&tmp, path)?;
        Ok(())
    }
}

/// The default cache directory: `$WEIR_CACHE_DIR`, else the user's cache
/// directory (`$XDG_CACHE_HOME/weir` or `~/.cache/weir`).
pub fn default_cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("WEIR_CACHE_DIR") {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(dir).join("weir");
    }
    match std::env::var_os("HOME") {
        Some(home) => PathBuf::from(home).join(".cache").join("weir"),
        None => std::env::temp_dir().join("weir-cache"),
    }
}

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
use weir_config::sync::Locked;

use super::compile::{self, CompileBounds};

/// Held while a component compiles: one compiles at a time in a process.
/// Compiling takes memory in proportion to a function's control flow (see
/// `compile`), so uploads compiling side by side would multiply what one
/// hostile bundle can take; one at a time they lose little, as each
/// compile already uses every core.
static COMPILING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Where compiled components are kept, and how a missing one is compiled.
#[derive(Clone, Debug)]
pub struct ComponentCache {
    dir: PathBuf,
    /// In a bounded child process (see `compile`), or with `None` in this
    /// one, for components this process's user wrote.
    child: Option<CompileBounds>,
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
    /// A cache in `dir`, created on first use, compiling in this process.
    pub fn new(dir: impl Into<PathBuf>) -> ComponentCache {
        ComponentCache { dir: dir.into(), child: None }
    }

    /// This cache compiling what it misses in a child `weir` process
    /// within `bounds`.
    pub fn compiling_in_child(self, bounds: CompileBounds) -> ComponentCache {
        ComponentCache { child: Some(bounds), ..self }
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
        if let Some(component) = Self::cached(engine, &path) {
            return Ok((component, CacheOutcome::Hit));
        }
        let _one_at_a_time = COMPILING.locked();
        // The same component may have compiled while this load waited.
        if let Some(component) = Self::cached(engine, &path) {
            return Ok((component, CacheOutcome::Hit));
        }
        let compiled = match &self.child {
            Some(bounds) => compile::in_child(wasm, bounds)?,
            None => engine.precompile_component(wasm)?,
        };
        // SAFETY: the bytes were produced just now, by this engine or by a
        // child with its settings (a mismatch fails the compatibility check).
        let component = unsafe { Component::deserialize(engine, &compiled)? };
        if let Err(e) = self.store(&path, &compiled) {
            tracing::warn!("could not cache the compiled component in {}: {e:#}", self.dir.display());
        }
        Ok((component, CacheOutcome::Miss))
    }

    /// The entry at `path`, if there is a readable one.
    fn cached(engine: &Engine, path: &Path) -> Option<Component> {
        if !path.exists() {
            return None;
        }
        // SAFETY: entries are written only by `store` below, from
        // `Engine::precompile_component`, under a name that covers the
        // source bytes and the engine's compatibility hash; the rename
        // makes each entry appear whole or not at all.
        match unsafe { Component::deserialize_file(engine, path) } {
            Ok(component) => Some(component),
            Err(e) => {
                tracing::warn!("ignoring unreadable cache entry {}: {e}", path.display());
                None
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_component_loaded_by_two_threads_at_once_compiles_once() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ComponentCache::new(dir.path());
        let engine = crate::engine(true).unwrap();
        let wasm = std::fs::read(weir_test_guests::WORD_COUNT).unwrap();
        let start = std::sync::Barrier::new(2);
        let outcomes: Vec<CacheOutcome> = std::thread::scope(|scope| {
            let load = || {
                start.wait();
                cache.load(&engine, &wasm).unwrap().1
            };
            let threads = [scope.spawn(load), scope.spawn(load)];
            threads.map(|thread| thread.join().unwrap()).into()
        });
        let mut sorted = outcomes.clone();
        sorted.sort_by_key(|outcome| *outcome == CacheOutcome::Hit);
        assert_eq!(sorted, [CacheOutcome::Miss, CacheOutcome::Hit], "{outcomes:?}");
    }
}

//! A loaded component: compiled (or loaded from the cache), checked for
//! what it imports, and linked, ready to give each operator an instance in
//! a store of its own, with only what its sandbox grants.

use super::cache::{CacheOutcome, ComponentCache};
use super::call::{CallError, settle, within};
use super::compile::CompileRefused;
use super::guest_output::GuestOutput;
use super::host_state::HostState;
use super::instance::Guest;
use super::limits::{MemoryLimiter, call_deadline, deadline_ticks};
use super::random::BatchRandom;
use crate::bindings::{Topology, TopologyPre, WIT_PACKAGE};
use crate::sandbox::OperatorSandbox;
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Engine, Store};
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

/// A component compiled and linked, ready to instantiate.
pub struct LoadedComponent {
    path: PathBuf,
    engine: Engine,
    pre: TopologyPre<HostState>,
    cache_outcome: CacheOutcome,
}

const CORE_MODULE_VERSION: [u8; 4] = [1, 0, 0, 0];

fn check_header(path: &Path, wasm: &[u8]) -> Result<()> {
    if wasm.len() < 8 || &wasm[..4] != b"\0asm" {
        bail!("{} is not a WebAssembly file", path.display());
    }
    if wasm[4..8] == CORE_MODULE_VERSION {
        bail!(
            "{} is a core WebAssembly module, not a component: build the guest for wasm32-wasip2 \
             (cargo build --target wasm32-wasip2), which produces a component",
            path.display()
        );
    }
    Ok(())
}

/// A guest may import WASI 0.2 (linked with nothing granted) and the types
/// of our own package, and nothing else: name what else it asks for.
fn refuse_unknown_imports(path: &Path, engine: &Engine, component: &Component) -> Result<()> {
    let unknown: Vec<String> = component
        .component_type()
        .imports(engine)
        .map(|(name, _)| name.to_owned())
        .filter(|name| {
            !name.starts_with("wasi:")
                && !name.starts_with("weir:topology/types@")
                && !name.starts_with("weir:topology/state@")
        })
        .collect();
    if !unknown.is_empty() {
        bail!(
            "{} cannot be linked: it imports {}, which this host does not provide (guests may import WASI 0.2 only)",
            path.display(),
            unknown.join(", ")
        );
    }
    Ok(())
}

impl LoadedComponent {
    /// Reads, compiles (or loads from `cache`) and links the component at `path`.
    pub fn load(engine: &Engine, cache: &ComponentCache, path: &Path) -> Result<LoadedComponent> {
        let wasm = std::fs::read(path).with_context(|| format!("cannot read component {}", path.display()))?;
        LoadedComponent::from_bytes(engine, cache, path, &wasm)
    }

    /// Compiles (or loads from `cache`) and links the component `wasm`;
    /// errors name it by `path`.
    pub fn from_bytes(engine: &Engine, cache: &ComponentCache, path: &Path, wasm: &[u8]) -> Result<LoadedComponent> {
        check_header(path, wasm)?;
        let (component, cache_outcome) = cache.load(engine, wasm).map_err(|e| {
            let refused = e.is::<CompileRefused>();
            let what =
                if refused { "cannot be compiled within this host's bounds" } else { "is not a valid component" };
            e.context(format!("{} {what}", path.display()))
        })?;
        refuse_unknown_imports(path, engine, &component)?;
        let mut linker = Linker::new(engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        Topology::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |state| state)?;
        let pre = linker
            .instantiate_pre(&component)
            .and_then(TopologyPre::new)
            .map_err(anyhow::Error::from)
            .with_context(|| format!("{} does not implement the {WIT_PACKAGE} world `topology`", path.display()))?;
        Ok(LoadedComponent { path: path.to_owned(), engine: engine.clone(), pre, cache_outcome })
    }

    /// Whether loading found the component compiled in the cache.
    pub fn was_cached(&self) -> bool {
        self.cache_outcome == CacheOutcome::Hit
    }

    /// The component's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A fresh instance, in a store of its own, for `topology`'s `operator`,
    /// with the limits and capabilities of `sandbox` and nothing else.
    pub fn instantiate(&self, topology: &str, operator: &str, sandbox: &OperatorSandbox) -> Result<Guest, CallError> {
        let (stdout, stderr) = GuestOutput::pair(topology, operator, sandbox.log);
        let random = BatchRandom::default();
        let mut wasi = WasiCtxBuilder::new();
        // Filesystem calls run on tokio's blocking pool rather than on the
        // calling thread, so that a read that never returns (a FIFO in a
        // granted directory) leaves a pending future the deadline abandons.
        wasi.stdout(stdout.clone())
            .stderr(stderr.clone())
            .secure_random(random.clone())
            .insecure_random(random.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .allow_blocking_current_thread(false);
        for (host, guest) in &sandbox.read_only_dirs {
            wasi.preopened_dir(host, guest, FsPerms::ReadOnly).map_err(|e| {
                CallError::trap(None, format!("granting {} to operator {operator}: {e:#}", host.display()))
            })?;
        }
        let limiter = MemoryLimiter::new(sandbox.memory_bytes, sandbox.memory_pool.clone());
        let mut store = Store::new(&self.engine, HostState::new(wasi.build(), limiter));
        store.limiter(|state| &mut state.limiter);
        // Instantiation runs guest code too: it gets a call's limits.
        store.set_epoch_deadline(deadline_ticks(sandbox.call_ms));
        let instantiated = within(call_deadline(sandbox.call_ms), self.pre.instantiate_async(&mut store));
        let bindings = settle(&mut store, &stderr, sandbox, instantiated).map_err(|e| match e {
            CallError::Trap { limit, message } => CallError::trap(
                limit,
                format!("instantiating {} for operator {operator}: {message}", self.path.display()),
            ),
            other => other,
        })?;
        Ok(Guest { store, bindings, stdout, stderr, random, sandbox: sandbox.clone() })
    }
}

//! A loaded component, and one sandboxed instance of it per operator.

use super::cache::{CacheOutcome, ComponentCache};
use super::guest_output::GuestOutput;
use crate::bindings::{BatchContext, OperatorError, Topology, TopologyPre, WIT_PACKAGE};
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use wasmtime::component::{Linker, ResourceTable};
use wasmtime::{Engine, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

/// What a guest instance's store holds: WASI with nothing granted.
pub struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

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

impl LoadedComponent {
    /// Reads, compiles (or loads from `cache`) and links the component at `path`.
    pub fn load(engine: &Engine, cache: &ComponentCache, path: &Path) -> Result<LoadedComponent> {
        let wasm = std::fs::read(path).with_context(|| format!("cannot read component {}", path.display()))?;
        check_header(path, &wasm)?;
        let (component, cache_outcome) =
            cache.load(engine, &wasm).with_context(|| format!("{} is not a valid component", path.display()))?;
        let mut linker = Linker::new(engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
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

    /// A fresh instance, in a store of its own, for `operator`.
    pub fn instantiate(&self, operator: &str) -> Result<Guest> {
        let stdout = GuestOutput::new(operator, "stdout");
        let stderr = GuestOutput::new(operator, "stderr");
        let wasi = WasiCtxBuilder::new().stdout(stdout.clone()).stderr(stderr.clone()).build();
        let mut store = Store::new(&self.engine, HostState { wasi, table: ResourceTable::new() });
        let bindings = self
            .pre
            .instantiate(&mut store)
            .map_err(anyhow::Error::from)
            .with_context(|| format!("instantiating {} for operator {operator}", self.path.display()))?;
        Ok(Guest { operator: operator.to_owned(), store, bindings, stdout, stderr })
    }
}

/// Why a call into a guest failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallError {
    /// The guest asked for the batch to be replayed.
    Retry(String),
    /// The guest asked for the topology to halt.
    Fatal(String),
    /// The guest trapped (a panic, an out-of-bounds access, ...); the
    /// instance is dropped and the batch replayed.
    Trap(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Retry(m) => write!(f, "retry: {m}"),
            CallError::Fatal(m) => write!(f, "fatal: {m}"),
            CallError::Trap(m) => write!(f, "trap: {m}"),
        }
    }
}

/// One operator instance: its own store, its own captured output.
pub struct Guest {
    operator: String,
    store: Store<HostState>,
    bindings: Topology,
    stdout: GuestOutput,
    stderr: GuestOutput,
}

type Call<T> = wasmtime::Result<Result<T, OperatorError>>;

impl Guest {
    /// The operator this instance serves.
    pub fn operator(&self) -> &str {
        &self.operator
    }

    fn finish<T>(&mut self, result: Call<T>) -> Result<T, CallError> {
        match result {
            Ok(Ok(value)) => {
                self.stderr.clear_recent();
                self.stdout.clear_recent();
                Ok(value)
            }
            Ok(Err(OperatorError::Retry(m))) => Err(CallError::Retry(m)),
            Ok(Err(OperatorError::Fatal(m))) => Err(CallError::Fatal(m)),
            Err(trap) => {
                // What the guest said last (a panic's message) comes first,
                // the wasm backtrace after it.
                let stderr: Vec<String> = self.stderr.take_recent().into_iter().filter(|l| !l.is_empty()).collect();
                let message = if stderr.is_empty() {
                    format!("{trap:?}")
                } else {
                    format!("guest stderr: {}\n{trap:?}", stderr.join("\n  "))
                };
                Err(CallError::Trap(message))
            }
        }
    }

    /// The component's topology definitions, as JSON.
    pub fn describe(&mut self) -> Result<String> {
        let json = self.bindings.weir_topology_operators().call_describe(&mut self.store);
        json.map_err(|e| anyhow::Error::from(e).context("the component's describe call failed"))
    }

    /// Runs a function over `input`.
    pub fn run_function(&mut self, ctx: &BatchContext, input: &[u8]) -> Result<Vec<u8>, CallError> {
        let result = self.bindings.weir_topology_operators().call_run_function(&mut self.store, ctx, input);
        self.finish(result)
    }

    /// Runs a filter over `input`.
    pub fn run_filter(&mut self, ctx: &BatchContext, input: &[u8]) -> Result<Vec<u8>, CallError> {
        let result = self.bindings.weir_topology_operators().call_run_filter(&mut self.store, ctx, input);
        self.finish(result)
    }

    /// Folds grouped rows into one partial per group.
    pub fn combine_groups(&mut self, ctx: &BatchContext, groups: u32, input: &[u8]) -> Result<Vec<u8>, CallError> {
        let result = self.bindings.weir_topology_operators().call_combine_groups(&mut self.store, ctx, groups, input);
        self.finish(result)
    }

    /// Combines stored values with partials.
    pub fn combine_pairs(&mut self, ctx: &BatchContext, pairs: &[u8]) -> Result<Vec<u8>, CallError> {
        let result = self.bindings.weir_topology_operators().call_combine_pairs(&mut self.store, ctx, pairs);
        self.finish(result)
    }
}

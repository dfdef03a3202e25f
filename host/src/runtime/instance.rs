//! A loaded component, and one sandboxed instance of it per operator.

use super::cache::{CacheOutcome, ComponentCache};
use super::guest_output::{GuestOutput, LogLimitExceeded};
use super::limits::{MemoryLimiter, deadline_ticks};
use super::random::BatchRandom;
use crate::bindings::{
    BatchContext, OperatorError, Operators as GuestOperators, PartitionBatch, SpoutContext, Topology, TopologyPre,
    WIT_PACKAGE,
};
use crate::sandbox::OperatorSandbox;
use crate::state::budget::StateLimitExceeded;
use crate::state::handle::{StateCallError, StateHandle};
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use wasmtime::component::{Component, HasSelf, Linker, Resource, ResourceTable};
use wasmtime::{Engine, Store, Trap};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use weir_sdk::topology::SPOUT_ID;

/// What a guest instance's store holds: WASI with only what was granted, and
/// the instance's memory limiter.
pub struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    limiter: MemoryLimiter,
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl crate::bindings::weir::topology::types::Host for HostState {}

impl crate::bindings::weir::topology::state::Host for HostState {}

/// A state call's answer: a malformed request is the guest's to handle; a
/// limit hit or a failed store traps the call.
fn state_answer<T>(result: Result<T, StateCallError>) -> wasmtime::Result<Result<T, String>> {
    match result {
        Ok(value) => Ok(Ok(value)),
        Err(StateCallError::Request(message)) => Ok(Err(message)),
        Err(StateCallError::Abort(error)) => Err(wasmtime::Error::from_anyhow(error)),
    }
}

impl crate::bindings::weir::topology::state::HostMapState for HostState {
    fn multi_get(&mut self, state: Resource<StateHandle>, keys: Vec<u8>) -> wasmtime::Result<Result<Vec<u8>, String>> {
        state_answer(self.table.get(&state)?.get_packed(&keys))
    }

    fn multi_put(&mut self, state: Resource<StateHandle>, entries: Vec<u8>) -> wasmtime::Result<Result<(), String>> {
        state_answer(self.table.get(&state)?.put_packed(&entries))
    }

    fn drop(&mut self, state: Resource<StateHandle>) -> wasmtime::Result<()> {
        self.table.delete(state)?;
        Ok(())
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
        let (component, cache_outcome) =
            cache.load(engine, wasm).with_context(|| format!("{} is not a valid component", path.display()))?;
        refuse_unknown_imports(path, engine, &component)?;
        let mut linker = Linker::new(engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
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
    pub fn instantiate(&self, topology: &str, operator: &str, sandbox: &OperatorSandbox) -> Result<Guest> {
        let (stdout, stderr) = GuestOutput::pair(topology, operator, sandbox.log);
        let random = BatchRandom::default();
        let mut wasi = WasiCtxBuilder::new();
        wasi.stdout(stdout.clone())
            .stderr(stderr.clone())
            .secure_random(random.clone())
            .insecure_random(random.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .allow_blocking_current_thread(true);
        for (host, guest) in &sandbox.read_only_dirs {
            wasi.preopened_dir(host, guest, FsPerms::ReadOnly)
                .map_err(anyhow::Error::from)
                .with_context(|| format!("granting {} to operator {operator}", host.display()))?;
        }
        let state = HostState {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            limiter: MemoryLimiter::new(sandbox.memory_bytes),
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|state| &mut state.limiter);
        // Instantiation runs guest code too: it gets the same deadline.
        store.set_epoch_deadline(deadline_ticks(sandbox.call_ms));
        let bindings = self
            .pre
            .instantiate(&mut store)
            .map_err(anyhow::Error::from)
            .with_context(|| format!("instantiating {} for operator {operator}", self.path.display()))?;
        Ok(Guest { store, bindings, stdout, stderr, random, sandbox: sandbox.clone() })
    }
}

/// Why a call into a guest failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallError {
    /// The guest asked for the batch to be replayed.
    Retry(String),
    /// The guest asked for the topology to halt.
    Fatal(String),
    /// The guest trapped (a panic, an out-of-bounds access, a limit hit,
    /// ...); the instance is dropped and the batch replayed.
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
    store: Store<HostState>,
    bindings: Topology,
    stdout: GuestOutput,
    stderr: GuestOutput,
    random: BatchRandom,
    sandbox: OperatorSandbox,
}

type Call<T> = wasmtime::Result<Result<T, OperatorError>>;

impl Guest {
    /// Readies the instance for a call on `ctx`'s batch: a fresh CPU
    /// deadline, randomness seeded from the batch.
    fn prepare(&mut self, ctx: &BatchContext) {
        self.store.set_epoch_deadline(deadline_ticks(self.sandbox.call_ms));
        self.random.reseed(&ctx.topology, &ctx.operator, ctx.txid, ctx.partition);
    }

    /// Why a call trapped, in words a user can act on.
    fn explain_trap(&mut self, error: wasmtime::Error) -> String {
        let limit = if let Some(bytes) = self.store.data_mut().limiter.exceeded.take() {
            Some(format!(
                "memory limit of {} MiB exceeded (the guest tried to grow its memory to {:.1} MiB)",
                self.sandbox.memory_bytes >> 20,
                bytes as f64 / f64::from(1 << 20)
            ))
        } else {
            match error.downcast_ref::<Trap>() {
                Some(Trap::Interrupt) => {
                    Some(format!("CPU time limit of {} ms per call exceeded", self.sandbox.call_ms))
                }
                Some(Trap::StackOverflow) => Some("stack overflow: the guest exhausted its call stack".to_owned()),
                _ => error
                    .downcast_ref::<StateLimitExceeded>()
                    .map(ToString::to_string)
                    .or_else(|| error.downcast_ref::<LogLimitExceeded>().map(ToString::to_string)),
            }
        };
        // What the guest said last (a panic's message) comes first, the
        // wasm backtrace after it.
        let stderr: Vec<String> = self.stderr.take_recent().into_iter().filter(|l| !l.is_empty()).collect();
        let mut message = limit.map(|l| format!("{l}\n")).unwrap_or_default();
        if !stderr.is_empty() {
            message.push_str(&format!("guest stderr: {}\n", stderr.join("\n  ")));
        }
        message.push_str(&format!("{error:?}"));
        message
    }

    /// A call's value, or why it failed.
    fn outcome<T>(&mut self, result: Call<T>) -> Result<T, CallError> {
        let outcome = match result {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(OperatorError::Retry(m))) => Err(CallError::Retry(m)),
            Ok(Err(OperatorError::Fatal(m))) => Err(CallError::Fatal(m)),
            Err(error) => Err(CallError::Trap(self.explain_trap(error))),
        };
        // Whatever the call's end, the next one starts afresh: its own
        // lines to quote, its own log budget.
        self.stderr.clear_recent();
        self.stdout.clear_recent();
        outcome
    }

    /// Checks a call's output against the sandbox's output limits. `packed`
    /// says whether it is a packed batch, whose header gives its tuple count
    /// (the batch itself is checked in full by the caller).
    fn check_output(&self, output: &[u8], packed: bool) -> Result<(), CallError> {
        if output.len() as u64 > self.sandbox.output_bytes {
            return Err(CallError::Trap(format!(
                "output limit of {} MiB per call exceeded: the call returned {} bytes",
                self.sandbox.output_bytes >> 20,
                output.len()
            )));
        }
        let tuples = output.first_chunk::<4>().filter(|_| packed).map(|n| u64::from(u32::from_le_bytes(*n)));
        if let Some(tuples) = tuples.filter(|&n| n > self.sandbox.output_tuples) {
            return Err(CallError::Trap(format!(
                "output limit of {} tuples per call exceeded: the call emitted {tuples}",
                self.sandbox.output_tuples
            )));
        }
        Ok(())
    }

    fn finish(&mut self, result: Call<Vec<u8>>, packed: bool) -> Result<Vec<u8>, CallError> {
        let output = self.outcome(result)?;
        self.check_output(&output, packed)?;
        Ok(output)
    }

    /// The size of the instance's largest memory, in bytes, when it passed
    /// three quarters of its limit.
    pub fn nearly_full(&self) -> Option<usize> {
        let limiter = &self.store.data().limiter;
        limiter.nearly_full().then_some(limiter.largest)
    }

    /// Readies the instance for a spout call.
    fn prepare_spout(&mut self, ctx: &SpoutContext) {
        self.store.set_epoch_deadline(deadline_ticks(self.sandbox.call_ms));
        self.random.reseed(&ctx.topology, SPOUT_ID, ctx.txid, 0);
    }

    /// A batch spout's batch for `ctx.txid`; `None` when it has nothing more.
    pub fn emit_batch(&mut self, ctx: &SpoutContext) -> Result<Option<Vec<u8>>, CallError> {
        self.prepare_spout(ctx);
        let result = self.bindings.weir_topology_operators().call_emit_batch(&mut self.store, ctx);
        let batch = self.outcome(result)?;
        if let Some(batch) = &batch {
            self.check_output(batch, true)?;
        }
        Ok(batch)
    }

    /// A partitioned spout's partitions.
    pub fn spout_partitions(&mut self, ctx: &SpoutContext) -> Result<Vec<String>, CallError> {
        self.prepare_spout(ctx);
        let result = self.bindings.weir_topology_operators().call_spout_partitions(&mut self.store, ctx);
        self.outcome(result)
    }

    /// The next batch of a partition, with its metadata.
    pub fn emit_partition(
        &mut self,
        ctx: &SpoutContext,
        partition: &str,
        previous: Option<&[u8]>,
    ) -> Result<Option<PartitionBatch>, CallError> {
        self.prepare_spout(ctx);
        let ops = self.bindings.weir_topology_operators();
        let result = ops.call_emit_partition(&mut self.store, ctx, partition, previous);
        let emitted = self.outcome(result)?;
        if let Some(emitted) = &emitted {
            self.check_output(&emitted.tuples, true)?;
        }
        Ok(emitted)
    }

    /// The batch of a partition that `meta` describes, again.
    pub fn reemit_partition(&mut self, ctx: &SpoutContext, partition: &str, meta: &[u8]) -> Result<Vec<u8>, CallError> {
        self.prepare_spout(ctx);
        let result =
            self.bindings.weir_topology_operators().call_reemit_partition(&mut self.store, ctx, partition, meta);
        self.finish(result, true)
    }

    /// The component's topology definitions, as JSON.
    pub fn describe(&mut self) -> Result<String> {
        self.store.set_epoch_deadline(deadline_ticks(self.sandbox.call_ms));
        let json = self.bindings.weir_topology_operators().call_describe(&mut self.store);
        json.map_err(|e| anyhow::Error::from(e).context("the component's describe call failed"))
    }

    /// Runs a function over `input`.
    pub fn run_function(&mut self, ctx: &BatchContext, input: &[u8]) -> Result<Vec<u8>, CallError> {
        self.prepare(ctx);
        let result = self.bindings.weir_topology_operators().call_run_function(&mut self.store, ctx, input);
        self.finish(result, true)
    }

    /// Runs a filter over `input`.
    pub fn run_filter(&mut self, ctx: &BatchContext, input: &[u8]) -> Result<Vec<u8>, CallError> {
        self.prepare(ctx);
        let result = self.bindings.weir_topology_operators().call_run_filter(&mut self.store, ctx, input);
        self.finish(result, false)
    }

    /// Folds grouped rows into one partial per group.
    pub fn combine_groups(&mut self, ctx: &BatchContext, groups: u32, input: &[u8]) -> Result<Vec<u8>, CallError> {
        self.prepare(ctx);
        let result = self.bindings.weir_topology_operators().call_combine_groups(&mut self.store, ctx, groups, input);
        self.finish(result, true)
    }

    /// Folds grouped rows with a reducer, from `start` or init().
    pub fn reduce_groups(
        &mut self,
        ctx: &BatchContext,
        groups: u32,
        start: &[u8],
        input: &[u8],
    ) -> Result<Vec<u8>, CallError> {
        self.prepare(ctx);
        let ops = self.bindings.weir_topology_operators();
        let result = ops.call_reduce_groups(&mut self.store, ctx, groups, start, input);
        self.finish(result, true)
    }

    /// Runs a general aggregator over grouped rows.
    pub fn aggregate_groups(&mut self, ctx: &BatchContext, groups: u32, input: &[u8]) -> Result<Vec<u8>, CallError> {
        self.prepare(ctx);
        let ops = self.bindings.weir_topology_operators();
        let result = ops.call_aggregate_groups(&mut self.store, ctx, groups, input);
        self.finish(result, true)
    }

    /// Lends `state` to the guest for one call.
    fn with_state<T>(
        &mut self,
        state: &StateHandle,
        call: impl FnOnce(&mut Self, Resource<StateHandle>) -> Call<T>,
    ) -> Result<T, CallError> {
        let resource = self.store.data_mut().table.push(state.clone()).map_err(|e| CallError::Trap(e.to_string()))?;
        let borrowed = Resource::new_borrow(resource.rep());
        let result = call(self, borrowed);
        let _ = self.store.data_mut().table.delete(resource);
        self.outcome(result)
    }

    /// A call that reads or writes `state`: its output is a packed batch.
    fn state_call(
        &mut self,
        ctx: &BatchContext,
        state: &StateHandle,
        call: impl FnOnce(&GuestOperators, &mut Store<HostState>, Resource<StateHandle>) -> Call<Vec<u8>>,
    ) -> Result<Vec<u8>, CallError> {
        self.prepare(ctx);
        let output = self.with_state(state, |guest, handle| {
            call(guest.bindings.weir_topology_operators(), &mut guest.store, handle)
        })?;
        self.check_output(&output, true)?;
        Ok(output)
    }

    /// Runs a state updater over `input`.
    pub fn update_state(
        &mut self,
        ctx: &BatchContext,
        state: &StateHandle,
        input: &[u8],
    ) -> Result<Vec<u8>, CallError> {
        self.state_call(ctx, state, |ops, store, handle| ops.call_update_state(store, ctx, handle, input))
    }

    /// A query function's batch retrieval.
    pub fn batch_retrieve(
        &mut self,
        ctx: &BatchContext,
        state: &StateHandle,
        input: &[u8],
    ) -> Result<Vec<u8>, CallError> {
        self.state_call(ctx, state, |ops, store, handle| ops.call_batch_retrieve(store, ctx, handle, input))
    }

    /// A query function's per-tuple half.
    pub fn execute_query(&mut self, ctx: &BatchContext, input: &[u8], results: &[u8]) -> Result<Vec<u8>, CallError> {
        self.prepare(ctx);
        let ops = self.bindings.weir_topology_operators();
        let result = ops.call_execute_query(&mut self.store, ctx, input, results);
        self.finish(result, true)
    }

    /// Combines stored values with partials.
    pub fn combine_pairs(&mut self, ctx: &BatchContext, pairs: &[u8]) -> Result<Vec<u8>, CallError> {
        self.prepare(ctx);
        let result = self.bindings.weir_topology_operators().call_combine_pairs(&mut self.store, ctx, pairs);
        self.finish(result, true)
    }
}

//! A loaded component, and one sandboxed instance of it per operator.
//!
//! Every call into an instance, its instantiation included, runs as a
//! future under two limits. Guest code is interrupted by the epoch at the
//! call's CPU time limit, as it passes loop heads and calls. A guest waiting
//! in a host call runs no code that could be interrupted, but WASI is linked
//! asynchronously, so such a wait is a pending future, and the thread that
//! runs the call stops waiting at the call's deadline, set past the CPU
//! limit, and abandons it. The abandoned future is dropped, which unwinds
//! the guest's stack, and so is the instance, whose store a trap or an
//! abandoned call leaves unusable.

use super::cache::{CacheOutcome, ComponentCache};
use super::guest_output::{GuestOutput, LogLimitExceeded};
use super::limits::{Limit, MemoryLimiter, call_deadline, deadline_ticks};
use super::random::BatchRandom;
use crate::bindings::{
    BatchContext, OperatorError, OperatorExports, PartitionBatch, SpoutContext, Topology, TopologyPre, WIT_PACKAGE,
};
use crate::sandbox::OperatorSandbox;
use crate::state::budget::StateLimitExceeded;
use crate::state::handle::{StateCallError, StateHandle};
use anyhow::{Context, Result, bail};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::sync::Arc;
use std::task::{self, Poll, Wake, Waker};
use std::time::{Duration, Instant};
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
        let state = HostState {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            limiter: MemoryLimiter::new(sandbox.memory_bytes),
        };
        let mut store = Store::new(&self.engine, state);
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

/// Runs `call` on this thread to its end, or until `deadline` passes:
/// `None` then, and the call is abandoned (its future dropped).
///
/// The thread polls the call and sleeps while it is pending (its guest
/// waits in a host call), until woken or the deadline passes: no timer is
/// registered per call. What the call waits on (WASI's clocks, its
/// filesystem calls on the blocking pool) lives in WASI's ambient tokio
/// runtime: the caller's, where it is a runtime's blocking thread (the
/// server calls guests from `spawn_blocking`), else a runtime of WASI's
/// own. It must not be called from an async task, whose thread must not
/// block.
fn within<F: Future>(deadline: Option<Duration>, call: F) -> Option<F::Output> {
    wasmtime_wasi::runtime::with_ambient_tokio_runtime(|| {
        let until = deadline.map(|deadline| Instant::now() + deadline);
        let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
        let mut context = task::Context::from_waker(&waker);
        let mut call = pin!(call);
        loop {
            if let Poll::Ready(output) = call.as_mut().poll(&mut context) {
                return Some(output);
            }
            match until.map(|until| until.saturating_duration_since(Instant::now())) {
                Some(Duration::ZERO) => return None,
                Some(left) => std::thread::park_timeout(left),
                None => std::thread::park(),
            }
        }
    })
}

/// Wakes the thread that runs a call.
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// What a call into `store` came back with, or why it did not: the limit
/// it hit first, what the guest said last (a panic's message), and the
/// wasm backtrace, in words a user can act on.
fn settle<T>(
    store: &mut Store<HostState>,
    stderr: &GuestOutput,
    sandbox: &OperatorSandbox,
    result: Option<wasmtime::Result<T>>,
) -> Result<T, CallError> {
    let error = match result {
        Some(Ok(value)) => return Ok(value),
        Some(Err(error)) => Some(error),
        None => None,
    };
    let exceeded = store.data_mut().limiter.exceeded.take();
    let (limit, explained) = match (&error, exceeded) {
        (None, _) => (
            Some(Limit::Deadline),
            format!(
                "deadline of {} ms per call exceeded: the guest was blocked in a host call (a WASI sleep or \
                 poll, for example), and the call was abandoned",
                call_deadline(sandbox.call_ms).unwrap_or_default().as_millis()
            ),
        ),
        (Some(_), Some(bytes)) => (
            Some(Limit::Memory),
            format!(
                "memory limit of {} MiB exceeded (the guest tried to grow its memory to {:.1} MiB)",
                sandbox.memory_bytes >> 20,
                bytes as f64 / f64::from(1 << 20)
            ),
        ),
        (Some(error), None) => match error.downcast_ref::<Trap>() {
            Some(Trap::Interrupt) => {
                (Some(Limit::Cpu), format!("CPU time limit of {} ms per call exceeded", sandbox.call_ms))
            }
            Some(Trap::StackOverflow) => {
                (Some(Limit::Stack), "stack overflow: the guest exhausted its call stack".to_owned())
            }
            _ => match (error.downcast_ref::<StateLimitExceeded>(), error.downcast_ref::<LogLimitExceeded>()) {
                (Some(exceeded), _) => (Some(Limit::State), exceeded.to_string()),
                (None, Some(exceeded)) => (Some(Limit::Log), exceeded.to_string()),
                (None, None) => (None, String::new()),
            },
        },
    };
    let mut message = if explained.is_empty() { String::new() } else { format!("{explained}\n") };
    let said: Vec<String> = stderr.take_recent().into_iter().filter(|l| !l.is_empty()).collect();
    if !said.is_empty() {
        message.push_str(&format!("guest stderr: {}\n", said.join("\n  ")));
    }
    if let Some(error) = error {
        message.push_str(&format!("{error:?}"));
    }
    Err(CallError::trap(limit, message.trim_end().to_owned()))
}

/// Why a call into a guest failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallError {
    /// The guest asked for the batch to be replayed.
    Retry(String),
    /// The guest asked for the topology to halt.
    Fatal(String),
    /// The guest trapped (a panic, an out-of-bounds access, ...), hit one of
    /// its sandbox's limits (`limit`), or was abandoned at its deadline; the
    /// instance is dropped and the batch replayed.
    Trap {
        /// The limit the call hit, if that is why it trapped.
        limit: Option<Limit>,
        /// What happened, with what the guest wrote last and its backtrace.
        message: String,
    },
}

impl CallError {
    fn trap(limit: Option<Limit>, message: impl Into<String>) -> CallError {
        CallError::Trap { limit, message: message.into() }
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Retry(m) => write!(f, "retry: {m}"),
            CallError::Fatal(m) => write!(f, "fatal: {m}"),
            CallError::Trap { message, .. } => write!(f, "trap: {message}"),
        }
    }
}

impl std::error::Error for CallError {}

/// One operator instance: its own store, its own captured output.
pub struct Guest {
    store: Store<HostState>,
    bindings: Topology,
    stdout: GuestOutput,
    stderr: GuestOutput,
    random: BatchRandom,
    sandbox: OperatorSandbox,
}

/// What an export call returns: its result, or a trap.
type Returned<T> = wasmtime::Result<Result<T, OperatorError>>;

/// What an export call came back with; `None` when its deadline passed.
type Call<T> = Option<Returned<T>>;

impl Guest {
    /// Readies the instance for a call on `ctx`'s batch: a fresh CPU
    /// deadline, randomness seeded from the batch. Returns the call's deadline.
    fn prepare(&mut self, ctx: &BatchContext) -> Option<Duration> {
        self.random.reseed(&ctx.topology, &ctx.operator, ctx.txid, ctx.partition);
        self.start_call()
    }

    /// Starts a call's CPU time; returns the call's deadline.
    fn start_call(&mut self) -> Option<Duration> {
        self.store.set_epoch_deadline(deadline_ticks(self.sandbox.call_ms));
        call_deadline(self.sandbox.call_ms)
    }

    /// A call's value, or why it failed.
    fn outcome<T>(&mut self, result: Call<T>) -> Result<T, CallError> {
        let outcome = match settle(&mut self.store, &self.stderr, &self.sandbox, result) {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(OperatorError::Retry(m))) => Err(CallError::Retry(m)),
            Ok(Err(OperatorError::Fatal(m))) => Err(CallError::Fatal(m)),
            Err(trap) => Err(trap),
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
            return Err(CallError::trap(
                Some(Limit::Output),
                format!(
                    "output limit of {} MiB per call exceeded: the call returned {} bytes",
                    self.sandbox.output_bytes >> 20,
                    output.len()
                ),
            ));
        }
        let tuples = output.first_chunk::<4>().filter(|_| packed).map(|n| u64::from(u32::from_le_bytes(*n)));
        if let Some(tuples) = tuples.filter(|&n| n > self.sandbox.output_tuples) {
            return Err(CallError::trap(
                Some(Limit::Output),
                format!(
                    "output limit of {} tuples per call exceeded: the call emitted {tuples}",
                    self.sandbox.output_tuples
                ),
            ));
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

    /// Readies the instance for a spout call; returns the call's deadline.
    fn prepare_spout(&mut self, ctx: &SpoutContext) -> Option<Duration> {
        self.random.reseed(&ctx.topology, SPOUT_ID, ctx.txid, 0);
        self.start_call()
    }

    /// A batch spout's batch for `ctx.txid`; `None` when it has nothing more.
    pub fn emit_batch(&mut self, ctx: &SpoutContext) -> Result<Option<Vec<u8>>, CallError> {
        let deadline = self.prepare_spout(ctx);
        let result = within(deadline, self.bindings.weir_topology_operators().call_emit_batch(&mut self.store, ctx));
        let batch = self.outcome(result)?;
        if let Some(batch) = &batch {
            self.check_output(batch, true)?;
        }
        Ok(batch)
    }

    /// A partitioned spout's partitions.
    pub fn spout_partitions(&mut self, ctx: &SpoutContext) -> Result<Vec<String>, CallError> {
        let deadline = self.prepare_spout(ctx);
        let ops = self.bindings.weir_topology_operators();
        let result = within(deadline, ops.call_spout_partitions(&mut self.store, ctx));
        self.outcome(result)
    }

    /// The next batch of a partition, with its metadata.
    pub fn emit_partition(
        &mut self,
        ctx: &SpoutContext,
        partition: &str,
        previous: Option<&[u8]>,
    ) -> Result<Option<PartitionBatch>, CallError> {
        let deadline = self.prepare_spout(ctx);
        let ops = self.bindings.weir_topology_operators();
        let result = within(deadline, ops.call_emit_partition(&mut self.store, ctx, partition, previous));
        let emitted = self.outcome(result)?;
        if let Some(emitted) = &emitted {
            self.check_output(&emitted.tuples, true)?;
        }
        Ok(emitted)
    }

    /// The batch of a partition that `meta` describes, again.
    pub fn reemit_partition(&mut self, ctx: &SpoutContext, partition: &str, meta: &[u8]) -> Result<Vec<u8>, CallError> {
        let deadline = self.prepare_spout(ctx);
        let ops = self.bindings.weir_topology_operators();
        let result = within(deadline, ops.call_reemit_partition(&mut self.store, ctx, partition, meta));
        self.finish(result, true)
    }

    /// The component's topology definitions, as JSON.
    pub fn describe(&mut self) -> Result<String, CallError> {
        let deadline = self.start_call();
        let json = within(deadline, self.bindings.weir_topology_operators().call_describe(&mut self.store));
        let json = settle(&mut self.store, &self.stderr, &self.sandbox, json)?;
        self.check_output(json.as_bytes(), false)?;
        Ok(json)
    }

    /// Runs a function over `input`.
    pub fn run_function(&mut self, ctx: &BatchContext, input: &[u8]) -> Result<Vec<u8>, CallError> {
        let deadline = self.prepare(ctx);
        let ops = self.bindings.weir_topology_operators();
        let result = within(deadline, ops.call_run_function(&mut self.store, ctx, input));
        self.finish(result, true)
    }

    /// Runs a filter over `input`.
    pub fn run_filter(&mut self, ctx: &BatchContext, input: &[u8]) -> Result<Vec<u8>, CallError> {
        let deadline = self.prepare(ctx);
        let ops = self.bindings.weir_topology_operators();
        let result = within(deadline, ops.call_run_filter(&mut self.store, ctx, input));
        self.finish(result, false)
    }

    /// Folds grouped rows into one partial per group.
    pub fn combine_groups(&mut self, ctx: &BatchContext, groups: u32, input: &[u8]) -> Result<Vec<u8>, CallError> {
        let deadline = self.prepare(ctx);
        let ops = self.bindings.weir_topology_operators();
        let result = within(deadline, ops.call_combine_groups(&mut self.store, ctx, groups, input));
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
        let deadline = self.prepare(ctx);
        let ops = self.bindings.weir_topology_operators();
        let result = within(deadline, ops.call_reduce_groups(&mut self.store, ctx, groups, start, input));
        self.finish(result, true)
    }

    /// Runs a general aggregator over grouped rows.
    pub fn aggregate_groups(&mut self, ctx: &BatchContext, groups: u32, input: &[u8]) -> Result<Vec<u8>, CallError> {
        let deadline = self.prepare(ctx);
        let ops = self.bindings.weir_topology_operators();
        let result = within(deadline, ops.call_aggregate_groups(&mut self.store, ctx, groups, input));
        self.finish(result, true)
    }

    /// A call that is lent `state`: its output is a packed batch.
    fn state_call(
        &mut self,
        ctx: &BatchContext,
        state: &StateHandle,
        call: impl AsyncFnOnce(&OperatorExports, &mut Store<HostState>, Resource<StateHandle>) -> Returned<Vec<u8>>,
    ) -> Result<Vec<u8>, CallError> {
        let deadline = self.prepare(ctx);
        let resource =
            self.store.data_mut().table.push(state.clone()).map_err(|e| CallError::trap(None, e.to_string()))?;
        let borrowed = Resource::new_borrow(resource.rep());
        let result = within(deadline, call(self.bindings.weir_topology_operators(), &mut self.store, borrowed));
        let _ = self.store.data_mut().table.delete(resource);
        self.finish(result, true)
    }

    /// Runs a state updater over `input`.
    pub fn update_state(
        &mut self,
        ctx: &BatchContext,
        state: &StateHandle,
        input: &[u8],
    ) -> Result<Vec<u8>, CallError> {
        self.state_call(ctx, state, async |ops, store, handle| ops.call_update_state(store, ctx, handle, input).await)
    }

    /// A query function's batch retrieval.
    pub fn batch_retrieve(
        &mut self,
        ctx: &BatchContext,
        state: &StateHandle,
        input: &[u8],
    ) -> Result<Vec<u8>, CallError> {
        self.state_call(ctx, state, async |ops, store, handle| ops.call_batch_retrieve(store, ctx, handle, input).await)
    }

    /// A query function's per-tuple half.
    pub fn execute_query(&mut self, ctx: &BatchContext, input: &[u8], results: &[u8]) -> Result<Vec<u8>, CallError> {
        let deadline = self.prepare(ctx);
        let ops = self.bindings.weir_topology_operators();
        let result = within(deadline, ops.call_execute_query(&mut self.store, ctx, input, results));
        self.finish(result, true)
    }

    /// Combines stored values with partials.
    pub fn combine_pairs(&mut self, ctx: &BatchContext, pairs: &[u8]) -> Result<Vec<u8>, CallError> {
        let deadline = self.prepare(ctx);
        let ops = self.bindings.weir_topology_operators();
        let result = within(deadline, ops.call_combine_pairs(&mut self.store, ctx, pairs));
        self.finish(result, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::OnceLock;
    use std::time::Instant;
    use weir_sdk::codec::{BatchWriter, ValueRef};

    /// The hostile test guest, compiled once for every test of this module.
    fn hostile() -> &'static LoadedComponent {
        static HOSTILE: OnceLock<LoadedComponent> = OnceLock::new();
        HOSTILE.get_or_init(|| {
            let engine = crate::runtime::engine(true).unwrap();
            let cache = ComponentCache::new(Path::new(weir_test_guests::GUEST_TARGET_DIR).join("compiled-cache"));
            LoadedComponent::load(&engine, &cache, Path::new(weir_test_guests::HOSTILE)).unwrap()
        })
    }

    /// A sandbox with calls of `call_ms` of CPU time.
    fn sandbox(call_ms: u64) -> OperatorSandbox {
        OperatorSandbox {
            memory_bytes: 64 << 20,
            call_ms,
            output_bytes: 4 << 20,
            output_tuples: 100_000,
            read_only_dirs: Vec::new(),
            log: crate::config::LogLimits::default(),
        }
    }

    fn batch(sentence: &str, attempt: u32) -> (BatchContext, Vec<u8>) {
        let mut input = BatchWriter::new(1);
        input.push_row(0, [ValueRef::Str(sentence)]).unwrap();
        let ctx = BatchContext {
            topology: String::new(),
            operator: "attacker".to_owned(),
            txid: 1,
            attempt,
            partition: 0,
            fields: vec!["sentence".to_owned()],
        };
        (ctx, input.finish_batch().into_bytes())
    }

    /// Feeds the sentence "attack" to `topology`'s attacker in a fresh
    /// instance whose calls get `call_ms` of CPU time.
    fn attack(topology: &str, call_ms: u64) -> Result<Vec<u8>, CallError> {
        let mut guest = hostile().instantiate(topology, "attacker", &sandbox(call_ms))?;
        let (ctx, input) = batch("attack", 0);
        guest.run_function(&BatchContext { topology: topology.to_owned(), ..ctx }, &input)
    }

    fn limit_hit(topology: &str, call_ms: u64) -> Option<Limit> {
        match attack(topology, call_ms) {
            Err(CallError::Trap { limit, .. }) => limit,
            other => panic!("{topology}: expected a trap, got {other:?}"),
        }
    }

    #[test]
    fn each_limit_a_call_hits_is_named() {
        for (topology, call_ms, limit) in [
            ("infinite-loop", 100, Limit::Cpu),
            ("sleep-in-wasi", 100, Limit::Deadline),
            ("poll-far-instant", 100, Limit::Deadline),
            ("grow-memory", 10_000, Limit::Memory),
            ("deep-recursion", 10_000, Limit::Stack),
            ("huge-output", 10_000, Limit::Output),
            ("fan-out", 10_000, Limit::Output),
        ] {
            assert_eq!(limit_hit(topology, call_ms), Some(limit), "{topology}");
        }
        assert_eq!(limit_hit("panic", 10_000), None);
    }

    #[test]
    fn a_blocked_call_is_abandoned_at_its_deadline() {
        let started = Instant::now();
        let error = attack("sleep-in-wasi", 100).unwrap_err();
        // The deadline is twice the CPU limit; the guest sleeps for an hour.
        assert!(started.elapsed() < Duration::from_secs(60), "{:?}", started.elapsed());
        assert!(error.to_string().contains("deadline of 200 ms per call exceeded"), "{error}");
        // A fresh instance answers as if nothing happened.
        let mut guest = hostile().instantiate("sleep-in-wasi", "attacker", &sandbox(100)).unwrap();
        let (ctx, input) = batch("calm words", 1);
        let ctx = BatchContext { topology: "sleep-in-wasi".to_owned(), ..ctx };
        assert!(guest.run_function(&ctx, &input).is_ok());
    }

    #[test]
    fn a_call_from_a_runtimes_blocking_thread_is_abandoned_too() {
        // As the server calls guests: from `spawn_blocking` of its runtime.
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let limit =
            runtime.block_on(async { tokio::task::spawn_blocking(|| limit_hit("sleep-in-wasi", 100)).await.unwrap() });
        assert_eq!(limit, Some(Limit::Deadline));
    }
}

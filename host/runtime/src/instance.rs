//! One sandboxed instance of a component per operator, and the calls into
//! it: every export of the WIT interface `operators`, each under its
//! sandbox's limits (see [`super::call`]), through one path
//! ([`Guest::call`]).

use super::call::{CallError, settle, within};
use super::guest_output::GuestOutput;
use super::host_state::HostState;
use super::limits::{Limit, call_deadline, deadline_ticks};
use super::random::BatchRandom;
use crate::bindings::{BatchContext, OperatorError, OperatorExports, PartitionBatch, SpoutContext, Topology};
use crate::sandbox::OperatorSandbox;
use anyhow::Result;
use std::time::Duration;
use wasmtime::Store;
use wasmtime::component::Resource;
use weir_sdk::topology::SPOUT_ID;
use weir_state::handle::StateHandle;

/// One operator instance: its own store, its own captured output. Made
/// by instantiating a component (`super::component`).
pub struct Guest {
    pub(super) store: Store<HostState>,
    /// The component's exports.
    pub(super) bindings: Topology,
    pub(super) stdout: GuestOutput,
    pub(super) stderr: GuestOutput,
    pub(super) random: BatchRandom,
    pub(super) sandbox: OperatorSandbox,
}

/// One call into an operator, with its packed input: which export, over
/// which rows.
#[derive(Clone, Copy, Debug)]
pub enum Request<'a> {
    /// Run a function.
    Function(&'a [u8]),
    /// Run a filter.
    Filter(&'a [u8]),
    /// Fold grouped rows into one partial per group, for this many groups.
    CombineGroups(u32, &'a [u8]),
    /// Combine stored values with partials.
    CombinePairs(&'a [u8]),
    /// Fold grouped rows with a reducer, from start values or init().
    ReduceGroups(u32, &'a [u8], &'a [u8]),
    /// Run a general aggregator over grouped rows.
    AggregateGroups(u32, &'a [u8]),
    /// Run a state updater.
    UpdateState(&'a StateHandle, &'a [u8]),
    /// A query function's batch retrieval.
    BatchRetrieve(&'a StateHandle, &'a [u8]),
    /// A query function's per-tuple half: input rows, then their results.
    ExecuteQuery(&'a [u8], &'a [u8]),
}

/// What an export call returns: its result, or a trap.
type Returned<T> = wasmtime::Result<Result<T, OperatorError>>;

impl Guest {
    /// Readies the instance for a call on `ctx`'s batch: a fresh CPU
    /// deadline, randomness seeded from the batch. Returns the call's deadline.
    fn prepare(&mut self, ctx: &BatchContext) -> Option<Duration> {
        self.random.reseed(&ctx.topology, &ctx.operator, ctx.txid, ctx.partition);
        self.start_call()
    }

    /// Readies the instance for a spout call; returns the call's deadline.
    fn prepare_spout(&mut self, ctx: &SpoutContext) -> Option<Duration> {
        self.random.reseed(&ctx.topology, SPOUT_ID, ctx.txid, 0);
        self.start_call()
    }

    /// Starts a call's CPU time; returns the call's deadline.
    fn start_call(&mut self) -> Option<Duration> {
        self.store.set_epoch_deadline(deadline_ticks(self.sandbox.call_ms));
        call_deadline(self.sandbox.call_ms)
    }

    /// Runs `call` on the instance's exports until `deadline`: what it
    /// returned, or why it trapped or was abandoned.
    fn call<T>(
        &mut self,
        deadline: Option<Duration>,
        call: impl AsyncFnOnce(&OperatorExports, &mut Store<HostState>) -> wasmtime::Result<T>,
    ) -> Result<T, CallError> {
        let result = within(deadline, call(self.bindings.weir_topology_operators(), &mut self.store));
        settle(&mut self.store, &self.stderr, &self.sandbox, result)
    }

    /// Runs an operator's `call` (see [`Guest::call`]): its value, or why it
    /// failed, the guest's own retry or fatal error included.
    fn operator_call<T>(
        &mut self,
        deadline: Option<Duration>,
        call: impl AsyncFnOnce(&OperatorExports, &mut Store<HostState>) -> Returned<T>,
    ) -> Result<T, CallError> {
        let outcome = match self.call(deadline, call) {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(OperatorError::Retry(m))) => Err(CallError::Retry(m)),
            Ok(Err(OperatorError::Fatal(m))) => Err(CallError::Fatal(m)),
            Err(trap) => Err(trap),
        };
        self.store.data_mut().limiter.call_ended();
        // Whatever the call's end, the next one starts afresh: its own
        // lines to quote, its own log budget.
        self.stderr.clear_recent();
        self.stdout.clear_recent();
        outcome
    }

    /// An operator's `call` on `ctx`'s batch, its output checked against
    /// the sandbox's output limits (`packed`: see [`Guest::check_output`]).
    fn batch_call(
        &mut self,
        ctx: &BatchContext,
        packed: bool,
        call: impl AsyncFnOnce(&OperatorExports, &mut Store<HostState>) -> Returned<Vec<u8>>,
    ) -> Result<Vec<u8>, CallError> {
        let deadline = self.prepare(ctx);
        let output = self.operator_call(deadline, call)?;
        self.check_output(&output, packed)?;
        Ok(output)
    }

    /// A spout's `call` for `ctx`'s batch.
    fn spout_call<T>(
        &mut self,
        ctx: &SpoutContext,
        call: impl AsyncFnOnce(&OperatorExports, &mut Store<HostState>) -> Returned<T>,
    ) -> Result<T, CallError> {
        let deadline = self.prepare_spout(ctx);
        self.operator_call(deadline, call)
    }

    /// A [`Guest::batch_call`] that is lent `state`: its output is a packed
    /// batch.
    fn state_call(
        &mut self,
        ctx: &BatchContext,
        state: &StateHandle,
        call: impl AsyncFnOnce(&OperatorExports, &mut Store<HostState>, Resource<StateHandle>) -> Returned<Vec<u8>>,
    ) -> Result<Vec<u8>, CallError> {
        let resource =
            self.store.data_mut().table.push(state.clone()).map_err(|e| CallError::trap(None, e.to_string()))?;
        let borrowed = Resource::new_borrow(resource.rep());
        let output = self.batch_call(ctx, true, async |ops, store| call(ops, store, borrowed).await);
        let _ = self.store.data_mut().table.delete(resource);
        output
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

    /// The size of the instance's memories, in bytes, when the instance is
    /// better replaced (`MemoryLimiter::should_replace`).
    pub fn should_replace(&self) -> Option<usize> {
        let limiter = &self.store.data().limiter;
        limiter.should_replace().then_some(limiter.memory)
    }

    /// The size of the instance's memories, in bytes.
    pub fn memory_bytes(&self) -> usize {
        self.store.data().limiter.memory
    }

    /// A batch spout's batch for `ctx.txid`; `None` when it has nothing more.
    pub fn emit_batch(&mut self, ctx: &SpoutContext) -> Result<Option<Vec<u8>>, CallError> {
        let batch = self.spout_call(ctx, async |ops, store| ops.call_emit_batch(store, ctx).await)?;
        if let Some(batch) = &batch {
            self.check_output(batch, true)?;
        }
        Ok(batch)
    }

    /// A partitioned spout's partitions.
    pub fn spout_partitions(&mut self, ctx: &SpoutContext) -> Result<Vec<String>, CallError> {
        self.spout_call(ctx, async |ops, store| ops.call_spout_partitions(store, ctx).await)
    }

    /// The next batch of a partition, with its metadata.
    pub fn emit_partition(
        &mut self,
        ctx: &SpoutContext,
        partition: &str,
        previous: Option<&[u8]>,
    ) -> Result<Option<PartitionBatch>, CallError> {
        let emitted =
            self.spout_call(ctx, async |ops, store| ops.call_emit_partition(store, ctx, partition, previous).await)?;
        if let Some(emitted) = &emitted {
            self.check_output(&emitted.tuples, true)?;
        }
        Ok(emitted)
    }

    /// The batch of a partition that `meta` describes, again.
    pub fn reemit_partition(&mut self, ctx: &SpoutContext, partition: &str, meta: &[u8]) -> Result<Vec<u8>, CallError> {
        let batch =
            self.spout_call(ctx, async |ops, store| ops.call_reemit_partition(store, ctx, partition, meta).await)?;
        self.check_output(&batch, true)?;
        Ok(batch)
    }

    /// The component's topology definitions, as JSON.
    pub fn describe(&mut self) -> Result<String, CallError> {
        let deadline = self.start_call();
        let json = self.call(deadline, async |ops, store| ops.call_describe(store).await)?;
        self.check_output(json.as_bytes(), false)?;
        Ok(json)
    }

    /// Makes `request` of the operator, for `ctx`'s batch: the export it
    /// names, over its rows (and the state it lends), the output checked
    /// against the sandbox's limits.
    pub fn call_operator(&mut self, ctx: &BatchContext, request: Request<'_>) -> Result<Vec<u8>, CallError> {
        match request {
            Request::Function(input) => {
                self.batch_call(ctx, true, async |ops, store| ops.call_run_function(store, ctx, input).await)
            }
            Request::Filter(input) => {
                self.batch_call(ctx, false, async |ops, store| ops.call_run_filter(store, ctx, input).await)
            }
            Request::CombineGroups(groups, input) => {
                self.batch_call(ctx, true, async |ops, store| ops.call_combine_groups(store, ctx, groups, input).await)
            }
            Request::CombinePairs(pairs) => {
                self.batch_call(ctx, true, async |ops, store| ops.call_combine_pairs(store, ctx, pairs).await)
            }
            Request::ReduceGroups(groups, start, input) => self.batch_call(ctx, true, async |ops, store| {
                ops.call_reduce_groups(store, ctx, groups, start, input).await
            }),
            Request::AggregateGroups(groups, input) => self
                .batch_call(ctx, true, async |ops, store| ops.call_aggregate_groups(store, ctx, groups, input).await),
            Request::UpdateState(state, input) => self.state_call(ctx, state, async |ops, store, handle| {
                ops.call_update_state(store, ctx, handle, input).await
            }),
            Request::BatchRetrieve(state, input) => self.state_call(ctx, state, async |ops, store, handle| {
                ops.call_batch_retrieve(store, ctx, handle, input).await
            }),
            Request::ExecuteQuery(input, results) => {
                self.batch_call(ctx, true, async |ops, store| ops.call_execute_query(store, ctx, input, results).await)
            }
        }
    }
}

//! Where a topology's operators run, and one way to call them: an instance
//! of its component per operator, each in a sandbox of its own, or (for
//! baselines and tests) the same operators compiled into the host.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_plan::Plan;
pub use weir_runtime::Request;
use weir_runtime::bindings::BatchContext;
use weir_runtime::{BatchError, PartitionId};
use weir_runtime::{CallError, Guest, LoadedComponent};
use weir_sdk::codec::{Batch, Buffers};
use weir_sdk::{BatchInfo, Topology, dispatch};

/// The components of a topology: one runs every operator but those mapped
/// to another (a bundle may mix guest languages).
pub struct Components {
    /// The component of every operator not in `by_operator`.
    pub default: Arc<LoadedComponent>,
    /// Operators run by another component.
    pub by_operator: HashMap<String, Arc<LoadedComponent>>,
}

impl Components {
    /// One component for every operator.
    pub fn single(component: Arc<LoadedComponent>) -> Components {
        Components { default: component, by_operator: HashMap::new() }
    }

    /// The component that runs `operator`.
    pub fn for_operator(&self, operator: &str) -> &Arc<LoadedComponent> {
        self.by_operator.get(operator).unwrap_or(&self.default)
    }
}

/// Where operators come from.
#[derive(Clone)]
pub enum OperatorSource {
    /// Components: each operator in its own sandboxed instance.
    Wasm(Arc<Components>),
    /// The topologies compiled natively into this program (the SDK's native
    /// build): no sandbox, no boundary. For baselines and tests.
    Native(fn() -> Vec<Topology>),
}

/// The most buffer room [`Instances::keep_buffers`] keeps between batches,
/// both buffers together: what a guest emitted beyond it (the output limit
/// may be raised) is freed with its batch, not held while the topology
/// idles.
const KEPT_BUFFERS_MAX: usize = 32 << 20;

/// The operator instances of one thread: for components, one store per
/// operator, created on first use and replaced after a trap (a trapped
/// instance cannot be entered again).
pub struct Instances {
    source: OperatorSource,
    plan: Arc<Plan>,
    guests: HashMap<String, Guest>,
    native: Option<Vec<Topology>>,
    /// Time spent in each operator since the last `take_times`.
    times: BTreeMap<String, Duration>,
    /// The buffers of batches this thread processed before, for the next
    /// to be written into ([`Instances::keep_buffers`]), the larger first.
    spare: [Buffers; 2],
}

impl Instances {
    /// Instances of `source`'s operators for `plan`'s topology.
    pub fn new(source: OperatorSource, plan: Arc<Plan>) -> Instances {
        Instances {
            source,
            plan,
            guests: HashMap::new(),
            native: None,
            times: BTreeMap::new(),
            spare: Default::default(),
        }
    }

    /// Keeps the buffers of `batch`, which is no longer read, where they
    /// are among the two largest: at batch 100,000 a function's joined
    /// output runs to some 11 MB and the spout's batch to 6, whose pages a
    /// fresh allocation for each batch faults in again (a tenth of the
    /// run's CPU time).
    pub fn keep_buffers(&mut self, batch: Batch<'static>) {
        let Some(buffers) = batch.into_buffers().filter(|b| b.capacity() <= KEPT_BUFFERS_MAX) else {
            return;
        };
        let [larger, smaller] = &mut self.spare;
        if buffers.capacity() > smaller.capacity() {
            *smaller = buffers;
            if smaller.capacity() > larger.capacity() {
                std::mem::swap(larger, smaller);
            }
            if larger.capacity() + smaller.capacity() > KEPT_BUFFERS_MAX {
                *smaller = Buffers::default();
            }
        }
    }

    /// The larger of the buffers kept (empty where there are none), for a
    /// function's output.
    pub fn take_buffers(&mut self) -> Buffers {
        let larger = std::mem::take(&mut self.spare[0]);
        self.spare.swap(0, 1);
        larger
    }

    /// The smaller of the buffers kept, where there are two and it has
    /// room for `min` bytes (empty otherwise): for the spout's next batch,
    /// the larger staying for a function's output.
    pub fn take_second_buffers(&mut self, min: usize) -> Buffers {
        match &mut self.spare[1] {
            second if second.capacity() >= min => std::mem::take(second),
            _ => Buffers::default(),
        }
    }

    /// The limits `operator` runs under.
    pub fn sandbox(&self, operator: &str) -> &weir_runtime::sandbox::OperatorSandbox {
        self.plan.sandboxes.of(operator)
    }

    /// Time spent in each operator since the last call, and resets it.
    pub fn take_times(&mut self) -> BTreeMap<String, Duration> {
        std::mem::take(&mut self.times)
    }

    /// The linear memory the instances hold, in bytes.
    pub fn memory_bytes(&self) -> usize {
        self.guests.values().map(Guest::memory_bytes).sum()
    }

    /// Instantiates `operator`'s guest, unless it has one: done by its
    /// first call, or earlier, so that its memory is known before then.
    pub fn instantiate(&mut self, operator: &str) -> Result<(), BatchError> {
        let OperatorSource::Wasm(components) = &self.source else { return Ok(()) };
        if !self.guests.contains_key(operator) {
            let guest = components
                .for_operator(operator)
                .instantiate(&self.plan.stored_as, operator, self.plan.sandboxes.of(operator))
                .map_err(|e| BatchError::of_call(operator, &e))?;
            self.guests.insert(operator.to_owned(), guest);
        }
        Ok(())
    }

    /// Calls `operator` on partition `at` of a batch; the error
    /// names the operator.
    pub fn call(
        &mut self,
        operator: &str,
        at: PartitionId,
        fields: &[String],
        request: Request<'_>,
    ) -> Result<Vec<u8>, BatchError> {
        let ctx = BatchContext {
            topology: self.plan.topology.clone(),
            operator: operator.to_owned(),
            txid: at.batch.txid,
            attempt: at.batch.attempt,
            partition: at.partition,
            fields: fields.to_vec(),
        };
        let started = Instant::now();
        let result = match &self.source {
            OperatorSource::Wasm(_) => {
                self.instantiate(operator)?;
                let guest = self.guests.get_mut(operator).expect("instantiated above");
                guest.call_operator(&ctx, request)
            }
            OperatorSource::Native(topologies) => {
                let topologies = self.native.get_or_insert_with(topologies);
                call_native(topologies, ctx, request)
            }
        };
        *self.times.entry(operator.to_owned()).or_default() += started.elapsed();
        if let Some(bytes) = self.guests.get(operator).and_then(Guest::should_replace) {
            // The next call gets a fresh instance rather than a trap.
            tracing::debug!("operator {operator}: replacing its instance, which holds {} MiB", bytes >> 20);
            self.guests.remove(operator);
        }
        result.map_err(|e| {
            if let CallError::Trap { .. } = e {
                // A trapped or abandoned instance cannot be entered again.
                self.guests.remove(operator);
            }
            BatchError::of_call(operator, &e)
        })
    }
}

fn call_native(topologies: &[Topology], ctx: BatchContext, request: Request<'_>) -> Result<Vec<u8>, CallError> {
    let info = BatchInfo {
        topology: ctx.topology,
        operator: ctx.operator,
        txid: ctx.txid,
        attempt: ctx.attempt,
        partition: ctx.partition,
        fields: ctx.fields,
    };
    let result = match request {
        Request::Function(input) => dispatch::run_function(topologies, &info, input),
        Request::Filter(input) => dispatch::run_filter(topologies, &info, input),
        Request::CombineGroups(groups, input) => dispatch::combine_groups(topologies, &info, groups, input),
        Request::CombinePairs(input) => dispatch::combine_pairs(topologies, &info, input),
        Request::ReduceGroups(groups, start, input) => dispatch::reduce_groups(topologies, &info, groups, start, input),
        Request::AggregateGroups(groups, input) => dispatch::aggregate_groups(topologies, &info, groups, input),
        Request::UpdateState(state, input) => dispatch::update_state(topologies, &info, state, input),
        Request::BatchRetrieve(state, input) => dispatch::batch_retrieve(topologies, &info, state, input),
        Request::ExecuteQuery(input, results) => dispatch::execute_query(topologies, &info, input, results),
    };
    result.map_err(|e| match e {
        weir_sdk::Error::Retry(m) => CallError::Retry(m),
        weir_sdk::Error::Fatal(m) => CallError::Fatal(m),
    })
}

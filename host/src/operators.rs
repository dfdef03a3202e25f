//! Where a topology's operators run, and one way to call them: sandboxed
//! component instances, or (for baselines and tests) the same operators
//! compiled into the host.

use crate::bindings::BatchContext;
use crate::plan::Plan;
use crate::process::BatchError;
use crate::runtime::{CallError, Guest, LoadedComponent};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_sdk::{BatchInfo, Topology, dispatch};

/// Where operators come from.
#[derive(Clone)]
pub enum OperatorSource {
    /// A component: each operator in its own sandboxed instance.
    Wasm(Arc<LoadedComponent>),
    /// The topologies compiled natively into this program (the SDK's native
    /// build): no sandbox, no boundary. For baselines and tests.
    Native(fn() -> Vec<Topology>),
}

/// One call into an operator, with its packed input.
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
}

/// The operator instances of one thread: for components, one store per
/// operator, created on first use and replaced after a trap (a trapped
/// instance cannot be entered again).
pub struct Operators {
    source: OperatorSource,
    plan: Arc<Plan>,
    instances: HashMap<String, Guest>,
    native: Option<Vec<Topology>>,
    /// Time spent in each operator since the last `take_times`.
    times: BTreeMap<String, Duration>,
}

impl Operators {
    /// Instances of `source`'s operators for `plan`'s topology.
    pub fn new(source: OperatorSource, plan: Arc<Plan>) -> Operators {
        Operators { source, plan, instances: HashMap::new(), native: None, times: BTreeMap::new() }
    }

    /// Time spent in each operator since the last call, and resets it.
    pub fn take_times(&mut self) -> BTreeMap<String, Duration> {
        std::mem::take(&mut self.times)
    }

    /// Calls `operator` on a batch; the error names the operator.
    pub fn call(
        &mut self,
        operator: &str,
        txid: u64,
        attempt: u32,
        fields: &[String],
        request: Request<'_>,
    ) -> Result<Vec<u8>, BatchError> {
        let ctx = BatchContext {
            topology: self.plan.topology.clone(),
            operator: operator.to_owned(),
            txid,
            attempt,
            partition: 0,
            fields: fields.to_vec(),
        };
        let started = Instant::now();
        let result = match &self.source {
            OperatorSource::Wasm(component) => {
                if !self.instances.contains_key(operator) {
                    let guest = component
                        .instantiate(&self.plan.topology, operator, self.plan.sandboxes.of(operator))
                        .map_err(|e| BatchError::retry(operator, format!("cannot instantiate: {e:#}")))?;
                    self.instances.insert(operator.to_owned(), guest);
                }
                let guest = self.instances.get_mut(operator).expect("instantiated above");
                match request {
                    Request::Function(input) => guest.run_function(&ctx, input),
                    Request::Filter(input) => guest.run_filter(&ctx, input),
                    Request::CombineGroups(groups, input) => guest.combine_groups(&ctx, groups, input),
                    Request::CombinePairs(input) => guest.combine_pairs(&ctx, input),
                }
            }
            OperatorSource::Native(topologies) => {
                let topologies = self.native.get_or_insert_with(topologies);
                call_native(topologies, ctx, request)
            }
        };
        *self.times.entry(operator.to_owned()).or_default() += started.elapsed();
        result.map_err(|e| match e {
            CallError::Retry(m) => BatchError::retry(operator, format!("retry: {m}")),
            CallError::Fatal(m) => BatchError::fatal(operator, format!("fatal: {m}")),
            CallError::Trap(m) => {
                self.instances.remove(operator);
                BatchError::retry(operator, format!("trap: {m}"))
            }
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
    };
    result.map_err(|e| match e {
        weir_sdk::Error::Retry(m) => CallError::Retry(m),
        weir_sdk::Error::Fatal(m) => CallError::Fatal(m),
    })
}

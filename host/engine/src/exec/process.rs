//! The process phase: a batch's process-phase nodes, their partitions in
//! parallel, while earlier batches commit. What the commit phase needs of
//! them is handed over: the inputs of commit-phase nodes, and the partials
//! of persistent aggregates.

use super::context::{Exec, per_partition, take_times};
use super::parts::{Parts, fit_owned};
use super::persistent_aggregate::{self, Partials};
use super::window::{self, Preassigned};
use crate::instances::{Instances, OperatorSource};
use crate::metrics::TupleCounts;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;
use weir_plan::{Op, Phase, Plan};
use weir_runtime::BatchError;
use weir_runtime::BatchId;
use weir_sdk::codec::{Batch, Buffers};

/// What one batch's process phase hands its commit phase.
#[derive(Default)]
pub struct Handover {
    /// Per commit-phase node and input slot: the process-phase input.
    pub(super) inputs: HashMap<(usize, usize), Arc<Parts>>,
    /// Per persistent aggregate: the batch's partial per key, made in the
    /// process phase.
    pub(super) partials: HashMap<usize, Partials>,
    /// Per event-time window: the batch assigned to its windows.
    pub(super) windows: HashMap<usize, Preassigned>,
    /// Tuples in and out of each node of the process phase, and in to each
    /// node of the commit phase it feeds, by operator id.
    pub tuples: BTreeMap<String, TupleCounts>,
}

impl Handover {
    /// A handover of persistent aggregates' partials alone, by node.
    pub fn of_partials(partials: HashMap<usize, Partials>) -> Handover {
        Handover { partials, ..Handover::default() }
    }

    /// The persistent aggregates' partials, by node, where they are all
    /// the commit phase takes; `None` where it takes more.
    pub fn into_partials(self) -> Option<HashMap<usize, Partials>> {
        (self.inputs.is_empty() && self.windows.is_empty()).then_some(self.partials)
    }

    /// About the bytes it holds, until its batch commits.
    pub fn held_bytes(&self) -> usize {
        let inputs: usize = self.inputs.values().map(|parts| super::parts::parts_bytes(parts)).sum();
        let partials: usize = self.partials.values().map(Partials::held_bytes).sum();
        let windows: usize = self.windows.values().map(Preassigned::held_bytes).sum();
        inputs + partials + windows
    }
}

/// Runs the process phase of a plan.
pub struct Processor {
    plan: Arc<Plan>,
    instances: Vec<Instances>,
    nodes: Vec<usize>,
    /// How many of `nodes` read each node's output: a batch's output of a
    /// node is dropped once the last has run, so that a large batch's
    /// stages do not all stay in memory until its end.
    readers: Vec<usize>,
    /// Time the host's own nodes (no guest operator) took since the last
    /// [`Processor::take_times`]: a guest's is counted by its instances.
    host_times: BTreeMap<String, Duration>,
}

impl Processor {
    /// A processor with its own operator instances.
    pub fn new(plan: Arc<Plan>, source: OperatorSource) -> Processor {
        let nodes = plan.data_nodes();
        let mut readers = vec![0; plan.nodes.len()];
        for &p in nodes.iter().flat_map(|&i| &plan.nodes[i].inputs) {
            readers[p] += 1;
        }
        Processor { instances: per_partition(&plan, &source), plan, nodes, readers, host_times: BTreeMap::new() }
    }

    /// Instantiates the guests of the process phase's functions and
    /// filters, as its first batch would; one that fails to is left to
    /// that batch, which reports it.
    pub fn instantiate_guests(&mut self) {
        for &i in &self.nodes {
            let node = &self.plan.nodes[i];
            if node.phase == Phase::Process && matches!(node.op, Op::Function { .. } | Op::Filter { .. }) {
                for instances in self.instances.iter_mut().take(node.parallelism) {
                    let _ = instances.instantiate(&node.id);
                }
            }
        }
    }

    /// The linear memory its operator instances hold, in bytes.
    pub fn memory_bytes(&self) -> usize {
        self.instances.iter().map(Instances::memory_bytes).sum()
    }

    /// Buffers of this batch's or an earlier one's, for the spout's next
    /// batch (see [`Instances::take_second_buffers`]), where they are
    /// large: a smaller buffer allocated afresh comes from memory the heap
    /// already holds, and sending it to the spout's thread cost a fifth
    /// more page faults at batch 1,000.
    pub fn take_input_buffers(&mut self) -> Buffers {
        self.instances.first_mut().map(|instances| instances.take_second_buffers(RECYCLED_MIN)).unwrap_or_default()
    }

    /// Time spent in each operator since the last call, and resets it.
    pub fn take_times(&mut self) -> BTreeMap<String, Duration> {
        let mut times = take_times(&mut self.instances);
        for (operator, time) in std::mem::take(&mut self.host_times) {
            *times.entry(operator).or_default() += time;
        }
        times
    }

    /// Runs `batch` (the spout's tuples) through the process-phase nodes.
    pub fn process(&mut self, id: BatchId, batch: Batch<'static>) -> Result<Handover, BatchError> {
        let plan = Arc::clone(&self.plan);
        let mut exec = Exec {
            plan: &plan,
            instances: &mut self.instances,
            batch: id,
            time_ms: 0,
            late: HashMap::new(),
            watermarks: HashMap::new(),
            views: None,
        };
        let mut outputs: Vec<Option<Arc<Parts>>> = vec![None; plan.nodes.len()];
        let mut readers = self.readers.clone();
        let mut handover = Handover::default();
        let mut spout_batch = Some(batch);
        let mut previous = None;
        for &i in &self.nodes {
            if let Some(done) = previous.replace(i) {
                for &p in &plan.nodes[done].inputs {
                    readers[p] -= 1;
                    if readers[p] == 0 {
                        keep_buffers(exec.instances, outputs[p].take());
                    }
                }
            }
            let node = &plan.nodes[i];
            let tuples_in: u64 = node.inputs.iter().filter_map(|&p| outputs[p].as_deref()).map(tuples_of).sum();
            if node.op == Op::Spout {
                let mut batch = spout_batch.take().expect("one spout");
                let emitted = TupleCounts { tuples_in: 0, tuples_out: batch.len() as u64 };
                handover.tuples.entry(node.id.clone()).or_default().add(emitted);
                let by_origin = plan.tags_origins();
                if by_origin {
                    // Each tuple's tag is its index in the batch, the order
                    // the spout emitted it in: every tuple made of it
                    // carries it on.
                    batch.retag(|index, _| index as u32);
                }
                outputs[i] = Some(Arc::new(fit_owned(vec![batch], node.parallelism, by_origin)));
                continue;
            }
            if node.phase == Phase::Commit {
                handover.tuples.entry(node.id.clone()).or_default().add(TupleCounts { tuples_in, tuples_out: 0 });
                let from_process = |p: &usize| plan.nodes[*p].phase == Phase::Process;
                if matches!(node.op, Op::PersistentAggregate { .. }) && from_process(&node.inputs[0]) {
                    let input = outputs[node.inputs[0]].as_ref().expect("inputs run first");
                    let started = std::time::Instant::now();
                    handover.partials.insert(i, persistent_aggregate::partials(&mut exec, node, input)?);
                    if weir_plan::guest_operators(&node.op) == 0 {
                        *self.host_times.entry(node.id.clone()).or_default() += started.elapsed();
                    }
                    continue;
                }
                if window::preassigns(node) && from_process(&node.inputs[0]) {
                    let input = outputs[node.inputs[0]].as_ref().expect("inputs run first");
                    handover.windows.insert(i, window::preassign(&mut exec, node, input)?);
                    continue;
                }
                for (slot, p) in node.inputs.iter().enumerate().filter(|(_, p)| from_process(p)) {
                    handover.inputs.insert((i, slot), Arc::clone(outputs[*p].as_ref().expect("inputs run first")));
                }
                continue;
            }
            let inputs: Vec<&Parts> =
                node.inputs.iter().map(|&p| &**outputs[p].as_ref().expect("inputs run first")).collect();
            let started = std::time::Instant::now();
            let out = exec.run(i, &inputs)?;
            if weir_plan::guest_operators(&node.op) == 0 {
                *self.host_times.entry(node.id.clone()).or_default() += started.elapsed();
            }
            let counted = TupleCounts { tuples_in, tuples_out: tuples_of(&out) };
            handover.tuples.entry(node.id.clone()).or_default().add(counted);
            outputs[i] = Some(Arc::new(out));
        }
        for output in outputs {
            keep_buffers(exec.instances, output);
        }
        Ok(handover)
    }
}

/// Tuples in a node's output, over its partitions.
fn tuples_of(parts: &Parts) -> u64 {
    parts.iter().map(|batch| batch.len() as u64).sum()
}

/// The least room in buffers worth sending back to the spout.
const RECYCLED_MIN: usize = 1 << 20;

/// Gives the buffers of a node's output that nothing reads any more to the
/// instances of each partition, for a later batch to be written into.
fn keep_buffers(instances: &mut [Instances], output: Option<Arc<Parts>>) {
    if let Some(parts) = output.and_then(|parts| Arc::try_unwrap(parts).ok()) {
        for (instances, batch) in instances.iter_mut().zip(parts) {
            instances.keep_buffers(batch);
        }
    }
}

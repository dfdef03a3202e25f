//! Runs a plan's graph over one batch: the process phase (operators in
//! parallel partitions, while earlier batches commit), the commit phase
//! (state reads and writes, strictly in txid order, committed in one write
//! transaction), and queries (a request through a query stream, reading
//! what is committed).
//!
//! The phases are files of their own: `process`, `commit` and `query`. A
//! node's output is a batch per partition; the operations live by kind:
//! `stream` (functions, filters, repartitioning, joins), `aggregate` and
//! its counting path `count`, `persistent_aggregate`, `window`, and
//! `state_ops` (state updaters and queries). `error` says why a batch failed.

mod aggregate;
mod commit;
mod count;
mod error;
mod persistent_aggregate;
mod process;
mod query;
mod session;
mod state_ops;
mod stream;
mod window;
mod window_tuples;

pub use commit::{Committer, GroupFailure};
pub use persistent_aggregate::Partials;
pub use process::{Handover, Processor};
pub use query::{query, query_over};
pub use weir_runtime::{BatchError, BatchId, Cause, Origin, PartitionId};

use crate::instances::{Instances, OperatorSource, Request};
use error::malformed;
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use weir_plan::{Input, Node, Op, Plan};
use weir_sdk::codec::{Batch, BatchWriter, Row};
use weir_state::handle::StateHandle;
use weir_state::view::Views;

/// A node's output: one batch per partition.
pub type Parts = Vec<Batch<'static>>;

/// About the bytes `parts` hold: each batch's encoded rows and their starts.
pub(crate) fn parts_bytes(parts: &Parts) -> usize {
    parts.iter().map(|part| part.bytes().len() + 4 * part.len()).sum()
}

/// Appends the encoded values at `positions` of `row` to the current row.
fn push_kept(writer: &mut BatchWriter, row: Row<'_>, positions: &[usize]) {
    for &p in positions {
        writer.push_encoded(row.encoded_values().nth(p).expect("position within arity"));
    }
}

/// Copies `row` whole into a new row of `writer`.
fn copy_row(writer: &mut BatchWriter, row: Row<'_>) {
    writer.begin_row(0);
    for value in row.encoded_values() {
        writer.push_encoded(value);
    }
}

/// Copies the fields at `positions` of every row into a new batch.
fn project(batch: &Batch<'_>, positions: &[usize]) -> Batch<'static> {
    let mut writer = BatchWriter::new(positions.len());
    for row in batch.rows() {
        writer.begin_row(row.tag());
        push_kept(&mut writer, row, positions);
    }
    writer.finish_batch()
}

/// The rows an operator reads: the whole batch when it reads every field.
fn guest_input<'b>(batch: &'b Batch<'static>, input: &Input) -> Cow<'b, [u8]> {
    match guest_rows(batch, input) {
        Cow::Borrowed(batch) => Cow::Borrowed(batch.bytes()),
        Cow::Owned(rows) => Cow::Owned(rows.into_bytes()),
    }
}

/// [`guest_input`], as a batch.
fn guest_rows<'b>(batch: &'b Batch<'static>, input: &Input) -> Cow<'b, Batch<'static>> {
    if input.whole_tuple { Cow::Borrowed(batch) } else { Cow::Owned(project(batch, &input.positions)) }
}

/// Most input bytes a call to a function or filter gets: a larger batch
/// goes to it in runs of rows, so that what the guest holds for a call,
/// its memory, stays small however large the batch.
pub(crate) const CALL_INPUT_BYTES: usize = 64 << 10;

/// Every partition's rows in one batch.
fn gather<'a>(parts: &'a [Batch<'static>]) -> Cow<'a, Batch<'static>> {
    Cow::Owned(match parts {
        [one] => return Cow::Borrowed(one),
        _ => {
            let arity = parts.first().map_or(0, Batch::arity);
            let mut writer = BatchWriter::new(arity);
            for row in parts.iter().flat_map(Batch::rows) {
                copy_row(&mut writer, row);
            }
            writer.finish_batch()
        }
    })
}

/// `parts` as `n` partitions: as they are when they already are, else
/// gathered and dealt round-robin.
fn fit<'a>(parts: &'a [Batch<'static>], n: usize) -> Cow<'a, [Batch<'static>]> {
    if parts.len() == n {
        return Cow::Borrowed(parts);
    }
    let all = gather(parts);
    if n == 1 {
        return Cow::Owned(vec![all.into_owned()]);
    }
    Cow::Owned(stream::deal(&all, n, |index, _| index % n))
}

/// [`fit`] for a node's own output.
fn fit_owned(parts: Parts, n: usize) -> Parts {
    if parts.len() == n { parts } else { fit(&parts, n).into_owned() }
}

/// Runs nodes of one plan, with one set of operator instances per
/// partition.
struct Exec<'a> {
    plan: &'a Plan,
    instances: &'a mut [Instances],
    batch: BatchId,
    /// When the batch was emitted, as recorded with it: what its
    /// processing-time windows go by. Only the commit phase runs windows.
    time_ms: u64,
    /// Per window node that found late tuples (or has a late stream): the
    /// tuples, for its late stream and the count of late tuples.
    late: HashMap<usize, Batch<'static>>,
    views: Option<&'a Arc<Mutex<Views>>>,
}

impl<'a> Exec<'a> {
    fn call(
        &mut self,
        partition: usize,
        operator: &str,
        fields: &[String],
        request: Request<'_>,
    ) -> Result<Vec<u8>, BatchError> {
        self.instances[partition].call(operator, self.batch.partition(partition as u32), fields, request)
    }

    /// The states as `node` sees them, in the commit phase or a query.
    fn views(&self, node: &Node) -> Result<&'a Arc<Mutex<Views>>, BatchError> {
        self.views.ok_or_else(|| BatchError::fatal(&node.id, "reads state outside the commit phase"))
    }

    /// The state lent to a call of `node`.
    fn state(&self, node: &Node, state: &str) -> Result<StateHandle, BatchError> {
        Ok(StateHandle::new(Arc::clone(self.views(node)?), state))
    }

    /// Runs `f` over each partition, each with its own instances, at once.
    fn per_partition(
        &mut self,
        parts: &[Batch<'static>],
        f: impl Fn(&mut Instances, u32, &Batch<'static>) -> Result<Batch<'static>, BatchError> + Sync,
    ) -> Result<Parts, BatchError> {
        if let [one] = parts {
            return Ok(vec![f(&mut self.instances[0], 0, one)?]);
        }
        let f = &f;
        std::thread::scope(|scope| {
            let running: Vec<_> = self
                .instances
                .iter_mut()
                .zip(parts)
                .enumerate()
                .map(|(index, (instances, part))| scope.spawn(move || f(instances, index as u32, part)))
                .collect();
            running.into_iter().map(|r| r.join().expect("a partition's thread panicked")).collect()
        })
    }

    /// Runs node `index` over its inputs' outputs.
    fn run(&mut self, index: usize, inputs: &[&Parts]) -> Result<Parts, BatchError> {
        let node = &self.plan.nodes[index];
        let n = node.parallelism;
        let batch = self.batch;
        match &node.op {
            Op::Spout | Op::Query(_) => unreachable!("roots are fed, not run"),
            Op::Function { kind, input, kept, outputs } => {
                let parts = fit(inputs[0], n);
                self.per_partition(&parts, |instances, p, part| {
                    stream::function(instances, node, batch.partition(p), *kind, input, kept, *outputs, part)
                })
            }
            Op::Filter { input, kept } => {
                let parts = fit(inputs[0], n);
                self.per_partition(&parts, |instances, p, part| {
                    stream::filter(instances, node, batch.partition(p), input, kept, part)
                })
            }
            Op::Project(positions) => Ok(inputs[0].iter().map(|part| project(part, positions)).collect()),
            Op::Partition { by, hashed, kept } => Ok(stream::partition(&gather(inputs[0]), by, hashed, kept, n)),
            Op::Merge(per_input) => {
                let parts: Parts = inputs
                    .iter()
                    .zip(per_input)
                    .flat_map(|(parts, positions)| parts.iter().map(|p| project(p, positions)))
                    .collect();
                Ok(fit_owned(parts, n))
            }
            Op::Join { keys, others, kinds } => {
                let gathered: Vec<Batch<'static>> = inputs.iter().map(|parts| gather(parts).into_owned()).collect();
                Ok(fit_owned(vec![stream::join(&node.id, &gathered, keys, others, kinds)?], n))
            }
            Op::Sink { sink, input } => Ok(vec![weir_io::sink::payloads(node, sink, input, &gather(inputs[0]))?]),
            Op::Extreme { by, max, kept } => {
                Ok(fit_owned(vec![stream::extreme(&gather(inputs[0]), by, *max, kept)], n))
            }
            Op::Aggregate { .. } => aggregate::aggregate(self, node, inputs[0]),
            Op::StateQuery { .. } => state_ops::state_query(self, node, inputs[0]),
            Op::PartitionPersist { .. } => state_ops::partition_persist(self, node, inputs[0]),
            Op::Window { .. } => window::window(self, index, inputs[0]),
            Op::LateTuples(kept) => {
                let late = self.late.get(&node.inputs[1]).cloned();
                let late =
                    late.unwrap_or_else(|| BatchWriter::new(inputs[0].first().map_or(0, Batch::arity)).finish_batch());
                Ok(fit_owned(vec![project(&late, kept)], n))
            }
            Op::PersistentAggregate { .. } => {
                let partials = persistent_aggregate::partials(self, node, inputs[0])?;
                persistent_aggregate::persistent_aggregate(self, node, partials)
            }
        }
    }
}

/// Time spent in each operator, summed over partitions.
fn take_times(instances: &mut [Instances]) -> BTreeMap<String, Duration> {
    let mut times = BTreeMap::new();
    for partition in instances {
        for (operator, time) in partition.take_times() {
            *times.entry(operator).or_default() += time;
        }
    }
    times
}

/// One set of operator instances per partition a node of `plan` may run.
fn per_partition(plan: &Arc<Plan>, source: &OperatorSource) -> Vec<Instances> {
    (0..plan.max_parallelism()).map(|_| Instances::new(source.clone(), Arc::clone(plan))).collect()
}

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
//! `state_ops` (state updaters and queries). `parts` holds what they all
//! do with a node's output, `context` what a batch's nodes run with, and
//! `error` how a batch's failures are built.

mod aggregate;
mod commit;
mod context;
mod count;
mod error;
mod open_windows;
mod parts;
mod persistent_aggregate;
mod process;
mod query;
mod session;
mod state_ops;
mod stream;
mod window;
mod window_state;
mod window_tuples;

pub use commit::{Committer, GroupFailure};
pub use open_windows::{MAX_COUNTED_WINDOWS, open_windows};
#[cfg(test)]
pub(crate) use parts::CALL_INPUT_BYTES;
pub use parts::Parts;
pub use persistent_aggregate::Partials;
pub use process::{Handover, Processor};
pub use query::{query, query_over};
pub use weir_runtime::{BatchError, BatchId, Cause, Origin, PartitionId};

use context::Exec;
use parts::{fit, fit_owned, gather, gather_by, project};
use weir_plan::Op;
use weir_sdk::codec::{Batch, BatchWriter};

impl Exec<'_> {
    /// Runs node `index` over its inputs' outputs.
    fn run(&mut self, index: usize, inputs: &[&Parts]) -> Result<Parts, BatchError> {
        let node = &self.plan.nodes[index];
        let n = node.parallelism;
        let batch = self.batch;
        let by_origin = self.plan.tags_origins();
        match &node.op {
            Op::Spout | Op::Query(_) => unreachable!("roots are fed, not run"),
            Op::Function { kind, input, kept, outputs } => {
                let parts = fit(inputs[0], n, by_origin);
                self.per_partition(&parts, |instances, p, part| {
                    stream::function(instances, node, batch.partition(p), *kind, input, kept, *outputs, part, by_origin)
                })
            }
            Op::Filter { input, kept } => {
                let parts = fit(inputs[0], n, by_origin);
                self.per_partition(&parts, |instances, p, part| {
                    stream::filter(instances, node, batch.partition(p), input, kept, part)
                })
            }
            Op::Project(positions) => Ok(inputs[0].iter().map(|part| project(part, positions)).collect()),
            Op::Partition { by, hashed, kept } => {
                Ok(stream::partition(&gather(inputs[0]), by, hashed, kept, n, by_origin))
            }
            Op::Merge(per_input) => {
                let parts: Parts = inputs
                    .iter()
                    .zip(per_input)
                    .flat_map(|(parts, positions)| parts.iter().map(|p| project(p, positions)))
                    .collect();
                Ok(fit_owned(parts, n, by_origin))
            }
            Op::Join { keys, others, kinds } => {
                let gathered: Vec<Batch<'static>> =
                    inputs.iter().map(|parts| gather_by(parts, by_origin).into_owned()).collect();
                Ok(fit_owned(vec![stream::join(&node.id, &gathered, keys, others, kinds)?], n, by_origin))
            }
            Op::Sink { sink, input } => Ok(vec![weir_io::sink::payloads(node, sink, input, &gather(inputs[0]))?]),
            Op::Extreme { by, max, kept } => {
                Ok(fit_owned(vec![stream::extreme(&gather_by(inputs[0], by_origin), by, *max, kept)], n, by_origin))
            }
            Op::Aggregate { .. } => aggregate::aggregate(self, node, inputs[0]),
            Op::StateQuery { .. } => state_ops::state_query(self, node, inputs[0]),
            Op::PartitionPersist { .. } => state_ops::partition_persist(self, node, inputs[0]),
            Op::Window { .. } => window::window(self, index, inputs[0]),
            Op::LateTuples(kept) => {
                let late = self.late.get(&node.inputs[1]).cloned();
                let late =
                    late.unwrap_or_else(|| BatchWriter::new(inputs[0].first().map_or(0, Batch::arity)).finish_batch());
                Ok(fit_owned(vec![project(&late, kept)], n, by_origin))
            }
            Op::PersistentAggregate { .. } => {
                let partials = persistent_aggregate::partials(self, node, inputs[0])?;
                persistent_aggregate::persistent_aggregate(self, node, partials)
            }
        }
    }
}

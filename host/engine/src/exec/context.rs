//! What the nodes of one batch run with: the plan, one set of operator
//! instances per partition, the batch's id and time, and the states as the
//! commit phase sees them.

use super::parts::Parts;
use crate::instances::{Instances, OperatorSource, Request};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use weir_plan::{Node, Plan};
use weir_runtime::{BatchError, BatchId};
use weir_sdk::codec::Batch;
use weir_state::handle::StateHandle;
use weir_state::view::Views;

/// Runs nodes of one plan, with one set of operator instances per
/// partition.
pub(super) struct Exec<'a> {
    pub(super) plan: &'a Plan,
    pub(super) instances: &'a mut [Instances],
    pub(super) batch: BatchId,
    /// When the batch was emitted, as recorded with it: what its
    /// processing-time windows go by. Only the commit phase runs windows.
    pub(super) time_ms: u64,
    /// Per window node that found late tuples (or has a late stream): the
    /// tuples, for its late stream and the count of late tuples.
    pub(super) late: HashMap<usize, Batch<'static>>,
    /// Per time window node: its watermark after the batch, where it has one.
    pub(super) watermarks: HashMap<usize, i64>,
    pub(super) views: Option<&'a Arc<Mutex<Views>>>,
}

impl<'a> Exec<'a> {
    pub(super) fn call(
        &mut self,
        partition: usize,
        operator: &str,
        fields: &[String],
        request: Request<'_>,
    ) -> Result<Vec<u8>, BatchError> {
        self.instances[partition].call(operator, self.batch.partition(partition as u32), fields, request)
    }

    /// The states as `node` sees them, in the commit phase or a query.
    pub(super) fn views(&self, node: &Node) -> Result<&'a Arc<Mutex<Views>>, BatchError> {
        self.views.ok_or_else(|| BatchError::fatal(&node.id, "reads state outside the commit phase"))
    }

    /// The state lent to a call of `node`.
    pub(super) fn state(&self, node: &Node, state: &str) -> Result<StateHandle, BatchError> {
        Ok(StateHandle::new(Arc::clone(self.views(node)?), state))
    }

    /// Runs `f` over each partition, each with its own instances, at once.
    pub(super) fn per_partition(
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
}

/// Time spent in each operator, summed over partitions.
pub(super) fn take_times(instances: &mut [Instances]) -> BTreeMap<String, Duration> {
    let mut times = BTreeMap::new();
    for partition in instances {
        for (operator, time) in partition.take_times() {
            *times.entry(operator).or_default() += time;
        }
    }
    times
}

/// One set of operator instances per partition a node of `plan` may run.
pub(super) fn per_partition(plan: &Arc<Plan>, source: &OperatorSource) -> Vec<Instances> {
    (0..plan.max_parallelism()).map(|_| Instances::new(source.clone(), Arc::clone(plan))).collect()
}

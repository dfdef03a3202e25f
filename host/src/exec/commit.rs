//! The commit phase: a batch's commit-phase nodes, strictly in txid order,
//! reading and writing state through the batch's views; what they wrote is
//! committed with the batch's progress, and the sinks' output into their
//! outboxes, in one write transaction.

use super::error::{BatchError, Origin, state_failure};
use super::process::Handover;
use super::{BatchId, Exec, Parts, per_partition, persistent_aggregate, take_times};
use crate::instances::{Instances, OperatorSource};
use crate::plan::{Op, Phase, Plan};
use crate::sink;
use crate::state::BatchRecord;
use crate::state::store::{BatchCommit, OtherRecords, Store};
use crate::state::view::{StateCache, Views, refresh_caches};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Runs the commit phase of a plan, and keeps its states' caches.
pub struct Committer {
    plan: Arc<Plan>,
    instances: Vec<Instances>,
    nodes: Vec<usize>,
    caches: HashMap<String, StateCache>,
}

impl Committer {
    /// A committer with its own operator instances.
    pub fn new(plan: Arc<Plan>, source: OperatorSource) -> Committer {
        let nodes = plan.data_nodes().into_iter().filter(|&i| plan.nodes[i].phase == Phase::Commit).collect();
        Committer { instances: per_partition(&plan, &source), plan, nodes, caches: HashMap::new() }
    }

    /// Time spent in each operator since the last call, and resets it.
    pub fn take_times(&mut self) -> BTreeMap<String, Duration> {
        take_times(&mut self.instances)
    }

    /// Runs the commit-phase nodes of batch `txid` and commits what they
    /// wrote with the progress record, in one write transaction. Returns
    /// the number of keys written.
    pub fn commit(
        &mut self,
        store: &dyn Store,
        txid: u64,
        record: &BatchRecord,
        handover: Handover,
    ) -> Result<usize, BatchError> {
        let plan = Arc::clone(&self.plan);
        let storage = |e: anyhow::Error| state_failure("(state)", format!("{e:#}"), &e, Origin::State);
        let read = store.snapshot().map_err(storage)?;
        let views =
            Views::new(&*read, &plan.stored_as, &plan.states, &mut self.caches, txid, true, &plan.sandboxes.state)
                .map_err(storage)?;
        let views = Arc::new(Mutex::new(views));
        let result = self.run_nodes(&plan, BatchId { txid, attempt: record.attempt }, &views, handover);
        let views = Arc::try_unwrap(views)
            .ok()
            .expect("no call keeps the views")
            .into_inner()
            .unwrap_or_else(|e| e.into_inner());
        let writes = views.finish(&mut self.caches);
        let committed = result.and_then(|outputs| {
            // The sinks' output commits with the batch, into their outboxes.
            let others: Vec<OtherRecords> = self
                .nodes
                .iter()
                .filter(|&&i| matches!(plan.nodes[i].op, Op::Sink { .. }))
                .map(|&i| sink::outbox(&plan.nodes[i], txid, outputs[i].as_deref().expect("every node ran")))
                .collect();
            let batch = BatchCommit { topology: &plan.stored_as, txid, record, writes: &writes, others: &others };
            store.commit_batch(&batch).map_err(|e| {
                let states: Vec<&str> = plan.states.keys().map(String::as_str).collect();
                state_failure(&states.join(","), format!("commit failed: {e:#}"), &e, Origin::Commit)
            })
        });
        match committed {
            Ok(written) => {
                refresh_caches(&mut self.caches, writes);
                Ok(written)
            }
            Err(e) => {
                // The batch took the entries it wrote out of the caches.
                self.caches.values_mut().for_each(StateCache::clear);
                Err(e)
            }
        }
    }

    fn run_nodes(
        &mut self,
        plan: &Plan,
        batch: BatchId,
        views: &Arc<Mutex<Views>>,
        mut handover: Handover,
    ) -> Result<Vec<Option<Arc<Parts>>>, BatchError> {
        let mut exec = Exec { plan, instances: &mut self.instances, batch, views: Some(views) };
        let mut outputs: Vec<Option<Arc<Parts>>> = vec![None; plan.nodes.len()];
        for &i in &self.nodes {
            let node = &plan.nodes[i];
            let out = match handover.partials.remove(&i) {
                Some(partials) => persistent_aggregate::persistent_aggregate(&mut exec, node, partials)?,
                None => {
                    let inputs: Vec<Arc<Parts>> = (0..node.inputs.len())
                        .map(|slot| match handover.inputs.get(&(i, slot)) {
                            Some(parts) => Arc::clone(parts),
                            None => Arc::clone(outputs[node.inputs[slot]].as_ref().expect("inputs run first")),
                        })
                        .collect();
                    let inputs: Vec<&Parts> = inputs.iter().map(|p| &**p).collect();
                    exec.run(i, &inputs)?
                }
            };
            outputs[i] = Some(Arc::new(out));
        }
        Ok(outputs)
    }
}

//! The commit phase: a batch's commit-phase nodes, strictly in txid order,
//! reading and writing state through the batch's views; what they wrote
//! waits in the commit group, and commits with the group's other batches,
//! their progress and the sinks' output (into their outboxes) in one
//! durable write.

use super::context::{Exec, per_partition, take_times};
use super::error::state_failure;
use super::parts::Parts;
use super::persistent_aggregate;
use super::process::Handover;
use super::window;
use crate::instances::{Instances, OperatorSource};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use weir_io::sink;
use weir_plan::{Op, Phase, Plan};
use weir_runtime::BatchId;
use weir_runtime::{BatchError, Origin};
use weir_state::pending::Pending;
use weir_state::store::{BatchCommit, OtherRecords, Store, Written};
use weir_state::view::{StateCache, StateWrites, Views, refresh_caches};
use weir_state::{BatchRecord, StoreError};

/// Runs the commit phase of a plan, keeps its states' caches and the
/// commit group: batches whose commit phase ran, waiting to commit.
pub struct Committer {
    plan: Arc<Plan>,
    instances: Vec<Instances>,
    nodes: Vec<usize>,
    caches: HashMap<String, StateCache>,
    group: Vec<Prepared>,
    /// Late tuples each window found in the batches committed since the
    /// last [`Committer::take_late`].
    late: BTreeMap<String, u64>,
    /// Bytes a sink's outbox may hold (`--max-outbox-kib`).
    max_outbox_bytes: u64,
    /// Bytes each outbox held committed when the group's first batch was
    /// prepared: nothing commits, and nothing is published, while a group
    /// grows, so it is read once a group.
    outbox_held: HashMap<String, u64>,
    /// Each time window's watermark after the last committed batch that
    /// moved it, since the last [`Committer::take_watermarks`].
    watermarks: BTreeMap<String, i64>,
    /// Time the host's own nodes (no guest operator) took since the last
    /// [`Committer::take_times`]: a guest's is counted by its instances.
    host_times: BTreeMap<String, Duration>,
}

/// A batch whose commit phase ran: what it commits.
struct Prepared {
    txid: u64,
    record: BatchRecord,
    /// Shared with the views of the group's later batches while they run.
    writes: Arc<Vec<StateWrites>>,
    others: Vec<OtherRecords>,
    /// Late tuples per window operator.
    late: BTreeMap<String, u64>,
    /// Watermark per time window operator, after the batch.
    watermarks: BTreeMap<String, i64>,
}

/// What a batch's commit-phase nodes made: each node's output, and the
/// late tuples each window operator found.
struct Ran {
    outputs: Vec<Option<Arc<Parts>>>,
    late: BTreeMap<String, u64>,
    watermarks: BTreeMap<String, i64>,
}

/// A group's commit that failed at one of its batches.
#[derive(Debug)]
pub struct GroupFailure {
    /// The group's batches before it, committed.
    pub committed: usize,
    /// Why it failed.
    pub error: BatchError,
}

impl Committer {
    /// A committer with its own operator instances.
    pub fn new(plan: Arc<Plan>, source: OperatorSource) -> Committer {
        let nodes = plan.data_nodes().into_iter().filter(|&i| plan.nodes[i].phase == Phase::Commit).collect();
        let instances = per_partition(&plan, &source);
        let max_outbox_bytes = weir_config::RunConfig::default().max_outbox_bytes;
        Committer {
            instances,
            plan,
            nodes,
            caches: HashMap::new(),
            group: Vec::new(),
            late: BTreeMap::new(),
            watermarks: BTreeMap::new(),
            host_times: BTreeMap::new(),
            max_outbox_bytes,
            outbox_held: HashMap::new(),
        }
    }

    /// Holds each sink's outbox to `bytes`.
    pub fn bound_outboxes(&mut self, bytes: u64) {
        self.max_outbox_bytes = bytes;
    }

    /// Refuses a batch whose sink output would grow the sink's outbox past
    /// its bound: what it holds (committed, not yet acknowledged), the
    /// group's earlier batches' and this batch's. Nothing can cure it but a
    /// reachable server or a larger bound, so it halts the topology.
    fn check_outbox(
        &mut self,
        committed: &dyn weir_state::store::Snapshot,
        records: &OtherRecords,
    ) -> Result<(), BatchError> {
        let bytes =
            |entries: &[(Vec<u8>, Vec<u8>)]| entries.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum::<u64>();
        let new = bytes(&records.entries);
        if new == 0 {
            return Ok(());
        }
        let grouped: u64 = self
            .group
            .iter()
            .flat_map(|b| &b.others)
            .filter(|o| o.table == records.table)
            .map(|o| bytes(&o.entries))
            .sum();
        let held = match self.outbox_held.get(&records.table) {
            Some(&held) => held,
            None => {
                let held = committed
                    .others(&self.plan.stored_as, &records.table)
                    .map_err(|e| state_failure("(outbox)", format!("{e:#}"), &e, Origin::State))?;
                let held = bytes(&held);
                self.outbox_held.insert(records.table.clone(), held);
                held
            }
        };
        let total = held + grouped + new;
        if total <= self.max_outbox_bytes {
            return Ok(());
        }
        let sink = records.table.strip_prefix("sink/").unwrap_or(&records.table);
        Err(BatchError::fatal(
            sink,
            format!(
                "sink {sink}'s outbox would hold {total} bytes with this batch's output ({new} bytes), past \
                 --max-outbox-kib {} ({} bytes): its server has not acknowledged what it holds; nothing of the \
                 batch was committed (make the server reachable, or raise --max-outbox-kib)",
                self.max_outbox_bytes >> 10,
                self.max_outbox_bytes
            ),
        ))
    }

    /// Time spent in each operator since the last call, and resets it.
    pub fn take_times(&mut self) -> BTreeMap<String, Duration> {
        let mut times = take_times(&mut self.instances);
        for (operator, time) in std::mem::take(&mut self.host_times) {
            *times.entry(operator).or_default() += time;
        }
        times
    }

    /// Late tuples each window found in the batches committed since the
    /// last call, and resets them.
    pub fn take_late(&mut self) -> BTreeMap<String, u64> {
        std::mem::take(&mut self.late)
    }

    /// Each time window operator's watermark after the last batch
    /// committed that moved it, since the last call.
    pub fn take_watermarks(&mut self) -> BTreeMap<String, i64> {
        std::mem::take(&mut self.watermarks)
    }

    /// Batches in the group.
    pub fn grouped(&self) -> usize {
        self.group.len()
    }

    /// Runs the commit-phase nodes of batch `txid`, the one after the
    /// group's last (or after the last committed), over what is committed
    /// and what the group's batches wrote, and adds it to the group. A
    /// batch that fails leaves the group as it was.
    pub fn prepare(
        &mut self,
        store: &dyn Store,
        txid: u64,
        record: &BatchRecord,
        handover: Handover,
    ) -> Result<(), BatchError> {
        if self.group.is_empty() {
            // Commits and publishes since the last group changed the outboxes.
            self.outbox_held.clear();
        }
        let plan = Arc::clone(&self.plan);
        let storage = |e: StoreError| state_failure("(state)", format!("{e:#}"), &e, Origin::State);
        let committed = store.snapshot().map_err(storage)?;
        let layers = self.group.iter().map(|b| (b.txid, Arc::clone(&b.writes))).collect();
        let read = Pending::new(&*committed, &plan.stored_as, layers);
        let views =
            Views::new(&read, &plan.stored_as, &plan.states, &mut self.caches, txid, true, &plan.sandboxes.state)
                .map_err(storage)?;
        let views = Arc::new(Mutex::new(views));
        let batch = BatchId { txid, attempt: record.attempt };
        let result = self.run_nodes(&plan, batch, record.time_ms, &views, handover);
        let views = Arc::try_unwrap(views)
            .ok()
            .expect("no call keeps the views")
            .into_inner()
            .unwrap_or_else(|e| e.into_inner());
        let writes = views.finish(&mut self.caches);
        match result {
            Ok(Ran { outputs, late, watermarks }) => {
                // The sinks' output commits with the batch, into their outboxes.
                let others: Vec<OtherRecords> = self
                    .nodes
                    .iter()
                    .filter(|&&i| matches!(plan.nodes[i].op, Op::Sink { .. }))
                    .map(|&i| sink::outbox(&plan.nodes[i], txid, outputs[i].as_deref().expect("every node ran")))
                    .collect();
                if let Err(e) = others.iter().try_for_each(|records| self.check_outbox(&*committed, records)) {
                    self.caches.values_mut().for_each(StateCache::clear);
                    return Err(e);
                }
                let writes = Arc::new(writes);
                self.group.push(Prepared { txid, record: record.clone(), writes, others, late, watermarks });
                Ok(())
            }
            Err(e) => {
                // The batch took the entries it wrote out of the caches.
                self.caches.values_mut().for_each(StateCache::clear);
                Err(e)
            }
        }
    }

    /// Commits the group in one durable write and empties it; returns the
    /// number of keys written. Should that write fail, its batches commit
    /// one by one, in order, up to the one that fails: the failure names
    /// how many did.
    pub fn commit_group(&mut self, store: &dyn Store) -> Result<usize, GroupFailure> {
        self.commit_group_with(store, None)
    }

    /// [`Committer::commit_group`], telling `written` what
    /// [`Store::commit_group_telling`] tells. Where the group's write
    /// failed and its batches committed one by one, a key may be told
    /// again: the last told is what holds.
    pub fn commit_group_telling(
        &mut self,
        store: &dyn Store,
        written: &mut Written<'_>,
    ) -> Result<usize, GroupFailure> {
        self.commit_group_with(store, Some(written))
    }

    fn commit_group_with(
        &mut self,
        store: &dyn Store,
        mut written: Option<&mut Written<'_>>,
    ) -> Result<usize, GroupFailure> {
        let group = std::mem::take(&mut self.group);
        let topology = self.plan.stored_as.as_str();
        let commits: Vec<BatchCommit<'_>> = group
            .iter()
            .map(|b| BatchCommit {
                topology,
                txid: b.txid,
                record: &b.record,
                writes: b.writes.as_slice(),
                others: &b.others,
            })
            .collect();
        let mut commit = |batches: &[BatchCommit<'_>]| match written.as_mut() {
            Some(written) => store.commit_group_telling(batches, *written),
            None => store.commit_group(batches),
        };
        let mut outcome = commit(&commits).map_err(|e| (0, e));
        if outcome.is_err() && group.len() > 1 {
            let mut count = 0;
            outcome = commits
                .iter()
                .enumerate()
                .try_for_each(|(at, batch)| {
                    count += commit(std::slice::from_ref(batch)).map_err(|e| (at, e))?;
                    Ok(())
                })
                .map(|()| count);
        }
        drop(commits);
        let committed = outcome.as_ref().map_or_else(|(at, _)| *at, |_| group.len());
        for batch in &group[..committed] {
            for (window, n) in &batch.late {
                *self.late.entry(window.clone()).or_default() += n;
            }
            // In txid order: the last committed batch's stand.
            self.watermarks.extend(batch.watermarks.iter().map(|(window, w)| (window.clone(), *w)));
        }
        match outcome {
            Ok(written) => {
                for batch in group {
                    // No views hold them now; were one to, the keys stay
                    // out of the cache and are read from the store.
                    if let Ok(writes) = Arc::try_unwrap(batch.writes) {
                        refresh_caches(&mut self.caches, writes);
                    }
                }
                Ok(written)
            }
            Err((committed, e)) => {
                // The group's batches took the entries they wrote out of the
                // caches.
                self.caches.values_mut().for_each(StateCache::clear);
                let states: Vec<&str> = self.plan.states.keys().map(String::as_str).collect();
                let error = state_failure(&states.join(","), format!("commit failed: {e:#}"), &e, Origin::Commit);
                Err(GroupFailure { committed, error })
            }
        }
    }

    fn run_nodes(
        &mut self,
        plan: &Plan,
        batch: BatchId,
        time_ms: u64,
        views: &Arc<Mutex<Views>>,
        mut handover: Handover,
    ) -> Result<Ran, BatchError> {
        let mut exec = Exec {
            plan,
            instances: &mut self.instances,
            batch,
            time_ms,
            late: HashMap::new(),
            watermarks: HashMap::new(),
            views: Some(views),
        };
        let mut outputs: Vec<Option<Arc<Parts>>> = vec![None; plan.nodes.len()];
        for &i in &self.nodes {
            let node = &plan.nodes[i];
            let preassigned = handover.windows.remove(&i);
            let started = std::time::Instant::now();
            let out = match (handover.partials.remove(&i), preassigned) {
                (Some(partials), _) => persistent_aggregate::persistent_aggregate(&mut exec, node, partials)?,
                (None, Some(preassigned)) => window::window_preassigned(&mut exec, i, preassigned)?,
                (None, None) => {
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
            if weir_plan::guest_operators(&node.op) == 0 {
                *self.host_times.entry(node.id.clone()).or_default() += started.elapsed();
            }
            outputs[i] = Some(Arc::new(out));
        }
        let late = exec.late.iter().map(|(&window, tuples)| (plan.nodes[window].id.clone(), tuples.len() as u64));
        let watermarks = exec.watermarks.iter().map(|(&window, &w)| (plan.nodes[window].id.clone(), w));
        Ok(Ran { outputs, late: late.collect(), watermarks: watermarks.collect() })
    }
}

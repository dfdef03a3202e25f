//! Runs a plan's graph over one batch: the process phase (operators in
//! parallel partitions, while earlier batches commit), the commit phase
//! (state reads and writes, strictly in txid order, committed in one write
//! transaction), and queries (a request through a query stream, reading
//! what is committed).
//!
//! A node's output is a batch per partition; each operation kind lives in
//! its own module.

mod aggregate;
mod persist;
mod stream;

use crate::instances::{Instances, OperatorSource, Request};
use crate::plan::{Input, Node, Op, Phase, Plan};
use crate::runtime::{CallError, Limit};
use crate::state::handle::StateHandle;
use crate::state::view::{StateCache, Views, refresh_caches};
use crate::state::{BatchRecord, Db};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use weir_sdk::codec::{Batch, BatchWriter, Row, Value, ValueRef};

pub use aggregate::Partials;

/// Why a batch failed, where the failure came from, and whether replaying
/// the batch may help.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchError {
    /// The operator at fault (or the state, for storage errors).
    pub operator: String,
    /// Where the failure came from.
    pub origin: Origin,
    /// False when the topology must halt at once.
    pub retryable: bool,
    /// What went wrong.
    pub message: String,
}

/// Where a batch failure came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Origin {
    /// A call into an operator, or what it returned.
    Operator(Cause),
    /// A call into the guest spout, or what it emitted.
    Spout(Cause),
    /// Reading or writing a state.
    State,
    /// The batch was not processed within the batch deadline.
    Deadline,
    /// The batch's write transaction.
    Commit,
}

/// What went wrong in a guest's call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cause {
    /// The guest returned an error, or a result the host refused.
    Returned,
    /// The guest's instance trapped, its call was abandoned at its deadline,
    /// or its output passed a limit; `Some` names the limit it hit.
    Trapped(Option<Limit>),
}

impl Cause {
    /// The cause of a failed call.
    pub fn of(error: &CallError) -> Cause {
        match error {
            CallError::Retry(_) | CallError::Fatal(_) => Cause::Returned,
            CallError::Trap { limit, .. } => Cause::Trapped(*limit),
        }
    }
}

impl BatchError {
    /// An error of `operator` that replaying the batch may cure.
    pub fn retry(operator: &str, message: impl Into<String>) -> BatchError {
        BatchError {
            operator: operator.to_owned(),
            origin: Origin::Operator(Cause::Returned),
            retryable: true,
            message: message.into(),
        }
    }

    /// An error of `operator` that halts the topology.
    pub fn fatal(operator: &str, message: impl Into<String>) -> BatchError {
        BatchError { retryable: false, ..BatchError::retry(operator, message) }
    }

    /// The same error, come from `origin`.
    pub fn with_origin(self, origin: Origin) -> BatchError {
        BatchError { origin, ..self }
    }

    /// The error of a failed call into `operator`: a retry or a trap is
    /// retried, a fatal error is not.
    pub fn of_call(operator: &str, error: &CallError) -> BatchError {
        BatchError {
            operator: operator.to_owned(),
            origin: Origin::Operator(Cause::of(error)),
            retryable: !matches!(error, CallError::Fatal(_)),
            message: error.to_string(),
        }
    }
}

impl fmt::Display for BatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.origin {
            // A spout's message names it.
            Origin::Spout(_) => f.write_str(&self.message),
            _ => write!(f, "operator {}: {}", self.operator, self.message),
        }
    }
}

impl std::error::Error for BatchError {}

/// A state's error, come from `origin`: fatal when replaying the batch
/// cannot cure it (see [`crate::state::StateError`]).
fn state_failure(operator: &str, message: String, error: &anyhow::Error, origin: Origin) -> BatchError {
    BatchError { retryable: !crate::state::retry_cannot_help(error), ..BatchError::retry(operator, message) }
        .with_origin(origin)
}

fn malformed(operator: &str, what: impl fmt::Display) -> BatchError {
    BatchError::retry(operator, format!("returned a malformed batch: {what}"))
}

/// A node's output: one batch per partition.
pub type Parts = Vec<Batch<'static>>;

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
fn guest_input<'b>(batch: &'b Batch<'_>, input: &Input) -> Cow<'b, [u8]> {
    if input.whole_tuple {
        Cow::Borrowed(batch.bytes())
    } else {
        Cow::Owned(project(batch, &input.positions).into_bytes())
    }
}

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

/// What one batch's process phase hands its commit phase.
#[derive(Default)]
pub struct Handover {
    /// Per commit-phase node and input slot: the process-phase input.
    inputs: HashMap<(usize, usize), Arc<Parts>>,
    /// Per persistent aggregate: the batch's partial per key, made in the
    /// process phase.
    partials: HashMap<usize, Partials>,
}

/// Runs nodes of one plan, with one set of operator instances per
/// partition.
struct Exec<'a> {
    plan: &'a Plan,
    instances: &'a mut [Instances],
    txid: u64,
    attempt: u32,
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
        let batch = (self.txid, self.attempt, partition as u32);
        self.instances[partition].call(operator, batch, fields, request)
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
        let batch = (self.txid, self.attempt);
        match &node.op {
            Op::Spout | Op::Query(_) => unreachable!("roots are fed, not run"),
            Op::Function { kind, input, kept, outputs } => {
                let parts = fit(inputs[0], n);
                self.per_partition(&parts, |instances, p, part| {
                    stream::function(instances, node, (batch.0, batch.1, p), *kind, input, kept, *outputs, part)
                })
            }
            Op::Filter { input, kept } => {
                let parts = fit(inputs[0], n);
                self.per_partition(&parts, |instances, p, part| {
                    stream::filter(instances, node, (batch.0, batch.1, p), input, kept, part)
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
            Op::Extreme { by, max, kept } => {
                Ok(fit_owned(vec![stream::extreme(&gather(inputs[0]), by, *max, kept)], n))
            }
            Op::Aggregate { .. } => aggregate::aggregate(self, node, inputs[0]),
            Op::StateQuery { .. } => persist::state_query(self, node, inputs[0]),
            Op::PartitionPersist { .. } => persist::partition_persist(self, node, inputs[0]),
            Op::PersistentAggregate { .. } => {
                let partials = aggregate::partials(self, node, inputs[0])?;
                persist::persistent_aggregate(self, node, partials)
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

/// Runs the process phase of a plan.
pub struct Processor {
    plan: Arc<Plan>,
    instances: Vec<Instances>,
    nodes: Vec<usize>,
}

impl Processor {
    /// A processor with its own operator instances.
    pub fn new(plan: Arc<Plan>, source: OperatorSource) -> Processor {
        let nodes = plan.data_nodes();
        Processor { instances: per_partition(&plan, &source), plan, nodes }
    }

    /// Time spent in each operator since the last call, and resets it.
    pub fn take_times(&mut self) -> BTreeMap<String, Duration> {
        take_times(&mut self.instances)
    }

    /// Runs `batch` (the spout's tuples) through the process-phase nodes.
    pub fn process(&mut self, txid: u64, attempt: u32, batch: Batch<'static>) -> Result<Handover, BatchError> {
        let plan = Arc::clone(&self.plan);
        let mut exec = Exec { plan: &plan, instances: &mut self.instances, txid, attempt, views: None };
        let mut outputs: Vec<Option<Arc<Parts>>> = vec![None; plan.nodes.len()];
        let mut handover = Handover::default();
        let mut spout_batch = Some(batch);
        for &i in &self.nodes {
            let node = &plan.nodes[i];
            if node.op == Op::Spout {
                let batch = spout_batch.take().expect("one spout");
                outputs[i] = Some(Arc::new(fit_owned(vec![batch], node.parallelism)));
                continue;
            }
            if node.phase == Phase::Commit {
                let from_process = |p: &usize| plan.nodes[*p].phase == Phase::Process;
                if matches!(node.op, Op::PersistentAggregate { .. }) && from_process(&node.inputs[0]) {
                    let input = outputs[node.inputs[0]].as_ref().expect("inputs run first");
                    handover.partials.insert(i, aggregate::partials(&mut exec, node, input)?);
                    continue;
                }
                for (slot, p) in node.inputs.iter().enumerate().filter(|(_, p)| from_process(p)) {
                    handover.inputs.insert((i, slot), Arc::clone(outputs[*p].as_ref().expect("inputs run first")));
                }
                continue;
            }
            let inputs: Vec<&Parts> =
                node.inputs.iter().map(|&p| &**outputs[p].as_ref().expect("inputs run first")).collect();
            let out = exec.run(i, &inputs)?;
            outputs[i] = Some(Arc::new(out));
        }
        Ok(handover)
    }
}

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
        db: &Db,
        txid: u64,
        record: &BatchRecord,
        handover: Handover,
    ) -> Result<usize, BatchError> {
        let plan = Arc::clone(&self.plan);
        let storage = |e: anyhow::Error| state_failure("(state)", format!("{e:#}"), &e, Origin::State);
        let read = db.begin_read().map_err(storage)?;
        let views =
            Views::new(&read, &plan.stored_as, &plan.states, &mut self.caches, txid, true, &plan.sandboxes.state)
                .map_err(storage)?;
        let views = Arc::new(Mutex::new(views));
        let result = self.run_nodes(&plan, txid, record.attempt, &views, handover);
        let views = Arc::try_unwrap(views)
            .ok()
            .expect("no call keeps the views")
            .into_inner()
            .unwrap_or_else(|e| e.into_inner());
        let writes = views.finish(&mut self.caches);
        let committed = result.and_then(|()| {
            db.commit(&plan.stored_as, txid, record, &writes).map_err(|e| {
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
        txid: u64,
        attempt: u32,
        views: &Arc<Mutex<Views>>,
        mut handover: Handover,
    ) -> Result<(), BatchError> {
        let mut exec = Exec { plan, instances: &mut self.instances, txid, attempt, views: Some(views) };
        let mut outputs: Vec<Option<Arc<Parts>>> = vec![None; plan.nodes.len()];
        for &i in &self.nodes {
            let node = &plan.nodes[i];
            let out = match handover.partials.remove(&i) {
                Some(partials) => persist::persistent_aggregate(&mut exec, node, partials)?,
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
        Ok(())
    }
}

/// Answers query `query` of `plan` with `args`, over what `db` has committed:
/// the result tuples.
pub fn query(
    db: &Db,
    plan: &Arc<Plan>,
    source: &OperatorSource,
    query: &str,
    args: &str,
) -> anyhow::Result<Vec<Vec<Value>>> {
    let Some((nodes, answer)) = plan.query_nodes(query) else {
        let known: Vec<&String> = plan.queries.keys().collect();
        let (query, known) = (serde_json::Value::from(query), serde_json::json!(known));
        anyhow::bail!("topology {} has no query {query} (queries: {known})", plan.topology);
    };
    let read = db.begin_read()?;
    let mut caches = HashMap::new();
    let views = Views::new(&read, &plan.stored_as, &plan.states, &mut caches, u64::MAX, false, &plan.sandboxes.state)?;
    let views = Arc::new(Mutex::new(views));
    let mut instances = per_partition(plan, source);
    let last = db.progress(&plan.stored_as)?.last_committed;
    let mut exec = Exec { plan, instances: &mut instances, txid: last, attempt: 0, views: Some(&views) };
    let mut outputs: Vec<Option<Parts>> = vec![None; plan.nodes.len()];
    for &i in &nodes {
        let node = &plan.nodes[i];
        let out = if let Op::Query(_) = node.op {
            let mut writer = BatchWriter::new(1);
            writer.push_row(0, [ValueRef::Str(args)]).expect("one value");
            vec![writer.finish_batch()]
        } else {
            let inputs: Vec<&Parts> =
                node.inputs.iter().map(|&p| outputs[p].as_ref().expect("inputs run first")).collect();
            exec.run(i, &inputs).map_err(|e| anyhow::anyhow!("query {query}: {e}"))?
        };
        outputs[i] = Some(out);
    }
    let result = gather(outputs[answer].as_ref().expect("the answer ran"));
    Ok(result.rows().map(|row| row.values().map(ValueRef::to_owned).collect()).collect())
}

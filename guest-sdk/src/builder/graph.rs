//! The topology under construction: [`Topology`], holding the definition
//! graph and the code registered per operator id; [`TopologyBuilder`], where
//! streams start; and the stream handles every family of operations extends.

use crate::codec::BatchWriter;
use crate::operator::{
    BatchInfo, BatchSpout, CombinerAggregator, Error, Filter, Function, PartitionedSpout, QueryFunction,
    ReducerAggregator, StateUpdater,
};
use crate::topology::{DirGrant, Limits, NodeDef, OperationDef, SandboxDef, TopologyDef};
use crate::tuple::Tuple;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

/// A topology: its definition and the operators it calls.
#[derive(Default)]
pub struct Topology {
    pub(super) def: TopologyDef,
    pub(crate) spout: Option<SpoutCode>,
    pub(crate) functions: BTreeMap<String, Box<dyn Function>>,
    pub(crate) filters: BTreeMap<String, Box<dyn Filter>>,
    pub(crate) combiners: BTreeMap<String, Box<dyn CombinerAggregator>>,
    pub(crate) reducers: BTreeMap<String, Box<dyn ReducerAggregator>>,
    pub(crate) aggregators: BTreeMap<String, Box<dyn GroupAggregator>>,
    pub(crate) updaters: BTreeMap<String, Box<dyn StateUpdater>>,
    pub(crate) queries: BTreeMap<String, Box<dyn QueryFunction>>,
}

impl Topology {
    /// Starts a topology named `name`.
    // Trident's shape: a topology starts from its name, then its streams.
    #[allow(clippy::new_ret_no_self)]
    pub fn new(name: &str) -> TopologyBuilder {
        let topology =
            Topology { def: TopologyDef { name: name.to_owned(), ..TopologyDef::default() }, ..Default::default() };
        TopologyBuilder { topology: Rc::new(RefCell::new(topology)) }
    }

    /// The definition the host reads.
    pub fn definition(&self) -> &TopologyDef {
        &self.def
    }

    fn node(&self, id: &str) -> Option<&NodeDef> {
        self.def.nodes.iter().find(|n| n.id == id)
    }

    /// The function registered under operator id `id` (`each`, `map`,
    /// `flat_map` and `peek` all run as one).
    pub fn function(&self, id: &str) -> Option<&dyn Function> {
        self.functions.get(id).map(|f| &**f)
    }

    /// Number of output fields of the operator `id`.
    pub fn output_arity(&self, id: &str) -> Option<usize> {
        let node = self.node(id)?;
        match &node.op {
            OperationDef::Each { output, .. }
            | OperationDef::Map { output, .. }
            | OperationDef::FlatMap { output, .. }
            | OperationDef::PartitionPersist { output, .. }
            | OperationDef::StateQuery { output, .. } => Some(output.len()),
            OperationDef::Peek { .. } => Some(0),
            _ => None,
        }
    }

    /// Number of output fields of the aggregator `id`.
    pub fn aggregator_arity(&self, id: &str) -> Option<usize> {
        self.def.nodes.iter().find_map(|n| match &n.op {
            OperationDef::Aggregate { aggregators, .. } => {
                aggregators.iter().find(|a| a.id == id).map(|a| a.output.len())
            }
            OperationDef::PersistentAggregate { aggregator, .. } | OperationDef::Window { aggregator, .. }
                if aggregator.id == id =>
            {
                Some(aggregator.output.len())
            }
            _ => None,
        })
    }

    /// The guest batch spout, if the stream starts from one.
    pub fn batch_spout(&self) -> Option<&dyn BatchSpout> {
        match &self.spout {
            Some(SpoutCode::Batch(spout)) => Some(&**spout),
            _ => None,
        }
    }

    /// The guest partitioned spout, if the stream starts from one.
    pub fn partitioned_spout(&self) -> Option<&dyn PartitionedSpout> {
        match &self.spout {
            Some(SpoutCode::Partitioned(spout)) => Some(&**spout),
            _ => None,
        }
    }

    /// The filter registered under operator id `id`.
    pub fn filter(&self, id: &str) -> Option<&dyn Filter> {
        self.filters.get(id).map(|f| &**f)
    }

    /// The combiner aggregator registered under operator id `id`.
    pub fn combiner(&self, id: &str) -> Option<&dyn CombinerAggregator> {
        self.combiners.get(id).map(|c| &**c)
    }

    /// The reducer aggregator registered under operator id `id`.
    pub fn reducer(&self, id: &str) -> Option<&dyn ReducerAggregator> {
        self.reducers.get(id).map(|r| &**r)
    }

    /// The state updater registered under operator id `id`.
    pub fn updater(&self, id: &str) -> Option<&dyn StateUpdater> {
        self.updaters.get(id).map(|u| &**u)
    }

    /// The query function registered under operator id `id`.
    pub fn query(&self, id: &str) -> Option<&dyn QueryFunction> {
        self.queries.get(id).map(|q| &**q)
    }

    pub(crate) fn general(&self, id: &str) -> Option<&dyn GroupAggregator> {
        self.aggregators.get(id).map(|a| &**a)
    }

    fn rename(&mut self, old: &str, new: &str) {
        fn moved<T>(map: &mut BTreeMap<String, T>, old: &str, new: &str) {
            if let Some(v) = map.remove(old) {
                map.insert(new.to_owned(), v);
            }
        }
        moved(&mut self.def.sandbox, old, new);
        moved(&mut self.functions, old, new);
        moved(&mut self.filters, old, new);
        moved(&mut self.combiners, old, new);
        moved(&mut self.reducers, old, new);
        moved(&mut self.aggregators, old, new);
        moved(&mut self.updaters, old, new);
        moved(&mut self.queries, old, new);
    }
}

/// The code of a topology's guest spout, of either kind.
pub(crate) enum SpoutCode {
    Batch(Box<dyn BatchSpout>),
    Partitioned(Box<dyn PartitionedSpout>),
}

/// A general aggregator with its state type erased, run over a batch's
/// groups.
// Declared here because the registry in `Topology` holds it; aggregates.rs
// implements it for every `Aggregator`.
pub(crate) trait GroupAggregator: Send + Sync {
    fn run(
        &self,
        info: &BatchInfo,
        groups: u32,
        rows: &mut dyn Iterator<Item = (u32, Tuple<'_>)>,
        out: &mut BatchWriter,
    ) -> Result<(), Error>;
}

/// A topology being defined: where its streams start.
#[derive(Clone)]
pub struct TopologyBuilder {
    pub(super) topology: Rc<RefCell<Topology>>,
}

impl TopologyBuilder {
    pub(super) fn root(&self, id: String, op: OperationDef) -> Stream {
        let mut topology = self.topology.borrow_mut();
        topology.def.nodes.push(NodeDef { id, inputs: Vec::new(), parallelism: 1, op });
        Stream { topology: Rc::clone(&self.topology), node: topology.def.nodes.len() - 1 }
    }

    /// Finishes the topology.
    pub fn build(&self) -> Topology {
        std::mem::take(&mut *self.topology.borrow_mut())
    }
}

/// A stream being defined: each method adds an operation after it and
/// returns the stream that operation produces.
#[derive(Clone)]
pub struct Stream {
    pub(super) topology: Rc<RefCell<Topology>>,
    pub(super) node: usize,
}

/// A stream grouped by fields, for the aggregation or query that follows.
#[derive(Clone)]
pub struct GroupedStream {
    pub(super) stream: Stream,
    pub(super) group: Vec<String>,
}

/// A state a stream persists into: queried with `state_query`, and the
/// source of the new-values stream.
#[derive(Clone)]
pub struct TridentState {
    pub(super) stream: Stream,
    pub(super) name: String,
}

impl TridentState {
    /// The stream of what each batch changed: for `persistent_aggregate`,
    /// the group fields and the new value; for `partition_persist`, what the
    /// updater emitted.
    pub fn new_values_stream(&self) -> Stream {
        self.stream.clone()
    }

    /// Gives the operation that persists into this state the id `label`.
    pub fn name(self, label: &str) -> TridentState {
        TridentState { stream: self.stream.name(label), name: self.name }
    }

    /// See [`Stream::parallelism_hint`].
    pub fn parallelism_hint(self, n: u32) -> TridentState {
        TridentState { stream: self.stream.parallelism_hint(n), name: self.name }
    }

    /// Finishes the topology.
    pub fn build(&self) -> Topology {
        self.stream.build()
    }
}

pub(super) fn names<const N: usize>(fields: [&str; N]) -> Vec<String> {
    fields.iter().map(|f| (*f).to_owned()).collect()
}

impl Stream {
    /// Adds a node reading this stream; `code` registers its guest code
    /// under the node's id.
    pub(super) fn then(&self, kind: &str, code: impl FnOnce(&mut Topology, &str) -> OperationDef) -> Stream {
        let mut topology = self.topology.borrow_mut();
        let index = topology.def.nodes.len();
        let id = format!("{kind}-{index}");
        let op = code(&mut topology, &id);
        let parallelism = topology.def.nodes[self.node].parallelism;
        let partitioned = matches!(op, OperationDef::Partition { .. });
        topology.def.nodes.push(NodeDef {
            id,
            inputs: vec![self.node],
            parallelism: if partitioned { 1 } else { parallelism },
            op,
        });
        Stream { topology: Rc::clone(&self.topology), node: index }
    }

    /// Trident's `parallelismHint`: `n` instances run each operation of this
    /// stage (back to the last repartitioning) at once, each over its own
    /// partition of the batch.
    pub fn parallelism_hint(self, n: u32) -> Stream {
        {
            let mut topology = self.topology.borrow_mut();
            let mut index = self.node;
            loop {
                let node = &mut topology.def.nodes[index];
                node.parallelism = n.max(1);
                let stage_start = matches!(node.op, OperationDef::Partition { .. }) || node.inputs.len() != 1;
                if stage_start {
                    break;
                }
                index = node.inputs[0];
            }
        }
        self
    }

    /// The sandbox of this stream's operator.
    fn sandbox(&self, edit: impl FnOnce(&mut SandboxDef)) {
        let mut topology = self.topology.borrow_mut();
        let id = topology.def.nodes[self.node].id.clone();
        edit(topology.def.sandbox.entry(id).or_default());
    }

    /// Sets this operator's limits (each capped by the host's); on a guest
    /// spout's stream, the spout's.
    pub fn limits(self, limits: Limits) -> Stream {
        self.sandbox(|sandbox| limits.apply(sandbox));
        self
    }

    /// Mounts host directory `host` read-only at `guest` in this operator's
    /// sandbox (on a guest spout's stream, the spout's: how a spout reads
    /// external data). The host grants it only where its configuration
    /// allows that directory.
    pub fn read_only_dir(self, host: &str, guest: &str) -> Stream {
        let grant = DirGrant { host: host.to_owned(), guest: guest.to_owned() };
        self.sandbox(|sandbox| sandbox.read_only_dirs.push(grant));
        self
    }

    /// Trident's `name`: gives this stream's operation the id `label`, used in
    /// logs, errors and metrics.
    pub fn name(self, label: &str) -> Stream {
        {
            let mut topology = self.topology.borrow_mut();
            let node = &mut topology.def.nodes[self.node];
            let old = std::mem::replace(&mut node.id, label.to_owned());
            let mut renamed = vec![(old.clone(), label.to_owned())];
            if let OperationDef::Aggregate { aggregators, .. } = &mut node.op {
                for (k, aggregator) in aggregators.iter_mut().enumerate() {
                    let new = if k == 0 { label.to_owned() } else { format!("{label}.{k}") };
                    renamed.push((std::mem::replace(&mut aggregator.id, new.clone()), new));
                }
            }
            if let OperationDef::PersistentAggregate { aggregator, .. } | OperationDef::Window { aggregator, .. } =
                &mut node.op
            {
                aggregator.id = label.to_owned();
            }
            renamed.dedup();
            for (old, new) in renamed {
                topology.rename(&old, &new);
            }
        }
        self
    }

    /// Finishes the topology.
    pub fn build(&self) -> Topology {
        std::mem::take(&mut *self.topology.borrow_mut())
    }
}

/// The JSON a component returns from `describe`: every topology it defines.
// Here rather than in topology.rs: the definitions there must not name the
// builder, which is built on them.
pub fn describe(topologies: &[Topology]) -> String {
    let defs: Vec<&TopologyDef> = topologies.iter().map(Topology::definition).collect();
    serde_json::to_string(&defs).expect("topology definitions serialize")
}

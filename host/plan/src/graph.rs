//! The plan a description is checked into: its nodes in order, each
//! with its operation's fields resolved to positions and its phase.

use std::collections::BTreeMap;

use weir_runtime::sandbox::Sandboxes;
use weir_sdk::operator::Builtin;
use weir_sdk::topology::{
    AggregateScope, AggregatorKind, JoinKind, Partitioning, QueryDef, SinkDef, StateDef, WindowDef,
};

/// A validated topology, ready to run.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The topology's name: what its guests are told they run.
    pub topology: String,
    /// The name the host keeps its state, progress and logs under: the
    /// topology's own, or the name a server deployed it under.
    pub stored_as: String,
    /// The graph's nodes, each after its inputs.
    pub nodes: Vec<Node>,
    /// Every state, by name.
    pub states: BTreeMap<String, StateDef>,
    /// Each query stream: its root node and the node whose tuples answer it.
    pub queries: BTreeMap<String, (usize, usize)>,
    /// What each operator's instances may use.
    pub sandboxes: Sandboxes,
}

/// When a node runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// In the process phase, batches in parallel with earlier commits.
    Process,
    /// In the commit phase, strictly in txid order: it reads or writes state,
    /// or follows something that does.
    Commit,
}

/// One node of the graph, resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// Operator id.
    pub id: String,
    /// Indices of the input nodes.
    pub inputs: Vec<usize>,
    /// Instances that run it at once.
    pub parallelism: usize,
    /// When it runs.
    pub phase: Phase,
    /// The fields of its output tuples.
    pub fields: Vec<String>,
    /// Indices of the nodes that read its output.
    pub children: Vec<usize>,
    /// What it does.
    pub op: Op,
}

/// The input of a guest operator: which fields it reads.
#[derive(Clone, Debug, PartialEq)]
pub struct Input {
    /// Positions of the fields in the tuple.
    pub positions: Vec<usize>,
    /// Names of the fields, as the guest sees them.
    pub names: Vec<String>,
    /// True when the input is the whole tuple, in order: no copy needed.
    pub whole_tuple: bool,
}

/// What a function's outputs do to its input tuple.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FunctionKind {
    /// Appended (`each`, `state_query`).
    Append,
    /// Replace it (`map`, `flat_map`).
    Replace,
    /// Nothing: it passes on unchanged (`peek`).
    Peek,
}

/// One aggregator, resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct Aggregator {
    /// Operator id.
    pub id: String,
    /// Its contract.
    pub kind: AggregatorKind,
    /// Fields it reads.
    pub input: Input,
    /// Number of output fields.
    pub outputs: usize,
}

/// A node's operation, with fields resolved against its input's output.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// The data spout.
    Spout,
    /// A query stream's request.
    Query(String),
    /// A guest function; `kept` input fields, then its outputs.
    Function {
        /// What the outputs do.
        kind: FunctionKind,
        /// Fields it reads.
        input: Input,
        /// Input fields passed on.
        kept: Vec<usize>,
        /// Number of output fields.
        outputs: usize,
    },
    /// A guest filter.
    Filter {
        /// Fields it reads.
        input: Input,
        /// Input fields passed on.
        kept: Vec<usize>,
    },
    /// Input fields passed on, in order (`project`, and a pass-through that
    /// drops what no one reads).
    Project(Vec<usize>),
    /// Moves tuples between partitions.
    Partition {
        /// How; `fields` resolved to positions.
        by: Partitioning,
        /// Positions hashed, for `partition_by`.
        hashed: Vec<usize>,
        /// Input fields passed on.
        kept: Vec<usize>,
    },
    /// An aggregation.
    Aggregate {
        /// Per partition or per batch.
        scope: AggregateScope,
        /// Positions of the group fields.
        group: Vec<usize>,
        /// The aggregators, in output order.
        aggregators: Vec<Aggregator>,
    },
    /// Aggregates into a state.
    PersistentAggregate {
        /// The state.
        state: String,
        /// Positions of the group fields.
        group: Vec<usize>,
        /// The aggregator.
        aggregator: Aggregator,
        /// Nothing reads the state or this node's output during a batch, so
        /// a built-in's partials may be combined in the commit itself.
        in_place: bool,
    },
    /// Windows aggregated into a state, each emitted once it closes (see
    /// `weir_engine::exec::window`). Its rows are worked on as they are assigned
    /// to windows: the window's end and start, then the input tuple.
    Window {
        /// The state holding the open windows.
        state: String,
        /// How tuples fall into windows.
        window: WindowDef,
        /// Position of the timestamp field, for event time.
        time: Option<usize>,
        /// Positions of the group fields in the input tuple.
        group: Vec<usize>,
        /// The aggregator, its input positions in the assigned rows.
        aggregator: Aggregator,
    },
    /// The tuples the window node (the second input) found late in the
    /// batch, from its input (the first); the fields at these positions
    /// passed on.
    LateTuples(Vec<usize>),
    /// A guest state updater.
    PartitionPersist {
        /// The state.
        state: String,
        /// Fields it reads.
        input: Input,
        /// Number of output fields.
        outputs: usize,
    },
    /// A state query.
    StateQuery {
        /// The state.
        state: String,
        /// Fields it reads (the key, for `MapGet`).
        input: Input,
        /// The query function.
        query: QueryDef,
        /// Input fields passed on.
        kept: Vec<usize>,
        /// Number of output fields.
        outputs: usize,
    },
    /// Every input's tuples; each input's fields in this node's order.
    Merge(Vec<Vec<usize>>),
    /// A join within the batch.
    Join {
        /// Each input's join field positions.
        keys: Vec<Vec<usize>>,
        /// Each input's other field positions, in output order.
        others: Vec<Vec<usize>>,
        /// Each input's kind.
        kinds: Vec<JoinKind>,
    },
    /// Publishes each tuple of committed batches (see `weir_io::sink`).
    Sink {
        /// Where to.
        sink: SinkDef,
        /// The fields it publishes: every one (JSON), or the raw field.
        input: Input,
    },
    /// The least or greatest tuple of the batch.
    Extreme {
        /// Positions compared, in order.
        by: Vec<usize>,
        /// The greatest.
        max: bool,
        /// Input fields passed on.
        kept: Vec<usize>,
    },
}

impl Op {
    /// Whether the operation writes a state.
    pub fn writes_state(&self) -> bool {
        matches!(self, Op::PersistentAggregate { .. } | Op::PartitionPersist { .. } | Op::Window { .. })
    }
}

/// `value` as JSON, for messages: a name or a list of names, quoted and
/// escaped however hostile it is.
pub(crate) fn json(value: &(impl serde::Serialize + ?Sized)) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

impl Plan {
    /// This plan with `n` instances for every node whose topology gives it
    /// no parallelism hint (the host's default parallelism).
    pub fn with_parallelism(&self, n: usize) -> Plan {
        let mut plan = self.clone();
        for node in plan.nodes.iter_mut().filter(|node| node.parallelism == 1) {
            node.parallelism = n.max(1);
        }
        plan
    }

    /// The most instances any node runs at once.
    pub fn max_parallelism(&self) -> usize {
        self.nodes.iter().map(|n| n.parallelism).max().unwrap_or(1)
    }

    /// Whether each tuple carries, as its row's tag, the index in its
    /// spout batch of the spout tuple it came from: so in a plan with a
    /// window, which numbers a group's tuples in the order the spout
    /// emitted them and keeps a watermark per spout partition, whatever
    /// the parallelism.
    pub fn tags_origins(&self) -> bool {
        self.nodes.iter().any(|n| matches!(n.op, Op::Window { .. }))
    }

    /// The partitions the spout deals each batch into (its tuple `i` to
    /// partition `i` modulo their number).
    pub fn spout_partitions(&self) -> usize {
        self.nodes.iter().find(|n| n.op == Op::Spout).map_or(1, |n| n.parallelism.max(1))
    }
}

/// Built-in aggregators' names as the CLI shows them.
pub fn builtin_name(builtin: Builtin) -> &'static str {
    match builtin {
        Builtin::Count => "count",
        Builtin::Sum => "sum",
        Builtin::Min => "min",
        Builtin::Max => "max",
        Builtin::First => "first",
    }
}

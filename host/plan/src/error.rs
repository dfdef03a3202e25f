//! Why a description is refused: one variant for each thing a plan's
//! checks refuse, naming the topology and the operator, field, state or
//! query at fault, so that a caller (and a test) tells them apart without
//! reading the message. Each message is the one the host has always
//! printed.

use super::subject::SubjectError;
use super::{builtin_name, json};
use std::fmt;
use weir_config::MAX_SINKS;
use weir_config::{MAX_OPEN_SESSIONS, MAX_WINDOWS_PER_TUPLE};
use weir_sdk::operator::Builtin;
use weir_sdk::topology::AggregatorKind;

/// What a name names, as a refusal says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameOf {
    /// The topology's own name.
    Topology,
    /// An operator's id (an aggregator's too).
    Operator,
    /// A field.
    Field,
    /// A state.
    State,
    /// A query stream.
    Query,
}

impl fmt::Display for NameOf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NameOf::Topology => "topology",
            NameOf::Operator => "operator",
            NameOf::Field => "field",
            NameOf::State => "state",
            NameOf::Query => "query",
        })
    }
}

/// Where a refused name is: nowhere more for the topology's own.
fn place(topology: &str, of: NameOf) -> String {
    if of == NameOf::Topology { String::new() } else { format!("topology {topology}: ") }
}

/// What a topology asks past one of this host's caps, and how much of it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Excess {
    /// Its nodes (`--max-nodes`).
    Nodes(usize),
    /// The inputs its nodes read, in all (`--max-nodes`).
    Inputs(usize),
    /// An operator's parallelism (`--max-parallelism`).
    Parallelism {
        /// The operator.
        operator: String,
        /// The parallelism it asks for.
        parallelism: usize,
    },
    /// The names an operator lists, fields and aggregators (`--max-node-fields`).
    Names {
        /// The operator.
        operator: String,
        /// How many it lists.
        names: usize,
    },
    /// The fields of an operator's tuples (`--max-node-fields`).
    NodeFields {
        /// The operator.
        operator: String,
        /// How many its tuples have.
        fields: usize,
    },
    /// The fields of its tuples, added up over its nodes (`--max-fields`).
    Fields(usize),
    /// A state's cache (`--max-state-cache`).
    StateCache {
        /// The state.
        state: String,
        /// The entries it asks for.
        entries: usize,
    },
    /// Its states (`--max-states`).
    States(usize),
    /// Its query streams (`--max-queries`).
    Queries(usize),
    /// Its guest operator instances, in all (`--max-instances`).
    Instances(usize),
}

impl Excess {
    /// The flag that sets the cap.
    pub fn flag(&self) -> &'static str {
        match self {
            Excess::Nodes(_) | Excess::Inputs(_) => "--max-nodes",
            Excess::Parallelism { .. } => "--max-parallelism",
            Excess::Names { .. } | Excess::NodeFields { .. } => "--max-node-fields",
            Excess::Fields(_) => "--max-fields",
            Excess::StateCache { .. } => "--max-state-cache",
            Excess::States(_) => "--max-states",
            Excess::Queries(_) => "--max-queries",
            Excess::Instances(_) => "--max-instances",
        }
    }

    /// What `topology` asks, in words.
    fn asked(&self, topology: &str) -> String {
        match self {
            Excess::Nodes(nodes) => format!("topology {topology} has {nodes} nodes"),
            Excess::Inputs(inputs) => format!("topology {topology}: its nodes read {inputs} inputs in all"),
            Excess::Parallelism { operator, parallelism } => {
                format!("topology {topology}: operator {operator} asks for a parallelism of {parallelism}")
            }
            Excess::Names { operator, names } => {
                format!("topology {topology}: operator {operator} lists {names} names (fields and aggregators)")
            }
            Excess::NodeFields { operator, fields } => {
                format!("topology {topology}: operator {operator}'s tuples have {fields} fields")
            }
            Excess::Fields(fields) => {
                format!("topology {topology}'s tuples have at least {fields} fields in all (added up over its nodes)")
            }
            Excess::StateCache { state, entries } => {
                format!("topology {topology}: state {state} asks for a cache of {entries} entries")
            }
            Excess::States(states) => format!("topology {topology} has {states} states"),
            Excess::Queries(queries) => format!("topology {topology} has {queries} query streams"),
            Excess::Instances(instances) => format!(
                "topology {topology} runs {instances} guest operator instances in all (each guest operator once per \
                 partition)"
            ),
        }
    }
}

/// Why a topology's description is refused: what [`plan`](super::plan),
/// [`check_stream`](super::check_stream), [`check_limits`](super::check_limits)
/// and [`Plan::check_parallelism`](super::Plan::check_parallelism) fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// A name longer than this host takes.
    #[error(
        "{}{of} name {}... is {len} bytes long, more than this host allows ({max}; see --max-name-len)",
        place(.topology, *.of),
        json(.start)
    )]
    NameTooLong {
        /// The topology.
        topology: String,
        /// What the name names.
        of: NameOf,
        /// The name's first 32 characters.
        start: String,
        /// Its length in bytes.
        len: usize,
        /// The most this host takes.
        max: usize,
    },
    /// A name of characters this host does not take (see
    /// [`allowed_name`](super::allowed_name)).
    #[error(
        "{}{of} name {} is not allowed: a name is ASCII letters, digits, '-', '_' and '.', and does not start \
         with '.'",
        place(.topology, *.of),
        json(.name)
    )]
    NameNotAllowed {
        /// The topology.
        topology: String,
        /// What the name names.
        of: NameOf,
        /// The name.
        name: String,
    },
    /// More of something than one of this host's caps allows.
    #[error("{}, more than this host allows ({max}; see {})", .excess.asked(.topology), .excess.flag())]
    OverCap {
        /// The topology.
        topology: String,
        /// What it asks.
        excess: Excess,
        /// The cap.
        max: usize,
    },
    /// No nodes at all.
    #[error("topology {topology} is empty: it has no stream")]
    Empty {
        /// The topology.
        topology: String,
    },
    /// Two operators with one id.
    #[error("topology {topology}: two operators are named {}", json(.operator))]
    DuplicateOperator {
        /// The topology.
        topology: String,
        /// The id.
        operator: String,
    },
    /// An operator that would run nowhere.
    #[error("topology {topology}: operator {operator} has a parallelism of 0")]
    NoParallelism {
        /// The topology.
        topology: String,
        /// The operator.
        operator: String,
    },
    /// An input that is no node.
    #[error("topology {topology}: operator {operator} reads node {node}, which does not exist")]
    NoSuchNode {
        /// The topology.
        topology: String,
        /// The operator.
        operator: String,
        /// The index it reads.
        node: usize,
    },
    /// A cycle in the stream graph.
    #[error("topology {topology}: the stream graph has a cycle through operator {operator}")]
    Cycle {
        /// The topology.
        topology: String,
        /// An operator on the cycle.
        operator: String,
    },
    /// More than one data spout.
    #[error("topology {topology} has {spouts} spouts: a topology reads one data spout (merge its streams instead)")]
    SeveralSpouts {
        /// The topology.
        topology: String,
        /// How many it has.
        spouts: usize,
    },
    /// A state two operations write.
    #[error(
        "topology {topology}: state {state} is written by both {first} and {second}: each state has one writer, \
         whose aggregator kind fixes what its values mean"
    )]
    TwoWriters {
        /// The topology.
        topology: String,
        /// The state.
        state: String,
        /// The operator that writes it first.
        first: String,
        /// The other.
        second: String,
    },
    /// A transactional state fed by an opaque spout.
    #[error(
        "topology {topology}: transactional state {state} cannot be fed by an opaque spout: a replay of an opaque \
         spout may hold different tuples, and a transactional state skips a txid it has applied, so those \
         tuples would be lost (use an opaque state)"
    )]
    OpaqueSpout {
        /// The topology.
        topology: String,
        /// The state.
        state: String,
    },
    /// An exactly-once state fed by a non-transactional spout.
    #[error(
        "topology {topology}: state {state} claims exactly-once, but its spout is non-transactional: a replay may \
         lose or repeat tuples (use a transactional or opaque spout, or a non-transactional state)"
    )]
    NonTransactionalSpout {
        /// The topology.
        topology: String,
        /// The state.
        state: String,
    },
    /// A field an operator reads that its input lacks.
    #[error(
        "topology {topology}: operator {operator} reads field {}, which its input does not have (it has {})",
        json(.field),
        json(.fields)
    )]
    MissingField {
        /// The topology.
        topology: String,
        /// The operator (or aggregator).
        operator: String,
        /// The field.
        field: String,
        /// The fields its input has.
        fields: Vec<String>,
    },
    /// An operation with a number of inputs its kind does not take.
    #[error("topology {topology}: operator {operator} ({kind}) has {inputs} inputs")]
    Inputs {
        /// The topology.
        topology: String,
        /// The operator.
        operator: String,
        /// Its kind of operation.
        kind: &'static str,
        /// How many inputs it has.
        inputs: usize,
    },
    /// An operation that outputs no fields where it must.
    #[error("topology {topology}: operator {operator} declares no output fields")]
    NoOutputs {
        /// The topology.
        topology: String,
        /// The operator.
        operator: String,
    },
    /// An output field the tuple has already.
    #[error("topology {topology}: operator {operator} outputs field {}, which the tuple already has", json(.field))]
    FieldExists {
        /// The topology.
        topology: String,
        /// The operator.
        operator: String,
        /// The field.
        field: String,
    },
    /// A field an operation outputs twice.
    #[error("topology {topology}: operator {operator} outputs field {} twice", json(.field))]
    FieldTwice {
        /// The topology.
        topology: String,
        /// The operator.
        operator: String,
        /// The field.
        field: String,
    },
    /// An aggregation without aggregators.
    #[error("topology {topology}: operator {operator} has no aggregators")]
    NoAggregators {
        /// The topology.
        topology: String,
        /// The operator.
        operator: String,
    },
    /// An aggregator of one output declaring some other number.
    #[error("topology {topology}: aggregator {aggregator} must declare exactly one output field")]
    AggregatorOutputs {
        /// The topology.
        topology: String,
        /// The aggregator.
        aggregator: String,
    },
    /// A built-in that reads a field given some other number.
    #[error("topology {topology}: built-in {} in {aggregator} needs exactly one input field", builtin_name(*.builtin))]
    BuiltinInputs {
        /// The topology.
        topology: String,
        /// The aggregator.
        aggregator: String,
        /// The built-in.
        builtin: Builtin,
    },
    /// A persistent aggregate of a general aggregator.
    #[error(
        "topology {topology}: persistent_aggregate {operator} uses the general aggregator {aggregator}: a state is \
         updated with a combiner or a reducer aggregator"
    )]
    GeneralPersisted {
        /// The topology.
        topology: String,
        /// The persistent aggregate.
        operator: String,
        /// The aggregator.
        aggregator: String,
    },
    /// A persistent aggregate of a guest combiner that reads no field.
    #[error(
        "topology {topology}: persistent_aggregate {operator} uses the guest combiner {aggregator} without input \
         fields: its init would see empty tuples, so it could only count (use the built-in Count, which runs in \
         the host, or name the fields it reads with persistent_aggregate_over)"
    )]
    CombinerWithoutInput {
        /// The topology.
        topology: String,
        /// The persistent aggregate.
        operator: String,
        /// The combiner.
        aggregator: String,
    },
    /// A state query of a state no operation writes.
    #[error(
        "topology {topology}: operator {operator} queries state {state}, which no operation writes (states: {})",
        json(.states)
    )]
    UnknownState {
        /// The topology.
        topology: String,
        /// The operator.
        operator: String,
        /// The state it queries.
        state: String,
        /// The states the topology writes.
        states: Vec<String>,
    },
    /// A merge of streams whose fields differ.
    #[error(
        "topology {topology}: merge {merge} joins streams with different fields: {} and {}",
        json(.fields),
        json(.other)
    )]
    MergeFields {
        /// The topology.
        topology: String,
        /// The merge.
        merge: String,
        /// Its first input's fields.
        fields: Vec<String>,
        /// Another input's.
        other: Vec<String>,
    },
    /// A join without join fields and a kind for each input.
    #[error("topology {topology}: join {join} needs join fields and a kind for each of its {inputs} inputs")]
    JoinInputs {
        /// The topology.
        topology: String,
        /// The join.
        join: String,
        /// Its inputs.
        inputs: usize,
    },
    /// A join whose inputs have different numbers of join fields, or none.
    #[error("topology {topology}: join {join} needs the same number of join fields (at least one) on every input")]
    JoinWidths {
        /// The topology.
        topology: String,
        /// The join.
        join: String,
    },
    /// A join naming another number of output fields than it produces.
    #[error("topology {topology}: join {join} produces {produces} fields but names {names} in its output")]
    JoinOutputs {
        /// The topology.
        topology: String,
        /// The join.
        join: String,
        /// The fields it produces.
        produces: usize,
        /// The fields its output names.
        names: usize,
    },
    /// A sink's subject.
    #[error("topology {topology}: sink {sink}: {error}")]
    SinkSubject {
        /// The topology.
        topology: String,
        /// The sink.
        sink: String,
        /// What is wrong with its subject.
        error: SubjectError,
    },
    /// A window's time past what a timestamp holds.
    #[error("topology {topology}: window {window}: its {what} of {ms} ms is more than a timestamp holds")]
    WindowTime {
        /// The topology.
        topology: String,
        /// The window.
        window: String,
        /// Which of its times: size, slide, gap, max delay or lateness.
        what: &'static str,
        /// The time.
        ms: u64,
    },
    /// A window's size, slide or gap of 0.
    #[error(
        "topology {topology}: window {window}: a window's size, slide and gap must be at least 1 (size {size}, \
         slide {slide} {unit})"
    )]
    WindowZero {
        /// The topology.
        topology: String,
        /// The window.
        window: String,
        /// Its size (a session's gap).
        size: u64,
        /// Its slide (a session's gap).
        slide: u64,
        /// Tuples or ms.
        unit: &'static str,
    },
    /// A session window a group may hold too many of open.
    #[error(
        "topology {topology}: window {window}: a gap of {gap_ms} ms under {max_delay_ms} ms of delay and \
         {lateness_ms} ms of lateness lets a group hold {open} sessions open; this host allows {MAX_OPEN_SESSIONS}"
    )]
    TooManySessions {
        /// The topology.
        topology: String,
        /// The window.
        window: String,
        /// Its gap.
        gap_ms: u64,
        /// Its watermark's delay.
        max_delay_ms: u64,
        /// Its lateness.
        lateness_ms: u64,
        /// The sessions a group may hold open.
        open: u64,
    },
    /// A session window of an aggregator that cannot merge partials.
    #[error(
        "topology {topology}: window {window} uses the {} {aggregator}: sessions that meet merge their partials, \
         which takes a combiner or a built-in",
        if *.kind == AggregatorKind::Reducer { "reducer" } else { "general aggregator" }
    )]
    SessionAggregator {
        /// The topology.
        topology: String,
        /// The window.
        window: String,
        /// The aggregator.
        aggregator: String,
        /// Its kind: a reducer or a general aggregator.
        kind: AggregatorKind,
    },
    /// A sliding window that puts a tuple in too many windows.
    #[error(
        "topology {topology}: window {window}: a size of {size} {unit} sliding by {slide} puts each tuple in \
         {windows} windows; this host allows {MAX_WINDOWS_PER_TUPLE}"
    )]
    TooManyWindows {
        /// The topology.
        topology: String,
        /// The window.
        window: String,
        /// Its size.
        size: u64,
        /// Its slide.
        slide: u64,
        /// Tuples or ms.
        unit: &'static str,
        /// The windows each tuple falls in.
        windows: u64,
    },
    /// A late stream that reads something else than a window and its input.
    #[error(
        "topology {topology}: late stream {late} must read a window and that window's input ({window} is not a \
         window of {input})"
    )]
    LateStreamInputs {
        /// The topology.
        topology: String,
        /// The late stream.
        late: String,
        /// The operator it reads as the window.
        window: String,
        /// The operator it reads as the window's input.
        input: String,
    },
    /// A window with two late streams.
    #[error("topology {topology}: window {window} has two late streams")]
    TwoLateStreams {
        /// The topology.
        topology: String,
        /// The window.
        window: String,
    },
    /// Two query streams of one name.
    #[error("topology {topology} has two query streams named {query}")]
    DuplicateQuery {
        /// The topology.
        topology: String,
        /// The name.
        query: String,
    },
    /// A query stream that does not end in one stream.
    #[error("topology {topology}: query {query} must end in one stream (it ends in {ends} places)")]
    QueryEnds {
        /// The topology.
        topology: String,
        /// The query.
        query: String,
        /// Where it ends.
        ends: usize,
    },
    /// A query stream that writes state.
    #[error("topology {topology}: query {query} writes state: a query only reads it")]
    QueryWritesState {
        /// The topology.
        topology: String,
        /// The query.
        query: String,
    },
    /// Neither a spout nor a query stream.
    #[error("topology {topology} has neither a spout nor a query stream")]
    NothingToRun {
        /// The topology.
        topology: String,
    },
    /// A data stream that writes no state.
    #[error(
        "topology {topology} persists nothing: its results would go nowhere (end a stream in persistent_aggregate \
         or partition_persist)"
    )]
    PersistsNothing {
        /// The topology.
        topology: String,
    },
    /// An operator reading streams of different roots.
    #[error("topology {topology}: operator {operator} joins streams that start from different spouts or queries")]
    MixedStreams {
        /// The topology.
        topology: String,
        /// The operator.
        operator: String,
    },
    /// A sink on a query stream.
    #[error("topology {topology}: sink {sink} is on a query stream: a sink publishes what the data stream commits")]
    SinkOnQuery {
        /// The topology.
        topology: String,
        /// The sink.
        sink: String,
    },
    /// A sink in the process phase.
    #[error(
        "topology {topology}: sink {sink} reads a stream of the process phase, whose batches may be tried again: \
         put it after a state operation (a state's new_values_stream, or a state_query), so that its output \
         commits with the batch's state"
    )]
    SinkInProcessPhase {
        /// The topology.
        topology: String,
        /// The sink.
        sink: String,
    },
    /// An operator reading a sink.
    #[error("topology {topology}: operator {reader} reads sink {sink}: nothing follows a sink")]
    SinkRead {
        /// The topology.
        topology: String,
        /// The sink.
        sink: String,
        /// The operator that reads it.
        reader: String,
    },
    /// More sinks than a topology may have.
    #[error("topology {topology} has {sinks} sinks; a topology may have {MAX_SINKS} at most")]
    TooManySinks {
        /// The topology.
        topology: String,
        /// How many it has.
        sinks: usize,
    },
    /// The sandbox settings the description asks for, refused by the
    /// runtime, in its words.
    #[error(transparent)]
    Sandbox(anyhow::Error),
}

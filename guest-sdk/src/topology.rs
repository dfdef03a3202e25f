//! Topologies as the host reads them: a graph of nodes, each an operation
//! with its input and output fields and its operator id, and no code.
//! The builder writes them; a component's `describe` returns them as JSON.
//! Nothing here names the builder, which depends on these definitions.

use crate::operator::Builtin;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A topology as the host sees it: names, fields and operator ids, no code.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopologyDef {
    /// The topology's name; its state lives under it.
    pub name: String,
    /// The stream graph's nodes; a node's inputs come before it.
    pub nodes: Vec<NodeDef>,
    /// Per operator id: the sandbox it asks for, where it differs from the
    /// host's defaults.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sandbox: BTreeMap<String, SandboxDef>,
}

impl TopologyDef {
    /// The topology's data spout, if it has one.
    pub fn spout(&self) -> Option<&SpoutDef> {
        self.nodes.iter().find_map(|n| match &n.op {
            OperationDef::Spout { spout } => Some(spout),
            _ => None,
        })
    }

    /// Names of the topology's query streams.
    pub fn queries(&self) -> Vec<&str> {
        self.nodes
            .iter()
            .filter_map(|n| match &n.op {
                OperationDef::QueryStream { name } => Some(name.as_str()),
                _ => None,
            })
            .collect()
    }

    /// Every state the topology writes, once each, in the order of their
    /// first writers. In one pass: a description read by a host may hold
    /// any number of nodes.
    pub fn states(&self) -> Vec<&StateDef> {
        let mut seen = std::collections::HashSet::new();
        self.nodes.iter().filter_map(|node| node.op.written_state()).filter(|s| seen.insert(s.name.as_str())).collect()
    }
}

/// One node of the stream graph.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeDef {
    /// Operator id: how logs, errors, metrics and the guest's dispatch name it.
    pub id: String,
    /// Indices of the nodes whose output this node reads.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<usize>,
    /// How many instances run this node at once (Trident's
    /// `parallelismHint`), each over its own partition of the batch.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub parallelism: u32,
    /// What the node does.
    pub op: OperationDef,
}

fn one() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

/// What an operator asks of its sandbox. Every limit is capped by the host's
/// configuration; a topology asking for more is refused when it is loaded.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxDef {
    /// Largest linear memory, in MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u64>,
    /// CPU time one call may take, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_ms: Option<u64>,
    /// Bytes one call may return, in MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_mib: Option<u64>,
    /// Tuples one call may emit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tuples: Option<u64>,
    /// Host directories the operator reads, each mounted read-only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_only_dirs: Vec<DirGrant>,
}

/// A host directory mounted read-only into an operator's sandbox.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirGrant {
    /// The directory on the host.
    pub host: String,
    /// Where the guest sees it.
    pub guest: String,
}

/// Limits an operator asks for, lower than the host's where it likes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Limits {
    memory_mib: Option<u64>,
    call_ms: Option<u64>,
    output_mib: Option<u64>,
    output_tuples: Option<u64>,
}

impl Limits {
    /// The host's limits.
    pub fn new() -> Limits {
        Limits::default()
    }

    /// Largest linear memory, in MiB.
    pub fn memory_mib(mut self, mib: u64) -> Limits {
        self.memory_mib = Some(mib);
        self
    }

    /// CPU time one call may take, in milliseconds.
    pub fn call_ms(mut self, ms: u64) -> Limits {
        self.call_ms = Some(ms);
        self
    }

    /// Bytes one call may return, in MiB.
    pub fn output_mib(mut self, mib: u64) -> Limits {
        self.output_mib = Some(mib);
        self
    }

    /// Tuples one call may emit.
    pub fn output_tuples(mut self, tuples: u64) -> Limits {
        self.output_tuples = Some(tuples);
        self
    }

    /// Writes these limits into `sandbox`.
    pub fn apply(self, sandbox: &mut SandboxDef) {
        sandbox.memory_mib = self.memory_mib;
        sandbox.call_ms = self.call_ms;
        sandbox.output_mib = self.output_mib;
        sandbox.output_tuples = self.output_tuples;
    }
}

/// A spout: the source of a stream's batches.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum SpoutDef {
    /// Host built-in, transactional: the lines of the run's input file, one
    /// tuple per line with the line (without its newline) in `field`.
    FileLines {
        /// Name of the field holding the line.
        field: String,
    },
    /// Host built-in, transactional: the lines of the files of the run's
    /// input directory, file by file in name order; files added later are
    /// read when their turn comes.
    DirectoryLines {
        /// Name of the field holding the line.
        field: String,
    },
    /// Host built-in, transactional: the integers 0 to `count` - 1.
    Generator {
        /// Name of the field holding the integer.
        field: String,
        /// How many integers.
        count: u64,
    },
    /// Host built-in: the messages of a NATS JetStream stream, each subject
    /// a partition. The host reads the log; the guest never reaches the
    /// network.
    #[serde(rename = "jetstream")]
    JetStream(JetStreamDef),
    /// Host built-in: the records of a Kafka topic, each of its partitions
    /// a partition of the spout. The host reads the log; the guest never
    /// reaches the network.
    Kafka(KafkaDef),
    /// The component's own spout.
    Guest {
        /// What it promises on replay.
        promise: GuestSpoutKind,
        /// The fields of its tuples.
        fields: Vec<String>,
    },
}

/// The kinds of guest spout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GuestSpoutKind {
    /// A [`BatchSpout`]: the same batch for every attempt of a txid.
    Batch,
    /// A transactional [`PartitionedSpout`].
    PartitionedTransactional,
    /// An opaque [`PartitionedSpout`].
    PartitionedOpaque,
}

/// A spout over a NATS JetStream stream: which messages it reads, how each
/// becomes a tuple, and what a replay promises.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JetStreamDef {
    /// What a replay of a batch emits.
    pub promise: JetStreamKind,
    /// The stream's name.
    pub stream: String,
    /// The subjects that make the partitions: each a subject of the
    /// stream, or a wildcard (`clicks.*`, `clicks.>`) that the host expands
    /// into the stream's subjects it matches.
    pub subjects: Vec<String>,
    /// How a message's payload becomes fields.
    pub payload: PayloadDef,
    /// A field holding the message's subject.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject_field: Option<String>,
    /// A field holding the message's stream sequence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence_field: Option<String>,
    /// A field holding the time the server stored the message, in
    /// milliseconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp_field: Option<String>,
    /// The most messages a batch takes from one partition; the run's batch
    /// size when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_per_partition: Option<u64>,
}

impl JetStreamDef {
    /// The fields of the spout's tuples: the payload's, then the subject,
    /// sequence and timestamp fields that are set.
    pub fn fields(&self) -> Vec<String> {
        let extra = [&self.subject_field, &self.sequence_field, &self.timestamp_field];
        self.payload.fields().into_iter().chain(extra.into_iter().flatten().cloned()).collect()
    }
}

/// What a JetStream spout promises on replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JetStreamKind {
    /// A replay reads exactly the sequence ranges recorded for the batch; if
    /// the stream no longer holds them, the topology halts.
    Transactional,
    /// A replay reads afresh from the next sequence per partition stored
    /// with the last commit.
    Opaque,
}

/// How a JetStream message's payload becomes fields.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "as", rename_all = "kebab-case", deny_unknown_fields)]
pub enum PayloadDef {
    /// The payload as bytes, in one field.
    Bytes {
        /// The field.
        field: String,
    },
    /// The payload as a UTF-8 string, in one field.
    String {
        /// The field.
        field: String,
    },
    /// The payload is a JSON object: each field takes the member of its
    /// name (null when absent); members must be strings, numbers, booleans
    /// or null.
    Json {
        /// The fields, named as the members.
        fields: Vec<String>,
    },
}

impl PayloadDef {
    /// The fields a payload becomes: its one field, or the JSON object's.
    pub fn fields(&self) -> Vec<String> {
        match self {
            PayloadDef::Bytes { field } | PayloadDef::String { field } => vec![field.clone()],
            PayloadDef::Json { fields } => fields.clone(),
        }
    }
}

/// A spout over a Kafka topic: which partitions it reads, how a record
/// becomes a tuple, and what a replay promises.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaDef {
    /// What a replay of a batch emits (the same two kinds as JetStream's).
    pub promise: JetStreamKind,
    /// The topic's name.
    pub topic: String,
    /// The partitions to read; every partition of the topic when unset,
    /// partitions added while it runs included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions: Option<Vec<u32>>,
    /// How a record's value becomes fields.
    pub value: PayloadDef,
    /// A field holding the record's key (bytes; null without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_field: Option<String>,
    /// A field holding the record's partition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition_field: Option<String>,
    /// A field holding the record's offset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset_field: Option<String>,
    /// A field holding the record's timestamp, in milliseconds since the
    /// Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp_field: Option<String>,
    /// A field holding the record's headers, as a JSON object of strings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers_field: Option<String>,
    /// The most records a batch takes from one partition; the run's batch
    /// size when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_per_partition: Option<u64>,
}

impl KafkaDef {
    /// The fields of the spout's tuples: the value's, then the key,
    /// partition, offset, timestamp and headers fields that are set.
    pub fn fields(&self) -> Vec<String> {
        let extra =
            [&self.key_field, &self.partition_field, &self.offset_field, &self.timestamp_field, &self.headers_field];
        self.value.fields().into_iter().chain(extra.into_iter().flatten().cloned()).collect()
    }
}

/// The operator id of a topology's guest spout, in logs and sandbox settings.
pub const SPOUT_ID: &str = "spout";

impl SpoutDef {
    /// The fields of the spout's tuples.
    pub fn fields(&self) -> Vec<String> {
        match self {
            SpoutDef::FileLines { field } | SpoutDef::DirectoryLines { field } | SpoutDef::Generator { field, .. } => {
                vec![field.clone()]
            }
            SpoutDef::JetStream(def) => def.fields(),
            SpoutDef::Kafka(def) => def.fields(),
            SpoutDef::Guest { fields, .. } => fields.clone(),
        }
    }
}

/// What a node does.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case", deny_unknown_fields)]
pub enum OperationDef {
    /// A stream's source: the topology's spout.
    Spout {
        /// The spout.
        spout: SpoutDef,
    },
    /// A query stream's source: one tuple per request, its arguments in
    /// the field `args`.
    QueryStream {
        /// The query's name.
        name: String,
    },
    /// A guest function: its outputs are appended to each input tuple.
    Each {
        /// Fields the function reads.
        input: Vec<String>,
        /// Fields the function appends.
        output: Vec<String>,
    },
    /// A guest map function: one output tuple replaces each input tuple.
    Map {
        /// Fields the function reads.
        input: Vec<String>,
        /// The output tuple's fields.
        output: Vec<String>,
    },
    /// A guest flat-map function: its output tuples replace each input tuple.
    FlatMap {
        /// Fields the function reads.
        input: Vec<String>,
        /// The output tuples' fields.
        output: Vec<String>,
    },
    /// A guest consumer: sees each tuple, which passes on unchanged.
    Peek {
        /// Fields the consumer reads.
        input: Vec<String>,
    },
    /// A guest filter.
    Filter {
        /// Fields the filter reads.
        input: Vec<String>,
    },
    /// Keeps only `fields`, in that order.
    Project {
        /// The fields kept.
        fields: Vec<String>,
    },
    /// Moves tuples between partitions.
    Partition {
        /// How.
        by: Partitioning,
    },
    /// Aggregates each partition (`partition_aggregate`) or the whole batch
    /// (`aggregate`), per group when `group` is set. Several aggregators
    /// make a chained aggregate: their outputs are joined per group as a
    /// cross product. Output fields: `group`, then every aggregator's.
    Aggregate {
        /// Per partition or per batch.
        scope: AggregateScope,
        /// Group-by fields; empty for none.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        group: Vec<String>,
        /// The aggregators, in output order.
        aggregators: Vec<AggregatorDef>,
    },
    /// Aggregates each batch (per group when grouped) into a state, exactly
    /// once. Its output is the new-values stream: `group`, then the value.
    PersistentAggregate {
        /// The state written: a map keyed by `group`, or (ungrouped) a
        /// single value.
        state: StateDef,
        /// Group-by fields; empty for none.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        group: Vec<String>,
        /// How tuples are aggregated (combiner, reducer or built-in).
        aggregator: AggregatorDef,
    },
    /// A guest state updater writes each batch partition into a state in the
    /// commit phase; what it emits is the new-values stream.
    PartitionPersist {
        /// The state written.
        state: StateDef,
        /// Fields the updater reads.
        input: Vec<String>,
        /// Fields of what it emits.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        output: Vec<String>,
    },
    /// Looks each tuple up in a state: the query's outputs are appended.
    StateQuery {
        /// Name of the state read.
        state: String,
        /// Fields the query reads.
        input: Vec<String>,
        /// The query function.
        query: QueryDef,
        /// Fields appended.
        output: Vec<String>,
    },
    /// The tuples of every input stream, which must have the same fields.
    Merge,
    /// Joins two or more streams within a batch on their join fields.
    /// Output fields: the join fields, then each input's other fields.
    Join {
        /// Each input's join fields, as many per input.
        fields: Vec<Vec<String>>,
        /// Each input's kind: inner, or outer (kept with nulls when nothing
        /// matches).
        kinds: Vec<JoinKind>,
        /// Names of the output fields.
        output: Vec<String>,
    },
    /// The least (or greatest) tuple of each batch, ordered by `by` (every
    /// field, in order, when empty); nothing for an empty batch.
    Extreme {
        /// Fields compared, in order.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        by: Vec<String>,
        /// The greatest instead of the least.
        max: bool,
    },
    /// Aggregates each window of the stream (per group when `group` is
    /// set), exactly once: the open windows live in `state`, and each
    /// window's result is emitted once, in the commit of the batch that
    /// closes it. Output fields: `group`, `window_start`, `window_end`, then
    /// the aggregator's.
    Window {
        /// How tuples fall into windows, and when a window closes.
        window: WindowDef,
        /// The state the open windows are kept in (opaque).
        state: StateDef,
        /// Group-by fields; empty for none.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        group: Vec<String>,
        /// How a window's tuples are aggregated (combiner, reducer or
        /// built-in: one partial per window, not its tuples).
        aggregator: AggregatorDef,
    },
    /// The tuples a window found late, as they came: inputs are the
    /// window's input, then the window. Output fields: the window's input's.
    LateTuples,
    /// Ends a stream of the commit phase: the host publishes each tuple of
    /// every committed batch, exactly once. Nothing follows it.
    Sink {
        /// Where the tuples go.
        sink: SinkDef,
    },
}

/// How a window operation cuts its stream into windows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum WindowDef {
    /// Trident's count windows, per group: every `slide` tuples, a window
    /// of the last `size` (tumbling when `slide` is `size`). A group's
    /// tuples are numbered from 0 in the order the spout emitted them; a
    /// window's end is a tuple number and its start the end less `size`,
    /// below 0 for the first windows of a sliding one, which hold fewer.
    Count {
        /// Tuples in a window.
        size: u64,
        /// Tuples between the ends of two windows.
        slide: u64,
    },
    /// Trident's duration windows: `[start, start + size_ms)`, `start` a
    /// multiple of `slide_ms`, by the time the host emitted each batch
    /// (recorded with the batch, so that a replay falls into the same
    /// windows). A window closes with the first batch emitted at or after
    /// its end.
    Duration {
        /// Window length, in milliseconds.
        size_ms: u64,
        /// Milliseconds between the starts of two windows (tumbling when
        /// it is `size_ms`).
        slide_ms: u64,
    },
    /// Event-time windows `[start, start + size_ms)`, `start` a multiple of
    /// `slide_ms`, by the tuple's timestamp in `field` (milliseconds, an
    /// integer). Each spout partition's watermark is the greatest timestamp
    /// of its tuples less `max_delay_ms`, and the operation's the least of
    /// those of the partitions not idle (see `idle_timeout_ms`); a window
    /// closes once the watermark reaches its end plus `lateness_ms`, and a
    /// tuple whose windows have all closed is late.
    EventTime {
        /// The timestamp field.
        field: String,
        /// Window length, in milliseconds.
        size_ms: u64,
        /// Milliseconds between the starts of two windows (tumbling when
        /// it is `size_ms`).
        slide_ms: u64,
        /// How far out of order timestamps may come.
        #[serde(default, skip_serializing_if = "is_zero")]
        max_delay_ms: u64,
        /// How long after the watermark passes its end a window still
        /// takes tuples.
        #[serde(default, skip_serializing_if = "is_zero")]
        lateness_ms: u64,
        /// How long a spout partition that has brought tuples may bring
        /// none, in event time (while the greatest timestamp seen moves on
        /// by more than this), before it stops holding the watermark back;
        /// none: it holds it back until it brings more.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        idle_timeout_ms: Option<u64>,
    },
    /// Event-time session windows, per group: a tuple at `t` opens
    /// `[t, t + gap_ms)`, and sessions that meet (one starting at or before
    /// the other's end) merge into one. Watermark and lateness as for
    /// [`WindowDef::EventTime`]; a tuple is late when the session it would
    /// open has closed already and it meets no session still open.
    Session {
        /// The timestamp field.
        field: String,
        /// The gap of inactivity that ends a session, in milliseconds.
        gap_ms: u64,
        /// How far out of order timestamps may come.
        #[serde(default, skip_serializing_if = "is_zero")]
        max_delay_ms: u64,
        /// How long after the watermark passes its end a session still
        /// takes tuples.
        #[serde(default, skip_serializing_if = "is_zero")]
        lateness_ms: u64,
        /// How long a spout partition that has brought tuples may bring
        /// none, in event time (while the greatest timestamp seen moves on
        /// by more than this), before it stops holding the watermark back;
        /// none: it holds it back until it brings more.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        idle_timeout_ms: Option<u64>,
    },
}

impl WindowDef {
    /// The event-time field windows go by, if they go by one.
    pub fn time_field(&self) -> Option<&str> {
        match self {
            WindowDef::EventTime { field, .. } | WindowDef::Session { field, .. } => Some(field),
            WindowDef::Count { .. } | WindowDef::Duration { .. } => None,
        }
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Where a sink publishes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum SinkDef {
    /// A NATS JetStream stream, through the subject one of its streams
    /// takes.
    #[serde(rename = "jetstream")]
    JetStream {
        /// The subject each tuple is published to (no wildcard).
        subject: String,
        /// How a tuple becomes a message's payload.
        payload: SinkPayloadDef,
    },
    /// A Kafka topic: each tuple a record, spread over the topic's
    /// partitions, carrying its batch's txid and place in headers.
    Kafka {
        /// The topic (it must exist).
        topic: String,
        /// How a tuple becomes a record's value.
        payload: SinkPayloadDef,
    },
}

impl SinkDef {
    /// How a tuple becomes a message's payload or a record's value.
    pub fn payload(&self) -> &SinkPayloadDef {
        match self {
            SinkDef::JetStream { payload, .. } | SinkDef::Kafka { payload, .. } => payload,
        }
    }

    /// Where it publishes, in words: "subject S" or "topic T".
    pub fn target(&self) -> String {
        match self {
            SinkDef::JetStream { subject, .. } => format!("NATS JetStream subject {subject}"),
            SinkDef::Kafka { topic, .. } => format!("Kafka topic {topic}"),
        }
    }
}

/// How a sink's tuple becomes a message's payload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "as", rename_all = "kebab-case", deny_unknown_fields)]
pub enum SinkPayloadDef {
    /// A JSON object of every field of the tuple, by name.
    Json,
    /// One field's value, a string or bytes, as the payload itself.
    Raw {
        /// The field.
        field: String,
    },
}

impl OperationDef {
    /// The state this operation writes.
    pub fn written_state(&self) -> Option<&StateDef> {
        match self {
            OperationDef::PersistentAggregate { state, .. }
            | OperationDef::PartitionPersist { state, .. }
            | OperationDef::Window { state, .. } => Some(state),
            _ => None,
        }
    }

    /// The operation's name in the stream API.
    pub fn kind_name(&self) -> &'static str {
        match self {
            OperationDef::Spout { .. } => "spout",
            OperationDef::QueryStream { .. } => "query-stream",
            OperationDef::Each { .. } => "each",
            OperationDef::Map { .. } => "map",
            OperationDef::FlatMap { .. } => "flat-map",
            OperationDef::Peek { .. } => "peek",
            OperationDef::Filter { .. } => "filter",
            OperationDef::Project { .. } => "project",
            OperationDef::Partition { .. } => "partition",
            OperationDef::Aggregate { scope: AggregateScope::Partition, .. } => "partition-aggregate",
            OperationDef::Aggregate { scope: AggregateScope::Batch, .. } => "aggregate",
            OperationDef::PersistentAggregate { .. } => "persistent-aggregate",
            OperationDef::PartitionPersist { .. } => "partition-persist",
            OperationDef::StateQuery { .. } => "state-query",
            OperationDef::Merge => "merge",
            OperationDef::Join { .. } => "join",
            OperationDef::Extreme { max: false, .. } => "min",
            OperationDef::Extreme { max: true, .. } => "max",
            OperationDef::Window { .. } => "window",
            OperationDef::LateTuples => "late-tuples",
            OperationDef::Sink { .. } => "sink",
        }
    }
}

/// How tuples move between partitions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Partitioning {
    /// Round-robin.
    Shuffle,
    /// By a hash of `fields`: equal values meet in one partition.
    Fields {
        /// The fields hashed.
        fields: Vec<String>,
    },
    /// Everything to one partition.
    Global,
    /// Everything to one partition, per batch.
    BatchGlobal,
    /// A copy to every partition.
    Broadcast,
}

/// Where an aggregation's groups end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AggregateScope {
    /// Each partition of the batch on its own (`partition_aggregate`).
    Partition,
    /// The whole batch (`aggregate`): one result even for an empty batch.
    Batch,
}

/// How a join treats an input's tuples that match nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JoinKind {
    /// Dropped.
    Inner,
    /// Kept, the other inputs' fields null.
    Outer,
}

/// One aggregator of an aggregation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AggregatorDef {
    /// Operator id the guest dispatches on.
    pub id: String,
    /// Its contract.
    pub kind: AggregatorKind,
    /// Fields it reads.
    pub input: Vec<String>,
    /// Fields it outputs.
    pub output: Vec<String>,
}

/// Trident's aggregator contracts, and the host's built-ins.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "name", rename_all = "kebab-case")]
pub enum AggregatorKind {
    /// Run by the host, without a call into the guest.
    Builtin(Builtin),
    /// The guest's combiner aggregator.
    Combiner,
    /// The guest's reducer aggregator.
    Reducer,
    /// The guest's general aggregator.
    General,
}

/// The query function of a `state_query`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum QueryDef {
    /// The host's `MapGet`: the value of the key made of the input fields.
    MapGet,
    /// The guest's query function registered under the node's id.
    Guest,
}

/// A state owned by the host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateDef {
    /// The state's name within the topology.
    pub name: String,
    /// How updates are made exactly-once.
    pub kind: StateKind,
    /// Entries the host keeps cached in front of the store (Trident's
    /// `CachedMap`); the host's default when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_size: Option<usize>,
}

/// Trident's state kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StateKind {
    /// Stores `{txid, value}`; a batch already applied is skipped.
    Transactional,
    /// Stores `{txid, curr, prev}`; a replay recomputes from `prev`.
    Opaque,
    /// Stores the value alone, updated blindly: no exactly-once guarantee.
    NonTransactional,
}

/// Parses what `describe` returned.
pub fn parse_description(json: &str) -> Result<Vec<TopologyDef>, serde_json::Error> {
    serde_json::from_str(json)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deeply_nested_description_is_an_error_not_a_stack_overflow() {
        // Internally tagged operations are buffered before their tag is
        // read: serde_json's depth limit is what stops a nesting this deep,
        // on a thread with a server worker's 2 MiB stack.
        let depth = 100_000;
        let json = format!(
            r#"[{{"name":"t","nodes":[{{"id":"a","op":{{"input":{}0{},"op":"filter"}}}}]}}]"#,
            "[".repeat(depth),
            "]".repeat(depth)
        );
        let err = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || parse_description(&json).unwrap_err().to_string())
            .unwrap()
            .join()
            .unwrap();
        assert!(err.contains("recursion limit exceeded"), "{err}");
    }

    #[test]
    fn states_are_listed_once_each_in_the_order_of_their_first_writers() {
        let state = |name: &str| StateDef { name: name.into(), kind: StateKind::Opaque, cache_size: None };
        let persist = |name: &str| NodeDef {
            id: format!("p-{name}"),
            inputs: Vec::new(),
            parallelism: 1,
            op: OperationDef::PartitionPersist { state: state(name), input: Vec::new(), output: Vec::new() },
        };
        let def = TopologyDef {
            name: "t".into(),
            nodes: vec![persist("b"), persist("a"), persist("b")],
            ..Default::default()
        };
        let names: Vec<&str> = def.states().iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["b", "a"]);
    }
}

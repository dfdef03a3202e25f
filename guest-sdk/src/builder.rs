//! The builder users write topologies with, in Trident's style, next to the
//! operators they call:
//!
//! ```
//! use weir_sdk::prelude::*;
//!
//! struct Split;
//! impl Function for Split {
//!     fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
//!         for word in tuple.str(0)?.split_whitespace() {
//!             out.emit([word])?;
//!         }
//!         Ok(())
//!     }
//! }
//!
//! let topology = Topology::new("word-count");
//! let counts = topology
//!     .new_stream(FileLines::new("sentence"))
//!     .each(["sentence"], Split, ["word"])
//!     .name("split")
//!     .group_by(["word"])
//!     .persistent_aggregate(State::transactional("counts"), Count, ["count"]);
//! topology
//!     .new_query_stream("words")
//!     .each(["args"], Split, ["word"])
//!     .group_by(["word"])
//!     .state_query(&counts, ["word"], MapGet, ["count"])
//!     .aggregate(["count"], Sum, ["sum"]);
//! assert_eq!(topology.build().definition().nodes.len(), 8);
//! ```
//!
//! Streams are handles: using one twice branches it.

use crate::codec::Value;
use crate::operator::{
    Aggregator, BatchInfo, BatchSpout, CombinerAggregator, Consumer, Error, Filter, FlatMapFunction, Function,
    MapFunction, MapGet, PartitionedSpout, QueryFunction, ReducerAggregator, StateUpdater,
};
use crate::topology::{
    AggregateScope, AggregatorDef, AggregatorKind, DirGrant, GuestSpoutKind, JetStreamDef, JetStreamKind, JoinKind,
    Limits, NodeDef, OperationDef, Partitioning, PayloadDef, QueryDef, SPOUT_ID, SandboxDef, SinkDef, SinkPayloadDef,
    SpoutDef, StateDef, StateKind, TopologyDef, WindowDef,
};
use crate::tuple::{Emitter, Tuple};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

/// How a window operation cuts its stream into windows: by a count of
/// tuples per group (Trident's), or by a timestamp field (event time).
#[derive(Clone, Debug)]
pub struct Window(WindowDef);

impl Window {
    /// Trident's tumbling count window: every `size` tuples of a group.
    pub fn tumbling_count(size: u64) -> Window {
        Window(WindowDef::Count { size, slide: size })
    }

    /// Trident's sliding count window: every `slide` tuples of a group, the
    /// last `size`.
    pub fn sliding_count(size: u64, slide: u64) -> Window {
        Window(WindowDef::Count { size, slide })
    }

    /// Trident's tumbling duration window: `size_ms` of processing time, by
    /// when the host emitted each batch.
    pub fn tumbling_duration(size_ms: u64) -> Window {
        Window(WindowDef::Duration { size_ms, slide_ms: size_ms })
    }

    /// Trident's sliding duration window: `size_ms` of processing time,
    /// one starting every `slide_ms`.
    pub fn sliding_duration(size_ms: u64, slide_ms: u64) -> Window {
        Window(WindowDef::Duration { size_ms, slide_ms })
    }

    /// Tumbling event-time windows of `size_ms` by the timestamp (in
    /// milliseconds) in `field`.
    pub fn tumbling(field: &str, size_ms: u64) -> Window {
        Window::sliding(field, size_ms, size_ms)
    }

    /// Sliding event-time windows of `size_ms`, one starting every
    /// `slide_ms`, by the timestamp (in milliseconds) in `field`.
    pub fn sliding(field: &str, size_ms: u64, slide_ms: u64) -> Window {
        let field = field.to_owned();
        Window(WindowDef::EventTime { field, size_ms, slide_ms, max_delay_ms: 0, lateness_ms: 0 })
    }

    /// Event-time session windows by the timestamp (in milliseconds) in
    /// `field`: a group's session ends after `gap_ms` without a tuple.
    pub fn session(field: &str, gap_ms: u64) -> Window {
        Window(WindowDef::Session { field: field.to_owned(), gap_ms, max_delay_ms: 0, lateness_ms: 0 })
    }

    /// Event time: timestamps may come up to `ms` out of order (the
    /// watermark trails the greatest timestamp by this much).
    pub fn max_delay_ms(mut self, ms: u64) -> Window {
        if let WindowDef::EventTime { max_delay_ms, .. } | WindowDef::Session { max_delay_ms, .. } = &mut self.0 {
            *max_delay_ms = ms;
        }
        self
    }

    /// Event time: a window still takes tuples for `ms` after the
    /// watermark passes its end, and closes then.
    pub fn lateness_ms(mut self, ms: u64) -> Window {
        if let WindowDef::EventTime { lateness_ms, .. } | WindowDef::Session { lateness_ms, .. } = &mut self.0 {
            *lateness_ms = ms;
        }
        self
    }
}

/// A state to persist into.
#[derive(Clone, Debug)]
pub struct State(StateDef);

impl State {
    /// A transactional state named `name`.
    pub fn transactional(name: &str) -> State {
        State::of_kind(name, StateKind::Transactional)
    }

    /// An opaque state named `name`.
    pub fn opaque(name: &str) -> State {
        State::of_kind(name, StateKind::Opaque)
    }

    /// A non-transactional state named `name`.
    pub fn non_transactional(name: &str) -> State {
        State::of_kind(name, StateKind::NonTransactional)
    }

    /// Keeps up to `entries` of the state cached in front of the store.
    pub fn cache_size(mut self, entries: usize) -> State {
        self.0.cache_size = Some(entries);
        self
    }

    fn of_kind(name: &str, kind: StateKind) -> State {
        State(StateDef { name: name.to_owned(), kind, cache_size: None })
    }
}

/// Something a stream can start from.
pub trait Spout {
    /// The spout's definition, registering any guest code with `topology`.
    fn define(self, topology: &mut Topology) -> SpoutDef;
}

/// The host's built-in spout over the lines of the run's input file.
#[derive(Clone, Debug)]
pub struct FileLines {
    field: String,
}

impl FileLines {
    /// A spout emitting each line of the input into `field`.
    pub fn new(field: &str) -> FileLines {
        FileLines { field: field.to_owned() }
    }
}

impl Spout for FileLines {
    fn define(self, _: &mut Topology) -> SpoutDef {
        SpoutDef::FileLines { field: self.field }
    }
}

/// The host's built-in spout over the lines of the files of the run's input
/// directory, in name order.
#[derive(Clone, Debug)]
pub struct DirectoryLines {
    field: String,
}

impl DirectoryLines {
    /// A spout emitting each line into `field`.
    pub fn new(field: &str) -> DirectoryLines {
        DirectoryLines { field: field.to_owned() }
    }
}

impl Spout for DirectoryLines {
    fn define(self, _: &mut Topology) -> SpoutDef {
        SpoutDef::DirectoryLines { field: self.field }
    }
}

/// The host's built-in spout emitting the integers 0 to `count` - 1.
#[derive(Clone, Debug)]
pub struct Generator {
    field: String,
    count: u64,
}

impl Generator {
    /// A spout emitting `count` integers into `field`.
    pub fn new(field: &str, count: u64) -> Generator {
        Generator { field: field.to_owned(), count }
    }
}

impl Spout for Generator {
    fn define(self, _: &mut Topology) -> SpoutDef {
        SpoutDef::Generator { field: self.field, count: self.count }
    }
}

/// The host's built-in spout over a NATS JetStream stream, each subject a
/// partition, read by the host from the server `weir run --nats` names:
///
/// ```
/// use weir_sdk::prelude::*;
///
/// let clicks = JetStream::transactional("clicks", ["clicks.*"])
///     .json(["user", "url"])
///     .timestamp_field("at")
///     .max_per_partition(500);
/// # let _ = clicks;
/// ```
///
/// The payload goes into one bytes field named `payload` unless
/// [`JetStream::string`], [`JetStream::bytes`] or [`JetStream::json`] says
/// otherwise.
#[derive(Clone, Debug)]
pub struct JetStream(JetStreamDef);

impl JetStream {
    /// A transactional spout: a replay reads exactly the sequence range each
    /// partition had in the batch (the topology halts if the stream no
    /// longer holds it). `subjects` are the stream's subjects to read, or
    /// wildcards matching them.
    pub fn transactional<const N: usize>(stream: &str, subjects: [&str; N]) -> JetStream {
        JetStream::of_kind(JetStreamKind::Transactional, stream, subjects)
    }

    /// An opaque spout: a replay reads afresh from each partition's next
    /// sequence as of the last commit.
    pub fn opaque<const N: usize>(stream: &str, subjects: [&str; N]) -> JetStream {
        JetStream::of_kind(JetStreamKind::Opaque, stream, subjects)
    }

    fn of_kind<const N: usize>(promise: JetStreamKind, stream: &str, subjects: [&str; N]) -> JetStream {
        JetStream(JetStreamDef {
            promise,
            stream: stream.to_owned(),
            subjects: names(subjects),
            payload: PayloadDef::Bytes { field: "payload".to_owned() },
            subject_field: None,
            sequence_field: None,
            timestamp_field: None,
            max_per_partition: None,
        })
    }

    /// The payload as bytes in `field`.
    pub fn bytes(mut self, field: &str) -> JetStream {
        self.0.payload = PayloadDef::Bytes { field: field.to_owned() };
        self
    }

    /// The payload as a UTF-8 string in `field`.
    pub fn string(mut self, field: &str) -> JetStream {
        self.0.payload = PayloadDef::String { field: field.to_owned() };
        self
    }

    /// The payload is a JSON object: each of `fields` takes its member of
    /// that name.
    pub fn json<const N: usize>(mut self, fields: [&str; N]) -> JetStream {
        self.0.payload = PayloadDef::Json { fields: names(fields) };
        self
    }

    /// Also emits the message's subject in `field`.
    pub fn subject_field(mut self, field: &str) -> JetStream {
        self.0.subject_field = Some(field.to_owned());
        self
    }

    /// Also emits the message's stream sequence in `field`.
    pub fn sequence_field(mut self, field: &str) -> JetStream {
        self.0.sequence_field = Some(field.to_owned());
        self
    }

    /// Also emits the time the server stored the message (milliseconds
    /// since the Unix epoch) in `field`.
    pub fn timestamp_field(mut self, field: &str) -> JetStream {
        self.0.timestamp_field = Some(field.to_owned());
        self
    }

    /// Takes at most `messages` from each partition per batch (the run's
    /// batch size when unset).
    pub fn max_per_partition(mut self, messages: u64) -> JetStream {
        self.0.max_per_partition = Some(messages);
        self
    }
}

impl Spout for JetStream {
    fn define(self, _: &mut Topology) -> SpoutDef {
        SpoutDef::JetStream(self.0)
    }
}

/// A sink publishing to NATS JetStream, for [`Stream::sink`]: each tuple of
/// every committed batch is published once to `subject`, which a stream
/// of the server `weir run --nats` names must take.
///
/// ```
/// use weir_sdk::prelude::*;
///
/// let per_page = JetStreamSink::subject("page-counts");
/// let raw = JetStreamSink::subject("pages.raw").raw("page");
/// # let _ = (per_page, raw);
/// ```
///
/// The payload is a JSON object of the tuple's fields unless
/// [`JetStreamSink::raw`] names one field to publish as it is.
#[derive(Clone, Debug)]
pub struct JetStreamSink(SinkDef);

impl JetStreamSink {
    /// Publishes to `subject`, each tuple as a JSON object of its fields.
    pub fn subject(subject: &str) -> JetStreamSink {
        JetStreamSink(SinkDef::JetStream { subject: subject.to_owned(), payload: SinkPayloadDef::Json })
    }

    /// Publishes the value of `field` (a string or bytes) as the payload.
    pub fn raw(self, field: &str) -> JetStreamSink {
        let SinkDef::JetStream { subject, .. } = self.0;
        JetStreamSink(SinkDef::JetStream { subject, payload: SinkPayloadDef::Raw { field: field.to_owned() } })
    }
}

/// The end of a stream in a sink: it may be named, nothing follows it.
#[derive(Clone)]
pub struct SinkEnd {
    stream: Stream,
}

impl SinkEnd {
    /// Gives the sink the id `label`, used in logs, errors and message ids.
    pub fn name(self, label: &str) -> SinkEnd {
        SinkEnd { stream: self.stream.name(label) }
    }

    /// Finishes the topology.
    pub fn build(&self) -> Topology {
        self.stream.build()
    }
}

/// A guest spout for [`TopologyBuilder::new_stream`]: a [`BatchSpout`] or a
/// [`PartitionedSpout`], declared with the fields of its tuples.
pub struct GuestSpout {
    kind: GuestSpoutKind,
    fields: Vec<String>,
    code: SpoutCode,
}

pub(crate) enum SpoutCode {
    Batch(Box<dyn BatchSpout>),
    Partitioned(Box<dyn PartitionedSpout>),
}

impl GuestSpout {
    /// A batch spout emitting tuples of `fields`.
    pub fn batch<const N: usize>(spout: impl BatchSpout, fields: [&str; N]) -> GuestSpout {
        GuestSpout { kind: GuestSpoutKind::Batch, fields: names(fields), code: SpoutCode::Batch(Box::new(spout)) }
    }

    /// A partitioned transactional spout emitting tuples of `fields`.
    pub fn partitioned_transactional<const N: usize>(spout: impl PartitionedSpout, fields: [&str; N]) -> GuestSpout {
        let code = SpoutCode::Partitioned(Box::new(spout));
        GuestSpout { kind: GuestSpoutKind::PartitionedTransactional, fields: names(fields), code }
    }

    /// A partitioned opaque spout emitting tuples of `fields`.
    pub fn partitioned_opaque<const N: usize>(spout: impl PartitionedSpout, fields: [&str; N]) -> GuestSpout {
        let code = SpoutCode::Partitioned(Box::new(spout));
        GuestSpout { kind: GuestSpoutKind::PartitionedOpaque, fields: names(fields), code }
    }
}

impl Spout for GuestSpout {
    fn define(self, topology: &mut Topology) -> SpoutDef {
        topology.spout = Some(self.code);
        SpoutDef::Guest { promise: self.kind, fields: self.fields }
    }
}

/// A general aggregator with its state type erased, run over a batch's
/// groups.
pub(crate) trait GroupAggregator: Send + Sync {
    fn run(
        &self,
        info: &BatchInfo,
        groups: u32,
        rows: &mut dyn Iterator<Item = (u32, Tuple<'_>)>,
        out: &mut crate::codec::BatchWriter,
    ) -> Result<(), Error>;
}

impl<A: Aggregator> GroupAggregator for A {
    fn run(
        &self,
        info: &BatchInfo,
        groups: u32,
        rows: &mut dyn Iterator<Item = (u32, Tuple<'_>)>,
        out: &mut crate::codec::BatchWriter,
    ) -> Result<(), Error> {
        let mut states = Vec::with_capacity(groups as usize);
        for group in 0..groups {
            states.push(self.init(info, &mut Emitter::new(out, group))?);
        }
        for (group, tuple) in rows {
            let state = states.get_mut(group as usize).ok_or_else(|| {
                Error::fatal(format!("operator {}: row tagged with group {group} of {groups}", info.operator))
            })?;
            self.aggregate(state, &tuple, &mut Emitter::new(out, group))?;
        }
        for (group, state) in states.into_iter().enumerate() {
            self.complete(state, &mut Emitter::new(out, group as u32))?;
        }
        Ok(())
    }
}

/// A topology: its definition and the operators it calls.
#[derive(Default)]
pub struct Topology {
    def: TopologyDef,
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

/// A topology being defined: where its streams start.
#[derive(Clone)]
pub struct TopologyBuilder {
    topology: Rc<RefCell<Topology>>,
}

impl TopologyBuilder {
    fn root(&self, id: String, op: OperationDef) -> Stream {
        let mut topology = self.topology.borrow_mut();
        topology.def.nodes.push(NodeDef { id, inputs: Vec::new(), parallelism: 1, op });
        Stream { topology: Rc::clone(&self.topology), node: topology.def.nodes.len() - 1 }
    }

    /// A stream from `spout` (one data spout per topology).
    pub fn new_stream(&self, spout: impl Spout) -> Stream {
        let spout = spout.define(&mut self.topology.borrow_mut());
        self.root(SPOUT_ID.to_owned(), OperationDef::Spout { spout })
    }

    /// Trident's DRPC stream: each request to the query `name` enters as one
    /// tuple with its arguments in the field `args`; the stream's last
    /// operation gives the result tuples.
    pub fn new_query_stream(&self, name: &str) -> Stream {
        self.root(format!("query-{name}"), OperationDef::QueryStream { name: name.to_owned() })
    }

    fn join_node(&self, inputs: &[&Stream], op: OperationDef) -> Stream {
        let stream = self.root(String::new(), op);
        let mut topology = self.topology.borrow_mut();
        let node = &mut topology.def.nodes[stream.node];
        node.id = format!("{}-{}", node.op.kind_name(), stream.node);
        node.inputs = inputs.iter().map(|s| s.node).collect();
        drop(topology);
        stream
    }

    /// The tuples of every stream in `streams`, which must have the same
    /// fields.
    pub fn merge<const N: usize>(&self, streams: [&Stream; N]) -> Stream {
        self.join_node(&streams, OperationDef::Merge)
    }

    /// Trident's inner `join` of two streams within each batch on
    /// `fields_a` = `fields_b`; output fields: the join fields, then `a`'s
    /// other fields, then `b`'s, named by `output`.
    pub fn join<const J: usize, const O: usize>(
        &self,
        a: &Stream,
        fields_a: [&str; J],
        b: &Stream,
        fields_b: [&str; J],
        output: [&str; O],
    ) -> Stream {
        self.join_with(a, fields_a, b, fields_b, output, [JoinKind::Inner, JoinKind::Inner])
    }

    /// [`TopologyBuilder::join`] with each side's kind: an outer side keeps
    /// its tuples that match nothing, the other side's fields null.
    pub fn join_with<const J: usize, const O: usize>(
        &self,
        a: &Stream,
        fields_a: [&str; J],
        b: &Stream,
        fields_b: [&str; J],
        output: [&str; O],
        kinds: [JoinKind; 2],
    ) -> Stream {
        let op = OperationDef::Join {
            fields: vec![names(fields_a), names(fields_b)],
            kinds: kinds.to_vec(),
            output: names(output),
        };
        self.join_node(&[a, b], op)
    }

    /// Finishes the topology.
    pub fn build(&self) -> Topology {
        std::mem::take(&mut *self.topology.borrow_mut())
    }
}

/// An aggregator of any of Trident's three kinds: a [`CombinerAggregator`]
/// as it is, a [`ReducerAggregator`] wrapped in [`Reducer`], an
/// [`Aggregator`] wrapped in [`General`].
pub trait IntoAggregator {
    /// Registers the code under `id` and says which kind it is.
    fn register(self, topology: &mut Topology, id: &str) -> AggregatorKind;
}

impl<C: CombinerAggregator> IntoAggregator for C {
    fn register(self, topology: &mut Topology, id: &str) -> AggregatorKind {
        match self.builtin() {
            Some(builtin) => AggregatorKind::Builtin(builtin),
            None => {
                topology.combiners.insert(id.to_owned(), Box::new(self));
                AggregatorKind::Combiner
            }
        }
    }
}

/// Marks a [`ReducerAggregator`] for the aggregation methods.
pub struct Reducer<R>(pub R);

impl<R: ReducerAggregator> IntoAggregator for Reducer<R> {
    fn register(self, topology: &mut Topology, id: &str) -> AggregatorKind {
        topology.reducers.insert(id.to_owned(), Box::new(self.0));
        AggregatorKind::Reducer
    }
}

/// Marks a general [`Aggregator`] for the aggregation methods.
pub struct General<A>(pub A);

impl<A: Aggregator> IntoAggregator for General<A> {
    fn register(self, topology: &mut Topology, id: &str) -> AggregatorKind {
        topology.aggregators.insert(id.to_owned(), Box::new(self.0));
        AggregatorKind::General
    }
}

/// A query function: the host's [`MapGet`], or the guest's [`QueryFunction`].
pub trait IntoQuery {
    /// Registers the code under `id` and says which it is.
    fn register(self, topology: &mut Topology, id: &str) -> QueryDef;
}

impl IntoQuery for MapGet {
    fn register(self, _: &mut Topology, _: &str) -> QueryDef {
        QueryDef::MapGet
    }
}

impl<Q: QueryFunction> IntoQuery for Q {
    fn register(self, topology: &mut Topology, id: &str) -> QueryDef {
        topology.queries.insert(id.to_owned(), Box::new(self));
        QueryDef::Guest
    }
}

struct MapAsFunction<M>(M);

impl<M: MapFunction> Function for MapAsFunction<M> {
    fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
        out.emit(self.0.execute(tuple)?.iter().map(Value::as_ref))
    }
}

struct FlatMapAsFunction<F>(F);

impl<F: FlatMapFunction> Function for FlatMapAsFunction<F> {
    fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
        self.0.execute(tuple, out)
    }
}

struct ConsumerAsFunction<C>(C);

impl<C: Consumer> Function for ConsumerAsFunction<C> {
    fn execute(&self, tuple: &Tuple<'_>, _: &mut Emitter<'_>) -> Result<(), Error> {
        self.0.accept(tuple)
    }
}

/// A stream being defined: each method adds an operation after it and
/// returns the stream that operation produces.
#[derive(Clone)]
pub struct Stream {
    topology: Rc<RefCell<Topology>>,
    node: usize,
}

/// A stream grouped by fields, for the aggregation or query that follows.
#[derive(Clone)]
pub struct GroupedStream {
    stream: Stream,
    group: Vec<String>,
}

/// A state a stream persists into: queried with `state_query`, and the
/// source of the new-values stream.
#[derive(Clone)]
pub struct TridentState {
    stream: Stream,
    name: String,
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

fn names<const N: usize>(fields: [&str; N]) -> Vec<String> {
    fields.iter().map(|f| (*f).to_owned()).collect()
}

impl Stream {
    /// Adds a node reading this stream; `code` registers its guest code
    /// under the node's id.
    fn then(&self, kind: &str, code: impl FnOnce(&mut Topology, &str) -> OperationDef) -> Stream {
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

    /// Trident's `each`: runs `function` over `input`, appending `output`.
    pub fn each<const I: usize, const O: usize>(
        &self,
        input: [&str; I],
        function: impl Function,
        output: [&str; O],
    ) -> Stream {
        self.then("each", |t, id| {
            t.functions.insert(id.to_owned(), Box::new(function));
            OperationDef::Each { input: names(input), output: names(output) }
        })
    }

    /// Trident's `map`: one tuple of `output` replaces each tuple.
    pub fn map<const I: usize, const O: usize>(
        &self,
        input: [&str; I],
        function: impl MapFunction,
        output: [&str; O],
    ) -> Stream {
        self.then("map", |t, id| {
            t.functions.insert(id.to_owned(), Box::new(MapAsFunction(function)));
            OperationDef::Map { input: names(input), output: names(output) }
        })
    }

    /// Trident's `flatMap`: the tuples of `output` it emits replace each tuple.
    pub fn flat_map<const I: usize, const O: usize>(
        &self,
        input: [&str; I],
        function: impl FlatMapFunction,
        output: [&str; O],
    ) -> Stream {
        self.then("flat-map", |t, id| {
            t.functions.insert(id.to_owned(), Box::new(FlatMapAsFunction(function)));
            OperationDef::FlatMap { input: names(input), output: names(output) }
        })
    }

    /// Trident's `peek`: `consumer` sees each tuple, which passes on unchanged.
    pub fn peek<const I: usize>(&self, input: [&str; I], consumer: impl Consumer) -> Stream {
        self.then("peek", |t, id| {
            t.functions.insert(id.to_owned(), Box::new(ConsumerAsFunction(consumer)));
            OperationDef::Peek { input: names(input) }
        })
    }

    /// Trident's `filter`: keeps the tuples `filter` accepts.
    pub fn filter<const I: usize>(&self, input: [&str; I], filter: impl Filter) -> Stream {
        self.then("filter", |t, id| {
            t.filters.insert(id.to_owned(), Box::new(filter));
            OperationDef::Filter { input: names(input) }
        })
    }

    /// Trident's `project`: keeps only `fields`.
    pub fn project<const N: usize>(&self, fields: [&str; N]) -> Stream {
        self.then("project", |_, _| OperationDef::Project { fields: names(fields) })
    }

    fn partition(&self, by: Partitioning) -> Stream {
        self.then("partition", |_, _| OperationDef::Partition { by })
    }

    /// Trident's `shuffle`: tuples spread round-robin over the next stage's
    /// partitions.
    pub fn shuffle(&self) -> Stream {
        self.partition(Partitioning::Shuffle)
    }

    /// Trident's `partitionBy`: equal values of `fields` meet in one partition.
    pub fn partition_by<const N: usize>(&self, fields: [&str; N]) -> Stream {
        self.partition(Partitioning::Fields { fields: names(fields) })
    }

    /// Trident's `global`: every tuple to one partition.
    pub fn global(&self) -> Stream {
        self.partition(Partitioning::Global)
    }

    /// Trident's `batchGlobal`: each batch's tuples to one partition.
    pub fn batch_global(&self) -> Stream {
        self.partition(Partitioning::BatchGlobal)
    }

    /// Trident's `broadcast`: every tuple to every partition.
    pub fn broadcast(&self) -> Stream {
        self.partition(Partitioning::Broadcast)
    }

    /// Trident's `groupBy`: the aggregation or query that follows runs per
    /// group of `fields`.
    pub fn group_by<const N: usize>(&self, fields: [&str; N]) -> GroupedStream {
        GroupedStream { stream: self.clone(), group: names(fields) }
    }

    fn aggregate_node(
        &self,
        scope: AggregateScope,
        group: Vec<String>,
        input: Vec<String>,
        aggregator: impl IntoAggregator,
        output: Vec<String>,
    ) -> Stream {
        let kind = match scope {
            AggregateScope::Partition => "partition-aggregate",
            AggregateScope::Batch => "aggregate",
        };
        self.then(kind, |t, id| {
            let kind = aggregator.register(t, id);
            let aggregators = vec![AggregatorDef { id: id.to_owned(), kind, input, output }];
            OperationDef::Aggregate { scope, group, aggregators }
        })
    }

    /// Trident's `partitionAggregate`: aggregates each partition of a batch.
    pub fn partition_aggregate<const I: usize, const O: usize>(
        &self,
        input: [&str; I],
        aggregator: impl IntoAggregator,
        output: [&str; O],
    ) -> Stream {
        self.aggregate_node(AggregateScope::Partition, Vec::new(), names(input), aggregator, names(output))
    }

    /// Trident's `aggregate`: one result per batch, even an empty one.
    pub fn aggregate<const I: usize, const O: usize>(
        &self,
        input: [&str; I],
        aggregator: impl IntoAggregator,
        output: [&str; O],
    ) -> Stream {
        self.aggregate_node(AggregateScope::Batch, Vec::new(), names(input), aggregator, names(output))
    }

    /// Trident's `chainedAgg`: several aggregators over the same tuples,
    /// their outputs joined as a cross product.
    pub fn chained_agg(&self) -> ChainedAggregate {
        ChainedAggregate { stream: self.clone(), group: Vec::new(), scope: None, parts: Vec::new() }
    }

    fn persist(
        &self,
        state: State,
        group: Vec<String>,
        input: Vec<String>,
        aggregator: impl IntoAggregator,
        output: Vec<String>,
    ) -> TridentState {
        let name = state.0.name.clone();
        let stream = self.then("persistent-aggregate", |t, id| {
            let kind = aggregator.register(t, id);
            let aggregator = AggregatorDef { id: id.to_owned(), kind, input, output };
            OperationDef::PersistentAggregate { state: state.0, group, aggregator }
        });
        TridentState { stream, name }
    }

    /// Trident's `persistentAggregate` over the whole stream: each batch's
    /// value is combined into `state`, a single value, exactly once.
    pub fn persistent_aggregate<const O: usize>(
        &self,
        state: State,
        aggregator: impl IntoAggregator,
        output: [&str; O],
    ) -> TridentState {
        self.persist(state, Vec::new(), Vec::new(), aggregator, names(output))
    }

    /// `persistent_aggregate` whose aggregator reads `input`.
    pub fn persistent_aggregate_over<const I: usize, const O: usize>(
        &self,
        state: State,
        input: [&str; I],
        aggregator: impl IntoAggregator,
        output: [&str; O],
    ) -> TridentState {
        self.persist(state, Vec::new(), names(input), aggregator, names(output))
    }

    fn window_node(
        &self,
        window: Window,
        state: &str,
        group: Vec<String>,
        input: Vec<String>,
        aggregator: impl IntoAggregator,
        output: Vec<String>,
    ) -> Stream {
        self.then("window", |t, id| {
            let kind = aggregator.register(t, id);
            let state = StateDef { name: state.to_owned(), kind: StateKind::Opaque, cache_size: None };
            let aggregator = AggregatorDef { id: id.to_owned(), kind, input, output };
            OperationDef::Window { window: window.0, state, group, aggregator }
        })
    }

    /// Trident's `tumblingWindow` and `slidingWindow`, and event-time
    /// windows: aggregates each window of the stream, keeping the open
    /// windows in the state `state`, exactly once. Each window's result is
    /// emitted once, when it closes: `window_start`, `window_end`, then
    /// `output`.
    pub fn window<const I: usize, const O: usize>(
        &self,
        window: Window,
        state: &str,
        input: [&str; I],
        aggregator: impl IntoAggregator,
        output: [&str; O],
    ) -> Stream {
        self.window_node(window, state, Vec::new(), names(input), aggregator, names(output))
    }

    /// On a window's stream: the tuples the window found late (every window
    /// they fall into had closed), as they came, with the fields of the
    /// window's input. A late tuple is dropped from the windows either way.
    pub fn late_stream(&self) -> Stream {
        let mut topology = self.topology.borrow_mut();
        let index = topology.def.nodes.len();
        let window = &topology.def.nodes[self.node];
        let inputs = vec![window.inputs.first().copied().unwrap_or(self.node), self.node];
        let parallelism = window.parallelism;
        topology.def.nodes.push(NodeDef {
            id: format!("late-tuples-{index}"),
            inputs,
            parallelism,
            op: OperationDef::LateTuples,
        });
        Stream { topology: Rc::clone(&self.topology), node: index }
    }

    /// Trident's `partitionPersist`: `updater` writes each batch partition's
    /// `input` tuples into `state` in the commit phase; what it emits (tuples
    /// of `output`) forms the new-values stream.
    pub fn partition_persist<const I: usize, const O: usize>(
        &self,
        state: State,
        input: [&str; I],
        updater: impl StateUpdater,
        output: [&str; O],
    ) -> TridentState {
        let name = state.0.name.clone();
        let stream = self.then("partition-persist", |t, id| {
            t.updaters.insert(id.to_owned(), Box::new(updater));
            OperationDef::PartitionPersist { state: state.0, input: names(input), output: names(output) }
        });
        TridentState { stream, name }
    }

    /// Trident's `stateQuery`: looks each tuple's `input` up in `state`
    /// with `query`, appending `output`.
    pub fn state_query<const I: usize, const O: usize>(
        &self,
        state: &TridentState,
        input: [&str; I],
        query: impl IntoQuery,
        output: [&str; O],
    ) -> Stream {
        self.then("state-query", |t, id| {
            let query = query.register(t, id);
            OperationDef::StateQuery { state: state.name.clone(), input: names(input), query, output: names(output) }
        })
    }

    fn extreme(&self, by: Vec<String>, max: bool) -> Stream {
        self.then(if max { "max" } else { "min" }, |_, _| OperationDef::Extreme { by, max })
    }

    /// Trident's `minBy`: the batch's tuple with the least `field`.
    pub fn min_by(&self, field: &str) -> Stream {
        self.extreme(vec![field.to_owned()], false)
    }

    /// Trident's `maxBy`: the batch's tuple with the greatest `field`.
    pub fn max_by(&self, field: &str) -> Stream {
        self.extreme(vec![field.to_owned()], true)
    }

    /// Trident's `min`: the batch's least tuple, comparing fields in order.
    pub fn min(&self) -> Stream {
        self.extreme(Vec::new(), false)
    }

    /// Trident's `max`: the batch's greatest tuple, comparing fields in order.
    pub fn max(&self) -> Stream {
        self.extreme(Vec::new(), true)
    }

    /// Ends this stream in `sink`: every committed batch's tuples are
    /// published exactly once, written with the batch's state in one
    /// commit. The stream must be of the commit phase: a state's
    /// [`TridentState::new_values_stream`], or after a `state_query`.
    pub fn sink(&self, sink: JetStreamSink) -> SinkEnd {
        SinkEnd { stream: self.then("sink", |_, _| OperationDef::Sink { sink: sink.0 }) }
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

impl GroupedStream {
    fn partitioned(&self) -> Stream {
        let fields = self.group.clone();
        self.stream.then("partition", |_, _| OperationDef::Partition { by: Partitioning::Fields { fields } })
    }

    /// Aggregates each group of the batch; output: the group fields, then
    /// `output`.
    pub fn aggregate<const I: usize, const O: usize>(
        &self,
        input: [&str; I],
        aggregator: impl IntoAggregator,
        output: [&str; O],
    ) -> Stream {
        self.stream.aggregate_node(AggregateScope::Batch, self.group.clone(), names(input), aggregator, names(output))
    }

    /// Aggregates each group within each partition (groups never span
    /// partitions: the stream is partitioned by the group fields first).
    pub fn partition_aggregate<const I: usize, const O: usize>(
        &self,
        input: [&str; I],
        aggregator: impl IntoAggregator,
        output: [&str; O],
    ) -> Stream {
        let group = self.group.clone();
        self.partitioned().aggregate_node(AggregateScope::Partition, group, names(input), aggregator, names(output))
    }

    /// Chained aggregators per group.
    pub fn chained_agg(&self) -> ChainedAggregate {
        ChainedAggregate { stream: self.stream.clone(), group: self.group.clone(), scope: None, parts: Vec::new() }
    }

    /// Trident's grouped `persistentAggregate`: each batch's value per group
    /// is combined into `state`, a map keyed by the group fields, exactly once.
    pub fn persistent_aggregate<const O: usize>(
        &self,
        state: State,
        aggregator: impl IntoAggregator,
        output: [&str; O],
    ) -> TridentState {
        self.stream.persist(state, self.group.clone(), Vec::new(), aggregator, names(output))
    }

    /// Grouped `persistent_aggregate` whose aggregator reads `input`.
    pub fn persistent_aggregate_over<const I: usize, const O: usize>(
        &self,
        state: State,
        input: [&str; I],
        aggregator: impl IntoAggregator,
        output: [&str; O],
    ) -> TridentState {
        self.stream.persist(state, self.group.clone(), names(input), aggregator, names(output))
    }

    /// [`Stream::window`] per group: each group's windows, output after the
    /// group fields.
    pub fn window<const I: usize, const O: usize>(
        &self,
        window: Window,
        state: &str,
        input: [&str; I],
        aggregator: impl IntoAggregator,
        output: [&str; O],
    ) -> Stream {
        self.stream.window_node(window, state, self.group.clone(), names(input), aggregator, names(output))
    }

    /// `state_query` after partitioning by the group fields.
    pub fn state_query<const I: usize, const O: usize>(
        &self,
        state: &TridentState,
        input: [&str; I],
        query: impl IntoQuery,
        output: [&str; O],
    ) -> Stream {
        self.partitioned().state_query(state, input, query, output)
    }
}

/// Registers an aggregator's code under an id, saying which kind it is.
type Registration = Box<dyn FnOnce(&mut Topology, &str) -> AggregatorKind>;

/// Aggregators chained over the same tuples (Trident's `chainedAgg`).
pub struct ChainedAggregate {
    stream: Stream,
    group: Vec<String>,
    scope: Option<AggregateScope>,
    parts: Vec<(Vec<String>, Registration, Vec<String>)>,
}

impl ChainedAggregate {
    fn part(
        mut self,
        scope: AggregateScope,
        input: Vec<String>,
        aggregator: impl IntoAggregator + 'static,
        output: Vec<String>,
    ) -> ChainedAggregate {
        if self.scope.is_some_and(|s| s != scope) {
            panic!("a chained aggregate's aggregators are all partition_aggregate or all aggregate");
        }
        self.scope = Some(scope);
        self.parts.push((input, Box::new(move |t, id| aggregator.register(t, id)), output));
        self
    }

    /// Adds an aggregator over each partition.
    pub fn partition_aggregate<const I: usize, const O: usize>(
        self,
        input: [&str; I],
        aggregator: impl IntoAggregator + 'static,
        output: [&str; O],
    ) -> ChainedAggregate {
        self.part(AggregateScope::Partition, names(input), aggregator, names(output))
    }

    /// Adds an aggregator over the whole batch.
    pub fn aggregate<const I: usize, const O: usize>(
        self,
        input: [&str; I],
        aggregator: impl IntoAggregator + 'static,
        output: [&str; O],
    ) -> ChainedAggregate {
        self.part(AggregateScope::Batch, names(input), aggregator, names(output))
    }

    /// Ends the chain: the stream of the group fields, then every
    /// aggregator's outputs.
    pub fn chain_end(self) -> Stream {
        let ChainedAggregate { stream, group, scope, parts } = self;
        let scope = scope.unwrap_or(AggregateScope::Batch);
        stream.then("chained-aggregate", |t, id| {
            let aggregators = parts
                .into_iter()
                .enumerate()
                .map(|(k, (input, register, output))| {
                    let id = if k == 0 { id.to_owned() } else { format!("{id}.{k}") };
                    let kind = register(t, &id);
                    AggregatorDef { id, kind, input, output }
                })
                .collect();
            OperationDef::Aggregate { scope, group, aggregators }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::Count;
    use crate::topology::{describe, parse_description};

    struct Nothing;
    impl Function for Nothing {
        fn execute(&self, _: &Tuple<'_>, _: &mut Emitter<'_>) -> Result<(), Error> {
            Ok(())
        }
    }

    #[test]
    fn description_round_trips_and_names_operators() {
        let topology = Topology::new("t")
            .new_stream(FileLines::new("line"))
            .each(["line"], Nothing, ["word"])
            .name("split")
            .group_by(["word"])
            .persistent_aggregate(State::opaque("counts"), Count, ["count"])
            .build();
        assert!(topology.function("split").is_some());
        assert!(topology.function("each-1").is_none());
        let json = describe(&[topology]);
        let defs = parse_description(&json).unwrap();
        assert_eq!(defs[0].name, "t");
        assert_eq!(
            defs[0].nodes[2],
            NodeDef {
                id: "persistent-aggregate-2".into(),
                inputs: vec![1],
                parallelism: 1,
                op: OperationDef::PersistentAggregate {
                    state: StateDef { name: "counts".into(), kind: StateKind::Opaque, cache_size: None },
                    group: vec!["word".into()],
                    aggregator: AggregatorDef {
                        id: "persistent-aggregate-2".into(),
                        kind: AggregatorKind::Builtin(crate::operator::Builtin::Count),
                        input: vec![],
                        output: vec!["count".into()],
                    },
                },
            }
        );
    }

    #[test]
    fn parallelism_covers_the_stage_back_to_the_last_repartition() {
        let t = Topology::new("t");
        t.new_stream(FileLines::new("line"))
            .each(["line"], Nothing, ["word"])
            .shuffle()
            .each(["word"], Nothing, ["x"])
            .each(["x"], Nothing, ["y"])
            .parallelism_hint(3);
        let def = t.build();
        let hints: Vec<u32> = def.definition().nodes.iter().map(|n| n.parallelism).collect();
        assert_eq!(hints, [1, 1, 3, 3, 3]);
    }

    #[test]
    fn chained_aggregators_get_their_own_ids() {
        let t = Topology::new("t");
        t.new_stream(FileLines::new("line"))
            .chained_agg()
            .aggregate([], Count, ["n"])
            .aggregate(["line"], crate::operator::Max, ["longest"])
            .chain_end()
            .name("stats");
        let def = t.build();
        let OperationDef::Aggregate { aggregators, .. } = &def.definition().nodes[1].op else { panic!() };
        let ids: Vec<&str> = aggregators.iter().map(|a| a.id.as_str()).collect();
        assert_eq!(ids, ["stats", "stats.1"]);
    }
}

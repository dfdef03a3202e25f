//! Topologies: the definition the host reads, and the builder users write it with.
//!
//! A topology is written where its operators are, in Trident's style:
//!
//! ```
//! use weir_sdk::prelude::*;
//!
//! struct Split;
//! impl Function for Split {
//!     fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
//!         for word in tuple.str("sentence")?.split_whitespace() {
//!             out.emit([word])?;
//!         }
//!         Ok(())
//!     }
//! }
//!
//! let topology = Topology::new("word-count")
//!     .new_stream(FileLines::new("sentence"))
//!     .each(["sentence"], Split, ["word"])
//!     .name("split")
//!     .group_by(["word"])
//!     .persistent_aggregate(State::transactional("counts"), Count, ["count"])
//!     .build();
//! assert_eq!(topology.definition().operations.len(), 3);
//! ```

use crate::operator::{BatchSpout, Builtin, CombinerAggregator, Filter, Function, PartitionedSpout};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A topology as the host sees it: names, fields and operator ids, no code.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopologyDef {
    /// The topology's name; its state lives under it.
    pub name: String,
    /// Where the stream's tuples come from.
    pub spout: SpoutDef,
    /// The stream's operations, in order.
    pub operations: Vec<OperationDef>,
    /// Per operator id: the sandbox it asks for, where it differs from the
    /// host's defaults.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sandbox: BTreeMap<String, SandboxDef>,
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

/// The operator id of a topology's guest spout, in logs and sandbox settings.
pub const SPOUT_ID: &str = "spout";

impl SpoutDef {
    /// The fields of the spout's tuples.
    pub fn fields(&self) -> Vec<String> {
        match self {
            SpoutDef::FileLines { field } | SpoutDef::DirectoryLines { field } | SpoutDef::Generator { field, .. } => {
                vec![field.clone()]
            }
            SpoutDef::Guest { fields, .. } => fields.clone(),
        }
    }
}

/// One operation of a stream.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case", deny_unknown_fields)]
pub enum OperationDef {
    /// A guest function: its outputs are appended to each input tuple.
    Each {
        /// Operator id.
        id: String,
        /// Fields the function reads.
        input: Vec<String>,
        /// Fields the function appends.
        output: Vec<String>,
    },
    /// A guest filter.
    Filter {
        /// Operator id.
        id: String,
        /// Fields the filter reads.
        input: Vec<String>,
    },
    /// Groups the stream by `fields` for the aggregation that follows.
    GroupBy {
        /// Fields to group by.
        fields: Vec<String>,
    },
    /// Aggregates each batch (per group when grouped) into a state.
    PersistentAggregate {
        /// Operator id.
        id: String,
        /// The state the results go to.
        state: StateDef,
        /// How tuples are aggregated.
        aggregator: AggregatorDef,
        /// Fields the aggregator reads.
        input: Vec<String>,
        /// The field holding the aggregate.
        output: Vec<String>,
    },
}

/// A state owned by the host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateDef {
    /// The state's name within the topology.
    pub name: String,
    /// How updates are made exactly-once.
    pub kind: StateKind,
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

/// The aggregator of a `persistent_aggregate`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum AggregatorDef {
    /// Run by the host.
    Builtin {
        /// Which one.
        name: Builtin,
    },
    /// The guest's combiner aggregator registered under the operator's id.
    Combiner,
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

    fn of_kind(name: &str, kind: StateKind) -> State {
        State(StateDef { name: name.to_owned(), kind })
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

/// A topology: its definition and the operators it calls.
pub struct Topology {
    def: TopologyDef,
    pub(crate) spout: Option<SpoutCode>,
    pub(crate) functions: BTreeMap<String, Box<dyn Function>>,
    pub(crate) filters: BTreeMap<String, Box<dyn Filter>>,
    pub(crate) combiners: BTreeMap<String, Box<dyn CombinerAggregator>>,
}

impl Topology {
    /// Starts a topology named `name`.
    // Trident's shape: a topology starts from its name, then its stream.
    #[allow(clippy::new_ret_no_self)]
    pub fn new(name: &str) -> TopologyBuilder {
        TopologyBuilder { name: name.to_owned() }
    }

    /// The definition the host reads.
    pub fn definition(&self) -> &TopologyDef {
        &self.def
    }

    /// The function registered under operator id `id`.
    pub fn function(&self, id: &str) -> Option<&dyn Function> {
        self.functions.get(id).map(|f| &**f)
    }

    /// Number of output fields of the function `id`.
    pub fn output_arity(&self, id: &str) -> Option<usize> {
        self.def.operations.iter().find_map(|op| match op {
            OperationDef::Each { id: op_id, output, .. } if op_id == id => Some(output.len()),
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
}

/// A topology that has a name but no stream yet.
pub struct TopologyBuilder {
    name: String,
}

impl TopologyBuilder {
    /// Starts the topology's stream from `spout`.
    pub fn new_stream(self, spout: impl Spout) -> Stream {
        let mut topology = Topology {
            def: TopologyDef {
                name: self.name,
                spout: SpoutDef::FileLines { field: String::new() },
                operations: Vec::new(),
                sandbox: BTreeMap::new(),
            },
            spout: None,
            functions: BTreeMap::new(),
            filters: BTreeMap::new(),
            combiners: BTreeMap::new(),
        };
        topology.def.spout = spout.define(&mut topology);
        Stream { topology }
    }
}

/// A stream being defined; each method adds an operation.
pub struct Stream {
    topology: Topology,
}

fn names<const N: usize>(fields: [&str; N]) -> Vec<String> {
    fields.iter().map(|f| (*f).to_owned()).collect()
}

impl Stream {
    fn next_id(&self, kind: &str) -> String {
        format!("{kind}-{}", self.topology.def.operations.len())
    }

    /// Trident's `each`: runs `function` over `input`, appending `output`.
    pub fn each<const I: usize, const O: usize>(
        mut self,
        input: [&str; I],
        function: impl Function,
        output: [&str; O],
    ) -> Stream {
        let id = self.next_id("each");
        self.topology.functions.insert(id.clone(), Box::new(function));
        self.topology.def.operations.push(OperationDef::Each { id, input: names(input), output: names(output) });
        self
    }

    /// Trident's `filter`: keeps the tuples `filter` accepts.
    pub fn filter<const I: usize>(mut self, input: [&str; I], filter: impl Filter) -> Stream {
        let id = self.next_id("filter");
        self.topology.filters.insert(id.clone(), Box::new(filter));
        self.topology.def.operations.push(OperationDef::Filter { id, input: names(input) });
        self
    }

    /// Trident's `groupBy`: the next aggregation runs per group of `fields`.
    pub fn group_by<const N: usize>(mut self, fields: [&str; N]) -> Stream {
        self.topology.def.operations.push(OperationDef::GroupBy { fields: names(fields) });
        self
    }

    /// Trident's `persistentAggregate` with a combiner aggregator: each
    /// batch's partial is combined into `state` (per group when grouped),
    /// exactly once. `Count` and `Sum` run in the host.
    pub fn persistent_aggregate<const O: usize>(
        self,
        state: State,
        aggregator: impl CombinerAggregator,
        output: [&str; O],
    ) -> Stream {
        self.persistent_aggregate_over(state, [], aggregator, output)
    }

    /// `persistent_aggregate` whose aggregator reads `input`.
    pub fn persistent_aggregate_over<const I: usize, const O: usize>(
        mut self,
        state: State,
        input: [&str; I],
        aggregator: impl CombinerAggregator,
        output: [&str; O],
    ) -> Stream {
        let id = self.next_id("persistent-aggregate");
        let aggregator = match aggregator.builtin() {
            Some(name) => AggregatorDef::Builtin { name },
            None => {
                self.topology.combiners.insert(id.clone(), Box::new(aggregator));
                AggregatorDef::Combiner
            }
        };
        self.topology.def.operations.push(OperationDef::PersistentAggregate {
            id,
            state: state.0,
            aggregator,
            input: names(input),
            output: names(output),
        });
        self
    }

    fn last_id(&mut self) -> Option<&mut String> {
        match self.topology.def.operations.last_mut()? {
            OperationDef::Each { id, .. }
            | OperationDef::Filter { id, .. }
            | OperationDef::PersistentAggregate { id, .. } => Some(id),
            OperationDef::GroupBy { .. } => None,
        }
    }

    /// The sandbox of the last operator, or of the guest spout when the
    /// stream has no operation yet.
    fn last_sandbox(&mut self) -> &mut SandboxDef {
        let spout_first =
            self.topology.def.operations.is_empty() && matches!(self.topology.def.spout, SpoutDef::Guest { .. });
        let id = match self.last_id() {
            Some(id) => id.clone(),
            None if spout_first => SPOUT_ID.to_owned(),
            None => panic!("limits and read-only directories follow an operator or a guest spout"),
        };
        self.topology.def.sandbox.entry(id).or_default()
    }

    /// Sets the last operator's limits (each capped by the host's); right
    /// after a guest spout, the spout's.
    pub fn limits(mut self, limits: Limits) -> Stream {
        let sandbox = self.last_sandbox();
        sandbox.memory_mib = limits.memory_mib;
        sandbox.call_ms = limits.call_ms;
        sandbox.output_mib = limits.output_mib;
        sandbox.output_tuples = limits.output_tuples;
        self
    }

    /// Mounts host directory `host` read-only at `guest` in the last
    /// operator's sandbox (right after a guest spout, the spout's: how a
    /// spout reads external data). The host grants it only where its
    /// configuration allows that directory.
    pub fn read_only_dir(mut self, host: &str, guest: &str) -> Stream {
        let grant = DirGrant { host: host.to_owned(), guest: guest.to_owned() };
        self.last_sandbox().read_only_dirs.push(grant);
        self
    }

    /// Trident's `name`: gives the last operation the id `label`, used in
    /// logs, errors and metrics.
    pub fn name(mut self, label: &str) -> Stream {
        let Some(id) = self.last_id() else {
            return self;
        };
        let old = std::mem::replace(id, label.to_owned());
        let topology = &mut self.topology;
        if let Some(sandbox) = topology.def.sandbox.remove(&old) {
            topology.def.sandbox.insert(label.to_owned(), sandbox);
        }
        if let Some(f) = topology.functions.remove(&old) {
            topology.functions.insert(label.to_owned(), f);
        }
        if let Some(f) = topology.filters.remove(&old) {
            topology.filters.insert(label.to_owned(), f);
        }
        if let Some(c) = topology.combiners.remove(&old) {
            topology.combiners.insert(label.to_owned(), c);
        }
        self
    }

    /// Finishes the topology.
    pub fn build(self) -> Topology {
        self.topology
    }
}

/// The JSON a component returns from `describe`: every topology it defines.
pub fn describe(topologies: &[Topology]) -> String {
    let defs: Vec<&TopologyDef> = topologies.iter().map(Topology::definition).collect();
    serde_json::to_string(&defs).expect("topology definitions serialize")
}

/// Parses what `describe` returned.
pub fn parse_description(json: &str) -> Result<Vec<TopologyDef>, serde_json::Error> {
    serde_json::from_str(json)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::{Count, Error};
    use crate::tuple::{Emitter, Tuple};

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
        assert!(topology.function("each-0").is_none());
        let json = describe(&[topology]);
        let defs = parse_description(&json).unwrap();
        assert_eq!(defs[0].name, "t");
        assert_eq!(
            defs[0].operations[2],
            OperationDef::PersistentAggregate {
                id: "persistent-aggregate-2".into(),
                state: StateDef { name: "counts".into(), kind: StateKind::Opaque },
                aggregator: AggregatorDef::Builtin { name: Builtin::Count },
                input: vec![],
                output: vec!["count".into()],
            }
        );
    }
}

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

use crate::operator::{Builtin, CombinerAggregator, Filter, Function};
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

/// A topology: its definition and the operators it calls.
pub struct Topology {
    def: TopologyDef,
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
    /// Starts the topology's stream from the built-in file-lines spout.
    pub fn new_stream(self, spout: FileLines) -> Stream {
        Stream {
            topology: Topology {
                def: TopologyDef {
                    name: self.name,
                    spout: SpoutDef::FileLines { field: spout.field },
                    operations: Vec::new(),
                },
                functions: BTreeMap::new(),
                filters: BTreeMap::new(),
                combiners: BTreeMap::new(),
            },
        }
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

    /// Trident's `name`: gives the last operation the id `label`, used in
    /// logs, errors and metrics.
    pub fn name(mut self, label: &str) -> Stream {
        let topology = &mut self.topology;
        let Some(op) = topology.def.operations.last_mut() else {
            return self;
        };
        let id = match op {
            OperationDef::Each { id, .. }
            | OperationDef::Filter { id, .. }
            | OperationDef::PersistentAggregate { id, .. } => id,
            OperationDef::GroupBy { .. } => return self,
        };
        let old = std::mem::replace(id, label.to_owned());
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

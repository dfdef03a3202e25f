//! Turns a topology definition into the steps a batch goes through, checking
//! fields, operator ids and names when the topology is loaded.
//!
//! Fields are resolved to positions here, once: each step knows where its
//! input fields sit in the tuple and which fields later steps still need, so
//! tuples carry nothing that no one reads.

use crate::config::SandboxConfig;
use crate::sandbox::{Sandboxes, sandboxes};
use crate::spout::SpoutKind;
use anyhow::{Result, bail};
use std::collections::HashSet;
use weir_sdk::operator::Builtin;
use weir_sdk::topology::{AggregatorDef, OperationDef, SpoutDef, StateDef, StateKind, TopologyDef};

/// A validated topology, ready to run.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The topology's name.
    pub topology: String,
    /// The spout's output fields.
    pub spout_fields: Vec<String>,
    /// Steps of the process phase, in order.
    pub steps: Vec<Step>,
    /// Where each batch's results go at commit.
    pub sink: Sink,
    /// What each operator's instances may use.
    pub sandboxes: Sandboxes,
}

/// The input of a guest operator: which tuple fields it reads.
#[derive(Clone, Debug, PartialEq)]
pub struct Input {
    /// Positions of the fields in the tuple.
    pub positions: Vec<usize>,
    /// Names of the fields, as the guest sees them.
    pub names: Vec<String>,
    /// True when the input is the whole tuple, in order: no copy needed.
    pub whole_tuple: bool,
}

/// One step of the process phase.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// A guest function: output tuples are `kept` fields then the outputs.
    Function {
        /// Operator id.
        id: String,
        /// Fields it reads.
        input: Input,
        /// Number of fields it appends.
        outputs: usize,
        /// Positions of the input tuple's fields that later steps need.
        kept: Vec<usize>,
    },
    /// A guest filter: kept tuples keep the `kept` fields.
    Filter {
        /// Operator id.
        id: String,
        /// Fields it reads.
        input: Input,
        /// Positions of the tuple's fields that later steps need.
        kept: Vec<usize>,
    },
}

/// How a batch's tuples become one partial per key.
#[derive(Clone, Debug, PartialEq)]
pub enum Aggregation {
    /// Host built-in count.
    Count,
    /// Host built-in sum of the field at this position.
    Sum(usize),
    /// The guest's combiner aggregator, over these fields.
    Combiner(Input),
}

/// The persistent aggregate that ends the stream.
#[derive(Clone, Debug, PartialEq)]
pub struct Sink {
    /// Operator id.
    pub id: String,
    /// The state written.
    pub state: StateDef,
    /// Positions of the group-by fields (empty: one key for the batch).
    pub group: Vec<usize>,
    /// How partials are made and combined.
    pub aggregation: Aggregation,
}

impl Sink {
    /// Whether combining runs in the guest.
    pub fn combiner_in_guest(&self) -> bool {
        matches!(self.aggregation, Aggregation::Combiner(_))
    }
}

fn check_name(what: &str, name: &str) -> Result<()> {
    if name.is_empty() || name.contains('/') || name.chars().any(char::is_control) {
        bail!("{what} name {name:?} must be non-empty, without '/' or control characters");
    }
    Ok(())
}

fn resolve(topology: &str, operator: &str, fields: &[String], names: &[String]) -> Result<Input> {
    let mut positions = Vec::with_capacity(names.len());
    for name in names {
        match fields.iter().position(|f| f == name) {
            Some(p) => positions.push(p),
            None => bail!(
                "topology {topology}: operator {operator} reads field {name:?}, which the stream does not have \
                 at that point (it has {fields:?})"
            ),
        }
    }
    let whole_tuple = positions.iter().copied().eq(0..fields.len());
    Ok(Input { positions, names: names.to_vec(), whole_tuple })
}

/// Fields read by operation `op` or any after it.
fn fields_read(ops: &[OperationDef]) -> HashSet<&str> {
    ops.iter()
        .flat_map(|op| match op {
            OperationDef::Each { input, .. } | OperationDef::Filter { input, .. } => input.as_slice(),
            OperationDef::GroupBy { fields } => fields.as_slice(),
            OperationDef::PersistentAggregate { input, .. } => input.as_slice(),
        })
        .map(String::as_str)
        .collect()
}

/// Trident's table of which spouts and states make exactly-once: a
/// transactional state needs a transactional spout; an opaque state takes a
/// transactional or an opaque spout; a non-transactional state promises
/// nothing (a warning, not an error).
fn check_pairing(topology: &str, spout: &SpoutDef, state: &StateDef) -> Result<()> {
    let spout_kind = SpoutKind::of(spout);
    match (state.kind, spout_kind) {
        (StateKind::NonTransactional, _) => {
            tracing::warn!(
                "topology {topology}: state {} is non-transactional: replayed batches may count twice",
                state.name
            );
        }
        (StateKind::Transactional, SpoutKind::Opaque) => bail!(
            "topology {topology}: transactional state {} cannot be fed by an opaque spout: a replay of an opaque \
             spout may hold different tuples, and a transactional state skips a txid it has applied, so those \
             tuples would be lost (use an opaque state)",
            state.name
        ),
        (StateKind::Transactional | StateKind::Opaque, SpoutKind::NonTransactional) => bail!(
            "topology {topology}: state {} claims exactly-once, but its spout is non-transactional: a replay may \
             lose or repeat tuples (use a transactional or opaque spout, or a non-transactional state)",
            state.name
        ),
        _ => {}
    }
    Ok(())
}

/// Checks `def` against this host's `config` and builds its plan.
pub fn plan(def: &TopologyDef, config: &SandboxConfig) -> Result<Plan> {
    build(def, Some(config))
}

/// Checks `def`'s stream (fields, operators, pairings) without the sandbox
/// it asks for, which only the host that runs it can grant: what packing a
/// bundle checks.
pub fn check_stream(def: &TopologyDef) -> Result<()> {
    build(def, None).map(drop)
}

fn build(def: &TopologyDef, config: Option<&SandboxConfig>) -> Result<Plan> {
    let name = &def.name;
    check_name("topology", name)?;
    let spout_fields = def.spout.fields();
    let mut fields = spout_fields.clone();
    let mut steps = Vec::new();
    let mut group: Option<Vec<usize>> = None;
    let mut ids = HashSet::new();
    for (index, op) in def.operations.iter().enumerate() {
        let later = fields_read(&def.operations[index + 1..]);
        let kept = |fields: &[String]| -> Vec<usize> {
            (0..fields.len()).filter(|&i| later.contains(fields[i].as_str())).collect()
        };
        let id = match op {
            OperationDef::Each { id, .. }
            | OperationDef::Filter { id, .. }
            | OperationDef::PersistentAggregate { id, .. } => Some(id),
            OperationDef::GroupBy { .. } => None,
        };
        if let Some(id) = id {
            check_name("operator", id)?;
            if !ids.insert(id.as_str()) {
                bail!("topology {name}: two operators are named {id:?}");
            }
        }
        if group.is_some() && !matches!(op, OperationDef::PersistentAggregate { .. }) {
            bail!("topology {name}: group_by must be followed by persistent_aggregate");
        }
        match op {
            OperationDef::Each { id, input, output } => {
                let input = resolve(name, id, &fields, input)?;
                for out in output {
                    if fields.contains(out) {
                        bail!("topology {name}: operator {id} outputs field {out:?}, which the tuple already has");
                    }
                }
                if output.is_empty() {
                    bail!("topology {name}: operator {id} declares no output fields");
                }
                let kept = kept(&fields);
                let mut next: Vec<String> = kept.iter().map(|&i| fields[i].clone()).collect();
                next.extend(output.iter().cloned());
                steps.push(Step::Function { id: id.clone(), input, outputs: output.len(), kept });
                fields = next;
            }
            OperationDef::Filter { id, input } => {
                let input = resolve(name, id, &fields, input)?;
                let kept = kept(&fields);
                let next = kept.iter().map(|&i| fields[i].clone()).collect();
                steps.push(Step::Filter { id: id.clone(), input, kept });
                fields = next;
            }
            OperationDef::GroupBy { fields: by } => {
                group = Some(resolve(name, "group_by", &fields, by)?.positions);
            }
            OperationDef::PersistentAggregate { id, state, aggregator, input, output } => {
                if index + 1 != def.operations.len() {
                    bail!("topology {name}: persistent_aggregate {id} must end the stream");
                }
                check_name("state", &state.name)?;
                if output.len() != 1 {
                    bail!("topology {name}: persistent_aggregate {id} must declare exactly one output field");
                }
                let input = resolve(name, id, &fields, input)?;
                let aggregation = match aggregator {
                    AggregatorDef::Builtin { name: Builtin::Count } => Aggregation::Count,
                    AggregatorDef::Builtin { name: Builtin::Sum } => match input.positions[..] {
                        [position] => Aggregation::Sum(position),
                        _ => bail!("topology {name}: sum in {id} needs exactly one input field"),
                    },
                    AggregatorDef::Combiner => Aggregation::Combiner(input),
                };
                check_pairing(name, &def.spout, state)?;
                let sink =
                    Sink { id: id.clone(), state: state.clone(), group: group.take().unwrap_or_default(), aggregation };
                let mut ids: Vec<&str> = ids.into_iter().collect();
                if matches!(def.spout, SpoutDef::Guest { .. }) {
                    ids.push(weir_sdk::topology::SPOUT_ID);
                }
                let sandboxes = match config {
                    Some(config) => sandboxes(def, &ids, config)?,
                    None => sandboxes(
                        &TopologyDef { sandbox: Default::default(), ..def.clone() },
                        &ids,
                        &SandboxConfig::default(),
                    )?,
                };
                return Ok(Plan { topology: name.clone(), spout_fields, steps, sink, sandboxes });
            }
        }
    }
    bail!("topology {name} does not end in persistent_aggregate: its results would go nowhere")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(ops: Vec<OperationDef>) -> TopologyDef {
        TopologyDef {
            name: "t".into(),
            spout: SpoutDef::FileLines { field: "sentence".into() },
            operations: ops,
            sandbox: Default::default(),
        }
    }

    fn plan_of(def: &TopologyDef) -> Result<Plan> {
        plan(def, &SandboxConfig::default())
    }

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    fn each(id: &str, input: &[&str], output: &[&str]) -> OperationDef {
        OperationDef::Each { id: id.into(), input: names(input), output: names(output) }
    }

    fn count() -> OperationDef {
        OperationDef::PersistentAggregate {
            id: "count".into(),
            state: StateDef { name: "counts".into(), kind: StateKind::Transactional },
            aggregator: AggregatorDef::Builtin { name: Builtin::Count },
            input: vec![],
            output: names(&["count"]),
        }
    }

    #[test]
    fn word_count_drops_the_sentence_once_split() {
        let plan = plan_of(&def(vec![
            each("split", &["sentence"], &["word"]),
            OperationDef::GroupBy { fields: names(&["word"]) },
            count(),
        ]))
        .unwrap();
        assert_eq!(
            plan.steps,
            [Step::Function {
                id: "split".into(),
                input: Input { positions: vec![0], names: names(&["sentence"]), whole_tuple: true },
                outputs: 1,
                kept: vec![],
            }]
        );
        assert_eq!(plan.sink.group, [0]);
        assert_eq!(plan.sink.aggregation, Aggregation::Count);
    }

    #[test]
    fn fields_later_steps_read_are_kept() {
        let plan = plan_of(&def(vec![
            each("split", &["sentence"], &["word"]),
            OperationDef::GroupBy { fields: names(&["sentence", "word"]) },
            count(),
        ]))
        .unwrap();
        let Step::Function { kept, .. } = &plan.steps[0] else { panic!() };
        assert_eq!(kept, &[0]);
        assert_eq!(plan.sink.group, [0, 1]);
    }

    #[test]
    fn an_unknown_field_names_the_field_and_the_operator() {
        let err = plan_of(&def(vec![each("split", &["line"], &["word"]), count()])).unwrap_err();
        assert!(err.to_string().contains("operator split reads field \"line\""), "{err}");
    }

    #[test]
    fn malformed_streams_are_refused_with_the_reason() {
        let err =
            plan_of(&def(vec![each("a", &["sentence"], &["w"]), each("a", &["w"], &["x"]), count()])).unwrap_err();
        assert!(err.to_string().contains("two operators are named \"a\""), "{err}");
        let err = plan_of(&def(vec![each("a", &["sentence"], &["sentence"]), count()])).unwrap_err();
        assert!(err.to_string().contains("already has"), "{err}");
        let err = plan_of(&def(vec![each("a", &["sentence"], &["w"])])).unwrap_err();
        assert!(err.to_string().contains("does not end in persistent_aggregate"), "{err}");
        let err = plan_of(&def(vec![count(), each("a", &["sentence"], &["w"])])).unwrap_err();
        assert!(err.to_string().contains("must end the stream"), "{err}");
        let mut bad = def(vec![count()]);
        bad.name = "a/b".into();
        assert!(plan_of(&bad).unwrap_err().to_string().contains("without '/'"));
    }
}

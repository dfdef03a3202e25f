//! Fields: what each operation outputs as Trident sees it, what each node's
//! output must carry for the nodes after it, and each node's operation
//! with its fields resolved to positions.

use super::checks::{check_aggregator, refused};
use super::positions::{input_of, positions, resolve};
use super::subject;
use super::{Aggregator, Excess, FunctionKind, Node, Op, Phase, PlanError};
use std::collections::{BTreeMap, HashSet};
use weir_config::TopologyLimits;
use weir_sdk::topology::{
    AggregatorDef, NodeDef, OperationDef, Partitioning, SinkDef, SinkPayloadDef, StateDef, TopologyDef,
};

/// Each node's logical fields, in dependency order, each node's and all of
/// them within the host's caps.
pub(super) fn logical(
    def: &TopologyDef,
    order: &[usize],
    states: &BTreeMap<String, StateDef>,
    limits: &TopologyLimits,
) -> Result<Vec<Vec<String>>, PlanError> {
    let name = &def.name;
    let mut logical: Vec<Vec<String>> = vec![Vec::new(); def.nodes.len()];
    let mut all_fields = 0;
    for &i in order {
        let node = &def.nodes[i];
        let inputs: Vec<&[String]> = node.inputs.iter().map(|&p| logical[p].as_slice()).collect();
        logical[i] = logical_fields(name, node, &inputs, states)?;
        let width = logical[i].len();
        if width > limits.max_node_fields {
            let excess = Excess::NodeFields { operator: node.id.clone(), fields: width };
            return Err(refused(name, excess, limits.max_node_fields));
        }
        all_fields += width;
        if all_fields > limits.max_fields {
            return Err(refused(name, Excess::Fields(all_fields), limits.max_fields));
        }
    }
    Ok(logical)
}

/// What each node's output must carry: what its children read; all of it
/// for a leaf (a query's answer).
pub(super) fn needed(
    def: &TopologyDef,
    order: &[usize],
    children: &[Vec<usize>],
    logical: &[Vec<String>],
) -> Vec<HashSet<String>> {
    let mut needed: Vec<HashSet<String>> = vec![HashSet::new(); def.nodes.len()];
    for &i in order.iter().rev() {
        if children[i].is_empty() {
            needed[i] = logical[i].iter().cloned().collect();
            continue;
        }
        let mut set = HashSet::new();
        for &c in &children[i] {
            set.extend(reads(&def.nodes[c], &logical[i], &needed[c]));
        }
        needed[i] = set;
    }
    needed
}

/// Each node with its operation's fields resolved to positions, in the
/// description's order; `phase` says when each runs.
pub(super) fn resolve_nodes(
    def: &TopologyDef,
    order: &[usize],
    logical: &[Vec<String>],
    needed: &[HashSet<String>],
    children: &[Vec<usize>],
    phase: &[Phase],
) -> Vec<Option<Node>> {
    let mut fields: Vec<Vec<String>> = vec![Vec::new(); def.nodes.len()];
    let mut nodes: Vec<Option<Node>> = vec![None; def.nodes.len()];
    for &i in order {
        let node = &def.nodes[i];
        let input_fields: &[String] = node.inputs.first().map_or(&[], |&p| fields[p].as_slice());
        let keep =
            |from: &[String]| -> Vec<usize> { (0..from.len()).filter(|&k| needed[i].contains(&from[k])).collect() };
        let named =
            |positions: &[usize]| -> Vec<String> { positions.iter().map(|&p| input_fields[p].clone()).collect() };
        let (op, out): (Op, Vec<String>) = match &node.op {
            OperationDef::Spout { .. } => (Op::Spout, logical[i].clone()),
            OperationDef::QueryStream { name: query } => (Op::Query(query.clone()), logical[i].clone()),
            OperationDef::Each { input, output } | OperationDef::StateQuery { input, output, .. } => {
                let kept = keep(input_fields);
                let mut out = named(&kept);
                out.extend(output.iter().cloned());
                let input = input_of(input_fields, input);
                let op = match &node.op {
                    OperationDef::StateQuery { state, query, .. } => {
                        Op::StateQuery { state: state.clone(), input, query: *query, kept, outputs: output.len() }
                    }
                    _ => Op::Function { kind: FunctionKind::Append, input, kept, outputs: output.len() },
                };
                (op, out)
            }
            OperationDef::Map { input, output } | OperationDef::FlatMap { input, output } => {
                let input = input_of(input_fields, input);
                (
                    Op::Function { kind: FunctionKind::Replace, input, kept: Vec::new(), outputs: output.len() },
                    output.clone(),
                )
            }
            OperationDef::Peek { input } => {
                let kept = keep(input_fields);
                let input = input_of(input_fields, input);
                (Op::Function { kind: FunctionKind::Peek, input, kept: kept.clone(), outputs: 0 }, named(&kept))
            }
            OperationDef::Filter { input } => {
                let kept = keep(input_fields);
                (Op::Filter { input: input_of(input_fields, input), kept: kept.clone() }, named(&kept))
            }
            OperationDef::Project { fields: wanted } => {
                let kept = positions(input_fields, wanted);
                (Op::Project(kept), wanted.clone())
            }
            OperationDef::Partition { by } => {
                let hashed = match by {
                    Partitioning::Fields { fields } => positions(input_fields, fields),
                    _ => Vec::new(),
                };
                let kept = keep(input_fields);
                (Op::Partition { by: by.clone(), hashed, kept: kept.clone() }, named(&kept))
            }
            OperationDef::Extreme { by, max } => {
                let kept = keep(input_fields);
                let by = if by.is_empty() { kept.clone() } else { positions(input_fields, by) };
                (Op::Extreme { by, max: *max, kept: kept.clone() }, named(&kept))
            }
            OperationDef::Aggregate { scope, group, aggregators } => (
                Op::Aggregate {
                    scope: *scope,
                    group: positions(input_fields, group),
                    aggregators: aggregators.iter().map(|a| aggregator_of(input_fields, a)).collect(),
                },
                logical[i].clone(),
            ),
            OperationDef::PersistentAggregate { state, group, aggregator } => (
                Op::PersistentAggregate {
                    state: state.name.clone(),
                    group: positions(input_fields, group),
                    aggregator: aggregator_of(input_fields, aggregator),
                    in_place: false,
                },
                logical[i].clone(),
            ),
            OperationDef::Window { window, state, group, aggregator } => {
                let time = window.time_field().map(|field| positions(input_fields, [field])[0]);
                let mut aggregator = aggregator_of(input_fields, aggregator);
                // Assigned rows lead with the window's end and start.
                aggregator.input.positions.iter_mut().for_each(|p| *p += 2);
                aggregator.input.whole_tuple = false;
                let op = Op::Window {
                    state: state.name.clone(),
                    window: window.clone(),
                    time,
                    group: positions(input_fields, group),
                    aggregator,
                };
                (op, logical[i].clone())
            }
            OperationDef::PartitionPersist { state, input, output } => (
                Op::PartitionPersist {
                    state: state.name.clone(),
                    input: input_of(input_fields, input),
                    outputs: output.len(),
                },
                output.clone(),
            ),
            OperationDef::LateTuples => {
                let kept = keep(input_fields);
                (Op::LateTuples(kept.clone()), named(&kept))
            }
            OperationDef::Merge => {
                let out = logical[i].iter().filter(|f| needed[i].contains(*f)).cloned().collect::<Vec<_>>();
                let per_input = node.inputs.iter().map(|&p| positions(&fields[p], &out)).collect();
                (Op::Merge(per_input), out)
            }
            OperationDef::Join { fields: keys, kinds, output } => {
                let keys_at: Vec<Vec<usize>> =
                    node.inputs.iter().zip(keys).map(|(&p, k)| positions(&fields[p], k)).collect();
                let others = node
                    .inputs
                    .iter()
                    .zip(keys)
                    .map(|(&p, k)| {
                        let logical_others = logical[p].iter().filter(|f| !k.contains(f));
                        positions(&fields[p], logical_others)
                    })
                    .collect();
                (Op::Join { keys: keys_at, others, kinds: kinds.clone() }, output.clone())
            }
            OperationDef::Sink { sink } => {
                let read = match sink.payload() {
                    SinkPayloadDef::Json => input_fields.to_vec(),
                    SinkPayloadDef::Raw { field } => vec![field.clone()],
                };
                (Op::Sink { sink: sink.clone(), input: input_of(input_fields, &read) }, Vec::new())
            }
        };
        fields[i] = out.clone();
        nodes[i] = Some(Node {
            id: node.id.clone(),
            inputs: node.inputs.clone(),
            parallelism: node.parallelism as usize,
            phase: phase[i],
            fields: out,
            children: children[i].clone(),
            op,
        });
    }
    nodes
}

/// The fields each operation outputs (all of them, as Trident sees them),
/// given its inputs' fields; and checks arities, duplicates and roots.
fn logical_fields(
    name: &str,
    node: &NodeDef,
    inputs: &[&[String]],
    states: &BTreeMap<String, StateDef>,
) -> Result<Vec<String>, PlanError> {
    let id = &node.id;
    let (topology, operator) = (|| name.to_owned(), || id.clone());
    let expected_inputs = match node.op {
        OperationDef::Spout { .. } | OperationDef::QueryStream { .. } => 0..=0,
        OperationDef::Merge => 2..=usize::MAX,
        OperationDef::Join { .. } | OperationDef::LateTuples => 2..=2,
        _ => 1..=1,
    };
    if !expected_inputs.contains(&inputs.len()) {
        let (kind, inputs) = (node.op.kind_name(), inputs.len());
        return Err(PlanError::Inputs { topology: topology(), operator: operator(), kind, inputs });
    }
    let no_outputs = || PlanError::NoOutputs { topology: topology(), operator: operator() };
    let appended = |input: &[String], output: &[String]| -> Result<Vec<String>, PlanError> {
        if output.is_empty() {
            return Err(no_outputs());
        }
        let mut fields = input.to_vec();
        for out in output {
            if fields.contains(out) {
                return Err(PlanError::FieldExists { topology: topology(), operator: operator(), field: out.clone() });
            }
            fields.push(out.clone());
        }
        Ok(fields)
    };
    let fresh = |fields: Vec<String>| -> Result<Vec<String>, PlanError> {
        let mut seen = HashSet::new();
        if let Some(dup) = fields.iter().find(|f| !seen.insert(f.as_str())) {
            return Err(PlanError::FieldTwice { topology: topology(), operator: operator(), field: dup.clone() });
        }
        Ok(fields)
    };
    let resolve_all = |fields: &[String], names: &[String]| resolve(name, id, fields, names).map(drop);
    Ok(match &node.op {
        OperationDef::Spout { spout } => fresh(spout.fields())?,
        OperationDef::QueryStream { .. } => vec!["args".to_owned()],
        OperationDef::Each { input, output } => {
            resolve_all(inputs[0], input)?;
            appended(inputs[0], output)?
        }
        OperationDef::Map { input, output } | OperationDef::FlatMap { input, output } => {
            resolve_all(inputs[0], input)?;
            if output.is_empty() {
                return Err(no_outputs());
            }
            fresh(output.clone())?
        }
        OperationDef::Peek { input } | OperationDef::Filter { input } => {
            resolve_all(inputs[0], input)?;
            inputs[0].to_vec()
        }
        OperationDef::Project { fields } => {
            resolve_all(inputs[0], fields)?;
            fresh(fields.clone())?
        }
        OperationDef::Partition { by } => {
            if let Partitioning::Fields { fields } = by {
                resolve_all(inputs[0], fields)?;
            }
            inputs[0].to_vec()
        }
        OperationDef::Aggregate { group, aggregators, .. } => {
            resolve_all(inputs[0], group)?;
            if aggregators.is_empty() {
                return Err(PlanError::NoAggregators { topology: topology(), operator: operator() });
            }
            let mut fields = group.clone();
            for aggregator in aggregators {
                check_aggregator(name, id, inputs[0], aggregator, false)?;
                fields.extend(aggregator.output.iter().cloned());
            }
            fresh(fields)?
        }
        OperationDef::PersistentAggregate { group, aggregator, .. } => {
            resolve_all(inputs[0], group)?;
            check_aggregator(name, id, inputs[0], aggregator, true)?;
            let mut fields = group.clone();
            fields.extend(aggregator.output.iter().cloned());
            fresh(fields)?
        }
        OperationDef::Window { window, group, aggregator, .. } => {
            resolve_all(inputs[0], group)?;
            super::checks::check_window(name, id, inputs[0], window, aggregator)?;
            let mut fields = group.clone();
            fields.extend(["window_start".to_owned(), "window_end".to_owned()]);
            fields.extend(aggregator.output.iter().cloned());
            fresh(fields)?
        }
        OperationDef::PartitionPersist { input, output, .. } => {
            resolve_all(inputs[0], input)?;
            fresh(output.clone())?
        }
        OperationDef::StateQuery { state, input, output, .. } => {
            if !states.contains_key(state) {
                return Err(PlanError::UnknownState {
                    topology: topology(),
                    operator: operator(),
                    state: state.clone(),
                    states: states.keys().cloned().collect(),
                });
            }
            resolve_all(inputs[0], input)?;
            appended(inputs[0], output)?
        }
        OperationDef::LateTuples => inputs[0].to_vec(),
        OperationDef::Merge => {
            for other in &inputs[1..] {
                if other != &inputs[0] {
                    return Err(PlanError::MergeFields {
                        topology: topology(),
                        merge: operator(),
                        fields: inputs[0].to_vec(),
                        other: other.to_vec(),
                    });
                }
            }
            inputs[0].to_vec()
        }
        OperationDef::Join { fields, kinds, output } => {
            if fields.len() != inputs.len() || kinds.len() != inputs.len() {
                return Err(PlanError::JoinInputs { topology: topology(), join: operator(), inputs: inputs.len() });
            }
            let width = fields[0].len();
            if width == 0 || fields.iter().any(|f| f.len() != width) {
                return Err(PlanError::JoinWidths { topology: topology(), join: operator() });
            }
            for (input, keys) in inputs.iter().zip(fields) {
                resolve_all(input, keys)?;
            }
            let total = width + inputs.iter().zip(fields).map(|(i, k)| i.len() - k.len()).sum::<usize>();
            if output.len() != total {
                let names = output.len();
                return Err(PlanError::JoinOutputs { topology: topology(), join: operator(), produces: total, names });
            }
            fresh(output.clone())?
        }
        OperationDef::Extreme { by, .. } => {
            resolve_all(inputs[0], by)?;
            inputs[0].to_vec()
        }
        OperationDef::Sink { sink } => {
            let checked = match sink {
                SinkDef::JetStream { subject, .. } => subject::check_sink(subject),
                SinkDef::Kafka { topic, .. } => subject::check_topic(topic),
            };
            checked.map_err(|error| PlanError::SinkSubject { topology: topology(), sink: operator(), error })?;
            if let SinkPayloadDef::Raw { field } = sink.payload() {
                resolve_all(inputs[0], std::slice::from_ref(field))?;
            }
            Vec::new()
        }
    })
}

/// Fields of input `parent` that `child` reads, given what is read of the
/// child's own output (`needed`).
fn reads(child: &NodeDef, parent_fields: &[String], needed: &HashSet<String>) -> HashSet<String> {
    let passthrough = || parent_fields.iter().filter(|f| needed.contains(*f)).cloned();
    let mut out: HashSet<String> = HashSet::new();
    match &child.op {
        OperationDef::Each { input, .. } | OperationDef::StateQuery { input, .. } => {
            out.extend(input.iter().cloned());
            out.extend(passthrough());
        }
        OperationDef::Filter { input } | OperationDef::Peek { input } => {
            out.extend(input.iter().cloned());
            out.extend(passthrough());
        }
        OperationDef::Map { input, .. } | OperationDef::FlatMap { input, .. } => out.extend(input.iter().cloned()),
        OperationDef::PartitionPersist { input, .. } => out.extend(input.iter().cloned()),
        OperationDef::Project { fields } => out.extend(fields.iter().cloned()),
        OperationDef::Partition { by } => {
            if let Partitioning::Fields { fields } = by {
                out.extend(fields.iter().cloned());
            }
            out.extend(passthrough());
        }
        OperationDef::Extreme { by, .. } => {
            out.extend(by.iter().cloned());
            out.extend(passthrough());
        }
        OperationDef::Aggregate { group, aggregators, .. } => {
            out.extend(group.iter().cloned());
            out.extend(aggregators.iter().flat_map(|a| a.input.iter().cloned()));
        }
        OperationDef::PersistentAggregate { group, aggregator, .. } => {
            out.extend(group.iter().cloned());
            out.extend(aggregator.input.iter().cloned());
        }
        OperationDef::Window { window, group, aggregator, .. } => {
            out.extend(group.iter().cloned());
            out.extend(aggregator.input.iter().cloned());
            out.extend(window.time_field().map(str::to_owned));
        }
        // Merged streams must line up, and a join names every field of its
        // inputs: both see their inputs whole.
        OperationDef::Merge | OperationDef::Join { .. } => out.extend(parent_fields.iter().cloned()),
        OperationDef::Sink { sink } => match sink.payload() {
            SinkPayloadDef::Json => out.extend(parent_fields.iter().cloned()),
            SinkPayloadDef::Raw { field } => {
                out.insert(field.clone());
            }
        },
        OperationDef::LateTuples => out.extend(passthrough()),
        OperationDef::Spout { .. } | OperationDef::QueryStream { .. } => {}
    }
    out
}

fn aggregator_of(fields: &[String], def: &AggregatorDef) -> Aggregator {
    Aggregator { id: def.id.clone(), kind: def.kind, input: input_of(fields, &def.input), outputs: def.output.len() }
}

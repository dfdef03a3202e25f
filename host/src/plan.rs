//! Turns a topology definition into the graph the host runs, checking it
//! when the topology is loaded: fields, operator ids, states, pairings,
//! cycles.
//!
//! Fields are resolved to positions here, once. A node's output carries only
//! the fields something after it reads (Trident keeps every field; the host
//! drops the ones no one can see, so a sentence is not copied into each of
//! its words).

use crate::config::{SandboxConfig, TopologyLimits};
use crate::sandbox::{Sandboxes, sandboxes};
use crate::spout::SpoutKind;
use anyhow::{Result, bail};
use std::collections::{BTreeMap, HashSet};
use weir_sdk::operator::Builtin;
use weir_sdk::topology::{
    AggregateScope, AggregatorDef, AggregatorKind, JoinKind, NodeDef, OperationDef, Partitioning, PayloadDef, QueryDef,
    SPOUT_ID, SpoutDef, StateDef, StateKind, TopologyDef,
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

/// `value` as JSON, for messages: a name or a list of names, quoted and
/// escaped however hostile it is.
fn json(value: &(impl serde::Serialize + ?Sized)) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// Whether `name` is a name this host takes: ASCII letters, digits, `-`,
/// `_` and `.`, not starting with `.`. Names become redb table names, file
/// names, log fields and metrics labels, so nothing that means something
/// there (`/`, `..`, quotes, spaces, control characters) gets in. The one
/// rule for every name a topology or a request gives.
pub fn allowed_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Checks a name of kind `what` in `topology` (the topology's own name when
/// `what` is "topology").
fn check_name(topology: &str, what: &str, name: &str, limits: &TopologyLimits) -> Result<()> {
    let place = if what == "topology" { String::new() } else { format!("topology {topology}: ") };
    if name.len() > limits.max_name_len {
        let start: String = name.chars().take(32).collect();
        bail!(
            "{place}{what} name {}... is {} bytes long, more than this host allows ({}; see --max-name-len)",
            json(&start),
            name.len(),
            limits.max_name_len
        );
    }
    if !allowed_name(name) {
        bail!(
            "{place}{what} name {} is not allowed: a name is ASCII letters, digits, '-', '_' and '.', and does not \
             start with '.'",
            json(name)
        );
    }
    Ok(())
}

/// A topology over one of this host's caps: `what` it asks, then the cap
/// and the flag that sets it.
fn refused(what: String, max: usize, flag: &str) -> anyhow::Error {
    anyhow::anyhow!("{what}, more than this host allows ({max}; see {flag})")
}

/// Every name an operation lists, with its kind: fields, the operators of
/// its aggregators, its state, its query.
fn names_of<'a>(op: &'a OperationDef) -> Vec<(&'static str, &'a str)> {
    let mut names: Vec<(&'static str, &'a str)> = Vec::new();
    let mut fields = |lists: &[&'a [String]]| {
        for list in lists {
            names.extend(list.iter().map(|f| ("field", f.as_str())));
        }
    };
    match op {
        OperationDef::Spout { spout } => match spout {
            SpoutDef::FileLines { field } | SpoutDef::DirectoryLines { field } | SpoutDef::Generator { field, .. } => {
                fields(&[std::slice::from_ref(field)])
            }
            SpoutDef::Guest { fields: list, .. } => fields(&[list]),
            SpoutDef::JetStream(stream) => {
                match &stream.payload {
                    PayloadDef::Bytes { field } | PayloadDef::String { field } => {
                        fields(&[std::slice::from_ref(field)])
                    }
                    PayloadDef::Json { fields: list } => fields(&[list]),
                }
                let extra = [&stream.subject_field, &stream.sequence_field, &stream.timestamp_field];
                for field in extra.into_iter().flatten() {
                    fields(&[std::slice::from_ref(field)]);
                }
            }
        },
        OperationDef::Each { input, output }
        | OperationDef::Map { input, output }
        | OperationDef::FlatMap { input, output }
        | OperationDef::PartitionPersist { input, output, .. }
        | OperationDef::StateQuery { input, output, .. } => fields(&[input, output]),
        OperationDef::Peek { input: list }
        | OperationDef::Filter { input: list }
        | OperationDef::Project { fields: list }
        | OperationDef::Extreme { by: list, .. }
        | OperationDef::Partition { by: Partitioning::Fields { fields: list } } => fields(&[list]),
        OperationDef::Aggregate { group, aggregators, .. } => {
            fields(&[group]);
            for aggregator in aggregators {
                fields(&[&aggregator.input, &aggregator.output]);
            }
        }
        OperationDef::PersistentAggregate { group, aggregator, .. } => {
            fields(&[group, &aggregator.input, &aggregator.output])
        }
        OperationDef::Join { fields: keys, output, .. } => {
            for list in keys {
                fields(&[list]);
            }
            fields(&[output]);
        }
        OperationDef::QueryStream { .. } | OperationDef::Partition { .. } | OperationDef::Merge => {}
    }
    match op {
        OperationDef::QueryStream { name } => names.push(("query", name)),
        OperationDef::Aggregate { aggregators, .. } => {
            names.extend(aggregators.iter().map(|a| ("operator", a.id.as_str())))
        }
        OperationDef::PersistentAggregate { state, aggregator, .. } => {
            names.push(("operator", &aggregator.id));
            names.push(("state", &state.name));
        }
        OperationDef::PartitionPersist { state, .. } => names.push(("state", &state.name)),
        OperationDef::StateQuery { state, .. } => names.push(("state", state)),
        _ => {}
    }
    names
}

/// Checks what `def` asks of this host against `limits` before anything
/// walks its graph: its size, its names and its parallelism. A guest
/// describes its own topology: nothing in the description is trusted.
pub fn check_limits(def: &TopologyDef, limits: &TopologyLimits) -> Result<()> {
    let name = &def.name;
    check_name(name, "topology", name, limits)?;
    let nodes = def.nodes.len();
    if nodes > limits.max_nodes {
        return Err(refused(format!("topology {name} has {nodes} nodes"), limits.max_nodes, "--max-nodes"));
    }
    let inputs: usize = def.nodes.iter().map(|n| n.inputs.len()).sum();
    if inputs > limits.max_nodes {
        return Err(refused(
            format!("topology {name}: its nodes read {inputs} inputs in all"),
            limits.max_nodes,
            "--max-nodes",
        ));
    }
    let (mut states, mut queries) = (0, 0);
    for node in &def.nodes {
        let id = &node.id;
        check_name(name, "operator", id, limits)?;
        if node.parallelism > limits.max_parallelism {
            return Err(refused(
                format!("topology {name}: operator {id} asks for a parallelism of {}", node.parallelism),
                limits.max_parallelism as usize,
                "--max-parallelism",
            ));
        }
        let names = names_of(&node.op);
        let listed = names.iter().filter(|(what, _)| matches!(*what, "field" | "operator")).count();
        if listed > limits.max_node_fields {
            return Err(refused(
                format!("topology {name}: operator {id} lists {listed} names (fields and aggregators)"),
                limits.max_node_fields,
                "--max-node-fields",
            ));
        }
        for (what, listed) in names {
            check_name(name, what, listed, limits)?;
        }
        if let Some(state) = node.op.written_state() {
            states += 1;
            if let Some(cache) = state.cache_size.filter(|&n| n > limits.max_state_cache) {
                return Err(refused(
                    format!("topology {name}: state {} asks for a cache of {cache} entries", state.name),
                    limits.max_state_cache,
                    "--max-state-cache",
                ));
            }
        }
        queries += usize::from(matches!(node.op, OperationDef::QueryStream { .. }));
    }
    if states > limits.max_states {
        return Err(refused(format!("topology {name} has {states} states"), limits.max_states, "--max-states"));
    }
    if queries > limits.max_queries {
        return Err(refused(
            format!("topology {name} has {queries} query streams"),
            limits.max_queries,
            "--max-queries",
        ));
    }
    Ok(())
}

fn resolve(topology: &str, operator: &str, fields: &[String], names: &[String]) -> Result<Input> {
    if let Some(name) = names.iter().find(|name| !fields.contains(name)) {
        bail!(
            "topology {topology}: operator {operator} reads field {}, which its input does not have (it has {})",
            json(name),
            json(fields)
        );
    }
    Ok(input_of(fields, names))
}

/// Trident's table of which spouts and states make exactly-once: a
/// transactional state needs a transactional spout; an opaque state takes a
/// transactional or an opaque spout; a non-transactional state promises
/// nothing (a warning, not an error).
fn check_pairing(topology: &str, spout: &SpoutDef, state: &StateDef) -> Result<()> {
    match (state.kind, SpoutKind::of(spout)) {
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
    build(def, &config.topology, Some(config))
}

/// Checks `def`'s graph (its size against `limits`, fields, operators,
/// states, pairings) without the sandbox it asks for, which only the host
/// that runs it can grant: what packing a bundle checks.
pub fn check_stream(def: &TopologyDef, limits: &TopologyLimits) -> Result<()> {
    build(def, limits, None).map(drop)
}

/// Node indices in an order where inputs come first, or the cycle's error:
/// a depth-first walk over the inputs, with a stack of its own, since a
/// description may be as deep as it likes.
fn order(def: &TopologyDef) -> Result<Vec<usize>> {
    let name = &def.name;
    let count = def.nodes.len();
    for node in &def.nodes {
        if let Some(bad) = node.inputs.iter().find(|&&i| i >= count) {
            bail!("topology {name}: operator {} reads node {bad}, which does not exist", node.id);
        }
    }
    // 0: unvisited, 1: on the current path, 2: done.
    let mut mark = vec![0u8; count];
    let mut out = Vec::with_capacity(count);
    // Each node on the current path, with the index of its next input.
    let mut path: Vec<(usize, usize)> = Vec::new();
    for root in 0..count {
        if mark[root] != 0 {
            continue;
        }
        mark[root] = 1;
        path.push((root, 0));
        while let Some((node, next)) = path.last_mut() {
            let node = *node;
            match def.nodes[node].inputs.get(*next) {
                Some(&input) => {
                    *next += 1;
                    match mark[input] {
                        0 => {
                            mark[input] = 1;
                            path.push((input, 0));
                        }
                        1 => bail!(
                            "topology {name}: the stream graph has a cycle through operator {}",
                            def.nodes[input].id
                        ),
                        _ => {}
                    }
                }
                None => {
                    mark[node] = 2;
                    out.push(node);
                    path.pop();
                }
            }
        }
    }
    Ok(out)
}

/// The fields each operation outputs (all of them, as Trident sees them),
/// given its inputs' fields; and checks arities, duplicates and roots.
fn logical_fields(
    name: &str,
    node: &NodeDef,
    inputs: &[&[String]],
    states: &BTreeMap<String, StateDef>,
) -> Result<Vec<String>> {
    let id = &node.id;
    let expected_inputs = match node.op {
        OperationDef::Spout { .. } | OperationDef::QueryStream { .. } => 0..=0,
        OperationDef::Merge => 2..=usize::MAX,
        OperationDef::Join { .. } => 2..=2,
        _ => 1..=1,
    };
    if !expected_inputs.contains(&inputs.len()) {
        bail!("topology {name}: operator {id} ({}) has {} inputs", node.op.kind_name(), inputs.len());
    }
    let appended = |input: &[String], output: &[String]| -> Result<Vec<String>> {
        if output.is_empty() {
            bail!("topology {name}: operator {id} declares no output fields");
        }
        let mut fields = input.to_vec();
        for out in output {
            if fields.contains(out) {
                bail!("topology {name}: operator {id} outputs field {}, which the tuple already has", json(out));
            }
            fields.push(out.clone());
        }
        Ok(fields)
    };
    let fresh = |fields: Vec<String>| -> Result<Vec<String>> {
        let mut seen = HashSet::new();
        if let Some(dup) = fields.iter().find(|f| !seen.insert(f.as_str())) {
            bail!("topology {name}: operator {id} outputs field {} twice", json(dup));
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
                bail!("topology {name}: operator {id} declares no output fields");
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
                bail!("topology {name}: operator {id} has no aggregators");
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
        OperationDef::PartitionPersist { input, output, .. } => {
            resolve_all(inputs[0], input)?;
            fresh(output.clone())?
        }
        OperationDef::StateQuery { state, input, output, .. } => {
            if !states.contains_key(state) {
                let known: Vec<&String> = states.keys().collect();
                bail!(
                    "topology {name}: operator {id} queries state {state}, which no operation writes (states: {})",
                    json(&known)
                );
            }
            resolve_all(inputs[0], input)?;
            appended(inputs[0], output)?
        }
        OperationDef::Merge => {
            for other in &inputs[1..] {
                if other != &inputs[0] {
                    bail!(
                        "topology {name}: merge {id} joins streams with different fields: {} and {}",
                        json(inputs[0]),
                        json(other)
                    );
                }
            }
            inputs[0].to_vec()
        }
        OperationDef::Join { fields, kinds, output } => {
            if fields.len() != inputs.len() || kinds.len() != inputs.len() {
                bail!(
                    "topology {name}: join {id} needs join fields and a kind for each of its {} inputs",
                    inputs.len()
                );
            }
            let width = fields[0].len();
            if width == 0 || fields.iter().any(|f| f.len() != width) {
                bail!("topology {name}: join {id} needs the same number of join fields (at least one) on every input");
            }
            for (input, keys) in inputs.iter().zip(fields) {
                resolve_all(input, keys)?;
            }
            let total = width + inputs.iter().zip(fields).map(|(i, k)| i.len() - k.len()).sum::<usize>();
            if output.len() != total {
                bail!("topology {name}: join {id} produces {total} fields but names {} in its output", output.len());
            }
            fresh(output.clone())?
        }
        OperationDef::Extreme { by, .. } => {
            resolve_all(inputs[0], by)?;
            inputs[0].to_vec()
        }
    })
}

fn check_aggregator(
    name: &str,
    node: &str,
    fields: &[String],
    aggregator: &AggregatorDef,
    persistent: bool,
) -> Result<()> {
    let id = &aggregator.id;
    resolve(name, id, fields, &aggregator.input)?;
    let single_output = !matches!(aggregator.kind, AggregatorKind::General);
    if single_output && aggregator.output.len() != 1 {
        bail!("topology {name}: aggregator {id} must declare exactly one output field");
    }
    if let AggregatorKind::Builtin(builtin) = aggregator.kind
        && builtin.reads_a_field()
        && aggregator.input.len() != 1
    {
        bail!("topology {name}: built-in {} in {id} needs exactly one input field", builtin_name(builtin));
    }
    if persistent && aggregator.kind == AggregatorKind::General {
        bail!(
            "topology {name}: persistent_aggregate {node} uses the general aggregator {id}: a state is updated \
             with a combiner or a reducer aggregator"
        );
    }
    if persistent && aggregator.kind == AggregatorKind::Combiner && aggregator.input.is_empty() {
        bail!(
            "topology {name}: persistent_aggregate {node} uses the guest combiner {id} without input fields: its \
             init would see empty tuples, so it could only count (use the built-in Count, which runs in the host, \
             or name the fields it reads with persistent_aggregate_over)"
        );
    }
    Ok(())
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
        // Merged streams must line up, and a join names every field of its
        // inputs: both see their inputs whole.
        OperationDef::Merge | OperationDef::Join { .. } => out.extend(parent_fields.iter().cloned()),
        OperationDef::Spout { .. } | OperationDef::QueryStream { .. } => {}
    }
    out
}

fn positions(fields: &[String], names: impl IntoIterator<Item = impl AsRef<str>>) -> Vec<usize> {
    names.into_iter().map(|n| fields.iter().position(|f| f == n.as_ref()).expect("resolved at load")).collect()
}

fn input_of(fields: &[String], names: &[String]) -> Input {
    let positions = positions(fields, names);
    let whole_tuple = positions.iter().copied().eq(0..fields.len());
    Input { positions, names: names.to_vec(), whole_tuple }
}

fn aggregator_of(fields: &[String], def: &AggregatorDef) -> Aggregator {
    Aggregator { id: def.id.clone(), kind: def.kind, input: input_of(fields, &def.input), outputs: def.output.len() }
}

fn build(def: &TopologyDef, limits: &TopologyLimits, config: Option<&SandboxConfig>) -> Result<Plan> {
    check_limits(def, limits)?;
    let name = &def.name;
    if def.nodes.is_empty() {
        bail!("topology {name} is empty: it has no stream");
    }
    let mut ids = HashSet::new();
    for node in &def.nodes {
        if !ids.insert(node.id.as_str()) {
            bail!("topology {name}: two operators are named {}", json(&node.id));
        }
        if node.parallelism == 0 {
            bail!("topology {name}: operator {} has a parallelism of 0", node.id);
        }
    }
    let order = order(def)?;
    let spouts: Vec<&SpoutDef> = def
        .nodes
        .iter()
        .filter_map(|n| match &n.op {
            OperationDef::Spout { spout } => Some(spout),
            _ => None,
        })
        .collect();
    if spouts.len() > 1 {
        bail!(
            "topology {name} has {} spouts: a topology reads one data spout (merge its streams instead)",
            spouts.len()
        );
    }
    let spout = spouts.first().map(|s| (*s).clone());

    // States: each written by exactly one operation.
    let mut states: BTreeMap<String, StateDef> = BTreeMap::new();
    let mut writers: BTreeMap<&str, &str> = BTreeMap::new();
    for node in &def.nodes {
        if let Some(state) = node.op.written_state() {
            if let Some(other) = writers.insert(&state.name, &node.id) {
                bail!(
                    "topology {name}: state {} is written by both {other} and {}: each state has one writer, \
                     whose aggregator kind fixes what its values mean",
                    state.name,
                    node.id
                );
            }
            if let Some(spout) = &spout {
                check_pairing(name, spout, state)?;
            }
            states.insert(state.name.clone(), state.clone());
        }
    }

    // Logical fields, in dependency order, each node's and all of them
    // within the host's caps.
    let mut logical: Vec<Vec<String>> = vec![Vec::new(); def.nodes.len()];
    let mut all_fields = 0;
    for &i in &order {
        let node = &def.nodes[i];
        let inputs: Vec<&[String]> = node.inputs.iter().map(|&p| logical[p].as_slice()).collect();
        logical[i] = logical_fields(name, node, &inputs, &states)?;
        let width = logical[i].len();
        if width > limits.max_node_fields {
            return Err(refused(
                format!("topology {name}: operator {}'s tuples have {width} fields", node.id),
                limits.max_node_fields,
                "--max-node-fields",
            ));
        }
        all_fields += width;
        if all_fields > limits.max_fields {
            return Err(refused(
                format!("topology {name}'s tuples have at least {all_fields} fields in all (added up over its nodes)"),
                limits.max_fields,
                "--max-fields",
            ));
        }
    }

    let mut children: Vec<Vec<usize>> = vec![Vec::new(); def.nodes.len()];
    for (i, node) in def.nodes.iter().enumerate() {
        for &p in &node.inputs {
            // A node reading one input twice pushes itself last.
            if children[p].last() != Some(&i) {
                children[p].push(i);
            }
        }
    }

    // What each node's output must carry: what its children read; all of
    // it for a leaf (a query's answer).
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

    // Roots reach their nodes: which query (if any) each node serves.
    let mut phase = vec![Phase::Process; def.nodes.len()];
    let mut fields: Vec<Vec<String>> = vec![Vec::new(); def.nodes.len()];
    let mut nodes: Vec<Option<Node>> = vec![None; def.nodes.len()];
    for &i in &order {
        let node = &def.nodes[i];
        let touches_state = matches!(
            node.op,
            OperationDef::PersistentAggregate { .. }
                | OperationDef::PartitionPersist { .. }
                | OperationDef::StateQuery { .. }
        );
        if touches_state || node.inputs.iter().any(|&p| phase[p] == Phase::Commit) {
            phase[i] = Phase::Commit;
        }
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
            OperationDef::PartitionPersist { state, input, output } => (
                Op::PartitionPersist {
                    state: state.name.clone(),
                    input: input_of(input_fields, input),
                    outputs: output.len(),
                },
                output.clone(),
            ),
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

    // Reorder so that every node comes after its inputs.
    let mut index_of = vec![0; def.nodes.len()];
    for (new, &old) in order.iter().enumerate() {
        index_of[old] = new;
    }
    let mut nodes: Vec<Node> = order
        .iter()
        .map(|&old| {
            let mut node = nodes[old].take().expect("every node planned");
            node.inputs = node.inputs.iter().map(|&p| index_of[p]).collect();
            node.children = node.children.iter().map(|&c| index_of[c]).collect();
            node
        })
        .collect();

    // A query stream reads committed state only: what the data stream reads
    // decides whether a persistent aggregate may combine in place.
    let data_stream = nodes.iter().position(|n| n.op == Op::Spout).map_or(Vec::new(), |r| reachable_from(&nodes, r));
    let read_in_batch: HashSet<String> = data_stream
        .iter()
        .filter_map(|&i| match &nodes[i].op {
            Op::StateQuery { state, .. } => Some(state.clone()),
            _ => None,
        })
        .collect();
    for node in &mut nodes {
        let childless = node.children.is_empty();
        if let Op::PersistentAggregate { state, in_place, .. } = &mut node.op {
            *in_place = childless && !read_in_batch.contains(state);
        }
    }

    let mut queries = BTreeMap::new();
    for (root, node) in nodes.iter().enumerate() {
        let Op::Query(query) = &node.op else { continue };
        if queries.contains_key(query) {
            bail!("topology {name} has two query streams named {query}");
        }
        let reachable = reachable_from(&nodes, root);
        let leaves: Vec<usize> = reachable.iter().copied().filter(|&n| nodes[n].children.is_empty()).collect();
        let [answer] = leaves[..] else {
            bail!("topology {name}: query {query} must end in one stream (it ends in {} places)", leaves.len());
        };
        if reachable
            .iter()
            .any(|&n| matches!(nodes[n].op, Op::PersistentAggregate { .. } | Op::PartitionPersist { .. }))
        {
            bail!("topology {name}: query {query} writes state: a query only reads it");
        }
        queries.insert(query.clone(), (root, answer));
    }
    if spout.is_none() && queries.is_empty() {
        bail!("topology {name} has neither a spout nor a query stream");
    }
    if spout.is_some() && states.is_empty() {
        bail!(
            "topology {name} persists nothing: its results would go nowhere (end a stream in persistent_aggregate or partition_persist)"
        );
    }
    // Each node belongs to one stream: the data stream or one query's.
    let mut root: Vec<usize> = Vec::with_capacity(nodes.len());
    for (i, node) in nodes.iter().enumerate() {
        let mut roots = node.inputs.iter().map(|&p| root[p]);
        let first = roots.next().unwrap_or(i);
        if roots.any(|r| r != first) {
            bail!("topology {name}: operator {} joins streams that start from different spouts or queries", node.id);
        }
        root.push(first);
    }

    let guest_ids: Vec<&str> = def
        .nodes
        .iter()
        .flat_map(|n| {
            let aggregators: Vec<&str> = match &n.op {
                OperationDef::Aggregate { aggregators, .. } => aggregators.iter().map(|a| a.id.as_str()).collect(),
                OperationDef::PersistentAggregate { aggregator, .. } => vec![aggregator.id.as_str()],
                _ => Vec::new(),
            };
            std::iter::once(n.id.as_str()).chain(aggregators)
        })
        .chain(spout.iter().filter(|s| matches!(s, SpoutDef::Guest { .. })).map(|_| SPOUT_ID))
        .collect();
    let sandboxes = match config {
        Some(config) => sandboxes(def, &guest_ids, config)?,
        None => sandboxes(
            &TopologyDef { sandbox: Default::default(), ..def.clone() },
            &guest_ids,
            &SandboxConfig::default(),
        )?,
    };
    let plan = Plan { topology: name.clone(), stored_as: name.clone(), nodes, states, queries, sandboxes };
    plan.check_parallelism(limits)?;
    Ok(plan)
}

/// Guest operators a node calls, each in an instance per partition.
fn guest_operators(op: &Op) -> usize {
    let guest = |a: &Aggregator| usize::from(!matches!(a.kind, AggregatorKind::Builtin(_)));
    match op {
        Op::Function { .. } | Op::Filter { .. } | Op::PartitionPersist { .. } => 1,
        Op::StateQuery { query, .. } => usize::from(*query == QueryDef::Guest),
        Op::Aggregate { aggregators, .. } => aggregators.iter().map(guest).sum(),
        Op::PersistentAggregate { aggregator, .. } => guest(aggregator),
        _ => 0,
    }
}

/// Nodes reachable from `root`, itself included, in index order.
fn reachable_from(nodes: &[Node], root: usize) -> Vec<usize> {
    let mut seen = vec![false; nodes.len()];
    let mut stack = vec![root];
    while let Some(n) = stack.pop() {
        if !std::mem::replace(&mut seen[n], true) {
            stack.extend(nodes[n].children.iter().copied());
        }
    }
    (0..nodes.len()).filter(|&n| seen[n]).collect()
}

impl Plan {
    /// The data stream's nodes that run in the process phase, in order.
    pub fn data_nodes(&self) -> Vec<usize> {
        match self.nodes.iter().position(|n| n.op == Op::Spout) {
            Some(root) => reachable_from(&self.nodes, root),
            None => Vec::new(),
        }
    }

    /// The nodes of query `name`, in order, and the node that answers it.
    pub fn query_nodes(&self, name: &str) -> Option<(Vec<usize>, usize)> {
        let &(root, answer) = self.queries.get(name)?;
        Some((reachable_from(&self.nodes, root), answer))
    }

    /// This plan with `n` instances for every node whose topology gives it
    /// no parallelism hint (the host's default parallelism).
    pub fn with_parallelism(&self, n: usize) -> Plan {
        let mut plan = self.clone();
        for node in plan.nodes.iter_mut().filter(|node| node.parallelism == 1) {
            node.parallelism = n.max(1);
        }
        plan
    }

    /// Checks every node's parallelism, and the guest operator instances
    /// they add up to, against `limits`: each of a node's partitions runs on
    /// a thread of its own, each guest operator in an instance per partition.
    pub fn check_parallelism(&self, limits: &TopologyLimits) -> Result<()> {
        let name = &self.topology;
        for node in &self.nodes {
            if node.parallelism > limits.max_parallelism as usize {
                return Err(refused(
                    format!("topology {name}: operator {} asks for a parallelism of {}", node.id, node.parallelism),
                    limits.max_parallelism as usize,
                    "--max-parallelism",
                ));
            }
        }
        let instances: usize = self.nodes.iter().map(|n| n.parallelism * guest_operators(&n.op)).sum();
        if instances > limits.max_instances {
            return Err(refused(
                format!(
                    "topology {name} runs {instances} guest operator instances in all (each guest operator once per \
                     partition)"
                ),
                limits.max_instances,
                "--max-instances",
            ));
        }
        Ok(())
    }

    /// The most instances any node runs at once.
    pub fn max_parallelism(&self) -> usize {
        self.nodes.iter().map(|n| n.parallelism).max().unwrap_or(1)
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

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::topology::AggregatorKind;

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    fn node(id: &str, inputs: &[usize], op: OperationDef) -> NodeDef {
        NodeDef { id: id.into(), inputs: inputs.to_vec(), parallelism: 1, op }
    }

    fn spout() -> NodeDef {
        node("spout", &[], OperationDef::Spout { spout: SpoutDef::FileLines { field: "sentence".into() } })
    }

    fn each(id: &str, input: usize, reads: &[&str], output: &[&str]) -> NodeDef {
        node(id, &[input], OperationDef::Each { input: names(reads), output: names(output) })
    }

    fn count(input: usize, group: &[&str]) -> NodeDef {
        node(
            "count",
            &[input],
            OperationDef::PersistentAggregate {
                state: StateDef { name: "counts".into(), kind: StateKind::Transactional, cache_size: None },
                group: names(group),
                aggregator: AggregatorDef {
                    id: "count".into(),
                    kind: AggregatorKind::Builtin(Builtin::Count),
                    input: vec![],
                    output: names(&["count"]),
                },
            },
        )
    }

    fn def(nodes: Vec<NodeDef>) -> TopologyDef {
        TopologyDef { name: "t".into(), nodes, sandbox: Default::default() }
    }

    fn plan_of(def: &TopologyDef) -> Result<Plan> {
        plan(def, &SandboxConfig::default())
    }

    #[test]
    fn word_count_drops_the_sentence_once_split() {
        let plan =
            plan_of(&def(vec![spout(), each("split", 0, &["sentence"], &["word"]), count(1, &["word"])])).unwrap();
        let Op::Function { kept, input, .. } = &plan.nodes[1].op else { panic!() };
        assert!(kept.is_empty());
        assert!(input.whole_tuple);
        assert_eq!(plan.nodes[1].fields, ["word"]);
        assert_eq!(plan.nodes[1].phase, Phase::Process);
        assert_eq!(plan.nodes[2].phase, Phase::Commit);
        assert_eq!(plan.nodes[2].fields, ["word", "count"]);
        let Op::PersistentAggregate { in_place, .. } = plan.nodes[2].op else { panic!() };
        assert!(in_place, "nothing reads the counts during a batch: they combine in the commit");
    }

    #[test]
    fn fields_later_operators_read_are_kept() {
        let plan =
            plan_of(&def(vec![spout(), each("split", 0, &["sentence"], &["word"]), count(1, &["sentence", "word"])]))
                .unwrap();
        let Op::Function { kept, .. } = &plan.nodes[1].op else { panic!() };
        assert_eq!(kept, &[0]);
    }

    #[test]
    fn load_errors_name_the_place() {
        let err = plan_of(&def(vec![spout(), each("split", 0, &["line"], &["word"]), count(1, &[])])).unwrap_err();
        assert!(err.to_string().contains("operator split reads field \"line\""), "{err}");
        let err = plan_of(&def(vec![spout(), each("a", 0, &["sentence"], &["sentence"]), count(1, &[])])).unwrap_err();
        assert!(
            err.to_string().contains("operator a outputs field \"sentence\", which the tuple already has"),
            "{err}"
        );
        let err = plan_of(&def(vec![spout(), each("a", 0, &["sentence"], &["w"]), each("a", 1, &["w"], &["x"])]))
            .unwrap_err();
        assert!(err.to_string().contains("two operators are named \"a\""), "{err}");
        let err = plan_of(&def(vec![])).unwrap_err();
        assert!(err.to_string().contains("is empty"), "{err}");
        let err = plan_of(&def(vec![spout(), each("a", 2, &["sentence"], &["w"]), each("b", 1, &["w"], &["x"])]))
            .unwrap_err();
        assert!(err.to_string().contains("cycle through operator"), "{err}");
        let err = plan_of(&def(vec![spout(), each("a", 0, &["sentence"], &["w"])])).unwrap_err();
        assert!(err.to_string().contains("persists nothing"), "{err}");
        let mut general = count(0, &[]);
        if let OperationDef::PersistentAggregate { aggregator, .. } = &mut general.op {
            aggregator.kind = AggregatorKind::General;
        }
        let err = plan_of(&def(vec![spout(), general])).unwrap_err();
        assert!(err.to_string().contains("uses the general aggregator count"), "{err}");
        let mut second = count(0, &[]);
        second.id = "again".into();
        let err = plan_of(&def(vec![spout(), count(0, &[]), second])).unwrap_err();
        assert!(err.to_string().contains("state counts is written by both count and again"), "{err}");
        let mut bad = def(vec![spout(), count(0, &[])]);
        bad.name = "a/b".into();
        let err = plan_of(&bad).unwrap_err();
        assert!(err.to_string().starts_with("topology name \"a/b\" is not allowed"), "{err}");
    }

    /// A line of `depth` nodes: a spout, filters, a count.
    fn chain(depth: usize) -> TopologyDef {
        // Listed reader-first: a recursive walk from node 0 would go `depth` deep.
        let mut nodes = vec![count(1, &["sentence"])];
        for i in 1..depth - 1 {
            nodes.push(node(&format!("f{i}"), &[i + 1], OperationDef::Filter { input: names(&["sentence"]) }));
        }
        nodes.push(spout());
        def(nodes)
    }

    fn refusal(def: &TopologyDef, limits: TopologyLimits) -> String {
        let config = SandboxConfig { topology: limits, ..SandboxConfig::default() };
        format!("{:#}", plan(def, &config).unwrap_err())
    }

    #[test]
    fn names_are_letters_digits_dashes_underscores_and_dots() {
        let word_count = || def(vec![spout(), each("split", 0, &["sentence"], &["word"]), count(1, &["word"])]);
        let mut fine = word_count();
        fine.name = "Word_count-2.b".into();
        plan_of(&fine).unwrap();
        let refused_name = |edit: &dyn Fn(&mut TopologyDef)| {
            let mut def = word_count();
            edit(&mut def);
            format!("{:#}", plan_of(&def).unwrap_err())
        };
        for name in ["", ".hidden", "quote\"d", "a b", "../x", "tab\t", "é"] {
            let err = refused_name(&|d| d.name = name.into());
            assert!(err.starts_with(&format!("topology name {} is not allowed", json(name))), "{err}");
        }
        let err = refused_name(&|d| d.nodes[1].id = "split words".into());
        assert!(err.contains("topology t: operator name \"split words\" is not allowed"), "{err}");
        let err = refused_name(&|d| {
            if let OperationDef::PersistentAggregate { state, .. } = &mut d.nodes[2].op {
                state.name = "../../escape".into();
            }
        });
        assert!(err.contains("topology t: state name \"../../escape\" is not allowed"), "{err}");
        let err = refused_name(&|d| {
            d.nodes[0].op = OperationDef::Spout { spout: SpoutDef::FileLines { field: "a\nb".into() } }
        });
        assert!(err.contains("topology t: field name \"a\\nb\" is not allowed"), "{err}");
        let err = refused_name(&|d| d.nodes.push(node("q", &[], OperationDef::QueryStream { name: "what?".into() })));
        assert!(err.contains("topology t: query name \"what?\" is not allowed"), "{err}");
        let long = "x".repeat(129);
        let err = refused_name(&|d| d.name = long.clone());
        assert!(err.contains("is 129 bytes long, more than this host allows (128; see --max-name-len)"), "{err}");
        fine.name = "x".repeat(128);
        plan_of(&fine).unwrap();
    }

    #[test]
    fn each_cap_refuses_a_topology_naming_its_flag() {
        let word_count = || def(vec![spout(), each("split", 0, &["sentence"], &["word"]), count(1, &["word"])]);
        let limits = TopologyLimits::default;
        let cases: Vec<(TopologyDef, TopologyLimits, &str)> = vec![
            (
                word_count(),
                TopologyLimits { max_nodes: 2, ..limits() },
                "topology t has 3 nodes, more than this host allows (2; see --max-nodes)",
            ),
            (
                def(vec![spout(), node("m", &[0, 0, 0], OperationDef::Merge), count(1, &[])]),
                TopologyLimits { max_nodes: 3, ..limits() },
                "topology t: its nodes read 4 inputs in all, more than this host allows (3; see --max-nodes)",
            ),
            (
                def(vec![spout(), each("split", 0, &["sentence"], &["a", "b", "c"]), count(1, &[])]),
                TopologyLimits { max_node_fields: 3, ..limits() },
                "topology t: operator split lists 4 names (fields and aggregators), more than this host allows \
                 (3; see --max-node-fields)",
            ),
            (
                def(vec![spout(), each("e1", 0, &["sentence"], &["a"]), each("e2", 1, &["a"], &["b"]), count(2, &[])]),
                TopologyLimits { max_node_fields: 2, ..limits() },
                "topology t: operator e2's tuples have 3 fields, more than this host allows (2; see \
                 --max-node-fields)",
            ),
            (
                word_count(),
                TopologyLimits { max_fields: 3, ..limits() },
                "topology t's tuples have at least 5 fields in all (added up over its nodes), more than this host \
                 allows (3; see --max-fields)",
            ),
            (
                def(vec![spout(), count(0, &[])]),
                TopologyLimits { max_states: 0, ..limits() },
                "topology t has 1 states, more than this host allows (0; see --max-states)",
            ),
            (
                def(vec![spout(), count(0, &[]), node("q", &[], OperationDef::QueryStream { name: "q".into() })]),
                TopologyLimits { max_queries: 0, ..limits() },
                "topology t has 1 query streams, more than this host allows (0; see --max-queries)",
            ),
            (
                {
                    let mut d = word_count();
                    d.nodes[1].parallelism = u32::MAX;
                    d
                },
                limits(),
                "topology t: operator split asks for a parallelism of 4294967295, more than this host allows (64; \
                 see --max-parallelism)",
            ),
            (
                {
                    let mut d = word_count();
                    d.nodes[1].parallelism = 40;
                    d.nodes.push(each("again", 1, &["word"], &["w2"]));
                    d.nodes[3].parallelism = 40;
                    d
                },
                TopologyLimits { max_instances: 79, ..limits() },
                "topology t runs 80 guest operator instances in all (each guest operator once per partition), more \
                 than this host allows (79; see --max-instances)",
            ),
            (
                {
                    let mut d = word_count();
                    if let OperationDef::PersistentAggregate { state, .. } = &mut d.nodes[2].op {
                        state.cache_size = Some(usize::MAX);
                    }
                    d
                },
                limits(),
                "topology t: state counts asks for a cache of 18446744073709551615 entries, more than this host \
                 allows (1000000; see --max-state-cache)",
            ),
        ];
        for (def, limits, expected) in cases {
            assert_eq!(refusal(&def, limits), expected);
        }
        // Built-in nodes take no guest instances: only `split` counts.
        let mut wide = word_count();
        wide.nodes[1].parallelism = 64;
        wide.nodes[2].parallelism = 64;
        plan(
            &wide,
            &SandboxConfig { topology: TopologyLimits { max_instances: 64, ..limits() }, ..Default::default() },
        )
        .unwrap();
    }

    #[test]
    fn the_parallelism_flag_is_held_to_the_same_caps() {
        let plan =
            plan_of(&def(vec![spout(), each("split", 0, &["sentence"], &["word"]), count(1, &["word"])])).unwrap();
        plan.with_parallelism(64).check_parallelism(&TopologyLimits::default()).unwrap();
        let err = plan.with_parallelism(65).check_parallelism(&TopologyLimits::default()).unwrap_err();
        assert!(err.to_string().contains("operator spout asks for a parallelism of 65"), "{err}");
        let err = plan
            .with_parallelism(8)
            .check_parallelism(&TopologyLimits { max_instances: 7, ..TopologyLimits::default() })
            .unwrap_err();
        assert!(err.to_string().contains("runs 8 guest operator instances"), "{err}");
    }

    #[test]
    fn a_deep_chain_is_walked_without_recursion() {
        let depth = 200_000;
        let limits = TopologyLimits {
            max_nodes: depth,
            max_fields: 2 * depth,
            max_instances: depth,
            ..TopologyLimits::default()
        };
        // A recursive walk 200,000 deep overflows any stack; this one fits
        // in a quarter of a megabyte.
        let planned = std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn(move || {
                let config = SandboxConfig { topology: limits, ..SandboxConfig::default() };
                let plan = plan(&chain(depth), &config).unwrap();
                (plan.nodes.len(), plan.nodes[0].op.clone(), plan.nodes[depth - 1].id.clone())
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(planned, (depth, Op::Spout, "count".to_owned()));
        assert_eq!(
            refusal(&chain(depth), TopologyLimits::default()),
            "topology t has 200000 nodes, more than this host allows (1000; see --max-nodes)"
        );
        let mut cycle = chain(depth);
        cycle.nodes[depth - 1] = node("spin", &[1], OperationDef::Filter { input: names(&["sentence"]) });
        let err = std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn(move || format!("{:#}", order(&cycle).unwrap_err()))
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(err, "topology t: the stream graph has a cycle through operator f1");
    }

    #[test]
    fn a_guest_combiner_must_read_a_field_to_persist() {
        let persist = |kind: AggregatorKind, input: &[&str]| {
            let mut node = count(0, &["sentence"]);
            if let OperationDef::PersistentAggregate { aggregator, .. } = &mut node.op {
                aggregator.kind = kind;
                aggregator.input = names(input);
            }
            plan_of(&def(vec![spout(), node]))
        };
        let err = persist(AggregatorKind::Combiner, &[]).unwrap_err();
        assert!(
            err.to_string().contains("persistent_aggregate count uses the guest combiner count without input fields"),
            "{err}"
        );
        persist(AggregatorKind::Combiner, &["sentence"]).unwrap();
        persist(AggregatorKind::Reducer, &[]).unwrap();
        let err = persist(AggregatorKind::Builtin(Builtin::Sum), &[]).unwrap_err();
        assert!(err.to_string().contains("built-in sum in count needs exactly one input field"), "{err}");
    }
}

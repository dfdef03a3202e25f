//! The checks of what a description asks of the host, before and while its
//! graph is built: names and sizes against the host's caps, one writer per
//! state, spout and state pairings, aggregators, query streams, and the
//! parallelism a plan runs at.

use super::SpoutKind;
use super::{Aggregator, Node, Op, Phase, Plan, builtin_name, json};
use anyhow::{Result, bail};
use std::collections::{BTreeMap, HashSet};
use weir_config::{MAX_SINKS, TopologyLimits};
use weir_sdk::topology::{
    AggregatorDef, AggregatorKind, OperationDef, Partitioning, PayloadDef, QueryDef, SinkDef, SinkPayloadDef, SpoutDef,
    StateDef, StateKind, TopologyDef, WindowDef,
};

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
pub(super) fn refused(what: String, max: usize, flag: &str) -> anyhow::Error {
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
        OperationDef::Window { window, group, aggregator, .. } => {
            fields(&[group, &aggregator.input, &aggregator.output]);
            if let WindowDef::EventTime { field, .. } | WindowDef::Session { field, .. } = window {
                fields(&[std::slice::from_ref(field)]);
            }
        }
        OperationDef::Join { fields: keys, output, .. } => {
            for list in keys {
                fields(&[list]);
            }
            fields(&[output]);
        }
        OperationDef::Sink { sink: SinkDef::JetStream { payload: SinkPayloadDef::Raw { field }, .. } } => {
            fields(&[std::slice::from_ref(field)])
        }
        OperationDef::QueryStream { .. }
        | OperationDef::Partition { .. }
        | OperationDef::Merge
        | OperationDef::LateTuples
        | OperationDef::Sink { .. } => {}
    }
    match op {
        OperationDef::QueryStream { name } => names.push(("query", name)),
        OperationDef::Aggregate { aggregators, .. } => {
            names.extend(aggregators.iter().map(|a| ("operator", a.id.as_str())))
        }
        OperationDef::PersistentAggregate { state, aggregator, .. }
        | OperationDef::Window { state, aggregator, .. } => {
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

/// Checks that `def` has nodes, that no two of its operators share an id,
/// and that each runs at least once.
pub(super) fn check_ids(def: &TopologyDef) -> Result<()> {
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
    Ok(())
}

/// The topology's data spout, if it has one; a topology reads one at most.
pub(super) fn single_spout(def: &TopologyDef) -> Result<Option<SpoutDef>> {
    let name = &def.name;
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
    Ok(spouts.first().map(|s| (*s).clone()))
}

/// Every state, by name: each written by exactly one operation, and paired
/// with the spout as exactly-once allows.
pub(super) fn states(def: &TopologyDef, spout: Option<&SpoutDef>) -> Result<BTreeMap<String, StateDef>> {
    let name = &def.name;
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
            if let Some(spout) = spout {
                check_pairing(name, spout, state)?;
            }
            states.insert(state.name.clone(), state.clone());
        }
    }
    Ok(states)
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

pub(super) fn check_aggregator(
    name: &str,
    node: &str,
    fields: &[String],
    aggregator: &AggregatorDef,
    persistent: bool,
) -> Result<()> {
    let id = &aggregator.id;
    super::fields::resolve(name, id, fields, &aggregator.input)?;
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

/// The most windows one tuple may fall into: a sliding window's size over
/// its slide, which a description chooses.
pub const MAX_WINDOWS_PER_TUPLE: u64 = 1_000;

/// The most sessions a group may hold open at once: how many gaps fit in
/// the watermark's delay and lateness, which a description chooses.
pub const MAX_OPEN_SESSIONS: u64 = 10_000;

/// Checks a window operation `node` of topology `name`: sizes a tuple can
/// be assigned by, a timestamp field in `fields`, and an aggregator that
/// keeps one partial per window (and merges them, for sessions).
pub(super) fn check_window(
    name: &str,
    node: &str,
    fields: &[String],
    window: &WindowDef,
    aggregator: &AggregatorDef,
) -> Result<()> {
    let at = format!("topology {name}: window {node}");
    let (size, slide, unit, times) = match window {
        WindowDef::Count { size, slide } => (*size, *slide, "tuples", vec![]),
        WindowDef::Duration { size_ms, slide_ms } => {
            (*size_ms, *slide_ms, "ms", vec![("size", *size_ms), ("slide", *slide_ms)])
        }
        WindowDef::EventTime { size_ms, slide_ms, max_delay_ms, lateness_ms, idle_timeout_ms, .. } => {
            let times = [
                ("size", *size_ms),
                ("slide", *slide_ms),
                ("max delay", *max_delay_ms),
                ("lateness", *lateness_ms),
                ("idle timeout", idle_timeout_ms.unwrap_or(0)),
            ];
            (*size_ms, *slide_ms, "ms", times.to_vec())
        }
        WindowDef::Session { gap_ms, max_delay_ms, lateness_ms, idle_timeout_ms, .. } => {
            let times = [
                ("gap", *gap_ms),
                ("max delay", *max_delay_ms),
                ("lateness", *lateness_ms),
                ("idle timeout", idle_timeout_ms.unwrap_or(0)),
            ];
            (*gap_ms, *gap_ms, "ms", times.to_vec())
        }
    };
    if let Some(field) = window.time_field() {
        super::fields::resolve(name, node, fields, &[field.to_owned()])?;
    }
    if let Some((what, ms)) = times.iter().find(|(_, ms)| i64::try_from(*ms).is_err()) {
        bail!("{at}: its {what} of {ms} ms is more than a timestamp holds");
    }
    if size == 0 || slide == 0 {
        bail!("{at}: a window's size, slide and gap must be at least 1 (size {size}, slide {slide} {unit})");
    }
    if let WindowDef::Session { gap_ms, max_delay_ms, lateness_ms, .. } = window {
        let open = (max_delay_ms + lateness_ms) / gap_ms + 2;
        if open > MAX_OPEN_SESSIONS {
            bail!(
                "{at}: a gap of {gap_ms} ms under {max_delay_ms} ms of delay and {lateness_ms} ms of lateness lets \
                 a group hold {open} sessions open; this host allows {MAX_OPEN_SESSIONS}"
            );
        }
        if matches!(aggregator.kind, AggregatorKind::Reducer | AggregatorKind::General) {
            bail!(
                "{at} uses the {} {}: sessions that meet merge their partials, which takes a combiner or a built-in",
                if aggregator.kind == AggregatorKind::Reducer { "reducer" } else { "general aggregator" },
                aggregator.id
            );
        }
    } else if size.div_ceil(slide) > MAX_WINDOWS_PER_TUPLE {
        bail!(
            "{at}: a size of {size} {unit} sliding by {slide} puts each tuple in {} windows; this host allows \
             {MAX_WINDOWS_PER_TUPLE}",
            size.div_ceil(slide)
        );
    }
    // A general aggregator sees a window's tuples, kept until it closes.
    check_aggregator(name, node, fields, aggregator, aggregator.kind != AggregatorKind::General)
}

/// Each late stream reads a window and that window's input, and a window
/// has one late stream at most.
pub(super) fn late_tuples(name: &str, nodes: &[Node]) -> Result<()> {
    let mut windows = HashSet::new();
    for node in nodes.iter().filter(|n| matches!(n.op, Op::LateTuples(_))) {
        let (input, window) = (node.inputs[0], node.inputs[1]);
        let window_node = &nodes[window];
        if !matches!(window_node.op, Op::Window { .. }) || window_node.inputs.first() != Some(&input) {
            bail!(
                "topology {name}: late stream {} must read a window and that window's input ({} is not a window \
                 of {})",
                node.id,
                window_node.id,
                nodes[input].id
            );
        }
        if !windows.insert(window) {
            bail!("topology {name}: window {} has two late streams", window_node.id);
        }
    }
    Ok(())
}

/// Each query stream by name, with its root and the node that answers it:
/// a query ends in one stream and writes no state.
pub(super) fn queries(name: &str, nodes: &[Node]) -> Result<BTreeMap<String, (usize, usize)>> {
    let mut queries = BTreeMap::new();
    for (root, node) in nodes.iter().enumerate() {
        let Op::Query(query) = &node.op else { continue };
        if queries.contains_key(query) {
            bail!("topology {name} has two query streams named {query}");
        }
        let reachable = super::phases::reachable_from(nodes, root);
        let leaves: Vec<usize> = reachable.iter().copied().filter(|&n| nodes[n].children.is_empty()).collect();
        let [answer] = leaves[..] else {
            bail!("topology {name}: query {query} must end in one stream (it ends in {} places)", leaves.len());
        };
        if reachable.iter().any(|&n| nodes[n].op.writes_state()) {
            bail!("topology {name}: query {query} writes state: a query only reads it");
        }
        queries.insert(query.clone(), (root, answer));
    }
    Ok(queries)
}

/// Checks that a topology has something to run, and that a data stream
/// ends in a state.
pub(super) fn runs_something(name: &str, spout: Option<&SpoutDef>, states: usize, queries: usize) -> Result<()> {
    if spout.is_none() && queries == 0 {
        bail!("topology {name} has neither a spout nor a query stream");
    }
    if spout.is_some() && states == 0 {
        bail!(
            "topology {name} persists nothing: its results would go nowhere (end a stream in persistent_aggregate or partition_persist)"
        );
    }
    Ok(())
}

/// Checks that each node belongs to one stream: the data stream or one
/// query's.
pub(super) fn one_stream_each(name: &str, nodes: &[Node]) -> Result<()> {
    let mut root: Vec<usize> = Vec::with_capacity(nodes.len());
    for (i, node) in nodes.iter().enumerate() {
        let mut roots = node.inputs.iter().map(|&p| root[p]);
        let first = roots.next().unwrap_or(i);
        if roots.any(|r| r != first) {
            bail!("topology {name}: operator {} joins streams that start from different spouts or queries", node.id);
        }
        root.push(first);
    }
    Ok(())
}

/// Checks that each sink ends a stream of the data stream's commit phase,
/// where only committed batches reach it, and that nothing reads it; and
/// that the topology has at most [`MAX_SINKS`].
pub(super) fn sinks(name: &str, nodes: &[Node], data_stream: &[usize]) -> Result<()> {
    let mut count = 0;
    for (i, node) in nodes.iter().enumerate() {
        if !matches!(node.op, Op::Sink { .. }) {
            continue;
        }
        count += 1;
        let id = &node.id;
        if !data_stream.contains(&i) {
            bail!("topology {name}: sink {id} is on a query stream: a sink publishes what the data stream commits");
        }
        if node.phase != Phase::Commit {
            bail!(
                "topology {name}: sink {id} reads a stream of the process phase, whose batches may be tried again: \
                 put it after a state operation (a state's new_values_stream, or a state_query), so that its \
                 output commits with the batch's state"
            );
        }
        if let Some(&child) = node.children.first() {
            bail!("topology {name}: operator {} reads sink {id}: nothing follows a sink", nodes[child].id);
        }
    }
    if count > MAX_SINKS {
        bail!("topology {name} has {count} sinks; a topology may have {MAX_SINKS} at most");
    }
    Ok(())
}

/// Guest operators a node calls, each in an instance per partition.
fn guest_operators(op: &Op) -> usize {
    let guest = |a: &Aggregator| usize::from(!matches!(a.kind, AggregatorKind::Builtin(_)));
    match op {
        Op::Function { .. } | Op::Filter { .. } | Op::PartitionPersist { .. } => 1,
        Op::StateQuery { query, .. } => usize::from(*query == QueryDef::Guest),
        Op::Aggregate { aggregators, .. } => aggregators.iter().map(guest).sum(),
        Op::PersistentAggregate { aggregator, .. } | Op::Window { aggregator, .. } => guest(aggregator),
        _ => 0,
    }
}

impl Plan {
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
}

//! The checks of what a description asks of the host, before and while its
//! graph is built: names and sizes against the host's caps, one writer per
//! state, spout and state pairings, aggregators, query streams, and the
//! parallelism a plan runs at.

use super::SpoutKind;
use super::{Aggregator, Excess, NameOf, Node, Op, Phase, Plan, PlanError};
use std::collections::{BTreeMap, HashSet};
use weir_config::{MAX_OPEN_SESSIONS, MAX_SINKS, MAX_WINDOWS_PER_TUPLE, TopologyLimits};
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

/// Checks a name of `topology` naming `of` (the topology's own name when
/// `of` is [`NameOf::Topology`]).
fn check_name(topology: &str, of: NameOf, name: &str, limits: &TopologyLimits) -> Result<(), PlanError> {
    let topology = || topology.to_owned();
    if name.len() > limits.max_name_len {
        // A name may be as long as a guest likes: the refusal keeps its start.
        let start: String = name.chars().take(32).collect();
        let max = limits.max_name_len;
        return Err(PlanError::NameTooLong { topology: topology(), of, start, len: name.len(), max });
    }
    if !allowed_name(name) {
        return Err(PlanError::NameNotAllowed { topology: topology(), of, name: name.to_owned() });
    }
    Ok(())
}

/// `topology` asks `excess`, past the cap `max`.
pub(super) fn refused(topology: &str, excess: Excess, max: usize) -> PlanError {
    PlanError::OverCap { topology: topology.to_owned(), excess, max }
}

/// Every name an operation lists, with its kind: fields, the operators of
/// its aggregators, its state, its query.
fn names_of<'a>(op: &'a OperationDef) -> Vec<(NameOf, &'a str)> {
    let mut names: Vec<(NameOf, &'a str)> = Vec::new();
    let mut fields = |lists: &[&'a [String]]| {
        for list in lists {
            names.extend(list.iter().map(|f| (NameOf::Field, f.as_str())));
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
            SpoutDef::Kafka(topic) => {
                match &topic.value {
                    PayloadDef::Bytes { field } | PayloadDef::String { field } => {
                        fields(&[std::slice::from_ref(field)])
                    }
                    PayloadDef::Json { fields: list } => fields(&[list]),
                }
                let extra = [
                    &topic.key_field,
                    &topic.partition_field,
                    &topic.offset_field,
                    &topic.timestamp_field,
                    &topic.headers_field,
                ];
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
        OperationDef::Sink {
            sink:
                SinkDef::JetStream { payload: SinkPayloadDef::Raw { field }, .. }
                | SinkDef::Kafka { payload: SinkPayloadDef::Raw { field }, .. },
        } => fields(&[std::slice::from_ref(field)]),
        OperationDef::QueryStream { .. }
        | OperationDef::Partition { .. }
        | OperationDef::Merge
        | OperationDef::LateTuples
        | OperationDef::Sink { .. } => {}
    }
    match op {
        OperationDef::QueryStream { name } => names.push((NameOf::Query, name)),
        OperationDef::Aggregate { aggregators, .. } => {
            names.extend(aggregators.iter().map(|a| (NameOf::Operator, a.id.as_str())))
        }
        OperationDef::PersistentAggregate { state, aggregator, .. }
        | OperationDef::Window { state, aggregator, .. } => {
            names.push((NameOf::Operator, &aggregator.id));
            names.push((NameOf::State, &state.name));
        }
        OperationDef::PartitionPersist { state, .. } => names.push((NameOf::State, &state.name)),
        OperationDef::StateQuery { state, .. } => names.push((NameOf::State, state)),
        _ => {}
    }
    names
}

/// Checks what `def` asks of this host against `limits` before anything
/// walks its graph: its size, its names and its parallelism. A guest
/// describes its own topology: nothing in the description is trusted.
pub fn check_limits(def: &TopologyDef, limits: &TopologyLimits) -> Result<(), PlanError> {
    let name = &def.name;
    check_name(name, NameOf::Topology, name, limits)?;
    let nodes = def.nodes.len();
    if nodes > limits.max_nodes {
        return Err(refused(name, Excess::Nodes(nodes), limits.max_nodes));
    }
    let inputs: usize = def.nodes.iter().map(|n| n.inputs.len()).sum();
    if inputs > limits.max_nodes {
        return Err(refused(name, Excess::Inputs(inputs), limits.max_nodes));
    }
    let (mut states, mut queries) = (0, 0);
    for node in &def.nodes {
        let id = &node.id;
        check_name(name, NameOf::Operator, id, limits)?;
        if node.parallelism > limits.max_parallelism {
            let parallelism = node.parallelism as usize;
            let excess = Excess::Parallelism { operator: id.clone(), parallelism };
            return Err(refused(name, excess, limits.max_parallelism as usize));
        }
        let names = names_of(&node.op);
        let listed = names.iter().filter(|(of, _)| matches!(of, NameOf::Field | NameOf::Operator)).count();
        if listed > limits.max_node_fields {
            return Err(refused(name, Excess::Names { operator: id.clone(), names: listed }, limits.max_node_fields));
        }
        for (of, listed) in names {
            check_name(name, of, listed, limits)?;
        }
        if let Some(state) = node.op.written_state() {
            states += 1;
            if let Some(entries) = state.cache_size.filter(|&n| n > limits.max_state_cache) {
                let excess = Excess::StateCache { state: state.name.clone(), entries };
                return Err(refused(name, excess, limits.max_state_cache));
            }
        }
        queries += usize::from(matches!(node.op, OperationDef::QueryStream { .. }));
    }
    if states > limits.max_states {
        return Err(refused(name, Excess::States(states), limits.max_states));
    }
    if queries > limits.max_queries {
        return Err(refused(name, Excess::Queries(queries), limits.max_queries));
    }
    Ok(())
}

/// Checks that `def` has nodes, that no two of its operators share an id,
/// and that each runs at least once.
pub(super) fn check_ids(def: &TopologyDef) -> Result<(), PlanError> {
    let topology = || def.name.clone();
    if def.nodes.is_empty() {
        return Err(PlanError::Empty { topology: topology() });
    }
    let mut ids = HashSet::new();
    for node in &def.nodes {
        if !ids.insert(node.id.as_str()) {
            return Err(PlanError::DuplicateOperator { topology: topology(), operator: node.id.clone() });
        }
        if node.parallelism == 0 {
            return Err(PlanError::NoParallelism { topology: topology(), operator: node.id.clone() });
        }
    }
    Ok(())
}

/// The topology's data spout, if it has one; a topology reads one at most.
pub(super) fn single_spout(def: &TopologyDef) -> Result<Option<SpoutDef>, PlanError> {
    let spouts: Vec<&SpoutDef> = def
        .nodes
        .iter()
        .filter_map(|n| match &n.op {
            OperationDef::Spout { spout } => Some(spout),
            _ => None,
        })
        .collect();
    if spouts.len() > 1 {
        return Err(PlanError::SeveralSpouts { topology: def.name.clone(), spouts: spouts.len() });
    }
    Ok(spouts.first().map(|s| (*s).clone()))
}

/// Every state, by name: each written by exactly one operation, and paired
/// with the spout as exactly-once allows.
pub(super) fn states(def: &TopologyDef, spout: Option<&SpoutDef>) -> Result<BTreeMap<String, StateDef>, PlanError> {
    let name = &def.name;
    let mut states: BTreeMap<String, StateDef> = BTreeMap::new();
    let mut writers: BTreeMap<&str, &str> = BTreeMap::new();
    for node in &def.nodes {
        if let Some(state) = node.op.written_state() {
            if let Some(other) = writers.insert(&state.name, &node.id) {
                return Err(PlanError::TwoWriters {
                    topology: name.clone(),
                    state: state.name.clone(),
                    first: other.to_owned(),
                    second: node.id.clone(),
                });
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
fn check_pairing(topology: &str, spout: &SpoutDef, state: &StateDef) -> Result<(), PlanError> {
    match (state.kind, SpoutKind::of(spout)) {
        (StateKind::NonTransactional, _) => {
            tracing::warn!(
                "topology {topology}: state {} is non-transactional: replayed batches may count twice",
                state.name
            );
        }
        (StateKind::Transactional, SpoutKind::Opaque) => {
            return Err(PlanError::OpaqueSpout { topology: topology.to_owned(), state: state.name.clone() });
        }
        (StateKind::Transactional | StateKind::Opaque, SpoutKind::NonTransactional) => {
            return Err(PlanError::NonTransactionalSpout { topology: topology.to_owned(), state: state.name.clone() });
        }
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
) -> Result<(), PlanError> {
    let id = &aggregator.id;
    super::positions::resolve(name, id, fields, &aggregator.input)?;
    let (topology, operator, aggregator_id) = (|| name.to_owned(), || node.to_owned(), || id.clone());
    let single_output = !matches!(aggregator.kind, AggregatorKind::General);
    if single_output && aggregator.output.len() != 1 {
        return Err(PlanError::AggregatorOutputs { topology: topology(), aggregator: aggregator_id() });
    }
    if let AggregatorKind::Builtin(builtin) = aggregator.kind
        && builtin.reads_a_field()
        && aggregator.input.len() != 1
    {
        return Err(PlanError::BuiltinInputs { topology: topology(), aggregator: aggregator_id(), builtin });
    }
    if persistent && aggregator.kind == AggregatorKind::General {
        let (topology, operator, aggregator) = (topology(), operator(), aggregator_id());
        return Err(PlanError::GeneralPersisted { topology, operator, aggregator });
    }
    if persistent && aggregator.kind == AggregatorKind::Combiner && aggregator.input.is_empty() {
        let (topology, operator, aggregator) = (topology(), operator(), aggregator_id());
        return Err(PlanError::CombinerWithoutInput { topology, operator, aggregator });
    }
    Ok(())
}

/// Checks a window operation `node` of topology `name`: sizes a tuple can
/// be assigned by, a timestamp field in `fields`, and an aggregator that
/// keeps one partial per window (and merges them, for sessions).
pub(super) fn check_window(
    name: &str,
    node: &str,
    fields: &[String],
    window: &WindowDef,
    aggregator: &AggregatorDef,
) -> Result<(), PlanError> {
    let (topology, window_id) = (|| name.to_owned(), || node.to_owned());
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
        super::positions::resolve(name, node, fields, &[field.to_owned()])?;
    }
    if let Some(&(what, ms)) = times.iter().find(|(_, ms)| i64::try_from(*ms).is_err()) {
        return Err(PlanError::WindowTime { topology: topology(), window: window_id(), what, ms });
    }
    if size == 0 || slide == 0 {
        return Err(PlanError::WindowZero { topology: topology(), window: window_id(), size, slide, unit });
    }
    if let WindowDef::Session { gap_ms, max_delay_ms, lateness_ms, .. } = *window {
        let open = (max_delay_ms + lateness_ms) / gap_ms + 2;
        if open > MAX_OPEN_SESSIONS {
            return Err(PlanError::TooManySessions {
                topology: topology(),
                window: window_id(),
                gap_ms,
                max_delay_ms,
                lateness_ms,
                open,
            });
        }
        if matches!(aggregator.kind, AggregatorKind::Reducer | AggregatorKind::General) {
            let (aggregator, kind) = (aggregator.id.clone(), aggregator.kind);
            return Err(PlanError::SessionAggregator { topology: topology(), window: window_id(), aggregator, kind });
        }
    } else if size.div_ceil(slide) > MAX_WINDOWS_PER_TUPLE {
        let windows = size.div_ceil(slide);
        let (topology, window) = (topology(), window_id());
        return Err(PlanError::TooManyWindows { topology, window, size, slide, unit, windows });
    }
    // A general aggregator sees a window's tuples, kept until it closes.
    check_aggregator(name, node, fields, aggregator, aggregator.kind != AggregatorKind::General)
}

/// Each late stream reads a window and that window's input, and a window
/// has one late stream at most.
pub(super) fn late_tuples(name: &str, nodes: &[Node]) -> Result<(), PlanError> {
    let mut windows = HashSet::new();
    for node in nodes.iter().filter(|n| matches!(n.op, Op::LateTuples(_))) {
        let (input, window) = (node.inputs[0], node.inputs[1]);
        let window_node = &nodes[window];
        if !matches!(window_node.op, Op::Window { .. }) || window_node.inputs.first() != Some(&input) {
            return Err(PlanError::LateStreamInputs {
                topology: name.to_owned(),
                late: node.id.clone(),
                window: window_node.id.clone(),
                input: nodes[input].id.clone(),
            });
        }
        if !windows.insert(window) {
            return Err(PlanError::TwoLateStreams { topology: name.to_owned(), window: window_node.id.clone() });
        }
    }
    Ok(())
}

/// Each query stream by name, with its root and the node that answers it:
/// a query ends in one stream and writes no state.
pub(super) fn queries(name: &str, nodes: &[Node]) -> Result<BTreeMap<String, (usize, usize)>, PlanError> {
    let mut queries = BTreeMap::new();
    for (root, node) in nodes.iter().enumerate() {
        let Op::Query(query) = &node.op else { continue };
        let (topology, query_name) = (|| name.to_owned(), || query.clone());
        if queries.contains_key(query) {
            return Err(PlanError::DuplicateQuery { topology: topology(), query: query_name() });
        }
        let reachable = super::phases::reachable_from(nodes, root);
        let leaves: Vec<usize> = reachable.iter().copied().filter(|&n| nodes[n].children.is_empty()).collect();
        let [answer] = leaves[..] else {
            return Err(PlanError::QueryEnds { topology: topology(), query: query_name(), ends: leaves.len() });
        };
        if reachable.iter().any(|&n| nodes[n].op.writes_state()) {
            return Err(PlanError::QueryWritesState { topology: topology(), query: query_name() });
        }
        queries.insert(query.clone(), (root, answer));
    }
    Ok(queries)
}

/// Checks that a topology has something to run, and that a data stream
/// ends in a state.
pub(super) fn runs_something(
    name: &str,
    spout: Option<&SpoutDef>,
    states: usize,
    queries: usize,
) -> Result<(), PlanError> {
    if spout.is_none() && queries == 0 {
        return Err(PlanError::NothingToRun { topology: name.to_owned() });
    }
    if spout.is_some() && states == 0 {
        return Err(PlanError::PersistsNothing { topology: name.to_owned() });
    }
    Ok(())
}

/// Checks that each node belongs to one stream: the data stream or one
/// query's.
pub(super) fn one_stream_each(name: &str, nodes: &[Node]) -> Result<(), PlanError> {
    let mut root: Vec<usize> = Vec::with_capacity(nodes.len());
    for (i, node) in nodes.iter().enumerate() {
        let mut roots = node.inputs.iter().map(|&p| root[p]);
        let first = roots.next().unwrap_or(i);
        if roots.any(|r| r != first) {
            return Err(PlanError::MixedStreams { topology: name.to_owned(), operator: node.id.clone() });
        }
        root.push(first);
    }
    Ok(())
}

/// Checks that each sink ends a stream of the data stream's commit phase,
/// where only committed batches reach it, and that nothing reads it; and
/// that the topology has at most [`MAX_SINKS`].
pub(super) fn sinks(name: &str, nodes: &[Node], data_stream: &[usize]) -> Result<(), PlanError> {
    let mut count = 0;
    for (i, node) in nodes.iter().enumerate() {
        if !matches!(node.op, Op::Sink { .. }) {
            continue;
        }
        count += 1;
        let (topology, sink) = (|| name.to_owned(), || node.id.clone());
        if !data_stream.contains(&i) {
            return Err(PlanError::SinkOnQuery { topology: topology(), sink: sink() });
        }
        if node.phase != Phase::Commit {
            return Err(PlanError::SinkInProcessPhase { topology: topology(), sink: sink() });
        }
        if let Some(&child) = node.children.first() {
            return Err(PlanError::SinkRead { topology: topology(), sink: sink(), reader: nodes[child].id.clone() });
        }
    }
    if count > MAX_SINKS {
        return Err(PlanError::TooManySinks { topology: name.to_owned(), sinks: count });
    }
    Ok(())
}

/// Guest operators a node calls, each in an instance per partition (none:
/// the host does all its work).
pub fn guest_operators(op: &Op) -> usize {
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
    pub fn check_parallelism(&self, limits: &TopologyLimits) -> Result<(), PlanError> {
        let name = &self.topology;
        for node in &self.nodes {
            if node.parallelism > limits.max_parallelism as usize {
                let excess = Excess::Parallelism { operator: node.id.clone(), parallelism: node.parallelism };
                return Err(refused(name, excess, limits.max_parallelism as usize));
            }
        }
        let instances: usize = self.nodes.iter().map(|n| n.parallelism * guest_operators(&n.op)).sum();
        if instances > limits.max_instances {
            return Err(refused(name, Excess::Instances(instances), limits.max_instances));
        }
        Ok(())
    }
}

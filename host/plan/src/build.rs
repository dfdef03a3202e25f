//! The passes that turn a description into a plan, in order; each pass
//! lives in the room it is about.

use super::{Node, Plan, PlanError, checks, fields, phases};
use weir_config::{SandboxConfig, TopologyLimits};
use weir_runtime::sandbox::sandboxes;
use weir_sdk::topology::{OperationDef, SPOUT_ID, SpoutDef, TopologyDef};

/// Checks `def` against `limits` and builds its plan, with the sandboxes
/// `config` grants (the host's defaults without one, ignoring what the
/// description asks: a bundle being packed).
pub(super) fn build(
    def: &TopologyDef,
    limits: &TopologyLimits,
    config: Option<&SandboxConfig>,
) -> Result<Plan, PlanError> {
    checks::check_limits(def, limits)?;
    checks::check_ids(def)?;
    let name = &def.name;
    let order = order(def)?;
    let spout = checks::single_spout(def)?;
    let states = checks::states(def, spout.as_ref())?;
    let logical = fields::logical(def, &order, &states, limits)?;
    let children = children(def);
    let needed = fields::needed(def, &order, &children, &logical);
    let phase = phases::assign(def, &order);
    let nodes = fields::resolve_nodes(def, &order, &logical, &needed, &children, &phase);
    let mut nodes = reorder(nodes, &order);
    phases::mark_in_place(&mut nodes);
    let queries = checks::queries(name, &nodes)?;
    checks::runs_something(name, spout.as_ref(), states.len(), queries.len())?;
    checks::one_stream_each(name, &nodes)?;
    checks::late_tuples(name, &nodes)?;
    let data_stream = nodes.iter().position(|n| n.op == super::Op::Spout).map(|r| phases::reachable_from(&nodes, r));
    checks::sinks(name, &nodes, &data_stream.unwrap_or_default())?;
    let sandboxes = sandboxes_of(def, spout.as_ref(), config)?;
    let plan = Plan { topology: name.clone(), stored_as: name.clone(), nodes, states, queries, sandboxes };
    plan.check_parallelism(limits)?;
    Ok(plan)
}

/// Node indices in an order where inputs come first, or the cycle's error:
/// a depth-first walk over the inputs, with a stack of its own, since a
/// description may be as deep as it likes.
pub(super) fn order(def: &TopologyDef) -> Result<Vec<usize>, PlanError> {
    let name = &def.name;
    let count = def.nodes.len();
    for node in &def.nodes {
        if let Some(&bad) = node.inputs.iter().find(|&&i| i >= count) {
            return Err(PlanError::NoSuchNode { topology: name.clone(), operator: node.id.clone(), node: bad });
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
                        1 => {
                            let operator = def.nodes[input].id.clone();
                            return Err(PlanError::Cycle { topology: name.clone(), operator });
                        }
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

/// Indices of the nodes that read each node's output.
fn children(def: &TopologyDef) -> Vec<Vec<usize>> {
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); def.nodes.len()];
    for (i, node) in def.nodes.iter().enumerate() {
        for &p in &node.inputs {
            // A node reading one input twice pushes itself last.
            if children[p].last() != Some(&i) {
                children[p].push(i);
            }
        }
    }
    children
}

/// `nodes` reordered so that every node comes after its inputs.
fn reorder(mut nodes: Vec<Option<Node>>, order: &[usize]) -> Vec<Node> {
    let mut index_of = vec![0; nodes.len()];
    for (new, &old) in order.iter().enumerate() {
        index_of[old] = new;
    }
    order
        .iter()
        .map(|&old| {
            let mut node = nodes[old].take().expect("every node planned");
            node.inputs = node.inputs.iter().map(|&p| index_of[p]).collect();
            node.children = node.children.iter().map(|&c| index_of[c]).collect();
            node
        })
        .collect()
}

/// What each guest operator of `def` may use.
fn sandboxes_of(
    def: &TopologyDef,
    spout: Option<&SpoutDef>,
    config: Option<&SandboxConfig>,
) -> Result<weir_runtime::sandbox::Sandboxes, PlanError> {
    let guest_ids: Vec<&str> = def
        .nodes
        .iter()
        .flat_map(|n| {
            let aggregators: Vec<&str> = match &n.op {
                OperationDef::Aggregate { aggregators, .. } => aggregators.iter().map(|a| a.id.as_str()).collect(),
                OperationDef::PersistentAggregate { aggregator, .. } | OperationDef::Window { aggregator, .. } => {
                    vec![aggregator.id.as_str()]
                }
                _ => Vec::new(),
            };
            std::iter::once(n.id.as_str()).chain(aggregators)
        })
        .chain(spout.into_iter().filter(|s| matches!(s, SpoutDef::Guest { .. })).map(|_| SPOUT_ID))
        .collect();
    let granted = match config {
        Some(config) => sandboxes(def, &guest_ids, config),
        None => sandboxes(
            &TopologyDef { sandbox: Default::default(), ..def.clone() },
            &guest_ids,
            &SandboxConfig::default(),
        ),
    };
    granted.map_err(PlanError::Sandbox)
}

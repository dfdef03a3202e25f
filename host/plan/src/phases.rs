//! When each node runs: in the process phase, or in the commit phase (it
//! reads or writes state, or follows something that does), and whether a
//! persistent aggregate may combine its partials in the commit itself.

use super::{Node, Op, Phase, Plan};
use std::collections::HashSet;
use weir_sdk::topology::{OperationDef, TopologyDef};

/// Each node's phase, in the description's order.
pub(super) fn assign(def: &TopologyDef, order: &[usize]) -> Vec<Phase> {
    let mut phase = vec![Phase::Process; def.nodes.len()];
    for &i in order {
        let node = &def.nodes[i];
        let touches_state = matches!(
            node.op,
            OperationDef::PersistentAggregate { .. }
                | OperationDef::PartitionPersist { .. }
                | OperationDef::Window { .. }
                | OperationDef::StateQuery { .. }
        );
        if touches_state || node.inputs.iter().any(|&p| phase[p] == Phase::Commit) {
            phase[i] = Phase::Commit;
        }
    }
    phase
}

/// Marks the persistent aggregates whose partials may combine in place: a
/// query stream reads committed state only, so what the data stream reads
/// decides it.
pub(super) fn mark_in_place(nodes: &mut [Node]) {
    let data_stream = nodes.iter().position(|n| n.op == Op::Spout).map_or(Vec::new(), |r| reachable_from(nodes, r));
    let read_in_batch: HashSet<String> = data_stream
        .iter()
        .filter_map(|&i| match &nodes[i].op {
            Op::StateQuery { state, .. } => Some(state.clone()),
            _ => None,
        })
        .collect();
    for node in nodes.iter_mut() {
        let childless = node.children.is_empty();
        if let Op::PersistentAggregate { state, in_place, .. } = &mut node.op {
            *in_place = childless && !read_in_batch.contains(state);
        }
    }
}

/// Nodes reachable from `root`, itself included, in index order.
pub(super) fn reachable_from(nodes: &[Node], root: usize) -> Vec<usize> {
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
    /// The data stream's nodes, in order.
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
}

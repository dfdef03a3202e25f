//! Moving tuples between streams and partitions: repartitioning, grouping,
//! merge and join.

use super::graph::{GroupedStream, Stream, TopologyBuilder, names};
use crate::topology::{JoinKind, OperationDef, Partitioning};

impl TopologyBuilder {
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
}

impl Stream {
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
}

impl GroupedStream {
    pub(super) fn partitioned(&self) -> Stream {
        let fields = self.group.clone();
        self.stream.then("partition", |_, _| OperationDef::Partition { by: Partitioning::Fields { fields } })
    }
}

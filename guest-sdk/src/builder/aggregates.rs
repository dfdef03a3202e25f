//! Batch aggregations: the three aggregator kinds ([`IntoAggregator`]),
//! `aggregate`, `partition_aggregate`, chained aggregators, and the
//! least and greatest tuple of a batch.

use super::graph::{GroupAggregator, GroupedStream, Stream, Topology, names};
use crate::codec::BatchWriter;
use crate::operator::{Aggregator, BatchInfo, CombinerAggregator, Error, ReducerAggregator};
use crate::topology::{AggregateScope, AggregatorDef, AggregatorKind, OperationDef};
use crate::tuple::{Emitter, Tuple};

/// An aggregator of any of Trident's three kinds: a [`CombinerAggregator`]
/// as it is, a [`ReducerAggregator`] wrapped in [`Reducer`], an
/// [`Aggregator`] wrapped in [`General`].
pub trait IntoAggregator {
    /// Registers the code under `id` and says which kind it is.
    fn register(self, topology: &mut Topology, id: &str) -> AggregatorKind;
}

impl<C: CombinerAggregator> IntoAggregator for C {
    fn register(self, topology: &mut Topology, id: &str) -> AggregatorKind {
        match self.builtin() {
            Some(builtin) => AggregatorKind::Builtin(builtin),
            None => {
                topology.combiners.insert(id.to_owned(), Box::new(self));
                AggregatorKind::Combiner
            }
        }
    }
}

/// Marks a [`ReducerAggregator`] for the aggregation methods.
pub struct Reducer<R>(pub R);

impl<R: ReducerAggregator> IntoAggregator for Reducer<R> {
    fn register(self, topology: &mut Topology, id: &str) -> AggregatorKind {
        topology.reducers.insert(id.to_owned(), Box::new(self.0));
        AggregatorKind::Reducer
    }
}

/// Marks a general [`Aggregator`] for the aggregation methods.
pub struct General<A>(pub A);

impl<A: Aggregator> IntoAggregator for General<A> {
    fn register(self, topology: &mut Topology, id: &str) -> AggregatorKind {
        topology.aggregators.insert(id.to_owned(), Box::new(self.0));
        AggregatorKind::General
    }
}

impl<A: Aggregator> GroupAggregator for A {
    fn run(
        &self,
        info: &BatchInfo,
        groups: u32,
        rows: &mut dyn Iterator<Item = (u32, Tuple<'_>)>,
        out: &mut BatchWriter,
    ) -> Result<(), Error> {
        let mut states = Vec::with_capacity(groups as usize);
        for group in 0..groups {
            states.push(self.init(info, &mut Emitter::new(out, group))?);
        }
        for (group, tuple) in rows {
            self.aggregate(info.group_slot(&mut states, group)?, &tuple, &mut Emitter::new(out, group))?;
        }
        for (group, state) in states.into_iter().enumerate() {
            self.complete(state, &mut Emitter::new(out, group as u32))?;
        }
        Ok(())
    }
}

impl Stream {
    fn aggregate_node(
        &self,
        scope: AggregateScope,
        group: Vec<String>,
        input: Vec<String>,
        aggregator: impl IntoAggregator,
        output: Vec<String>,
    ) -> Stream {
        let kind = match scope {
            AggregateScope::Partition => "partition-aggregate",
            AggregateScope::Batch => "aggregate",
        };
        self.then(kind, |t, id| {
            let kind = aggregator.register(t, id);
            let aggregators = vec![AggregatorDef { id: id.to_owned(), kind, input, output }];
            OperationDef::Aggregate { scope, group, aggregators }
        })
    }

    /// Trident's `partitionAggregate`: aggregates each partition of a batch.
    pub fn partition_aggregate<const I: usize, const O: usize>(
        &self,
        input: [&str; I],
        aggregator: impl IntoAggregator,
        output: [&str; O],
    ) -> Stream {
        self.aggregate_node(AggregateScope::Partition, Vec::new(), names(input), aggregator, names(output))
    }

    /// Trident's `aggregate`: one result per batch, even an empty one.
    pub fn aggregate<const I: usize, const O: usize>(
        &self,
        input: [&str; I],
        aggregator: impl IntoAggregator,
        output: [&str; O],
    ) -> Stream {
        self.aggregate_node(AggregateScope::Batch, Vec::new(), names(input), aggregator, names(output))
    }

    /// Trident's `chainedAgg`: several aggregators over the same tuples,
    /// their outputs joined as a cross product.
    pub fn chained_agg(&self) -> ChainedAggregate {
        ChainedAggregate { stream: self.clone(), group: Vec::new(), scope: None, parts: Vec::new() }
    }

    fn extreme(&self, by: Vec<String>, max: bool) -> Stream {
        self.then(if max { "max" } else { "min" }, |_, _| OperationDef::Extreme { by, max })
    }

    /// Trident's `minBy`: the batch's tuple with the least `field`.
    pub fn min_by(&self, field: &str) -> Stream {
        self.extreme(vec![field.to_owned()], false)
    }

    /// Trident's `maxBy`: the batch's tuple with the greatest `field`.
    pub fn max_by(&self, field: &str) -> Stream {
        self.extreme(vec![field.to_owned()], true)
    }

    /// Trident's `min`: the batch's least tuple, comparing fields in order.
    pub fn min(&self) -> Stream {
        self.extreme(Vec::new(), false)
    }

    /// Trident's `max`: the batch's greatest tuple, comparing fields in order.
    pub fn max(&self) -> Stream {
        self.extreme(Vec::new(), true)
    }
}

impl GroupedStream {
    /// Aggregates each group of the batch; output: the group fields, then
    /// `output`.
    pub fn aggregate<const I: usize, const O: usize>(
        &self,
        input: [&str; I],
        aggregator: impl IntoAggregator,
        output: [&str; O],
    ) -> Stream {
        self.stream.aggregate_node(AggregateScope::Batch, self.group.clone(), names(input), aggregator, names(output))
    }

    /// Aggregates each group within each partition (groups never span
    /// partitions: the stream is partitioned by the group fields first).
    pub fn partition_aggregate<const I: usize, const O: usize>(
        &self,
        input: [&str; I],
        aggregator: impl IntoAggregator,
        output: [&str; O],
    ) -> Stream {
        let group = self.group.clone();
        self.partitioned().aggregate_node(AggregateScope::Partition, group, names(input), aggregator, names(output))
    }

    /// Chained aggregators per group.
    pub fn chained_agg(&self) -> ChainedAggregate {
        ChainedAggregate { stream: self.stream.clone(), group: self.group.clone(), scope: None, parts: Vec::new() }
    }
}

/// Registers an aggregator's code under an id, saying which kind it is.
type Registration = Box<dyn FnOnce(&mut Topology, &str) -> AggregatorKind>;

/// Aggregators chained over the same tuples (Trident's `chainedAgg`).
pub struct ChainedAggregate {
    stream: Stream,
    group: Vec<String>,
    scope: Option<AggregateScope>,
    parts: Vec<(Vec<String>, Registration, Vec<String>)>,
}

impl ChainedAggregate {
    fn part(
        mut self,
        scope: AggregateScope,
        input: Vec<String>,
        aggregator: impl IntoAggregator + 'static,
        output: Vec<String>,
    ) -> ChainedAggregate {
        if self.scope.is_some_and(|s| s != scope) {
            panic!("a chained aggregate's aggregators are all partition_aggregate or all aggregate");
        }
        self.scope = Some(scope);
        self.parts.push((input, Box::new(move |t, id| aggregator.register(t, id)), output));
        self
    }

    /// Adds an aggregator over each partition.
    pub fn partition_aggregate<const I: usize, const O: usize>(
        self,
        input: [&str; I],
        aggregator: impl IntoAggregator + 'static,
        output: [&str; O],
    ) -> ChainedAggregate {
        self.part(AggregateScope::Partition, names(input), aggregator, names(output))
    }

    /// Adds an aggregator over the whole batch.
    pub fn aggregate<const I: usize, const O: usize>(
        self,
        input: [&str; I],
        aggregator: impl IntoAggregator + 'static,
        output: [&str; O],
    ) -> ChainedAggregate {
        self.part(AggregateScope::Batch, names(input), aggregator, names(output))
    }

    /// Ends the chain: the stream of the group fields, then every
    /// aggregator's outputs.
    pub fn chain_end(self) -> Stream {
        let ChainedAggregate { stream, group, scope, parts } = self;
        let scope = scope.unwrap_or(AggregateScope::Batch);
        stream.then("chained-aggregate", |t, id| {
            let aggregators = parts
                .into_iter()
                .enumerate()
                .map(|(k, (input, register, output))| {
                    let id = if k == 0 { id.to_owned() } else { format!("{id}.{k}") };
                    let kind = register(t, &id);
                    AggregatorDef { id, kind, input, output }
                })
                .collect();
            OperationDef::Aggregate { scope, group, aggregators }
        })
    }
}

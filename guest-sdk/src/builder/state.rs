//! Persisting into host state: [`State`], `persistent_aggregate` and
//! `partition_persist`.

use super::aggregates::IntoAggregator;
use super::graph::{GroupedStream, Stream, TridentState, names};
use crate::operator::StateUpdater;
use crate::topology::{AggregatorDef, OperationDef, StateDef, StateKind};

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

    /// Keeps up to `entries` of the state cached in front of the store.
    pub fn cache_size(mut self, entries: usize) -> State {
        self.0.cache_size = Some(entries);
        self
    }

    fn of_kind(name: &str, kind: StateKind) -> State {
        State(StateDef { name: name.to_owned(), kind, cache_size: None })
    }
}

impl Stream {
    fn persist(
        &self,
        state: State,
        group: Vec<String>,
        input: Vec<String>,
        aggregator: impl IntoAggregator,
        output: Vec<String>,
    ) -> TridentState {
        let name = state.0.name.clone();
        let stream = self.then("persistent-aggregate", |t, id| {
            let kind = aggregator.register(t, id);
            let aggregator = AggregatorDef { id: id.to_owned(), kind, input, output };
            OperationDef::PersistentAggregate { state: state.0, group, aggregator }
        });
        TridentState { stream, name }
    }

    /// Trident's `persistentAggregate` over the whole stream: each batch's
    /// value is combined into `state`, a single value, exactly once.
    pub fn persistent_aggregate<const O: usize>(
        &self,
        state: State,
        aggregator: impl IntoAggregator,
        output: [&str; O],
    ) -> TridentState {
        self.persist(state, Vec::new(), Vec::new(), aggregator, names(output))
    }

    /// `persistent_aggregate` whose aggregator reads `input`.
    pub fn persistent_aggregate_over<const I: usize, const O: usize>(
        &self,
        state: State,
        input: [&str; I],
        aggregator: impl IntoAggregator,
        output: [&str; O],
    ) -> TridentState {
        self.persist(state, Vec::new(), names(input), aggregator, names(output))
    }

    /// Trident's `partitionPersist`: `updater` writes each batch partition's
    /// `input` tuples into `state` in the commit phase; what it emits (tuples
    /// of `output`) forms the new-values stream.
    pub fn partition_persist<const I: usize, const O: usize>(
        &self,
        state: State,
        input: [&str; I],
        updater: impl StateUpdater,
        output: [&str; O],
    ) -> TridentState {
        let name = state.0.name.clone();
        let stream = self.then("partition-persist", |t, id| {
            t.updaters.insert(id.to_owned(), Box::new(updater));
            OperationDef::PartitionPersist { state: state.0, input: names(input), output: names(output) }
        });
        TridentState { stream, name }
    }
}

impl GroupedStream {
    /// Trident's grouped `persistentAggregate`: each batch's value per group
    /// is combined into `state`, a map keyed by the group fields, exactly once.
    pub fn persistent_aggregate<const O: usize>(
        &self,
        state: State,
        aggregator: impl IntoAggregator,
        output: [&str; O],
    ) -> TridentState {
        self.stream.persist(state, self.group.clone(), Vec::new(), aggregator, names(output))
    }

    /// Grouped `persistent_aggregate` whose aggregator reads `input`.
    pub fn persistent_aggregate_over<const I: usize, const O: usize>(
        &self,
        state: State,
        input: [&str; I],
        aggregator: impl IntoAggregator,
        output: [&str; O],
    ) -> TridentState {
        self.stream.persist(state, self.group.clone(), names(input), aggregator, names(output))
    }
}

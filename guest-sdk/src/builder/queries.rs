//! Queries: DRPC query streams, and `state_query`, which reads a state
//! with the host's [`MapGet`] or a guest [`QueryFunction`].

use super::graph::{GroupedStream, Stream, Topology, TopologyBuilder, TridentState, names};
use crate::operator::{MapGet, QueryFunction};
use crate::topology::{OperationDef, QueryDef};

/// A query function: the host's [`MapGet`], or the guest's [`QueryFunction`].
pub trait IntoQuery {
    /// Registers the code under `id` and says which it is.
    fn register(self, topology: &mut Topology, id: &str) -> QueryDef;
}

impl IntoQuery for MapGet {
    fn register(self, _: &mut Topology, _: &str) -> QueryDef {
        QueryDef::MapGet
    }
}

impl<Q: QueryFunction> IntoQuery for Q {
    fn register(self, topology: &mut Topology, id: &str) -> QueryDef {
        topology.queries.insert(id.to_owned(), Box::new(self));
        QueryDef::Guest
    }
}

impl TopologyBuilder {
    /// Trident's DRPC stream: each request to the query `name` enters as one
    /// tuple with its arguments in the field `args`; the stream's last
    /// operation gives the result tuples.
    pub fn new_query_stream(&self, name: &str) -> Stream {
        self.root(format!("query-{name}"), OperationDef::QueryStream { name: name.to_owned() })
    }
}

impl Stream {
    /// Trident's `stateQuery`: looks each tuple's `input` up in `state`
    /// with `query`, appending `output`.
    pub fn state_query<const I: usize, const O: usize>(
        &self,
        state: &TridentState,
        input: [&str; I],
        query: impl IntoQuery,
        output: [&str; O],
    ) -> Stream {
        self.then("state-query", |t, id| {
            let query = query.register(t, id);
            OperationDef::StateQuery { state: state.name.clone(), input: names(input), query, output: names(output) }
        })
    }
}

impl GroupedStream {
    /// `state_query` after partitioning by the group fields.
    pub fn state_query<const I: usize, const O: usize>(
        &self,
        state: &TridentState,
        input: [&str; I],
        query: impl IntoQuery,
        output: [&str; O],
    ) -> Stream {
        self.partitioned().state_query(state, input, query, output)
    }
}

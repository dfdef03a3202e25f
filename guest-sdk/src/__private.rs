//! The generated bindings and the glue the `export!` macro expands to.

pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "topology",
        pub_export_macro: true,
        export_macro_name: "export_component",
        default_bindings_module: "weir_sdk::__private::bindings",
    });
}

use crate::codec::Value;
use crate::operator::{BatchInfo, Error, MapState, SpoutInfo};
use crate::{Topology, dispatch};
use bindings::exports::weir::topology::operators::Guest;
use bindings::weir::topology::state::MapState as HostState;
use bindings::weir::topology::types::{BatchContext, OperatorError, PartitionBatch, SpoutContext};
use std::marker::PhantomData;

/// Gives the exports access to the component's topologies.
pub trait Registry {
    /// Runs `f` over the topologies.
    fn with<R>(f: impl FnOnce(&[Topology]) -> R) -> R;
}

/// The component's exports, over the topologies of `R`.
pub struct Exports<R>(PhantomData<R>);

fn info(ctx: BatchContext) -> BatchInfo {
    BatchInfo {
        topology: ctx.topology,
        operator: ctx.operator,
        txid: ctx.txid,
        attempt: ctx.attempt,
        partition: ctx.partition,
        fields: ctx.fields,
    }
}

fn spout_info(ctx: SpoutContext) -> SpoutInfo {
    SpoutInfo { topology: ctx.topology, txid: ctx.txid, attempt: ctx.attempt, max_tuples: ctx.max_tuples }
}

fn wit_error(error: Error) -> OperatorError {
    match error {
        Error::Retry(m) => OperatorError::Retry(m),
        Error::Fatal(m) => OperatorError::Fatal(m),
    }
}

/// The host's state resource, as the SDK's [`MapState`].
struct StateHandle<'a>(&'a HostState);

impl MapState for StateHandle<'_> {
    fn multi_get(&self, keys: &[Vec<Value>]) -> Result<Vec<Option<Value>>, Error> {
        let answer = self.0.multi_get(&dispatch::encode_keys(keys)?).map_err(Error::retry)?;
        dispatch::decode_values(&answer, keys.len())
    }

    fn multi_put(&self, entries: &[(Vec<Value>, Value)]) -> Result<(), Error> {
        self.0.multi_put(&dispatch::encode_entries(entries)?).map_err(Error::retry)
    }
}

impl<R: Registry> Guest for Exports<R> {
    fn describe() -> String {
        R::with(crate::describe)
    }

    fn run_function(ctx: BatchContext, input: Vec<u8>) -> Result<Vec<u8>, OperatorError> {
        R::with(|t| dispatch::run_function(t, &info(ctx), &input)).map_err(wit_error)
    }

    fn run_filter(ctx: BatchContext, input: Vec<u8>) -> Result<Vec<u8>, OperatorError> {
        R::with(|t| dispatch::run_filter(t, &info(ctx), &input)).map_err(wit_error)
    }

    fn combine_groups(ctx: BatchContext, groups: u32, input: Vec<u8>) -> Result<Vec<u8>, OperatorError> {
        R::with(|t| dispatch::combine_groups(t, &info(ctx), groups, &input)).map_err(wit_error)
    }

    fn reduce_groups(ctx: BatchContext, groups: u32, start: Vec<u8>, input: Vec<u8>) -> Result<Vec<u8>, OperatorError> {
        R::with(|t| dispatch::reduce_groups(t, &info(ctx), groups, &start, &input)).map_err(wit_error)
    }

    fn aggregate_groups(ctx: BatchContext, groups: u32, input: Vec<u8>) -> Result<Vec<u8>, OperatorError> {
        R::with(|t| dispatch::aggregate_groups(t, &info(ctx), groups, &input)).map_err(wit_error)
    }

    fn update_state(ctx: BatchContext, state: &HostState, input: Vec<u8>) -> Result<Vec<u8>, OperatorError> {
        R::with(|t| dispatch::update_state(t, &info(ctx), &StateHandle(state), &input)).map_err(wit_error)
    }

    fn batch_retrieve(ctx: BatchContext, state: &HostState, input: Vec<u8>) -> Result<Vec<u8>, OperatorError> {
        R::with(|t| dispatch::batch_retrieve(t, &info(ctx), &StateHandle(state), &input)).map_err(wit_error)
    }

    fn execute_query(ctx: BatchContext, input: Vec<u8>, results: Vec<u8>) -> Result<Vec<u8>, OperatorError> {
        R::with(|t| dispatch::execute_query(t, &info(ctx), &input, &results)).map_err(wit_error)
    }

    fn combine_pairs(ctx: BatchContext, pairs: Vec<u8>) -> Result<Vec<u8>, OperatorError> {
        R::with(|t| dispatch::combine_pairs(t, &info(ctx), &pairs)).map_err(wit_error)
    }

    fn emit_batch(ctx: SpoutContext) -> Result<Option<Vec<u8>>, OperatorError> {
        R::with(|t| dispatch::emit_batch(t, &spout_info(ctx))).map_err(wit_error)
    }

    fn spout_partitions(ctx: SpoutContext) -> Result<Vec<String>, OperatorError> {
        R::with(|t| dispatch::spout_partitions(t, &spout_info(ctx))).map_err(wit_error)
    }

    fn emit_partition(
        ctx: SpoutContext,
        partition: String,
        previous: Option<Vec<u8>>,
    ) -> Result<Option<PartitionBatch>, OperatorError> {
        R::with(|t| dispatch::emit_partition(t, &spout_info(ctx), &partition, previous.as_deref()))
            .map(|emitted| emitted.map(|e| PartitionBatch { tuples: e.tuples, meta: e.meta }))
            .map_err(wit_error)
    }

    fn reemit_partition(ctx: SpoutContext, partition: String, meta: Vec<u8>) -> Result<Vec<u8>, OperatorError> {
        R::with(|t| dispatch::reemit_partition(t, &spout_info(ctx), &partition, &meta)).map_err(wit_error)
    }
}

//! Implements the `topology` world without the SDK, to describe topologies
//! the SDK would never write and a host must refuse when it loads them: a
//! chain of 15,000 nodes, a parallelism hint of 4 billion, a state name
//! that climbs out of its table. Its operators never run.

pub mod description;

#[cfg(target_arch = "wasm32")]
mod component {
    wit_bindgen::generate!({ path: "../../../wit", world: "topology" });

    use exports::weir::topology::operators::Guest;
    use weir::topology::state::MapState;
    use weir::topology::types::{BatchContext, OperatorError, PartitionBatch, SpoutContext};

    fn never<T>() -> Result<T, OperatorError> {
        Err(OperatorError::Fatal("a hostile topology's operators never run".into()))
    }

    struct Hostile;

    impl Guest for Hostile {
        fn describe() -> String {
            super::description::description()
        }

        fn run_function(_: BatchContext, _: Vec<u8>) -> Result<Vec<u8>, OperatorError> {
            never()
        }

        fn run_filter(_: BatchContext, _: Vec<u8>) -> Result<Vec<u8>, OperatorError> {
            never()
        }

        fn reduce_groups(_: BatchContext, _: u32, _: Vec<u8>, _: Vec<u8>) -> Result<Vec<u8>, OperatorError> {
            never()
        }

        fn aggregate_groups(_: BatchContext, _: u32, _: Vec<u8>) -> Result<Vec<u8>, OperatorError> {
            never()
        }

        fn update_state(_: BatchContext, _: &MapState, _: Vec<u8>) -> Result<Vec<u8>, OperatorError> {
            never()
        }

        fn batch_retrieve(_: BatchContext, _: &MapState, _: Vec<u8>) -> Result<Vec<u8>, OperatorError> {
            never()
        }

        fn execute_query(_: BatchContext, _: Vec<u8>, _: Vec<u8>) -> Result<Vec<u8>, OperatorError> {
            never()
        }

        fn combine_groups(_: BatchContext, _: u32, _: Vec<u8>) -> Result<Vec<u8>, OperatorError> {
            never()
        }

        fn combine_pairs(_: BatchContext, _: Vec<u8>) -> Result<Vec<u8>, OperatorError> {
            never()
        }

        fn emit_batch(_: SpoutContext) -> Result<Option<Vec<u8>>, OperatorError> {
            never()
        }

        fn spout_partitions(_: SpoutContext) -> Result<Vec<String>, OperatorError> {
            never()
        }

        fn emit_partition(
            _: SpoutContext,
            _: String,
            _: Option<Vec<u8>>,
        ) -> Result<Option<PartitionBatch>, OperatorError> {
            never()
        }

        fn reemit_partition(_: SpoutContext, _: String, _: Vec<u8>) -> Result<Vec<u8>, OperatorError> {
            never()
        }
    }

    export!(Hostile);
}

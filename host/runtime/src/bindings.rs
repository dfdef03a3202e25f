//! Host bindings generated from `wit/`, the one place the contract is read.

// Exports are called asynchronously, so that a call can be abandoned at its
// deadline while the guest waits in WASI; the state imports stay
// synchronous host calls.
wasmtime::component::bindgen!({
    path: "../../wit",
    world: "topology",
    exports: { default: async },
    // A state call that hits a host limit (or a store that fails) traps the
    // guest's call rather than return an error it could ignore.
    imports: { "weir:topology/state": trappable },
    with: { "weir:topology/state.map-state": weir_state::handle::StateHandle },
});

pub use self::exports::weir::topology::operators::Guest as OperatorExports;
pub use self::weir::topology::types::{BatchContext, OperatorError, PartitionBatch, SpoutContext};

/// The WIT package this host implements.
pub const WIT_PACKAGE: &str = "weir:topology@0.1.0";

//! What a guest instance's store holds, and what the host provides the
//! guest through it: WASI, and the state resource of `wit/topology.wit`.
//! Each instance gets one of its own when it is made, and every call into
//! the instance runs with it.

use super::limits::MemoryLimiter;
use wasmtime::component::{Resource, ResourceTable};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use weir_state::handle::{StateCallError, StateHandle};

/// What a guest instance's store holds: WASI with only what was granted, and
/// the instance's memory limiter.
pub struct HostState {
    wasi: WasiCtx,
    pub(super) table: ResourceTable,
    pub(super) limiter: MemoryLimiter,
}

impl HostState {
    /// A store's state with `wasi`, an empty resource table and `limiter`.
    pub(super) fn new(wasi: WasiCtx, limiter: MemoryLimiter) -> HostState {
        HostState { wasi, table: ResourceTable::new(), limiter }
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl crate::bindings::weir::topology::types::Host for HostState {}

impl crate::bindings::weir::topology::state::Host for HostState {}

/// A state call's answer: a malformed request is the guest's to handle; a
/// limit hit or a failed store traps the call.
fn state_answer<T>(result: Result<T, StateCallError>) -> wasmtime::Result<Result<T, String>> {
    match result {
        Ok(value) => Ok(Ok(value)),
        Err(StateCallError::Request(message)) => Ok(Err(message)),
        Err(StateCallError::Abort(error)) => Err(wasmtime::Error::from_anyhow(error)),
    }
}

impl crate::bindings::weir::topology::state::HostMapState for HostState {
    fn multi_get(&mut self, state: Resource<StateHandle>, keys: Vec<u8>) -> wasmtime::Result<Result<Vec<u8>, String>> {
        state_answer(self.table.get(&state)?.get_packed(&keys))
    }

    fn multi_put(&mut self, state: Resource<StateHandle>, entries: Vec<u8>) -> wasmtime::Result<Result<(), String>> {
        state_answer(self.table.get(&state)?.put_packed(&entries))
    }

    fn drop(&mut self, state: Resource<StateHandle>) -> wasmtime::Result<()> {
        self.table.delete(state)?;
        Ok(())
    }
}

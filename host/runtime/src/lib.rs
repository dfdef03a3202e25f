//! `weir-runtime`: the bindings generated from `wit/` (the one place the
//! contract is read), guest components compiled and instantiated in
//! wasmtime, each operator's sandbox (limits, memory pools, deadlines), and
//! why a guest call failed. It knows nothing of plans, spouts or commits.
//!
//! Runs guest components: the engine, the compiled-component cache, and one
//! sandboxed instance per operator.

pub mod bindings;
pub mod sandbox;

mod batch;
mod cache;
mod call;
pub mod compile;
mod component;
mod engine;
mod guest_output;
mod host_state;
mod instance;
#[cfg(test)]
mod limit_tests;
mod limits;
pub mod memory_pool;
mod random;

pub use batch::{BatchError, BatchId, Cause, Origin, PartitionId};
pub use cache::{CacheOutcome, ComponentCache, default_cache_dir};
pub use call::CallError;
pub use compile::{CompileBounds, CompileRefused};
pub use component::LoadedComponent;
pub use engine::engine;
pub use guest_output::{GuestLine, recent_lines};
pub use instance::{Guest, Request};
pub use limits::{Limit, call_deadline};

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
mod guest_output;
mod instance;
mod limits;
pub mod memory_pool;
mod random;

pub use batch::{BatchError, BatchId, Cause, Origin, PartitionId};
pub use cache::{CacheOutcome, ComponentCache, default_cache_dir};
pub use call::CallError;
pub use compile::{CompileBounds, CompileRefused};
pub use component::LoadedComponent;
pub use guest_output::{GuestLine, recent_lines};
pub use instance::Guest;
pub use limits::{Limit, call_deadline};

use anyhow::Result;
use wasmtime::{Config, Engine, OptLevel};

/// The engine every component of a host process is compiled for; with
/// `cpu_limit`, calls can be bounded in CPU time (see `limits`).
pub fn engine(cpu_limit: bool) -> Result<Engine> {
    let engine = Engine::new(&config(cpu_limit))?;
    if cpu_limit {
        limits::start_epoch_ticker(&engine)?;
    }
    Ok(engine)
}

/// The settings of `engine(cpu_limit)`, which a compiling child shares.
fn config(cpu_limit: bool) -> Config {
    let mut config = Config::new();
    config.cranelift_opt_level(OptLevel::Speed);
    // Backtraces with function names and source lines, where the guest
    // carries them: a guest panic must be actionable.
    config.wasm_backtrace_details(wasmtime::WasmBacktraceDetails::Enable);
    // Bounds each call's CPU time; checked at loop heads and calls, a few
    // percent of a batch call's cost.
    config.epoch_interruption(cpu_limit);
    config
}

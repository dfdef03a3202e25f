//! The engine every component of a host process is compiled for, and its
//! settings, which a compiling child process shares.

use super::limits::start_epoch_ticker;
use anyhow::Result;
use wasmtime::{Config, Engine, OptLevel};

/// The engine every component of a host process is compiled for; with
/// `cpu_limit`, calls can be bounded in CPU time (see `limits`).
pub fn engine(cpu_limit: bool) -> Result<Engine> {
    let engine = Engine::new(&config(cpu_limit))?;
    if cpu_limit {
        start_epoch_ticker(&engine)?;
    }
    Ok(engine)
}

/// The settings of `engine(cpu_limit)`, which a compiling child shares.
pub(super) fn config(cpu_limit: bool) -> Config {
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

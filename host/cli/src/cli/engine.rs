//! The flags `weir run` and `weir serve` share: how operators are
//! sandboxed and compiled, the caps on a topology's description, and the
//! NATS and Kafka servers that spouts and sinks reach.

use anyhow::Result;
use clap::Args;
use wasmtime::Engine;
use weir_config::SandboxConfig;
use weir_runtime::ComponentCache;

use super::compile::CompileArgs;
use super::kafka::KafkaArgs;
use super::limits::{SandboxArgs, TopologyLimitArgs};
use super::nats::{NatsArgs, SinkArgs};

#[derive(Args, Debug)]
pub struct EngineArgs {
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    #[command(flatten)]
    pub compile: CompileArgs,
    #[command(flatten)]
    pub nats: NatsArgs,
    #[command(flatten)]
    pub sinks: SinkArgs,
    #[command(flatten)]
    pub kafka: KafkaArgs,
    #[command(flatten)]
    pub topology_limits: TopologyLimitArgs,
}

impl EngineArgs {
    /// Bounds the guests' memory for the whole process, then says how
    /// each operator is sandboxed.
    pub fn sandbox(&self) -> SandboxConfig {
        self.sandbox.limit_guest_memory();
        self.sandbox.config(self.topology_limits.limits())
    }

    /// The engine that runs the components under `sandbox`, and the cache
    /// of their compiled forms.
    pub fn engine_and_cache(&self, sandbox: &SandboxConfig) -> Result<(Engine, ComponentCache)> {
        self.compile.engine_and_cache(sandbox.max_call_ms > 0)
    }
}

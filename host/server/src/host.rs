//! What a server runs topologies with: its data dir's database and
//! bundles, the engine and its cache, limits and inputs; and errors as a
//! client may see them.

use std::path::PathBuf;
use std::sync::Arc;
use wasmtime::Engine;
use weir_config::{RunConfig, SandboxConfig};
use weir_io::spout::InputScope;
use weir_runtime::ComponentCache;
use weir_state::Db;

/// Everything a server needs to run topologies.
pub struct Host {
    /// The data dir's database.
    pub db: Arc<Db>,
    /// Where bundles are stored (an absolute path: errors sent to clients
    /// name its files relative to the data dir).
    pub bundles: PathBuf,
    /// The engine components are compiled for.
    pub engine: Engine,
    /// The compiled-component cache.
    pub cache: ComponentCache,
    /// Limits and capabilities operators may have.
    pub sandbox: SandboxConfig,
    /// How topologies batch and retry.
    pub run: RunConfig,
    /// Where spouts may read their input from.
    pub inputs: InputScope,
    /// The NATS server JetStream spouts read from.
    pub nats: Option<weir_io::nats::NatsConfig>,
    /// The Kafka brokers Kafka spouts read from and Kafka sinks write to.
    pub kafka: Option<weir_io::kafka::KafkaConfig>,
    /// Topologies deployed at once, at most.
    pub max_deployments: usize,
}

impl Host {
    /// `message` as a client may see it: the server's own directories
    /// rewritten out, so that it names files relative to the data dir
    /// (inputs are named as the client gave them).
    pub fn public(&self, message: &str) -> String {
        let bundles = format!("{}/", self.bundles.display());
        let cache = format!("{}/", self.cache.dir().display());
        message.replace(&bundles, "bundles/").replace(&cache, "the component cache: ")
    }
}

//! Spouts: where a topology's batches come from, and what each kind promises
//! when a batch is replayed (Trident's spout kinds).

mod backlog;
mod caught_up;
mod contract;
mod directory;
mod file_lines;
mod generator;
mod guest;
mod input;
pub mod jetstream;
pub mod kafka;
mod outage;
mod payload;
mod stored;

pub use contract::{Emitted, Spout, Unreadable};
pub use directory::DirectoryLines;
pub use file_lines::{FileLines, InputChanged, LineRange, input_changed};
pub use generator::Generator;
pub use guest::GuestSpout;
pub use input::{InputDir, InputScope};
pub use jetstream::JetStreamSpout;
pub use kafka::KafkaSpout;

use crate::kafka::KafkaConfig;
use crate::nats::NatsConfig;
use std::sync::Arc;
pub use weir_plan::SpoutKind;
use weir_runtime::LoadedComponent;
use weir_runtime::sandbox::OperatorSandbox;

use anyhow::{Context, Result, bail};
use std::path::Path;
use weir_sdk::topology::SpoutDef;

/// Whether no replay can cure `error`: the input changed under committed
/// batches, or a message can never become a tuple.
pub fn retry_cannot_help(error: &anyhow::Error) -> bool {
    input_changed(error) || error.chain().any(|cause| cause.is::<Unreadable>())
}

/// Where a guest spout runs: the component, and the spout's sandbox.
pub type GuestCode = Option<(Arc<LoadedComponent>, OperatorSandbox)>;

/// What opening a topology's spout takes besides its definition.
#[derive(Clone, Copy, Debug)]
pub struct SpoutEnv<'a> {
    /// The topology's own name, which its guest spout is called with.
    pub topology: &'a str,
    /// The name the host keeps the topology's logs and state under.
    pub stored_as: &'a str,
    /// Where its input may be read from.
    pub scope: &'a InputScope,
    /// The input file or directory, for the spouts over lines.
    pub input: Option<&'a Path>,
    /// Spout tuples per batch (for a JetStream spout, per partition, unless
    /// the topology says otherwise).
    pub batch_size: usize,
    /// The NATS server, for the JetStream spouts.
    pub nats: Option<&'a NatsConfig>,
    /// The Kafka brokers, for the Kafka spouts.
    pub kafka: Option<&'a KafkaConfig>,
    /// The topology follows its input as it grows (`weir serve`): a file's
    /// last line counts once its newline is written.
    pub follows: bool,
}

impl<'a> SpoutEnv<'a> {
    /// A topology kept under its own name, reading `input` wherever it is.
    pub fn local(topology: &'a str, input: Option<&'a Path>, batch_size: usize, nats: Option<&'a NatsConfig>) -> Self {
        SpoutEnv {
            topology,
            stored_as: topology,
            scope: &InputScope::Anywhere,
            input,
            batch_size,
            nats,
            kafka: None,
            follows: false,
        }
    }

    /// The same, with the Kafka brokers `kafka`.
    pub fn with_kafka(self, kafka: Option<&'a KafkaConfig>) -> Self {
        SpoutEnv { kafka, ..self }
    }
}

/// The spout a topology's definition names, opened in `env`; a guest spout
/// runs in `guest`.
pub fn open(def: &SpoutDef, env: &SpoutEnv<'_>, guest: GuestCode) -> Result<Box<dyn Spout>> {
    let topology = env.stored_as;
    let input = |what: &str| {
        env.input.with_context(|| format!("topology {topology} reads the lines of {what}: give it with --input"))
    };
    let batch_size = env.batch_size;
    Ok(match def {
        SpoutDef::FileLines { .. } => {
            Box::new(FileLines::open_in(env.scope, input("a file")?, batch_size)?.following(env.follows))
        }
        SpoutDef::DirectoryLines { .. } => {
            Box::new(DirectoryLines::open_in(env.scope, input("a directory's files")?, batch_size)?)
        }
        SpoutDef::Generator { count, .. } => Box::new(Generator::new(*count, batch_size)),
        SpoutDef::Guest { promise, fields } => {
            let (component, sandbox) =
                guest.with_context(|| format!("topology {topology}: a guest spout needs its component"))?;
            let spout = GuestSpout::new(component, sandbox, *promise, env.topology, fields.len(), batch_size);
            Box::new(spout.logs_as(env.stored_as))
        }
        SpoutDef::JetStream(stream) => Box::new(JetStreamSpout::open(stream, topology, nats(def, env)?, batch_size)?),
        SpoutDef::Kafka(spout) => Box::new(KafkaSpout::open(spout, topology, kafka(def, env)?, batch_size)?),
    })
}

/// The Kafka brokers a Kafka spout reads from.
fn kafka<'a>(def: &SpoutDef, env: &SpoutEnv<'a>) -> Result<&'a KafkaConfig> {
    let SpoutDef::Kafka(spout) = def else { unreachable!("only Kafka spouts connect to Kafka") };
    env.kafka.with_context(|| {
        format!("topology {} reads Kafka topic {}: give the brokers with --kafka HOST:PORT", env.stored_as, spout.topic)
    })
}

/// The NATS server a JetStream spout reads from.
fn nats<'a>(def: &SpoutDef, env: &SpoutEnv<'a>) -> Result<&'a NatsConfig> {
    let SpoutDef::JetStream(stream) = def else { unreachable!("only JetStream spouts connect to NATS") };
    env.nats.with_context(|| {
        format!(
            "topology {} reads stream {} from NATS JetStream: give the server with --nats URL",
            env.stored_as, stream.stream
        )
    })
}

/// Checks that the input and servers in `env` are what `def` needs, before
/// anything else runs (a JetStream spout's server is not asked yet).
pub fn check_input(def: &SpoutDef, env: &SpoutEnv<'_>) -> Result<()> {
    let topology = env.stored_as;
    match (def, env.input) {
        (SpoutDef::Generator { .. } | SpoutDef::Guest { .. }, Some(path)) => {
            bail!("topology {topology} makes its own input: --input {} is not used", path.display())
        }
        (SpoutDef::JetStream(stream), Some(path)) => bail!(
            "topology {topology} reads stream {} from NATS JetStream: --input {} is not used",
            stream.stream,
            path.display()
        ),
        (SpoutDef::JetStream(stream), None) => {
            nats(def, env)?;
            jetstream::check(stream, topology)
        }
        (SpoutDef::Kafka(spout), Some(path)) => {
            bail!("topology {topology} reads Kafka topic {}: --input {} is not used", spout.topic, path.display())
        }
        (SpoutDef::Kafka(spout), None) => {
            kafka(def, env)?;
            kafka::check(spout, topology)
        }
        (SpoutDef::Generator { .. } | SpoutDef::Guest { .. }, None) => Ok(()),
        _ => open(def, &SpoutEnv { batch_size: 1, ..*env }, None).map(drop),
    }
}

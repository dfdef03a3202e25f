//! `weir serve`: run topologies from uploaded bundles, driven over HTTP.

use anyhow::{Context, Result};
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use weir_config::{
    DEFAULT_BATCH_SIZE, DEFAULT_BODY_TIMEOUT_MS, DEFAULT_HEADER_TIMEOUT_MS, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_DEPLOYMENTS, DEFAULT_MAX_UPLOAD_MIB, DEFAULT_SHUTDOWN_TIMEOUT_MS, RunConfig, default_max_pending,
};
use weir_io::spout::InputScope;
use weir_server::deployments::Host;
use weir_server::{ServeConfig, serve};

use super::engine::EngineArgs;

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Directory holding every topology's state and the uploaded bundles.
    #[arg(long)]
    data: PathBuf,
    /// Address to listen on; a non-loopback address needs --token-file.
    #[arg(long, default_value = "127.0.0.1:7878")]
    listen: SocketAddr,
    /// File holding the token every API call must bear
    /// (`Authorization: Bearer <token>`); /health and /metrics need none.
    /// Without one, calls must come from this machine and not from a web
    /// page (loopback Host, no foreign Origin, no browser form).
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Largest bundle upload, in MiB; a larger one gets 413 before it is read.
    #[arg(long, default_value_t = DEFAULT_MAX_UPLOAD_MIB)]
    max_upload_mib: usize,
    /// Topologies this server runs at once, each with threads, operator
    /// instances and cached state of its own; a deploy past it gets 409.
    #[arg(long, default_value_t = DEFAULT_MAX_DEPLOYMENTS, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_deployments: usize,
    /// Time a client may take to send a request's headers, in
    /// milliseconds; past it the connection is closed.
    #[arg(long, default_value_t = DEFAULT_HEADER_TIMEOUT_MS)]
    header_timeout_ms: u64,
    /// Client connections served at once; further clients wait until one
    /// closes, so that idle or slow clients cannot take the file
    /// descriptors the topologies need. At most a quarter of the open-file
    /// limit, which the server raises to its hard limit at start.
    #[arg(long, default_value_t = DEFAULT_MAX_CONNECTIONS)]
    max_connections: usize,
    /// Time a client may take to send a request's body, in milliseconds;
    /// past it the call gets 408 and the connection is closed.
    #[arg(long, default_value_t = DEFAULT_BODY_TIMEOUT_MS)]
    body_timeout_ms: u64,
    /// Time the topologies get to stop at a batch boundary on SIGTERM or
    /// SIGINT, in milliseconds, before the server exits anyway.
    #[arg(long, default_value_t = DEFAULT_SHUTDOWN_TIMEOUT_MS)]
    shutdown_timeout_ms: u64,
    /// A directory topologies' spouts may read their input from (checked at
    /// every open: no link leads outside). Repeatable.
    #[arg(long)]
    input_dir: Vec<PathBuf>,
    /// Lines (spout tuples) per batch.
    #[arg(long, default_value_t = DEFAULT_BATCH_SIZE)]
    batch_size: usize,
    /// Batches processing at once per topology, holding at most 64 MiB of
    /// input and results beyond the first [default: 128,000 divided by the
    /// batch size, from 4 to 128].
    #[arg(long)]
    max_pending: Option<usize>,
    /// Time a batch may take, in milliseconds, before it is replayed (in a
    /// cluster: from the leader's start to every slot owner's commit).
    #[arg(long, default_value_t = weir_config::DEFAULT_BATCH_TIMEOUT_MS, value_parser = clap::value_parser!(u64).range(1..))]
    batch_timeout_ms: u64,
    /// How often a topology that has caught up asks its spout for more, in milliseconds.
    #[arg(long, default_value_t = 200)]
    poll_ms: u64,
    /// Bytes the states of all this server's topologies may hold on disk
    /// together, in MiB: a commit that would pass it halts its topology
    /// (the others go on) [default: unbounded].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    max_total_state_mib: Option<u64>,
    #[command(flatten)]
    engine: EngineArgs,
    #[command(flatten)]
    cluster: super::cluster::ClusterArgs,
}

pub fn run(args: ServeArgs) -> Result<()> {
    let token = super::token::read_token(args.token_file.as_deref())?;
    let sandbox = args.engine.sandbox();
    let db = Arc::new(args.engine.sandbox.open_db(&args.data, args.max_total_state_mib)?);
    // Absolute, so that errors sent to clients can name bundles relative to it.
    let data = args.data.canonicalize().with_context(|| format!("data dir {}", args.data.display()))?;
    let (engine, cache) = args.engine.engine_and_cache(&sandbox)?;
    let host = Host {
        db,
        bundles: data.join("bundles"),
        engine,
        cache,
        sandbox,
        run: RunConfig {
            batch_size: args.batch_size.max(1),
            max_pending: args.max_pending.unwrap_or(default_max_pending(args.batch_size)).max(1),
            follow: Some(Duration::from_millis(args.poll_ms.max(1))),
            batch_timeout: Duration::from_millis(args.batch_timeout_ms.max(1)),
            max_outbox_bytes: args.engine.sinks.max_outbox_bytes(),
            ..RunConfig::default()
        },
        inputs: InputScope::Under(args.input_dir.clone()),
        nats: args.engine.nats.config()?,
        kafka: args.engine.kafka.config()?,
        max_deployments: args.max_deployments,
    };
    serve(ServeConfig {
        host,
        listen: args.listen,
        token,
        max_upload: args.max_upload_mib.saturating_mul(1 << 20),
        header_timeout: Duration::from_millis(args.header_timeout_ms.max(1)),
        max_connections: args.max_connections.max(1),
        body_timeout: Duration::from_millis(args.body_timeout_ms.max(1)),
        shutdown_timeout: Duration::from_millis(args.shutdown_timeout_ms),
        cluster: args.cluster.config()?,
    })
}

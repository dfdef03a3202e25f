//! The `weir` verbs, one file each.

mod bundle;
mod client;
mod cluster;
mod compile;
mod delete;
mod deploy;
mod engine;
mod inspect;
mod kafka;
mod limits;
mod logs;
mod nats;
mod new;
mod ps;
mod publish;
mod publish_kafka;
mod query;
mod resume;
mod run;
mod serve;
mod skip;
mod state;
mod status;
mod stop;
mod target;
mod token;
mod upgrade;

use anyhow::Result;
use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

/// Weir runs exactly-once stream topologies whose operators are WebAssembly
/// components: batches with transaction ids, state in redb, every operator
/// in its own sandbox.
#[derive(Parser, Debug)]
#[command(name = "weir", version, about, long_about = None)]
#[command(after_help = "Logs go to stderr; set WEIR_LOG (e.g. WEIR_LOG=weir=debug) to see more.")]
pub struct Cli {
    /// Log format: text for people, json for machines.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// How logs are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Lines for people.
    Text,
    /// One JSON object per line.
    Json,
}

impl Cli {
    /// The log format asked for.
    pub fn log_format(&self) -> LogFormat {
        self.log_format
    }
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a topology over an input file until every batch is committed.
    Run(run::RunArgs),
    /// Answer one of a topology's query streams over its committed state;
    /// the result tuples come as one JSON array of arrays on the last line.
    Query(query::QueryArgs),
    /// Read a topology's stored state.
    #[command(subcommand)]
    State(state::StateCommand),
    /// Build a guest directory (a Rust crate, a Python or JavaScript guest, or
    /// several guests) and pack its components and topologies into one
    /// `.weir` bundle file.
    Bundle(bundle::BundleArgs),
    /// Show what a bundle or component holds: topologies, operators, states,
    /// spouts, limits, capabilities, WIT version.
    Inspect(inspect::InspectArgs),
    /// Create a guest (Rust, Python or JavaScript) with a small working
    /// topology, a README and a test.
    New(new::NewArgs),
    /// Run deployed topologies, driven over an HTTP JSON API and watched from
    /// a web dashboard at the server's address (see the README).
    Serve(serve::ServeArgs),
    /// Upload a bundle to a server and start its topology.
    Deploy(deploy::DeployArgs),
    /// List a server's topologies.
    Ps(ps::PsArgs),
    /// Show how a served topology is doing.
    Status(client::TopologyArgs),
    /// Show the cluster a server is in: its hosts and its leader.
    Cluster(cluster::ClusterViewArgs),
    /// Stop a served topology at a batch boundary.
    Stop(client::TopologyArgs),
    /// Start a stopped served topology again.
    Resume(client::TopologyArgs),
    /// Swap a served topology's bundle at a batch boundary, keeping its state.
    Upgrade(upgrade::UpgradeArgs),
    /// Delete a served topology, keeping or dropping its state.
    Delete(delete::DeleteArgs),
    /// Show what a served topology's guests wrote, most recent first.
    Logs(logs::LogsArgs),
    /// Commit a halted topology's next recorded batch with nothing written,
    /// when its data is wrong and the guest is right to refuse it; the
    /// skip is recorded in the data dir and logged.
    SkipBatch(skip::SkipBatchArgs),
    /// Publish the lines of a file into a NATS JetStream stream, spread over
    /// its partition subjects, each acknowledged.
    Publish(publish::PublishArgs),
    /// Compile a component for a parent `weir`, within its bounds.
    #[command(name = weir_runtime::compile::COMPILE_COMMAND, hide = true)]
    CompileComponent(compile::CompileComponentArgs),
}

/// Sends logs to stderr, filtered by `WEIR_LOG` (default: info for Weir).
pub fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_env("WEIR_LOG").unwrap_or_else(|_| EnvFilter::new("weir=info,warn"));
    // A closed stderr (`weir run ... 2>&1 | head`) must not stop the run:
    // tracing-subscriber would report the failed write with `eprintln!`,
    // which panics on a closed stderr.
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .log_internal_errors(false);
    match format {
        LogFormat::Text => logs.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).init(),
        LogFormat::Json => logs.json().init(),
    }
}

/// Runs the chosen verb; `started` is when the process started.
pub fn dispatch(cli: Cli, started: std::time::Instant) -> Result<()> {
    match cli.command {
        Command::Run(args) => run::run(args, started),
        Command::Query(args) => query::run(args),
        Command::State(command) => state::run(command),
        Command::Bundle(args) => bundle::run(args),
        Command::Inspect(args) => inspect::run(args),
        Command::New(args) => new::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Deploy(args) => deploy::run(args),
        Command::Ps(args) => ps::run(args),
        Command::Status(args) => status::run(args),
        Command::Cluster(args) => cluster::run(args),
        Command::Stop(args) => stop::run(args),
        Command::Resume(args) => resume::run(args),
        Command::Upgrade(args) => upgrade::run(args),
        Command::Delete(args) => delete::run(args),
        Command::Logs(args) => logs::run(args),
        Command::SkipBatch(args) => skip::run(args),
        Command::Publish(args) => match args.topic.clone() {
            Some(topic) => publish_kafka::run(&args, &topic),
            None => publish::run(args),
        },
        Command::CompileComponent(args) => compile::run(args),
    }
}

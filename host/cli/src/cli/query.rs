//! `weir query`: answer one of a topology's query streams (Trident's DRPC)
//! over its committed state.

use super::client::Method;
use super::target::{Target, TargetArgs};
use anyhow::{Context, Result};
use clap::Args;
use std::path::{Path, PathBuf};
use weir_config::SandboxConfig;
use weir_engine::instances::OperatorSource;
use weir_engine::{exec, load};
use weir_state::Db;
use weir_state::json::to_json;

#[derive(Args, Debug)]
pub struct QueryArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// The query stream's name.
    #[arg(long)]
    query: String,
    /// The request's arguments: the `args` field of the query's one tuple.
    #[arg(long, default_value = "")]
    args: String,
    /// The component or bundle to run the query's operators with [default:
    /// the one `weir run` last ran the topology with on --data].
    #[arg(long)]
    component: Option<PathBuf>,
    #[command(flatten)]
    compile: super::compile::CompileArgs,
    #[command(flatten)]
    topology_limits: super::limits::TopologyLimitArgs,
}

/// Prints the result tuples as one JSON array of arrays, on the last line.
pub fn run(args: QueryArgs) -> Result<()> {
    let rows = match args.target.target() {
        Target::Server(server) => {
            let path = ["v1", "topologies", &args.target.topology, "queries", &args.query];
            server.call(Method::Post(args.args.as_bytes()), &path, &[])?
        }
        Target::Data(data) => serde_json::Value::Array(local(&args, data)?),
    };
    println!("{rows}");
    Ok(())
}

fn local(args: &QueryArgs, data: &Path) -> Result<Vec<serde_json::Value>> {
    let source = match &args.component {
        Some(path) => path.clone(),
        None => load::remembered_source(data, &args.target.topology)?,
    };
    let (engine, cache) = args.compile.engine_and_cache(true)?;
    let config = SandboxConfig { topology: args.topology_limits.limits(), ..SandboxConfig::default() };
    let mut loaded = load::topologies(&engine, &cache, &source, std::slice::from_ref(&args.target.topology), &config)?;
    let loaded = loaded.pop().context("no topology loaded")?;
    let db = Db::open(data)?;
    let rows = exec::query(&db, &loaded.plan, &OperatorSource::Wasm(loaded.components), &args.query, &args.args)?;
    Ok(rows.iter().map(|row| serde_json::Value::Array(row.iter().map(to_json).collect())).collect())
}

//! `weir deploy`: upload a bundle to a server and start its topology.

use super::client::{Method, ServerArgs, print_statuses};
use anyhow::{Context, Result};
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct DeployArgs {
    /// The bundle (.weir) to upload.
    bundle: PathBuf,
    /// The name to deploy it under, which its state, progress, logs and
    /// metrics are kept under [default: the topology's]: one topology may
    /// be deployed under several names, over several inputs.
    #[arg(long)]
    name: Option<String>,
    /// The bundle's topology to deploy; needed when it defines several.
    #[arg(long)]
    topology: Option<String>,
    /// The input the topology's spout reads, on the server, under one of its --input-dir.
    #[arg(long)]
    input: Option<String>,
    #[command(flatten)]
    server: ServerArgs,
}

pub fn run(args: DeployArgs) -> Result<()> {
    let bundle =
        std::fs::read(&args.bundle).with_context(|| format!("cannot read bundle {}", args.bundle.display()))?;
    let query: Vec<(&str, &str)> = [("name", &args.name), ("topology", &args.topology), ("input", &args.input)]
        .into_iter()
        .filter_map(|(key, value)| Some((key, value.as_deref()?)))
        .collect();
    let answer = args.server.call(Method::Post(&bundle), &["v1", "topologies"], &query)?;
    print_statuses(&args.server, &answer)
}

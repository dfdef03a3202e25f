//! `weir deploy`: upload a bundle to a server and start its topology.

use super::client::{ServerArgs, print_statuses};
use anyhow::{Context, Result};
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct DeployArgs {
    /// The bundle (.weir) to upload.
    bundle: PathBuf,
    /// The topology to deploy from it (its name is the deployment's name);
    /// needed when the bundle defines several.
    #[arg(long)]
    name: Option<String>,
    /// The input the topology's spout reads, on the server, under one of its --input-dir.
    #[arg(long)]
    input: Option<String>,
    #[command(flatten)]
    server: ServerArgs,
}

/// `value` escaped for a URL's query.
pub fn query_escape(value: &str) -> String {
    value
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_./".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

pub fn run(args: DeployArgs) -> Result<()> {
    let bundle =
        std::fs::read(&args.bundle).with_context(|| format!("cannot read bundle {}", args.bundle.display()))?;
    let mut query = Vec::new();
    if let Some(name) = &args.name {
        query.push(format!("topology={}", query_escape(name)));
    }
    if let Some(input) = &args.input {
        query.push(format!("input={}", query_escape(input)));
    }
    let answer = args.server.call("POST", &format!("/v1/topologies?{}", query.join("&")), &bundle)?;
    print_statuses(&args.server, &answer)
}

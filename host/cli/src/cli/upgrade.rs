//! `weir upgrade`: swap a served topology's bundle, keeping its state.

use super::client::{Method, ServerArgs, print_statuses};
use anyhow::{Context, Result};
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct UpgradeArgs {
    /// The topology.
    name: String,
    /// The new bundle (.weir).
    bundle: PathBuf,
    #[command(flatten)]
    server: ServerArgs,
}

pub fn run(args: UpgradeArgs) -> Result<()> {
    let bundle =
        std::fs::read(&args.bundle).with_context(|| format!("cannot read bundle {}", args.bundle.display()))?;
    let answer = args.server.call(Method::Put(&bundle), &["v1", "topologies", &args.name, "bundle"], &[])?;
    print_statuses(&args.server, &answer)
}

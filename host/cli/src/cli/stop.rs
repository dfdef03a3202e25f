//! `weir stop`: stop a served topology at a batch boundary.

use super::client::{ServerArgs, print_statuses};
use anyhow::Result;
use clap::Args;

#[derive(Args, Debug)]
pub struct StopArgs {
    /// The topology.
    name: String,
    #[command(flatten)]
    server: ServerArgs,
}

pub fn run(args: StopArgs) -> Result<()> {
    let answer = args.server.call("POST", &["v1", "topologies", &args.name, "stop"], &[], b"")?;
    print_statuses(&args.server, &answer)
}

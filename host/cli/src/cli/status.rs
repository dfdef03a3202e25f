//! `weir status`: how one served topology is doing.

use super::client::{ServerArgs, print_statuses};
use anyhow::Result;
use clap::Args;

#[derive(Args, Debug)]
pub struct StatusArgs {
    /// The topology.
    name: String,
    #[command(flatten)]
    server: ServerArgs,
}

pub fn run(args: StatusArgs) -> Result<()> {
    let answer = args.server.call("GET", &["v1", "topologies", &args.name], &[], b"")?;
    print_statuses(&args.server, &answer)
}

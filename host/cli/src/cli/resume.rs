//! `weir resume`: start a stopped served topology again.

use super::client::{ServerArgs, print_statuses};
use anyhow::Result;
use clap::Args;

#[derive(Args, Debug)]
pub struct ResumeArgs {
    /// The topology.
    name: String,
    #[command(flatten)]
    server: ServerArgs,
}

pub fn run(args: ResumeArgs) -> Result<()> {
    let answer = args.server.call("POST", &["v1", "topologies", &args.name, "resume"], &[], b"")?;
    print_statuses(&args.server, &answer)
}

//! `weir ps`: the topologies a server runs.

use super::client::{ServerArgs, print_statuses};
use anyhow::Result;
use clap::Args;

#[derive(Args, Debug)]
pub struct PsArgs {
    #[command(flatten)]
    server: ServerArgs,
}

pub fn run(args: PsArgs) -> Result<()> {
    let answer = args.server.call("GET", &["v1", "topologies"], &[], b"")?;
    print_statuses(&args.server, &answer)
}

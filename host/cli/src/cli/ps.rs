//! `weir ps`: the topologies a server runs.

use super::client::{Method, ServerArgs, print_statuses};
use anyhow::Result;
use clap::Args;

#[derive(Args, Debug)]
pub struct PsArgs {
    #[command(flatten)]
    server: ServerArgs,
}

pub fn run(args: PsArgs) -> Result<()> {
    let answer = args.server.call(Method::Get, &["v1", "topologies"], &[])?;
    print_statuses(&args.server, &answer)
}

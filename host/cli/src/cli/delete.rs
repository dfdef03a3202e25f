//! `weir delete`: remove a served topology, keeping or dropping its state.

use super::client::{Method, ServerArgs};
use anyhow::Result;
use clap::Args;

#[derive(Args, Debug)]
#[group(required = true, multiple = false)]
pub struct StateChoice {
    /// Keep the topology's state in the server's database.
    #[arg(long)]
    keep_state: bool,
    /// Drop the topology's state and progress.
    #[arg(long)]
    drop_state: bool,
}

#[derive(Args, Debug)]
pub struct DeleteArgs {
    /// The topology.
    name: String,
    #[command(flatten)]
    state: StateChoice,
    #[command(flatten)]
    server: ServerArgs,
}

pub fn run(args: DeleteArgs) -> Result<()> {
    let state = if args.state.drop_state { "drop" } else { "keep" };
    args.server.call(Method::Delete, &["v1", "topologies", &args.name], &[("state", state)])?;
    println!("deleted {} ({} its state)", args.name, if args.state.drop_state { "dropped" } else { "kept" });
    Ok(())
}

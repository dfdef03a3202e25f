//! Where `weir query` and `weir state` find a topology: in a data
//! directory, or at a running `weir serve`.

use super::client::ServerArgs;
use clap::Args;
use std::path::{Path, PathBuf};

#[derive(Args, Debug)]
pub struct TargetArgs {
    /// The data directory the topology runs with.
    #[arg(long, required_unless_present = "server", conflicts_with = "server")]
    data: Option<PathBuf>,
    /// Ask a running `weir serve` instead (token from WEIR_TOKEN).
    #[arg(long)]
    server: Option<String>,
    /// The topology's name (with --server, the name it is deployed under).
    #[arg(long)]
    pub topology: String,
}

/// A data directory, or a server.
pub enum Target<'a> {
    Data(&'a Path),
    Server(ServerArgs),
}

impl TargetArgs {
    /// Where the topology is, as the flags name it.
    pub fn target(&self) -> Target<'_> {
        match &self.server {
            Some(url) => Target::Server(ServerArgs::at(url)),
            None => Target::Data(self.data.as_deref().expect("clap requires --data without --server")),
        }
    }
}

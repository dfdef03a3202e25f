//! `weir state`: read stored state.

use super::client::ServerArgs;
use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use std::io::Write;
use std::path::PathBuf;
use weir::json::{entry, from_json};
use weir::state::Db;
use weir_sdk::codec::Value;

#[derive(Subcommand, Debug)]
pub enum StateCommand {
    /// Print every key of a state, sorted, one JSON object per line:
    /// {"key":[...],"value":...}.
    Scan(StateArgs),
    /// Print one key's entry, as `scan` does; exits non-zero if it is absent.
    Get {
        #[command(flatten)]
        state: StateArgs,
        /// The key, as a JSON array of its values, e.g. '["w1"]'.
        #[arg(long)]
        key: String,
    },
}

#[derive(Args, Debug)]
pub struct StateArgs {
    /// The data directory the topology ran with.
    #[arg(long, required_unless_present = "server", conflicts_with = "server")]
    data: Option<PathBuf>,
    /// Read from a running `weir serve` instead (token from WEIR_TOKEN).
    #[arg(long)]
    server: Option<String>,
    /// The topology's name.
    #[arg(long)]
    topology: String,
    /// The state's name.
    #[arg(long)]
    state: String,
    /// Also print the stored txid (and prev, for opaque state).
    #[arg(long)]
    raw: bool,
}

fn open(args: &StateArgs) -> Result<Db> {
    let data = args.data.as_deref().expect("clap requires --data without --server");
    if !data.join("weir.redb").exists() {
        bail!("{} holds no Weir database (no weir.redb)", data.display());
    }
    Db::open(data)
}

/// Reads the state from a server: one key, or every key.
fn remote(args: &StateArgs, server: &str, key: Option<&str>) -> Result<()> {
    if args.raw {
        bail!("--raw reads a data dir: a server answers keys and values only");
    }
    let server = ServerArgs::at(server);
    let path = ["v1", "topologies", &args.topology, "states", &args.state];
    let answer = server.call("GET", &path, &key.map(|key| ("key", key)).into_iter().collect::<Vec<_>>(), b"")?;
    let mut out = std::io::stdout().lock();
    match answer {
        serde_json::Value::Array(entries) => {
            for entry in entries {
                writeln!(out, "{entry}")?;
            }
        }
        entry => writeln!(out, "{entry}")?,
    }
    Ok(())
}

pub fn run(command: StateCommand) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match command {
        StateCommand::Scan(args) if args.server.is_some() => {
            remote(&args, args.server.as_deref().expect("checked"), None)?
        }
        StateCommand::Get { state: args, key } if args.server.is_some() => {
            remote(&args, args.server.as_deref().expect("checked"), Some(&key))?
        }
        StateCommand::Scan(args) => {
            let db = open(&args)?;
            for (key, stored) in db.scan(&args.topology, &args.state)? {
                writeln!(out, "{}", entry(&key, &stored, args.raw))?;
            }
        }
        StateCommand::Get { state: args, key } => {
            let json: serde_json::Value = serde_json::from_str(&key)
                .with_context(|| format!("--key {} is not JSON", serde_json::Value::from(&key[..])))?;
            let Some(values) = json.as_array() else { bail!("--key must be a JSON array, e.g. '[\"w1\"]'") };
            let key: Vec<Value> = values.iter().map(from_json).collect::<Result<_>>().context("--key")?;
            let db = open(&args)?;
            match db.get(&args.topology, &args.state, &key)? {
                Some(stored) => writeln!(out, "{}", entry(&key, &stored, args.raw))?,
                None => bail!("state {} of topology {} has no key {json}", args.state, args.topology),
            }
        }
    }
    Ok(())
}

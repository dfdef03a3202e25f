//! `weir state`: read stored state.

use super::json::{from_json, to_json};
use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use serde_json::json;
use std::io::Write;
use std::path::PathBuf;
use weir::state::Db;
use weir::state::rules::Stored;
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
    #[arg(long)]
    data: PathBuf,
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

fn entry(key: &[Value], stored: &Stored, raw: bool) -> serde_json::Value {
    let key: Vec<_> = key.iter().map(to_json).collect();
    let mut out = json!({ "key": key, "value": to_json(stored.value()) });
    if raw {
        match stored {
            Stored::Transactional { txid, .. } => out["txid"] = json!(txid),
            Stored::Opaque { txid, prev, .. } => {
                out["txid"] = json!(txid);
                out["prev"] = prev.as_ref().map_or(serde_json::Value::Null, to_json);
            }
            Stored::Plain(_) => {}
        }
    }
    out
}

fn open(args: &StateArgs) -> Result<Db> {
    if !args.data.join("weir.redb").exists() {
        bail!("{} holds no Weir database (no weir.redb)", args.data.display());
    }
    Db::open(&args.data)
}

pub fn run(command: StateCommand) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match command {
        StateCommand::Scan(args) => {
            let db = open(&args)?;
            for (key, stored) in db.scan(&args.topology, &args.state)? {
                writeln!(out, "{}", entry(&key, &stored, args.raw))?;
            }
        }
        StateCommand::Get { state: args, key } => {
            let json: serde_json::Value =
                serde_json::from_str(&key).with_context(|| format!("--key {key:?} is not JSON"))?;
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

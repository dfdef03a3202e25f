//! `weir state`: read stored state.

use super::client::{Method, ServerArgs};
use super::target::{Target, TargetArgs};
use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use std::io::Write;
use std::path::Path;
use weir_config::MAX_STATE_PAGE;
use weir_sdk::codec::Value;
use weir_state::Db;
use weir_state::json::{entry, from_json};

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
    #[command(flatten)]
    target: TargetArgs,
    /// The state's name.
    #[arg(long)]
    state: String,
    /// Also print the stored txid (and prev, for opaque state).
    #[arg(long)]
    raw: bool,
}

fn open(data: &Path) -> Result<Db> {
    if !data.join("weir.redb").exists() {
        bail!("{} holds no Weir database (no weir.redb)", data.display());
    }
    Db::open(data)
}

/// The longest key, as JSON, after which a page is asked for: a URL
/// holds 64 KiB, and escaping may triple it.
const MAX_AFTER_KEY: usize = 16 << 10;

/// Reads the state from a server: one key, or every key, a page at a
/// time, so that neither side holds a large state whole.
fn remote(args: &StateArgs, server: &ServerArgs, key: Option<&str>) -> Result<()> {
    if args.raw {
        bail!("--raw reads a data dir: a server answers keys and values only");
    }
    let path = ["v1", "topologies", &args.target.topology, "states", &args.state];
    let mut out = std::io::stdout().lock();
    if let Some(key) = key {
        writeln!(out, "{}", server.call(Method::Get, &path, &[("key", key)])?)?;
        return Ok(());
    }
    let mut after: Option<String> = None;
    let mut limit = MAX_STATE_PAGE;
    loop {
        let limit_text = limit.to_string();
        let mut query = vec![("limit", limit_text.as_str())];
        query.extend(after.as_deref().map(|after| ("after", after)));
        let page = match server.call(Method::Get, &path, &query) {
            Ok(page) => page,
            // Keys of large values: a page of fewer.
            Err(e) if limit > 1 && format!("{e:#}").contains("ask for fewer keys") => {
                limit /= 2;
                continue;
            }
            Err(e) => return Err(e),
        };
        let Some(entries) = page.as_array() else { bail!("the server answered {page} for a page of keys") };
        for entry in entries {
            writeln!(out, "{entry}")?;
        }
        match entries.last() {
            Some(last) if entries.len() == limit => after = Some(last["key"].to_string()),
            _ => return Ok(()),
        }
        if let Some(key) = after.as_ref().filter(|key| key.len() > MAX_AFTER_KEY) {
            bail!(
                "a key of state {} is {} bytes long, too long to ask a server for the keys after it: read the data \
                 dir with `weir state scan --data`",
                args.state,
                key.len()
            );
        }
    }
}

pub fn run(command: StateCommand) -> Result<()> {
    let (args, key) = match command {
        StateCommand::Scan(args) => (args, None),
        StateCommand::Get { state, key } => (state, Some(key)),
    };
    match args.target.target() {
        Target::Server(server) => remote(&args, &server, key.as_deref()),
        Target::Data(data) => local(&args, data, key.as_deref()),
    }
}

/// Reads the state from a data dir: one key, or every key.
fn local(args: &StateArgs, data: &Path, key: Option<&str>) -> Result<()> {
    let (topology, state) = (&args.target.topology, &args.state);
    let mut out = std::io::stdout().lock();
    let Some(key) = key else {
        let db = open(data)?;
        for (key, stored) in db.scan(topology, state)? {
            writeln!(out, "{}", entry(&key, &stored, args.raw))?;
        }
        return Ok(());
    };
    let json: serde_json::Value =
        serde_json::from_str(key).with_context(|| format!("--key {} is not JSON", serde_json::Value::from(key)))?;
    let Some(values) = json.as_array() else { bail!("--key must be a JSON array, e.g. '[\"w1\"]'") };
    let key: Vec<Value> = values.iter().map(from_json).collect::<Result<_>>().context("--key")?;
    let db = open(data)?;
    match db.get(topology, state, &key)? {
        Some(stored) => writeln!(out, "{}", entry(&key, &stored, args.raw))?,
        None => bail!("state {state} of topology {topology} has no key {json}"),
    }
    Ok(())
}

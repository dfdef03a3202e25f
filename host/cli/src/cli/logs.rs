//! `weir logs`: what a served topology's guests wrote, most recent first.

use super::client::{Method, ServerArgs};
use anyhow::Result;
use clap::Args;

#[derive(Args, Debug)]
pub struct LogsArgs {
    /// The topology.
    name: String,
    /// Show at most this many lines.
    #[arg(long, default_value_t = 100)]
    lines: usize,
    #[command(flatten)]
    server: ServerArgs,
}

pub fn run(args: LogsArgs) -> Result<()> {
    let answer = args.server.call(Method::Get, &["v1", "topologies", &args.name, "logs"], &[])?;
    let lines: Vec<&serde_json::Value> = answer.as_array().into_iter().flatten().take(args.lines).collect();
    if args.server.json {
        println!("{}", serde_json::to_string_pretty(&lines)?);
        return Ok(());
    }
    for line in lines {
        println!(
            "[{}] {}: {}",
            line["operator"].as_str().unwrap_or("?"),
            line["stream"].as_str().unwrap_or("?"),
            line["line"].as_str().unwrap_or_default()
        );
    }
    Ok(())
}

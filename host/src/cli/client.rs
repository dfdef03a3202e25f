//! What the verbs that talk to a `weir serve` share: the server's address,
//! the token, one HTTP/1.1 request, and how answers are printed.

use anyhow::{Context, Result, bail};
use clap::Args;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Where the server is, and how to print its answers.
#[derive(Args, Debug, Clone)]
pub struct ServerArgs {
    /// The server's address [env: WEIR_SERVER; default: http://127.0.0.1:7878].
    /// The token comes from WEIR_TOKEN.
    #[arg(long)]
    server: Option<String>,
    /// Print the server's JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

impl ServerArgs {
    /// The server at `url`.
    pub fn at(url: &str) -> ServerArgs {
        ServerArgs { server: Some(url.to_owned()), json: false }
    }

    fn address(&self) -> Result<String> {
        let url = self
            .server
            .clone()
            .or_else(|| std::env::var("WEIR_SERVER").ok())
            .unwrap_or_else(|| "http://127.0.0.1:7878".to_owned());
        let Some(rest) = url.strip_prefix("http://") else {
            bail!("--server {url}: only http:// addresses are supported")
        };
        Ok(rest.trim_end_matches('/').to_owned())
    }

    /// Sends one request and returns the server's JSON; a non-2xx answer is
    /// an error quoting the server.
    pub fn call(&self, method: &str, path: &str, body: &[u8]) -> Result<serde_json::Value> {
        let address = self.address()?;
        let mut stream =
            TcpStream::connect(&address).with_context(|| format!("cannot reach weir serve at {address}"))?;
        stream.set_read_timeout(Some(Duration::from_secs(600)))?;
        let mut request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\nContent-Length: {}\r\n",
            body.len()
        );
        if let Ok(token) = std::env::var("WEIR_TOKEN") {
            request.push_str(&format!("Authorization: Bearer {}\r\n", token.trim()));
        }
        request.push_str("\r\n");
        stream.write_all(request.as_bytes())?;
        let _ = stream.write_all(body);
        let mut response = Vec::new();
        let _ = stream.read_to_end(&mut response);
        let response = String::from_utf8_lossy(&response);
        let (head, body) = response.split_once("\r\n\r\n").context("the server's answer is not HTTP")?;
        let status: u16 =
            head.split(' ').nth(1).and_then(|s| s.parse().ok()).context("the server's answer has no status")?;
        let body = if body.trim().is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_str(body).unwrap_or_else(|_| body.into())
        };
        if !(200..300).contains(&status) {
            let reason = body["error"].as_str().map(str::to_owned).unwrap_or_else(|| body.to_string());
            bail!("the server answered {status}: {reason}");
        }
        Ok(body)
    }
}

/// Prints statuses as a table, or the JSON.
pub fn print_statuses(args: &ServerArgs, statuses: &serde_json::Value) -> Result<()> {
    if args.json {
        println!("{}", serde_json::to_string_pretty(statuses)?);
        return Ok(());
    }
    let rows: Vec<&serde_json::Value> = match statuses {
        serde_json::Value::Array(all) => all.iter().collect(),
        one => vec![one],
    };
    println!(
        "{:<24} {:<8} {:>14} {:>10} {:>12} {:>8}  ERROR",
        "TOPOLOGY", "STATE", "LAST COMMITTED", "BATCHES", "TUPLES/S", "REPLAYS"
    );
    for row in rows {
        println!(
            "{:<24} {:<8} {:>14} {:>10} {:>12.0} {:>8}  {}",
            row["name"].as_str().unwrap_or("?"),
            row["state"].as_str().unwrap_or("?"),
            row["last_committed"],
            row["batches"],
            row["tuples_per_s"].as_f64().unwrap_or(0.0),
            row["replays"],
            row["error"].as_str().unwrap_or("")
        );
    }
    Ok(())
}

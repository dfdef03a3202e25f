//! What the verbs that talk to a `weir serve` share: the server's address,
//! the token, one HTTP request (path segments and query values escaped),
//! and how answers are printed.

use anyhow::{Context, Result, bail};
use clap::Args;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use std::time::Duration;
use ureq::RequestBuilder;
use ureq::typestate::WithBody;

/// Where the server is, and how to print its answers.
#[derive(Args, Debug, Clone)]
pub struct ServerArgs {
    /// The server's address. The token comes from WEIR_TOKEN.
    #[arg(long, env = "WEIR_SERVER", hide_env_values = true, default_value = "http://127.0.0.1:7878")]
    server: String,
    /// Print the server's JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// A request's method, with the body it sends.
#[derive(Clone, Copy, Debug)]
pub enum Method<'a> {
    Get,
    Delete,
    Post(&'a [u8]),
    Put(&'a [u8]),
}

/// Everything but RFC 3986's unreserved characters is escaped in a path
/// segment: a name with `/`, `?`, `#` or `%` reaches the server as itself.
/// (ureq escapes query values, `&` and `+` among them.)
const ESCAPED: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// The longest answer read from a server.
const MAX_ANSWER: u64 = 1 << 30;

/// `segments` as a URL path, escaped.
fn url_path(segments: &[&str]) -> String {
    segments.iter().map(|s| format!("/{}", utf8_percent_encode(s, ESCAPED))).collect()
}

/// `request` with `query` and the token from WEIR_TOKEN, if set.
fn prepared<B>(request: RequestBuilder<B>, query: &[(&str, &str)]) -> RequestBuilder<B> {
    let request = request.query_pairs(query.iter().copied());
    match std::env::var("WEIR_TOKEN") {
        Ok(token) => request.header("Authorization", format!("Bearer {}", token.trim())),
        Err(_) => request,
    }
}

/// Sends `request` with `body`, as raw bytes.
fn send(request: RequestBuilder<WithBody>, body: &[u8]) -> Result<ureq::http::Response<ureq::Body>, ureq::Error> {
    if body.is_empty() { request.send_empty() } else { request.content_type("application/octet-stream").send(body) }
}

impl ServerArgs {
    /// The server at `url`.
    pub fn at(url: &str) -> ServerArgs {
        ServerArgs { server: url.to_owned(), json: false }
    }

    fn base(&self) -> Result<&str> {
        let url = &self.server;
        if !url.starts_with("http://") {
            bail!("--server {url}: only http:// addresses are supported")
        }
        Ok(url.trim_end_matches('/'))
    }

    /// Sends one request to the path of `segments` with `query`, and
    /// returns the server's JSON; a non-2xx answer is an error quoting the
    /// server.
    pub fn call(&self, method: Method, segments: &[&str], query: &[(&str, &str)]) -> Result<serde_json::Value> {
        let base = self.base()?;
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(600)))
            .max_redirects(0)
            .proxy(None)
            .build()
            .into();
        let url = format!("{base}{}", url_path(segments));
        let sent = match method {
            Method::Get => prepared(agent.get(&url), query).call(),
            Method::Delete => prepared(agent.delete(&url), query).call(),
            Method::Post(body) => send(prepared(agent.post(&url), query), body),
            Method::Put(body) => send(prepared(agent.put(&url), query), body),
        };
        let mut response = sent.with_context(|| format!("cannot reach weir serve at {base}"))?;
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .with_config()
            .limit(MAX_ANSWER)
            .read_to_string()
            .with_context(|| format!("reading the answer of weir serve at {base}"))?;
        let answer = if text.trim().is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or_else(|_| text.into())
        };
        if !(200..300).contains(&status) {
            let reason = answer["error"].as_str().map(str::to_owned).unwrap_or_else(|| answer.to_string());
            bail!("the server answered {status}: {reason}");
        }
        Ok(answer)
    }
}

/// A served topology, by name, and its server: what `weir status`, `weir
/// stop` and `weir resume` take.
#[derive(Args, Debug)]
pub struct TopologyArgs {
    /// The topology.
    name: String,
    #[command(flatten)]
    server: ServerArgs,
}

impl TopologyArgs {
    /// Sends `method` to the topology's path, with the segments of `action`
    /// after its name, and prints the statuses the server answers.
    pub fn call_and_print(&self, method: Method, action: &[&str]) -> Result<()> {
        let path = [&["v1", "topologies", self.name.as_str()], action].concat();
        let answer = self.server.call(method, &path, &[])?;
        print_statuses(&self.server, &answer)
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
        "{:<24} {:<24} {:<8} {:>14} {:>10} {:>12} {:>8}  ERROR",
        "NAME", "TOPOLOGY", "STATE", "LAST COMMITTED", "BATCHES", "TUPLES/S", "REPLAYS"
    );
    for row in rows {
        println!(
            "{:<24} {:<24} {:<8} {:>14} {:>10} {:>12.0} {:>8}  {}",
            row["name"].as_str().unwrap_or("?"),
            row["topology"].as_str().unwrap_or("?"),
            row["state"].as_str().unwrap_or("?"),
            row["last_committed"],
            row["batches"],
            row["tuples_per_s"].as_f64().unwrap_or(0.0),
            row["replays"],
            row["error"].as_str().unwrap_or("")
        );
        print_cluster_shares(row);
    }
    Ok(())
}

/// A cluster topology's assignment and each host's share, under its row.
pub fn print_cluster_shares(row: &serde_json::Value) {
    {
        if let Some(cluster) = row["cluster"].as_object() {
            println!(
                "  across the cluster: assignment epoch {} ({}); bundle on this host: {}{}",
                cluster.get("epoch").unwrap_or(&serde_json::Value::Null),
                cluster.get("reason").and_then(|r| r.as_str()).unwrap_or("not assigned yet"),
                cluster.get("bundle_on_this_host").and_then(|r| r.as_str()).unwrap_or("?"),
                cluster
                    .get("last_failure")
                    .and_then(|f| f.as_str())
                    .map_or(String::new(), |f| format!("; last replayed because: {f}"))
            );
            for (host, units) in cluster.get("hosts").and_then(|h| h.as_object()).into_iter().flatten() {
                let partitions: Vec<&str> =
                    units["partitions"].as_array().into_iter().flatten().filter_map(|p| p.as_str()).collect();
                println!(
                    "    {host:<30} {:>4} slots  {:>10.0} tuples/s  committed to txid {}  partitions: {}",
                    units["slots"],
                    units["tuples_per_s"].as_f64().unwrap_or(0.0),
                    units["last_committed"],
                    partitions.join(" ")
                );
            }
        }
    }
}

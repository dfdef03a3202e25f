//! What the verbs that talk to a `weir serve` share: the server's address,
//! the token, one HTTP request (path segments and query values escaped),
//! and how answers are printed.

use anyhow::{Context, Result, bail};
use clap::Args;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
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

/// Everything but RFC 3986's unreserved characters is escaped, in a path
/// segment and in a query value alike: a name with `/`, `?`, `#`, `%`, `&`
/// or `+` reaches the server as itself.
const ESCAPED: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// The longest answer read from a server.
const MAX_ANSWER: u64 = 1 << 30;

/// `segments` as a URL path and `query` as its query string, escaped.
pub fn url_path(segments: &[&str], query: &[(&str, &str)]) -> String {
    let mut path: String = segments.iter().map(|s| format!("/{}", utf8_percent_encode(s, ESCAPED))).collect();
    for (i, (key, value)) in query.iter().enumerate() {
        path.push(if i == 0 { '?' } else { '&' });
        path.push_str(&format!("{}={}", utf8_percent_encode(key, ESCAPED), utf8_percent_encode(value, ESCAPED)));
    }
    path
}

impl ServerArgs {
    /// The server at `url`.
    pub fn at(url: &str) -> ServerArgs {
        ServerArgs { server: Some(url.to_owned()), json: false }
    }

    fn base(&self) -> Result<String> {
        let url = self
            .server
            .clone()
            .or_else(|| std::env::var("WEIR_SERVER").ok())
            .unwrap_or_else(|| "http://127.0.0.1:7878".to_owned());
        if !url.starts_with("http://") {
            bail!("--server {url}: only http:// addresses are supported")
        }
        Ok(url.trim_end_matches('/').to_owned())
    }

    /// Sends one request to the path of `segments` with `query`, and
    /// returns the server's JSON; a non-2xx answer is an error quoting the
    /// server.
    pub fn call(
        &self,
        method: &str,
        segments: &[&str],
        query: &[(&str, &str)],
        body: &[u8],
    ) -> Result<serde_json::Value> {
        let base = self.base()?;
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(600)))
            .max_redirects(0)
            .proxy(None)
            .build()
            .into();
        let mut request =
            ureq::http::Request::builder().method(method).uri(format!("{base}{}", url_path(segments, query)));
        if let Ok(token) = std::env::var("WEIR_TOKEN") {
            request = request.header("Authorization", format!("Bearer {}", token.trim()));
        }
        let sent = if body.is_empty() {
            agent.run(request.body(())?)
        } else {
            agent.run(request.header("Content-Type", "application/octet-stream").body(body)?)
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
    Ok(())
}

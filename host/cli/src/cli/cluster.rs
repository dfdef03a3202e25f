//! The flags that put `weir serve` in a cluster, and `weir cluster`: the
//! members and the leader, as one host sees them.

use super::client::{Method, ServerArgs};
use anyhow::{Context, Result};
use clap::Args;
use std::time::Duration;
use weir_cluster::catalog::AssignmentRecord;
use weir_cluster::{ClusterConfig, check_name};

#[derive(Args, Debug)]
#[command(next_help_heading = "Cluster")]
pub struct ClusterArgs {
    /// Join the cluster of this name: every host started with the same
    /// name and etcd forms one (see docs/cluster.md).
    #[arg(long, value_name = "NAME", requires = "etcd")]
    pub cluster: Option<String>,
    /// etcd's client URLs, comma-separated (http://HOST:PORT).
    #[arg(long, value_name = "URL", value_delimiter = ',')]
    pub etcd: Vec<String>,
    /// This host's id in the cluster [default: this machine's name and the
    /// port listened on].
    #[arg(long, value_name = "ID")]
    pub host_id: Option<String>,
    /// The URL the other hosts and clients reach this host's API at
    /// [default: http:// and the address listened on].
    #[arg(long, value_name = "URL")]
    pub advertise: Option<String>,
    /// How long a host stays a member without reaching etcd, in
    /// milliseconds (whole seconds, at least one): a host paused or cut off
    /// longer loses its membership.
    #[arg(long, value_name = "MS", default_value_t = 5000)]
    pub lease_ttl_ms: u64,
    /// Txids between two snapshots of a slot in its topology's changelog:
    /// fewer make a slot's rebuild read less, more make commits write less.
    #[arg(long, value_name = "TXIDS", default_value_t = weir_cluster::changelog::DEFAULT_SNAPSHOT_EVERY,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub snapshot_every: u64,
}

impl ClusterArgs {
    /// The cluster this server joins, if any.
    pub fn config(&self) -> Result<Option<ClusterConfig>> {
        let Some(name) = &self.cluster else { return Ok(None) };
        check_name("cluster name", name)?;
        if let Some(id) = &self.host_id {
            check_name("host id (--host-id)", id)?;
        }
        for url in &self.etcd {
            anyhow::ensure!(url.starts_with("http://"), "--etcd {url:?}: give http://HOST:PORT");
        }
        Ok(Some(ClusterConfig {
            name: name.clone(),
            etcd: self.etcd.clone(),
            host: self.host_id.clone().unwrap_or_default(),
            api: self.advertise.clone().unwrap_or_default(),
            lease_ttl: Duration::from_millis(self.lease_ttl_ms),
            snapshot_every: self.snapshot_every,
        }))
    }
}

#[derive(Args, Debug)]
pub struct ClusterViewArgs {
    #[command(flatten)]
    server: ServerArgs,
}

pub fn run(args: ClusterViewArgs) -> Result<()> {
    let view = args.server.call(Method::Get, &["v1", "cluster"], &[])?;
    if args.server.json {
        println!("{}", serde_json::to_string_pretty(&view)?);
        return Ok(());
    }
    let leader = view["leader"].as_str();
    println!(
        "cluster {}, seen from host {}",
        view["cluster"].as_str().unwrap_or("?"),
        view["host"].as_str().unwrap_or("?")
    );
    if let Some(error) = view["error"].as_str() {
        println!("this host is not a member now: {error}");
    }
    println!("{:<32} {:<8} API", "HOST", "ROLE");
    for member in view["hosts"].as_array().context("the server's answer has no hosts")? {
        let id = member["id"].as_str().unwrap_or("?");
        let role = if Some(id) == leader { "leader" } else { "member" };
        println!("{id:<32} {role:<8} {}", member["api"].as_str().unwrap_or("?"));
    }
    let topologies = view["topologies"].as_object().into_iter().flatten();
    for (name, topology) in topologies {
        print_assignment(name, topology);
    }
    Ok(())
}

/// Which host owns which of a topology's units.
fn print_assignment(name: &str, topology: &serde_json::Value) {
    let record = match serde_json::from_value::<Option<AssignmentRecord>>(topology["assignment"].clone()) {
        Ok(Some(record)) => record,
        Ok(None) => return println!("\ntopology {name}: not assigned yet"),
        Err(e) => return println!("\ntopology {name}: its assignment cannot be read: {e}"),
    };
    println!("\ntopology {name}, assignment epoch {} ({})", record.assignment.epoch, record.reason);
    println!("  {:<30} {:>6}  PARTITIONS", "HOST", "SLOTS");
    for (host, share) in record.assignment.shares() {
        println!("  {host:<30} {:>6}  {}", share.slots, share.partitions.join(" "));
    }
}

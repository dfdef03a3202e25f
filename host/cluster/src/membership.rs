//! A host's membership of a cluster, in etcd: registered under a lease that
//! it keeps alive, campaigning to lead, and its view of the members and the
//! leader. A host that loses its lease (paused, cut off) holds nothing from
//! then on: it rejoins under a new lease as a new member.

use super::catalog::{self, ClusterTopology};
use super::leader;
use anyhow::{Context, Result, bail};
use etcd_client::{Client, Compare, CompareOp, ConnectOptions, GetOptions, LeaderKey, PutOptions, Txn, TxnOp};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use weir_config::backoff::Backoff;

/// How a host takes part in a cluster.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    /// The cluster's name: the hosts that give the same one form it.
    pub name: String,
    /// etcd's client URLs.
    pub etcd: Vec<String>,
    /// This host's id, unique in the cluster; empty: this machine's name and
    /// the port the server listens on.
    pub host: String,
    /// The URL other hosts and clients reach this host's API at; empty:
    /// http:// and the address the server listens on.
    pub api: String,
    /// How long the host stays a member without reaching etcd.
    pub lease_ttl: Duration,
    /// Txids between two snapshots of a slot in the changelog.
    pub snapshot_every: u64,
}

/// A member, as it registered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub id: String,
    pub api: String,
    pub joined_unix_ms: u64,
}

/// What this host knows of its cluster, as of its last keepalive.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ClusterView {
    pub cluster: String,
    pub host: String,
    /// Whether this host holds a live lease now.
    pub member: bool,
    pub leader: Option<String>,
    /// The live members, by id.
    pub hosts: Vec<Member>,
    /// Why this host is not a member, while it is not.
    pub error: Option<String>,
    /// The cluster's topologies, with their assignments.
    pub topologies: BTreeMap<String, ClusterTopology>,
    /// This host's election key while it leads: what the leader's etcd
    /// writes compare.
    #[serde(skip)]
    pub leader_key: Option<LeaderKey>,
    /// Whether the cluster's topologies were read since this host started.
    #[serde(skip)]
    pub topologies_read: bool,
    /// The last membership and assignment changes this host saw, oldest
    /// first, with their reasons.
    pub changes: super::changes::Changes,
}

/// A host's membership, kept up on the server's runtime.
pub struct Membership {
    config: ClusterConfig,
    view: Arc<Mutex<ClusterView>>,
    /// The etcd client and lease of the present membership, to leave with.
    lease: Arc<Mutex<Option<(Client, i64)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl ClusterConfig {
    /// Fills in the host id and API URL left empty, from the address the
    /// server listens at.
    pub fn listening_at(mut self, address: SocketAddr) -> ClusterConfig {
        if self.host.is_empty() {
            let machine = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
            let machine: String = machine
                .trim()
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '-' })
                .take(48)
                .collect();
            let machine = if machine.is_empty() { "host".to_owned() } else { machine };
            self.host = format!("{machine}-{}", address.port());
        }
        if self.api.is_empty() {
            self.api = format!("http://{address}");
        }
        self
    }
}

impl Membership {
    /// Joins the cluster on `runtime`, and keeps rejoining after any loss.
    pub fn start(config: ClusterConfig, runtime: &tokio::runtime::Handle) -> Membership {
        let view = Arc::new(Mutex::new(ClusterView {
            cluster: config.name.clone(),
            host: config.host.clone(),
            error: Some("joining".into()),
            ..ClusterView::default()
        }));
        let lease = Arc::default();
        let task = runtime.spawn(keep_joined(config.clone(), Arc::clone(&view), Arc::clone(&lease)));
        Membership { config, view, lease, task }
    }

    pub fn view(&self) -> ClusterView {
        self.view.lock().expect("cluster view").clone()
    }

    /// Topology `name` of the cluster, as of the last keepalive.
    pub fn topology(&self, name: &str) -> Option<ClusterTopology> {
        self.view.lock().expect("cluster view").topologies.get(name).cloned()
    }

    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    /// Leaves the cluster at once, revoking the lease, so that the others
    /// see this host go now rather than when its lease would end.
    pub async fn leave(&self) {
        self.task.abort();
        let held = self.lease.lock().expect("cluster lease").take();
        if let Some((mut client, lease)) = held {
            match tokio::time::timeout(Duration::from_secs(1), client.lease_revoke(lease)).await {
                Ok(Ok(_)) => tracing::info!("host {} left cluster {}", self.config.host, self.config.name),
                _ => tracing::warn!(
                    "host {} could not tell etcd it leaves cluster {}: the others see it go when its lease ends",
                    self.config.host,
                    self.config.name
                ),
            }
        }
    }

    /// A client of the cluster's etcd.
    pub async fn etcd(&self) -> Result<Client> {
        connect(&self.config).await
    }
}

/// How long a host stays a member without reaching etcd: whole seconds, at
/// least one, as etcd grants leases.
fn lease_ttl(config: &ClusterConfig) -> Duration {
    Duration::from_secs(config.lease_ttl.as_secs().max(1))
}

pub(crate) async fn connect(config: &ClusterConfig) -> Result<Client> {
    let ttl = lease_ttl(config);
    let options = ConnectOptions::new().with_connect_timeout(ttl).with_timeout(ttl);
    Client::connect(&config.etcd, Some(options))
        .await
        .with_context(|| format!("etcd at {} cannot be reached", config.etcd.join(",")))
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Checks a cluster name or host id: it becomes part of etcd keys.
pub fn check_name(what: &str, name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && !name.starts_with('.');
    if !ok {
        bail!("{what} {name:?}: use 1 to 64 letters, digits, '-', '_' or '.', not starting with '.'");
    }
    Ok(())
}

fn prefix(config: &ClusterConfig) -> String {
    format!("/weir/{}/", config.name)
}

async fn keep_joined(config: ClusterConfig, view: Arc<Mutex<ClusterView>>, lease: Arc<Mutex<Option<(Client, i64)>>>) {
    let mut backoff = Backoff::new(Duration::from_millis(100), lease_ttl(&config));
    loop {
        let Err(e) = session(&config, &view, &lease).await;
        let reason = format!("{e:#}");
        tracing::warn!("host {} of cluster {} is not a member: {reason}; rejoining", config.host, config.name);
        {
            let mut view = view.lock().expect("cluster view");
            view.member = false;
            view.leader = None;
            view.leader_key = None;
            let lost = format!("host {} is not a member", config.host);
            view.changes.push(lost, reason.clone());
            view.error = Some(reason);
        }
        tokio::time::sleep(backoff.next_wait()).await;
    }
}

/// One membership: a lease, its registration and campaign, kept alive until
/// something fails.
async fn session(
    config: &ClusterConfig,
    view: &Mutex<ClusterView>,
    held: &Mutex<Option<(Client, i64)>>,
) -> Result<std::convert::Infallible> {
    let ttl = lease_ttl(config);
    let mut client = connect(config).await?;
    let lease = client
        .lease_grant(ttl.as_secs() as i64, None)
        .await
        .with_context(|| format!("etcd at {} granted no lease", config.etcd.join(",")))?
        .id();
    *held.lock().expect("cluster lease") = Some((client.clone(), lease));
    register(&mut client, config, lease, ttl).await?;
    let mut keepalive = Some(client.lease_keep_alive(lease).await?);
    let election = format!("{}leader", prefix(config));
    let mut campaign = AbortOnDrop(campaign_after(config, &election, lease, ttl, Duration::ZERO));
    let mut leading: Option<LeaderKey> = None;
    tracing::info!("host {} joined cluster {} (lease {lease:x}, {} s)", config.host, config.name, ttl.as_secs());
    let mut tick = tokio::time::interval(ttl / 3);
    // Until when etcd keeps the lease, as of its last answer.
    let mut alive_until = tokio::time::Instant::now() + ttl;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            // A campaign ends when this host leads, for as long as its lease lives.
            won = &mut campaign.0, if leading.is_none() => {
                match won {
                    Ok(Ok(won)) => {
                        leading = Some(won.leader().cloned().context("etcd's answer to the campaign names no leader key")?);
                        tracing::info!("host {} leads cluster {}", config.host, config.name);
                    }
                    // etcd restarted or out of reach: campaigning again, under
                    // the same lease, takes the same place in the election.
                    Ok(Err(e)) => {
                        tracing::debug!("host {}: campaigning again: {e}", config.host);
                        campaign = AbortOnDrop(campaign_after(config, &election, lease, ttl, ttl / 4));
                    }
                    Err(e) => bail!("its campaign to lead stopped: {e}"),
                }
            }
        }
        // Whatever fails short of etcd saying the lease is gone is tried
        // again at the next tick: an etcd restarted within the lease keeps
        // this membership, its epochs and its leadership.
        let sent = tokio::time::Instant::now();
        let kept = keep_alive(&mut client, lease, &mut keepalive, ttl).await;
        let outcome = match kept {
            Ok(Some(left)) => {
                alive_until = sent + left;
                round(&mut client, config, &election, view, leading.as_ref()).await
            }
            Ok(None) => bail!("its lease expired (etcd heard nothing from it for {} s)", ttl.as_secs()),
            Err(e) => Err(e),
        };
        if let Err(e) = outcome {
            let mut view = view.lock().expect("cluster view");
            if tokio::time::Instant::now() >= alive_until {
                // Past its lease's time without a word from etcd: this host
                // may have been dropped; it holds nothing until etcd answers.
                if view.member {
                    tracing::warn!(
                        "host {} of cluster {} has not reached etcd for its lease's time: {e:#}; still trying",
                        config.host,
                        config.name
                    );
                }
                view.member = false;
                view.leader_key = None;
                view.error = Some(format!("etcd not reached for the lease's time: {e:#}"));
            } else {
                tracing::debug!("host {}: etcd did not answer ({e:#}); trying again within the lease", config.host);
            }
            continue;
        }
        view.lock().expect("cluster view").leader_key = leading.clone();
    }
}

/// The lease's keepalive, the stream opened again if it broke: the
/// lease's time left, `None` when etcd no longer has it.
async fn keep_alive(
    client: &mut Client,
    lease: i64,
    keepalive: &mut Option<(etcd_client::LeaseKeeper, etcd_client::LeaseKeepAliveStream)>,
    ttl: Duration,
) -> Result<Option<Duration>> {
    let answered = async {
        if keepalive.is_none() {
            *keepalive = Some(client.lease_keep_alive(lease).await?);
        }
        let (keeper, acks) = keepalive.as_mut().expect("opened");
        keeper.keep_alive().await.context("the lease's keepalive failed")?;
        let ack = tokio::time::timeout(ttl, acks.message())
            .await
            .context("etcd did not answer the keepalive")??
            .context("etcd closed the keepalive stream")?;
        anyhow::Ok(ack.ttl())
    }
    .await;
    match answered {
        Ok(left) if left <= 0 => Ok(None),
        Ok(left) => Ok(Some(Duration::from_secs(left as u64))),
        Err(e) => {
            *keepalive = None;
            Err(e)
        }
    }
}

/// One round of a live membership: the members, the leader and the
/// topologies read into `view`, and the topologies reassigned while this
/// host leads.
async fn round(
    client: &mut Client,
    config: &ClusterConfig,
    election: &str,
    view: &Mutex<ClusterView>,
    leading: Option<&LeaderKey>,
) -> Result<()> {
    let hosts = refresh(client, config, election, view).await?;
    let mut topologies = catalog::list(client, &config.name).await?;
    if let Some(leader) = leading {
        leader::reassign(client, &config.name, leader, &hosts, &mut topologies).await?;
    }
    let mut view = view.lock().expect("cluster view");
    log_own_changes(config, &view.topologies, &topologies);
    let view = &mut *view;
    view.changes.of_topologies(&view.topologies, &topologies);
    view.topologies = topologies;
    view.topologies_read = true;
    Ok(())
}

type Campaign = tokio::task::JoinHandle<Result<etcd_client::CampaignResponse, etcd_client::Error>>;

/// A campaign to lead under `lease`, after `delay`. It waits for as long
/// as another host leads: on a client of its own, without the request
/// timeout, which would end it after a lease's time.
fn campaign_after(config: &ClusterConfig, election: &str, lease: i64, ttl: Duration, delay: Duration) -> Campaign {
    let (etcd, host, election) = (config.etcd.clone(), config.host.clone(), election.to_owned());
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        let mut campaigner = Client::connect(&etcd, Some(ConnectOptions::new().with_connect_timeout(ttl))).await?;
        campaigner.campaign(election, host, lease).await
    })
}

/// Logs the units this host gained and lost between two readings of the
/// cluster's topologies, with the leader's reason.
fn log_own_changes(
    config: &ClusterConfig,
    was: &BTreeMap<String, ClusterTopology>,
    now: &BTreeMap<String, ClusterTopology>,
) {
    let own = |topology: Option<&ClusterTopology>| -> std::collections::BTreeSet<String> {
        let assignment = topology.and_then(|t| t.assignment.as_ref());
        assignment.map(|r| r.assignment.of(&config.host).map(str::to_owned).collect()).unwrap_or_default()
    };
    let names: std::collections::BTreeSet<&String> = was.keys().chain(now.keys()).collect();
    for name in names {
        let (before, after) = (own(was.get(name)), own(now.get(name)));
        if before == after {
            continue;
        }
        let record = now.get(name).and_then(|t| t.assignment.as_ref());
        let (epoch, reason) = match record {
            Some(r) => (r.assignment.epoch, r.reason.as_str()),
            None => (0, "topology deleted"),
        };
        let gained: Vec<&String> = after.difference(&before).collect();
        let lost: Vec<&String> = before.difference(&after).collect();
        tracing::info!(
            "cluster {}: host {}, topology {name} at epoch {epoch} ({reason}): gained {} units {}, lost {} units {}",
            config.name,
            config.host,
            gained.len(),
            shorten(&gained),
            lost.len(),
            shorten(&lost)
        );
    }
}

/// At most a few units' names, for a log line.
fn shorten(units: &[&String]) -> String {
    const SHOWN: usize = 6;
    let mut text: Vec<&str> = units.iter().take(SHOWN).map(|u| u.as_str()).collect();
    let more = format!("and {} more", units.len().saturating_sub(SHOWN));
    if units.len() > SHOWN {
        text.push(&more);
    }
    format!("[{}]", text.join(", "))
}

/// Writes this host's registration under `lease`, waiting out a registration
/// under the same id that a killed process left, for as long as its lease
/// can last.
async fn register(client: &mut Client, config: &ClusterConfig, lease: i64, ttl: Duration) -> Result<()> {
    let key = format!("{}hosts/{}", prefix(config), config.host);
    let joined_unix_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    let member = Member { id: config.host.clone(), api: config.api.clone(), joined_unix_ms };
    let value = serde_json::to_vec(&member)?;
    let deadline = tokio::time::Instant::now() + ttl * 2;
    loop {
        let txn = Txn::new()
            .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.as_str(), value.clone(), Some(PutOptions::new().with_lease(lease)))]);
        if client.txn(txn).await?.succeeded() {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "host id {} is already a member of cluster {} under a live lease: give each host its own --host-id",
                config.host,
                config.name
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Reads the members and the leader into `view`, logging what changed;
/// returns the members' ids.
async fn refresh(
    client: &mut Client,
    config: &ClusterConfig,
    election: &str,
    view: &Mutex<ClusterView>,
) -> Result<Vec<String>> {
    let hosts_prefix = format!("{}hosts/", prefix(config));
    let listed = client.get(hosts_prefix.as_str(), Some(GetOptions::new().with_prefix())).await?;
    let mut hosts = Vec::new();
    for kv in listed.kvs() {
        match serde_json::from_slice::<Member>(kv.value()) {
            Ok(member) => hosts.push(member),
            Err(e) => {
                tracing::warn!("cluster {}: a registration at {:?} is not a member: {e}", config.name, kv.key_str())
            }
        }
    }
    hosts.sort_by(|a, b| a.id.cmp(&b.id));
    let leader = match client.leader(election).await {
        Ok(answer) => answer.kv().and_then(|kv| kv.value_str().ok()).map(str::to_owned),
        Err(e) if e.to_string().contains("no leader") => None,
        Err(e) => return Err(e).context("reading the leader"),
    };
    let mut view = view.lock().expect("cluster view");
    let was: Vec<&str> = view.hosts.iter().map(|m| m.id.as_str()).collect();
    let now: Vec<&str> = hosts.iter().map(|m| m.id.as_str()).collect();
    for id in now.iter().filter(|id| !was.contains(id)) {
        tracing::info!("cluster {}: host {id} is a member", config.name);
    }
    for id in was.iter().filter(|id| !now.contains(id)) {
        tracing::info!("cluster {}: host {id} left (its lease ended)", config.name);
    }
    if view.leader != leader {
        tracing::info!("cluster {}: the leader is {}", config.name, leader.as_deref().unwrap_or("no host"));
    }
    let view = &mut *view;
    let first = view.hosts.is_empty() && view.changes.iter().next().is_none();
    let was: Vec<(&str, u64)> = view.hosts.iter().map(|m| (m.id.as_str(), m.joined_unix_ms)).collect();
    let now: Vec<(&str, u64)> = hosts.iter().map(|m| (m.id.as_str(), m.joined_unix_ms)).collect();
    view.changes.of_members((&was, view.leader.as_deref()), (&now, leader.as_deref()), first);
    let ids = hosts.iter().map(|m| m.id.clone()).collect();
    view.hosts = hosts;
    view.leader = leader;
    view.member = true;
    view.error = None;
    Ok(ids)
}

/// A campaign, stopped when the membership it belongs to ends.
struct AbortOnDrop(Campaign);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

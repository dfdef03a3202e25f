//! A server in a cluster: a deploy goes to the cluster (the bundle into
//! JetStream's object store, the deployment into etcd), any host lists and
//! shows the cluster's topologies with their assignment, and every host
//! loads each bundle the cluster holds.

use super::deployments::{DeployError, DeployRequest};
use super::{App, Shared};
use crate::cluster::catalog::{self, ClusterDeployment, ClusterTopology, DEFAULT_SLOTS};
use crate::cluster::changelog::Changelog;
use crate::cluster::{Membership, bundles};
use crate::nats::Nats;
use anyhow::Context;
use etcd_client::Client;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use weir_sdk::topology::{SpoutDef, TopologyDef};

/// How each cluster bundle fared on this host, by the bundle's digest.
pub type Loaded = std::sync::Mutex<BTreeMap<String, Result<(), String>>>;

const NO_NATS: &str = "this host was started without --nats: a cluster keeps its bundles in JetStream";

fn nats(app: &App) -> anyhow::Result<Nats> {
    Nats::connect(app.host.nats.as_ref().context(NO_NATS)?, "weir cluster bundles")
}

/// A JetStream spout's partitions, its wildcards expanded from its stream's
/// subjects; `None` where they depend on which subjects hold messages, for
/// a stream not made yet or out of reach (its subject patterns are its
/// units then), and for other spouts.
fn partitions(app: &App, definition: &TopologyDef) -> Option<Vec<String>> {
    let (Some(SpoutDef::JetStream(stream)), Some(nats)) = (definition.spout(), app.host.nats.as_ref()) else {
        return None;
    };
    crate::spout::jetstream::fixed_partitions(stream, &definition.name, nats).unwrap_or_else(|e| {
        tracing::warn!("topology {}: its subject patterns are its partitions for now: {e:#}", definition.name);
        None
    })
}

/// Runs `work` with a client of the cluster's etcd, from a thread off the
/// async runtime.
fn in_etcd<T>(membership: &Membership, work: impl AsyncFnOnce(&mut Client) -> anyhow::Result<T>) -> anyhow::Result<T> {
    tokio::runtime::Handle::current().block_on(async {
        let mut client = membership.etcd().await?;
        work(&mut client).await
    })
}

/// Deploys an upload to the cluster; runs off the async runtime.
pub fn deploy(app: &App, membership: &Membership, request: DeployRequest, bytes: &[u8]) -> Result<Value, DeployError> {
    let config = membership.config();
    if app.host.nats.is_none() {
        return Err(DeployError::BadRequest(NO_NATS.into()));
    }
    let (name, definition) = app.deployments.check_upload(&request, bytes)?;
    let taken = || {
        DeployError::Conflict(format!(
            "topology {name} is deployed to cluster {} already: delete it, or deploy under another ?name=",
            config.name
        ))
    };
    // Checked before the bundle is stored, so that a refused deploy leaves
    // nothing behind but in a race; the record's creation decides.
    if membership.topology(&name).is_some() {
        return Err(taken());
    }
    let partitions = partitions(app, &definition);
    let nats = nats(app)?;
    let digest = nats.runtime.block_on(bundles::put(&nats.jetstream, bytes))?;
    let deployment = ClusterDeployment {
        topology: definition.name.clone(),
        bundle: digest,
        bundle_bytes: bytes.len() as u64,
        input: request.input,
        slots: DEFAULT_SLOTS,
        states: crate::load::state_kinds(&definition),
        running: true,
        units: catalog::units(&definition, partitions.as_deref(), DEFAULT_SLOTS),
        deployed_by: config.host.clone(),
        deployed_unix_ms: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64),
    };
    let created = in_etcd(membership, async |client| catalog::create(client, &config.name, &name, &deployment).await)?;
    if !created {
        return Err(taken());
    }
    tracing::info!("topology {name} deployed to cluster {} from host {}", config.name, config.host);
    let topology = ClusterTopology { deployment, assignment: None, assignment_revision: 0 };
    Ok(status(app, &name, &topology))
}

fn not_in_cluster(membership: &Membership, name: &str) -> DeployError {
    DeployError::NotFound(format!("no topology {name} is deployed to cluster {}", membership.config().name))
}

/// Sets whether topology `name` of the cluster should run.
pub fn set_running(app: &App, membership: &Membership, name: &str, running: bool) -> Result<Value, DeployError> {
    let config = membership.config();
    let written =
        in_etcd(membership, async |client| catalog::update(client, &config.name, name, |d| d.running = running).await)?;
    let deployment = written.ok_or_else(|| not_in_cluster(membership, name))?;
    let verb = if running { "resumed" } else { "stopped" };
    tracing::info!("topology {name} {verb} across cluster {}", config.name);
    Ok(status_of_record(app, membership, name, deployment))
}

/// Upgrades topology `name` of the cluster to the bundle `bytes`: the same
/// topology, with the same states, checked here as a deploy is; the
/// cluster's hosts load it, and the old bundle goes when no topology uses it.
pub fn upgrade(app: &App, membership: &Membership, name: &str, bytes: &[u8]) -> Result<Value, DeployError> {
    let config = membership.config();
    let old = membership.topology(name).ok_or_else(|| not_in_cluster(membership, name))?.deployment;
    let request =
        DeployRequest { name: Some(name.to_owned()), topology: Some(old.topology.clone()), input: old.input.clone() };
    let (_, definition) = app.deployments.check_upload(&request, bytes)?;
    let states = crate::load::state_kinds(&definition);
    if !old.states.is_empty() && old.states != states {
        return Err(DeployError::BadRequest(format!(
            "the upgrade changes topology {name}'s states ({:?} -> {states:?}); deploy it under a new name instead",
            old.states
        )));
    }
    let nats = nats(app)?;
    let digest = nats.runtime.block_on(bundles::put(&nats.jetstream, bytes))?;
    let units = catalog::units(&definition, partitions(app, &definition).as_deref(), old.slots);
    let written = in_etcd(membership, async |client| {
        catalog::update(client, &config.name, name, |d| {
            d.bundle = digest.clone();
            d.bundle_bytes = bytes.len() as u64;
            d.states = states.clone();
            d.units = units.clone();
            d.running = true;
        })
        .await
    })?;
    let deployment = written.ok_or_else(|| not_in_cluster(membership, name))?;
    forget_bundle(&nats, membership, name, &old.bundle, &digest);
    tracing::info!("topology {name} of cluster {} upgraded to bundle {digest}", config.name);
    Ok(status_of_record(app, membership, name, deployment))
}

/// Removes bundle `digest`, which topology `name` no longer uses, unless
/// it is `kept` or another topology of the cluster uses it.
fn forget_bundle(nats: &Nats, membership: &Membership, name: &str, digest: &str, kept: &str) {
    let topologies = membership.view().topologies;
    let used = digest == kept || topologies.iter().any(|(other, t)| other != name && t.deployment.bundle == digest);
    if !used && let Err(e) = nats.runtime.block_on(bundles::remove(&nats.jetstream, digest)) {
        tracing::warn!("bundle {digest}, which topology {name} no longer uses, stays in JetStream: {e:#}");
    }
}

/// The status of topology `name` as `deployment` now records it, with the
/// assignment this host last read.
fn status_of_record(app: &App, membership: &Membership, name: &str, deployment: ClusterDeployment) -> Value {
    let assignment = membership.topology(name).and_then(|t| t.assignment);
    status(app, name, &ClusterTopology { deployment, assignment, assignment_revision: 0 })
}

/// Deletes topology `name` from the cluster, and its bundle when no other
/// topology of the cluster uses it.
pub fn delete(app: &App, membership: &Membership, name: &str) -> Result<(), DeployError> {
    let config = membership.config();
    let known = membership.topology(name);
    let removed = in_etcd(membership, async |client| catalog::remove(client, &config.name, name).await)?;
    if !removed {
        return Err(not_in_cluster(membership, name));
    }
    if let Some(gone) = known {
        let nats = nats(app)?;
        forget_bundle(&nats, membership, name, &gone.deployment.bundle, "");
    }
    tracing::info!("topology {name} deleted from cluster {}", config.name);
    Ok(())
}

/// A cluster topology's status, in the shape of a served one's, with
/// `cluster`: its bundle, assignment epoch and each host's units.
pub fn status(app: &App, name: &str, topology: &ClusterTopology) -> Value {
    let deployment = &topology.deployment;
    let shares = topology.assignment.as_ref().map(|r| r.assignment.shares()).unwrap_or_default();
    let hosts: BTreeMap<&str, Value> = shares
        .into_iter()
        .map(|(host, share)| (host, json!({ "partitions": share.partitions, "slots": share.slots })))
        .collect();
    let loaded = app.cluster_bundles.lock().unwrap_or_else(|e| e.into_inner()).get(&deployment.bundle).cloned();
    let loaded = match loaded {
        Some(Ok(())) => json!("loaded"),
        Some(Err(e)) => json!(e),
        None => json!("loading"),
    };
    json!({
        "name": name,
        "topology": deployment.topology,
        "state": if deployment.running { "assigned" } else { "stopped" },
        "error": Value::Null,
        "last_committed": 0,
        "batches": 0,
        "tuples_per_s": 0.0,
        "replays": 0,
        "cluster": {
            "bundle": deployment.bundle,
            "bundle_bytes": deployment.bundle_bytes,
            "slots": deployment.slots,
            "units": deployment.units.len(),
            "epoch": topology.assignment.as_ref().map(|r| r.assignment.epoch),
            "reason": topology.assignment.as_ref().map(|r| r.reason.as_str()),
            "hosts": hosts,
            "bundle_on_this_host": loaded,
        },
    })
}

/// Loads, on this host, every bundle the cluster's topologies name that it
/// has not loaded yet: fetched from JetStream, checked against its digest,
/// kept in the bundles directory and compiled. Runs for the server's life.
pub async fn load_bundles(app: Shared) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    for round in 0u64.. {
        tick.tick().await;
        let Some(membership) = app.cluster.get() else { continue };
        // A bundle that failed (NATS out of reach, say) is tried again every
        // ten rounds.
        let retry = round % 10 == 0;
        let wanted: Vec<(String, ClusterDeployment)> = {
            let done = app.cluster_bundles.lock().unwrap_or_else(|e| e.into_inner());
            let mut seen = BTreeSet::new();
            let topologies = membership.view().topologies;
            topologies
                .into_iter()
                .filter(|(_, t)| match done.get(&t.deployment.bundle) {
                    Some(Ok(())) => false,
                    Some(Err(_)) => retry,
                    None => true,
                })
                .filter(|(_, t)| seen.insert(t.deployment.bundle.clone()))
                .map(|(name, t)| (name, t.deployment))
                .collect()
        };
        for (name, deployment) in wanted {
            let outcome = tokio::task::spawn_blocking({
                let app = Arc::clone(&app);
                let deployment = deployment.clone();
                move || load_bundle(&app, &name, &deployment)
            })
            .await
            .unwrap_or_else(|e| Err(anyhow::anyhow!("{e}")));
            let outcome = outcome.map_err(|e| {
                let message = app.host.public(&format!("{e:#}"));
                tracing::error!("bundle {} of the cluster cannot be loaded on this host: {message}", deployment.bundle);
                message
            });
            app.cluster_bundles.lock().unwrap_or_else(|e| e.into_inner()).insert(deployment.bundle, outcome);
        }
    }
}

fn load_bundle(app: &App, name: &str, deployment: &ClusterDeployment) -> anyhow::Result<()> {
    let max = app.max_upload;
    let nats = nats(app)?;
    let bytes = nats.runtime.block_on(bundles::get(&nats.jetstream, &deployment.bundle, max))?;
    app.deployments
        .load_cluster_bundle(&bytes, &deployment.topology, name)
        .with_context(|| format!("topology {name}'s bundle {}", deployment.bundle))?;
    tracing::info!("topology {name}'s bundle {} is loaded on this host", deployment.bundle);
    Ok(())
}

/// A slot fence to publish: topology, state, slot, and the epoch at which
/// this host got the slot.
type SlotFence = (String, String, u32, u64);

/// Fences, in each topology's changelog, every slot this host owns, at the
/// epoch it got the slot: from then on, records that a former owner (one
/// paused past its lease, say) writes are passed over when the slot is
/// rebuilt. Runs for the server's life.
pub async fn fence_own_slots(app: Shared) {
    let mut fenced: BTreeSet<SlotFence> = BTreeSet::new();
    let mut connection: Option<Nats> = None;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        let Some(membership) = app.cluster.get() else { continue };
        let view = membership.view();
        if !view.member || app.host.nats.is_none() {
            continue;
        }
        let owned = own_slots(&view);
        fenced.retain(|fence| owned.contains(fence));
        let wanted: Vec<SlotFence> = owned.difference(&fenced).cloned().collect();
        if wanted.is_empty() {
            continue;
        }
        let (app, cluster, held) = (Arc::clone(&app), view.cluster.clone(), connection.take());
        let outcome = tokio::task::spawn_blocking(move || publish_fences(&app, &cluster, wanted, held)).await;
        if let Ok((done, held)) = outcome {
            fenced.extend(done);
            connection = held;
        }
    }
}

/// The slots this host owns in `view`, each with the epoch it got it at.
fn own_slots(view: &crate::cluster::ClusterView) -> BTreeSet<SlotFence> {
    let mut owned = BTreeSet::new();
    for (name, topology) in &view.topologies {
        let Some(record) = &topology.assignment else { continue };
        for (unit, owner) in &record.assignment.units {
            let slot = unit.strip_prefix("slot/").and_then(|u| u.rsplit_once('/'));
            if let (true, Some((state, slot))) = (owner.host == view.host, slot)
                && let Ok(slot) = slot.parse()
            {
                owned.insert((name.clone(), state.to_owned(), slot, owner.since));
            }
        }
    }
    owned
}

/// Publishes `wanted` fences through `held` (or a new connection); returns
/// those published, and the connection to keep.
fn publish_fences(
    app: &App,
    cluster: &str,
    wanted: Vec<SlotFence>,
    held: Option<Nats>,
) -> (Vec<SlotFence>, Option<Nats>) {
    let nats = match held.map_or_else(|| nats(app), Ok) {
        Ok(nats) => nats,
        Err(e) => {
            tracing::warn!("this host's slots are not fenced yet: {e:#}");
            return (Vec::new(), None);
        }
    };
    let done = nats.runtime.block_on(async {
        let mut done = Vec::new();
        let mut logs: BTreeMap<String, Changelog> = BTreeMap::new();
        for fence in wanted {
            let (name, state, slot, epoch) = &fence;
            if !logs.contains_key(name) {
                match Changelog::open(&nats.jetstream, cluster, name).await {
                    Ok(log) => logs.insert(name.clone(), log),
                    Err(e) => {
                        tracing::warn!("slots of topology {name} are not fenced yet: {e:#}");
                        break;
                    }
                };
            }
            match logs[name].fence(state, *slot, *epoch).await {
                Ok(_) => done.push(fence),
                Err(e) => {
                    tracing::warn!("slot {slot} of state {state} of topology {name} is not fenced yet: {e:#}");
                    break;
                }
            }
        }
        done
    });
    let mut counts: BTreeMap<(&str, u64), usize> = BTreeMap::new();
    for (name, _, _, epoch) in &done {
        *counts.entry((name.as_str(), *epoch)).or_default() += 1;
    }
    for ((name, epoch), count) in counts {
        tracing::info!("fenced {count} slots of topology {name} at epoch {epoch} in its changelog");
    }
    (done, Some(nats))
}

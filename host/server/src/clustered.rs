//! A server in a cluster: a deploy goes to the cluster (the bundle into
//! JetStream's object store, the deployment into etcd), any host lists and
//! shows the cluster's topologies with their assignment, and every host
//! loads each bundle the cluster holds.

use super::app::{App, Shared};
use super::deployments::{DeployError, DeployRequest, Loaded};
use anyhow::Context;
use etcd_client::Client;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use weir_cluster::catalog::{self, ClusterDeployment, ClusterTopology, DEFAULT_SLOTS};
use weir_cluster::changelog::Changelog;
use weir_cluster::coordinator::Coordinator;
use weir_cluster::plan::{ClusterPlan, Owners};
use weir_cluster::reads::{self, ClusterSnapshot, ClusterState};
use weir_cluster::whole::{WholeEnv, WholeRunner};
use weir_cluster::wire::{self, ReadAnswer, ReadRequest};
use weir_cluster::worker::Worker;
use weir_cluster::{Membership, bundles};
use weir_config::MAX_STATE_ANSWER_KEYS;
use weir_config::sync::Locked;
use weir_engine::instances::OperatorSource;
use weir_io::nats::Nats;
use weir_sdk::topology::{SpoutDef, TopologyDef};
use weir_state::rules::Stored;

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
    weir_io::spout::jetstream::fixed_partitions(stream, &definition.name, nats).unwrap_or_else(|e| {
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
    let (name, loaded) = app.deployments.check_upload(&request, bytes)?;
    let plan = cluster_plan(loaded).map_err(|e| DeployError::BadRequest(format!("{e:#}")))?;
    let definition = &plan.definition;
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
    app.deployments.refuse_past_max(membership.view().topologies.len())?;
    let partitions = partitions(app, definition);
    let nats = nats(app)?;
    let digest = nats.runtime.block_on(bundles::put(&nats.jetstream, bytes))?;
    let deployment = ClusterDeployment {
        topology: definition.name.clone(),
        bundle: digest,
        bundle_bytes: bytes.len() as u64,
        input: request.input,
        slots: DEFAULT_SLOTS,
        states: weir_engine::load::state_kinds(definition),
        running: true,
        units: catalog::units(definition, partitions.as_deref(), DEFAULT_SLOTS, plan.whole.is_some()),
        deployed_by: config.host.clone(),
        deployed_unix_ms: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64),
    };
    let created = in_etcd(membership, async |client| catalog::create(client, &config.name, &name, &deployment).await)?;
    if !created {
        return Err(taken());
    }
    match &plan.whole {
        Some(why) => tracing::info!(
            "topology {name} deployed to cluster {} from host {}, placed whole on one host: {why}",
            config.name,
            config.host
        ),
        None => tracing::info!("topology {name} deployed to cluster {} from host {}", config.name, config.host),
    }
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
    let (_, loaded) = app.deployments.check_upload(&request, bytes)?;
    let plan = cluster_plan(loaded).map_err(|e| DeployError::BadRequest(format!("{e:#}")))?;
    let definition = &plan.definition;
    let states = weir_engine::load::state_kinds(definition);
    if !old.states.is_empty() && old.states != states {
        return Err(DeployError::BadRequest(format!(
            "the upgrade changes topology {name}'s states ({:?} -> {states:?}); deploy it under a new name instead",
            old.states
        )));
    }
    let nats = nats(app)?;
    let digest = nats.runtime.block_on(bundles::put(&nats.jetstream, bytes))?;
    let was_whole = old.units.iter().any(|u| u.starts_with("whole/"));
    if was_whole != plan.whole.is_some() {
        let placed = |whole: bool| if whole { "whole on one host" } else { "partitioned" };
        return Err(DeployError::BadRequest(format!(
            "the upgrade moves topology {name} from {} to {}: its state is kept in another changelog there; deploy \
             it under a new name instead",
            placed(was_whole),
            placed(plan.whole.is_some())
        )));
    }
    let units = catalog::units(definition, partitions(app, definition).as_deref(), old.slots, was_whole);
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
    let nats = nats(app)?;
    if let Some(gone) = known {
        forget_bundle(&nats, membership, name, &gone.deployment.bundle, "");
    }
    if let Err(e) = nats.runtime.block_on(Changelog::delete(&nats.jetstream, &config.name, name)) {
        tracing::warn!("{e:#}");
    }
    tracing::info!("topology {name} deleted from cluster {}", config.name);
    Ok(())
}

/// A cluster topology's status, in the shape of a served one's, with
/// `cluster`: its bundle, assignment epoch, and each host's units and
/// figures as it last shared them.
pub fn status(app: &App, name: &str, topology: &ClusterTopology) -> Value {
    let deployment = &topology.deployment;
    let shares = topology.assignment.as_ref().map(|r| r.assignment.shares()).unwrap_or_default();
    let figures = app.cluster_shared_figures.locked().get(name).cloned().unwrap_or_default();
    let live: BTreeSet<String> =
        app.cluster.get().map(|m| m.view().hosts.into_iter().map(|h| h.id).collect()).unwrap_or_default();
    let of =
        |host: &str, field: &str| figures.get(host).and_then(|f| f["host"].get(field)).cloned().unwrap_or(json!(0));
    let hosts: BTreeMap<&str, Value> = shares
        .into_iter()
        .map(|(host, share)| {
            let rate = of(host, "tuples_per_s");
            (
                host,
                json!({
                    "partitions": share.partitions,
                    "slots": share.slots,
                    "tuples_per_s": rate,
                    "tuples_processed": of(host, "tuples_processed"),
                    "batches_read_ahead": of(host, "batches_read_ahead"),
                    "batches_committed": of(host, "batches_committed"),
                    "last_committed": of(host, "last_committed"),
                }),
            )
        })
        .collect();
    let leading = figures.iter().filter(|(host, _)| live.contains(*host)).map(|(_, f)| &f["leader"]);
    let leader = leading.max_by_key(|f| f["last_committed"].as_u64().unwrap_or(0)).cloned().unwrap_or(json!({}));
    let tuples_per_s: f64 = hosts.values().filter_map(|h| h["tuples_per_s"].as_f64()).sum();
    // A topology placed whole has no leader's coordinator: its owner's
    // figures say where it stands.
    let whole = deployment.units.iter().any(|u| u.starts_with("whole/"));
    let owner_said = |field: &str| {
        figures.iter().filter(|(host, _)| live.contains(*host)).filter_map(|(_, f)| f["host"][field].as_u64()).max()
    };
    let last_committed = match whole {
        true => owner_said("last_committed").unwrap_or(0),
        false => leader["last_committed"].as_u64().unwrap_or(0),
    };
    // The last error of the host furthest on, for a topology placed whole.
    let owner_failure = figures
        .iter()
        .filter(|(host, _)| live.contains(*host))
        .max_by_key(|(_, f)| f["host"]["last_committed"].as_u64().unwrap_or(0))
        .map_or(Value::Null, |(_, f)| f["host"]["last_error"].clone());
    let batches = match whole {
        true => owner_said("batches_committed").unwrap_or(0),
        false => leader["batches"].as_u64().unwrap_or(0),
    };
    let loaded = app.cluster_bundles.locked().get(&deployment.bundle).cloned();
    let loaded = match loaded {
        Some(Ok(())) => json!("loaded"),
        Some(Err(e)) => json!(e),
        None => json!("loading"),
    };
    json!({
        "name": name,
        "topology": deployment.topology,
        "state": if deployment.running { "running" } else { "stopped" },
        "error": Value::Null,
        "last_committed": last_committed,
        "batches": batches,
        "tuples_per_s": tuples_per_s,
        "replays": leader["replays"].as_u64().unwrap_or(0),
        "cluster": {
            "placement": if whole { "whole" } else { "partitioned" },
            "bundle": deployment.bundle,
            "bundle_bytes": deployment.bundle_bytes,
            "slots": deployment.slots,
            "units": deployment.units.len(),
            "epoch": topology.assignment.as_ref().map(|r| r.assignment.epoch),
            "reason": topology.assignment.as_ref().map(|r| r.reason.as_str()),
            "hosts": hosts,
            "last_failure": if whole { owner_failure } else { leader["last_failure"].clone() },
            "bundle_on_this_host": loaded,
        },
    })
}

/// Loads, on this host, every cluster topology whose bundle it has not
/// loaded yet: fetched from JetStream, checked against its digest, kept in
/// the bundles directory and compiled. Runs for the server's life.
pub async fn load_bundles(app: Shared) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    for round in 0u64.. {
        tick.tick().await;
        let Some(membership) = app.cluster.get() else { continue };
        // A bundle that failed (NATS out of reach, say) is tried again every
        // ten rounds.
        let retry = round % 10 == 0;
        let wanted: Vec<(String, ClusterDeployment)> = {
            let done = app.cluster_bundles.locked();
            let plans = app.cluster_plans.locked();
            membership
                .view()
                .topologies
                .into_iter()
                .filter(|(name, t)| plans.get(name).is_none_or(|(digest, _)| *digest != t.deployment.bundle))
                .filter(|(_, t)| retry || !matches!(done.get(&t.deployment.bundle), Some(Err(_))))
                .map(|(name, t)| (name, t.deployment))
                .collect()
        };
        for (name, deployment) in wanted {
            let outcome = tokio::task::spawn_blocking({
                let app = Arc::clone(&app);
                let (name, deployment) = (name.clone(), deployment.clone());
                move || load_bundle(&app, &name, &deployment)
            })
            .await
            .unwrap_or_else(|e| Err(anyhow::anyhow!("{e}")));
            let outcome = match outcome {
                Ok(plan) => {
                    let mut plans = app.cluster_plans.locked();
                    plans.insert(name, (deployment.bundle.clone(), Arc::new(plan)));
                    Ok(())
                }
                Err(e) => {
                    let message = app.host.public(&format!("{e:#}"));
                    tracing::error!(
                        "bundle {} of the cluster cannot be loaded on this host: {message}",
                        deployment.bundle
                    );
                    Err(message)
                }
            };
            app.cluster_bundles.locked().insert(deployment.bundle, outcome);
        }
    }
}

/// A topology as loaded, as a cluster runs it.
fn cluster_plan(loaded: Loaded) -> anyhow::Result<ClusterPlan> {
    ClusterPlan::new(&loaded.definition, loaded.plan, OperatorSource::Wasm(loaded.components))
}

fn load_bundle(app: &App, name: &str, deployment: &ClusterDeployment) -> anyhow::Result<ClusterPlan> {
    let max = app.max_upload;
    let nats = nats(app)?;
    let bytes = nats.runtime.block_on(bundles::get(&nats.jetstream, &deployment.bundle, max))?;
    let loaded = app
        .deployments
        .load_cluster_bundle(&bytes, &deployment.topology, name)
        .with_context(|| format!("topology {name}'s bundle {}", deployment.bundle))?;
    let plan = cluster_plan(loaded)?;
    tracing::info!("topology {name}'s bundle {} is loaded on this host", deployment.bundle);
    Ok(plan)
}

/// A thread running one topology's worker or coordinator, and the bundle
/// it runs.
struct Running {
    digest: String,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Running {
    fn start(digest: &str, name: String, run: impl FnOnce(&AtomicBool) + Send + 'static) -> std::io::Result<Running> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new().name(name).spawn(move || run(&flag))?;
        Ok(Running { digest: digest.to_owned(), stop, thread })
    }

    /// Asks the thread to stop; it is gone once `thread` is finished.
    fn stop(self) -> Running {
        self.stop.store(true, Ordering::SeqCst);
        self
    }
}

/// Keeps, on this host, a worker running for every running cluster
/// topology whose bundle it loaded, and while it leads, a coordinator for
/// each. Runs for the server's life.
pub async fn run_topologies(app: Shared) {
    let mut workers: BTreeMap<String, Running> = BTreeMap::new();
    let mut coordinators: BTreeMap<String, Running> = BTreeMap::new();
    // Threads asked to stop, by topology and role: a topology's next one
    // starts once its last is gone, never beside it.
    let mut stopping: Vec<(String, bool, Running)> = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tick.tick().await;
        stopping.retain(|(_, _, r)| !r.thread.is_finished());
        let (Some(membership), Some(nats)) = (app.cluster.get(), app.host.nats.clone()) else { continue };
        let view = membership.view();
        let plans = app.cluster_plans.locked().clone();
        let wanted: BTreeMap<String, (String, Arc<ClusterPlan>, u32)> = view
            .topologies
            .iter()
            .filter(|(_, t)| t.deployment.running)
            .filter_map(|(name, t)| {
                let (digest, plan) = plans.get(name).filter(|(d, _)| *d == t.deployment.bundle)?;
                Some((name.clone(), (digest.clone(), Arc::clone(plan), t.deployment.slots)))
            })
            .collect();
        let inputs: BTreeMap<String, Option<std::path::PathBuf>> =
            view.topologies.iter().map(|(name, t)| (name.clone(), t.deployment.input.clone())).collect();
        let leading = view.leader_key.clone().filter(|_| view.member);
        for (running, lead) in [(&mut workers, false), (&mut coordinators, true)] {
            let gone: Vec<String> = running
                .iter()
                .filter(|(name, r)| {
                    r.thread.is_finished()
                        || (lead && leading.is_none())
                        || wanted.get(*name).is_none_or(|(digest, _, _)| *digest != r.digest)
                })
                .map(|(name, _)| name.clone())
                .collect();
            for name in gone {
                if let Some(r) = running.remove(&name) {
                    stopping.push((name, lead, r.stop()));
                }
            }
        }
        for (name, (digest, plan, slots)) in wanted {
            let figures = {
                let mut all = app.cluster_figures.locked();
                all.entry(name.clone()).or_default().clone()
            };
            let still = |lead: bool| stopping.iter().any(|(n, l, _)| *n == name && *l == lead);
            if !workers.contains_key(&name) && !still(false) {
                let (config, db, nats, plan) =
                    (membership.config().clone(), Arc::clone(&app.host.db), nats.clone(), Arc::clone(&plan));
                let (timeout, host_figures) = (app.host.run.batch_timeout, Arc::clone(&figures.0));
                let started = if plan.whole.is_some() {
                    let env = WholeEnv {
                        db,
                        nats,
                        kafka: app.host.kafka.clone(),
                        run: app.host.run.clone(),
                        inputs: app.host.inputs.clone(),
                        input: inputs.get(&name).cloned().flatten(),
                    };
                    Running::start(&digest, format!("weir-whole-{name}"), move |stop| {
                        match WholeRunner::open(config, plan, slots, env, host_figures) {
                            Ok(runner) => runner.run(stop),
                            Err(e) => tracing::warn!("this host cannot run a topology placed whole: {e:#}"),
                        }
                    })
                } else {
                    Running::start(&digest, format!("weir-cluster-{name}"), move |stop| {
                        match Worker::open(config, plan, slots, db, &nats, timeout, host_figures) {
                            Ok(worker) => worker.run(stop),
                            Err(e) => tracing::warn!("this host's worker cannot start: {e:#}"),
                        }
                    })
                };
                if let Ok(started) = started {
                    workers.insert(name.clone(), started);
                }
            }
            // A topology placed whole has its batches cut by its owner.
            if let Some(leader) = &leading
                && plan.whole.is_none()
                && !coordinators.contains_key(&name)
                && !still(true)
            {
                let (config, leader, nats) = (membership.config().clone(), leader.clone(), nats.clone());
                let (span, timeout) = (app.host.run.batch_size as u64, app.host.run.batch_timeout);
                let leader_figures = Arc::clone(&figures.1);
                let started =
                    Running::start(&digest, format!("weir-lead-{name}"), move |stop| {
                        match Coordinator::open(config, plan, slots, leader, &nats, span, timeout, leader_figures) {
                            Ok(coordinator) => coordinator.run(stop),
                            Err(e) => tracing::warn!("this host cannot coordinate: {e:#}"),
                        }
                    });
                if let Ok(started) = started {
                    coordinators.insert(name, started);
                }
            }
        }
    }
}

/// Answers other hosts' reads of the state this host owns. Runs for the
/// server's life.
pub async fn answer_reads(app: Shared) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut subscription = loop {
        tick.tick().await;
        let Some(membership) = app.cluster.get() else { continue };
        if app.host.nats.is_none() {
            return;
        }
        let subject = wire::reads(&membership.config().name, &membership.config().host);
        let connection = match tokio::task::spawn_blocking({
            let app = Arc::clone(&app);
            move || nats(&app)
        })
        .await
        {
            Ok(Ok(connection)) => connection,
            _ => continue,
        };
        match connection.client.subscribe(subject).await {
            Ok(subscription) => break (subscription, connection),
            Err(e) => tracing::warn!("this host does not answer reads yet: {e}"),
        }
    };
    while let Some(message) = futures_util::StreamExt::next(&mut subscription.0).await {
        let Some(reply) = message.reply.clone() else { continue };
        let app = Arc::clone(&app);
        let client = subscription.1.client.clone();
        tokio::spawn(async move {
            let answer = tokio::task::spawn_blocking(move || {
                let answer = match serde_json::from_slice::<ReadRequest>(&message.payload) {
                    Ok(request) => {
                        let figures = app.cluster_figures.locked().get(&request.topology).cloned();
                        let ready = figures.map(|f| f.0.locked().ready.clone()).unwrap_or_default();
                        let slots = app
                            .cluster
                            .get()
                            .and_then(|m| m.topology(&request.topology))
                            .map_or(DEFAULT_SLOTS, |t| t.deployment.slots);
                        reads::answer(&app.host.db, &request, &ready, slots)
                    }
                    Err(e) => ReadAnswer {
                        error: Some(format!("a read this host cannot parse: {e}")),
                        ..ReadAnswer::default()
                    },
                };
                serde_json::to_vec(&answer).unwrap_or_default()
            })
            .await
            .unwrap_or_default();
            let _ = client.publish(reply, answer.into()).await;
        });
    }
}

/// Shares this host's figures for each cluster topology through etcd, and
/// reads every host's, every two seconds, for any host's status. Runs for
/// the server's life.
pub async fn share_figures(app: Shared) {
    let mut tick = tokio::time::interval(Duration::from_secs(2));
    let mut client = None;
    loop {
        tick.tick().await;
        let Some(membership) = app.cluster.get() else { continue };
        if client.is_none() {
            client = membership.etcd().await.ok();
        }
        let Some(etcd) = client.as_mut() else { continue };
        let config = membership.config();
        let prefix = format!("/weir/{}/figures/", config.name);
        let mine: Vec<(String, Value)> = {
            let all = app.cluster_figures.locked();
            all.iter()
                .map(|(name, (host, leader))| {
                    let host = host.locked().clone();
                    let leader = leader.locked().clone();
                    (name.clone(), json!({ "host": host, "leader": leader }))
                })
                .collect()
        };
        let mut failed = false;
        for (name, figures) in mine {
            let key = format!("{prefix}{name}/{}", config.host);
            failed |= etcd.put(key, figures.to_string(), None).await.is_err();
        }
        let read = etcd.get(prefix.as_str(), Some(etcd_client::GetOptions::new().with_prefix())).await;
        let Ok(read) = read else {
            client = None;
            continue;
        };
        if failed {
            client = None;
        }
        let mut shared: BTreeMap<String, BTreeMap<String, Value>> = BTreeMap::new();
        for kv in read.kvs() {
            let Some((name, host)) =
                kv.key_str().ok().and_then(|k| k.strip_prefix(prefix.as_str())).and_then(|k| k.rsplit_once('/'))
            else {
                continue;
            };
            if let Ok(value) = serde_json::from_slice::<Value>(kv.value()) {
                shared.entry(name.to_owned()).or_default().insert(host.to_owned(), value);
            }
        }
        *app.cluster_shared_figures.locked() = shared;
    }
}

/// The cluster's committed state of topology `name`, read from its slots'
/// owners; runs off the async runtime.
fn cluster_state(
    app: &App,
    membership: &Membership,
    name: &str,
    plan: &ClusterPlan,
) -> Result<(ClusterState, Nats), DeployError> {
    let topology = membership.topology(name).ok_or_else(|| not_in_cluster(membership, name))?;
    let record = topology.assignment.ok_or_else(|| {
        DeployError::Conflict(format!("topology {name} has no assignment yet: try again in a moment"))
    })?;
    let connection = nats(app)?;
    let state = ClusterState {
        client: connection.client.clone(),
        runtime: connection.runtime.handle().clone(),
        cluster: membership.config().name.clone(),
        topology: name.to_owned(),
        owners: Owners::of(&record.assignment, topology.deployment.slots)
            .with_states(plan.plan.states.keys(), topology.deployment.slots),
        slots: topology.deployment.slots,
    };
    Ok((state, connection))
}

/// Longest a read through a host that has just started waits for the
/// cluster's topologies and the topology's bundle to be loaded there.
const JOINING_WAIT: Duration = Duration::from_secs(20);

/// Waits, at most [`JOINING_WAIT`], until this host has read the cluster's
/// topologies and, when `name` is one of them, loaded its bundle (or failed
/// to), so that a read through a host that has just joined is answered
/// rather than refused; runs off the async runtime.
pub fn wait_until_loaded(app: &App, name: &str) {
    let Some(membership) = app.cluster.get() else { return };
    if app.deployments.contains(name) {
        return;
    }
    let deadline = std::time::Instant::now() + JOINING_WAIT;
    while std::time::Instant::now() < deadline {
        let view = membership.view();
        match view.topologies.get(name) {
            None if view.topologies_read => return,
            Some(topology) => {
                let loaded = app.cluster_plans.locked().contains_key(name);
                let failed = matches!(app.cluster_bundles.locked().get(&topology.deployment.bundle), Some(Err(_)));
                if loaded || failed {
                    return;
                }
            }
            None => {}
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The loaded plan of cluster topology `name` on this host.
fn loaded_plan(app: &App, name: &str) -> Result<Arc<ClusterPlan>, DeployError> {
    let plans = app.cluster_plans.locked();
    let (_, plan) = plans
        .get(name)
        .ok_or_else(|| DeployError::Conflict(format!("topology {name}'s bundle is not loaded on this host yet")))?;
    Ok(Arc::clone(plan))
}

/// Cluster topology `name`'s definition, as this host loaded it.
pub fn definition(app: &App, name: &str) -> Result<TopologyDef, DeployError> {
    Ok(loaded_plan(app, name)?.definition.clone())
}

/// Reads state `state` of cluster topology `name` as the state route reads
/// a served one's: one key, a page, or all of it.
pub fn read_state(
    app: &App,
    membership: &Membership,
    name: &str,
    state: &str,
    key: Option<Vec<u8>>,
    page: Option<(Option<Vec<u8>>, usize)>,
) -> Result<Vec<(Vec<u8>, Stored)>, DeployError> {
    let plan = loaded_plan(app, name)?;
    if !plan.plan.states.contains_key(state) {
        let states: Vec<&String> = plan.plan.states.keys().collect();
        return Err(DeployError::NotFound(format!("topology {name} has no state {state:?} (states: {states:?})")));
    }
    with_current_owners(app, membership, name, &plan, |cluster| match (&key, &page) {
        (Some(key), _) => Ok(cluster.get(state, key)?.map(|s| (key.clone(), s)).into_iter().collect()),
        (None, Some((after, limit))) => cluster.page(state, after.as_deref(), *limit),
        // A whole answer: one key past what it may hold tells it is more.
        (None, None) => cluster.first(state, MAX_STATE_ANSWER_KEYS + 1),
    })
}

/// Longest a read waits for slots that are changing hands (a host joining
/// or leaving) to be owned and restored by the hosts the assignment names.
const MOVING_WAIT: Duration = Duration::from_secs(15);

/// `read` over the cluster's state of topology `name` as the current
/// assignment places it. A host asked for a slot it no longer owns (the
/// assignment moved on since it was read) or has not restored yet is
/// asked again under the assignment read afresh, for at most
/// [`MOVING_WAIT`]; runs off the async runtime.
fn with_current_owners<T>(
    app: &App,
    membership: &Membership,
    name: &str,
    plan: &ClusterPlan,
    read: impl Fn(ClusterState) -> anyhow::Result<T>,
) -> Result<T, DeployError> {
    let deadline = std::time::Instant::now() + MOVING_WAIT;
    loop {
        let (cluster, _connection) = cluster_state(app, membership, name, plan)?;
        match read(cluster) {
            Ok(answer) => return Ok(answer),
            Err(e) if weir_cluster::reads::is_moving(&e) && std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(DeployError::Unavailable(format!("{e:#}"))),
        }
    }
}

/// Answers query `query` of cluster topology `name` over the cluster's
/// committed state.
pub fn query(
    app: &App,
    membership: &Membership,
    name: &str,
    query: &str,
    args: &str,
) -> Result<Vec<Vec<weir_sdk::codec::Value>>, DeployError> {
    let plan = loaded_plan(app, name)?;
    if !plan.plan.queries.contains_key(query) {
        let known: Vec<&String> = plan.plan.queries.keys().collect();
        return Err(DeployError::NotFound(format!("topology {name} has no query {query:?} (queries: {known:?})")));
    }
    with_current_owners(app, membership, name, &plan, |cluster| {
        let snapshot = ClusterSnapshot(Arc::new(cluster));
        weir_engine::exec::query_over(&snapshot, 0, &plan.plan, &plan.source, query, args)
    })
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
fn own_slots(view: &weir_cluster::ClusterView) -> BTreeSet<SlotFence> {
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

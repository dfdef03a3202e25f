//! A topology placed whole on one host, on a thread of its own on every
//! host: the host that owns its one unit (`whole/<topology>`) runs it with
//! the single-host engine, as `weir serve` does, its spout, process and
//! commit phases, sinks and windows all there; the others wait.
//!
//! Taking the unit over, a host fences the topology's changelog at its
//! epoch, puts its own copy back as the changelog holds it (dropping any
//! commit of its own the changelog never took) and runs the topology from
//! there, through a [`ReplicatedStore`]: the engine goes on from the last
//! committed txid the changelog holds, and a replayed batch is exact by
//! Trident's rules; the outbox comes back with the copy, so a batch's sink
//! output goes out again under the same `Nats-Msg-Id` ids, which JetStream
//! passes over. The run stops when the unit moves on (read from etcd every
//! second) or the changelog refuses a publish (another host fenced it).

use super::catalog;
use super::membership::ClusterConfig;
use super::plan::ClusterPlan;
use super::replicated::ReplicatedStore;
use super::whole_log::WholeLog;
use super::worker::HostFigures;
use anyhow::{Context, Result, anyhow};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use weir_config::RunConfig;
use weir_config::backoff::Backoff;
use weir_config::sync::Locked;
use weir_engine::instances::OperatorSource;
use weir_io::kafka::KafkaConfig;
use weir_io::nats::{Nats, NatsConfig};
use weir_io::spout::{InputScope, SpoutEnv};
use weir_sdk::topology::SPOUT_ID;
use weir_state::Db;

/// How often the owner checks that the unit is still its own.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// What the host runs topologies with.
#[derive(Clone)]
pub struct WholeEnv {
    pub db: Arc<Db>,
    pub nats: NatsConfig,
    pub kafka: Option<KafkaConfig>,
    pub run: RunConfig,
    pub inputs: InputScope,
    /// The spout's input, as the deployment gave it.
    pub input: Option<PathBuf>,
}

/// One host's runner of one topology placed whole.
pub struct WholeRunner {
    cluster: ClusterConfig,
    plan: Arc<ClusterPlan>,
    /// Hash slots per state: reads ask for them.
    slots: u32,
    env: WholeEnv,
    nats: Nats,
    etcd: etcd_client::Client,
    figures: Arc<Mutex<HostFigures>>,
}

impl WholeRunner {
    pub fn open(
        cluster: ClusterConfig,
        plan: Arc<ClusterPlan>,
        slots: u32,
        env: WholeEnv,
        figures: Arc<Mutex<HostFigures>>,
    ) -> Result<WholeRunner> {
        let nats = Nats::connect(&env.nats, &format!("weir {} runs {} whole", cluster.host, plan.name))?;
        let etcd = nats.runtime.block_on(super::membership::connect(&cluster))?;
        Ok(WholeRunner { cluster, plan, slots, env, nats, etcd, figures })
    }

    /// The epoch at which this host got the unit, while it owns it.
    fn owned_since(&mut self) -> Result<Option<u64>> {
        let (cluster, name) = (self.cluster.name.clone(), self.plan.name.clone());
        let record = self.nats.runtime.block_on(catalog::assignment(&mut self.etcd, &cluster, &name))?;
        let unit = catalog::whole_unit(&name);
        Ok(record
            .and_then(|r| r.assignment.units.get(&unit).cloned())
            .filter(|owner| owner.host == self.cluster.host)
            .map(|owner| owner.since))
    }

    /// Runs the topology while this host owns it, until `stop` is set.
    pub fn run(mut self, stop: &AtomicBool) {
        let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
        while !stop.load(Ordering::SeqCst) {
            let since = match self.owned_since() {
                Ok(Some(since)) => since,
                Ok(None) => {
                    std::thread::sleep(Duration::from_millis(500));
                    continue;
                }
                Err(e) => {
                    tracing::debug!("topology {}: its assignment: {e:#}", self.plan.name);
                    std::thread::sleep(Duration::from_millis(500));
                    continue;
                }
            };
            let outcome = self.own(since, stop);
            self.figures.locked().ready.clear();
            match outcome {
                Ok(()) => backoff.reset(),
                Err(e) => {
                    let error = format!("{e:#}");
                    tracing::warn!("topology {} on host {}: {error}", self.plan.name, self.cluster.host);
                    let mut figures = self.figures.locked();
                    figures.failures += 1;
                    figures.last_error = Some(error);
                    drop(figures);
                    std::thread::sleep(backoff.next_wait());
                }
            }
        }
    }

    /// Takes the topology over at epoch `since` and runs it until the unit
    /// moves on, the changelog refuses a publish, or `stop` is set.
    fn own(&mut self, since: u64, stop: &AtomicBool) -> Result<()> {
        let name = self.plan.name.clone();
        let started = Instant::now();
        let mut log =
            self.nats.runtime.block_on(WholeLog::open(&self.nats.jetstream, &self.cluster.name, &name, since))?;
        let image = self.nats.runtime.block_on(log.take_over())?;
        self.env.db.replace_topology(&name, &image)?;
        tracing::info!(
            "topology {name}: host {} took it over at epoch {since}, from txid {} of its changelog ({:.1}s)",
            self.cluster.host,
            image.last_committed,
            started.elapsed().as_secs_f64()
        );
        {
            let mut figures = self.figures.locked();
            figures.last_committed = image.last_committed;
        }
        let halt = Arc::new(AtomicBool::new(false));
        let store = ReplicatedStore::new(
            Arc::clone(&self.env.db),
            &name,
            log,
            self.nats.runtime.handle().clone(),
            self.cluster.snapshot_every,
            Arc::clone(&halt),
        );
        let outcome = std::thread::scope(|scope| {
            let watching = Arc::clone(&halt);
            let done = Arc::new(AtomicBool::new(false));
            let finished = Arc::clone(&done);
            let cluster = self.cluster.clone();
            let nats = self.nats.runtime.handle().clone();
            let unit = catalog::whole_unit(&name);
            let watched = name.clone();
            scope.spawn(move || {
                let mut etcd = None;
                while !finished.load(Ordering::SeqCst) {
                    if stop.load(Ordering::SeqCst) {
                        watching.store(true, Ordering::SeqCst);
                    }
                    let still = nats.block_on(async {
                        let client = match etcd.as_mut() {
                            Some(client) => client,
                            None => etcd.insert(super::membership::connect(&cluster).await?),
                        };
                        let record = catalog::assignment(client, &cluster.name, &watched).await?;
                        anyhow::Ok(record.and_then(|r| r.assignment.units.get(&unit).cloned()))
                    });
                    match still {
                        Ok(owner) if owner.as_ref().is_some_and(|o| o.host == cluster.host && o.since == since) => {}
                        Ok(owner) => {
                            tracing::info!(
                                "topology {watched}: the unit moved on from host {} ({owner:?}); it stops here",
                                cluster.host
                            );
                            watching.store(true, Ordering::SeqCst);
                        }
                        // etcd out of reach: the lease decides; a host that
                        // lost it is fenced by its successor.
                        Err(_) => etcd = None,
                    }
                    std::thread::sleep(CHECK_EVERY);
                }
            });
            let outcome = self.run_engine(&store, &halt);
            done.store(true, Ordering::SeqCst);
            outcome
        });
        match (outcome, store.failure()) {
            (_, Some(why)) => Err(anyhow!("{why}")),
            (outcome, None) => outcome,
        }
    }

    /// The single-host engine over `store`, until `halt` is set.
    fn run_engine(&self, store: &ReplicatedStore, halt: &AtomicBool) -> Result<()> {
        let name = &self.plan.name;
        let definition = &self.plan.definition;
        let spout_def = definition.spout().context("the topology has no spout")?;
        let guest = match &self.plan.source {
            OperatorSource::Wasm(components) => {
                Some((Arc::clone(components.for_operator(SPOUT_ID)), self.plan.plan.sandboxes.of(SPOUT_ID).clone()))
            }
            OperatorSource::Native(_) => None,
        };
        let env = SpoutEnv {
            topology: &definition.name,
            stored_as: name,
            scope: &self.env.inputs,
            input: self.env.input.as_deref(),
            batch_size: self.env.run.batch_size,
            nats: Some(&self.env.nats),
            kafka: self.env.kafka.as_ref(),
            follows: true,
        };
        let mut spout = weir_io::spout::open(spout_def, &env, guest)?;
        let mut sinks = weir_io::sink::Publisher::open(&self.plan.plan, Some(&self.env.nats), self.env.kafka.as_ref())?;
        {
            let mut figures = self.figures.locked();
            // Reads are answered from here on: every slot of every state.
            let slots = self.slots;
            figures.ready = self.plan.plan.states.keys().flat_map(|s| (0..slots).map(|n| (s.clone(), n))).collect();
        }
        let figures = Arc::clone(&self.figures);
        let mut last_batches = 0;
        weir_engine::coordinator::run(
            store,
            Arc::clone(&self.plan.plan),
            self.plan.source.clone(),
            &mut *spout,
            sinks.as_mut(),
            &self.env.run,
            halt,
            &mut |report| {
                let mut figures = figures.locked();
                figures.last_committed = report.last_committed;
                figures.batches_committed += report.batches.saturating_sub(last_batches);
                figures.batches_processed = figures.batches_committed;
                figures.tuples_processed = report.tuples;
                last_batches = report.batches;
                let seconds = report.elapsed.as_secs_f64().max(1e-6);
                figures.tuples_per_s = report.tuples as f64 / seconds;
            },
        )?;
        Ok(())
    }
}

//! The topologies a server runs: each deployed from a bundle stored in the
//! data dir, run by its own coordinator on threads of its own, its
//! deployment recorded in redb so that a restarted server resumes it.

use crate::bundle::{Bundle, supports_wit};
use crate::config::{RunConfig, SandboxConfig};
use crate::coordinator::{self, RunReport};
use crate::operators::OperatorSource;
use crate::runtime::ComponentCache;
use crate::spout;
use crate::state::Db;
use crate::topology::{self, LoadedTopology};
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;
use wasmtime::Engine;
use weir_sdk::codec::Value;
use weir_sdk::topology::{SPOUT_ID, TopologyDef};

/// What is remembered of a deployment across restarts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeploymentRecord {
    /// The bundle's file, in the data dir's `bundles/`.
    pub bundle: String,
    /// The input file or directory of the topology's spout, if it reads one.
    pub input: Option<PathBuf>,
    /// Whether it should be running.
    pub running: bool,
}

/// How a deployment is doing.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Status {
    /// running, stopped or failed.
    pub state: String,
    /// Why it failed, if it did.
    pub error: Option<String>,
    /// The last committed txid.
    pub last_committed: u64,
    /// Batches committed since it was last started.
    pub batches: u64,
    /// Spout tuples committed since it was last started.
    pub tuples: u64,
    /// Failed attempts replayed since it was last started.
    pub replays: u64,
    /// Batches per second since it was last started.
    pub batches_per_s: f64,
    /// Tuples per second since it was last started.
    pub tuples_per_s: f64,
    /// Commit latency, p50 and p99, in milliseconds.
    pub commit_p50_ms: Option<f64>,
    /// Commit latency p99, in milliseconds.
    pub commit_p99_ms: Option<f64>,
    /// Milliseconds spent in each guest operator since it was last started.
    pub operator_ms: BTreeMap<String, f64>,
    /// How far the committed batches are behind the input, where the spout
    /// knows: bytes for the file spouts, integers for the generator.
    pub spout_lag: Option<u64>,
}

impl Status {
    fn of(state: &str, report: &RunReport) -> Status {
        let seconds = report.elapsed.as_secs_f64().max(1e-9);
        let ms = |q| report.commit_latency.quantile(q).map(|d| d.as_secs_f64() * 1000.0);
        Status {
            state: state.to_owned(),
            error: None,
            last_committed: report.last_committed,
            batches: report.batches,
            tuples: report.tuples,
            replays: report.replays,
            batches_per_s: report.batches as f64 / seconds,
            tuples_per_s: report.tuples as f64 / seconds,
            commit_p50_ms: ms(0.5),
            commit_p99_ms: ms(0.99),
            operator_ms: report.operator_time.iter().map(|(op, t)| (op.clone(), t.as_secs_f64() * 1000.0)).collect(),
            spout_lag: report.spout_lag,
        }
    }
}

struct Running {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

struct Deployment {
    record: DeploymentRecord,
    definition: TopologyDef,
    status: Arc<Mutex<Status>>,
    running: Option<Running>,
}

/// Everything a server needs to run topologies.
pub struct Host {
    /// The data dir's database.
    pub db: Arc<Db>,
    /// Where bundles are stored.
    pub bundles: PathBuf,
    /// The engine components are compiled for.
    pub engine: Engine,
    /// The compiled-component cache.
    pub cache: ComponentCache,
    /// Limits and capabilities operators may have.
    pub sandbox: SandboxConfig,
    /// How topologies batch and retry.
    pub run: RunConfig,
    /// Directories spouts may read input from.
    pub input_dirs: Vec<PathBuf>,
}

/// The deployed topologies, by name.
pub struct Deployments {
    host: Arc<Host>,
    deployed: Mutex<BTreeMap<String, Deployment>>,
}

/// A client's mistake, as opposed to the server's: the API answers 400/404.
#[derive(Debug)]
pub enum DeployError {
    /// The request is wrong; the message says why.
    BadRequest(String),
    /// No such topology.
    NotFound(String),
    /// The server failed.
    Internal(anyhow::Error),
}

impl From<anyhow::Error> for DeployError {
    fn from(e: anyhow::Error) -> DeployError {
        DeployError::Internal(e)
    }
}

fn bad(e: anyhow::Error) -> DeployError {
    DeployError::BadRequest(format!("{e:#}"))
}

/// The state kinds of a topology's states, to refuse an upgrade changing one.
fn states(def: &TopologyDef) -> Vec<(String, String)> {
    def.states().into_iter().map(|state| (state.name.clone(), format!("{:?}", state.kind))).collect()
}

impl Deployments {
    /// The deployments of `host`, resuming every one recorded as running.
    pub fn resume(host: Arc<Host>) -> Result<Deployments> {
        let deployments = Deployments { host, deployed: Mutex::new(BTreeMap::new()) };
        for (name, record) in deployments.host.db.deployments()? {
            let record: DeploymentRecord = serde_json::from_slice(&record)?;
            let path = deployments.host.bundles.join(&record.bundle);
            match deployments.load(&path, &name) {
                Ok(loaded) => {
                    let running = record.running;
                    deployments.insert(&name, record, loaded.definition.clone());
                    if running {
                        deployments.start(&name, loaded)?;
                        tracing::info!("resumed topology {name}");
                    }
                }
                Err(e) => tracing::error!("cannot resume topology {name}: {e:#}"),
            }
        }
        Ok(deployments)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Deployment>> {
        self.deployed.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn load(&self, bundle: &Path, name: &str) -> Result<LoadedTopology> {
        let host = &self.host;
        let loaded = topology::load(&host.engine, &host.cache, bundle, &[name.to_owned()], &host.sandbox)?.remove(0);
        host.db.check_state_kinds(&loaded.plan)?;
        Ok(loaded)
    }

    fn insert(&self, name: &str, record: DeploymentRecord, definition: TopologyDef) {
        let status = Arc::new(Mutex::new(Status { state: "stopped".into(), ..Status::default() }));
        self.lock().insert(name.to_owned(), Deployment { record, definition, status, running: None });
    }

    fn check_input(&self, definition: &TopologyDef, input: Option<&Path>) -> Result<(), DeployError> {
        let Some(spout) = definition.spout() else {
            return Err(DeployError::BadRequest(format!(
                "topology {} has no spout: it only answers queries, so there is nothing to run",
                definition.name
            )));
        };
        spout::check_input(spout, &definition.name, input).map_err(bad)?;
        let Some(input) = input else { return Ok(()) };
        let input =
            input.canonicalize().map_err(|e| DeployError::BadRequest(format!("input {}: {e}", input.display())))?;
        let allowed = self.host.input_dirs.iter().filter_map(|d| d.canonicalize().ok()).any(|d| input.starts_with(d));
        if !allowed {
            return Err(DeployError::BadRequest(format!(
                "input {} is not under a directory this server allows (--input-dir)",
                input.display()
            )));
        }
        Ok(())
    }

    /// Checks and stores an uploaded bundle; returns its stored path.
    fn store_bundle(&self, name: &str, bytes: &[u8]) -> Result<PathBuf, DeployError> {
        let bundle = Bundle::from_bytes(Path::new("upload"), bytes).map_err(bad)?;
        if !bundle.manifest.topologies.iter().any(|t| t.definition.name == name) {
            let names: Vec<_> = bundle.manifest.topologies.iter().map(|t| t.definition.name.clone()).collect();
            return Err(DeployError::BadRequest(format!(
                "the bundle defines no topology {name:?} (it defines {names:?})"
            )));
        }
        std::fs::create_dir_all(&self.host.bundles).context("creating the bundles directory")?;
        let file = format!("{name}-{}.weir", &crate::bundle::sha256_hex(bytes)[..16]);
        let path = self.host.bundles.join(&file);
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, bytes).context("storing the bundle")?;
        std::fs::rename(&tmp, &path).context("storing the bundle")?;
        Ok(path)
    }

    /// Deploys topology `name` from an uploaded bundle and starts it.
    pub fn deploy(&self, name: &str, bytes: &[u8], input: Option<PathBuf>) -> Result<Status, DeployError> {
        if self.lock().contains_key(name) {
            return Err(DeployError::BadRequest(format!("topology {name} is deployed already: upgrade or delete it")));
        }
        let path = self.store_bundle(name, bytes)?;
        let loaded = self.load(&path, name).map_err(bad)?;
        self.check_input(&loaded.definition, input.as_deref())?;
        let bundle = path.file_name().and_then(|f| f.to_str()).unwrap_or_default().to_owned();
        let record = DeploymentRecord { bundle, input, running: true };
        self.host.db.save_deployment(name, &serde_json::to_vec(&record).context("encoding the deployment")?)?;
        self.insert(name, record, loaded.definition.clone());
        self.start(name, loaded)?;
        self.status(name)
    }

    fn start(&self, name: &str, loaded: LoadedTopology) -> Result<()> {
        let mut deployed = self.lock();
        let deployment = deployed.get_mut(name).context("no such deployment")?;
        let host = Arc::clone(&self.host);
        let input = deployment.record.input.clone();
        let status = Arc::clone(&deployment.status);
        let stop = Arc::new(AtomicBool::new(false));
        let stop_flag = Arc::clone(&stop);
        let topology = name.to_owned();
        let last_committed = host.db.progress(name)?.last_committed;
        *status.lock().unwrap_or_else(|e| e.into_inner()) =
            Status { state: "running".into(), last_committed, ..Status::default() };
        let thread = std::thread::Builder::new().name(format!("weir-{name}")).spawn(move || {
            let started = Instant::now();
            let outcome = (|| {
                let definition = &loaded.definition;
                let spout_component = Arc::clone(loaded.components.for_operator(SPOUT_ID));
                let guest = Some((spout_component, loaded.plan.sandboxes.of(SPOUT_ID).clone()));
                let spout_def = definition.spout().context("the topology has no spout")?;
                let mut spout = spout::open(spout_def, &topology, input.as_deref(), host.run.batch_size, guest)?;
                coordinator::run(
                    &host.db,
                    Arc::clone(&loaded.plan),
                    OperatorSource::Wasm(Arc::clone(&loaded.components)),
                    &mut *spout,
                    &host.run,
                    &stop_flag,
                    &mut |report| {
                        *status.lock().unwrap_or_else(|e| e.into_inner()) = Status::of("running", report);
                    },
                )
            })();
            let mut status = status.lock().unwrap_or_else(|e| e.into_inner());
            match outcome {
                Ok(report) => *status = Status::of("stopped", &report),
                Err(e) => {
                    tracing::error!("topology {topology} failed after {:.1}s: {e:#}", started.elapsed().as_secs_f64());
                    status.state = "failed".into();
                    status.error = Some(format!("{e:#}"));
                }
            }
        })?;
        deployment.running = Some(Running { stop, thread });
        Ok(())
    }

    /// Stops topology `name` at a batch boundary, its batches in flight
    /// committed first; `remember` records it as stopped across restarts.
    fn halt(&self, name: &str, remember: bool) -> Result<(), DeployError> {
        let running = {
            let mut deployed = self.lock();
            let deployment = deployed.get_mut(name).ok_or_else(|| DeployError::NotFound(name.to_owned()))?;
            if remember {
                deployment.record.running = false;
                let record = serde_json::to_vec(&deployment.record).context("encoding the deployment")?;
                self.host.db.save_deployment(name, &record)?;
            }
            deployment.running.take()
        };
        if let Some(running) = running {
            running.stop.store(true, Ordering::Relaxed);
            let _ = running.thread.join();
        }
        Ok(())
    }

    /// Stops topology `name`; it stays stopped across restarts.
    pub fn stop(&self, name: &str) -> Result<Status, DeployError> {
        self.halt(name, true)?;
        self.status(name)
    }

    /// Starts a stopped topology again.
    pub fn resume_one(&self, name: &str) -> Result<Status, DeployError> {
        let (path, record) = {
            let deployed = self.lock();
            let deployment = deployed.get(name).ok_or_else(|| DeployError::NotFound(name.to_owned()))?;
            if deployment.running.is_some() {
                return Err(DeployError::BadRequest(format!("topology {name} is running")));
            }
            (self.host.bundles.join(&deployment.record.bundle), deployment.record.clone())
        };
        let loaded = self.load(&path, name)?;
        let record = DeploymentRecord { running: true, ..record };
        self.host.db.save_deployment(name, &serde_json::to_vec(&record).context("encoding the deployment")?)?;
        self.lock().get_mut(name).expect("deployed").record = record;
        self.start(name, loaded)?;
        self.status(name)
    }

    /// Answers query `query` of topology `name` with `args`, over its
    /// committed state: the result tuples.
    pub fn query(&self, name: &str, query: &str, args: &str) -> Result<Vec<Vec<Value>>, DeployError> {
        let path = {
            let deployed = self.lock();
            let deployment = deployed.get(name).ok_or_else(|| DeployError::NotFound(name.to_owned()))?;
            self.host.bundles.join(&deployment.record.bundle)
        };
        let loaded = self.load(&path, name)?;
        let source = OperatorSource::Wasm(Arc::clone(&loaded.components));
        crate::exec::query(&self.host.db, &loaded.plan, &source, query, args).map_err(bad)
    }

    /// Swaps topology `name`'s bundle at a batch boundary, keeping its state.
    /// Refused when the new bundle changes a state's kind or the WIT major.
    pub fn upgrade(&self, name: &str, bytes: &[u8]) -> Result<Status, DeployError> {
        let old = self
            .lock()
            .get(name)
            .map(|d| d.definition.clone())
            .ok_or_else(|| DeployError::NotFound(name.to_owned()))?;
        let upload = Bundle::from_bytes(Path::new("upload"), bytes).map_err(bad)?;
        if !supports_wit(&upload.manifest.wit) {
            return Err(DeployError::BadRequest(format!("the bundle targets {}", upload.manifest.wit)));
        }
        let path = self.store_bundle(name, bytes)?;
        let loaded = self.load(&path, name).map_err(bad)?;
        if states(&old) != states(&loaded.definition) {
            return Err(DeployError::BadRequest(format!(
                "the upgrade changes topology {name}'s states ({:?} -> {:?}); deploy it under a new name instead",
                states(&old),
                states(&loaded.definition)
            )));
        }
        self.halt(name, false)?;
        let record = {
            let mut deployed = self.lock();
            let deployment = deployed.get_mut(name).expect("deployed");
            deployment.record.bundle = path.file_name().and_then(|f| f.to_str()).unwrap_or_default().to_owned();
            deployment.record.running = true;
            deployment.definition = loaded.definition.clone();
            deployment.record.clone()
        };
        self.host.db.save_deployment(name, &serde_json::to_vec(&record).context("encoding the deployment")?)?;
        self.start(name, loaded)?;
        self.status(name)
    }

    /// Deletes topology `name`, keeping or dropping its state.
    pub fn delete(&self, name: &str, drop_state: bool) -> Result<(), DeployError> {
        self.halt(name, false)?;
        self.host.db.forget_deployment(name, drop_state)?;
        self.lock().remove(name);
        Ok(())
    }

    /// How topology `name` is doing.
    pub fn status(&self, name: &str) -> Result<Status, DeployError> {
        let deployed = self.lock();
        let deployment = deployed.get(name).ok_or_else(|| DeployError::NotFound(name.to_owned()))?;
        Ok(deployment.status.lock().unwrap_or_else(|e| e.into_inner()).clone())
    }

    /// Every deployed topology's name and status.
    pub fn list(&self) -> Vec<(String, Status)> {
        self.lock()
            .iter()
            .map(|(name, d)| (name.clone(), d.status.lock().unwrap_or_else(|e| e.into_inner()).clone()))
            .collect()
    }

    /// Whether topology `name` is deployed.
    pub fn contains(&self, name: &str) -> bool {
        self.lock().contains_key(name)
    }

    /// Stops every topology at a batch boundary, leaving their records as
    /// they are: a restarted server resumes them.
    pub fn shutdown(&self) {
        let names: Vec<String> = self.lock().keys().cloned().collect();
        for name in names {
            let _ = self.halt(&name, false);
        }
    }
}

/// Only for checks that need a bundle's topology list without loading it.
pub fn bundle_names(bytes: &[u8]) -> Result<Vec<String>> {
    let bundle = Bundle::from_bytes(Path::new("upload"), bytes)?;
    if bundle.manifest.topologies.is_empty() {
        bail!("the bundle defines no topology");
    }
    Ok(bundle.manifest.topologies.into_iter().map(|t| t.definition.name).collect())
}

//! The topologies a server runs: each deployed under a name of its own from
//! a bundle stored in the data dir by its content hash, run by its own
//! coordinator on threads of its own, its deployment recorded in the
//! [registry](super::registry) so that a restarted server resumes it.
//!
//! Deploy, upgrade, stop, resume and delete of one name are serialised: a
//! second such call on a name that one is working on gets 409. Nothing from
//! a request or a bundle reaches a path: bundles are stored as
//! `bundles/<sha256>.weir`, only once everything about the deployment has
//! been checked, and inputs are opened through [`InputScope`](spout::InputScope).
//!
//! The file is long because deploy, upgrade, stop, resume and delete share
//! one claim on a name and one run life cycle: they read best side by side.

use super::bundles::{STAGED_SUFFIX, Staged, is_plain_file_name};
pub use super::host::Host;
use super::registry::{DeploymentRecord, Registry, UPGRADES_KEPT, Upgrade, now_unix_ms};
pub use super::status::{Deployed, FailedAttempt, RunState, Status};
use anyhow::{Context, Result, bail};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use weir_config::MAX_DEPLOYMENT_NAME;
use weir_config::sync::Locked;
use weir_engine::bundle::{Bundle, supports_wit};
use weir_engine::coordinator;
use weir_engine::instances::{Components, OperatorSource};
use weir_engine::load;
use weir_io::spout;
use weir_plan::Plan;
use weir_sdk::codec::Value;
use weir_sdk::topology::{SPOUT_ID, TopologyDef};

struct Running {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

/// A topology as loaded from its bundle, kept for its runs and queries.
#[derive(Clone)]
pub struct Loaded {
    pub definition: TopologyDef,
    pub plan: Arc<Plan>,
    pub components: Arc<Components>,
}

struct Deployment {
    record: DeploymentRecord,
    /// None when its bundle could not be loaded at a restart (the status
    /// says why); a resume tries again.
    loaded: Option<Loaded>,
    status: Arc<Mutex<Status>>,
    running: Option<Running>,
}

impl Deployment {
    fn topology<'a>(&'a self, name: &'a str) -> &'a str {
        self.record.topology.as_deref().unwrap_or(name)
    }
}

/// Why a call failed: the client's mistake (400, 404, 409) or the server's.
#[derive(Debug)]
pub enum DeployError {
    /// The request is wrong; the message says why.
    BadRequest(String),
    /// No such topology, or no such thing of it; the message names it.
    NotFound(String),
    /// The name is deployed already, or another call is working on it.
    Conflict(String),
    /// What the answer needs cannot be reached now (another host of the
    /// cluster); worth trying again.
    Unavailable(String),
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

fn not_deployed(name: &str) -> DeployError {
    DeployError::NotFound(format!("no topology {name} is deployed"))
}

/// A deployment's name is a redb table name's part, a URL's path segment,
/// a metrics label and a thread's name, never a file name: any printable
/// characters but `/`, at most [`MAX_DEPLOYMENT_NAME`] of them, and not
/// `.` or `..` (which a URL's path would read as a step).
pub fn check_name(name: &str) -> Result<(), DeployError> {
    let count = name.chars().count();
    let bad = count == 0 || count > MAX_DEPLOYMENT_NAME || name.contains('/') || name.chars().any(char::is_control);
    if bad || name == "." || name == ".." {
        return Err(DeployError::BadRequest(format!(
            "deployment name {name:?} must be 1 to {MAX_DEPLOYMENT_NAME} characters, without '/' or control \
             characters, and not . or .."
        )));
    }
    if name.trim() != name {
        return Err(DeployError::BadRequest(format!(
            "deployment name {name:?} must not begin or end with white space"
        )));
    }
    Ok(())
}

/// A claim on a name while a call changes its deployment.
struct Claim<'a> {
    busy: &'a Mutex<BTreeSet<String>>,
    name: String,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.busy.locked().remove(&self.name);
    }
}

/// What a deploy asks for.
pub struct DeployRequest {
    /// The deployment's name; the topology's when absent.
    pub name: Option<String>,
    /// The bundle's topology to deploy; needed when it defines several.
    pub topology: Option<String>,
    /// The input of the topology's spout, if it reads one.
    pub input: Option<PathBuf>,
}

/// The deployed topologies, by name.
pub struct Deployments {
    host: Arc<Host>,
    /// What runs, recorded across restarts.
    registry: Registry,
    deployed: Mutex<BTreeMap<String, Deployment>>,
    /// Names a deploy, upgrade, stop, resume or delete is working on.
    busy: Mutex<BTreeSet<String>>,
    /// Set once the server shuts down: nothing starts any more.
    closing: AtomicBool,
}

impl Deployments {
    /// The deployments of `host`, resuming every one recorded as running.
    /// One that cannot be loaded is listed as failed, with the reason.
    pub fn resume(host: Arc<Host>) -> Result<Deployments> {
        let deployments = Deployments {
            registry: Registry::new(Arc::clone(&host.db)),
            host,
            deployed: Mutex::new(BTreeMap::new()),
            busy: Mutex::new(BTreeSet::new()),
            closing: AtomicBool::new(false),
        };
        let mut deployed = deployments.lock();
        for (name, record) in deployments.registry.list()? {
            let mut deployment = Deployment { record, loaded: None, status: Arc::default(), running: None };
            let topology = deployment.topology(&name).to_owned();
            match deployments.load_stored(&deployment.record, &topology, &name) {
                Ok(loaded) => {
                    deployment.loaded = Some(loaded);
                    *deployments.status_of(&deployment) = Status { topology, ..Status::default() };
                    if deployment.record.running {
                        deployments.start(&name, &mut deployment)?;
                        tracing::info!("resumed topology {name}");
                    }
                }
                Err(e) => {
                    tracing::error!("cannot resume topology {name}: {e:#}");
                    let error = deployments.host.public(&format!("{e:#}"));
                    *deployments.status_of(&deployment) = Status::failed(&topology, error);
                }
            }
            deployed.insert(name, deployment);
        }
        deployments.sweep_bundles(&deployed);
        drop(deployed);
        Ok(deployments)
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Deployment>> {
        self.deployed.locked()
    }

    fn status_of<'a>(&self, deployment: &'a Deployment) -> MutexGuard<'a, Status> {
        deployment.status.locked()
    }

    /// Claims `name` for a change, or says another call is changing it.
    fn claim(&self, name: &str) -> Result<Claim<'_>, DeployError> {
        if !self.busy.locked().insert(name.to_owned()) {
            return Err(DeployError::Conflict(format!(
                "another call is deploying, upgrading, stopping or deleting topology {name}: try again when it is done"
            )));
        }
        Ok(Claim { busy: &self.busy, name: name.to_owned() })
    }

    /// Loads topology `topology` of the bundle at `path`, to be kept under
    /// `name`.
    fn load(&self, path: &Path, topology: &str, name: &str) -> Result<Loaded> {
        let host = &self.host;
        let mut loaded = load::topologies(&host.engine, &host.cache, path, &[topology.to_owned()], &host.sandbox)?;
        let loaded = loaded.remove(0);
        let mut plan = loaded.plan;
        Arc::make_mut(&mut plan).stored_as = name.to_owned();
        host.db.check_state_kinds(&plan.stored_as, &plan.states)?;
        Ok(Loaded { definition: loaded.definition, plan, components: loaded.components })
    }

    fn load_stored(&self, record: &DeploymentRecord, topology: &str, name: &str) -> Result<Loaded> {
        if !is_plain_file_name(&record.bundle) {
            bail!("its record names bundle {:?}, which is not a file of the bundles directory", record.bundle);
        }
        self.load(&self.host.bundles.join(&record.bundle), topology, name)
    }

    /// Loads an uploaded bundle's `topology` for `name` from `staged`;
    /// errors name the bundle as the upload.
    fn load_staged(&self, staged: &Staged, topology: &str, name: &str) -> Result<Loaded, DeployError> {
        self.load(&staged.path, topology, name).map_err(|e| {
            let message = format!("{e:#}").replace(&staged.path.display().to_string(), "the uploaded bundle");
            DeployError::BadRequest(message)
        })
    }

    fn check_input(&self, loaded: &Loaded, name: &str, input: Option<&Path>) -> Result<(), DeployError> {
        let definition = &loaded.definition;
        let Some(spout) = definition.spout() else {
            return Err(DeployError::BadRequest(format!(
                "topology {} has no spout: it only answers queries, so there is nothing to run",
                definition.name
            )));
        };
        let env = spout::SpoutEnv {
            topology: &definition.name,
            stored_as: name,
            scope: &self.host.inputs,
            input,
            batch_size: self.host.run.batch_size,
            nats: self.host.nats.as_ref(),
            kafka: self.host.kafka.as_ref(),
            follows: true,
        };
        spout::check_input(spout, &env).map_err(bad)?;
        weir_io::sink::check_server(&loaded.plan, self.host.nats.as_ref(), self.host.kafka.as_ref()).map_err(bad)
    }

    /// Removes bundle `file` unless a deployment still runs from it.
    fn forget_bundle(&self, deployed: &BTreeMap<String, Deployment>, file: &str) {
        if is_plain_file_name(file) && !deployed.values().any(|d| d.record.bundle == file) {
            let _ = std::fs::remove_file(self.host.bundles.join(file));
        }
    }

    /// Removes what a crash left in the bundles directory: staged uploads
    /// and bundles no deployment runs from.
    fn sweep_bundles(&self, deployed: &BTreeMap<String, Deployment>) {
        let Ok(entries) = std::fs::read_dir(&self.host.bundles) else { return };
        for entry in entries.flatten() {
            let Ok(file) = entry.file_name().into_string() else { continue };
            if file.ends_with(STAGED_SUFFIX) || !deployed.values().any(|d| d.record.bundle == file) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }

    /// The topology `bundle` is deployed for: `chosen`, or its only one.
    fn choose_topology(bundle: &Bundle, chosen: Option<String>) -> Result<String, DeployError> {
        let names: Vec<&str> = bundle.manifest.topologies.iter().map(|t| t.definition.name.as_str()).collect();
        match (chosen, names.as_slice()) {
            (Some(chosen), _) if names.contains(&chosen.as_str()) => Ok(chosen),
            (Some(chosen), _) => Err(DeployError::BadRequest(format!(
                "the bundle defines no topology {chosen:?} (it defines {names:?})"
            ))),
            (None, [only]) => Ok((*only).to_owned()),
            (None, []) => Err(DeployError::BadRequest("the bundle defines no topology".into())),
            (None, _) => {
                Err(DeployError::BadRequest(format!("the bundle defines {names:?}: choose one with ?topology=")))
            }
        }
    }

    /// Deploys a topology of an uploaded bundle under its name and starts it.
    /// A refused deploy leaves nothing behind: no bundle, no record, no state.
    pub fn deploy(&self, request: DeployRequest, bytes: &[u8]) -> Result<Status, DeployError> {
        let (name, topology) = Self::target(&request, bytes)?;
        let _claim = self.claim(&name)?;
        if self.lock().contains_key(&name) {
            return Err(DeployError::Conflict(format!(
                "topology {name} is deployed already: upgrade or delete it, or deploy under another ?name="
            )));
        }
        self.refuse_past_max(self.lock().len())?;
        let (staged, loaded) = self.stage_checked(&request, bytes, &topology, &name)?;
        let mut deployed = self.lock();
        self.refuse_when_closing()?;
        // Again: other deploys may have ended while this one loaded.
        self.refuse_past_max(deployed.len())?;
        let file = staged.keep(&self.host.bundles)?;
        let record = DeploymentRecord {
            bundle: file,
            topology: Some(topology),
            input: request.input,
            running: true,
            deployed_unix_ms: Some(now_unix_ms()),
            upgrades: Vec::new(),
        };
        let mut deployment = Deployment { record, loaded: Some(loaded), status: Arc::default(), running: None };
        let started = self.save(&name, &deployment.record).and_then(|()| self.start(&name, &mut deployment));
        if let Err(e) = started {
            // Only the record: state kept from an earlier deployment of the name stays.
            let _ = self.registry.forget(&name, false);
            self.forget_bundle(&deployed, &deployment.record.bundle);
            return Err(e.into());
        }
        let status = self.status_of(&deployment).clone();
        deployed.insert(name, deployment);
        Ok(status)
    }

    /// Refuses a deploy where `deployed` topologies are as many as the host
    /// allows.
    pub fn refuse_past_max(&self, deployed: usize) -> Result<(), DeployError> {
        let max = self.host.max_deployments;
        if deployed >= max {
            return Err(DeployError::Conflict(format!(
                "{deployed} topologies are deployed, the most this server allows (--max-deployments {max}): \
                 delete one first"
            )));
        }
        Ok(())
    }

    /// Checks an upload as [`Deployments::deploy`] would, without running
    /// it: the bundle loads, the topology and name are good and the spout's
    /// input is there. Keeps the bundle in the bundles directory, where a
    /// cluster's hosts keep theirs; returns the name and the topology as
    /// loaded.
    pub fn check_upload(&self, request: &DeployRequest, bytes: &[u8]) -> Result<(String, Loaded), DeployError> {
        let (name, topology) = Self::target(request, bytes)?;
        if self.lock().contains_key(&name) {
            return Err(DeployError::Conflict(format!(
                "topology {name} is deployed on this host outside the cluster: delete it, or deploy under another ?name="
            )));
        }
        let (staged, loaded) = self.stage_checked(request, bytes, &topology, &name)?;
        staged.keep(&self.host.bundles)?;
        Ok((name, loaded))
    }

    /// The name and topology an upload is to be deployed as.
    fn target(request: &DeployRequest, bytes: &[u8]) -> Result<(String, String), DeployError> {
        let bundle = Bundle::from_bytes(Path::new("upload"), bytes).map_err(bad)?;
        let topology = Self::choose_topology(&bundle, request.topology.clone())?;
        let name = request.name.clone().unwrap_or_else(|| topology.clone());
        check_name(&name)?;
        Ok((name, topology))
    }

    /// An upload staged and loaded as `topology` for `name`, its spout's
    /// input checked.
    fn stage_checked(
        &self,
        request: &DeployRequest,
        bytes: &[u8],
        topology: &str,
        name: &str,
    ) -> Result<(Staged, Loaded), DeployError> {
        let staged = Staged::write(&self.host.bundles, bytes)?;
        let loaded = self.load_staged(&staged, topology, name)?;
        self.check_input(&loaded, name, request.input.as_deref())?;
        Ok((staged, loaded))
    }

    /// Loads topology `topology` of a cluster's bundle, `bytes`, for
    /// deployment `name`, keeping the bundle in the bundles directory.
    pub fn load_cluster_bundle(&self, bytes: &[u8], topology: &str, name: &str) -> Result<Loaded> {
        let staged = Staged::write(&self.host.bundles, bytes)?;
        let loaded = self.load(&staged.path, topology, name)?;
        staged.keep(&self.host.bundles)?;
        Ok(loaded)
    }

    fn refuse_when_closing(&self) -> Result<(), DeployError> {
        if self.closing.load(Ordering::SeqCst) {
            return Err(DeployError::Conflict("the server is shutting down".into()));
        }
        Ok(())
    }

    fn save(&self, name: &str, record: &DeploymentRecord) -> Result<()> {
        self.registry.save(name, record)
    }

    /// Starts `deployment`'s coordinator on a thread of its own.
    fn start(&self, name: &str, deployment: &mut Deployment) -> Result<()> {
        let loaded = deployment.loaded.clone().context("the topology is not loaded")?;
        let host = Arc::clone(&self.host);
        let input = deployment.record.input.clone();
        let status = Arc::clone(&deployment.status);
        let stop = Arc::new(AtomicBool::new(false));
        let stop_flag = Arc::clone(&stop);
        let name = name.to_owned();
        let topology = loaded.definition.name.clone();
        let last_committed = host.db.progress(&name)?.last_committed;
        *self.status_of(deployment) =
            Status { topology: topology.clone(), state: RunState::Running, last_committed, ..Status::default() };
        let thread = std::thread::Builder::new().name(format!("weir-{name}")).spawn(move || {
            let started = Instant::now();
            let outcome = (|| {
                let spout_def = loaded.definition.spout().context("the topology has no spout")?;
                let spout_component = Arc::clone(loaded.components.for_operator(SPOUT_ID));
                let guest = Some((spout_component, loaded.plan.sandboxes.of(SPOUT_ID).clone()));
                let env = spout::SpoutEnv {
                    topology: &topology,
                    stored_as: &name,
                    scope: &host.inputs,
                    input: input.as_deref(),
                    batch_size: host.run.batch_size,
                    nats: host.nats.as_ref(),
                    kafka: host.kafka.as_ref(),
                    follows: true,
                };
                let mut spout = spout::open(spout_def, &env, guest)?;
                let mut sinks = weir_io::sink::Publisher::open(&loaded.plan, host.nats.as_ref(), host.kafka.as_ref())?;
                coordinator::run(
                    &*host.db,
                    Arc::clone(&loaded.plan),
                    OperatorSource::Wasm(Arc::clone(&loaded.components)),
                    &mut *spout,
                    sinks.as_mut(),
                    &host.run,
                    &stop_flag,
                    &mut |report| {
                        *status.locked() = Status::of(RunState::Running, &topology, report, &host);
                    },
                )
            })();
            let mut status = status.locked();
            match outcome {
                Ok(report) => *status = Status::of(RunState::Stopped, &topology, &report, &host),
                Err(e) => {
                    tracing::error!("topology {name} failed after {:.1}s: {e:#}", started.elapsed().as_secs_f64());
                    status.state = RunState::Failed;
                    status.error = Some(host.public(&format!("{e:#}")));
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
            let deployment = deployed.get_mut(name).ok_or_else(|| not_deployed(name))?;
            if remember {
                deployment.record.running = false;
                self.save(name, &deployment.record)?;
            }
            deployment.running.take()
        };
        if let Some(running) = running {
            running.stop.store(true, Ordering::SeqCst);
            let _ = running.thread.join();
        }
        Ok(())
    }

    /// Stops topology `name`; it stays stopped across restarts.
    pub fn stop(&self, name: &str) -> Result<Status, DeployError> {
        let _claim = self.claim(name)?;
        self.halt(name, true)?;
        self.status(name)
    }

    /// Starts a stopped topology again.
    pub fn resume_one(&self, name: &str) -> Result<Status, DeployError> {
        let _claim = self.claim(name)?;
        let (record, loaded) = {
            let mut deployed = self.lock();
            let deployment = deployed.get_mut(name).ok_or_else(|| not_deployed(name))?;
            // A coordinator that ended (the topology failed) is joined; a running one refuses.
            match deployment.running.take() {
                Some(running) if running.thread.is_finished() => drop(running.thread.join()),
                Some(running) => {
                    deployment.running = Some(running);
                    return Err(DeployError::Conflict(format!("topology {name} is running")));
                }
                None => {}
            }
            (deployment.record.clone(), deployment.loaded.clone())
        };
        let loaded = match loaded {
            Some(loaded) => loaded,
            None => {
                let topology = record.topology.as_deref().unwrap_or(name);
                self.load_stored(&record, topology, name).map_err(bad)?
            }
        };
        let mut deployed = self.lock();
        self.refuse_when_closing()?;
        let deployment = deployed.get_mut(name).ok_or_else(|| not_deployed(name))?;
        deployment.loaded = Some(loaded);
        deployment.record.running = true;
        self.save(name, &deployment.record)?;
        self.start(name, deployment)?;
        Ok(self.status_of(deployment).clone())
    }

    /// Answers query `query` of topology `name` with `args`, over its
    /// committed state: the result tuples.
    pub fn query(&self, name: &str, query: &str, args: &str) -> Result<Vec<Vec<Value>>, DeployError> {
        let loaded = {
            let deployed = self.lock();
            let deployment = deployed.get(name).ok_or_else(|| not_deployed(name))?;
            deployment
                .loaded
                .clone()
                .ok_or_else(|| DeployError::BadRequest(format!("topology {name} is not loaded: its status says why")))?
        };
        if !loaded.plan.queries.contains_key(query) {
            let known: Vec<&String> = loaded.plan.queries.keys().collect();
            return Err(DeployError::NotFound(format!("topology {name} has no query {query:?} (queries: {known:?})")));
        }
        let source = OperatorSource::Wasm(Arc::clone(&loaded.components));
        weir_engine::exec::query(&self.host.db, &loaded.plan, &source, query, args).map_err(bad)
    }

    /// The names of the fields of query `query`'s result tuples, in order.
    pub fn query_fields(&self, name: &str, query: &str) -> Result<Vec<String>, DeployError> {
        let deployed = self.lock();
        let deployment = deployed.get(name).ok_or_else(|| not_deployed(name))?;
        let loaded = deployment
            .loaded
            .as_ref()
            .ok_or_else(|| DeployError::BadRequest(format!("topology {name} is not loaded: its status says why")))?;
        match loaded.plan.query_nodes(query) {
            Some((_, answer)) => Ok(loaded.plan.nodes[answer].fields.clone()),
            None => {
                let known: Vec<&String> = loaded.plan.queries.keys().collect();
                Err(DeployError::NotFound(format!("topology {name} has no query {query:?} (queries: {known:?})")))
            }
        }
    }

    /// Topology `name`'s definition: its stream graph, as `weir inspect`
    /// shows it.
    pub fn definition(&self, name: &str) -> Result<TopologyDef, DeployError> {
        let deployed = self.lock();
        let deployment = deployed.get(name).ok_or_else(|| not_deployed(name))?;
        match &deployment.loaded {
            Some(loaded) => Ok(loaded.definition.clone()),
            None => Err(DeployError::BadRequest(format!("topology {name} is not loaded: its status says why"))),
        }
    }

    /// The states topology `name` declares.
    pub fn states(&self, name: &str) -> Result<Vec<String>, DeployError> {
        let deployed = self.lock();
        let deployment = deployed.get(name).ok_or_else(|| not_deployed(name))?;
        Ok(match &deployment.loaded {
            Some(loaded) => loaded.plan.states.keys().cloned().collect(),
            // Not loaded: whatever it stored.
            None => self.host.db.states(name).map_err(anyhow::Error::from)?,
        })
    }

    /// Swaps topology `name`'s bundle at a batch boundary, keeping its state.
    /// Refused when the new bundle changes a state's kind or the WIT major;
    /// a refused upgrade changes nothing and leaves nothing behind.
    pub fn upgrade(&self, name: &str, bytes: &[u8]) -> Result<Status, DeployError> {
        let _claim = self.claim(name)?;
        let (topology, old) = {
            let deployed = self.lock();
            let deployment = deployed.get(name).ok_or_else(|| not_deployed(name))?;
            let old = deployment.loaded.as_ref().map(|l| load::state_kinds(&l.definition));
            (deployment.topology(name).to_owned(), old)
        };
        let upload = Bundle::from_bytes(Path::new("upload"), bytes).map_err(bad)?;
        if !supports_wit(&upload.manifest.wit) {
            return Err(DeployError::BadRequest(format!("the bundle targets {}", upload.manifest.wit)));
        }
        Self::choose_topology(&upload, Some(topology.clone()))?;
        let staged = Staged::write(&self.host.bundles, bytes)?;
        let loaded = self.load_staged(&staged, &topology, name)?;
        let new = load::state_kinds(&loaded.definition);
        if let Some(old) = old.filter(|old| old != &new) {
            return Err(DeployError::BadRequest(format!(
                "the upgrade changes topology {name}'s states ({old:?} -> {new:?}); deploy it under a new name instead"
            )));
        }
        self.halt(name, false)?;
        let mut deployed = self.lock();
        self.refuse_when_closing()?;
        let file = staged.keep(&self.host.bundles)?;
        let deployment = deployed.get_mut(name).ok_or_else(|| not_deployed(name))?;
        let old_file = std::mem::replace(&mut deployment.record.bundle, file);
        let upgrades = &mut deployment.record.upgrades;
        upgrades.push(Upgrade {
            at_unix_ms: now_unix_ms(),
            from: old_file.clone(),
            to: deployment.record.bundle.clone(),
        });
        upgrades.drain(..upgrades.len().saturating_sub(UPGRADES_KEPT));
        deployment.record.running = true;
        deployment.loaded = Some(loaded);
        self.save(name, &deployment.record)?;
        self.start(name, deployment)?;
        let status = self.status_of(deployment).clone();
        self.forget_bundle(&deployed, &old_file);
        Ok(status)
    }

    /// Deletes topology `name`, keeping or dropping its state.
    pub fn delete(&self, name: &str, drop_state: bool) -> Result<(), DeployError> {
        let _claim = self.claim(name)?;
        self.halt(name, false)?;
        self.registry.forget(name, drop_state)?;
        let mut deployed = self.lock();
        if let Some(deployment) = deployed.remove(name) {
            self.forget_bundle(&deployed, &deployment.record.bundle);
        }
        Ok(())
    }

    /// How topology `name` is doing.
    pub fn status(&self, name: &str) -> Result<Status, DeployError> {
        let deployed = self.lock();
        let deployment = deployed.get(name).ok_or_else(|| not_deployed(name))?;
        Ok(self.described(name, deployment, true))
    }

    /// Every deployed topology's name and status.
    pub fn list(&self) -> Vec<(String, Status)> {
        self.lock().iter().map(|(name, d)| (name.clone(), self.described(name, d, true))).collect()
    }

    /// [`Deployments::list`] without what is read from the committed state
    /// (open windows): the figures the history samples every second.
    pub fn list_figures(&self) -> Vec<(String, Status)> {
        self.lock().iter().map(|(name, d)| (name.clone(), self.described(name, d, false))).collect()
    }

    /// How far a topology that does not run is behind its input now (its
    /// last run's figure would stay as it was while the input grows), for
    /// the spouts that read a local input, asked cheaply: a file's or a
    /// directory's lines, a generator. None for the others, or where the
    /// input cannot be read.
    fn lag_at_rest(&self, name: &str, deployment: &Deployment) -> Option<u64> {
        let loaded = deployment.loaded.as_ref()?;
        let def = loaded.definition.spout()?;
        let local = matches!(
            def,
            weir_sdk::topology::SpoutDef::FileLines { .. }
                | weir_sdk::topology::SpoutDef::DirectoryLines { .. }
                | weir_sdk::topology::SpoutDef::Generator { .. }
        );
        if !local {
            return None;
        }
        let topology = deployment.topology(name);
        let env = spout::SpoutEnv {
            topology,
            stored_as: name,
            scope: &self.host.inputs,
            input: deployment.record.input.as_deref(),
            batch_size: self.host.run.batch_size,
            nats: None,
            kafka: None,
            follows: false,
        };
        let mut spout = spout::open(def, &env, None).ok()?;
        let progress = self.host.db.progress(name).ok()?;
        let last = progress.last_committed;
        let committed = progress.batches.iter().find(|(txid, _)| *txid == last).map(|(_, r)| r.spout.clone());
        if last > 0 && committed.is_none() {
            return None;
        }
        spout.lag(committed.as_deref())
    }

    /// A deployment's status with what its record says of it.
    fn described(&self, name: &str, deployment: &Deployment, with_state: bool) -> Status {
        let mut status = self.status_of(deployment).clone();
        if with_state && let Some(loaded) = &deployment.loaded {
            match weir_engine::exec::open_windows(&self.host.db, &loaded.plan) {
                Ok(open) => status.open_windows = open,
                Err(e) => tracing::warn!("topology {name}: its open windows could not be read: {e:#}"),
            }
        }
        if status.started_unix_ms > 0 {
            status.uptime_s = now_unix_ms().saturating_sub(status.started_unix_ms) as f64 / 1e3;
        }
        if status.state != RunState::Running
            && let Some(lag) = self.lag_at_rest(name, deployment)
        {
            status.spout_lag = Some(lag);
        }
        status.spout_lag_unit = deployment.loaded.as_ref().and_then(|l| l.definition.spout()).and_then(|spout| {
            use weir_sdk::topology::SpoutDef;
            match spout {
                SpoutDef::FileLines { .. } | SpoutDef::DirectoryLines { .. } => Some("bytes"),
                SpoutDef::JetStream(_) => Some("messages"),
                SpoutDef::Kafka(_) => Some("records"),
                SpoutDef::Generator { .. } => Some("integers"),
                SpoutDef::Guest { .. } => None,
            }
        });
        let record = &deployment.record;
        status.deployment = Some(Deployed {
            bundle: record.bundle.clone(),
            input: record.input.clone(),
            deployed_unix_ms: record.deployed_unix_ms,
            upgrades: record.upgrades.clone(),
        });
        status
    }

    /// Whether topology `name` is deployed.
    pub fn contains(&self, name: &str) -> bool {
        self.lock().contains_key(name)
    }

    /// Stops every topology at a batch boundary, all at once, leaving their
    /// records as they are (a restarted server resumes them), and waits for
    /// them at most `within`. Nothing starts afterwards. Returns the names
    /// of those still running then: their uncommitted batches replay at the
    /// next start.
    pub fn shutdown(&self, within: Duration) -> Vec<String> {
        let running: Vec<(String, Running)> = {
            let mut deployed = self.lock();
            self.closing.store(true, Ordering::SeqCst);
            deployed.iter_mut().filter_map(|(name, d)| d.running.take().map(|r| (name.clone(), r))).collect()
        };
        for (_, running) in &running {
            running.stop.store(true, Ordering::SeqCst);
        }
        let deadline = Instant::now() + within;
        while running.iter().any(|(_, r)| !r.thread.is_finished()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut unstopped = Vec::new();
        for (name, running) in running {
            if running.thread.is_finished() {
                let _ = running.thread.join();
            } else {
                unstopped.push(name);
            }
        }
        unstopped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deployment_names_are_printable_without_slashes() {
        for good in ["word-count", "wc two", "a\"b\\c", "é", &"x".repeat(MAX_DEPLOYMENT_NAME)] {
            assert!(check_name(good).is_ok(), "{good:?}");
        }
        let long = "x".repeat(MAX_DEPLOYMENT_NAME + 1);
        for bad in ["", ".", "..", "../x", "/tmp/x", "a/b", "a\nb", "a\0b", " a", "a ", &long] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn old_records_still_read_and_name_their_topology_by_the_deployment() {
        let old: DeploymentRecord =
            serde_json::from_str(r#"{"bundle":"wc-0123456789abcdef.weir","input":"in/c.txt","running":true}"#).unwrap();
        assert_eq!(old.topology, None);
        assert!(is_plain_file_name(&old.bundle));
        for bad in ["../x.weir", "/tmp/x.weir", ".hidden", "", "a\\b"] {
            assert!(!is_plain_file_name(bad), "{bad:?}");
        }
    }
}

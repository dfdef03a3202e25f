//! What the server's calls and tasks share: the host, its deployments and
//! their history, what was asked of every request, and what this host
//! knows of its cluster; and how a call's answer or refusal is written.

use super::deployments::{DeployError, Deployments};
use super::history::History;
use super::host::Host;
use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use weir_cluster::Membership;
use weir_cluster::coordinator::LeaderFigures;
use weir_cluster::plan::ClusterPlan;
use weir_cluster::worker::HostFigures;
use weir_config::HISTORY_INTERVAL;

/// What every call and background task of the server shares.
pub(super) struct App {
    pub(super) host: Arc<Host>,
    pub(super) deployments: Deployments,
    pub(super) history: History,
    /// The token's SHA-256: compared in constant time, whatever its length.
    pub(super) token: Option<[u8; 32]>,
    pub(super) max_upload: usize,
    pub(super) body_timeout: Duration,
    /// Room for the request bodies held at once.
    pub(super) bodies: BodyRoom,
    /// Set once the runtime runs, in cluster mode.
    pub(super) cluster: std::sync::OnceLock<Membership>,
    /// The cluster's bundles this host has loaded, or failed to.
    pub(super) cluster_bundles: BundlesLoaded,
    /// The cluster's topologies as loaded here.
    pub(super) cluster_plans: Plans,
    /// What this host did for each cluster topology.
    pub(super) cluster_figures: Figures,
    /// What every host of the cluster did, as they last shared it.
    pub(super) cluster_shared_figures: SharedFigures,
}

/// The server's state, as handlers and tasks hold it.
pub(super) type Shared = Arc<App>;

/// How each cluster bundle fared on this host, by the bundle's digest.
pub(super) type BundlesLoaded = std::sync::Mutex<BTreeMap<String, Result<(), String>>>;

/// Each cluster topology's plan as loaded on this host, with its bundle's
/// digest.
pub(super) type Plans = std::sync::Mutex<BTreeMap<String, (String, Arc<ClusterPlan>)>>;

/// What this host did for each cluster topology: as a worker, and as the
/// leader's coordinator.
pub(super) type Figures =
    std::sync::Mutex<BTreeMap<String, (Arc<std::sync::Mutex<HostFigures>>, Arc<std::sync::Mutex<LeaderFigures>>)>>;

/// Every host's figures for each cluster topology, as they last shared
/// them through etcd: by topology, then host.
pub(super) type SharedFigures = std::sync::Mutex<BTreeMap<String, BTreeMap<String, Value>>>;

/// An answer with `status` whose body says what went wrong.
pub(super) fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({ "error": message.into() }))).into_response()
}

impl App {
    /// The answer to a refused call; its message never names a server path.
    pub(super) fn refusal(&self, e: DeployError) -> Response {
        match e {
            DeployError::BadRequest(m) => error(StatusCode::BAD_REQUEST, self.host.public(&m)),
            DeployError::NotFound(m) => error(StatusCode::NOT_FOUND, self.host.public(&m)),
            DeployError::Conflict(m) => error(StatusCode::CONFLICT, self.host.public(&m)),
            DeployError::Unavailable(m) => error(StatusCode::SERVICE_UNAVAILABLE, self.host.public(&m)),
            DeployError::Internal(e) => {
                tracing::error!("{e:#}");
                error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("the server failed: {}", self.host.public(&format!("{e:#}"))),
                )
            }
        }
    }

    /// `result` as an answer with `status`, or its refusal.
    pub(super) fn answer<T: serde::Serialize>(&self, status: StatusCode, result: Result<T, DeployError>) -> Response {
        match result {
            Ok(value) => (status, Json(value)).into_response(),
            Err(e) => self.refusal(e),
        }
    }
}

/// Largest uploads the server holds at once: their bytes stay in memory
/// from the first byte read until the call is answered (a deployment's
/// compile included), and many clients at once must not take the host's
/// memory. More wait for room, within their body timeout.
pub(super) const BODIES_AT_ONCE: usize = 4;

/// Room for request bodies, in KiB: a call takes room for its body before
/// reading it and gives it back once answered.
pub(super) struct BodyRoom {
    room: Arc<tokio::sync::Semaphore>,
    kib: u32,
}

impl BodyRoom {
    pub(super) fn new(bytes: usize) -> BodyRoom {
        let kib = Self::kib(bytes);
        BodyRoom { room: Arc::new(tokio::sync::Semaphore::new(kib as usize)), kib }
    }

    fn kib(bytes: usize) -> u32 {
        u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX)
    }

    /// Waits until `bytes` fit beside the bodies held (never more than all
    /// of the room).
    pub(super) async fn reserve(&self, bytes: usize) -> tokio::sync::OwnedSemaphorePermit {
        let kib = Self::kib(bytes).min(self.kib);
        Arc::clone(&self.room).acquire_many_owned(kib).await.expect("the room is never closed")
    }
}

/// Samples saved to the history's file every so many samples.
const SAVE_EVERY: u32 = 10;

/// The file the dashboard's history is kept in, in the data directory.
pub(super) fn history_file(host: &Host) -> std::path::PathBuf {
    host.bundles.parent().unwrap_or(&host.bundles).join("history.json")
}

/// Samples every deployment's figures into the history, forever, saving
/// them now and then.
pub(super) async fn sample(app: Shared) {
    let mut every = tokio::time::interval(HISTORY_INTERVAL);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let file = history_file(&app.host);
    for taken in 1u32.. {
        every.tick().await;
        app.history.record(|| app.deployments.list_figures(), Instant::now(), SystemTime::now());
        if taken % SAVE_EVERY == 0 {
            let (app, to) = (Arc::clone(&app), file.clone());
            let saved = tokio::task::spawn_blocking(move || app.history.save(&to)).await;
            if let Ok(Err(e)) = saved {
                tracing::warn!("saving the dashboard's history to {} failed: {e}", file.display());
            }
        }
    }
}

//! `weir-server`: the HTTP API and the dashboard over the engine, on one
//! host or in a cluster.
//!
//! `weir serve`: a long-running host for any number of topologies, driven
//! over an HTTP JSON API.
//!
//! What a client sends is bounded before it is handled: headers must arrive
//! within `--header-timeout-ms`, a body within `--body-timeout-ms`, and a
//! body declared larger than `--max-upload-mib` is refused at once. Without
//! a token, a call must come from this machine and not from a web page.
//! The dashboard at `/` calls the same API, with the same token.

mod app;
mod auth;
mod bundles;
mod clustered;
mod connections;
mod dashboard;
pub mod deployments;
mod history;
mod host;
mod metrics;
pub mod registry;
mod routes;
mod state_summary;
mod status;

use app::{App, BODIES_AT_ONCE, BodyRoom, sample};
use auth::sha256;
use connections::{accept, connection_limit};
use deployments::{Deployments, Host};
use history::History;
use routes::router;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use weir_cluster::{ClusterConfig, Membership};

/// How a server is set up.
pub struct ServeConfig {
    /// What the server runs topologies with.
    pub host: Host,
    /// Address to listen on.
    pub listen: SocketAddr,
    /// The token every API call must bear, if any.
    pub token: Option<String>,
    /// Largest request body (a bundle upload), in bytes.
    pub max_upload: usize,
    /// Time a client may take to send a request's headers.
    pub header_timeout: Duration,
    /// Client connections served at once.
    pub max_connections: usize,
    /// Time a client may take to send a request's body.
    pub body_timeout: Duration,
    /// Time the topologies get to stop at a batch boundary on SIGTERM or
    /// SIGINT before the server exits regardless.
    pub shutdown_timeout: Duration,
    /// The cluster this server joins, if any.
    pub cluster: Option<ClusterConfig>,
}

/// Serves until interrupted (SIGINT or SIGTERM), then stops every topology
/// at a batch boundary, waiting for them at most the shutdown timeout.
pub fn serve(config: ServeConfig) -> anyhow::Result<()> {
    if !config.listen.ip().is_loopback() && config.token.is_none() {
        anyhow::bail!("refusing to listen on {} without a token: give one with --token-file", config.listen);
    }
    let host = Arc::new(config.host);
    let deployments = Deployments::resume(Arc::clone(&host))?;
    let history = History::default();
    if let Err(e) = history.restore(&app::history_file(&host), std::time::Instant::now()) {
        // The charts start afresh; nothing committed is lost.
        tracing::warn!("{e:#}");
    }
    let app = Arc::new(App {
        host,
        deployments,
        history,
        token: config.token.as_deref().map(|t| sha256(t.as_bytes())),
        max_upload: config.max_upload,
        body_timeout: config.body_timeout,
        bodies: BodyRoom::new(config.max_upload.saturating_mul(BODIES_AT_ONCE)),
        cluster: std::sync::OnceLock::new(),
        cluster_bundles: Default::default(),
        cluster_plans: Default::default(),
        cluster_figures: Default::default(),
        cluster_shared_figures: Default::default(),
    });
    let cluster = config.cluster;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let mut connections = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(config.listen).await?;
        let address = listener.local_addr()?;
        tracing::info!("listening on {address}");
        println!("listening on {address}");
        if let Some(cluster) = cluster {
            let _ =
                app.cluster.set(Membership::start(cluster.listening_at(address), &tokio::runtime::Handle::current()));
            tokio::spawn(clustered::load_bundles(Arc::clone(&app)));
            tokio::spawn(clustered::fence_own_slots(Arc::clone(&app)));
            tokio::spawn(clustered::run_topologies(Arc::clone(&app)));
            tokio::spawn(clustered::answer_reads(Arc::clone(&app)));
            tokio::spawn(clustered::share_figures(Arc::clone(&app)));
        }
        tokio::spawn(sample(Arc::clone(&app)));
        let max_connections = connection_limit(config.max_connections);
        anyhow::Ok(accept(listener, router(Arc::clone(&app)), config.header_timeout, max_connections).await)
    })?;
    if let Some(membership) = app.cluster.get() {
        runtime.block_on(membership.leave());
    }
    tracing::info!("stopping every topology at a batch boundary");
    let unstopped = app.deployments.shutdown(config.shutdown_timeout);
    if let Err(e) = app.history.save(&app::history_file(&app.host)) {
        tracing::warn!("saving the dashboard's history failed: {e}");
    }
    if !unstopped.is_empty() {
        tracing::warn!(
            "topologies {unstopped:?} did not stop within {} ms; exiting anyway: their uncommitted batches replay at the next start",
            config.shutdown_timeout.as_millis()
        );
    }
    // Answers in flight get a moment to go out; the rest are cut.
    runtime.block_on(async {
        let _ =
            tokio::time::timeout(Duration::from_secs(1), async { while connections.join_next().await.is_some() {} })
                .await;
    });
    runtime.shutdown_background();
    Ok(())
}

//! `weir serve`: a long-running host for any number of topologies, driven
//! over an HTTP JSON API.

pub mod deployments;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use deployments::{DeployError, Deployments, Host, Status};
use serde::Deserialize;
use serde_json::json;
use std::fmt::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// How a server is set up.
pub struct ServeConfig {
    /// What the server runs topologies with.
    pub host: Host,
    /// Address to listen on.
    pub listen: SocketAddr,
    /// The token every API call must bear, if any.
    pub token: Option<String>,
    /// Largest bundle upload, in bytes.
    pub max_upload: usize,
}

struct App {
    deployments: Deployments,
    token: Option<String>,
}

type Shared = Arc<App>;

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({ "error": message.into() }))).into_response()
}

impl IntoResponse for DeployError {
    fn into_response(self) -> Response {
        match self {
            DeployError::BadRequest(m) => error(StatusCode::BAD_REQUEST, m),
            DeployError::NotFound(name) => error(StatusCode::NOT_FOUND, format!("no topology {name} is deployed")),
            DeployError::Internal(e) => {
                tracing::error!("{e:#}");
                error(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}"))
            }
        }
    }
}

/// Compares without an early exit, so that timing reveals nothing of the token.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    let mut difference = a.len() ^ b.len();
    for (i, byte) in a.iter().enumerate() {
        difference |= usize::from(byte ^ b.get(i).copied().unwrap_or(0));
    }
    difference == 0
}

async fn authorize(State(app): State<Shared>, headers: HeaderMap, request: Request, next: Next) -> Response {
    if let Some(token) = &app.token {
        let presented = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or_default();
        if !same_secret(presented.as_bytes(), token.as_bytes()) {
            return error(StatusCode::UNAUTHORIZED, "a valid `Authorization: Bearer <token>` header is required");
        }
    }
    next.run(request).await
}

/// Runs blocking work (compiling, joining threads) off the async runtime.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, DeployError> + Send + 'static,
) -> Result<T, DeployError> {
    tokio::task::spawn_blocking(work).await.map_err(|e| DeployError::Internal(anyhow::anyhow!("{e}")))?
}

#[derive(Deserialize)]
struct DeployQuery {
    topology: Option<String>,
    input: Option<PathBuf>,
}

fn status_json(name: &str, status: &Status) -> serde_json::Value {
    let mut value = serde_json::to_value(status).unwrap_or_default();
    value["name"] = json!(name);
    value
}

async fn deploy(
    State(app): State<Shared>,
    Query(query): Query<DeployQuery>,
    body: Bytes,
) -> Result<Response, DeployError> {
    let name = match query.topology {
        Some(name) => name,
        None => {
            let names = deployments::bundle_names(&body).map_err(|e| DeployError::BadRequest(format!("{e:#}")))?;
            match names.as_slice() {
                [only] => only.clone(),
                _ => {
                    return Err(DeployError::BadRequest(format!(
                        "the bundle defines {names:?}: choose with ?topology="
                    )));
                }
            }
        }
    };
    let status = blocking({
        let (app, name) = (Arc::clone(&app), name.clone());
        move || app.deployments.deploy(&name, &body, query.input)
    })
    .await?;
    Ok((StatusCode::CREATED, Json(status_json(&name, &status))).into_response())
}

async fn list(State(app): State<Shared>) -> Json<serde_json::Value> {
    Json(json!(app.deployments.list().iter().map(|(name, status)| status_json(name, status)).collect::<Vec<_>>()))
}

async fn status(State(app): State<Shared>, Path(name): Path<String>) -> Result<Json<serde_json::Value>, DeployError> {
    Ok(Json(status_json(&name, &app.deployments.status(&name)?)))
}

/// Runs `action` on deployment `name` off the async runtime (it may compile
/// or wait for a batch boundary) and answers with its status.
async fn act(
    app: Shared,
    name: String,
    action: impl FnOnce(&Deployments, &str) -> Result<Status, DeployError> + Send + 'static,
) -> Result<Json<serde_json::Value>, DeployError> {
    let status = blocking({
        let name = name.clone();
        move || action(&app.deployments, &name)
    })
    .await?;
    Ok(Json(status_json(&name, &status)))
}

async fn stop(State(app): State<Shared>, Path(name): Path<String>) -> Result<Json<serde_json::Value>, DeployError> {
    act(app, name, Deployments::stop).await
}

async fn resume(State(app): State<Shared>, Path(name): Path<String>) -> Result<Json<serde_json::Value>, DeployError> {
    act(app, name, Deployments::resume_one).await
}

async fn upgrade(
    State(app): State<Shared>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<serde_json::Value>, DeployError> {
    act(app, name, move |deployments, name| deployments.upgrade(name, &body)).await
}

async fn logs(State(app): State<Shared>, Path(name): Path<String>) -> Result<Json<serde_json::Value>, DeployError> {
    if !app.deployments.contains(&name) {
        return Err(DeployError::NotFound(name));
    }
    Ok(Json(json!(crate::runtime::recent_lines(&name))))
}

/// Runs a query stream; the body is the request's arguments, as text.
async fn query(
    State(app): State<Shared>,
    Path((name, query)): Path<(String, String)>,
    args: String,
) -> Result<Json<serde_json::Value>, DeployError> {
    let rows = tokio::task::spawn_blocking(move || app.deployments.query(&name, &query, &args))
        .await
        .map_err(|e| DeployError::Internal(anyhow::anyhow!("the query panicked: {e}")))??;
    let rows: Vec<serde_json::Value> =
        rows.iter().map(|row| serde_json::Value::Array(row.iter().map(crate::json::to_json).collect())).collect();
    Ok(Json(serde_json::Value::Array(rows)))
}

#[derive(Deserialize)]
struct DeleteQuery {
    state: Option<String>,
}

async fn delete(
    State(app): State<Shared>,
    Path(name): Path<String>,
    Query(query): Query<DeleteQuery>,
) -> Result<StatusCode, DeployError> {
    let drop_state = match query.state.as_deref() {
        Some("keep") => false,
        Some("drop") => true,
        _ => return Err(DeployError::BadRequest("say what becomes of the state: ?state=keep or ?state=drop".into())),
    };
    blocking(move || app.deployments.delete(&name, drop_state)).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
struct StateQuery {
    key: Option<String>,
}

async fn state(
    State(app): State<Shared>,
    Path((name, state)): Path<(String, String)>,
    Query(query): Query<StateQuery>,
    host_db: axum::Extension<Arc<crate::state::Db>>,
) -> Result<Json<serde_json::Value>, DeployError> {
    if !app.deployments.contains(&name) {
        return Err(DeployError::NotFound(name));
    }
    let db = Arc::clone(&host_db.0);
    let bad = |e: anyhow::Error| DeployError::BadRequest(format!("{e:#}"));
    match query.key {
        Some(key) => {
            let key: serde_json::Value =
                serde_json::from_str(&key).map_err(|e| DeployError::BadRequest(format!("key is not JSON: {e}")))?;
            let key = key
                .as_array()
                .ok_or_else(|| DeployError::BadRequest("key must be a JSON array".into()))?
                .iter()
                .map(crate::json::from_json)
                .collect::<anyhow::Result<Vec<_>>>()
                .map_err(bad)?;
            match db.get(&name, &state, &key).map_err(bad)? {
                Some(stored) => Ok(Json(crate::json::entry(&key, &stored, false))),
                None => Err(DeployError::NotFound(format!("{name} key {key:?} in state {state}"))),
            }
        }
        None => {
            let all = db.scan(&name, &state).map_err(bad)?;
            Ok(Json(json!(all.iter().map(|(k, v)| crate::json::entry(k, v, false)).collect::<Vec<_>>())))
        }
    }
}

/// A metric family: one sample per topology.
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    value: fn(&Status) -> Option<f64>,
}

/// Prometheus text: a family's help and type, then one sample per topology.
async fn metrics(State(app): State<Shared>) -> impl IntoResponse {
    let all = app.deployments.list();
    let mut out = String::new();
    let families = [
        Family {
            name: "weir_topology_up",
            kind: "gauge",
            help: "1 when the topology is running",
            value: |s| Some(f64::from(u8::from(s.state == "running"))),
        },
        Family {
            name: "weir_last_committed_txid",
            kind: "gauge",
            help: "The last committed txid",
            value: |s| Some(s.last_committed as f64),
        },
        Family {
            name: "weir_batches_committed_total",
            kind: "counter",
            help: "Batches committed since the topology started",
            value: |s| Some(s.batches as f64),
        },
        Family {
            name: "weir_tuples_committed_total",
            kind: "counter",
            help: "Spout tuples committed since the topology started",
            value: |s| Some(s.tuples as f64),
        },
        Family {
            name: "weir_replays_total",
            kind: "counter",
            help: "Failed batch attempts replayed since the topology started",
            value: |s| Some(s.replays as f64),
        },
        Family {
            name: "weir_commit_latency_p99_seconds",
            kind: "gauge",
            help: "Commit latency, 99th percentile",
            value: |s| s.commit_p99_ms.map(|ms| ms / 1000.0),
        },
    ];
    for Family { name: family, kind, help, value } in families {
        let _ = writeln!(out, "# HELP {family} {help}.\n# TYPE {family} {kind}");
        for (name, status) in &all {
            if let Some(v) = value(status) {
                let _ = writeln!(out, "{family}{{topology=\"{name}\"}} {v}");
            }
        }
    }
    let family = "weir_operator_seconds_total";
    let _ = writeln!(
        out,
        "# HELP {family} Time spent in each guest operator since the topology started.\n# TYPE {family} counter"
    );
    for (name, status) in &all {
        for (operator, ms) in &status.operator_ms {
            let _ = writeln!(out, "{family}{{topology=\"{name}\",operator=\"{operator}\"}} {}", ms / 1000.0);
        }
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out)
}

/// The API's routes; every call under /v1 needs the token, if there is one.
fn router(app: Shared, db: Arc<crate::state::Db>, max_upload: usize) -> Router {
    let api = Router::new()
        .route("/v1/topologies", post(deploy).get(list))
        .route("/v1/topologies/{name}", get(status).delete(delete))
        .route("/v1/topologies/{name}/stop", post(stop))
        .route("/v1/topologies/{name}/resume", post(resume))
        .route("/v1/topologies/{name}/bundle", put(upgrade))
        .route("/v1/topologies/{name}/logs", get(logs))
        .route("/v1/topologies/{name}/states/{state}", get(state))
        .route("/v1/topologies/{name}/queries/{query}", post(query))
        .layer(axum::Extension(db))
        .layer(middleware::from_fn_with_state(Arc::clone(&app), authorize));
    Router::new()
        .route("/health", get(|| async { "ok" }))
        .route("/metrics", get(metrics))
        .merge(api)
        .layer(DefaultBodyLimit::max(max_upload))
        .with_state(app)
}

/// Serves until interrupted (SIGINT or SIGTERM), then stops every topology
/// at a batch boundary.
pub fn serve(config: ServeConfig) -> anyhow::Result<()> {
    if !config.listen.ip().is_loopback() && config.token.is_none() {
        anyhow::bail!("refusing to listen on {} without a token: give one with --token-file", config.listen);
    }
    let db = Arc::clone(&config.host.db);
    let deployments = Deployments::resume(Arc::new(config.host))?;
    let app = Arc::new(App { deployments, token: config.token });
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(config.listen).await?;
        let address = listener.local_addr()?;
        tracing::info!("listening on {address}");
        println!("listening on {address}");
        let router = router(Arc::clone(&app), db, config.max_upload);
        axum::serve(listener, router)
            .with_graceful_shutdown(async {
                let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
                }
            })
            .await?;
        anyhow::Ok(())
    })?;
    tracing::info!("stopping every topology at a batch boundary");
    app.deployments.shutdown();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret(b"token", b"token"));
        assert!(!same_secret(b"token", b"tokem"));
        assert!(!same_secret(b"token", b"token2"));
        assert!(!same_secret(b"", b"token"));
    }
}

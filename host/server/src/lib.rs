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

mod bundles;
mod clustered;
mod dashboard;
pub mod deployments;
mod history;
mod metrics;
pub mod registry;
mod status;

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use deployments::{DeployError, DeployRequest, Deployments, Host, Status};
use history::History;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde::Deserialize;
use serde_json::json;
use sha2::{Digest, Sha256};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use subtle::ConstantTimeEq;
use weir_cluster::{ClusterConfig, Membership};
use weir_config::{
    DEFAULT_STATE_PAGE, HISTORY_INTERVAL, MAX_STATE_ANSWER_BYTES, MAX_STATE_ANSWER_KEYS, MAX_STATE_PAGE,
    MAX_STATE_PAGE_BYTES,
};

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

struct App {
    host: Arc<Host>,
    deployments: Deployments,
    history: History,
    /// The token's SHA-256: compared in constant time, whatever its length.
    token: Option<[u8; 32]>,
    max_upload: usize,
    body_timeout: Duration,
    /// Room for the request bodies held at once.
    bodies: BodyRoom,
    /// Set once the runtime runs, in cluster mode.
    cluster: std::sync::OnceLock<Membership>,
    /// The cluster's bundles this host has loaded, or failed to.
    cluster_bundles: clustered::BundlesLoaded,
    /// The cluster's topologies as loaded here.
    cluster_plans: clustered::Plans,
    /// What this host did for each cluster topology.
    cluster_figures: clustered::Figures,
    /// What every host of the cluster did, as they last shared it.
    cluster_shared_figures: clustered::SharedFigures,
}

type Shared = Arc<App>;

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({ "error": message.into() }))).into_response()
}

/// Largest uploads the server holds at once: their bytes stay in memory
/// from the first byte read until the call is answered (a deployment's
/// compile included), and many clients at once must not take the host's
/// memory. More wait for room, within their body timeout.
const BODIES_AT_ONCE: usize = 4;

/// Room for request bodies, in KiB: a call takes room for its body before
/// reading it and gives it back once answered.
struct BodyRoom {
    room: Arc<tokio::sync::Semaphore>,
    kib: u32,
}

impl BodyRoom {
    fn new(bytes: usize) -> BodyRoom {
        let kib = Self::kib(bytes);
        BodyRoom { room: Arc::new(tokio::sync::Semaphore::new(kib as usize)), kib }
    }

    fn kib(bytes: usize) -> u32 {
        u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX)
    }

    /// Waits until `bytes` fit beside the bodies held (never more than all
    /// of the room).
    async fn reserve(&self, bytes: usize) -> tokio::sync::OwnedSemaphorePermit {
        let kib = Self::kib(bytes).min(self.kib);
        Arc::clone(&self.room).acquire_many_owned(kib).await.expect("the room is never closed")
    }
}

/// An error that ends the connection: its request was not read whole.
fn closing(status: StatusCode, message: impl Into<String>) -> Response {
    let mut response = error(status, message);
    response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

impl App {
    /// The answer to a refused call; its message never names a server path.
    fn refusal(&self, e: DeployError) -> Response {
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
    fn answer<T: serde::Serialize>(&self, status: StatusCode, result: Result<T, DeployError>) -> Response {
        match result {
            Ok(value) => (status, Json(value)).into_response(),
            Err(e) => self.refusal(e),
        }
    }
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// Whether `host` (a Host header: name or address, and maybe a port) names
/// this machine.
fn is_loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(bracketed) => bracketed.split_once(']').map_or("", |(address, _)| address),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Without a token, refuses a call that may come from a web page: a
/// browser lets any page send a form POST to a loopback port, and DNS
/// rebinding lets it send any call with the page's own Host. So the Host
/// must name this machine, an `Origin` (sent with every cross-origin
/// request) must be this server's own, fetch metadata must not say
/// cross-site, and a change must not carry a form's content type (what
/// browsers that send no `Origin` with forms still send).
fn refuse_web_pages(method: &Method, headers: &HeaderMap) -> Result<(), String> {
    let forbidden = Err;
    let text = |name: header::HeaderName| headers.get(name).map(|v| v.to_str().unwrap_or("(not text)"));
    let host = text(header::HOST).unwrap_or_default();
    if !is_loopback_host(host) {
        return forbidden(format!(
            "a server without a token answers only calls addressed to this machine (Host {host:?}); \
             give it a token with --token-file to call it by another name"
        ));
    }
    if let Some(origin) = text(header::ORIGIN).filter(|origin| *origin != format!("http://{host}")) {
        return forbidden(format!("a call from the web page origin {origin:?} is refused"));
    }
    if let Some(site) =
        text(header::HeaderName::from_static("sec-fetch-site")).filter(|site| !matches!(*site, "same-origin" | "none"))
    {
        return forbidden(format!("a call a browser marks as {site} is refused"));
    }
    let form = ["application/x-www-form-urlencoded", "multipart/form-data", "text/plain"];
    let kind = text(header::CONTENT_TYPE).unwrap_or_default().split(';').next().unwrap_or_default().trim();
    if !matches!(*method, Method::GET | Method::HEAD) && form.iter().any(|f| kind.eq_ignore_ascii_case(f)) {
        return forbidden(format!(
            "a change sent as a browser form ({kind}) is refused: send Content-Type: application/octet-stream"
        ));
    }
    Ok(())
}

/// Whether a /v1 call may be made: the token, where there is one; else
/// nothing a web page could have sent. The refusal's status and why.
fn authorized(app: &App, method: &Method, headers: &HeaderMap) -> Result<(), (StatusCode, String)> {
    match &app.token {
        Some(token) => {
            let presented = headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .unwrap_or_default();
            if bool::from(sha256(presented.as_bytes()).ct_eq(token)) {
                Ok(())
            } else {
                Err((StatusCode::UNAUTHORIZED, "a valid `Authorization: Bearer <token>` header is required".into()))
            }
        }
        None => refuse_web_pages(method, headers).map_err(|why| (StatusCode::FORBIDDEN, why)),
    }
}

/// Largest body of a call outside /v1 (the dashboard, /health, /metrics):
/// none of them reads one.
const OTHER_BODY_LIMIT: usize = 64 << 10;

/// Admits a request: a /v1 call only if [`authorized`], before any of its
/// body is read; then reads the body whole before the call is handled
/// (a /v1 call's up to the upload limit, others' [`OTHER_BODY_LIMIT`]), once
/// the bodies read at once leave room for it ([`App::bodies`]): a body
/// declared over the limit is refused before any of it is read, one that
/// grows over it when it does, and one that does not arrive in time (room
/// for it included) ends the connection.
async fn admit(State(app): State<Shared>, request: Request, next: Next) -> Response {
    let api = request.uri().path().starts_with("/v1/");
    if let (true, Err((status, why))) = (api, authorized(&app, request.method(), request.headers())) {
        return closing(status, why);
    }
    let limit = if api { app.max_upload } else { OTHER_BODY_LIMIT };
    let too_large = || {
        let flag = if api { " (--max-upload-mib)" } else { "" };
        closing(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the request's body is over the server's limit of {limit} bytes{flag}"),
        )
    };
    let declared = request.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return too_large();
    }
    let timed_out = || {
        closing(
            StatusCode::REQUEST_TIMEOUT,
            format!("the request's body did not arrive within {} ms (--body-timeout-ms)", app.body_timeout.as_millis()),
        )
    };
    let deadline = tokio::time::Instant::now() + app.body_timeout;
    // Room for the body as declared, or, sent in chunks, for the largest
    // allowed; a request with neither header has none.
    let chunked = request.headers().contains_key(header::TRANSFER_ENCODING);
    let room = declared.map_or(if chunked { limit } else { 0 }, |length| length as usize);
    let Ok(_room) = tokio::time::timeout_at(deadline, app.bodies.reserve(room)).await else { return timed_out() };
    let (parts, body) = request.into_parts();
    let bytes = match tokio::time::timeout_at(deadline, Limited::new(body, limit).collect()).await {
        Err(_) => return timed_out(),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => return too_large(),
        Ok(Err(e)) => return closing(StatusCode::BAD_REQUEST, format!("the request's body cannot be read: {e}")),
        Ok(Ok(collected)) => collected.to_bytes(),
    };
    next.run(Request::from_parts(parts, Body::from(bytes))).await
}

/// Runs blocking work (compiling, joining threads) off the async runtime.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, DeployError> + Send + 'static,
) -> Result<T, DeployError> {
    tokio::task::spawn_blocking(work).await.map_err(|e| DeployError::Internal(anyhow::anyhow!("{e}")))?
}

#[derive(Deserialize)]
struct DeployQuery {
    name: Option<String>,
    topology: Option<String>,
    input: Option<PathBuf>,
}

fn status_json(name: &str, status: &Status) -> serde_json::Value {
    let mut value = serde_json::to_value(status).unwrap_or_default();
    value["name"] = json!(name);
    value
}

async fn deploy(State(app): State<Shared>, Query(query): Query<DeployQuery>, body: Bytes) -> Response {
    let request = DeployRequest { name: query.name, topology: query.topology, input: query.input };
    let result = blocking({
        let app = Arc::clone(&app);
        move || {
            if let Some(membership) = app.cluster.get() {
                return clustered::deploy(&app, membership, request, &body);
            }
            let name = request.name.clone();
            let status = app.deployments.deploy(request, &body)?;
            Ok(status_json(name.as_deref().unwrap_or(&status.topology), &status))
        }
    })
    .await;
    app.answer(StatusCode::CREATED, result)
}

async fn list(State(app): State<Shared>) -> Json<serde_json::Value> {
    let mut all: Vec<serde_json::Value> =
        app.deployments.list().iter().map(|(name, status)| status_json(name, status)).collect();
    if let Some(membership) = app.cluster.get() {
        let topologies = membership.view().topologies;
        all.extend(topologies.iter().map(|(name, topology)| clustered::status(&app, name, topology)));
    }
    Json(json!(all))
}

/// Topology `name` of the cluster, unless this host runs one of that name
/// outside it.
fn clustered<'a>(app: &'a App, name: &str) -> Option<(&'a Membership, weir_cluster::catalog::ClusterTopology)> {
    let membership = app.cluster.get()?;
    if app.deployments.contains(name) {
        return None;
    }
    Some((membership, membership.topology(name)?))
}

async fn cluster(State(app): State<Shared>) -> Response {
    match app.cluster.get() {
        Some(membership) => (StatusCode::OK, Json(membership.view())).into_response(),
        None => error(StatusCode::NOT_FOUND, "this server is in no cluster: start it with --cluster NAME --etcd URL"),
    }
}

async fn status(State(app): State<Shared>, Path(name): Path<String>) -> Response {
    if let Some((_, topology)) = clustered(&app, &name) {
        return (StatusCode::OK, Json(clustered::status(&app, &name, &topology))).into_response();
    }
    app.answer(StatusCode::OK, app.deployments.status(&name).map(|status| status_json(&name, &status)))
}

/// Runs `action` on deployment `name` off the async runtime (it may compile
/// or wait for a batch boundary) and answers with its status.
async fn act(
    app: Shared,
    name: String,
    action: impl FnOnce(&Deployments, &str) -> Result<Status, DeployError> + Send + 'static,
) -> Response {
    let result = blocking({
        let app = Arc::clone(&app);
        move || action(&app.deployments, &name).map(|status| status_json(&name, &status))
    })
    .await;
    app.answer(StatusCode::OK, result)
}

/// Runs `action` on topology `name` of the cluster off the async runtime
/// and answers with its status.
async fn act_across_cluster(
    app: Shared,
    name: String,
    action: impl FnOnce(&App, &Membership, &str) -> Result<serde_json::Value, DeployError> + Send + 'static,
) -> Response {
    let result = blocking({
        let app = Arc::clone(&app);
        move || {
            let (membership, _) = clustered(&app, &name).ok_or_else(|| DeployError::NotFound(name.clone()))?;
            action(&app, membership, &name)
        }
    })
    .await;
    app.answer(StatusCode::OK, result)
}

async fn stop(State(app): State<Shared>, Path(name): Path<String>) -> Response {
    if clustered(&app, &name).is_some() {
        return act_across_cluster(app, name, |app, m, name| clustered::set_running(app, m, name, false)).await;
    }
    act(app, name, Deployments::stop).await
}

async fn resume(State(app): State<Shared>, Path(name): Path<String>) -> Response {
    if clustered(&app, &name).is_some() {
        return act_across_cluster(app, name, |app, m, name| clustered::set_running(app, m, name, true)).await;
    }
    act(app, name, Deployments::resume_one).await
}

async fn upgrade(State(app): State<Shared>, Path(name): Path<String>, body: Bytes) -> Response {
    if clustered(&app, &name).is_some() {
        return act_across_cluster(app, name, move |app, m, name| clustered::upgrade(app, m, name, &body)).await;
    }
    act(app, name, move |deployments, name| deployments.upgrade(name, &body)).await
}

/// Whether `name` is deployed here or to this host's cluster.
fn known(app: &App, name: &str) -> Result<(), DeployError> {
    match clustered(app, name) {
        Some(_) => Ok(()),
        None => app.deployments.status(name).map(drop),
    }
}

/// What its guests wrote on this host (a cluster topology's, only this
/// host's share).
async fn logs(State(app): State<Shared>, Path(name): Path<String>) -> Response {
    let lines = known(&app, &name).map(|()| weir_runtime::recent_lines(&name));
    app.answer(StatusCode::OK, lines)
}

/// Runs a query stream; the body is the request's arguments, as text.
async fn query(State(app): State<Shared>, Path((name, query)): Path<(String, String)>, args: String) -> Response {
    let result = blocking({
        let app = Arc::clone(&app);
        move || {
            let rows = match clustered(&app, &name) {
                Some((membership, _)) => clustered::query(&app, membership, &name, &query, &args)?,
                None => app.deployments.query(&name, &query, &args)?,
            };
            Ok(rows.iter().map(|row| row.iter().map(weir_state::json::to_json).collect()).collect::<Vec<Vec<_>>>())
        }
    })
    .await;
    app.answer(StatusCode::OK, result)
}

#[derive(Deserialize)]
struct DeleteQuery {
    state: Option<String>,
}

async fn delete(State(app): State<Shared>, Path(name): Path<String>, Query(query): Query<DeleteQuery>) -> Response {
    let drop_state = match query.state.as_deref() {
        Some("keep") => false,
        Some("drop") => true,
        _ => return error(StatusCode::BAD_REQUEST, "say what becomes of the state: ?state=keep or ?state=drop"),
    };
    let result = blocking({
        let app = Arc::clone(&app);
        move || {
            if let Some((membership, _)) = clustered(&app, &name) {
                return clustered::delete(&app, membership, &name);
            }
            app.deployments.delete(&name, drop_state)?;
            app.history.forget(&name);
            Ok(())
        }
    })
    .await;
    match result {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => app.refusal(e),
    }
}

#[derive(Deserialize)]
struct StateQuery {
    /// One key, as a JSON array.
    key: Option<String>,
    /// A page of keys after this one (a JSON array), or from the first.
    after: Option<String>,
    /// Keys in the page.
    limit: Option<usize>,
    /// Also the stored txid (and prev, for opaque state).
    #[serde(default)]
    raw: bool,
}

/// A key given as `field`, a JSON array of its values.
fn parse_key(field: &str, text: &str) -> Result<Vec<weir_sdk::codec::Value>, DeployError> {
    let json: serde_json::Value =
        serde_json::from_str(text).map_err(|e| DeployError::BadRequest(format!("{field} is not JSON: {e}")))?;
    json.as_array()
        .ok_or_else(|| DeployError::BadRequest(format!("{field} must be a JSON array")))?
        .iter()
        .map(weir_state::json::from_json)
        .collect::<anyhow::Result<Vec<_>>>()
        .map_err(|e| DeployError::BadRequest(format!("{field}: {e:#}")))
}

/// One key of a topology's state; a page of its keys in order; or every
/// key, sorted. A cluster topology's keys are read from their owners.
fn read_state(app: &App, name: &str, state: &str, query: &StateQuery) -> Result<serde_json::Value, DeployError> {
    let cluster = clustered(app, name).map(|(membership, _)| membership);
    if cluster.is_none() {
        let states = app.deployments.states(name)?;
        if !states.iter().any(|s| s == state) {
            return Err(DeployError::NotFound(format!("topology {name} has no state {state:?} (states: {states:?})")));
        }
    }
    let bad = |e: weir_state::StoreError| DeployError::BadRequest(format!("{e:#}"));
    let db = &app.host.db;
    let entries = |all: Vec<(Vec<weir_sdk::codec::Value>, weir_state::rules::Stored)>| {
        json!(all.iter().map(|(k, v)| weir_state::json::entry(k, v, query.raw)).collect::<Vec<_>>())
    };
    let encode = |key: &[weir_sdk::codec::Value]| weir_state::keys::encode(key.iter().map(|v| v.as_ref()));
    let decoded = |all: Vec<(Vec<u8>, weir_state::rules::Stored)>| {
        all.into_iter()
            .map(|(key, stored)| Ok((weir_state::keys::decode(&key)?, stored)))
            .collect::<anyhow::Result<Vec<_>>>()
            .map_err(DeployError::Internal)
    };
    let paged = query.after.is_some() || query.limit.is_some();
    match &query.key {
        Some(_) if paged => Err(DeployError::BadRequest("give either ?key= or ?after= and ?limit=, not both".into())),
        Some(text) => {
            let key = parse_key("key", text)?;
            let stored = match cluster {
                Some(membership) => {
                    let found = clustered::read_state(app, membership, name, state, Some(encode(&key)), None)?;
                    found.into_iter().next().map(|(_, stored)| stored)
                }
                None => db.get(name, state, &key).map_err(bad)?,
            };
            match stored {
                Some(stored) => Ok(weir_state::json::entry(&key, &stored, query.raw)),
                None => {
                    let key = json!(key.iter().map(weir_state::json::to_json).collect::<Vec<_>>());
                    Err(DeployError::NotFound(format!("state {state} of topology {name} has no key {key}")))
                }
            }
        }
        None if paged => {
            let limit = query.limit.unwrap_or(DEFAULT_STATE_PAGE);
            if !(1..=MAX_STATE_PAGE).contains(&limit) {
                return Err(DeployError::BadRequest(format!("limit {limit} must be 1 to {MAX_STATE_PAGE}")));
            }
            let after = query.after.as_deref().map(|text| parse_key("after", text)).transpose()?;
            match cluster {
                Some(membership) => {
                    let page = Some((after.as_deref().map(encode), limit));
                    Ok(entries(decoded(clustered::read_state(app, membership, name, state, None, page)?)?))
                }
                None => {
                    let (page, cut) =
                        db.page_within(name, state, after.as_deref(), limit, MAX_STATE_PAGE_BYTES).map_err(bad)?;
                    if cut {
                        return Err(DeployError::BadRequest(format!(
                            "the page of state {state} would hold more than {} MiB by its key {}: ask for fewer \
                             keys (?limit={})",
                            MAX_STATE_PAGE_BYTES >> 20,
                            page.len() + 1,
                            page.len()
                        )));
                    }
                    Ok(entries(page))
                }
            }
        }
        None => {
            let too_large = || {
                DeployError::BadRequest(format!(
                    "state {state} of topology {name} holds more than {MAX_STATE_ANSWER_KEYS} keys or {} MiB: \
                     read it in pages, with ?after= and ?limit= (as `weir state scan --server` does)",
                    MAX_STATE_ANSWER_BYTES >> 20
                ))
            };
            let within = MAX_STATE_ANSWER_KEYS + 1;
            let all = match cluster {
                Some(membership) => decoded(clustered::read_state(app, membership, name, state, None, None)?)?,
                None => {
                    let (all, cut) = db.page_within(name, state, None, within, MAX_STATE_ANSWER_BYTES).map_err(bad)?;
                    if cut {
                        return Err(too_large());
                    }
                    all
                }
            };
            if all.len() > MAX_STATE_ANSWER_KEYS {
                return Err(too_large());
            }
            Ok(entries(all))
        }
    }
}

async fn state(
    State(app): State<Shared>,
    Path((name, state)): Path<(String, String)>,
    Query(query): Query<StateQuery>,
) -> Response {
    let result = blocking({
        let app = Arc::clone(&app);
        move || read_state(&app, &name, &state, &query)
    })
    .await;
    app.answer(StatusCode::OK, result)
}

/// The last 15 minutes of a topology's figures on this host, a sample a
/// second.
async fn history(State(app): State<Shared>, Path(name): Path<String>) -> Response {
    app.answer(StatusCode::OK, known(&app, &name).map(|()| app.history.columns(&name)))
}

/// A topology's stream graph, as `weir inspect --json` shows its definition.
async fn definition(State(app): State<Shared>, Path(name): Path<String>) -> Response {
    match clustered(&app, &name) {
        Some(_) => app.answer(StatusCode::OK, clustered::definition(&app, &name)),
        None => app.answer(StatusCode::OK, app.deployments.definition(&name)),
    }
}

/// Samples every deployment's figures into the history, forever.
async fn sample(app: Shared) {
    let mut every = tokio::time::interval(HISTORY_INTERVAL);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        every.tick().await;
        app.history.record(|| app.deployments.list(), Instant::now(), SystemTime::now());
    }
}

async fn metrics(State(app): State<Shared>) -> Response {
    let cluster = app.cluster.get().map(Membership::view);
    match metrics::exposition(&app.deployments.list(), cluster.as_ref()) {
        Ok(text) => ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], text).into_response(),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("encoding the metrics failed: {e}")),
    }
}

/// The API's routes, every call (all under /v1/) passing [`admit`]'s
/// authorization, and the dashboard's; every answer carries
/// [`dashboard::secure`]'s headers.
fn router(app: Shared) -> Router {
    let api = Router::new()
        .route("/v1/topologies", post(deploy).get(list))
        .route("/v1/topologies/{name}", get(status).delete(delete))
        .route("/v1/topologies/{name}/stop", post(stop))
        .route("/v1/topologies/{name}/resume", post(resume))
        .route("/v1/topologies/{name}/bundle", put(upgrade))
        .route("/v1/topologies/{name}/logs", get(logs))
        .route("/v1/topologies/{name}/history", get(history))
        .route("/v1/topologies/{name}/definition", get(definition))
        .route("/v1/topologies/{name}/states/{state}", get(state))
        .route("/v1/topologies/{name}/queries/{query}", post(query))
        .route("/v1/cluster", get(cluster));
    Router::new()
        .route("/", get(dashboard::page))
        .route("/assets/{name}", get(dashboard::asset))
        .route("/health", get(|| async { "ok" }))
        .route("/metrics", get(metrics))
        .merge(api)
        .layer(DefaultBodyLimit::max(app.max_upload))
        .layer(middleware::from_fn_with_state(Arc::clone(&app), admit))
        .layer(middleware::from_fn(dashboard::secure))
        .with_state(app)
}

/// Resolves on SIGINT or SIGTERM.
async fn interrupted() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
    }
}

/// Serves HTTP/1 connections on `listener`, at most `max_connections` at
/// once (the others wait in the listen queue), until interrupted; returns
/// the connections still open, told to close once their request is
/// answered.
async fn accept(
    listener: tokio::net::TcpListener,
    router: Router,
    header_timeout: Duration,
    max_connections: usize,
) -> tokio::task::JoinSet<()> {
    let (closing_tx, closing_rx) = tokio::sync::watch::channel(());
    let mut connections = tokio::task::JoinSet::new();
    let slots = Arc::new(tokio::sync::Semaphore::new(max_connections));
    let interrupted = interrupted();
    tokio::pin!(interrupted);
    loop {
        let slot = tokio::select! {
            slot = Arc::clone(&slots).acquire_owned() => slot.expect("the semaphore is never closed"),
            () = &mut interrupted => break,
        };
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors, say: wait rather than spin.
                    tracing::warn!("accepting a connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut interrupted => break,
        };
        let service = hyper_util::service::TowerToHyperService::new(router.clone());
        let mut closing = closing_rx.clone();
        connections.spawn(async move {
            let _slot = slot;
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(header_timeout)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            tokio::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                _ = closing.changed() => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
        });
        while connections.try_join_next().is_some() {}
    }
    drop(closing_tx);
    connections
}

/// The connections to serve at once: `wanted`, but at most a quarter of the
/// open-file limit, first raised to its hard limit (a shell's soft limit is
/// often 1,024), so that the rest stays for the topologies' files.
fn connection_limit(wanted: usize) -> usize {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit with a valid pointer to a local.
    let files = unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return wanted;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit { rlim_cur: limit.rlim_max, rlim_max: limit.rlim_max };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
        limit.rlim_cur
    };
    let allowed = usize::try_from(files / 4).unwrap_or(usize::MAX).max(1);
    if allowed < wanted {
        tracing::warn!("serving at most {allowed} connections at once, not {wanted}: the open-file limit is {files}");
    }
    wanted.min(allowed)
}

/// Serves until interrupted (SIGINT or SIGTERM), then stops every topology
/// at a batch boundary, waiting for them at most the shutdown timeout.
pub fn serve(config: ServeConfig) -> anyhow::Result<()> {
    if !config.listen.ip().is_loopback() && config.token.is_none() {
        anyhow::bail!("refusing to listen on {} without a token: give one with --token-file", config.listen);
    }
    let host = Arc::new(config.host);
    let deployments = Deployments::resume(Arc::clone(&host))?;
    let app = Arc::new(App {
        host,
        deployments,
        history: History::default(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_are_this_machine() {
        for host in ["127.0.0.1:7878", "127.1.2.3", "localhost:1", "LOCALHOST", "[::1]:7878", "[::1]"] {
            assert!(is_loopback_host(host), "{host}");
        }
        for host in ["", "evil.example:7878", "10.0.0.1:7878", "localhost.evil.example", "[::2]:1", "127.0.0.1.evil"] {
            assert!(!is_loopback_host(host), "{host}");
        }
    }

    #[test]
    fn without_a_token_only_calls_no_web_page_could_send_pass() {
        let headers = |pairs: &[(&'static str, &str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.insert(*name, value.parse().unwrap());
            }
            map
        };
        let local = [("host", "127.0.0.1:7878")];
        assert!(refuse_web_pages(&Method::POST, &headers(&local)).is_ok());
        assert!(refuse_web_pages(&Method::POST, &headers(&[local[0], ("origin", "http://127.0.0.1:7878")])).is_ok());
        assert!(
            refuse_web_pages(&Method::POST, &headers(&[local[0], ("content-type", "application/octet-stream")]))
                .is_ok()
        );
        assert!(refuse_web_pages(&Method::GET, &headers(&[local[0], ("content-type", "text/plain")])).is_ok());
        for refused in [
            headers(&[("host", "evil.example:7878")]),
            headers(&[local[0], ("origin", "http://evil.example")]),
            headers(&[local[0], ("origin", "null")]),
            headers(&[local[0], ("sec-fetch-site", "cross-site")]),
            headers(&[local[0], ("content-type", "application/x-www-form-urlencoded")]),
            headers(&[local[0], ("content-type", "text/plain; charset=utf-8")]),
            headers(&[local[0], ("content-type", "multipart/form-data; boundary=x")]),
        ] {
            assert!(refuse_web_pages(&Method::POST, &refused).is_err(), "{refused:?}");
        }
    }
}

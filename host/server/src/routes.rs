//! The API's routes and their handlers, and the dashboard's: each
//! handler answers for a topology this host serves or one of its cluster's.

use super::app::{App, Shared, error};
use super::clustered;
use super::connections::admit;
use super::dashboard;
use super::deployments::{DeployError, DeployRequest, Deployments, Status};
use super::metrics;
use super::state_summary;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;
use weir_cluster::Membership;
use weir_config::{
    DEFAULT_STATE_PAGE, MAX_STATE_ANSWER_BYTES, MAX_STATE_ANSWER_KEYS, MAX_STATE_PAGE, MAX_STATE_PAGE_BYTES,
};

/// Runs blocking work over the app (compiling, joining threads) off the
/// async runtime.
async fn blocking<T: Send + 'static>(
    app: &Shared,
    work: impl FnOnce(&App) -> Result<T, DeployError> + Send + 'static,
) -> Result<T, DeployError> {
    let app = Arc::clone(app);
    tokio::task::spawn_blocking(move || work(&app)).await.map_err(|e| DeployError::Internal(anyhow::anyhow!("{e}")))?
}

/// Runs [`blocking`] work and answers with `status` and what it returned,
/// as JSON, or with its refusal.
async fn answer_blocking<T: serde::Serialize + Send + 'static>(
    app: Shared,
    status: StatusCode,
    work: impl FnOnce(&App) -> Result<T, DeployError> + Send + 'static,
) -> Response {
    let result = blocking(&app, work).await;
    app.answer(status, result)
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
    answer_blocking(app, StatusCode::CREATED, move |app| {
        if let Some(membership) = app.cluster.get() {
            return clustered::deploy(app, membership, request, &body);
        }
        let name = request.name.clone();
        let status = app.deployments.deploy(request, &body)?;
        Ok(status_json(name.as_deref().unwrap_or(&status.topology), &status))
    })
    .await
}

#[derive(Deserialize)]
struct ListQuery {
    /// Also each topology's history, as `.../history` gives it: what the
    /// dashboard's list needs in one call, whatever the number of topologies.
    #[serde(default)]
    history: bool,
}

async fn list(State(app): State<Shared>, Query(query): Query<ListQuery>) -> Json<serde_json::Value> {
    let mut all: Vec<serde_json::Value> =
        app.deployments.list().iter().map(|(name, status)| status_json(name, status)).collect();
    if let Some(membership) = app.cluster.get() {
        let topologies = membership.view().topologies;
        all.extend(topologies.iter().map(|(name, topology)| clustered::status(&app, name, topology)));
    }
    if query.history {
        for status in &mut all {
            let name = status["name"].as_str().unwrap_or_default().to_owned();
            status["history"] = app.history.columns(&name);
        }
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
    answer_blocking(app, StatusCode::OK, move |app| {
        action(&app.deployments, &name).map(|status| status_json(&name, &status))
    })
    .await
}

/// Runs `action` on topology `name` of the cluster off the async runtime
/// and answers with its status.
async fn act_across_cluster(
    app: Shared,
    name: String,
    action: impl FnOnce(&App, &Membership, &str) -> Result<serde_json::Value, DeployError> + Send + 'static,
) -> Response {
    answer_blocking(app, StatusCode::OK, move |app| {
        let (membership, _) = clustered(app, &name).ok_or_else(|| DeployError::NotFound(name.clone()))?;
        action(app, membership, &name)
    })
    .await
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
    answer_blocking(app, StatusCode::OK, move |app| {
        clustered::wait_until_loaded(app, &name);
        let rows = match clustered(app, &name) {
            Some((membership, _)) => clustered::query(app, membership, &name, &query, &args)?,
            None => app.deployments.query(&name, &query, &args)?,
        };
        Ok(rows.iter().map(|row| row.iter().map(weir_state::json::to_json).collect()).collect::<Vec<Vec<_>>>())
    })
    .await
}

/// The names of a query's result fields, for the query console's columns
/// (a topology of this host's own).
async fn query_fields(State(app): State<Shared>, Path((name, query)): Path<(String, String)>) -> Response {
    if clustered(&app, &name).is_some() {
        let why = format!("topology {name} runs across the cluster: its query's fields are not told here");
        return app.refusal(DeployError::BadRequest(why));
    }
    let fields = app.deployments.query_fields(&name, &query).map(|fields| json!({ "fields": fields }));
    app.answer(StatusCode::OK, fields)
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
    let result = blocking(&app, move |app| {
        if let Some((membership, _)) = clustered(app, &name) {
            return clustered::delete(app, membership, &name);
        }
        app.deployments.delete(&name, drop_state)?;
        app.history.forget(&name);
        Ok(())
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
    clustered::wait_until_loaded(app, name);
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
    answer_blocking(app, StatusCode::OK, move |app| read_state(app, &name, &state, &query)).await
}

#[derive(Deserialize)]
struct SummaryQuery {
    /// The top keys by value: how many.
    #[serde(default)]
    top: usize,
    /// Keys whose text starts with this.
    prefix: Option<String>,
    /// How many of those.
    limit: Option<usize>,
}

/// A state's key count, top keys by value and keys by prefix, for the
/// dashboard's state browser; for a topology this host runs alone.
async fn state_summary(
    State(app): State<Shared>,
    Path((name, state)): Path<(String, String)>,
    Query(query): Query<SummaryQuery>,
) -> Response {
    answer_blocking(app, StatusCode::OK, move |app| {
        if clustered(app, &name).is_some() {
            return Err(DeployError::BadRequest(format!(
                "topology {name} runs across the cluster: read its state {state} in pages"
            )));
        }
        let states = app.deployments.states(&name)?;
        if !states.iter().any(|s| s == &state) {
            return Err(DeployError::NotFound(format!("topology {name} has no state {state:?} (states: {states:?})")));
        }
        let asked = state_summary::Asked {
            top: query.top,
            prefix: query.prefix.as_deref(),
            limit: query.limit.unwrap_or(DEFAULT_STATE_PAGE),
        };
        state_summary::summary(&app.host.db, &name, &state, &asked)
    })
    .await
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
pub(super) fn router(app: Shared) -> Router {
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
        .route("/v1/topologies/{name}/states/{state}/summary", get(state_summary))
        .route("/v1/topologies/{name}/queries/{query}", post(query).get(query_fields))
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

//! The server's connections: the accept loop (HTTP/1, at most so many
//! connections at once, each with its header timeout), and what a request
//! must pass before it is handled (its authorization, and its body read
//! whole within its size limit and timeout).

use super::app::{Shared, error};
use super::auth::authorized;
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use rlimit::Resource;
use std::sync::Arc;
use std::time::Duration;

/// An error that ends the connection: its request was not read whole.
fn closing(status: StatusCode, message: impl Into<String>) -> Response {
    let mut response = error(status, message);
    response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Largest body of a call outside /v1 (the dashboard, /health, /metrics):
/// none of them reads one.
const OTHER_BODY_LIMIT: usize = 64 << 10;

/// Admits a request: a /v1 call only if [`authorized`], before any of its
/// body is read; then reads the body whole before the call is handled
/// (a /v1 call's up to the upload limit, others' [`OTHER_BODY_LIMIT`]), once
/// the bodies read at once leave room for it ([`App::bodies`](super::app::App::bodies)): a body
/// declared over the limit is refused before any of it is read, one that
/// grows over it when it does, and one that does not arrive in time (room
/// for it included) ends the connection.
pub(super) async fn admit(State(app): State<Shared>, request: Request, next: Next) -> Response {
    let api = request.uri().path().starts_with("/v1/");
    if let (true, Err((status, why))) = (api, authorized(app.token.as_ref(), request.method(), request.headers())) {
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
pub(super) async fn accept(
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
pub(super) fn connection_limit(wanted: usize) -> usize {
    let Ok((soft, hard)) = Resource::NOFILE.get() else { return wanted };
    let files = if soft < hard && Resource::NOFILE.set(hard, hard).is_ok() { hard } else { soft };
    let allowed = usize::try_from(files / 4).unwrap_or(usize::MAX).max(1);
    if allowed < wanted {
        tracing::warn!("serving at most {allowed} connections at once, not {wanted}: the open-file limit is {files}");
    }
    wanted.min(allowed)
}

//! The connection to a NATS server, shared by the JetStream spouts and
//! `weir publish`: connecting with back-off, errors that name the server
//! (never its credentials), and NATS subject patterns.

use anyhow::{Context as _, Result, bail};
use async_nats::jetstream;
use std::time::{Duration, Instant};
use weir_config::NATS_REQUEST_TIMEOUT;
use weir_config::backoff::RECONNECT;

/// Where the NATS server is and how to reach it.
#[derive(Clone, PartialEq, Eq)]
pub struct NatsConfig {
    /// `nats://host:port` (several, comma-separated, for a cluster); a
    /// `user:password@` in it is used and never shown.
    pub url: String,
    /// A token to authenticate with.
    pub token: Option<String>,
    /// How long to keep trying to reach the server before giving up.
    pub retry_for: Duration,
}

impl std::fmt::Debug for NatsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsConfig")
            .field("server", &self.server())
            .field("token", &self.token.as_ref().map(|_| "(hidden)"))
            .field("retry_for", &self.retry_for)
            .finish()
    }
}

impl NatsConfig {
    /// The server's address as messages show it: without credentials.
    pub fn server(&self) -> String {
        self.urls()
            .iter()
            .map(|url| match url.rsplit_once('@') {
                Some((before, host)) => match before.split_once("://") {
                    Some((scheme, _)) => format!("{scheme}://{host}"),
                    None => host.to_owned(),
                },
                None => url.clone(),
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    fn urls(&self) -> Vec<String> {
        self.url.split(',').map(|u| u.trim().to_owned()).filter(|u| !u.is_empty()).collect()
    }
}

/// A connection to a NATS server with JetStream, and the runtime its
/// client runs on (the spouts and the CLI are synchronous).
pub struct Nats {
    /// Runs the client's connection in the background, between calls too.
    pub runtime: ClientRuntime,
    /// The client; it reconnects by itself after a lost connection.
    pub client: async_nats::Client,
    /// JetStream, each request bounded by [`NATS_REQUEST_TIMEOUT`].
    pub jetstream: jetstream::Context,
    /// The server, for messages.
    pub server: String,
}

/// The runtime a [`Nats`] client runs on. It is shut down in the
/// background when dropped, never waited for: it may be dropped inside
/// another runtime's task (a server's task holding a connection when the
/// server stops, say), where tokio forbids waiting (it panics), and the
/// client has flushed what it had to send before it goes.
pub struct ClientRuntime(Option<tokio::runtime::Runtime>);

impl std::ops::Deref for ClientRuntime {
    type Target = tokio::runtime::Runtime;

    fn deref(&self) -> &tokio::runtime::Runtime {
        self.0.as_ref().expect("the runtime lives until dropped")
    }
}

impl Drop for ClientRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

impl Nats {
    /// Connects to the server of `config`, as `name`, retrying with
    /// back-off for `config.retry_for`; a server that refuses the
    /// credentials is not retried.
    pub fn connect(config: &NatsConfig, name: &str) -> Result<Nats> {
        let server = config.server();
        let urls = config.urls();
        if urls.is_empty() {
            bail!("no NATS server given (--nats nats://HOST:PORT)");
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("weir-nats")
            .enable_all()
            .build()
            .context("starting the NATS client's runtime")?;
        let started = Instant::now();
        let mut backoff = RECONNECT;
        let mut tries = 0;
        let client = loop {
            tries += 1;
            let error = match runtime.block_on(options(config, name, &server).connect(urls.as_slice())) {
                Ok(client) => break client,
                Err(error) => error,
            };
            use async_nats::ConnectErrorKind::*;
            match error.kind() {
                AuthorizationViolation | Authentication => {
                    bail!("the NATS server at {server} refused the credentials ({error}): check --nats-token-file")
                }
                ServerParse => bail!("--nats {server} is not a NATS server address ({error})"),
                _ if started.elapsed() >= config.retry_for => bail!(
                    "cannot reach the NATS server at {server}: tried {tries} times over {:.1} s; last error: {error}",
                    started.elapsed().as_secs_f64()
                ),
                _ => {
                    let wait = backoff.next_wait();
                    tracing::warn!("cannot reach the NATS server at {server} ({error}); retrying in {wait:?}");
                    std::thread::sleep(wait);
                }
            }
        };
        // The context spawns a task of its own: build it on the runtime.
        let entered = runtime.enter();
        let jetstream = jetstream::ContextBuilder::new().timeout(NATS_REQUEST_TIMEOUT).build(client.clone());
        drop(entered);
        Ok(Nats { runtime: ClientRuntime(Some(runtime)), client, jetstream, server })
    }
}

fn options(config: &NatsConfig, name: &str, server: &str) -> async_nats::ConnectOptions {
    let server = server.to_owned();
    let options = async_nats::ConnectOptions::new()
        .name(name)
        .connection_timeout(Duration::from_secs(2))
        .request_timeout(Some(NATS_REQUEST_TIMEOUT))
        // A restarted server is found again within a second.
        .reconnect_delay_callback(|attempts| Duration::from_millis(100 * attempts.min(10) as u64))
        .event_callback(move |event| {
            let server = server.clone();
            async move {
                match event {
                    async_nats::Event::Disconnected => tracing::warn!("lost the NATS server at {server}"),
                    async_nats::Event::Connected => tracing::info!("connected to the NATS server at {server}"),
                    other => tracing::debug!("NATS server at {server}: {other}"),
                }
            }
        });
    match &config.token {
        Some(token) => options.token(token.clone()),
        None => options,
    }
}

/// Whether `error` is the server saying the stream does not exist.
pub fn is_stream_not_found(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(error) = cause {
        if let Some(api) = error.downcast_ref::<jetstream::Error>()
            && api.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND
        {
            return true;
        }
        cause = error.source();
    }
    false
}

pub use weir_plan::subject;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_is_shown_without_credentials() {
        let config = NatsConfig {
            url: "nats://me:secret@127.0.0.1:4222, nats://other:4222".into(),
            token: Some("tok".into()),
            retry_for: Duration::from_secs(1),
        };
        assert_eq!(config.server(), "nats://127.0.0.1:4222,nats://other:4222");
        let debug = format!("{config:?}");
        assert!(!debug.contains("secret") && !debug.contains("tok\""), "{debug}");
    }
}

//! The flags that name a NATS server, shared by `weir run`, `weir serve`
//! and `weir publish`.

use anyhow::Result;
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;
use weir_config::{DEFAULT_MAX_OUTBOX_KIB, DEFAULT_NATS_RETRY_MS};
use weir_io::nats::NatsConfig;

#[derive(Args, Debug)]
#[command(next_help_heading = "NATS JetStream")]
pub struct NatsArgs {
    /// The NATS server (with JetStream) of the JetStream spouts and of
    /// `weir publish`: nats://HOST:PORT, several comma-separated for a
    /// cluster; a user:password@ in it is used to log in and never shown.
    #[arg(long, value_name = "URL")]
    pub nats: Option<String>,
    /// A file holding the token to authenticate to the NATS server with.
    #[arg(long, value_name = "FILE")]
    pub nats_token_file: Option<PathBuf>,
    /// How long to keep trying to reach the NATS server, at start and after
    /// the connection is lost, before giving up (a topology halts), in
    /// milliseconds.
    #[arg(long, default_value_t = DEFAULT_NATS_RETRY_MS, value_name = "MS")]
    pub nats_retry_ms: u64,
}

/// The bound on a sink's outbox, shared by `weir run` and `weir serve`.
#[derive(Args, Debug)]
#[command(next_help_heading = "NATS JetStream")]
pub struct SinkArgs {
    /// Bytes one sink's outbox may hold, in KiB: its committed output not
    /// yet acknowledged by the server. A batch whose output would pass it
    /// halts the topology before it commits, naming the sink.
    #[arg(long, default_value_t = DEFAULT_MAX_OUTBOX_KIB, value_parser = clap::value_parser!(u64).range(1..), value_name = "KIB")]
    max_outbox_kib: u64,
}

impl SinkArgs {
    /// The bound, in bytes.
    pub fn max_outbox_bytes(&self) -> u64 {
        self.max_outbox_kib.saturating_mul(1 << 10)
    }
}

impl NatsArgs {
    /// The server asked for, if any.
    pub fn config(&self) -> Result<Option<NatsConfig>> {
        let Some(url) = &self.nats else { return Ok(None) };
        let token = super::token::read_token(self.nats_token_file.as_deref())?;
        Ok(Some(NatsConfig { url: url.clone(), token, retry_for: Duration::from_millis(self.nats_retry_ms) }))
    }
}

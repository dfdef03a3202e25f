//! The flags that name Kafka brokers and how to reach them, shared by
//! `weir run`, `weir serve` and `weir publish`.

use anyhow::{Context, Result, bail};
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;
use weir_io::kafka::{KafkaConfig, KafkaSasl, SaslMechanism};

/// How long to keep trying to reach the brokers, unless told.
const DEFAULT_KAFKA_RETRY_MS: u64 = 30_000;

#[derive(Args, Debug)]
#[command(next_help_heading = "Kafka")]
pub struct KafkaArgs {
    /// The Kafka brokers of the Kafka spouts and sinks: HOST:PORT, several
    /// comma-separated (the bootstrap list).
    #[arg(long, value_name = "BOOTSTRAP")]
    pub kafka: Option<String>,
    /// A Kafka client properties file (bootstrap.servers, security.protocol,
    /// sasl.mechanism, sasl.username, sasl.password or sasl.jaas.config,
    /// ssl.ca.location); the flags below override it.
    #[arg(long, value_name = "FILE")]
    pub kafka_properties: Option<PathBuf>,
    /// Log in with SASL: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
    #[arg(long, value_name = "MECHANISM")]
    pub kafka_sasl_mechanism: Option<String>,
    /// The SASL user.
    #[arg(long, value_name = "USER")]
    pub kafka_username: Option<String>,
    /// A file holding the SASL password.
    #[arg(long, value_name = "FILE")]
    pub kafka_password_file: Option<PathBuf>,
    /// Reach the brokers over TLS (the system's CA certificates unless
    /// --kafka-ca names others).
    #[arg(long)]
    pub kafka_tls: bool,
    /// The CA certificates (PEM) to check the brokers' TLS certificates
    /// against; implies --kafka-tls.
    #[arg(long, value_name = "FILE")]
    pub kafka_ca: Option<PathBuf>,
    /// How long to keep trying to reach the brokers, at start and after the
    /// connection is lost, before giving up (a topology halts), in
    /// milliseconds.
    #[arg(long, default_value_t = DEFAULT_KAFKA_RETRY_MS, value_name = "MS")]
    pub kafka_retry_ms: u64,
}

impl KafkaArgs {
    /// The brokers asked for, if any.
    pub fn config(&self) -> Result<Option<KafkaConfig>> {
        let retry_for = Duration::from_millis(self.kafka_retry_ms);
        let mut config = match (&self.kafka, &self.kafka_properties) {
            (None, None) => {
                if self.kafka_sasl_mechanism.is_some() || self.kafka_tls || self.kafka_ca.is_some() {
                    bail!("the Kafka security flags need the brokers: --kafka HOST:PORT");
                }
                return Ok(None);
            }
            (Some(brokers), _) => KafkaConfig::plain(brokers, retry_for)?,
            (None, Some(_)) => KafkaConfig { brokers: Vec::new(), sasl: None, tls: None, retry_for },
        };
        if let Some(file) = &self.kafka_properties {
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("reading the Kafka properties file {}", file.display()))?;
            let brokers = std::mem::take(&mut config.brokers);
            config.apply_properties(&text, file)?;
            if !brokers.is_empty() {
                config.brokers = brokers;
            }
            if config.brokers.is_empty() {
                bail!("Kafka properties file {} names no bootstrap.servers: give them with --kafka", file.display());
            }
        }
        if let Some(mechanism) = &self.kafka_sasl_mechanism {
            let mechanism = SaslMechanism::parse(mechanism)?;
            let username = self.kafka_username.clone().context("--kafka-sasl-mechanism needs --kafka-username")?;
            let file =
                self.kafka_password_file.as_ref().context("--kafka-sasl-mechanism needs --kafka-password-file")?;
            let password = std::fs::read_to_string(file)
                .with_context(|| format!("reading the Kafka password file {}", file.display()))?
                .trim_end_matches(['\n', '\r'])
                .to_owned();
            config.sasl = Some(KafkaSasl { mechanism, username, password });
        } else if self.kafka_username.is_some() || self.kafka_password_file.is_some() {
            bail!("--kafka-username and --kafka-password-file need --kafka-sasl-mechanism");
        }
        if let Some(ca) = &self.kafka_ca {
            config.tls = Some(Some(ca.clone()));
        } else if self.kafka_tls {
            config.tls.get_or_insert(None);
        }
        Ok(Some(config))
    }
}

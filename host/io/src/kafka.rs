//! The connection to Kafka brokers, shared by the Kafka spouts, the Kafka
//! sink and `weir publish --kafka`: the client's settings (brokers, SASL,
//! TLS, or a client properties file), connecting with back-off, and which
//! errors a retry can cure. Messages name the brokers, never credentials.

use anyhow::{Context as _, Result, anyhow, bail};
use rskafka::client::error::{Error as ClientError, ProtocolError};
use rskafka::client::partition::{PartitionClient, UnknownTopicHandling};
use rskafka::client::{Client, ClientBuilder, Credentials, SaslConfig};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_config::backoff::RECONNECT;

/// The SASL mechanisms the client speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SaslMechanism {
    /// PLAIN (send it over TLS only).
    Plain,
    /// SCRAM-SHA-256.
    ScramSha256,
    /// SCRAM-SHA-512.
    ScramSha512,
}

impl SaslMechanism {
    /// The mechanism Kafka's settings name `name`.
    pub fn parse(name: &str) -> Result<SaslMechanism> {
        Ok(match name.trim().to_ascii_uppercase().as_str() {
            "PLAIN" => SaslMechanism::Plain,
            "SCRAM-SHA-256" => SaslMechanism::ScramSha256,
            "SCRAM-SHA-512" => SaslMechanism::ScramSha512,
            other => bail!("SASL mechanism {other:?} is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
        })
    }
}

/// A SASL login.
#[derive(Clone, PartialEq, Eq)]
pub struct KafkaSasl {
    /// How it logs in.
    pub mechanism: SaslMechanism,
    /// The user.
    pub username: String,
    /// The password, never shown.
    pub password: String,
}

/// Where the Kafka brokers are and how to reach them.
#[derive(Clone, PartialEq, Eq)]
pub struct KafkaConfig {
    /// Bootstrap brokers, `host:port` each.
    pub brokers: Vec<String>,
    /// A SASL login, if the brokers ask for one.
    pub sasl: Option<KafkaSasl>,
    /// TLS to the brokers; `Some(None)`: the system's roots, `Some(Some(f))`:
    /// the CA certificates (PEM) of file `f`.
    pub tls: Option<Option<PathBuf>>,
    /// How long to keep trying to reach the brokers before giving up.
    pub retry_for: Duration,
}

impl std::fmt::Debug for KafkaConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaConfig")
            .field("brokers", &self.brokers)
            .field("sasl", &self.sasl.as_ref().map(|s| (s.mechanism, &s.username, "(hidden)")))
            .field("tls", &self.tls)
            .field("retry_for", &self.retry_for)
            .finish()
    }
}

impl KafkaConfig {
    /// Brokers from a comma-separated list, without TLS or SASL.
    pub fn plain(brokers: &str, retry_for: Duration) -> Result<KafkaConfig> {
        let brokers = split_brokers(brokers)?;
        Ok(KafkaConfig { brokers, sasl: None, tls: None, retry_for })
    }

    /// The brokers as messages show them.
    pub fn servers(&self) -> String {
        self.brokers.join(",")
    }

    /// Applies a Java-style client properties file (`key=value` lines,
    /// `#` comments): `bootstrap.servers`, `security.protocol`,
    /// `sasl.mechanism`, `sasl.username`, `sasl.password` (or a
    /// `sasl.jaas.config` naming them) and `ssl.ca.location`. A key that
    /// asks for what this client cannot do (client certificates, Kerberos,
    /// a JKS trust store) is refused by name; others are ignored.
    pub fn apply_properties(&mut self, text: &str, file: &Path) -> Result<()> {
        let at = |line: usize| format!("Kafka properties file {} line {line}", file.display());
        let (mut protocol, mut mechanism, mut username, mut password) = (None, None, None, None);
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
                continue;
            }
            let Some((key, value)) = line.split_once('=').or_else(|| line.split_once(':')) else {
                bail!("{}: {line:?} is not key=value", at(i + 1));
            };
            let (key, value) = (key.trim(), value.trim().to_owned());
            match key {
                "bootstrap.servers" | "metadata.broker.list" => {
                    self.brokers = split_brokers(&value).with_context(|| at(i + 1))?
                }
                "security.protocol" => protocol = Some(value.to_ascii_uppercase()),
                "sasl.mechanism" | "sasl.mechanisms" => {
                    mechanism = Some(SaslMechanism::parse(&value).with_context(|| at(i + 1))?)
                }
                "sasl.username" => username = Some(value),
                "sasl.password" => password = Some(value),
                "sasl.jaas.config" => {
                    username = jaas_value(&value, "username").or(username);
                    password = jaas_value(&value, "password").or(password);
                }
                "ssl.ca.location" => {
                    self.tls = Some(Some(PathBuf::from(value)));
                }
                "ssl.truststore.location"
                | "ssl.keystore.location"
                | "ssl.certificate.location"
                | "ssl.key.location"
                | "sasl.kerberos.service.name"
                | "sasl.oauthbearer.config" => {
                    bail!("{}: {key} is not supported (give CA certificates as PEM with ssl.ca.location)", at(i + 1))
                }
                _ => tracing::debug!("{}: {key} is not used", at(i + 1)),
            }
        }
        match protocol.as_deref() {
            None | Some("PLAINTEXT") => {}
            Some("SSL") => {
                self.tls.get_or_insert(None);
            }
            Some("SASL_PLAINTEXT") => {}
            Some("SASL_SSL") => {
                self.tls.get_or_insert(None);
            }
            Some(other) => bail!("Kafka properties file {}: security.protocol {other} is unknown", file.display()),
        }
        let wants_sasl = matches!(protocol.as_deref(), Some("SASL_PLAINTEXT" | "SASL_SSL")) || mechanism.is_some();
        if wants_sasl {
            let (Some(username), Some(password)) = (username, password) else {
                bail!("Kafka properties file {}: SASL needs sasl.username and sasl.password", file.display());
            };
            let mechanism = mechanism.unwrap_or(SaslMechanism::Plain);
            self.sasl = Some(KafkaSasl { mechanism, username, password });
        }
        Ok(())
    }
}

/// `key="value"` out of a JAAS line.
fn jaas_value(jaas: &str, key: &str) -> Option<String> {
    let at = jaas.find(&format!("{key}="))? + key.len() + 1;
    let rest = jaas[at..].strip_prefix('"')?;
    Some(rest[..rest.find('"')?].to_owned())
}

fn split_brokers(list: &str) -> Result<Vec<String>> {
    let brokers: Vec<String> = list.split(',').map(str::trim).filter(|b| !b.is_empty()).map(str::to_owned).collect();
    if brokers.is_empty() {
        bail!("no Kafka broker given: --kafka HOST:PORT[,HOST:PORT...]");
    }
    for broker in &brokers {
        let Some((host, port)) = broker.rsplit_once(':') else {
            bail!("Kafka broker {broker:?} is not HOST:PORT");
        };
        if host.is_empty() || port.parse::<u16>().is_err() {
            bail!("Kafka broker {broker:?} is not HOST:PORT");
        }
    }
    Ok(brokers)
}

/// A failure to talk to the brokers.
#[derive(Debug)]
pub enum Failure {
    /// Out of reach, or no answer in time: the same request may succeed
    /// after a reconnect.
    Lost(anyhow::Error),
    /// Refused for good (no such topic, records gone, bad login).
    Fatal(anyhow::Error),
}

impl Failure {
    /// The error, whichever kind.
    pub fn into_error(self) -> anyhow::Error {
        match self {
            Failure::Lost(e) | Failure::Fatal(e) => e,
        }
    }

    /// `error` of a request that was `doing` something, classified.
    pub fn of(error: ClientError, doing: impl std::fmt::Display) -> Failure {
        match &error {
            ClientError::ServerError { protocol_error, .. } => match protocol_error {
                ProtocolError::NotLeaderOrFollower
                | ProtocolError::LeaderNotAvailable
                | ProtocolError::RequestTimedOut
                | ProtocolError::NetworkException
                | ProtocolError::NotEnoughReplicas
                | ProtocolError::NotEnoughReplicasAfterAppend
                | ProtocolError::CoordinatorNotAvailable
                | ProtocolError::KafkaStorageError => Failure::Lost(anyhow!("{doing}: {protocol_error}")),
                _ => Failure::Fatal(anyhow!("{doing}: the broker refused it: {protocol_error}")),
            },
            ClientError::Connection(e) if is_login(&e.to_string()) => {
                Failure::Fatal(anyhow!("{doing}: the brokers refused the login ({e})"))
            }
            _ => Failure::Lost(anyhow!("{doing}: {error}")),
        }
    }
}

fn is_login(text: &str) -> bool {
    let text = text.to_ascii_lowercase();
    text.contains("sasl") && (text.contains("auth") || text.contains("fail"))
}

/// The protocol error of `error`, if the broker answered with one.
pub fn protocol_error(error: &ClientError) -> Option<ProtocolError> {
    match error {
        ClientError::ServerError { protocol_error, .. } => Some(*protocol_error),
        _ => None,
    }
}

/// How long one request may be retried by the client itself before it
/// comes back to the caller, who retries on its own terms.
const CLIENT_DEADLINE: Duration = Duration::from_secs(3);

/// A connection to Kafka brokers, and the runtime its client runs on (the
/// spouts, the sink and the CLI are synchronous).
pub struct Kafka {
    /// Runs the client's connections.
    pub runtime: tokio::runtime::Runtime,
    client: Option<Arc<Client>>,
    config: KafkaConfig,
    name: String,
}

impl Kafka {
    /// Connects to the brokers of `config` as `name`, retrying with
    /// back-off for `config.retry_for` before giving up naming them.
    pub fn connect(config: &KafkaConfig, name: &str) -> Result<Kafka> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("weir-kafka")
            .enable_all()
            .build()
            .context("starting the Kafka client's runtime")?;
        let mut kafka = Kafka { runtime, client: None, config: config.clone(), name: name.to_owned() };
        let started = Instant::now();
        let mut backoff = RECONNECT;
        loop {
            match kafka.client() {
                Ok(_) => return Ok(kafka),
                Err(Failure::Fatal(e)) => return Err(e),
                Err(Failure::Lost(e)) => {
                    if started.elapsed() >= config.retry_for {
                        return Err(e.context(format!(
                            "the Kafka brokers at {} have been out of reach for {:.1} s",
                            config.servers(),
                            started.elapsed().as_secs_f64()
                        )));
                    }
                    let wait = backoff.next_wait();
                    tracing::warn!("{name}: {e:#}; retrying in {} ms", wait.as_millis());
                    std::thread::sleep(wait);
                }
            }
        }
    }

    /// The settings it connected with.
    pub fn config(&self) -> &KafkaConfig {
        &self.config
    }

    /// The client, connecting it first where the last one was dropped.
    pub fn client(&mut self) -> Result<Arc<Client>, Failure> {
        if let Some(client) = &self.client {
            return Ok(Arc::clone(client));
        }
        let doing = format!("connecting to the Kafka brokers at {}", self.config.servers());
        let mut builder = ClientBuilder::new(self.config.brokers.clone())
            .client_id(self.name.clone())
            .max_message_size(256 << 20)
            .backoff_config(backoff_config());
        if let Some(ca) = &self.config.tls {
            builder = builder.tls_config(Arc::new(tls_config(ca.as_deref()).map_err(Failure::Fatal)?));
        }
        if let Some(sasl) = &self.config.sasl {
            let credentials = Credentials::new(sasl.username.clone(), sasl.password.clone());
            builder = builder.sasl_config(match sasl.mechanism {
                SaslMechanism::Plain => SaslConfig::Plain(credentials),
                SaslMechanism::ScramSha256 => SaslConfig::ScramSha256(credentials),
                SaslMechanism::ScramSha512 => SaslConfig::ScramSha512(credentials),
            });
        }
        let built = self.runtime.block_on(async { tokio::time::timeout(CLIENT_DEADLINE * 2, builder.build()).await });
        let client = match built {
            Ok(Ok(client)) => Arc::new(client),
            Ok(Err(e)) => return Err(Failure::of(e, doing)),
            Err(_) => return Err(Failure::Lost(anyhow!("{doing}: no answer in time"))),
        };
        self.client = Some(Arc::clone(&client));
        Ok(client)
    }

    /// Drops the client after a lost connection: the next call connects
    /// afresh.
    pub fn forget(&mut self) {
        self.client = None;
    }

    /// The partitions `topic` has now; fatal when it does not exist.
    pub fn partitions(&mut self, topic: &str) -> Result<Vec<i32>, Failure> {
        let client = self.client()?;
        let doing = format!("listing the partitions of Kafka topic {topic} at {}", self.config.servers());
        let listed =
            self.runtime.block_on(async { tokio::time::timeout(CLIENT_DEADLINE * 2, client.list_topics()).await });
        let topics = match listed {
            Ok(Ok(topics)) => topics,
            Ok(Err(e)) => return Err(Failure::of(e, doing)),
            Err(_) => return Err(Failure::Lost(anyhow!("{doing}: no answer in time"))),
        };
        match topics.into_iter().find(|t| t.name == topic) {
            Some(found) if !found.partitions.is_empty() => Ok(found.partitions.into_iter().collect()),
            _ => Err(Failure::Fatal(anyhow!(
                "Kafka topic {topic} does not exist on the brokers at {} (create it first)",
                self.config.servers()
            ))),
        }
    }

    /// A client of `partition` of `topic`.
    pub fn partition(&mut self, topic: &str, partition: i32) -> Result<Arc<PartitionClient>, Failure> {
        let client = self.client()?;
        let doing = format!("reaching partition {partition} of Kafka topic {topic} at {}", self.config.servers());
        let got = self.runtime.block_on(async {
            tokio::time::timeout(
                CLIENT_DEADLINE * 2,
                client.partition_client(topic.to_owned(), partition, UnknownTopicHandling::Error),
            )
            .await
        });
        match got {
            Ok(Ok(partition)) => Ok(Arc::new(partition)),
            Ok(Err(e)) => Err(Failure::of(e, doing)),
            Err(_) => Err(Failure::Lost(anyhow!("{doing}: no answer in time"))),
        }
    }
}

/// The client's own retries: short, so that a lost broker comes back to
/// the caller, whose back-off and time limit say when to give up.
pub fn backoff_config() -> rskafka::BackoffConfig {
    rskafka::BackoffConfig {
        init_backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(500),
        base: 2.0,
        deadline: Some(CLIENT_DEADLINE),
    }
}

/// TLS with the CA certificates of `ca` (PEM), or the system's roots.
fn tls_config(ca: Option<&Path>) -> Result<rustls::ClientConfig> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    match ca {
        Some(file) => {
            let certificates = CertificateDer::pem_file_iter(file)
                .with_context(|| format!("reading the Kafka CA certificates {}", file.display()))?;
            for certificate in certificates {
                let certificate =
                    certificate.with_context(|| format!("reading the Kafka CA certificates {}", file.display()))?;
                roots.add(certificate).with_context(|| format!("a CA certificate of {}", file.display()))?;
            }
        }
        None => {
            let native = rustls_native_certs::load_native_certs();
            for certificate in native.certs {
                let _ = roots.add(certificate);
            }
            if roots.is_empty() {
                bail!("no system CA certificates found for TLS to Kafka: give them with --kafka-ca FILE");
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS settings for Kafka")?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn brokers_are_host_and_port_and_a_properties_file_sets_sasl_and_tls() {
        let config = KafkaConfig::plain("a:9092, b:9093", Duration::from_secs(1)).unwrap();
        assert_eq!(config.brokers, ["a:9092", "b:9093"]);
        let e = KafkaConfig::plain("nohost", Duration::ZERO).unwrap_err().to_string();
        assert!(e.contains("Kafka broker \"nohost\" is not HOST:PORT"), "{e}");
        assert!(KafkaConfig::plain(" , ", Duration::ZERO).unwrap_err().to_string().contains("no Kafka broker"));

        let mut config = KafkaConfig::plain("x:1", Duration::ZERO).unwrap();
        let text = "# client\nbootstrap.servers=k1:9092,k2:9092\nsecurity.protocol=SASL_SSL\n\
                    sasl.mechanism=SCRAM-SHA-512\nsasl.jaas.config=org.apache.kafka.common.security.scram.\
                    ScramLoginModule required username=\"ann\" password=\"s3cret\";\nssl.ca.location=/etc/ca.pem\n\
                    client.id=whatever\n";
        config.apply_properties(text, Path::new("client.properties")).unwrap();
        assert_eq!(config.brokers, ["k1:9092", "k2:9092"]);
        let sasl = config.sasl.clone().unwrap();
        assert_eq!(
            (sasl.mechanism, sasl.username.as_str(), sasl.password.as_str()),
            (SaslMechanism::ScramSha512, "ann", "s3cret")
        );
        assert_eq!(config.tls, Some(Some(PathBuf::from("/etc/ca.pem"))));
        assert!(!format!("{config:?}").contains("s3cret"));

        let mut config = KafkaConfig::plain("x:1", Duration::ZERO).unwrap();
        let e = config.apply_properties("security.protocol=SASL_PLAINTEXT\n", Path::new("p")).unwrap_err();
        assert!(e.to_string().contains("SASL needs sasl.username and sasl.password"), "{e}");
        let e = config.apply_properties("ssl.keystore.location=/k.jks\n", Path::new("p")).unwrap_err();
        assert!(format!("{e:#}").contains("ssl.keystore.location is not supported"), "{e:#}");
        let e = config.apply_properties("sasl.mechanism=GSSAPI\n", Path::new("p")).unwrap_err();
        assert!(format!("{e:#}").contains("\"GSSAPI\" is not one of"), "{e:#}");
    }
}

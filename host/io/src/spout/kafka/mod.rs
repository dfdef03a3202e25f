//! The built-in spouts over a Kafka topic, each of its partitions a
//! partition of the spout. The host reads the log; the guest never reaches
//! the network. No consumer group is used: the offsets live in Weir's
//! store, with the state (as Trident kept them in ZooKeeper).
//!
//! - Transactional: a batch's metadata is each partition's offset range,
//!   recorded before the batch is processed; a replay reads exactly those
//!   records again, and halts the topology, naming the topic, partition and
//!   offsets, when the topic no longer holds them.
//! - Opaque: the metadata is each partition's next offset, stored at
//!   commit; a replay reads afresh from there.
//!
//! A record that can never become a tuple (not the declared JSON, not
//! UTF-8) is refused before its batch is recorded, naming its topic,
//! partition and offset. Brokers out of reach (at start or mid-run) are
//! retried with back-off for `--kafka-retry-ms` before the topology halts;
//! nothing is emitted from a read that did not finish.

mod meta;
mod records;

use super::backlog::Backlog;
use super::contract::{Emitted, Spout, Unreadable};
use crate::kafka::{Failure, Kafka, KafkaConfig, protocol_error};
use anyhow::{Context, Result, anyhow, bail};
use meta::Position;
use records::RecordShape;
use rskafka::client::error::{Error as ClientError, ProtocolError};
use rskafka::client::partition::{OffsetAt, PartitionClient};
use rskafka::record::RecordAndOffset;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_config::MAX_JETSTREAM_BATCH_MESSAGES;
use weir_config::backoff::RECONNECT;
use weir_plan::SpoutKind;
use weir_sdk::codec::{Batch, BatchWriter};
use weir_sdk::topology::{JetStreamKind, KafkaDef, PayloadDef};

/// The most bytes one fetch asks a broker for.
const FETCH_BYTES: usize = 8 << 20;

/// The fewest bytes one fetch asks a broker for.
const FETCH_MIN_BYTES: usize = 16 << 10;

/// What one record is taken to cost in a fetch until records are seen.
const RECORD_BYTES_GUESS: usize = 256;

/// Per-record overhead in a record batch, besides key, value and headers.
const RECORD_OVERHEAD: usize = 24;

/// How many bytes to ask for `records` records of about `each` bytes: a
/// broker sends what it is asked for (at least a whole record batch), and
/// one sending megabytes to a read that keeps a few records spends its time
/// on records read again by the next batch.
fn fetch_bytes(records: usize, each: usize) -> i32 {
    let want = records.saturating_mul(each).saturating_add(records.saturating_mul(each) / 4);
    want.clamp(FETCH_MIN_BYTES, FETCH_BYTES) as i32
}

/// How often the topic's partitions are listed again, for partitions added
/// while it runs.
const LIST_EVERY: Duration = Duration::from_secs(1);

/// Checks a Kafka spout's definition (it comes from a guest: every name and
/// number is bounded) before anything connects.
pub fn check(def: &KafkaDef, topology: &str) -> Result<()> {
    let spout = || format!("topology {topology}: the Kafka spout");
    weir_plan::subject::check_topic(&def.topic).with_context(spout)?;
    if let Some(partitions) = &def.partitions {
        if partitions.is_empty() || partitions.len() > meta::MAX_PARTITIONS {
            bail!("{}: give 1 to {} partitions, not {}", spout(), meta::MAX_PARTITIONS, partitions.len());
        }
        if let Some(p) = partitions.iter().find(|p| **p > i32::MAX as u32) {
            bail!("{}: partition {p} is out of range", spout());
        }
    }
    if let PayloadDef::Json { fields } = &def.value
        && fields.is_empty()
    {
        bail!("{}: a JSON value needs at least one field", spout());
    }
    if let Some(n) = def.max_per_partition
        && (n == 0 || n > MAX_JETSTREAM_BATCH_MESSAGES as u64)
    {
        bail!("{}: max_per_partition {n} is not between 1 and {MAX_JETSTREAM_BATCH_MESSAGES}", spout());
    }
    Ok(())
}

/// What reading a batch found.
enum Read {
    /// Nothing new in any partition; the offsets to watch from.
    Empty { next: Vec<(i32, i64)> },
    /// A batch, where each partition stands after it, and the records left
    /// per partition as of the read.
    Batch { positions: Vec<Position>, batch: Batch<'static>, pending: BTreeMap<i32, u64> },
}

/// Where an emission that found nothing left the spout.
struct CaughtUp {
    /// Each partition's next offset.
    next: Vec<(i32, i64)>,
    /// The metadata that emission followed.
    previous: Option<Vec<u8>>,
    /// The last wait saw nothing come: asking again would find nothing.
    quiet: bool,
}

/// A Kafka spout, with its connection.
pub struct KafkaSpout {
    promise: JetStreamKind,
    topology: String,
    topic: String,
    /// The partitions the topology names; all of the topic's when `None`.
    wanted: Option<Vec<i32>>,
    kafka: Kafka,
    shape: RecordShape,
    per_partition: usize,
    /// The bytes a record costs in a fetch, as last seen.
    record_bytes: usize,
    /// A client per partition read, by partition.
    clients: BTreeMap<i32, Arc<PartitionClient>>,
    /// When the partitions were last listed.
    listed: Option<Instant>,
    retry_for: Duration,
    /// Since when the brokers have been out of reach.
    lost_since: Option<Instant>,
    caught_up: Option<CaughtUp>,
    /// What is not yet committed, by partition.
    backlog: Backlog<i32>,
}

impl KafkaSpout {
    /// Connects to the brokers of `config` and checks that the topic and
    /// its partitions are there; up to `batch_size` records a partition per
    /// batch unless the definition says otherwise.
    pub fn open(def: &KafkaDef, topology: &str, config: &KafkaConfig, batch_size: usize) -> Result<KafkaSpout> {
        check(def, topology)?;
        let doing = || format!("topology {topology} reads Kafka topic {}", def.topic);
        let kafka = Kafka::connect(config, &format!("weir {topology}")).with_context(doing)?;
        let per_partition = def.max_per_partition.map_or(batch_size, |n| n as usize).max(1);
        let mut spout = KafkaSpout {
            promise: def.promise,
            topology: topology.to_owned(),
            topic: def.topic.clone(),
            wanted: def.partitions.as_ref().map(|list| list.iter().map(|p| *p as i32).collect()),
            kafka,
            shape: RecordShape::of(def),
            per_partition,
            record_bytes: RECORD_BYTES_GUESS,
            clients: BTreeMap::new(),
            listed: None,
            retry_for: config.retry_for,
            lost_since: None,
            caught_up: None,
            backlog: Backlog::default(),
        };
        spout.retrying(|spout| spout.list_partitions(true)).with_context(doing)?;
        Ok(spout)
    }

    /// Runs `attempt` until it succeeds, fails for good, or the brokers
    /// have been out of reach for longer than the retry window.
    fn retrying<T>(&mut self, mut attempt: impl FnMut(&mut Self) -> Result<T, Failure>) -> Result<T> {
        let mut backoff = RECONNECT;
        loop {
            match attempt(self) {
                Ok(value) => {
                    if self.lost_since.take().is_some() {
                        tracing::info!("topology {}: reading Kafka topic {} again", self.topology, self.topic);
                    }
                    return Ok(value);
                }
                Err(Failure::Fatal(e)) => return Err(e),
                Err(Failure::Lost(e)) => {
                    self.kafka.forget();
                    self.clients.clear();
                    self.listed = None;
                    let since = *self.lost_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= self.retry_for {
                        return Err(e.context(format!(
                            "the Kafka brokers at {} have been out of reach for {:.1} s",
                            self.kafka.config().servers(),
                            since.elapsed().as_secs_f64()
                        )));
                    }
                    let wait = backoff.next_wait();
                    tracing::warn!(
                        "topology {}: lost the Kafka brokers at {}: {e:#}; retrying in {} ms",
                        self.topology,
                        self.kafka.config().servers(),
                        wait.as_millis()
                    );
                    std::thread::sleep(wait);
                }
            }
        }
    }

    /// Lists the topic's partitions (at most once a second unless `now`),
    /// connecting to any not yet read: partitions added to the topic while
    /// it runs are read from their first record.
    fn list_partitions(&mut self, now: bool) -> Result<(), Failure> {
        if !now && !self.clients.is_empty() && self.listed.is_some_and(|at| at.elapsed() < LIST_EVERY) {
            return Ok(());
        }
        let all = self.kafka.partitions(&self.topic)?;
        let wanted = match &self.wanted {
            Some(wanted) => {
                if let Some(missing) = wanted.iter().find(|p| !all.contains(p)) {
                    return Err(Failure::Fatal(anyhow!(
                        "Kafka topic {} has no partition {missing} (it has partitions {})",
                        self.topic,
                        describe(&all)
                    )));
                }
                wanted.clone()
            }
            None => all,
        };
        for partition in wanted {
            if !self.clients.contains_key(&partition) {
                let client = self.kafka.partition(&self.topic, partition)?;
                self.clients.insert(partition, client);
            }
        }
        self.listed = Some(Instant::now());
        Ok(())
    }

    /// Reads the batch after the one that left the partitions at `before`.
    fn read_next(&mut self, before: &[Position]) -> Result<Read, Failure> {
        self.list_partitions(false)?;
        let (max, each) = (self.per_partition, self.record_bytes);
        let mut starts = Vec::with_capacity(self.clients.len());
        let mut tasks = Vec::with_capacity(self.clients.len());
        for (&partition, client) in &self.clients {
            let start = before.iter().find(|p| p.partition == partition).map(|p| p.next);
            starts.push((partition, start));
            let client = Arc::clone(client);
            tasks.push(self.kafka.runtime.spawn(async move {
                let start = match start {
                    Some(start) => start,
                    // A partition not read before starts at its first record.
                    None => timed(client.get_offset(OffsetAt::Earliest)).await?,
                };
                match read_range(&client, start, max, None, each).await {
                    Ok(read) => Ok::<_, ClientError>((start, read, None)),
                    // Records deleted before they were read (retention, or a
                    // poison record deleted on purpose): read on from the
                    // first record left, saying what was passed over.
                    Err(e) if protocol_error(&e) == Some(ProtocolError::OffsetOutOfRange) => {
                        let earliest = timed(client.get_offset(OffsetAt::Earliest)).await?;
                        if earliest <= start {
                            return Err(e);
                        }
                        let read = read_range(&client, earliest, max, None, each).await?;
                        Ok((earliest, read, Some(start)))
                    }
                    Err(e) => Err(e),
                }
            }));
        }
        let reads = self.kafka.runtime.block_on(async {
            let mut reads = Vec::with_capacity(tasks.len());
            for task in tasks {
                reads.push(task.await.expect("a read does not panic"));
            }
            reads
        });
        let mut writer = BatchWriter::new(self.shape.arity());
        let mut positions = Vec::with_capacity(starts.len());
        let mut pending = BTreeMap::new();
        for ((partition, _), read) in starts.into_iter().zip(reads) {
            let (start, (records, high), skipped) = read.map_err(|e| self.failure(e, partition, "reading"))?;
            if let Some(from) = skipped {
                tracing::warn!(
                    "topology {}: Kafka topic {} no longer holds offsets {from}..={} of partition {partition}, deleted \
                     before they were read: reading on from offset {start}",
                    self.topology,
                    self.topic,
                    start - 1
                );
            }
            if records.is_empty() && high < start {
                return Err(Failure::Fatal(anyhow!(
                    "partition {partition} of Kafka topic {} ends at offset {high}, before offset {start} that the \
                     topology reads next: was the topic deleted and made again?",
                    self.topic
                )));
            }
            if let Some(size) = average_size(&records) {
                self.record_bytes = size;
            }
            for record in &records {
                self.shape.push(&mut writer, partition, record.offset, &record.record).map_err(|e| {
                    Failure::Fatal(anyhow::Error::new(Unreadable(format!(
                        "topology {}: the record at offset {} of partition {partition} of Kafka topic {} cannot \
                         become a tuple: {e}; delete it (kafka-delete-records up to offset {}) or fix the topology, \
                         then run again",
                        self.topology,
                        record.offset,
                        self.topic,
                        record.offset + 1
                    ))))
                })?;
            }
            let next = records.last().map_or(start, |r| r.offset + 1);
            pending.insert(partition, u64::try_from(high - next).unwrap_or(0));
            let first = records.first().map_or(start, |r| r.offset);
            positions.push(Position { partition, next, first, count: records.len() as u64 });
        }
        // Partitions read before but no longer listed keep where they were.
        for old in before {
            if !positions.iter().any(|p| p.partition == old.partition) {
                positions.push(Position { count: 0, first: old.next, ..old.clone() });
            }
        }
        positions.sort_by_key(|p| p.partition);
        if writer.rows() == 0 {
            return Ok(Read::Empty { next: positions.iter().map(|p| (p.partition, p.next)).collect() });
        }
        Ok(Read::Batch { positions, batch: writer.finish_batch(), pending })
    }

    /// Reads again exactly the records of `positions`; a record no longer
    /// held is fatal.
    fn read_again(&mut self, positions: &[Position]) -> Result<Batch<'static>, Failure> {
        let mut tasks = Vec::new();
        for p in positions.iter().filter(|p| p.count > 0) {
            let client = match self.clients.get(&p.partition) {
                Some(client) => Arc::clone(client),
                None => {
                    let client = self.kafka.partition(&self.topic, p.partition)?;
                    self.clients.insert(p.partition, Arc::clone(&client));
                    client
                }
            };
            let (first, count, next, each) = (p.first, p.count as usize, p.next, self.record_bytes);
            let task =
                self.kafka.runtime.spawn(async move { read_range(&client, first, count, Some(next), each).await });
            tasks.push((p, task));
        }
        let mut writer = BatchWriter::new(self.shape.arity());
        for (p, task) in tasks {
            let read = self.kafka.runtime.block_on(task).expect("a read does not panic");
            let gone = |left: usize| {
                Failure::Fatal(anyhow!(
                    "Kafka topic {} no longer holds the records recorded in partition {}: offsets {}..={} held {} \
                     records, {left} of them are left (removed by the topic's retention or a deletion)",
                    self.topic,
                    p.partition,
                    p.first,
                    p.last(),
                    p.count,
                ))
            };
            let records = match read {
                Ok((records, _)) => records,
                Err(e) if protocol_error(&e) == Some(ProtocolError::OffsetOutOfRange) => return Err(gone(0)),
                Err(e) => return Err(self.failure(e, p.partition, "reading again")),
            };
            let whole = records.len() as u64 == p.count
                && records.first().map(|r| r.offset) == Some(p.first)
                && records.last().map(|r| r.offset) == Some(p.last());
            if !whole {
                return Err(gone(records.len()));
            }
            for record in &records {
                self.shape.push(&mut writer, p.partition, record.offset, &record.record).map_err(|e| {
                    Failure::Fatal(anyhow::Error::new(Unreadable(format!(
                        "the record at offset {} of partition {} of Kafka topic {} cannot become a tuple: {e}",
                        record.offset, p.partition, self.topic
                    ))))
                })?;
            }
        }
        Ok(writer.finish_batch())
    }

    /// A failed request on `partition`, classified; records gone from
    /// under the offset to read are fatal.
    fn failure(&self, error: ClientError, partition: i32, doing: &str) -> Failure {
        if protocol_error(&error) == Some(ProtocolError::OffsetOutOfRange) {
            return Failure::Fatal(anyhow!(
                "Kafka topic {} no longer holds the records of partition {partition} the topology reads next \
                 (removed by the topic's retention or a deletion before they were read): {error}",
                self.topic
            ));
        }
        if protocol_error(&error) == Some(ProtocolError::UnknownTopicOrPartition) {
            return Failure::Fatal(anyhow!("Kafka topic {} has no partition {partition} any more", self.topic));
        }
        Failure::of(error, format!("{doing} partition {partition} of Kafka topic {}", self.topic))
    }
}

/// How long one request to a broker may take before the connection is
/// taken for lost.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// `request`, or a timeout once it took [`REQUEST_TIMEOUT`].
pub(crate) async fn timed<T>(request: impl Future<Output = Result<T, ClientError>>) -> Result<T, ClientError> {
    tokio::time::timeout(REQUEST_TIMEOUT, request).await.unwrap_or(Err(ClientError::Timeout))
}

/// The bytes a record of `records` costs in a fetch, on average.
fn average_size(records: &[RecordAndOffset]) -> Option<usize> {
    let total: usize = records.iter().map(|r| r.record.approximate_size() + RECORD_OVERHEAD).sum();
    total.checked_div(records.len())
}

/// Reads up to `max` records of `client`'s partition from offset `start`,
/// and before `until` where given, asking for about `each` bytes a record;
/// also the partition's high watermark.
async fn read_range(
    client: &PartitionClient,
    start: i64,
    max: usize,
    until: Option<i64>,
    each: usize,
) -> Result<(Vec<RecordAndOffset>, i64), ClientError> {
    let mut records: Vec<RecordAndOffset> = Vec::new();
    let mut offset = start;
    // A fetch at the end of a partition may be held by the broker (tansu
    // does, until a record comes): ask where the end is first.
    let mut high = timed(client.get_offset(OffsetAt::Latest)).await?;
    while records.len() < max && until.is_none_or(|until| offset < until) && offset < high {
        let left = max - records.len();
        let (fetched, watermark) = timed(client.fetch_records(offset, 1..fetch_bytes(left, each), 0)).await?;
        high = watermark;
        let before = records.len();
        for record in fetched {
            if record.offset < offset || until.is_some_and(|until| record.offset >= until) || records.len() >= max {
                continue;
            }
            offset = record.offset + 1;
            records.push(record);
        }
        if records.len() == before || offset >= watermark {
            break;
        }
    }
    Ok((records, high))
}

/// The records a batch took from each partition.
fn per_partition(positions: &[Position]) -> BTreeMap<i32, u64> {
    positions.iter().map(|p| (p.partition, p.count)).collect()
}

/// Partitions as a short list: "0 to 3", or each.
fn describe(partitions: &[i32]) -> String {
    let contiguous = partitions.windows(2).all(|w| w[1] == w[0] + 1);
    match (partitions.first(), partitions.last()) {
        (Some(first), Some(last)) if contiguous && partitions.len() > 2 => format!("{first} to {last}"),
        _ => partitions.iter().map(i32::to_string).collect::<Vec<_>>().join(", "),
    }
}

impl Spout for KafkaSpout {
    fn kind(&self) -> SpoutKind {
        match self.promise {
            JetStreamKind::Transactional => SpoutKind::Transactional,
            JetStreamKind::Opaque => SpoutKind::Opaque,
        }
    }

    fn emit(&mut self, txid: u64, _attempt: u32, previous: Option<&[u8]>) -> Result<Option<Emitted>> {
        if let Some(caught_up) = &mut self.caught_up
            && caught_up.previous.as_deref() == previous
            && std::mem::take(&mut caught_up.quiet)
        {
            return Ok(None);
        }
        let before = previous.map(meta::decode).transpose()?.unwrap_or_default();
        let read = self.retrying(|spout| spout.read_next(&before)).with_context(|| {
            format!("topology {}: reading txid {txid} from Kafka topic {}", self.topology, self.topic)
        })?;
        match read {
            Read::Empty { next } => {
                self.caught_up = Some(CaughtUp { next, previous: previous.map(<[u8]>::to_vec), quiet: false });
                self.backlog.caught_up();
                Ok(None)
            }
            Read::Batch { positions, batch, pending } => {
                self.caught_up = None;
                let meta = meta::encode(&positions);
                self.backlog.emitted(previous, &meta, per_partition(&positions), pending);
                Ok(Some(Emitted { meta, batch }))
            }
        }
    }

    fn replay(&mut self, txid: u64, _attempt: u32, meta: &[u8]) -> Result<Batch<'static>> {
        let positions = meta::decode(meta)?;
        let batch = self.retrying(|spout| spout.read_again(&positions)).with_context(|| {
            format!(
                "topology {} halts at txid {txid}, which is not committed: it cannot be replayed exactly",
                self.topology
            )
        })?;
        self.backlog.replayed(meta, per_partition(&positions));
        Ok(batch)
    }

    fn lag(&mut self, committed: Option<&[u8]>) -> Option<u64> {
        Some(self.backlog.lag(committed))
    }

    fn partition_lag(&self) -> BTreeMap<String, u64> {
        self.backlog.by_partition().iter().map(|(p, n)| (format!("{}-{p}", self.topic), *n)).collect()
    }

    fn wait_for_input(&mut self, timeout: Duration) {
        let started = Instant::now();
        let Some(caught_up) = &mut self.caught_up else { return std::thread::sleep(timeout) };
        // Every partition's end at once: tansu holds a fetch at a
        // partition's end rather than answering when a record comes, so the
        // ends are asked for, once a wait, and the wait sleeps out the rest.
        let (tx, mut rx) = tokio::sync::mpsc::channel(caught_up.next.len().max(1));
        let mut tasks = Vec::new();
        for (partition, next) in &caught_up.next {
            let Some(client) = self.clients.get(partition).map(Arc::clone) else { continue };
            let (tx, next) = (tx.clone(), *next);
            tasks.push(self.kafka.runtime.spawn(async move {
                let latest = timed(client.get_offset(OffsetAt::Latest)).await;
                let _ = tx.send(matches!(latest, Ok(latest) if latest > next)).await;
            }));
        }
        drop(tx);
        let arrived = self.kafka.runtime.block_on(async {
            let any = async {
                while let Some(arrived) = rx.recv().await {
                    if arrived {
                        return true;
                    }
                }
                false
            };
            tokio::time::timeout(timeout, any).await.unwrap_or(false)
        });
        for task in tasks {
            task.abort();
        }
        caught_up.quiet = !arrived;
        if !arrived {
            // A broker that answers an empty poll at once must not make a
            // busy loop of it.
            std::thread::sleep(timeout.saturating_sub(started.elapsed()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def() -> KafkaDef {
        KafkaDef {
            promise: JetStreamKind::Transactional,
            topic: "clicks".into(),
            partitions: None,
            value: PayloadDef::String { field: "line".into() },
            key_field: None,
            partition_field: None,
            offset_field: None,
            timestamp_field: None,
            headers_field: None,
            max_per_partition: None,
        }
    }

    #[test]
    fn a_hostile_definition_is_refused_naming_what_is_wrong() {
        assert!(check(&def(), "t").is_ok());
        let err = |d: KafkaDef| format!("{:#}", check(&d, "t").unwrap_err());
        let e = err(KafkaDef { topic: "a b".into(), ..def() });
        assert!(e.contains("topology t: the Kafka spout: Kafka topic name \"a b\" must have"), "{e}");
        let e = err(KafkaDef { partitions: Some(vec![]), ..def() });
        assert!(e.contains("give 1 to 100000 partitions, not 0"), "{e}");
        let e = err(KafkaDef { partitions: Some(vec![u32::MAX]), ..def() });
        assert!(e.contains("partition 4294967295 is out of range"), "{e}");
        let e = err(KafkaDef { max_per_partition: Some(0), ..def() });
        assert!(e.contains("max_per_partition 0 is not between 1 and"), "{e}");
        let e = err(KafkaDef { value: PayloadDef::Json { fields: vec![] }, ..def() });
        assert!(e.contains("a JSON value needs at least one field"), "{e}");
        assert_eq!(describe(&[0, 1, 2, 3]), "0 to 3");
        assert_eq!(describe(&[0, 2]), "0, 2");
        assert_eq!(fetch_bytes(1, 50), 16 << 10);
        assert_eq!(fetch_bytes(10_000, 100), 1_250_000);
        assert_eq!(fetch_bytes(1 << 30, 100), 8 << 20);
    }
}

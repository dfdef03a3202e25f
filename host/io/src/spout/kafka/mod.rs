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

pub(super) mod meta;
mod records;

use super::backlog::Backlog;
use super::caught_up::CaughtUp;
use super::contract::{Emitted, Spout, Unreadable};
use super::outage::Outage;
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
use weir_plan::SpoutKind;
use weir_sdk::codec::{Batch, BatchWriter};
use weir_sdk::topology::{JetStreamKind, KafkaDef, PayloadDef};

/// The most bytes one fetch asks a broker for.
const FETCH_BYTES: usize = 8 << 20;

/// The fewest bytes one fetch asks a broker for.
const FETCH_MIN_BYTES: usize = 16 << 10;

/// What one record is taken to cost in a fetch until records are seen.
pub const RECORD_BYTES_GUESS: usize = 256;

/// Per-record overhead in a record batch, besides key, value and headers.
const RECORD_OVERHEAD: usize = 24;

/// How many bytes to ask for `records` records of about `each` bytes (a
/// broker sends what it is asked for, in whole record batches; what passes
/// the batch is kept for the next). The benchmark's raw drain asks the same.
pub fn fetch_bytes(records: usize, each: usize) -> i32 {
    let want = records.saturating_mul(each).saturating_add(records.saturating_mul(each) / 4);
    want.clamp(FETCH_MIN_BYTES, FETCH_BYTES) as i32
}

/// What `record` is taken to cost in a fetch.
pub fn record_bytes(record: &rskafka::record::Record) -> usize {
    record.approximate_size() + RECORD_OVERHEAD
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

/// What a read learnt besides its records, for the next read to ask less.
#[derive(Default)]
struct Learnt {
    /// The bytes a record costs in a fetch, as last seen.
    record_bytes: Option<usize>,
    /// Where each partition's last read ended.
    tails: BTreeMap<i32, Tail>,
}

impl Learnt {
    /// What the next read takes: the tails move to it (a read given up
    /// loses them, and its successor asks again).
    fn take(&mut self) -> Learnt {
        Learnt { record_bytes: self.record_bytes, tails: std::mem::take(&mut self.tails) }
    }
}

/// Where a partition's last read ended.
struct Tail {
    /// The offset it would read next.
    next: i64,
    /// The partition's high watermark, as the last fetch returned it.
    high: i64,
    /// Records fetched past what the batch took (a broker answers whole
    /// record batches), from `next` on: the next read starts with them
    /// rather than fetching them again.
    surplus: Vec<RecordAndOffset>,
}

/// What a read needs, cheap to clone onto the client's runtime for a read
/// ahead.
#[derive(Clone)]
struct Scope {
    topology: Arc<str>,
    topic: Arc<str>,
    shape: Arc<RecordShape>,
    per_partition: usize,
}

/// The batch after the last one emitted, read on the client's runtime
/// while the coordinator dispatches and commits.
struct Ahead {
    /// The metadata of the batch it follows.
    after: Vec<u8>,
    task: tokio::task::JoinHandle<Result<(Read, Learnt), Failure>>,
}

/// A Kafka spout, with its connection.
pub struct KafkaSpout {
    promise: JetStreamKind,
    scope: Scope,
    /// The partitions the topology names; all of the topic's when `None`.
    wanted: Option<Vec<i32>>,
    kafka: Kafka,
    /// Record sizes and high watermarks seen by the last read.
    learnt: Learnt,
    /// A client per partition read, by partition.
    clients: BTreeMap<i32, Arc<PartitionClient>>,
    /// When the partitions were last listed.
    listed: Option<Instant>,
    outage: Outage,
    /// Each partition's next offset, once an emission found nothing.
    caught_up: Option<CaughtUp<Vec<(i32, i64)>>>,
    /// At most one batch read ahead.
    ahead: Option<Ahead>,
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
            scope: Scope {
                topology: topology.into(),
                topic: def.topic.as_str().into(),
                shape: Arc::new(RecordShape::of(def)),
                per_partition,
            },
            wanted: def.partitions.as_ref().map(|list| list.iter().map(|p| *p as i32).collect()),
            kafka,
            learnt: Learnt::default(),
            clients: BTreeMap::new(),
            listed: None,
            outage: Outage::new(config.retry_for),
            caught_up: None,
            ahead: None,
            backlog: Backlog::default(),
        };
        spout.retrying(None, |spout| spout.list_partitions(true)).with_context(doing)?;
        Ok(spout)
    }

    /// Runs `attempt` until it succeeds, fails for good, or the brokers
    /// have been out of reach for longer than the retry window; `lost`: the
    /// brokers were found out of reach just before (by a read ahead).
    fn retrying<T>(
        &mut self,
        lost: Option<anyhow::Error>,
        mut attempt: impl FnMut(&mut Self) -> Result<T, Failure>,
    ) -> Result<T> {
        self.give_up_ahead();
        let mut lost = lost.map(Failure::Lost);
        loop {
            match lost.take().map_or_else(|| attempt(self), Err) {
                Ok(value) => {
                    if self.outage.reached() {
                        tracing::info!(
                            "topology {}: reading Kafka topic {} again",
                            self.scope.topology,
                            self.scope.topic
                        );
                    }
                    return Ok(value);
                }
                Err(Failure::Fatal(e)) => return Err(e),
                Err(Failure::Lost(e)) => {
                    self.kafka.forget();
                    self.clients.clear();
                    self.learnt.tails.clear();
                    self.listed = None;
                    let servers = self.kafka.config().servers();
                    let Some(wait) = self.outage.lost() else {
                        let seconds = self.outage.seconds();
                        return Err(e.context(format!(
                            "the Kafka brokers at {servers} have been out of reach for {seconds:.1} s"
                        )));
                    };
                    tracing::warn!(
                        "topology {}: lost the Kafka brokers at {servers}: {e:#}; retrying in {} ms",
                        self.scope.topology,
                        wait.as_millis()
                    );
                    std::thread::sleep(wait);
                }
            }
        }
    }

    /// Lists the topic's partitions (at most once a second unless `now`),
    /// connecting to any not yet read: partitions added to the topic while
    /// it runs are read from their first record. Whether one was added.
    fn list_partitions(&mut self, now: bool) -> Result<bool, Failure> {
        if !now && !self.clients.is_empty() && self.listed.is_some_and(|at| at.elapsed() < LIST_EVERY) {
            return Ok(false);
        }
        let topic = &*self.scope.topic;
        let all = self.kafka.partitions(topic)?;
        let wanted = match &self.wanted {
            Some(wanted) => {
                if let Some(missing) = wanted.iter().find(|p| !all.contains(p)) {
                    return Err(Failure::Fatal(anyhow!(
                        "Kafka topic {topic} has no partition {missing} (it has partitions {})",
                        describe(&all)
                    )));
                }
                wanted.clone()
            }
            None => all,
        };
        let mut added = false;
        for partition in wanted {
            if !self.clients.contains_key(&partition) {
                let client = self.kafka.partition(topic, partition)?;
                self.clients.insert(partition, client);
                if self.listed.is_some() {
                    tracing::info!(
                        "topology {}: reading partition {partition} of Kafka topic {topic}, new to it",
                        self.scope.topology
                    );
                }
                added = true;
            }
        }
        self.listed = Some(Instant::now());
        Ok(added)
    }

    /// Reads the batch after the one that left the partitions at `before`.
    fn read_next(&mut self, before: &[Position]) -> Result<Read, Failure> {
        self.list_partitions(false)?;
        let read = read_next(self.scope.clone(), self.partitions(), before.to_vec(), self.learnt.take());
        let (read, learnt) = self.kafka.runtime.block_on(read)?;
        self.learnt = learnt;
        Ok(read)
    }

    /// The partitions read, with their clients.
    fn partitions(&self) -> Vec<(i32, Arc<PartitionClient>)> {
        self.clients.iter().map(|(p, c)| (*p, Arc::clone(c))).collect()
    }

    /// Starts reading the batch after `positions` (whose metadata is
    /// `after`) on the client's runtime.
    fn read_ahead(&mut self, after: Vec<u8>, positions: Vec<Position>) {
        let read = read_next(self.scope.clone(), self.partitions(), positions, self.learnt.take());
        self.ahead = Some(Ahead { after, task: self.kafka.runtime.spawn(read) });
    }

    /// Gives up a read ahead: what it reads is not what is asked for.
    fn give_up_ahead(&mut self) {
        if let Some(ahead) = self.ahead.take() {
            ahead.task.abort();
        }
    }

    /// The read ahead, if it read the first attempt at the batch after
    /// `previous`; else the brokers' loss, if it met that.
    fn take_ahead(&mut self, attempt: u32, previous: Option<&[u8]>) -> (Option<Read>, Option<anyhow::Error>) {
        let Some(ahead) = self.ahead.take() else { return (None, None) };
        let wanted = attempt == 0 && previous == Some(ahead.after.as_slice());
        match self.kafka.runtime.block_on(ahead.task) {
            Ok(Ok((read, learnt))) => {
                // Its tails serve only a read that starts where it ended.
                self.learnt = learnt;
                // Found nothing: a read afresh may find more.
                if wanted && matches!(read, Read::Batch { .. }) { (Some(read), None) } else { (None, None) }
            }
            Ok(Err(Failure::Lost(e))) => (None, Some(e)),
            // Failed for good: the read afresh meets it again.
            Ok(Err(Failure::Fatal(_))) => (None, None),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => (None, None),
        }
    }

    /// Reads again exactly the records of `positions`; a record no longer
    /// held is fatal.
    fn read_again(&mut self, positions: &[Position]) -> Result<Batch<'static>, Failure> {
        let topic = &*self.scope.topic;
        let mut tasks = Vec::new();
        for p in positions.iter().filter(|p| p.count > 0) {
            let client = match self.clients.get(&p.partition) {
                Some(client) => Arc::clone(client),
                None => {
                    let client = self.kafka.partition(topic, p.partition)?;
                    self.clients.insert(p.partition, Arc::clone(&client));
                    client
                }
            };
            let (first, count, next) = (p.first, p.count as usize, p.next);
            let each = self.learnt.record_bytes.unwrap_or(RECORD_BYTES_GUESS);
            let task = self
                .kafka
                .runtime
                .spawn(async move { read_range(&client, first, count, Some(next), each, None, Vec::new()).await });
            tasks.push((p, task));
        }
        let mut writer = BatchWriter::new(self.scope.shape.arity());
        for (p, task) in tasks {
            let read = self.kafka.runtime.block_on(task).expect("a read does not panic");
            let gone = |left: usize| {
                Failure::Fatal(anyhow!(
                    "Kafka topic {topic} no longer holds the records recorded in partition {}: offsets {}..={} held {} \
                     records, {left} of them are left (removed by the topic's retention or a deletion)",
                    p.partition,
                    p.first,
                    p.last(),
                    p.count,
                ))
            };
            let records = match read {
                Ok(range) => range.records,
                Err(e) if protocol_error(&e) == Some(ProtocolError::OffsetOutOfRange) => return Err(gone(0)),
                Err(e) => return Err(failure(topic, e, p.partition, "reading again")),
            };
            let whole = records.len() as u64 == p.count
                && records.first().map(|r| r.offset) == Some(p.first)
                && records.last().map(|r| r.offset) == Some(p.last());
            if !whole {
                return Err(gone(records.len()));
            }
            for record in &records {
                self.scope.shape.push(&mut writer, p.partition, record.offset, &record.record).map_err(|e| {
                    Failure::Fatal(anyhow::Error::new(Unreadable(format!(
                        "the record at offset {} of partition {} of Kafka topic {topic} cannot become a tuple: {e}",
                        record.offset, p.partition
                    ))))
                })?;
            }
        }
        Ok(writer.finish_batch())
    }
}

impl Drop for KafkaSpout {
    fn drop(&mut self) {
        self.give_up_ahead();
    }
}

/// Reads the batch after the one that left the partitions at `before`:
/// every partition of `partitions` at once, on the client's runtime.
async fn read_next(
    scope: Scope,
    partitions: Vec<(i32, Arc<PartitionClient>)>,
    before: Vec<Position>,
    mut learnt: Learnt,
) -> Result<(Read, Learnt), Failure> {
    let (max, each) = (scope.per_partition, learnt.record_bytes.unwrap_or(RECORD_BYTES_GUESS));
    let mut tasks = Vec::with_capacity(partitions.len());
    for (partition, client) in partitions {
        let start = before.iter().find(|p| p.partition == partition).map(|p| p.next);
        let tail = learnt.tails.remove(&partition);
        tasks.push((partition, tokio::spawn(read_partition(client, start, max, each, tail))));
    }
    let mut reads = Vec::with_capacity(tasks.len());
    for (partition, task) in tasks {
        reads.push((partition, task.await.expect("a read does not panic")));
    }
    let topic = &*scope.topic;
    let mut writer = BatchWriter::new(scope.shape.arity());
    let mut positions = Vec::with_capacity(reads.len());
    let mut pending = BTreeMap::new();
    let mut next_learnt = Learnt { record_bytes: learnt.record_bytes, tails: BTreeMap::new() };
    for (partition, read) in reads {
        let (start, Range { records, high, surplus }, skipped) =
            read.map_err(|e| failure(topic, e, partition, "reading"))?;
        if let Some(from) = skipped {
            tracing::warn!(
                "topology {}: Kafka topic {topic} no longer holds offsets {from}..={} of partition {partition}, \
                 deleted before they were read: reading on from offset {start}",
                scope.topology,
                start - 1
            );
        }
        if records.is_empty() && high < start {
            return Err(Failure::Fatal(anyhow!(
                "partition {partition} of Kafka topic {topic} ends at offset {high}, before offset {start} that the \
                 topology reads next: was the topic deleted and made again?"
            )));
        }
        if let Some(size) = average_size(&records) {
            next_learnt.record_bytes = Some(size);
        }
        for record in &records {
            scope.shape.push(&mut writer, partition, record.offset, &record.record).map_err(|e| {
                Failure::Fatal(anyhow::Error::new(Unreadable(format!(
                    "topology {}: the record at offset {} of partition {partition} of Kafka topic {topic} cannot \
                     become a tuple: {e}; delete it (kafka-delete-records up to offset {}) or fix the topology, \
                     then run again",
                    scope.topology,
                    record.offset,
                    record.offset + 1
                ))))
            })?;
        }
        let next = records.last().map_or(start, |r| r.offset + 1);
        next_learnt.tails.insert(partition, Tail { next, high, surplus });
        pending.insert(partition, u64::try_from(high - next).unwrap_or(0));
        let first = records.first().map_or(start, |r| r.offset);
        positions.push(Position { partition, next, first, count: records.len() as u64 });
    }
    // Partitions read before but no longer listed keep where they were.
    for old in &before {
        if !positions.iter().any(|p| p.partition == old.partition) {
            positions.push(Position { count: 0, first: old.next, ..old.clone() });
        }
    }
    positions.sort_by_key(|p| p.partition);
    if writer.rows() == 0 {
        return Ok((Read::Empty { next: positions.iter().map(|p| (p.partition, p.next)).collect() }, next_learnt));
    }
    Ok((Read::Batch { positions, batch: writer.finish_batch(), pending }, next_learnt))
}

/// What one partition's read gave: where it started, what it read, and
/// the offset it meant to start from when records were gone from under it.
type PartitionRead = (i64, Range, Option<i64>);

/// Reads up to `max` records of a partition from `start` (its first record
/// when `None`), given where its last read ended.
async fn read_partition(
    client: Arc<PartitionClient>,
    start: Option<i64>,
    max: usize,
    each: usize,
    tail: Option<Tail>,
) -> Result<PartitionRead, ClientError> {
    let start = match start {
        Some(start) => start,
        // A partition not read before starts at its first record.
        None => timed(client.get_offset(OffsetAt::Earliest)).await?,
    };
    let high = tail.as_ref().map(|t| t.high);
    // What the last read fetched past its batch follows on only from where
    // it ended (a retry or an opaque replay may start elsewhere).
    let carried = tail.filter(|t| t.next == start).map(|t| t.surplus).unwrap_or_default();
    match read_range(&client, start, max, None, each, high, carried).await {
        Ok(read) => Ok((start, read, None)),
        // Records deleted before they were read (retention, or a poison
        // record deleted on purpose): read on from the first record left,
        // saying what was passed over.
        Err(e) if protocol_error(&e) == Some(ProtocolError::OffsetOutOfRange) => {
            let latest = timed(client.get_offset(OffsetAt::Latest)).await?;
            if latest < start {
                // The partition ends before: the caller names it.
                return Ok((start, Range { records: Vec::new(), high: latest, surplus: Vec::new() }, None));
            }
            let earliest = timed(client.get_offset(OffsetAt::Earliest)).await?;
            if earliest <= start {
                return Err(e);
            }
            let read = read_range(&client, earliest, max, None, each, None, Vec::new()).await?;
            Ok((earliest, read, Some(start)))
        }
        Err(e) => Err(e),
    }
}

/// A failed request on `partition` of `topic`, classified; records gone
/// from under the offset to read are fatal.
fn failure(topic: &str, error: ClientError, partition: i32, doing: &str) -> Failure {
    if protocol_error(&error) == Some(ProtocolError::OffsetOutOfRange) {
        return Failure::Fatal(anyhow!(
            "Kafka topic {topic} no longer holds the records of partition {partition} the topology reads next \
             (removed by the topic's retention or a deletion before they were read): {error}"
        ));
    }
    if protocol_error(&error) == Some(ProtocolError::UnknownTopicOrPartition) {
        return Failure::Fatal(anyhow!("Kafka topic {topic} has no partition {partition} any more"));
    }
    Failure::of(error, format!("{doing} partition {partition} of Kafka topic {topic}"))
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
    let total: usize = records.iter().map(|r| record_bytes(&r.record)).sum();
    total.checked_div(records.len())
}

/// Records read from a partition.
struct Range {
    /// Those asked for, in offset order.
    records: Vec<RecordAndOffset>,
    /// The partition's high watermark, as last seen.
    high: i64,
    /// Records fetched after them, in offset order.
    surplus: Vec<RecordAndOffset>,
}

/// Reads up to `max` records of `client`'s partition from offset `start`,
/// and before `until` where given, asking for about `each` bytes a record;
/// also the partition's high watermark. `high`: the watermark the last
/// fetch returned, which saves asking for it while records lie ahead;
/// `carried`: records fetched before, from `start` on, taken first.
async fn read_range(
    client: &PartitionClient,
    start: i64,
    max: usize,
    until: Option<i64>,
    each: usize,
    high: Option<i64>,
    carried: Vec<RecordAndOffset>,
) -> Result<Range, ClientError> {
    let mut range = Range { records: Vec::with_capacity(max.min(1 << 16)), high: 0, surplus: Vec::new() };
    let mut offset = start;
    // A fetch at the end of a partition may be held by the broker (tansu
    // does, until a record comes): where the last fetch saw nothing ahead,
    // ask where the end is first.
    range.high = match high {
        Some(high) if high > start => high,
        _ => timed(client.get_offset(OffsetAt::Latest)).await?,
    };
    let take = |range: &mut Range, fetched: Vec<RecordAndOffset>, offset: &mut i64| {
        for record in fetched {
            if record.offset < *offset {
                continue;
            }
            if range.records.len() >= max || until.is_some_and(|until| record.offset >= until) {
                if until.is_none() {
                    range.surplus.push(record);
                }
                continue;
            }
            *offset = record.offset + 1;
            range.records.push(record);
        }
    };
    take(&mut range, carried, &mut offset);
    if !range.surplus.is_empty() {
        return Ok(range);
    }
    while range.records.len() < max && until.is_none_or(|until| offset < until) && offset < range.high {
        // A fetch's cost to the broker is mostly the same whatever it holds
        // (tansu: fetches of 5,000 records took 1.5 times as long as of
        // 1,000), and what it brings past the batch is kept: ask for a
        // whole batch's records. A replay asks only for its range.
        let want = if until.is_some() { max - range.records.len() } else { max };
        let (fetched, watermark) = timed(client.fetch_records(offset, 1..fetch_bytes(want, each), 0)).await?;
        range.high = watermark;
        let before = range.records.len();
        take(&mut range, fetched, &mut offset);
        if range.records.len() == before || offset >= watermark {
            break;
        }
    }
    Ok(range)
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

    fn emit(&mut self, txid: u64, attempt: u32, previous: Option<&[u8]>) -> Result<Option<Emitted>> {
        if CaughtUp::nothing_new(&mut self.caught_up, previous) {
            return Ok(None);
        }
        let read = match self.take_ahead(attempt, previous) {
            (Some(read), _) => read,
            (None, lost) => {
                let before = previous.map(meta::decode).transpose()?.unwrap_or_default();
                self.retrying(lost, |spout| spout.read_next(&before)).with_context(|| {
                    format!(
                        "topology {}: reading txid {txid} from Kafka topic {}",
                        self.scope.topology, self.scope.topic
                    )
                })?
            }
        };
        match read {
            Read::Empty { next } => {
                self.caught_up = Some(CaughtUp::after(next, previous));
                self.backlog.caught_up();
                Ok(None)
            }
            Read::Batch { positions, batch, pending } => {
                self.caught_up = None;
                let meta = meta::encode(&positions);
                self.backlog.emitted(previous, &meta, per_partition(&positions), pending);
                self.read_ahead(meta.clone(), positions);
                Ok(Some(Emitted { meta, batch }))
            }
        }
    }

    fn replay(&mut self, txid: u64, _attempt: u32, meta: &[u8]) -> Result<Batch<'static>> {
        let positions = meta::decode(meta)?;
        let batch = self.retrying(None, |spout| spout.read_again(&positions)).with_context(|| {
            format!(
                "topology {} halts at txid {txid}, which is not committed: it cannot be replayed exactly",
                self.scope.topology
            )
        })?;
        self.backlog.replayed(meta, per_partition(&positions));
        Ok(batch)
    }

    fn lag(&mut self, committed: Option<&[u8]>) -> Option<u64> {
        Some(self.backlog.lag(committed))
    }

    fn partition_lag(&self) -> BTreeMap<String, u64> {
        self.backlog.by_partition().iter().map(|(p, n)| (format!("{}-{p}", self.scope.topic), *n)).collect()
    }

    fn wait_for_input(&mut self, timeout: Duration) {
        let started = Instant::now();
        self.give_up_ahead();
        if self.caught_up.is_none() {
            return std::thread::sleep(timeout);
        }
        // Partitions added to the topic count as input: the next emission
        // reads them from their first record.
        let added = match self.list_partitions(false) {
            Ok(added) => added,
            Err(Failure::Lost(e) | Failure::Fatal(e)) => {
                // The next emission meets the error again and handles it.
                tracing::debug!("topology {}: listing Kafka topic {}: {e:#}", self.scope.topology, self.scope.topic);
                true
            }
        };
        let Some(caught_up) = &mut self.caught_up else { return };
        if added {
            caught_up.quiet = false;
            return;
        }
        // Every partition's end at once: tansu holds a fetch at a
        // partition's end rather than answering when a record comes, so the
        // ends are asked for, once a wait, and the wait sleeps out the rest.
        let (tx, mut rx) = tokio::sync::mpsc::channel(caught_up.watch.len().max(1));
        let mut tasks = Vec::new();
        for (partition, next) in &caught_up.watch {
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

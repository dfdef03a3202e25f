//! The Kafka sink's writes: each outbox entry becomes one record of the
//! sink's topic, on partition `place % partitions`, with headers naming its
//! sink, txid and place. The broker of the tests has no transactions, so
//! exactly once is built from what every broker has: each partition is
//! written in outbox order, one request after another, so that what a
//! partition holds of this sink is always a prefix of its entries; a
//! restarted host (or one whose write failed) reads back the tail of each
//! partition it writes, finds the last entry of its own there, and skips
//! everything up to it.
//!
//! The promise holds while the last record of this sink lies within the
//! last [`TAIL`] records of the partition: another writer appending more
//! than that to the same partition while the host is down, or the topic's
//! retention removing it, makes the host write again what it wrote (at
//! least once, then).

use crate::kafka::{Failure, Kafka, protocol_error};
use crate::spout::kafka::timed;
use anyhow::anyhow;
use rskafka::client::error::ProtocolError;
use rskafka::client::partition::{Compression, OffsetAt, PartitionClient};
use rskafka::record::Record;
use std::collections::BTreeMap;
use std::sync::Arc;

/// How many records at the end of each partition a restarted sink reads
/// back to find what it already wrote.
pub const TAIL: i64 = 10_000;

/// The most records of one produce request.
const CHUNK: usize = 500;

/// Header naming the topology and sink that wrote a record.
pub const SINK_HEADER: &str = "weir-sink";
/// Header holding the record's batch's txid.
pub const TXID_HEADER: &str = "weir-txid";
/// Header holding the record's place in its batch's output.
pub const INDEX_HEADER: &str = "weir-index";

/// An outbox entry's txid and place.
pub type Key = (u64, u32);

/// What one sink knows of its topic.
pub struct TopicWriter {
    topic: String,
    /// `topology/sink`, in each record's header.
    marker: String,
    /// The topic's partitions, in order, and their clients.
    partitions: Vec<(i32, Arc<PartitionClient>)>,
    /// Per partition, the last entry of this sink it holds (`None`: none);
    /// a partition absent here is read back before it is written.
    written: BTreeMap<i32, Option<Key>>,
}

impl TopicWriter {
    /// A writer of `topic` for sink `sink` of `topology`; nothing is asked
    /// of the brokers yet.
    pub fn new(topology: &str, sink: &str, topic: &str) -> TopicWriter {
        TopicWriter {
            topic: topic.to_owned(),
            marker: format!("{topology}/{sink}"),
            partitions: Vec::new(),
            written: BTreeMap::new(),
        }
    }

    /// Forgets what it knows after a failure: the next write reads back.
    pub fn forget(&mut self) {
        self.partitions.clear();
        self.written.clear();
    }

    /// Writes `entries` (outbox keys and values, in key order) that the
    /// topic does not hold yet; `place` names an entry in errors.
    pub fn write(
        &mut self,
        kafka: &mut Kafka,
        entries: &[(Key, &[u8])],
        place: &dyn Fn(Key) -> String,
    ) -> Result<(), Failure> {
        if self.partitions.is_empty() {
            for partition in kafka.partitions(&self.topic)? {
                let client = kafka.partition(&self.topic, partition)?;
                self.partitions.push((partition, client));
            }
        }
        let count = self.partitions.len();
        // Each partition's records, in key order, past what it holds.
        let mut per: BTreeMap<i32, Vec<(Key, Record)>> = BTreeMap::new();
        for &(key, value) in entries {
            let (partition, client) = &self.partitions[key.1 as usize % count];
            if !self.written.contains_key(partition) {
                let found = kafka.runtime.block_on(last_written(client, &self.marker)).map_err(|e| {
                    Failure::of(
                        e,
                        format!("reading back the tail of partition {partition} of Kafka topic {}", self.topic),
                    )
                })?;
                tracing::debug!("sink {}: partition {partition} of {} holds up to {found:?}", self.marker, self.topic);
                self.written.insert(*partition, found);
            }
            if self.written[partition].is_some_and(|last| key <= last) {
                continue;
            }
            per.entry(*partition).or_default().push((key, self.record(key, value)));
        }
        let mut tasks = Vec::new();
        for (partition, records) in per {
            let client = Arc::clone(&self.partitions.iter().find(|(p, _)| *p == partition).expect("listed").1);
            tasks.push((
                partition,
                kafka.runtime.spawn(async move {
                    let mut last = None;
                    let mut records = records.into_iter().peekable();
                    while records.peek().is_some() {
                        let chunk: Vec<(Key, Record)> = records.by_ref().take(CHUNK).collect();
                        let first = chunk[0].0;
                        let end = chunk.last().expect("not empty").0;
                        let records = chunk.into_iter().map(|(_, r)| r).collect();
                        if let Err(e) = timed(client.produce(records, Compression::NoCompression)).await {
                            return (last, Err((first, e)));
                        }
                        last = Some(end);
                    }
                    (last, Ok(()))
                }),
            ));
        }
        let mut failure = None;
        for (partition, task) in tasks {
            let (last, outcome) = kafka.runtime.block_on(task).expect("a write does not panic");
            if let Some(last) = last {
                self.written.insert(partition, Some(last));
            }
            if let Err((first, e)) = outcome {
                // Whether the broker took it is not known: read back first.
                self.written.remove(&partition);
                let refused = protocol_error(&e).is_some_and(|p| {
                    matches!(
                        p,
                        ProtocolError::MessageTooLarge
                            | ProtocolError::RecordListTooLarge
                            | ProtocolError::TopicAuthorizationFailed
                            | ProtocolError::InvalidRecord
                            | ProtocolError::PolicyViolation
                    )
                });
                let what = format!("{} to partition {partition} of Kafka topic {}", place(first), self.topic);
                failure.get_or_insert(if refused {
                    Failure::Fatal(anyhow!("{what}: the broker refused it: {e}"))
                } else {
                    Failure::of(e, what)
                });
            }
        }
        match failure {
            Some(failure) => Err(failure),
            None => Ok(()),
        }
    }

    fn record(&self, (txid, n): Key, value: &[u8]) -> Record {
        let headers = [
            (SINK_HEADER.to_owned(), self.marker.as_bytes().to_vec()),
            (TXID_HEADER.to_owned(), txid.to_string().into_bytes()),
            (INDEX_HEADER.to_owned(), n.to_string().into_bytes()),
        ];
        Record { key: None, value: Some(value.to_vec()), headers: headers.into_iter().collect(), timestamp: now() }
    }
}

/// The last entry of sink `marker` among the last [`TAIL`] records of
/// `client`'s partition.
async fn last_written(client: &PartitionClient, marker: &str) -> Result<Option<Key>, rskafka::client::error::Error> {
    let latest = timed(client.get_offset(OffsetAt::Latest)).await?;
    let earliest = timed(client.get_offset(OffsetAt::Earliest)).await?;
    let mut offset = earliest.max(latest - TAIL);
    let mut last = None;
    while offset < latest {
        let (records, _) = timed(client.fetch_records(offset, 1..(8 << 20), 0)).await?;
        let Some(end) = records.last().map(|r| r.offset) else { break };
        for record in &records {
            if let Some(key) = key_of(&record.record, marker) {
                last = last.max(Some(key));
            }
        }
        offset = end + 1;
    }
    Ok(last)
}

/// The outbox key a record of sink `marker` carries.
pub fn key_of(record: &Record, marker: &str) -> Option<Key> {
    if record.headers.get(SINK_HEADER).map(Vec::as_slice) != Some(marker.as_bytes()) {
        return None;
    }
    let text = |name: &str| std::str::from_utf8(record.headers.get(name)?).ok();
    Some((text(TXID_HEADER)?.parse().ok()?, text(INDEX_HEADER)?.parse().ok()?))
}

/// The time now, as a record's timestamp.
fn now() -> rskafka::chrono::DateTime<rskafka::chrono::Utc> {
    let ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis();
    rskafka::chrono::DateTime::from_timestamp_millis(ms as i64).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_carries_its_sink_txid_and_place_and_only_its_own_are_read_back() {
        let writer = TopicWriter::new("clicks", "page-counts", "out");
        let record = writer.record((42, 7), b"{}");
        assert_eq!(key_of(&record, "clicks/page-counts"), Some((42, 7)));
        assert_eq!(key_of(&record, "clicks/other"), None);
        let mut foreign = record.clone();
        foreign.headers.remove(TXID_HEADER);
        assert_eq!(key_of(&foreign, "clicks/page-counts"), None);
    }
}

//! Sinks: a committed batch's output, published to NATS JetStream or
//! written to Kafka exactly once, through an outbox (Trident's rule: output is part of the batch's
//! commit).
//!
//! - In the commit phase a sink's tuples become payloads (`payloads`), and
//!   the committer writes them into the sink's outbox table in the same
//!   write transaction as the batch's state (`outbox`): one record per
//!   batch keyed by its txid, holding all its messages ([`record`]), so
//!   only committed batches ever reach it.
//! - First thing when a run starts, for what a crash left, the
//!   [`Publisher`] publishes every outbox entry in key order, each with
//!   `Nats-Msg-Id: <topology>/<sink>/<txid>/<n>`, and waits for the
//!   server's acknowledgements.
//! - After each commit (of a group of batches) it sends the entries the
//!   commit added and goes on without waiting: their acknowledgements are
//!   collected as they come, at later commits ([`Publisher::publish_committed`]),
//!   and all of them when the input is drained or the run ends. A batch's
//!   record whose last message is acknowledged is removed from the outbox
//!   whole, durably with the next commit (or
//!   when the run ends). A crash before that publishes the same ids again,
//!   which the stream drops as duplicates within its duplicate window.
//! - An acknowledgement that fails, or is late past [`ACK_PATIENCE`], turns
//!   the publisher back to the start's way: every entry still in the outbox
//!   is published again in key order (the same ids) and waited for, within
//!   the retry budget.
//! - A publish the server refuses (no stream takes the subject, a limit)
//!   halts the run naming the sink, subject and txid; the entries stay in
//!   the outbox for the next start. Nothing committed is lost.
//! - A Kafka sink writes the same outbox entries as records carrying their
//!   txid and place in headers, and skips what the topic's partitions
//!   already hold ([`kafka`]).

pub mod kafka;
pub mod record;

use crate::kafka::{Failure, Kafka, KafkaConfig};
use crate::nats::{Nats, NatsConfig};
use anyhow::{Context as _, Result, bail};
use async_nats::jetstream::context::PublishError;
use async_nats::jetstream::context::{PublishAckFuture, PublishErrorKind};
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::publish::PublishAck;
use std::collections::VecDeque;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant};
use weir_config::backoff::RECONNECT;
use weir_config::fault::{self, Point};
use weir_config::{MAX_SINK_BATCH_MESSAGES, MAX_SINK_PAYLOAD, NATS_REQUEST_TIMEOUT, PUBLISH_ACKS_IN_FLIGHT};
use weir_plan::{Input, Node, Op, Plan};
use weir_runtime::BatchError;
use weir_sdk::codec::{Batch, BatchWriter, ValueRef};
use weir_sdk::topology::{SinkDef, SinkPayloadDef};
use weir_state::store::{OtherRecords, Store};

/// The outbox table of sink `id`, among the topology's other records.
fn table(id: &str) -> String {
    format!("sink/{id}")
}

/// Sink `node`'s tuples as payloads: one bytes field per row.
pub fn payloads(node: &Node, sink: &SinkDef, input: &Input, batch: &Batch<'_>) -> Result<Batch<'static>, BatchError> {
    let payload = sink.payload();
    if batch.len() > MAX_SINK_BATCH_MESSAGES {
        return Err(BatchError::fatal(
            &node.id,
            format!("the batch gives the sink {} messages, more than {MAX_SINK_BATCH_MESSAGES}", batch.len()),
        ));
    }
    let fields = JsonFields::of(input);
    let mut writer = BatchWriter::new(1);
    // One buffer for every row's payload, written in place.
    let mut bytes = Vec::new();
    for (index, row) in batch.rows().enumerate() {
        bytes.clear();
        match payload {
            SinkPayloadDef::Json => fields.write(&row, &mut bytes),
            SinkPayloadDef::Raw { field } => match row.get(input.positions[0]).expect("position within arity") {
                ValueRef::Str(s) => bytes.extend_from_slice(s.as_bytes()),
                ValueRef::Bytes(b) => bytes.extend_from_slice(b),
                other => {
                    return Err(BatchError::fatal(
                        &node.id,
                        format!(
                            "tuple {index}: field {field} is a {}, and a raw payload is a string or bytes",
                            other.type_name()
                        ),
                    ));
                }
            },
        }
        if bytes.len() > MAX_SINK_PAYLOAD {
            return Err(BatchError::fatal(
                &node.id,
                format!("tuple {index}'s payload has {} bytes, more than {MAX_SINK_PAYLOAD}", bytes.len()),
            ));
        }
        writer.begin_row(0);
        writer.push(ValueRef::Bytes(&bytes));
    }
    Ok(writer.finish_batch())
}

/// A JSON payload's fields: each name, quoted once, and the position of
/// its value in a row; in name order, the last of a repeated name kept
/// (as a JSON object of the fields would hold them).
struct JsonFields(Vec<(Vec<u8>, usize)>);

impl JsonFields {
    fn of(input: &Input) -> JsonFields {
        let mut fields: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
        for (name, &position) in input.names.iter().zip(&input.positions) {
            fields.insert(name, position);
        }
        JsonFields(
            fields
                .into_iter()
                .map(|(name, position)| (serde_json::to_vec(name).expect("a string serializes"), position))
                .collect(),
        )
    }

    /// Writes `row` as a JSON object into `out`: values as
    /// [`weir_state::json::to_json`] gives them.
    fn write(&self, row: &weir_sdk::codec::Row<'_>, out: &mut Vec<u8>) {
        out.push(b'{');
        for (i, (name, position)) in self.0.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(name);
            out.push(b':');
            weir_state::json::write_json(row.get(*position).expect("position within arity"), out);
        }
        out.push(b'}');
    }
}

/// The outbox record of batch `txid` for sink `node`, from its payloads:
/// one record holding all of them ([`record`]), none where there are none.
pub fn outbox(node: &Node, txid: u64, payloads: &[Batch<'static>]) -> OtherRecords {
    if payloads.iter().all(|p| p.is_empty()) {
        return OtherRecords { table: table(&node.id), entries: Vec::new() };
    }
    let messages = || {
        payloads.iter().flat_map(Batch::rows).map(|row| match row.get(0) {
            Some(ValueRef::Bytes(bytes)) => bytes,
            _ => unreachable!("payloads are one bytes field"),
        })
    };
    let bytes: usize = messages().map(|m| 4 + m.len()).sum();
    let mut writer = record::RecordWriter::with_capacity(bytes);
    messages().for_each(|m| writer.push(m));
    OtherRecords { table: table(&node.id), entries: vec![(record::key(txid), writer.finish())] }
}

/// One sink of a plan.
struct SinkTarget {
    id: String,
    /// Where it publishes, in words.
    target: String,
    table: String,
    def: SinkDef,
}

/// The sinks of `plan`.
fn targets(plan: &Plan) -> Vec<SinkTarget> {
    plan.nodes
        .iter()
        .filter_map(|node| match &node.op {
            Op::Sink { sink, .. } => Some(SinkTarget {
                id: node.id.clone(),
                target: sink.target(),
                table: table(&node.id),
                def: sink.clone(),
            }),
            _ => None,
        })
        .collect()
}

/// Checks that a server is given when `plan` has sinks, before anything runs.
pub fn check_server(plan: &Plan, nats: Option<&NatsConfig>, kafka: Option<&KafkaConfig>) -> Result<()> {
    for sink in targets(plan) {
        match sink.def {
            SinkDef::JetStream { .. } if nats.is_none() => bail!(
                "topology {}: sink {} publishes to {}: give the server with --nats URL",
                plan.stored_as,
                sink.id,
                sink.target
            ),
            SinkDef::Kafka { .. } if kafka.is_none() => bail!(
                "topology {}: sink {} writes to {}: give the brokers with --kafka HOST:PORT",
                plan.stored_as,
                sink.id,
                sink.target
            ),
            _ => {}
        }
    }
    Ok(())
}

/// Publishes the outboxes of a topology's sinks.
pub struct Publisher {
    topology: String,
    sinks: Vec<SinkTarget>,
    /// The NATS server, where a sink publishes to JetStream.
    nats: Option<(Nats, Duration)>,
    /// The Kafka brokers, where a sink writes to Kafka.
    kafka: Option<Kafka>,
    /// Per Kafka sink, what it knows of its topic.
    topics: std::collections::HashMap<String, kafka::TopicWriter>,
    /// JetStream publishes sent after commits and not yet acknowledged,
    /// oldest first.
    in_flight: VecDeque<Sent>,
    /// Per sink, the key of the last outbox record sent in flight and how
    /// many of its messages were: a later commit sends what follows.
    sent_up_to: Vec<Option<(Vec<u8>, usize)>>,
}

/// An acknowledgement awaited.
type AckFuture = Pin<Box<dyn Future<Output = Result<PublishAck, PublishError>> + Send>>;

/// A JetStream publish in flight.
struct Sent {
    sink: usize,
    txid: u64,
    /// Its place in the batch's output.
    n: u32,
    /// The key of its outbox record, where it is the record's last
    /// message: once it is acknowledged (and so every one before it), the
    /// record goes.
    last_of: Option<Vec<u8>>,
    at: Instant,
    ack: AckFuture,
}

/// How long an acknowledgement may be awaited in flight before a commit
/// waits for it: beyond it the server is slow or gone, and a commit that
/// waits learns which (and halts within the retry budget) rather than let
/// the outbox grow.
pub const ACK_PATIENCE: Duration = Duration::from_secs(1);

/// How [`Publisher::collect`] waits for the acknowledgements in flight.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Collect {
    /// Those come already; only a late one (or too many) is waited for.
    Ready,
    /// As [`Collect::Ready`], and until at most [`ROOM`] are in flight:
    /// the window slides rather than empties, so the server always has
    /// publishes to take.
    Room,
    /// Every one; a failure publishes the outbox again within the retry
    /// budget.
    All,
    /// Every one, all within [`ACK_PATIENCE`], the run halting: a failure
    /// leaves the entries for the next start.
    Halting,
}

/// Why a publish failed.
enum Failed {
    /// The server refused it: trying again will not help.
    Refused(anyhow::Error),
    /// The server did not answer in time, or the connection is lost.
    Unreachable(anyhow::Error),
}

/// Publishes left in flight when [`Collect::Room`] returns: an eighth of
/// the most freed at a time, so that collecting is not done per message.
const ROOM: usize = PUBLISH_ACKS_IN_FLIGHT - PUBLISH_ACKS_IN_FLIGHT / 8;

/// Refused publishes are tried this many times (a restarted server's
/// JetStream may answer before it knows its streams) before the run halts.
const REFUSALS: u32 = 3;

/// The shortest wait for the server, however little of the retry budget is
/// left.
const MIN_WAIT: Duration = Duration::from_millis(100);

impl Publisher {
    /// The publisher of `plan`'s sinks, connected to the server of `nats`;
    /// `None` when the plan has no sink.
    pub fn open(plan: &Plan, nats: Option<&NatsConfig>, kafka: Option<&KafkaConfig>) -> Result<Option<Publisher>> {
        let sinks = targets(plan);
        if sinks.is_empty() {
            return Ok(None);
        }
        check_server(plan, nats, kafka)?;
        let topology = &plan.stored_as;
        let nats = match nats {
            Some(config) if sinks.iter().any(|s| matches!(s.def, SinkDef::JetStream { .. })) => {
                let nats = Nats::connect(config, &format!("weir sinks of {topology}"))
                    .with_context(|| format!("topology {topology}: connecting its sinks"))?;
                Some((nats, config.retry_for))
            }
            _ => None,
        };
        let mut topics = std::collections::HashMap::new();
        for sink in &sinks {
            if let SinkDef::Kafka { topic, .. } = &sink.def {
                topics.insert(sink.id.clone(), kafka::TopicWriter::new(topology, &sink.id, topic));
            }
        }
        let kafka = match kafka {
            Some(config) if !topics.is_empty() => Some(
                Kafka::connect(config, &format!("weir sinks of {topology}"))
                    .with_context(|| format!("topology {topology}: connecting its sinks"))?,
            ),
            _ => None,
        };
        let sent_up_to = vec![None; sinks.len()];
        Ok(Some(Publisher {
            topology: topology.clone(),
            sinks,
            nats,
            kafka,
            topics,
            in_flight: VecDeque::new(),
            sent_up_to,
        }))
    }

    /// Whether batches with sink output may commit in groups: every sink
    /// publishes to JetStream, whose acknowledgements are awaited in
    /// flight. A Kafka sink writes each batch's output before the next
    /// batch commits.
    pub fn commits_in_groups(&self) -> bool {
        self.sinks.iter().all(|s| matches!(s.def, SinkDef::JetStream { .. }))
    }

    /// Publishes what the last commit added to the outboxes: a JetStream
    /// sink's entries are sent with their acknowledgements left in flight
    /// (those already come are collected, the entries removed); a Kafka
    /// sink's are written and waited for, as [`Publisher::publish`] does.
    pub fn publish_committed(&mut self, store: &dyn Store) -> Result<()> {
        for i in 0..self.sinks.len() {
            match self.sinks[i].def {
                SinkDef::Kafka { .. } => self.publish_sink(i, store, None)?,
                SinkDef::JetStream { .. } => {
                    if !self.send_new(i, store)? {
                        // Published again from the first entry, every sink.
                        return Ok(());
                    }
                }
            }
        }
        self.collect(store, Collect::Ready).map(drop)
    }

    /// Waits for every acknowledgement in flight and removes what they
    /// acknowledge: when the input is drained, so that nothing waits on a
    /// later commit.
    pub fn drain(&mut self, store: &dyn Store) -> Result<()> {
        self.collect(store, Collect::All).map(drop)
    }

    /// Collects what acknowledgements come at once, the run halting for
    /// another reason; what is not acknowledged stays in the outbox for the
    /// next start.
    pub fn halting(&mut self, store: &dyn Store) {
        if let Err(e) = self.collect(store, Collect::Halting) {
            tracing::warn!("topology {}: {e:#}", self.topology);
        }
        self.in_flight.clear();
    }

    /// Sends the messages of JetStream sink `i`'s outbox after those sent
    /// in flight already, at most [`PUBLISH_ACKS_IN_FLIGHT`] in flight:
    /// when as many are, it collects acknowledgements until at most
    /// [`ROOM`] are.
    /// Returns `false` where a failure published the outboxes again
    /// ([`Publisher::recover`]).
    fn send_new(&mut self, i: usize, store: &dyn Store) -> Result<bool> {
        let entries = store.snapshot()?.others(&self.topology, &self.sinks[i].table)?;
        let (start, mut sent) = match &self.sent_up_to[i] {
            None => (0, 0),
            Some((key, sent)) => {
                let start = entries.partition_point(|(k, _)| k < key);
                match entries.get(start) {
                    Some((k, _)) if k == key => (start, *sent),
                    _ => (start, 0),
                }
            }
        };
        for (key, value) in entries.into_iter().skip(start) {
            let record = self.decode(i, key, value)?;
            if record.messages.is_empty() {
                // Nothing to acknowledge it: it goes at once.
                store.remove_others_lazily(&self.topology, &self.sinks[i].table, std::slice::from_ref(&record.key))?;
            }
            while sent < record.messages.len() {
                if self.in_flight.len() >= PUBLISH_ACKS_IN_FLIGHT && self.collect(store, Collect::Room)? {
                    return Ok(false);
                }
                let end = record.messages.len().min(sent + PUBLISH_ACKS_IN_FLIGHT - self.in_flight.len());
                if let Err((since, failed)) = self.send(i, &record, sent..end) {
                    self.recover(store, since, failed)?;
                    return Ok(false);
                }
                sent = end;
                self.sent_up_to[i] = Some((record.key.clone(), sent));
            }
            self.sent_up_to[i] = Some((record.key, sent));
            sent = 0;
        }
        Ok(true)
    }

    /// Reads a record of sink `i`'s outbox.
    fn decode(&self, i: usize, key: Vec<u8>, value: Vec<u8>) -> Result<record::Record> {
        let sink = &self.sinks[i];
        record::decode(&format!("topology {}: sink {}'s outbox", self.topology, sink.id), key, value)
    }

    /// Sends messages `range` of `record` of JetStream sink `i`, their
    /// acknowledgements left in flight; a send that fails returns when and
    /// why.
    fn send(
        &mut self,
        i: usize,
        record: &record::Record,
        range: std::ops::Range<usize>,
    ) -> Result<(), (Instant, Failed)> {
        let sink = &self.sinks[i];
        let SinkDef::JetStream { subject, .. } = &sink.def else { unreachable!("a JetStream sink") };
        let (nats, retry_for) = self.nats.as_ref().expect("connected for its JetStream sinks");
        let wait = (*retry_for).clamp(MIN_WAIT, NATS_REQUEST_TIMEOUT * 2);
        let in_flight = &mut self.in_flight;
        let txid = record.txid;
        let mut ids = MessageIds::new(&self.topology, &sink.id, txid);
        let subject = async_nats::Subject::from(subject.as_str());
        // One time for the whole run of sends: they go out together.
        let at = Instant::now();
        nats.runtime.block_on(async {
            for m in range {
                let n = record.place(m);
                let what = || unpublished(&sink.id, txid, n, &subject);
                let payload = record.messages[m].clone();
                let ack = send_one(&nats.jetstream, &subject, payload, ids.of(n), wait, what)
                    .await
                    .map_err(|failed| (at, failed))?;
                let last_of = (m + 1 == record.messages.len()).then(|| record.key.clone());
                in_flight.push_back(Sent { sink: i, txid, n, last_of, at, ack: ack.into_future() });
            }
            Ok(())
        })
    }

    /// Collects acknowledgements in flight as `how` says, oldest first,
    /// and removes the entries they acknowledge from the outboxes (lazily);
    /// a failed or late one publishes the outboxes again
    /// ([`Publisher::recover`]), unless the run is halting. Returns whether
    /// it did.
    fn collect(&mut self, store: &dyn Store, how: Collect) -> Result<bool> {
        let Some((nats, retry_for)) = self.nats.as_ref() else { return Ok(false) };
        if self.in_flight.is_empty() {
            return Ok(false);
        }
        let in_flight = &mut self.in_flight;
        let sinks = &self.sinks;
        // Per message acknowledged: its sink, txid and record's key where
        // it was the record's last.
        let mut acked: Vec<(usize, u64, Option<Vec<u8>>)> = Vec::new();
        let halting_until = Instant::now() + ACK_PATIENCE;
        let failed = nats.runtime.block_on(async {
            loop {
                let crowded = match how {
                    Collect::Room => in_flight.len() > ROOM,
                    _ => in_flight.len() >= PUBLISH_ACKS_IN_FLIGHT,
                };
                let Some(front) = in_flight.front_mut() else { break };
                let must_wait = !matches!(how, Collect::Ready | Collect::Room)
                    || crowded
                    || front.at.elapsed() >= ACK_PATIENCE.min(*retry_for);
                let wait = match how {
                    Collect::Halting => halting_until.saturating_duration_since(Instant::now()),
                    _ if must_wait => {
                        retry_for.saturating_sub(front.at.elapsed()).clamp(MIN_WAIT, NATS_REQUEST_TIMEOUT * 2)
                    }
                    _ => Duration::ZERO,
                };
                let what = || {
                    let (txid, n) = (front.txid, front.n);
                    let (sink, subject) = match &sinks[front.sink].def {
                        SinkDef::JetStream { subject, .. } => (&sinks[front.sink].id, subject.as_str()),
                        SinkDef::Kafka { .. } => unreachable!("a JetStream sink"),
                    };
                    unpublished(sink, txid, n, subject)
                };
                // A zero wait still polls the acknowledgement once, with no
                // timer to set.
                let outcome = if wait.is_zero() {
                    std::future::poll_fn(|cx| {
                        Poll::Ready(match front.ack.as_mut().poll(cx) {
                            Poll::Ready(acked) => Ok(acked),
                            Poll::Pending => Err(()),
                        })
                    })
                    .await
                } else {
                    tokio::time::timeout(wait, &mut front.ack).await.map_err(drop)
                };
                let error = match outcome {
                    Err(_) if !must_wait => return None,
                    Err(_) => Failed::Unreachable(anyhow::anyhow!("{}: not acknowledged in time", what())),
                    Ok(Err(e)) => classify(e, what()),
                    Ok(Ok(_)) => {
                        let sent = in_flight.pop_front().expect("the front");
                        acked.push((sent.sink, sent.txid, sent.last_of));
                        continue;
                    }
                };
                return Some((front.at, error));
            }
            None
        });
        self.acknowledged(store, acked)?;
        match failed {
            None => Ok(false),
            Some((_, Failed::Refused(e) | Failed::Unreachable(e))) if how == Collect::Halting => Err(e),
            Some((since, failed)) => self.recover(store, since, failed).map(|()| true),
        }
    }

    /// Removes the records whose last message is acknowledged from their
    /// outboxes, lazily; a batch none of whose output is in flight any
    /// more has passed its [`Point::AfterPublish`] first.
    fn acknowledged(&mut self, store: &dyn Store, acked: Vec<(usize, u64, Option<Vec<u8>>)>) -> Result<()> {
        if acked.is_empty() {
            return Ok(());
        }
        let oldest_in_flight = self.in_flight.iter().map(|s| s.txid).min();
        let mut txids: Vec<u64> = acked.iter().map(|(_, t, _)| *t).collect();
        txids.dedup();
        for txid in txids.into_iter().filter(|t| oldest_in_flight.is_none_or(|oldest| *t < oldest)) {
            fault::at(Point::AfterPublish, txid);
        }
        for (i, sink) in self.sinks.iter().enumerate() {
            let keys: Vec<Vec<u8>> =
                acked.iter().filter(|(s, _, _)| *s == i).filter_map(|(_, _, key)| key.clone()).collect();
            if !keys.is_empty() {
                // Made durable by the next commit: a crash before it
                // publishes the same ids again.
                store.remove_others_lazily(&self.topology, &sink.table, &keys)?;
            }
        }
        Ok(())
    }

    /// After a publish in flight failed (`since` when it was sent): drops
    /// what is in flight and publishes every JetStream outbox again from
    /// its first entry, waiting for each acknowledgement, within the retry
    /// budget counted from `since`.
    fn recover(&mut self, store: &dyn Store, since: Instant, failed: Failed) -> Result<()> {
        let (Failed::Refused(error) | Failed::Unreachable(error)) = &failed;
        tracing::warn!("topology {}: {error:#}; publishing the outboxes again", self.topology);
        self.in_flight.clear();
        self.sent_up_to.fill(None);
        for i in 0..self.sinks.len() {
            if matches!(self.sinks[i].def, SinkDef::JetStream { .. }) {
                self.publish_sink(i, store, Some(since))?;
            }
        }
        Ok(())
    }

    /// Publishes everything in the outboxes, in txid order, and removes
    /// what the server acknowledged; returns once they are empty. A server
    /// out of reach is retried with back-off for `--nats-retry-ms` (a Kafka
    /// sink's brokers for `--kafka-retry-ms`); a refused publish halts, the
    /// entries kept.
    pub fn publish(&mut self, store: &dyn Store) -> Result<()> {
        self.in_flight.clear();
        self.sent_up_to.fill(None);
        for i in 0..self.sinks.len() {
            self.publish_sink(i, store, None)?;
        }
        Ok(())
    }

    /// [`Publisher::publish`] for sink `i`; `failing` is when it began to
    /// fail, where a publish in flight failed already.
    fn publish_sink(&mut self, i: usize, store: &dyn Store, failing: Option<Instant>) -> Result<()> {
        let (retry_for, flag) = match &self.sinks[i].def {
            SinkDef::JetStream { .. } => (self.nats.as_ref().map(|(_, r)| *r), "--nats-retry-ms"),
            SinkDef::Kafka { .. } => (self.kafka.as_ref().map(|k| k.config().retry_for), "--kafka-retry-ms"),
        };
        let retry_for = retry_for.unwrap_or_default();
        // Since the first failure: the budget bounds every wait within
        // it, an acknowledgement's included.
        let mut started: Option<Instant> = failing;
        let mut refusals = 0;
        let mut backoff = RECONNECT;
        loop {
            let entries = store.snapshot()?.others(&self.topology, &self.sinks[i].table)?;
            let records: Vec<record::Record> =
                entries.into_iter().map(|(key, value)| self.decode(i, key, value)).collect::<Result<_>>()?;
            let Some(last_txid) = records.last().map(|r| r.txid) else { return Ok(()) };
            let begun = Instant::now();
            let left = started.map_or(retry_for, |since| retry_for.saturating_sub(since.elapsed()));
            let wait = left.clamp(MIN_WAIT, NATS_REQUEST_TIMEOUT * 2);
            let written = match &self.sinks[i].def {
                SinkDef::JetStream { .. } => self.publish_all(&self.sinks[i], &records, wait),
                SinkDef::Kafka { .. } => self.write_kafka(i, &records),
            };
            let sink = &self.sinks[i];
            let error = match written {
                Ok(()) => {
                    fault::at(Point::AfterPublish, last_txid);
                    let keys: Vec<Vec<u8>> = records.into_iter().map(|r| r.key).collect();
                    // Made durable by the next commit: a crash before it
                    // publishes this batch's output again under the
                    // same ids, as a crash before the removal did.
                    store.remove_others_lazily(&self.topology, &sink.table, &keys)?;
                    continue;
                }
                Err(error) => error,
            };
            let since = *started.get_or_insert(begun);
            let (error, give_up) = match error {
                Failed::Refused(e) => {
                    refusals += 1;
                    (e, refusals >= REFUSALS)
                }
                Failed::Unreachable(e) => (e, since.elapsed() >= retry_for),
            };
            let kept = "the batch is committed and its output stays in the outbox, published when the topology \
                        starts again";
            if give_up {
                let tried = match refusals {
                    0 => {
                        format!(" (tried for {} ms, {flag} {})", since.elapsed().as_millis(), retry_for.as_millis())
                    }
                    _ => String::new(),
                };
                bail!("topology {} halted: {error:#}{tried}; {kept}", self.topology);
            }
            let left = retry_for.saturating_sub(since.elapsed());
            let wait = backoff.next_wait().min(left.max(MIN_WAIT));
            tracing::warn!("topology {}: {error:#}; retrying in {} ms", self.topology, wait.as_millis());
            std::thread::sleep(wait);
        }
    }

    /// Waits for the acknowledgements in flight, and makes the last
    /// removals from the outboxes durable, when a run ends with no commit
    /// after them.
    pub fn settle(&mut self, store: &dyn Store) -> Result<()> {
        self.drain(store)?;
        if let Some(sink) = self.sinks.first() {
            store.remove_others(&self.topology, &sink.table, &[])?;
        }
        Ok(())
    }

    /// Publishes the messages of `records` of `sink`, at most
    /// [`PUBLISH_ACKS_IN_FLIGHT`] waiting for their acknowledgements at
    /// once, each send and each acknowledgement waited for at most `wait`.
    fn publish_all(&self, sink: &SinkTarget, records: &[record::Record], wait: Duration) -> Result<(), Failed> {
        let SinkDef::JetStream { subject, .. } = &sink.def else { unreachable!("a JetStream sink") };
        let (nats, _) = self.nats.as_ref().expect("connected for its JetStream sinks");
        let jetstream = &nats.jetstream;
        let subject = async_nats::Subject::from(subject.as_str());
        let what = |(txid, n): (u64, u32)| unpublished(&sink.id, txid, n, &subject);
        nats.runtime.block_on(async {
            let mut in_flight: VecDeque<((u64, u32), PublishAckFuture)> = VecDeque::new();
            for record in records {
                let mut ids = MessageIds::new(&self.topology, &sink.id, record.txid);
                for (m, payload) in record.messages.iter().enumerate() {
                    let place = (record.txid, record.place(m));
                    let id = ids.of(place.1);
                    let ack = send_one(jetstream, &subject, payload.clone(), id, wait, || what(place)).await?;
                    in_flight.push_back((place, ack));
                    if in_flight.len() >= PUBLISH_ACKS_IN_FLIGHT {
                        acknowledged(&mut in_flight, &what, wait).await?;
                    }
                }
            }
            while !in_flight.is_empty() {
                acknowledged(&mut in_flight, &what, wait).await?;
            }
            Ok(())
        })
    }
}

impl Publisher {
    /// Writes the messages of `records` of Kafka sink `i` that its topic
    /// does not hold yet.
    fn write_kafka(&mut self, i: usize, records: &[record::Record]) -> Result<(), Failed> {
        let sink = &self.sinks[i];
        let keyed: Vec<(kafka::Key, &[u8])> = records
            .iter()
            .flat_map(|r| r.messages.iter().enumerate().map(|(m, message)| ((r.txid, r.place(m)), &message[..])))
            .collect();
        let id = sink.id.clone();
        let place = move |(txid, n): kafka::Key| format!("sink {id} could not write record {n} of txid {txid}");
        let writer = self.topics.get_mut(&sink.id).expect("a writer per Kafka sink");
        let kafka = self.kafka.as_mut().expect("connected for its Kafka sinks");
        writer.write(kafka, &keyed, &place).map_err(|failure| {
            writer.forget();
            match failure {
                Failure::Lost(e) => {
                    kafka.forget();
                    Failed::Unreachable(e)
                }
                Failure::Fatal(e) => Failed::Refused(e),
            }
        })
    }
}

/// The `Nats-Msg-Id`s of one batch's messages, `<topology>/<sink>/<txid>/<n>`:
/// the part before the place written once.
struct MessageIds {
    id: String,
    prefix: usize,
}

impl MessageIds {
    fn new(topology: &str, sink: &str, txid: u64) -> MessageIds {
        let id = format!("{topology}/{sink}/{txid}/");
        MessageIds { prefix: id.len(), id }
    }

    /// The id of message `n`.
    fn of(&mut self, n: u32) -> &str {
        use std::fmt::Write as _;
        self.id.truncate(self.prefix);
        write!(self.id, "{n}").expect("a String takes it");
        &self.id
    }
}

/// What a publish that failed was: which message of which batch, where.
fn unpublished(sink: &str, txid: u64, n: u32, subject: &str) -> String {
    format!("sink {sink} could not publish message {n} of txid {txid} to subject {subject}")
}

/// Sends `payload` to `subject` with message id `id`, the send waited for
/// at most `wait`; its acknowledgement is left to come. `what` names the
/// message in an error.
async fn send_one(
    jetstream: &async_nats::jetstream::Context,
    subject: &async_nats::Subject,
    payload: bytes::Bytes,
    id: &str,
    wait: Duration,
    what: impl Fn() -> String,
) -> Result<PublishAckFuture, Failed> {
    let message = PublishMessage::build().payload(payload).message_id(id);
    match tokio::time::timeout(wait, jetstream.send_publish(subject.clone(), message)).await {
        Err(_) => Err(Failed::Unreachable(anyhow::anyhow!("{}: the client could not send it in time", what()))),
        Ok(Err(e)) => Err(classify(e, what())),
        Ok(Ok(ack)) => Ok(ack),
    }
}

/// Waits for the oldest publish in flight to be acknowledged, at most `wait`.
async fn acknowledged(
    in_flight: &mut VecDeque<((u64, u32), PublishAckFuture)>,
    what: &impl Fn((u64, u32)) -> String,
    wait: Duration,
) -> Result<(), Failed> {
    let Some((key, ack)) = in_flight.pop_front() else { return Ok(()) };
    match tokio::time::timeout(wait, ack).await {
        Err(_) => Err(Failed::Unreachable(anyhow::anyhow!("{}: not acknowledged in time", what(key)))),
        Ok(Err(e)) => Err(classify(e, what(key))),
        Ok(Ok(_)) => Ok(()),
    }
}

/// A publish's `error`: refused by the server, or a server out of reach;
/// `what` says which message it was.
fn classify(error: async_nats::jetstream::context::PublishError, what: String) -> Failed {
    let api = std::error::Error::source(&error)
        .is_some_and(|source| source.downcast_ref::<async_nats::jetstream::Error>().is_some());
    match error.kind() {
        PublishErrorKind::TimedOut | PublishErrorKind::BrokenPipe | PublishErrorKind::MaxAckPending => {
            Failed::Unreachable(anyhow::anyhow!("{what}: the server did not take it ({error})"))
        }
        PublishErrorKind::StreamNotFound => {
            Failed::Refused(anyhow::anyhow!("{what}: JetStream refused it, no stream takes the subject"))
        }
        PublishErrorKind::Other if !api => Failed::Unreachable(anyhow::anyhow!("{what}: {error}")),
        _ => Failed::Refused(anyhow::anyhow!("{what}: JetStream refused it ({error})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_ids_name_topology_sink_txid_and_place() {
        let mut ids = MessageIds::new("clicks", "page-counts", 42);
        assert_eq!(ids.of(0), "clicks/page-counts/42/0");
        assert_eq!(ids.of(1234), "clicks/page-counts/42/1234");
        assert_eq!(ids.of(7), "clicks/page-counts/42/7");
    }

    #[test]
    fn json_payloads_are_the_fields_as_a_json_object_gives_them() {
        use weir_sdk::codec::Value;
        let input = Input {
            positions: vec![2, 0, 1, 3, 4, 5],
            names: ["zeta", "alpha", "mid", "flag", "raw", "none"].map(String::from).to_vec(),
            whole_tuple: false,
        };
        let rows = [
            [
                Value::Str("a \"quoted\" \u{e9}\n".into()),
                Value::I64(-42),
                Value::F64(1.5),
                Value::Bool(true),
                Value::Bytes(vec![0, 0xab, 0xff]),
                Value::Null,
            ],
            [
                Value::Str(String::new()),
                Value::I64(i64::MAX),
                Value::F64(f64::NAN),
                Value::Bool(false),
                Value::Bytes(vec![]),
                Value::F64(1e300),
            ],
        ];
        let mut writer = BatchWriter::new(6);
        for row in &rows {
            writer.begin_row(0);
            row.iter().for_each(|v| writer.push(v.as_ref()));
        }
        let batch = writer.finish_batch();
        let fields = JsonFields::of(&input);
        for (row, values) in batch.rows().zip(&rows) {
            let mut written = Vec::new();
            fields.write(&row, &mut written);
            let object: serde_json::Map<String, serde_json::Value> = input
                .names
                .iter()
                .zip(&input.positions)
                .map(|(name, &p)| (name.clone(), weir_state::json::to_json(&values[p])))
                .collect();
            assert_eq!(String::from_utf8(written).unwrap(), serde_json::to_string(&object).unwrap());
        }
    }
}

//! Reading a stream's partitions, all at once, each through a pull consumer
//! of its own (filtered to its subject, from a start sequence, nothing to
//! acknowledge), kept between batches while the next batch starts where the
//! last one ended. An emission's part that came whole has the partition's
//! next part read ahead at once; a part read ahead that the next read does
//! not take goes, its consumer with it.

use super::meta::Position;
use super::pull::{self, Flow};
use super::tuples::{Message, TupleShape};
use crate::nats::{Nats, is_stream_not_found, subject};
use crate::spout::Unreadable;
use anyhow::anyhow;
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull::Config as PullConfig};
use async_nats::jetstream::{self, stream::Stream};
use futures_util::{StreamExt, TryStreamExt};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};
use weir_config::{
    MAX_JETSTREAM_BATCH_BYTES, MAX_JETSTREAM_BATCH_MESSAGES, MAX_JETSTREAM_PARTITIONS, NATS_REQUEST_TIMEOUT,
};
use weir_sdk::codec::{Batch, BatchWriter};
use weir_sdk::topology::JetStreamDef;

/// How long the server keeps a consumer nobody reads (the host's, if it
/// dies, are cleaned up after this).
const CONSUMER_IDLE: Duration = Duration::from_secs(30);

/// Why a read failed.
pub enum Failure {
    /// The server is out of reach or did not answer: worth retrying.
    Lost(anyhow::Error),
    /// Retrying cannot help: the message says what is wrong.
    Fatal(anyhow::Error),
}

/// What one emission read.
pub enum Read {
    /// Messages, and where each partition stands after them.
    Batch {
        /// Per partition: the range read and where to go on from.
        positions: Vec<Position>,
        /// The tuples.
        batch: Batch<'static>,
        /// Per partition, the messages left after what was read.
        pending: BTreeMap<String, u64>,
    },
    /// Nothing new in any partition; `last` is the stream's last sequence
    /// as of before the partitions were read.
    Empty {
        /// Every message of the partitions up to here was read.
        last: u64,
    },
}

struct Cached {
    consumer: PullConsumer,
    /// The sequence its next message will follow from.
    next: u64,
    used: Instant,
    /// The messages at and past `next` that the consumer delivered past
    /// the span it was asked for, in order (it stands after them).
    carry: std::collections::VecDeque<pull::Delivered>,
    /// The partition's next part, read from `next` on.
    ahead: Option<PartAhead>,
}

/// A partition's next part of an emission, read as soon as its last part
/// came whole, while the other partitions' parts still come: each
/// partition goes at its own pace, as a reader of it alone would, rather
/// than every batch waiting for its slowest partition before any asks for
/// more.
struct PartAhead {
    /// The partition's consumer, which reads it.
    consumer: String,
    max: usize,
    max_bytes: usize,
    task: tokio::task::JoinHandle<anyhow::Result<pull::Pulled>>,
}

impl Drop for PartAhead {
    /// A part not taken is not wanted: its consumer, which stands nowhere
    /// known then, goes with it (see [`Reader::take_ahead`]).
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One partition's part of a read: from which sequence, how many messages
/// at most, and the last sequence it may hold.
struct Part {
    subject: String,
    start: u64,
    max: usize,
    until: Option<u64>,
    /// Bytes of messages past which the read ends (a replay reads all it
    /// recorded).
    max_bytes: usize,
    /// Whether the partition's next part is read ahead once this one
    /// comes whole (an emission's parts; a replay reads what it recorded).
    read_on: bool,
}

/// Where a part's messages come from.
enum Source {
    /// A read of the partition's consumer of this name.
    Consumer(String),
    /// The part read ahead.
    Ahead(PartAhead),
}

/// What one partition's read found.
#[derive(Default)]
struct Got {
    first: Option<u64>,
    last: Option<u64>,
    count: u64,
    pending: u64,
}

/// Puts a message of `partition` of `stream` into the batch as its tuple; a
/// message the tuple shape refuses is named by stream, partition and
/// sequence, and is [`Unreadable`]: no retry reads it otherwise.
fn push_delivered(
    shape: &mut TupleShape,
    writer: &mut BatchWriter,
    stream: &str,
    partition: &str,
    delivered: &pull::Delivered,
) -> anyhow::Result<()> {
    let sequence = delivered.sequence;
    let message = Message {
        subject: delivered.message.subject.as_str(),
        payload: &delivered.message.payload,
        sequence,
        timestamp_ms: delivered.timestamp_ms,
    };
    shape.push(writer, &message).map_err(|e| {
        let named = e.context(format!("stream {stream}, partition {partition}, sequence {sequence}"));
        anyhow::Error::new(Unreadable(format!("{named:#}")))
    })
}

/// Starts reading the part after `part` through its partition's consumer.
fn part_ahead(client: &async_nats::Client, stream: &str, consumer: String, part: &Part) -> PartAhead {
    let (client, stream, name) = (client.clone(), stream.to_owned(), consumer.clone());
    let (max, max_bytes) = (part.max, part.max_bytes);
    let task = tokio::spawn(async move { pull::read(&client, &stream, &name, max, None, max_bytes).await });
    PartAhead { consumer, max, max_bytes, task }
}

/// What a part read ahead found; a panic in it is the reader's.
fn landed(joined: Result<anyhow::Result<pull::Pulled>, tokio::task::JoinError>) -> anyhow::Result<pull::Pulled> {
    match joined {
        Ok(pulled) => pulled,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => Err(anyhow!("the read ahead was stopped")),
    }
}

/// Reads the stream a JetStream spout declares.
pub struct Reader {
    client: async_nats::Client,
    jetstream: jetstream::Context,
    server: String,
    name: String,
    declared: Vec<String>,
    shape: TupleShape,
    per_partition: usize,
    stream: Option<Stream>,
    /// The partitions, once resolved; `dynamic` when they depend on the
    /// subjects that hold messages (a wildcard over a wildcard), and are
    /// resolved again for each batch.
    partitions: Option<Vec<String>>,
    dynamic: bool,
    consumers: HashMap<String, Cached>,
    /// A consumer waiting for the stream's next message, and where from.
    watch: Option<(u64, PullConsumer)>,
}

impl Reader {
    /// A reader of `def`'s stream through `nats`, taking up to
    /// `per_partition` messages of each partition.
    pub fn new(nats: &Nats, def: &JetStreamDef, per_partition: usize) -> Reader {
        Reader {
            client: nats.client.clone(),
            jetstream: nats.jetstream.clone(),
            server: nats.server.clone(),
            name: def.stream.clone(),
            declared: def.subjects.clone(),
            shape: TupleShape::of(def),
            per_partition,
            stream: None,
            partitions: None,
            dynamic: false,
            consumers: HashMap::new(),
            watch: None,
        }
    }

    /// Classifies an error of the client: the stream gone is fatal, the
    /// rest means the server is out of reach.
    fn failure<E: std::error::Error + Send + Sync + 'static>(&self, doing: &str, error: E) -> Failure {
        if is_stream_not_found(&error) {
            return Failure::Fatal(anyhow!(
                "stream {} does not exist on the NATS server at {}",
                self.name,
                self.server
            ));
        }
        Failure::Lost(anyhow::Error::new(error).context(format!("{doing} on the NATS server at {}", self.server)))
    }

    fn no_answer(&self, doing: &str) -> Failure {
        Failure::Lost(anyhow!(
            "no answer from the NATS server at {} within {NATS_REQUEST_TIMEOUT:?} {doing}",
            self.server
        ))
    }

    /// Deletes the consumers this reader made (the server would drop them
    /// once idle anyway).
    pub async fn close(&mut self) {
        let mut names: Vec<String> =
            self.consumers.drain().map(|(_, c)| c.consumer.cached_info().name.clone()).collect();
        names.extend(self.watch.take().map(|(_, c)| c.cached_info().name.clone()));
        if let Some(stream) = &self.stream {
            for name in names {
                let _ = stream.delete_consumer(&name).await;
            }
        }
    }

    /// Forgets the consumers: after a lost connection, where they stand is
    /// not known.
    pub fn forget_consumers(&mut self) {
        self.consumers.clear();
        self.watch = None;
    }

    async fn stream(&mut self) -> Result<&mut Stream, Failure> {
        if self.stream.is_none() {
            use async_nats::jetstream::context::GetStreamErrorKind;
            let stream = match self.jetstream.get_stream(&self.name).await {
                Ok(stream) => stream,
                Err(e) => match e.kind() {
                    GetStreamErrorKind::JetStream(api)
                        if api.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND =>
                    {
                        return Err(Failure::Fatal(anyhow!(
                            "stream {} does not exist on the NATS server at {}",
                            self.name,
                            self.server
                        )));
                    }
                    GetStreamErrorKind::InvalidStreamName | GetStreamErrorKind::EmptyName => {
                        return Err(Failure::Fatal(anyhow!("{:?} is not a stream name", self.name)));
                    }
                    _ => return Err(self.failure(&format!("looking up stream {}", self.name), e)),
                },
            };
            self.stream = Some(stream);
        }
        Ok(self.stream.as_mut().expect("looked up above"))
    }

    /// The stream's subjects, and its first and last sequences, asked afresh.
    async fn stream_state(&mut self) -> Result<(Vec<String>, u64, u64), Failure> {
        let doing = format!("asking for stream {}'s state", self.name);
        let stream = self.stream().await?;
        let info = match tokio::time::timeout(NATS_REQUEST_TIMEOUT, stream.info()).await {
            Ok(Ok(info)) => Ok((info.config.subjects.clone(), info.state.first_sequence, info.state.last_sequence)),
            Ok(Err(e)) => Err(e),
            Err(_) => return Err(self.no_answer(&doing)),
        };
        info.map_err(|e| self.failure(&doing, e))
    }

    /// Looks the stream up and resolves its partitions: what a spout
    /// checks when it opens.
    pub async fn prepare(&mut self) -> Result<(), Failure> {
        let (subjects, _, _) = self.stream_state().await?;
        self.resolve(&subjects).await
    }

    /// The partitions resolved by [`Reader::prepare`], and whether they
    /// depend on which subjects hold messages (a stream taking a wildcard).
    pub fn partitions(&self) -> Option<(&[String], bool)> {
        self.partitions.as_deref().map(|p| (p, self.dynamic))
    }

    /// The partitions the declared subjects make of a stream whose
    /// subjects are `stream_subjects`.
    async fn resolve(&mut self, stream_subjects: &[String]) -> Result<(), Failure> {
        let listed = stream_subjects.join(", ");
        let mut found = BTreeSet::new();
        let mut dynamic = false;
        for declared in self.declared.clone() {
            if !subject::is_wildcard(&declared) {
                if !stream_subjects.iter().any(|s| subject::matches(s, &declared)) {
                    return Err(Failure::Fatal(anyhow!(
                        "subject {declared} is not one of stream {}'s subjects ({listed})",
                        self.name
                    )));
                }
                found.insert(declared);
                continue;
            }
            let mut matched = false;
            let mut list_held = false;
            for s in stream_subjects {
                if !subject::is_wildcard(s) {
                    if subject::matches(&declared, s) {
                        found.insert(s.clone());
                        matched = true;
                    }
                } else if subject::overlaps(&declared, s) {
                    matched = true;
                    list_held = true;
                }
            }
            if !matched {
                return Err(Failure::Fatal(anyhow!(
                    "no subject of stream {} matches {declared} (its subjects: {listed})",
                    self.name
                )));
            }
            if list_held {
                // The stream takes a wildcard: the partitions are the
                // subjects that hold messages now.
                dynamic = true;
                let doing = format!("listing the subjects of stream {} matching {declared}", self.name);
                let stream = self.stream().await?;
                let mut held =
                    match tokio::time::timeout(NATS_REQUEST_TIMEOUT, stream.info_with_subjects(&declared)).await {
                        Ok(Ok(held)) => held,
                        Ok(Err(e)) => return Err(self.failure(&doing, e)),
                        Err(_) => return Err(self.no_answer(&doing)),
                    };
                loop {
                    let next = match tokio::time::timeout(NATS_REQUEST_TIMEOUT, held.try_next()).await {
                        Ok(Ok(next)) => next,
                        Ok(Err(e)) => return Err(self.failure(&doing, e)),
                        Err(_) => return Err(self.no_answer(&doing)),
                    };
                    let Some((s, _messages)) = next else { break };
                    if subject::matches(&declared, &s) {
                        found.insert(s);
                    }
                    if found.len() > MAX_JETSTREAM_PARTITIONS {
                        break;
                    }
                }
            }
        }
        if found.len() > MAX_JETSTREAM_PARTITIONS {
            return Err(Failure::Fatal(anyhow!(
                "the subjects {:?} of stream {} make more than {MAX_JETSTREAM_PARTITIONS} partitions",
                self.declared,
                self.name
            )));
        }
        self.partitions = Some(found.into_iter().collect());
        self.dynamic = dynamic;
        Ok(())
    }

    /// The consumer of `subject` from sequence `start`: the one kept from
    /// the last batch if it stands there, else a new one.
    async fn consumer(&mut self, subject: &str, start: u64) -> Result<PullConsumer, Failure> {
        if let Some(cached) = self.consumers.get(subject)
            && cached.next == start
            && cached.used.elapsed() < CONSUMER_IDLE / 2
            && cached.ahead.is_none()
        {
            return Ok(cached.consumer.clone());
        }
        let old = self.consumers.remove(subject);
        let doing = format!("creating a consumer of {subject} on stream {}", self.name);
        let stream = self.stream().await?;
        if let Some(old) = old {
            let _ =
                tokio::time::timeout(NATS_REQUEST_TIMEOUT, stream.delete_consumer(&old.consumer.cached_info().name))
                    .await;
        }
        let config = PullConfig {
            deliver_policy: DeliverPolicy::ByStartSequence { start_sequence: start },
            ack_policy: AckPolicy::None,
            filter_subject: subject.to_owned(),
            inactive_threshold: CONSUMER_IDLE,
            memory_storage: true,
            ..Default::default()
        };
        let consumer = match tokio::time::timeout(NATS_REQUEST_TIMEOUT, stream.create_consumer(config)).await {
            Ok(Ok(consumer)) => consumer,
            Ok(Err(e)) => return Err(self.failure(&doing, e)),
            Err(_) => return Err(self.no_answer(&doing)),
        };
        let cached = Cached {
            consumer: consumer.clone(),
            next: start,
            used: Instant::now(),
            carry: Default::default(),
            ahead: None,
        };
        self.consumers.insert(subject.to_owned(), cached);
        Ok(consumer)
    }

    /// The part read ahead of `part`'s partition, if it is `part`; a part
    /// read ahead that is not is dropped with its consumer.
    fn take_ahead(&mut self, part: &Part) -> Option<PartAhead> {
        let cached = self.consumers.get_mut(&part.subject)?;
        let ahead = cached.ahead.take()?;
        let same = cached.next == part.start && ahead.max == part.max && ahead.max_bytes == part.max_bytes;
        if part.read_on && same && cached.used.elapsed() < CONSUMER_IDLE / 2 {
            return Some(ahead);
        }
        self.consumers.remove(&part.subject);
        None
    }

    /// Reads every part at once, each through its partition's consumer, then
    /// appends their messages to `writer` part after part, in stream order
    /// within each (a replay lays them out as the emission did).
    async fn read_all(&mut self, parts: &[Part], writer: &mut BatchWriter) -> Result<Vec<Got>, Failure> {
        let mut sources = Vec::with_capacity(parts.len());
        for part in parts {
            sources.push(match self.take_ahead(part) {
                Some(ahead) => Source::Ahead(ahead),
                None => Source::Consumer(self.consumer(&part.subject, part.start).await?.cached_info().name.clone()),
            });
        }
        let (client, stream) = (&self.client, &self.name);
        let reads = parts.iter().zip(sources).map(|(part, source)| async move {
            let (consumer, pulled) = match source {
                Source::Consumer(consumer) => {
                    let pulled = pull::read(client, stream, &consumer, part.max, part.until, part.max_bytes).await;
                    (consumer, pulled)
                }
                Source::Ahead(mut ahead) => (ahead.consumer.clone(), landed((&mut ahead.task).await)),
            };
            let whole = matches!(&pulled, Ok(p) if p.messages.len() == part.max && !p.beyond && !p.cut);
            let ahead = (part.read_on && whole).then(|| part_ahead(client, stream, consumer, part));
            (pulled, ahead)
        });
        let pulled = futures_util::future::join_all(reads).await;
        let mut read = Vec::with_capacity(parts.len());
        for (part, (pulled, ahead)) in parts.iter().zip(pulled) {
            match &pulled {
                Ok(pulled) if !pulled.beyond && !pulled.cut => {
                    let cached = self.consumers.get_mut(&part.subject).expect("made by consumer()");
                    cached.next = pulled.messages.last().map_or(part.start, |m| m.sequence + 1);
                    cached.used = Instant::now();
                    cached.ahead = ahead;
                }
                // A consumer that went past the range, whose read was cut
                // short, or whose read failed, stands nowhere known.
                _ => {
                    self.consumers.remove(&part.subject);
                }
            }
            read.push(pulled.map_err(|e| {
                let doing =
                    format!("reading {} of stream {} on the NATS server at {}", part.subject, self.name, self.server);
                Failure::Lost(e.context(doing))
            }));
        }
        let mut gots = Vec::with_capacity(parts.len());
        for (part, pulled) in parts.iter().zip(read) {
            let mut got = Got::default();
            for delivered in pulled?.messages {
                let sequence = delivered.sequence;
                push_delivered(&mut self.shape, writer, &self.name, &part.subject, &delivered)
                    .map_err(Failure::Fatal)?;
                got.first.get_or_insert(sequence);
                got.last = Some(sequence);
                got.count += 1;
                got.pending = delivered.pending;
            }
            gots.push(got);
        }
        Ok(gots)
    }

    /// Reads the next batch: up to the per-partition limit from each
    /// partition, each from where `before` left it (its start when absent).
    pub async fn emit(&mut self, before: &[Position]) -> Result<Read, Failure> {
        // Fixed partitions are read without asking for the stream's state
        // first (a round trip, and its info to parse, a batch): only when
        // they have nothing, for where to wait from.
        let mut last = None;
        if self.partitions.is_none() || self.dynamic {
            let (subjects, _, at) = self.stream_state().await?;
            self.resolve(&subjects).await?;
            last = Some(at);
        }
        loop {
            if let Some(read) = self.read_parts(before).await? {
                return Ok(read);
            }
            match last {
                Some(last) => return Ok(Read::Empty { last }),
                // Asked before reading once more, so that a message stored
                // between the read and the answer is not taken as read.
                None => last = Some(self.stream_state().await?.2),
            }
        }
    }

    /// Reads the next part of each partition from where `before` left it;
    /// `None` when none has a message.
    async fn read_parts(&mut self, before: &[Position]) -> Result<Option<Read>, Failure> {
        let partitions = self.partitions.clone().unwrap_or_default();
        let max = self.per_partition.min((MAX_JETSTREAM_BATCH_MESSAGES / partitions.len().max(1)).max(1));
        let max_bytes = MAX_JETSTREAM_BATCH_BYTES / partitions.len().max(1);
        let parts: Vec<Part> = partitions
            .into_iter()
            .map(|subject| {
                let start = before.iter().find(|p| p.subject == subject).map_or(1, |p| p.next);
                Part { subject, start, max, until: None, max_bytes, read_on: true }
            })
            .collect();
        let mut writer = BatchWriter::new(self.shape.arity());
        let gots = self.read_all(&parts, &mut writer).await?;
        if writer.rows() == 0 {
            return Ok(None);
        }
        let mut positions = Vec::with_capacity(parts.len());
        let mut pending = BTreeMap::new();
        for (Part { subject, start, .. }, got) in parts.into_iter().zip(gots) {
            let next = got.last.map_or(start, |last| last + 1);
            pending.insert(subject.clone(), got.pending);
            positions.push(Position { subject, next, first: got.first.unwrap_or(start), count: got.count });
        }
        Ok(Some(Read::Batch { positions, batch: writer.finish_batch(), pending }))
    }

    /// The stream's first and last sequences now.
    pub async fn sequences(&mut self) -> Result<(u64, u64), Failure> {
        let (_, first, last) = self.stream_state().await?;
        Ok((first, last))
    }

    /// Reads every message of `partitions` with a sequence past `after`
    /// and up to `until`: a batch whose metadata is a span of the stream,
    /// read the same on every attempt while the stream holds it. Each
    /// partition is read through a consumer of its own, filtered to it, so
    /// that a host reads only its partitions' messages; the consumer is
    /// kept for the next span (made at each span's start, it would cost the
    /// server a scan of the stream), the one message it reads past the span
    /// carried over to the next. How many messages the span holds in these
    /// partitions only the stream knows: the cluster checks that its hosts
    /// together read every one.
    pub async fn read_span(
        &mut self,
        partitions: &[String],
        after: u64,
        until: u64,
    ) -> Result<Batch<'static>, Failure> {
        let mut writer = BatchWriter::new(self.shape.arity());
        let max = usize::try_from(until.saturating_sub(after)).unwrap_or(usize::MAX);
        if max == 0 {
            return Ok(writer.finish_batch());
        }
        let start = after + 1;
        for partition in partitions {
            let consumer = self.consumer(partition, start).await?.cached_info().name.clone();
            let cached = self.consumers.get_mut(partition).expect("made by consumer()");
            let mut refused = None;
            let (shape, name) = (&mut self.shape, &self.name);
            let mut carried = Ok(());
            while carried.is_ok()
                && let Some(message) = cached.carry.pop_front_if(|m| m.sequence <= until)
            {
                carried = push_delivered(shape, &mut writer, name, partition, &message);
            }
            if let Err(e) = carried {
                self.consumers.remove(partition);
                return Err(Failure::Fatal(e));
            }
            if !cached.carry.is_empty() {
                // The partition's messages past the span came already: it
                // has no more in the span.
                cached.next = until + 1;
                cached.used = Instant::now();
                continue;
            }
            let taken = pull::read_each(&self.client, name, &consumer, max, Some(until), |delivered| {
                push_delivered(shape, &mut writer, name, partition, &delivered).map_err(|e| {
                    refused = Some(e);
                    anyhow!("a message was refused")
                })?;
                Ok(Flow::More)
            })
            .await;
            match taken {
                Ok(taken) if refused.is_none() => {
                    let cached = self.consumers.get_mut(partition).expect("made by consumer()");
                    // The span's messages are all in the stream (the leader
                    // cut it from what the stream held): a consumer that
                    // had no more, or read one past it, stands past it.
                    cached.next = until + 1;
                    cached.carry = taken.over.into();
                    cached.used = Instant::now();
                }
                Ok(_) => {
                    self.consumers.remove(partition);
                    return Err(Failure::Fatal(refused.expect("a refusal")));
                }
                Err(e) => {
                    self.consumers.remove(partition);
                    let doing =
                        format!("reading {partition} of stream {} on the NATS server at {}", self.name, self.server);
                    return Err(Failure::Lost(e.context(doing)));
                }
            }
        }
        Ok(writer.finish_batch())
    }

    /// Reads again exactly the messages of `positions`; a message no
    /// longer held is fatal.
    pub async fn replay(&mut self, positions: &[Position]) -> Result<Batch<'static>, Failure> {
        let recorded: Vec<&Position> = positions.iter().filter(|p| p.count > 0).collect();
        let parts: Vec<Part> = recorded
            .iter()
            .map(|p| Part {
                subject: p.subject.clone(),
                start: p.first,
                max: usize::try_from(p.count).unwrap_or(usize::MAX),
                until: Some(p.last()),
                max_bytes: usize::MAX,
                read_on: false,
            })
            .collect();
        let mut writer = BatchWriter::new(self.shape.arity());
        let gots = self.read_all(&parts, &mut writer).await?;
        for (p, got) in recorded.into_iter().zip(gots) {
            if got.count != p.count || got.first != Some(p.first) || got.last != Some(p.last()) {
                return Err(Failure::Fatal(anyhow!(
                    "stream {} no longer holds the messages recorded in partition {}: sequences {}..={} held {} \
                     messages, {} of them are left (removed by the stream's limits, a purge or a deletion)",
                    self.name,
                    p.subject,
                    p.first,
                    p.last(),
                    p.count,
                    got.count
                )));
            }
        }
        Ok(writer.finish_batch())
    }

    /// Waits up to `timeout` for a message of the partitions past sequence
    /// `from` - 1; true if one came.
    pub async fn watch(&mut self, from: u64, timeout: Duration) -> Result<bool, Failure> {
        let doing = format!("waiting on stream {}", self.name);
        let consumer = match self.watch.take() {
            Some((at, consumer)) if at == from => consumer,
            old => {
                let filter = match (self.partitions.as_deref(), self.declared.as_slice()) {
                    (Some([only]), _) => only.clone(),
                    (_, [pattern]) => pattern.clone(),
                    _ => String::new(),
                };
                let stream = self.stream().await?;
                if let Some((_, old)) = old {
                    let _ = tokio::time::timeout(NATS_REQUEST_TIMEOUT, stream.delete_consumer(&old.cached_info().name))
                        .await;
                }
                let config = PullConfig {
                    deliver_policy: DeliverPolicy::ByStartSequence { start_sequence: from },
                    ack_policy: AckPolicy::None,
                    filter_subject: filter,
                    headers_only: true,
                    inactive_threshold: CONSUMER_IDLE,
                    memory_storage: true,
                    ..Default::default()
                };
                match tokio::time::timeout(NATS_REQUEST_TIMEOUT, stream.create_consumer(config)).await {
                    Ok(Ok(consumer)) => consumer,
                    Ok(Err(e)) => return Err(self.failure(&doing, e)),
                    Err(_) => return Err(self.no_answer(&doing)),
                }
            }
        };
        let request = consumer.batch().max_messages(1).expires(timeout).messages();
        let mut arrivals = match tokio::time::timeout(NATS_REQUEST_TIMEOUT, request).await {
            Ok(Ok(arrivals)) => arrivals,
            Ok(Err(e)) => return Err(self.failure(&doing, e)),
            Err(_) => return Err(self.no_answer(&doing)),
        };
        match tokio::time::timeout(timeout + NATS_REQUEST_TIMEOUT, arrivals.next()).await {
            Ok(Some(Ok(_))) => {
                // It has moved on: the next wait starts further on.
                let name = consumer.cached_info().name.clone();
                let _ = tokio::time::timeout(NATS_REQUEST_TIMEOUT, self.stream().await?.delete_consumer(&name)).await;
                Ok(true)
            }
            Ok(None) => {
                // Nothing came: the consumer still stands at `from`, unless
                // the server lost it (a restarted server keeps no consumer
                // held in memory, and a pull from a lost one just times
                // out). Then the next emission reads for itself.
                let mut consumer = consumer;
                match tokio::time::timeout(NATS_REQUEST_TIMEOUT, consumer.info()).await {
                    Ok(Ok(_)) => {
                        self.watch = Some((from, consumer));
                        Ok(false)
                    }
                    _ => Ok(true),
                }
            }
            Ok(Some(Err(e))) => Err(Failure::Lost(anyhow!("{doing} on the NATS server at {}: {e}", self.server))),
            Err(_) => Err(self.no_answer(&doing)),
        }
    }
}

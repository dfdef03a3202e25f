//! The built-in spouts over a NATS JetStream stream, each subject of it a
//! partition. The host reads the log; the guest never reaches the network.
//!
//! - Transactional: a batch's metadata is each partition's sequence range,
//!   recorded before the batch is processed; a replay reads exactly those
//!   messages again, and halts the topology, naming the stream, partition
//!   and sequences, when the stream no longer holds them.
//! - Opaque: the metadata is each partition's next sequence, stored at
//!   commit; a replay reads afresh from there.
//!
//! While the coordinator commits, the batch after the last one emitted is
//! read ahead on the client's runtime (one at most). It is emitted only as
//! the first attempt at exactly that next batch; a replay, a retry or
//! another `previous` discards it and reads afresh. Within a read, each
//! partition asks for its next part as soon as its part came whole, so
//! that no partition waits for the slowest before asking for more.
//!
//! A server out of reach (at start or mid-run) is retried with back-off for
//! `--nats-retry-ms` before the topology halts; nothing is emitted from a
//! read that did not finish, so nothing committed is lost.

pub(super) mod meta;
mod pull;
mod reader;
pub(crate) mod tuples;

use super::backlog::Backlog;
use super::caught_up::CaughtUp;
use super::contract::{Emitted, Spout};
use super::outage::Outage;
use crate::nats::{Nats, NatsConfig, subject};
use anyhow::{Context, Result, bail};
use reader::{Failure, Read, Reader};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use weir_config::{MAX_JETSTREAM_BATCH_MESSAGES, MAX_JETSTREAM_PARTITIONS};
use weir_plan::SpoutKind;
use weir_sdk::codec::Batch;
use weir_sdk::topology::{JetStreamDef, JetStreamKind, PayloadDef};

/// Checks a JetStream spout's definition (it comes from a guest: every
/// name and number is bounded) before anything connects.
pub fn check(def: &JetStreamDef, topology: &str) -> Result<()> {
    let spout = || format!("topology {topology}: the JetStream spout");
    subject::check_stream_name(&def.stream).with_context(spout)?;
    if def.subjects.is_empty() || def.subjects.len() > MAX_JETSTREAM_PARTITIONS {
        bail!("{}: give 1 to {MAX_JETSTREAM_PARTITIONS} subjects, not {}", spout(), def.subjects.len());
    }
    for pattern in &def.subjects {
        subject::check(pattern).with_context(|| format!("{} of stream {}", spout(), def.stream))?;
    }
    if let PayloadDef::Json { fields } = &def.payload
        && fields.is_empty()
    {
        bail!("{}: a JSON payload needs at least one field", spout());
    }
    if let Some(n) = def.max_per_partition
        && (n == 0 || n > MAX_JETSTREAM_BATCH_MESSAGES as u64)
    {
        bail!("{}: max_per_partition {n} is not between 1 and {MAX_JETSTREAM_BATCH_MESSAGES}", spout());
    }
    Ok(())
}

/// The partitions `def` makes of its stream on the server of `nats`: its
/// subjects, wildcards expanded; `None` when they depend on which subjects
/// hold messages (a stream that takes a wildcard), so that more may come.
pub fn fixed_partitions(def: &JetStreamDef, topology: &str, nats: &NatsConfig) -> Result<Option<Vec<String>>> {
    check(def, topology)?;
    let doing = || format!("topology {topology} reads stream {}", def.stream);
    let connection = Nats::connect(nats, &format!("weir {topology}")).with_context(doing)?;
    let mut reader = Reader::new(&connection, def, 1);
    let resolved = connection.runtime.block_on(async {
        let resolved = reader.prepare().await;
        reader.close().await;
        resolved
    });
    match resolved {
        Ok(()) => {}
        Err(Failure::Lost(e) | Failure::Fatal(e)) => return Err(e).with_context(doing),
    }
    let (partitions, dynamic) = reader.partitions().expect("prepared");
    Ok((!dynamic).then(|| partitions.to_vec()))
}

/// A JetStream spout's stream read by spans of sequences: how a cluster's
/// hosts read their partitions of a batch whose metadata the leader cut.
///
/// Reads run on the client's runtime, where the messages arrive, rather
/// than handing each over to the caller's thread: on a busy core each
/// handover is a wake-up and a switch of threads.
pub struct SpanReader {
    nats: Nats,
    /// The reader, but while a read holds it.
    reader: Option<Reader>,
    stream: String,
}

impl SpanReader {
    /// Connects to the server of `nats` and checks the stream `def` reads.
    pub fn open(def: &JetStreamDef, topology: &str, nats: &NatsConfig) -> Result<SpanReader> {
        check(def, topology)?;
        let doing = || format!("topology {topology} reads stream {}", def.stream);
        let connection = Nats::connect(nats, &format!("weir {topology}")).with_context(doing)?;
        let mut reader = Reader::new(&connection, def, 1);
        connection.runtime.block_on(reader.prepare()).map_err(Failure::into_error).with_context(doing)?;
        Ok(SpanReader { nats: connection, reader: Some(reader), stream: def.stream.clone() })
    }

    /// The stream's first and last sequences.
    pub fn sequences(&mut self) -> Result<(u64, u64)> {
        let reader = self.reader.as_mut().expect("a read gives the reader back");
        let got = self.nats.runtime.block_on(reader.sequences());
        got.map_err(|e| self.lost(e)).with_context(|| format!("asking for stream {}'s sequences", self.stream))
    }

    /// The messages of `partitions` in the span `after+1..=until`.
    pub fn read(&mut self, partitions: &[String], after: u64, until: u64) -> Result<Batch<'static>> {
        let mut reader = self.reader.take().expect("a read gives the reader back");
        let partitions = partitions.to_vec();
        let task = self.nats.runtime.spawn(async move {
            let read = reader.read_span(&partitions, after, until).await;
            (reader, read)
        });
        let (reader, read) = match self.nats.runtime.block_on(task) {
            Ok(done) => done,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        };
        self.reader = Some(reader);
        read.map_err(|e| self.lost(e))
            .with_context(|| format!("reading sequences {}..={until} of stream {}", after + 1, self.stream))
    }

    fn lost(&mut self, failure: Failure) -> anyhow::Error {
        self.reader.as_mut().expect("a read gives the reader back").forget_consumers();
        failure.into_error()
    }
}

impl Failure {
    fn into_error(self) -> anyhow::Error {
        match self {
            Failure::Lost(e) | Failure::Fatal(e) => e,
        }
    }
}

/// The next batch, read on the client's runtime while the coordinator
/// commits the last ones; the read holds the reader until it is taken.
struct Ahead {
    /// The metadata of the batch it follows.
    after: Vec<u8>,
    task: tokio::task::JoinHandle<(Reader, Result<Read, Failure>)>,
}

/// A JetStream spout, with its connection.
pub struct JetStreamSpout {
    promise: JetStreamKind,
    topology: String,
    stream: String,
    nats: Nats,
    /// The reader, unless a read ahead holds it.
    reader: Option<Reader>,
    /// At most one batch read ahead: one batch a partition in memory.
    ahead: Option<Ahead>,
    outage: Outage,
    /// After an emission that found nothing: the sequence the next message
    /// of the partitions will have, or pass.
    caught_up: Option<CaughtUp<u64>>,
    /// What is not yet committed, by subject.
    backlog: Backlog<String>,
}

impl JetStreamSpout {
    /// Connects to the server of `nats` and checks that the stream and its
    /// subjects are there; up to `batch_size` messages a partition per
    /// batch unless the definition says otherwise.
    pub fn open(def: &JetStreamDef, topology: &str, nats: &NatsConfig, batch_size: usize) -> Result<JetStreamSpout> {
        check(def, topology)?;
        let doing = || format!("topology {topology} reads stream {}", def.stream);
        let connection = Nats::connect(nats, &format!("weir {topology}")).with_context(doing)?;
        let per_partition = def.max_per_partition.map_or(batch_size, |n| n as usize).max(1);
        let reader = Reader::new(&connection, def, per_partition);
        let mut spout = JetStreamSpout {
            promise: def.promise,
            topology: topology.to_owned(),
            stream: def.stream.clone(),
            nats: connection,
            reader: Some(reader),
            ahead: None,
            outage: Outage::new(nats.retry_for),
            caught_up: None,
            backlog: Backlog::default(),
        };
        spout.retrying(None, |runtime, reader| runtime.block_on(reader.prepare())).with_context(doing)?;
        Ok(spout)
    }

    /// Runs `attempt` until it succeeds, fails for good, or the server has
    /// been out of reach for longer than the retry window; `lost`: the
    /// server was found out of reach just before (by a read ahead).
    fn retrying<T>(
        &mut self,
        lost: Option<anyhow::Error>,
        mut attempt: impl FnMut(&tokio::runtime::Runtime, &mut Reader) -> Result<T, Failure>,
    ) -> Result<T> {
        if let Some(ahead) = self.ahead.take() {
            // Whatever it read is not what is asked for now.
            let _ = self.land(ahead);
        }
        let mut lost = lost.map(Failure::Lost);
        loop {
            let reader = self.reader.as_mut().expect("no read ahead holds the reader");
            let outcome = match lost.take() {
                Some(failure) => Err(failure),
                None => attempt(&self.nats.runtime, reader),
            };
            match outcome {
                Ok(value) => {
                    if self.outage.reached() {
                        tracing::info!("topology {}: reading stream {} again", self.topology, self.stream);
                    }
                    return Ok(value);
                }
                Err(Failure::Fatal(e)) => return Err(e),
                Err(Failure::Lost(e)) => {
                    reader.forget_consumers();
                    let Some(wait) = self.outage.lost() else {
                        return Err(e.context(format!(
                            "the NATS server at {} has been out of reach for {:.1} s",
                            self.nats.server,
                            self.outage.seconds()
                        )));
                    };
                    tracing::warn!(
                        "topology {}: stream {}: {e:#}; retrying in {} ms",
                        self.topology,
                        self.stream,
                        wait.as_millis()
                    );
                    std::thread::sleep(wait);
                }
            }
        }
    }

    /// Waits for the read ahead to finish and takes the reader back; returns
    /// what it read.
    fn land(&mut self, ahead: Ahead) -> Result<Read, Failure> {
        let (reader, read) = match self.nats.runtime.block_on(ahead.task) {
            Ok(done) => done,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        };
        self.reader = Some(reader);
        read
    }

    /// Starts reading the batch after the one of `positions` (whose
    /// metadata is `after`) on the client's runtime.
    fn read_ahead(&mut self, after: Vec<u8>, positions: Vec<meta::Position>) {
        let mut reader = self.reader.take().expect("no read ahead holds the reader");
        let task = self.nats.runtime.spawn(async move {
            let read = reader.emit(&positions).await;
            (reader, read)
        });
        self.ahead = Some(Ahead { after, task });
    }
}

/// The messages a batch took from each partition.
fn per_partition(positions: &[meta::Position]) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for position in positions {
        *counts.entry(position.subject.clone()).or_default() += position.count;
    }
    counts
}

impl Drop for JetStreamSpout {
    fn drop(&mut self) {
        // A timer must be made on the runtime: hence the async blocks.
        let runtime = &self.nats.runtime;
        if let Some(mut ahead) = self.ahead.take() {
            match runtime.block_on(async { tokio::time::timeout(Duration::from_secs(1), &mut ahead.task).await }) {
                Ok(Ok((reader, _))) => self.reader = Some(reader),
                _ => ahead.task.abort(),
            }
        }
        if let Some(reader) = &mut self.reader {
            let _ = runtime.block_on(async { tokio::time::timeout(Duration::from_secs(1), reader.close()).await });
        }
    }
}

impl Spout for JetStreamSpout {
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
        let mut lost = None;
        let ahead = self.ahead.take().and_then(|ahead| {
            let after = ahead.after.clone();
            match self.land(ahead) {
                // A first attempt at the batch after the one read ahead
                // from: what was read stands. Anything else is read afresh.
                Ok(read @ Read::Batch { .. }) if attempt == 0 && previous == Some(after.as_slice()) => Some(read),
                // The server went out of reach under it: the first of the
                // retried attempts.
                Err(Failure::Lost(e)) => {
                    lost = Some(e);
                    None
                }
                _ => None,
            }
        });
        let read = match ahead {
            Some(read) => read,
            None => {
                let before = previous.map(meta::decode).transpose()?.unwrap_or_default();
                self.retrying(lost, |runtime, reader| runtime.block_on(reader.emit(&before))).with_context(|| {
                    format!("topology {}: reading txid {txid} from stream {}", self.topology, self.stream)
                })?
            }
        };
        match read {
            Read::Empty { last } => {
                self.caught_up = Some(CaughtUp::after(last + 1, previous));
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
        let batch =
            self.retrying(None, |runtime, reader| runtime.block_on(reader.replay(&positions))).with_context(|| {
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
        self.backlog.by_partition().clone()
    }

    fn wait_for_input(&mut self, timeout: Duration) {
        if self.caught_up.is_none() {
            return std::thread::sleep(timeout);
        }
        if let Some(ahead) = self.ahead.take() {
            let _ = self.land(ahead);
        }
        let (Some(caught_up), Some(reader)) = (&mut self.caught_up, self.reader.as_mut()) else { return };
        let started = Instant::now();
        match self.nats.runtime.block_on(reader.watch(caught_up.watch, timeout)) {
            Ok(arrived) => {
                caught_up.quiet = !arrived;
                tracing::debug!("topology {}: stream {}: new messages: {arrived}", self.topology, self.stream);
            }
            Err(Failure::Lost(e) | Failure::Fatal(e)) => {
                // The next emission meets the error again and handles it.
                tracing::debug!("topology {}: waiting on stream {}: {e:#}", self.topology, self.stream);
                reader.forget_consumers();
                std::thread::sleep(timeout.saturating_sub(started.elapsed()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def() -> JetStreamDef {
        JetStreamDef {
            promise: JetStreamKind::Transactional,
            stream: "clicks".into(),
            subjects: vec!["clicks.*".into()],
            payload: PayloadDef::String { field: "line".into() },
            subject_field: None,
            sequence_field: None,
            timestamp_field: None,
            max_per_partition: None,
        }
    }

    #[test]
    fn a_hostile_definition_is_refused_naming_what_is_wrong() {
        assert!(check(&def(), "t").is_ok());
        let err = |d: JetStreamDef| format!("{:#}", check(&d, "t").unwrap_err());
        let e = err(JetStreamDef { stream: "a.b".into(), ..def() });
        assert!(e.contains("topology t: the JetStream spout: stream name \"a.b\" may not hold"), "{e}");
        let e = err(JetStreamDef { subjects: vec![], ..def() });
        assert!(e.contains("give 1 to 1024 subjects, not 0"), "{e}");
        let e = err(JetStreamDef { subjects: vec!["x".into(); 2000], ..def() });
        assert!(e.contains("not 2000"), "{e}");
        let e = err(JetStreamDef { subjects: vec!["a.>.b".into()], ..def() });
        assert!(e.contains("of stream clicks: subject \"a.>.b\": > may only be the last token"), "{e}");
        let e = err(JetStreamDef { max_per_partition: Some(0), ..def() });
        assert!(e.contains("max_per_partition 0 is not between 1 and"), "{e}");
        let e = err(JetStreamDef { payload: PayloadDef::Json { fields: vec![] }, ..def() });
        assert!(e.contains("a JSON payload needs at least one field"), "{e}");
    }
}

//! The leader's coordinator of one cluster topology, on a thread of its
//! own, as Trident's master batch coordinator: it picks each txid's span of
//! the stream and records it in etcd before the batch starts (a replay
//! reads the same span), starts the batch under the assignment's epoch,
//! waits for every slot owner's commit, and moves the commit record on.
//! One batch is in flight at a time, so commits go strictly in txid order;
//! the next batch's span is cut as a batch starts and given with its start,
//! so that its partition owners read and process it while this one commits
//! (what they made of a span is used only for a start with that span).
//! A batch a host fails, or that is not done within the batch timeout, or
//! whose assignment moves on, replays under the same txid, after a
//! back-off.

use super::commit_log::EtcdCommitLog;
use super::membership::ClusterConfig;
use super::plan::{ClusterPlan, Owners};
use super::wire::{Done, Outcome, Start, Subjects};
use super::worker::{decode_span, encode_span};
use anyhow::{Context, Result, bail};
use async_nats::Subscriber;
use etcd_client::LeaderKey;
use futures_util::StreamExt;
use serde::Serialize;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use weir_config::backoff::Backoff;
use weir_config::sync::Locked;
use weir_io::nats::{Nats, NatsConfig};
use weir_io::spout::jetstream::SpanReader;
use weir_state::store::CommitLog;
use weir_state::{BatchRecord, Progress};

/// What the leader's coordinator did, for the topology's status.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LeaderFigures {
    pub last_committed: u64,
    pub batches: u64,
    pub tuples: u64,
    pub replays: u64,
    pub last_failure: Option<String>,
}

/// How long the coordinator waits before asking an idle stream again.
const IDLE: Duration = Duration::from_millis(100);

/// The leader's coordinator of one topology.
pub struct Coordinator {
    cluster: ClusterConfig,
    plan: Arc<ClusterPlan>,
    slots: u32,
    nats: Nats,
    etcd: etcd_client::Client,
    log: EtcdCommitLog,
    reader: SpanReader,
    subjects: Subjects,
    done: Subscriber,
    /// Most messages of the stream in one batch.
    span: u64,
    /// A batch recorded while the one before it was under way, and not
    /// tried yet.
    recorded_ahead: Option<u64>,
    /// The progress as this coordinator's last commit left it, so that the
    /// next batch does not read it back from etcd; taken by each try, and
    /// read from etcd after a failure (every write is fenced by the
    /// election key, so a leader replaced meanwhile only fails).
    known: Option<Progress>,
    timeout: Duration,
    figures: Arc<Mutex<LeaderFigures>>,
}

impl Coordinator {
    /// A coordinator writing to etcd under election key `leader`.
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        cluster: ClusterConfig,
        plan: Arc<ClusterPlan>,
        slots: u32,
        leader: LeaderKey,
        nats: &NatsConfig,
        span: u64,
        timeout: Duration,
        figures: Arc<Mutex<LeaderFigures>>,
    ) -> Result<Coordinator> {
        let name = plan.name.clone();
        let connection = Nats::connect(nats, &format!("weir {} leads {name}", cluster.host))?;
        let reader = SpanReader::open(plan.stream()?, &plan.plan.topology, nats)?;
        let subjects = Subjects::new(&cluster.name, &name);
        let (etcd, done) = connection.runtime.block_on(async {
            // Every call bounded by the lease's time: a call lost with a restarted
            // etcd fails rather than hangs.
            let etcd = super::membership::connect(&cluster).await?;
            let done = connection.client.subscribe(subjects.done()).await?;
            anyhow::Ok((etcd, done))
        })?;
        let log = EtcdCommitLog::new(etcd.clone(), &cluster.name, leader, connection.runtime.handle().clone());
        Ok(Coordinator {
            cluster,
            plan,
            slots,
            nats: connection,
            etcd,
            log,
            reader,
            subjects,
            done,
            span: span.max(1),
            recorded_ahead: None,
            known: None,
            timeout,
            figures,
        })
    }

    /// Runs batches until `stop` is set.
    pub fn run(mut self, stop: &AtomicBool) {
        // 100 ms after the first failure, doubling up to 1.6 s.
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_millis(1600));
        while !stop.load(Ordering::SeqCst) {
            match self.batch(stop) {
                Ok(true) => backoff.reset(),
                Ok(false) => std::thread::sleep(IDLE),
                Err(e) => {
                    let error = format!("{e:#}");
                    tracing::warn!("topology {}: {error}; replaying", self.plan.name);
                    {
                        let mut figures = self.figures.locked();
                        figures.replays += 1;
                        figures.last_failure = Some(error);
                    }
                    std::thread::sleep(backoff.next_wait());
                }
            }
        }
    }

    /// One try at the next batch: false when the stream had nothing new.
    fn batch(&mut self, stop: &AtomicBool) -> Result<bool> {
        let name = self.plan.name.clone();
        let progress = match self.known.take() {
            Some(known) => known,
            None => self.log.progress(&name)?,
        };
        let txid = progress.last_committed + 1;
        let recorded = |t: u64| progress.batches.iter().find(|(at, _)| *at == t).map(|(_, r)| r);
        // A batch recorded ahead and not tried yet is tried first as it is.
        let untried = self.recorded_ahead == Some(txid);
        let (record, already_recorded) = match recorded(txid) {
            Some(ahead) if untried => (ahead.clone(), true),
            Some(tried) => (BatchRecord { attempt: tried.attempt + 1, ..tried.clone() }, false),
            None => {
                let (first, last) = self.reader.sequences()?;
                let after = match recorded(txid - 1) {
                    Some(previous) => decode_span(&previous.spout)?.1,
                    // The first batch starts at the stream's first message:
                    // those before it are gone (the stream's limits).
                    None if txid == 1 => first.saturating_sub(1),
                    None => bail!(
                        "etcd holds no span for txid {}, the last committed: where txid {txid} starts is unknown",
                        txid - 1
                    ),
                };
                match self.cut(after, last) {
                    Some(record) => (record, false),
                    None => return Ok(false),
                }
            }
        };
        let (after, until) = decode_span(&record.spout)?;
        let assignment = self
            .nats
            .runtime
            .block_on(super::catalog::assignment(&mut self.etcd, &self.cluster.name, &name))?
            .context("the topology has no assignment yet")?;
        let owners = Owners::of(&assignment.assignment, self.slots);
        if !already_recorded {
            self.log.record_batch(&name, txid, &record)?;
        }
        if untried {
            self.recorded_ahead = None;
        }
        let (next, ahead) = match recorded(txid + 1) {
            Some(next) => (Some(decode_span(&next.spout)?), None),
            None => match self.cut_ahead(&name, txid + 1, until) {
                Some(record) => (Some(decode_span(&record.spout)?), Some(record)),
                None => (None, None),
            },
        };
        let start =
            Start { txid, attempt: record.attempt, epoch: owners.epoch, after, until, time_ms: record.time_ms, next };
        self.announce(&start)?;
        // Recorded once the hosts have the start: they only read and
        // process the next span ahead, which a span cut otherwise later
        // (this record lost) passes over.
        let ahead = match ahead {
            Some(record) => self.record_ahead(&name, txid + 1, record),
            None => recorded(txid + 1).cloned(),
        };
        let tuples = self.wait(&start, &owners, stop)?;
        self.log.commit(&name, txid)?;
        let mut batches = vec![(txid, record)];
        batches.extend(ahead.map(|next| (txid + 1, next)));
        self.known = Some(Progress { last_committed: txid, batches });
        let mut figures = self.figures.locked();
        figures.last_committed = txid;
        figures.batches += 1;
        figures.tuples += tuples;
        Ok(true)
    }

    /// The first try at a batch of the messages after sequence `after`, up
    /// to the stream's last, `last`: `None` when there are none.
    fn cut(&self, after: u64, last: u64) -> Option<BatchRecord> {
        if last <= after {
            return None;
        }
        let until = last.min(after.saturating_add(self.span));
        let time_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        Some(BatchRecord { attempt: 0, time_ms, spout: encode_span(after, until) })
    }

    /// Cuts batch `txid`, after sequence `after`, while the batch before
    /// it is under way, so that its partition owners read and process it
    /// while that one commits: `None` when the stream holds nothing past
    /// `after` yet or it could not be asked (it is cut when it comes, then).
    fn cut_ahead(&mut self, name: &str, txid: u64, after: u64) -> Option<BatchRecord> {
        match self.reader.sequences() {
            Ok((_, last)) => self.cut(after, last),
            Err(e) => {
                tracing::debug!("topology {name}: txid {txid} was not cut ahead: {e:#}");
                None
            }
        }
    }

    /// Records batch `txid`, cut ahead; one not recorded is cut again when
    /// it comes; returns it when recorded.
    fn record_ahead(&mut self, name: &str, txid: u64, record: BatchRecord) -> Option<BatchRecord> {
        match self.log.record_batch(name, txid, &record) {
            Ok(()) => {
                self.recorded_ahead = Some(txid);
                Some(record)
            }
            Err(e) => {
                tracing::debug!("topology {name}: txid {txid} was not recorded ahead: {e:#}");
                None
            }
        }
    }

    /// Tells every host that `start` starts.
    fn announce(&self, start: &Start) -> Result<()> {
        let client = self.nats.client.clone();
        let subject = self.subjects.start();
        self.nats.runtime.block_on(async {
            client.publish(subject, serde_json::to_vec(start)?.into()).await?;
            client.flush().await?;
            anyhow::Ok(())
        })
    }

    /// Waits for every slot owner's commit of `start` (every partition
    /// owner's processing where the topology has no state); returns the
    /// tuples processed.
    fn wait(&mut self, start: &Start, owners: &Owners, stop: &AtomicBool) -> Result<u64> {
        let receivers = owners.receivers();
        let expected: BTreeSet<&str> = if receivers.is_empty() { owners.senders() } else { receivers };
        let mut done: BTreeSet<String> = BTreeSet::new();
        let mut tuples = 0;
        let deadline = Instant::now() + self.timeout;
        let mut checked = Instant::now();
        while !expected.iter().all(|h| done.contains(*h)) {
            if stop.load(Ordering::SeqCst) {
                bail!("txid {}: stopped", start.txid);
            }
            // A host gone or come moves the assignment on: the try is over.
            // Else the start is said again, for a host that was not
            // listening yet (one whose worker just started).
            if checked.elapsed() >= Duration::from_secs(1) {
                checked = Instant::now();
                self.announce(start)?;
                let (cluster, name) = (self.cluster.name.clone(), self.plan.name.clone());
                let now = self.nats.runtime.block_on(super::catalog::assignment(&mut self.etcd, &cluster, &name))?;
                if let Some(now) = now.filter(|now| now.assignment.epoch != start.epoch) {
                    bail!(
                        "txid {}: the assignment moved on to epoch {} ({})",
                        start.txid,
                        now.assignment.epoch,
                        now.reason
                    );
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let missing: Vec<&&str> = expected.iter().filter(|h| !done.contains(**h)).collect();
                bail!(
                    "txid {} attempt {}: hosts {missing:?} did not commit within {:?}",
                    start.txid,
                    start.attempt,
                    self.timeout
                );
            }
            let wait = left.min(Duration::from_millis(250));
            let next = self.nats.runtime.block_on(async { tokio::time::timeout(wait, self.done.next()).await });
            let Ok(Some(message)) = next else { continue };
            let Ok(report) = serde_json::from_slice::<Done>(&message.payload) else { continue };
            if (report.txid, report.attempt) != start.id() {
                continue;
            }
            match report.outcome {
                Outcome::Processed { tuples: n } => {
                    tuples += n;
                    if expected.contains(report.host.as_str()) && owners.receivers().is_empty() {
                        done.insert(report.host);
                    }
                }
                Outcome::Committed { .. } => {
                    done.insert(report.host);
                }
                Outcome::Failed { error } => bail!("txid {} failed on host {}: {error}", start.txid, report.host),
            }
        }
        Ok(tuples)
    }
}

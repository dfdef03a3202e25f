//! The coordinator: cuts the input into batches with txids, keeps up to
//! `max_pending` of them processing while earlier ones commit, commits
//! strictly in txid order, and replays failed batches. Batches processed by
//! the time the oldest one commits commit with it, as a group ([`group`]);
//! while the input is backed up and few are processed, the coordinator
//! first processes a waiting batch itself, so that groups grow.
//!
//! The process phase runs on a thread of its own, so that batch n+1 is
//! processed while batch n commits; and when the coordinator has mostly
//! waited for it lately, it takes the newest batch not yet started and
//! processes it itself, with its own operator instances. A failed batch is
//! replayed with the same txid and the next attempt, together with every
//! later batch in flight; results of a superseded attempt are dropped when
//! they arrive. How a batch is replayed follows its spout's kind: a
//! transactional spout's metadata is recorded before the batch is processed
//! and the replay re-reads it; an opaque spout's metadata is stored at
//! commit and a replay is emitted afresh from the last committed metadata.

use crate::exec::{BatchError, BatchId, Committer, Handover, Origin, Processor};
use crate::instances::OperatorSource;
use crate::metrics::{GroupSizes, Latencies};
use anyhow::{Context, Result, bail};
use held::{Held, Holding};
use queue::{Closing, WorkQueue};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use weir_config::RunConfig;
use weir_config::fault::{self, Point};
use weir_io::sink::Publisher;
use weir_io::spout::{Emitted, Spout, SpoutKind};
use weir_plan::Plan;
use weir_sdk::codec::{Batch, Buffers};
use weir_state::BatchRecord;
use weir_state::store::Store;

/// Failed attempts a report keeps, the most recent: what went wrong
/// lately, not a record of every failure.
pub const RECENT_FAILURES: usize = 16;

/// Longest error text a failure keeps, in bytes: a guest chooses its
/// messages.
const FAILURE_TEXT: usize = 4096;

/// A failed attempt at a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The batch's txid.
    pub txid: u64,
    /// The attempt that failed.
    pub attempt: u32,
    /// Why it failed (cut at [`FAILURE_TEXT`] bytes).
    pub error: String,
    /// When it failed.
    pub at: std::time::SystemTime,
}

/// What a run did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunReport {
    /// The topology's last committed txid.
    pub last_committed: u64,
    /// Batches committed by this run.
    pub batches: u64,
    /// Spout tuples in those batches.
    pub tuples: u64,
    /// Batch attempts that failed and were replayed.
    pub replays: u64,
    /// Time since the run started.
    pub elapsed: Duration,
    /// Time from the run's start until its first batch was processed.
    pub first_batch_ready: Option<Duration>,
    /// How long each commit took: a group's commit phases and its durable
    /// write.
    pub commit_latency: Latencies,
    /// How many batches the commit groups held.
    pub commit_groups: GroupSizes,
    /// Time spent in each operator, for committed batches: a guest
    /// operator's in its calls, a node of the host's own (a built-in
    /// aggregate, a partition, a window) in its work.
    pub operator_time: BTreeMap<String, Duration>,
    /// Tuples in and out of each operator, for committed batches.
    pub operator_tuples: BTreeMap<String, crate::metrics::TupleCounts>,
    /// How far the committed batches are behind the source, where the spout
    /// knows (see `Spout::lag`).
    pub spout_lag: Option<u64>,
    /// The same per partition, where the spout names its partitions (a
    /// JetStream spout's subjects).
    pub partition_lag: BTreeMap<String, u64>,
    /// Late tuples each window operator found, in committed batches.
    pub late_tuples: BTreeMap<String, u64>,
    /// Each time window operator's watermark (event or processing time, in
    /// milliseconds) after the last committed batch that moved it.
    pub watermarks: BTreeMap<String, i64>,
    /// The last [`RECENT_FAILURES`] failed attempts, oldest first: of the
    /// process or commit phase, and of the spout's emission.
    pub failures: VecDeque<Failure>,
}

impl RunReport {
    fn record_failure(&mut self, txid: u64, attempt: u32, error: &dyn std::fmt::Display) {
        let mut error = error.to_string();
        if error.len() > FAILURE_TEXT {
            let mut end = FAILURE_TEXT;
            while !error.is_char_boundary(end) {
                end -= 1;
            }
            error.truncate(end);
            error.push_str(" [cut]");
        }
        if self.failures.len() == RECENT_FAILURES {
            self.failures.pop_front();
        }
        self.failures.push_back(Failure { txid, attempt, error, at: std::time::SystemTime::now() });
    }

    /// The run's figures as JSON, as `weir run --report-json` writes them;
    /// `loaded_after` is the time it took to load before the run started.
    pub fn figures(&self, topology: &str, loaded_after: Duration) -> serde_json::Value {
        let millis = |d: Option<Duration>| d.map(|d| d.as_secs_f64() * 1000.0);
        serde_json::json!({
            "topology": topology,
            "batches": self.batches,
            "tuples": self.tuples,
            "replays": self.replays,
            "last_committed": self.last_committed,
            "elapsed_s": self.elapsed.as_secs_f64(),
            "start_ms": millis(self.first_batch_ready.map(|ready| loaded_after + ready)),
            "commit_p50_ms": millis(self.commit_latency.quantile(0.5)),
            "commit_p99_ms": millis(self.commit_latency.quantile(0.99)),
            "commit_groups": self.commit_groups.groups,
            "commit_group_mean": self.commit_groups.mean(),
            "commit_group_max": self.commit_groups.max,
            "late_tuples": self.late_tuples,
        })
    }
}

struct Work {
    id: BatchId,
    batch: Batch<'static>,
}

impl Work {
    /// Processes the batch; its result holds its bytes in `held` until it
    /// is dropped.
    fn process(self, processor: &mut Processor, held: &Arc<Held>, by_process_phase: bool) -> Done {
        let result = processor.process(self.id, self.batch);
        fault::at(Point::AfterProcess, self.id.txid);
        let (times, memory, spare) = (processor.take_times(), processor.memory_bytes(), processor.take_input_buffers());
        let holding = result.as_ref().ok().map(|handover| held.hold(handover.held_bytes(), by_process_phase));
        Done { id: self.id, result, times, memory, spare, holding }
    }
}

/// The coordinator's own operator instances, made when it first takes a
/// batch from the process phase's queue.
struct Helper {
    plan: Arc<Plan>,
    source: OperatorSource,
    processor: Option<Processor>,
    time: CoordinatorTime,
    /// The linear memory the instances that processed the last batch held
    /// after it (before the first, once they are made; `None` before
    /// then): about what the coordinator's own hold or would add.
    memory: Option<usize>,
}

/// Most linear memory the process phase's instances may hold for the
/// coordinator to make its own and help: a compiled guest's hold a few MiB
/// (a Rust word count's 1.7), an interpreter's (Python, JavaScript) 13 MiB
/// and more, and a second set of those costs more memory than its speed is
/// worth.
const HELPER_MEMORY: usize = 8 << 20;

impl Helper {
    /// Whether the coordinator may process a batch itself while it awaits
    /// one due by `deadline`. Only if any one call of the batch would end
    /// (or be abandoned) before then: a guest spinning on the coordinator's
    /// thread must not keep it from failing the awaited batch at its
    /// deadline. Calls unlimited in time (`--max-call-ms 0`) bound no
    /// thread, the process phase's neither, so they do not stop it.
    fn may_help(&self, deadline: Instant) -> bool {
        self.time.mostly_spare() && self.may_process(deadline)
    }

    /// Processes `work` with the coordinator's own instances, made the
    /// first time.
    fn process(&mut self, work: Work, held: &Arc<Held>) -> Done {
        let processor =
            self.processor.get_or_insert_with(|| Processor::new(Arc::clone(&self.plan), self.source.clone()));
        work.process(processor, held, false)
    }

    /// Whether a batch processed on the coordinator's thread costs little
    /// memory and ends (or is abandoned) by `deadline`.
    fn may_process(&self, deadline: Instant) -> bool {
        self.memory.is_some_and(|bytes| bytes <= HELPER_MEMORY)
            && self.plan.sandboxes.longest_call().is_none_or(|call| Instant::now() + call <= deadline)
    }
}

/// How the coordinator's time went lately: on its own work (emitting,
/// committing) or spare (waiting for the process phase, or helping it).
#[derive(Default)]
struct CoordinatorTime {
    busy: f64,
    spare: f64,
    last_wait_end: Option<Instant>,
}

impl CoordinatorTime {
    /// Weight of the latest interval in the moving averages.
    const LATEST: f64 = 0.2;

    /// Counts a wait that began at `started` and ends now, and the work
    /// since the wait before.
    fn waited(&mut self, started: Instant) {
        let now = Instant::now();
        let busy = self.last_wait_end.map_or(Duration::ZERO, |end| started.saturating_duration_since(end));
        self.record(busy, now.duration_since(started));
        self.last_wait_end = Some(now);
    }

    fn record(&mut self, busy: Duration, spare: Duration) {
        self.busy += Self::LATEST * (busy.as_secs_f64() - self.busy);
        self.spare += Self::LATEST * (spare.as_secs_f64() - self.spare);
    }

    /// Whether more than half of the coordinator's time has been spare:
    /// then processing a batch costs the commits nothing.
    fn mostly_spare(&self) -> bool {
        self.spare >= self.busy
    }
}

struct Done {
    id: BatchId,
    result: Result<Handover, BatchError>,
    /// Time the batch spent in each operator.
    times: BTreeMap<String, Duration>,
    /// The linear memory of the instances that processed it, after.
    memory: usize,
    /// Buffers the process phase is done with, for the spout.
    spare: Buffers,
    /// What its result holds, while it is kept.
    holding: Option<Holding>,
}

/// A batch processed, ready for its commit phase.
struct Ready {
    id: BatchId,
    handover: Handover,
    times: BTreeMap<String, Duration>,
    holding: Option<Holding>,
}

struct InFlight {
    id: BatchId,
    meta: Vec<u8>,
    /// When it was first emitted (see [`BatchRecord::time_ms`]).
    time_ms: u64,
    tuples: u64,
    bytes: usize,
    /// How long its spout took to emit it (this attempt).
    emitting: Duration,
    /// When it was handed to the process phase (this attempt); its batch
    /// deadline is `batch_timeout` later.
    dispatched: Instant,
}

/// Runs `plan` over what `spout` emits until it has nothing left (or, when
/// following, until `stop` is set) and every batch in flight is committed.
/// `sinks` publishes the plan's sinks' outboxes: first what an earlier run
/// left, then each commit's output after it, acknowledgements awaited in
/// flight while later batches commit. `on_report` sees the report after
/// each commit, each failed attempt and a halt.
#[allow(clippy::too_many_arguments)]
pub fn run(
    store: &dyn Store,
    plan: Arc<Plan>,
    source: OperatorSource,
    spout: &mut dyn Spout,
    sinks: Option<&mut Publisher>,
    config: &RunConfig,
    stop: &AtomicBool,
    on_report: &mut dyn FnMut(&RunReport),
) -> Result<RunReport> {
    fault::check()?;
    weir_config::clock::check()?;
    let queue = WorkQueue::<Work>::new();
    let held = Held::new(config.max_pending_bytes);
    let (done_tx, done_rx) = mpsc::channel::<Done>();
    let instantiated = OnceLock::new();
    std::thread::scope(|scope| {
        let (processor_plan, processor_source, waiting, held) = (Arc::clone(&plan), source.clone(), &queue, &held);
        let process_phase = std::thread::Builder::new().name("weir-process".into());
        let instantiated = &instantiated;
        process_phase.spawn_scoped(scope, move || {
            let mut processor = Processor::new(processor_plan, processor_source);
            // While the first batch is read: then the coordinator knows
            // whether it may help before that batch is processed.
            processor.instantiate_guests();
            let _ = instantiated.set(processor.memory_bytes());
            loop {
                held.wait_for_room(|| waiting.is_closed());
                let Some(work) = waiting.take_oldest() else { break };
                if done_tx.send(work.process(&mut processor, held, true)).is_err() {
                    break;
                }
            }
        })?;
        let _closing = Closing(&queue);
        let mut coordinator = Coordinator {
            store,
            plan: &plan,
            committer: {
                let mut committer = Committer::new(Arc::clone(&plan), source.clone());
                committer.bound_outboxes(config.max_outbox_bytes);
                committer
            },
            helper: Helper {
                plan: Arc::clone(&plan),
                source,
                processor: None,
                time: CoordinatorTime::default(),
                memory: None,
            },
            queue: &queue,
            held: Arc::clone(held),
            instantiated,
            kind: spout.kind(),
            spout,
            sinks,
            config,
            stop,
            done: done_rx,
            pending: VecDeque::new(),
            arrived: HashMap::new(),
            report: RunReport::default(),
            started: Instant::now(),
            next_txid: 1,
            last_meta: None,
            committed_meta: None,
            exhausted: false,
            emitting: Duration::ZERO,
            spout_id: plan.nodes.iter().find(|n| n.op == weir_plan::Op::Spout).map(|n| n.id.clone()),
        };
        let outcome = coordinator.run(on_report);
        if outcome.is_err() {
            // What was sent in flight and is acknowledged at once leaves the
            // outbox; the rest is published when the topology starts again.
            if let Some(sinks) = coordinator.sinks.as_deref_mut() {
                sinks.halting(store);
            }
            coordinator.report.elapsed = coordinator.started.elapsed();
            on_report(&coordinator.report);
        }
        outcome
    })
}

struct Coordinator<'a> {
    store: &'a dyn Store,
    plan: &'a Plan,
    committer: Committer,
    helper: Helper,
    /// Batches waiting for the process phase.
    queue: &'a WorkQueue<Work>,
    /// What processed batches hold until they commit.
    held: Arc<Held>,
    /// The linear memory of the process phase's instances once made,
    /// before its first batch.
    instantiated: &'a OnceLock<usize>,
    spout: &'a mut dyn Spout,
    sinks: Option<&'a mut Publisher>,
    kind: SpoutKind,
    config: &'a RunConfig,
    stop: &'a AtomicBool,
    done: mpsc::Receiver<Done>,
    pending: VecDeque<InFlight>,
    arrived: HashMap<u64, Done>,
    report: RunReport,
    started: Instant,
    /// Txid of the next batch to emit.
    next_txid: u64,
    /// Metadata of the last batch emitted: the next one follows it.
    last_meta: Option<Vec<u8>>,
    /// Metadata of the last batch committed: an opaque replay follows it.
    committed_meta: Option<Vec<u8>>,
    /// The spout had nothing more the last time it was asked.
    exhausted: bool,
    /// How long the spout took over the batch it emitted last: the next
    /// dispatched batch's.
    emitting: Duration,
    /// The spout's node, timed as the operators are.
    spout_id: Option<String>,
}

impl Coordinator<'_> {
    /// The name its progress is kept under (`Plan::stored_as`).
    fn topology(&self) -> &str {
        self.plan.stored_as.as_str()
    }

    fn run(&mut self, on_report: &mut dyn FnMut(&RunReport)) -> Result<RunReport> {
        let progress = self.store.progress(self.topology())?;
        let last = progress.last_committed;
        self.report.last_committed = last;
        self.next_txid = last + 1;
        self.committed_meta = progress.batches.iter().find(|(txid, _)| *txid == last).map(|(_, r)| r.spout.clone());
        if last > 0 && self.committed_meta.is_none() {
            bail!("topology {}: txid {last} is committed but its spout metadata is missing", self.topology());
        }
        self.last_meta = self.committed_meta.clone();
        // What a crash left in the outboxes goes out first, under its ids.
        self.publish()?;
        if self.kind == SpoutKind::Transactional {
            for (txid, record) in progress.batches.iter().filter(|(txid, _)| *txid > last) {
                // Processed or in flight when the last run stopped: replay
                // exactly what was recorded, as the next attempt.
                tracing::info!("topology {}: replaying uncommitted txid {txid}", self.topology());
                let id = BatchId { txid: *txid, attempt: record.attempt }.next_attempt();
                let asked = Instant::now();
                let batch = self.spout.replay(id.txid, id.attempt, &record.spout)?;
                self.emitting = asked.elapsed();
                self.dispatch(id, Emitted { meta: record.spout.clone(), batch }, Some(record.time_ms))?;
            }
        }
        loop {
            let stopping = self.stop.load(Ordering::Relaxed);
            if self.config.follow.is_some() && self.spout.asks_cheaply() {
                // Input that came while batches were in flight goes out
                // after this commit, not after the last of them.
                self.exhausted = false;
            }
            while !stopping && !self.exhausted && self.room_for_another() {
                let txid = self.next_txid;
                match self.emit(txid)? {
                    Some((attempt, emitted)) => self.dispatch(BatchId { txid, attempt }, emitted, None)?,
                    None => self.exhausted = true,
                }
            }
            let Some(front) = self.pending.front() else {
                match self.config.follow {
                    Some(interval) if !stopping => {
                        // Caught up: nothing is left waiting on a later
                        // commit's acknowledgements.
                        if let Some(sinks) = self.sinks.as_deref_mut() {
                            sinks.drain(self.store)?;
                        }
                        // Ask the spout again after a while.
                        self.spout.wait_for_input(interval);
                        self.exhausted = false;
                        continue;
                    }
                    _ => break,
                }
            };
            let (id, deadline) = (front.id, front.dispatched + self.config.batch_timeout);
            let failed = match self.wait_for(id, deadline)? {
                Some(done) if done.result.is_ok() && !stopping && self.grow_group(id, deadline) => {
                    // It waits among the arrived while its group grows.
                    self.arrived.insert(id.txid, done);
                    continue;
                }
                Some(Done { id, result: Ok(handover), times, holding, .. }) => {
                    self.commit_group(Ready { id, handover, times, holding }, on_report)?
                }
                Some(Done { result: Err(e), .. }) => Some((id, e)),
                None => Some((
                    id,
                    BatchError::retry(
                        "(batch deadline)",
                        format!("the batch was not processed within {} ms", self.config.batch_timeout.as_millis()),
                    )
                    .with_origin(Origin::Deadline),
                )),
            };
            if let Some((id, error)) = failed {
                self.fail(id, error)?;
                on_report(&self.report);
            }
        }
        if let Some(sinks) = self.sinks.as_deref_mut() {
            sinks.settle(self.store)?;
        }
        self.report.elapsed = self.started.elapsed();
        Ok(self.report.clone())
    }

    /// Emits batch `txid`, retrying a failed emission (a guest spout's retry
    /// error or trap) with the next attempt after a back-off, up to the retry
    /// budget. Returns the attempt that emitted it.
    fn emit(&mut self, txid: u64) -> Result<Option<(u32, Emitted)>> {
        let mut attempt = 0;
        loop {
            let asked = Instant::now();
            match self.spout.emit(txid, attempt, self.last_meta.as_deref()) {
                Ok(emitted) => {
                    self.emitting = asked.elapsed();
                    return Ok(emitted.map(|e| (attempt, e)));
                }
                // Its input changed under committed batches, or a message
                // can never be read: no retry helps.
                Err(e) if weir_io::spout::retry_cannot_help(&e) => {
                    self.report.record_failure(txid, attempt, &format_args!("{e:#}"));
                    return Err(e.context(format!("topology {} halted at txid {txid}", self.topology())));
                }
                Err(e) if self.stop.load(Ordering::Relaxed) => {
                    self.report.record_failure(txid, attempt, &format_args!("{e:#}"));
                    // Nothing of the batch was recorded: the next start
                    // emits it afresh.
                    tracing::warn!("topology {}: emitting txid {txid} failed while stopping: {e:#}", self.topology());
                    return Ok(None);
                }
                Err(e) if attempt + 1 < self.config.max_attempts => {
                    self.report.record_failure(txid, attempt, &format_args!("{e:#}"));
                    let backoff = self.config.backoff(attempt);
                    tracing::warn!(
                        "topology {}: emitting txid {txid} attempt {attempt} failed: {e:#}; retrying in {} ms",
                        self.topology(),
                        backoff.as_millis()
                    );
                    std::thread::sleep(backoff);
                    attempt += 1;
                }
                Err(e) => {
                    self.report.record_failure(txid, attempt, &format_args!("{e:#}"));
                    return Err(e.context(format!(
                        "topology {} halted: emitting txid {txid} failed {} times",
                        self.topology(),
                        self.config.max_attempts
                    )));
                }
            }
        }
    }

    /// Whether another batch may be emitted: fewer than max pending in
    /// flight, and fewer bytes than max pending bytes unless none is.
    fn room_for_another(&self) -> bool {
        let bytes = self.pending.iter().map(|p| p.bytes).sum::<usize>() + self.held.total();
        self.pending.len() < self.config.max_pending
            && (self.pending.is_empty() || bytes < self.config.max_pending_bytes)
    }

    /// Hands a batch to the process phase, with the time it was first
    /// emitted (`None`: now); a transactional spout's batch is recorded
    /// first, so that a replay emits exactly the same tuples at the same time.
    fn dispatch(&mut self, id: BatchId, emitted: Emitted, time_ms: Option<u64>) -> Result<()> {
        let time_ms = time_ms.unwrap_or_else(weir_config::clock::now_ms);
        if self.kind == SpoutKind::Transactional {
            let record = BatchRecord { attempt: id.attempt, time_ms, spout: emitted.meta.clone() };
            self.store.record_batch(self.topology(), id.txid, &record)?;
        }
        let (tuples, bytes) = (emitted.batch.len() as u64, emitted.batch.bytes().len());
        self.queue.push(Work { id, batch: emitted.batch });
        let dispatched = Instant::now();
        let emitting = std::mem::take(&mut self.emitting);
        self.pending.push_back(InFlight {
            id,
            meta: emitted.meta.clone(),
            time_ms,
            tuples,
            bytes,
            emitting,
            dispatched,
        });
        self.last_meta = Some(emitted.meta);
        self.next_txid = id.txid + 1;
        Ok(())
    }

    /// The result of batch `id` (results of its other attempts are stale),
    /// or `None` if it did not come by `deadline`.
    fn wait_for(&mut self, id: BatchId, deadline: Instant) -> Result<Option<Done>> {
        let started = Instant::now();
        let done = self.wait_or_help(id, deadline);
        self.helper.time.waited(started);
        done
    }

    fn wait_or_help(&mut self, id: BatchId, deadline: Instant) -> Result<Option<Done>> {
        loop {
            if let Some(done) = self.arrived.remove(&id.txid)
                && done.id == id
            {
                return Ok(Some(done));
            }
            if self.helper.memory.is_none() {
                self.helper.memory = self.instantiated.get().copied();
            }
            let may_help = self.helper.may_help(deadline) && self.held.has_room();
            if let Some(work) = may_help.then(|| self.take_waiting(id)).flatten() {
                let done = self.helper.process(work, &self.held);
                self.arrive(done);
                continue;
            }
            let wait = deadline.saturating_duration_since(Instant::now());
            match self.done.recv_timeout(wait) {
                Ok(done) => self.arrive(done),
                Err(mpsc::RecvTimeoutError::Timeout) => return Ok(None),
                Err(mpsc::RecvTimeoutError::Disconnected) => bail!("the process phase stopped"),
            }
        }
    }

    /// Processes a waiting batch on the coordinator's thread rather than
    /// commit now, while the input is backed up (the spout has more than
    /// max pending lets out) and the batches processed from the front
    /// (`front` first) would make a small group: a group's keys are
    /// written once for all its batches, so small batches committed as
    /// soon as a few are ready write each hot key many times over. Never
    /// once the front batch was dispatched `group_time` ago. Returns
    /// whether it processed one; `front` is processed, and not among the
    /// arrived.
    fn grow_group(&mut self, front: BatchId, deadline: Instant) -> bool {
        // Half of max pending, so that the process phase has batches to go
        // on with while a group commits; and not at all below 8 (large
        // batches), where a group of two saves little and a batch
        // processed here holds the commit back a long while.
        let target = self.group_max().min(self.config.max_pending / 2);
        let waited = self.pending.front().map_or(Duration::ZERO, |p| p.dispatched.elapsed());
        if self.exhausted || target < 4 || waited >= self.config.group_time {
            return false;
        }
        self.arrive_all();
        let ready = 1 + self.pending.iter().skip(1).take_while(|p| self.processed(p.id)).count();
        if ready >= target || !self.helper.may_process(deadline) || !self.held.has_room() {
            return false;
        }
        let Some(work) = self.take_waiting(front) else { return false };
        let done = self.helper.process(work, &self.held);
        self.arrive(done);
        true
    }

    /// Batches one commit group may hold: a Kafka sink writes each batch's
    /// output before the next commits, one batch a group; JetStream sinks'
    /// acknowledgements are awaited in flight, and their batches group as
    /// others do.
    fn group_max(&self) -> usize {
        match self.sinks.as_deref() {
            Some(sinks) if !sinks.commits_in_groups() => 1,
            _ => self.config.group_max,
        }
    }

    /// The newest batch the process phase has not started, unless it is
    /// `awaited`, whose batch deadline the coordinator keeps: rather than
    /// wait idle, the coordinator processes it itself. When batches are
    /// large, commits take a small part of a batch's time, and this uses
    /// the core they leave; when commits are the bound, the coordinator is
    /// rarely idle enough to take one. While the spout has more, an eighth
    /// of max pending (one at least) is left for the process phase, which
    /// has nothing else to do while the coordinator processes or commits
    /// and cannot emit: at batch 100,000 taking the last left the process
    /// thread idle for a fifth of the run; at batch 1,000, with counts
    /// merged faster, taking all but one left it idle for a third.
    fn take_waiting(&self, awaited: BatchId) -> Option<Work> {
        let leave = if self.exhausted { 0 } else { (self.config.max_pending / 8).max(1) };
        self.queue.take_newest_if(leave, |work| work.id != awaited)
    }

    /// Batch `id`, if it is processed already and did not fail: no waiting.
    fn ready(&mut self, id: BatchId) -> Option<Ready> {
        self.arrive_all();
        if !self.processed(id) {
            return None;
        }
        let Done { id, result, times, holding, .. } = self.arrived.remove(&id.txid)?;
        Some(Ready { id, handover: result.ok()?, times, holding })
    }

    /// Keeps every result that came so far, without waiting.
    fn arrive_all(&mut self) {
        while let Ok(done) = self.done.try_recv() {
            self.arrive(done);
        }
    }

    /// Whether batch `id` arrived processed, and did not fail.
    fn processed(&self, id: BatchId) -> bool {
        self.arrived.get(&id.txid).is_some_and(|done| done.id == id && done.result.is_ok())
    }

    /// Keeps a result that came, unless it is of an attempt superseded.
    fn arrive(&mut self, mut done: Done) {
        self.spout.recycle(std::mem::take(&mut done.spare));
        self.helper.memory = Some(done.memory);
        self.report.first_batch_ready.get_or_insert_with(|| self.started.elapsed());
        if self.pending.iter().any(|p| p.id == done.id) {
            self.arrived.insert(done.id.txid, done);
        }
    }

    /// Publishes what the last commit added to the sinks' outboxes, if the
    /// plan has sinks, acknowledgements awaited in flight.
    fn publish_committed(&mut self) -> Result<()> {
        match self.sinks.as_deref_mut() {
            Some(sinks) => sinks.publish_committed(self.store),
            None => Ok(()),
        }
    }

    /// Publishes the sinks' outboxes, if the plan has sinks, and waits for
    /// every acknowledgement.
    fn publish(&mut self) -> Result<()> {
        match self.sinks.as_deref_mut() {
            Some(sinks) => sinks.publish(self.store),
            None => Ok(()),
        }
    }

    /// Replays `txid` and every later batch in flight as their next attempt,
    /// after a back-off, or halts when the error is fatal or the retry
    /// budget is spent.
    fn fail(&mut self, id: BatchId, error: BatchError) -> Result<()> {
        let BatchId { txid, attempt } = id;
        let topology = self.topology().to_owned();
        self.report.record_failure(txid, attempt, &error);
        // The error stays the source of the halt, for callers to match on.
        if !error.retryable {
            return Err(anyhow::Error::new(error)
                .context(format!("topology {topology} halted at txid {txid}, attempt {attempt}")));
        }
        if attempt + 1 >= self.config.max_attempts {
            let halted = format!(
                "topology {topology} halted: txid {txid} failed {} times; last error at attempt {attempt}",
                self.config.max_attempts
            );
            return Err(anyhow::Error::new(error).context(halted));
        }
        if self.stop.load(Ordering::Relaxed) {
            // Stopping at a batch boundary: the failed batch and those after
            // it are not replayed now but when the topology starts again,
            // from what is recorded (transactional) or committed (opaque).
            tracing::warn!("topology {topology}: txid {txid} attempt {attempt} failed while stopping: {error}");
            self.pending.clear();
            self.arrived.clear();
            return Ok(());
        }
        let last = self.pending.back().map_or(txid, |p| p.id.txid);
        let backoff = self.config.backoff(attempt);
        tracing::warn!(
            "topology {topology}: txid {txid} attempt {attempt} failed: {error}; replaying txids {txid}..={last} \
             as the next attempt in {} ms",
            backoff.as_millis()
        );
        std::thread::sleep(backoff);
        self.report.replays += 1;
        self.arrived.clear();
        let in_flight: Vec<InFlight> = self.pending.drain(..).collect();
        if self.kind == SpoutKind::Transactional {
            for batch in in_flight {
                let id = batch.id.next_attempt();
                let asked = Instant::now();
                let replayed = self.spout.replay(id.txid, id.attempt, &batch.meta);
                self.emitting = asked.elapsed();
                let batch_data = replayed.with_context(|| format!("replaying txid {}", id.txid))?;
                self.dispatch(id, Emitted { meta: batch.meta, batch: batch_data }, Some(batch.time_ms))?;
            }
        } else {
            // An opaque replay starts again from what was committed; its
            // batches may differ from the failed ones.
            self.last_meta = self.committed_meta.clone();
            self.next_txid = txid;
            self.exhausted = false;
            for batch in in_flight {
                let id = batch.id.next_attempt();
                let asked = Instant::now();
                let emitted = self.spout.emit(id.txid, id.attempt, self.last_meta.as_deref())?;
                self.emitting = asked.elapsed();
                match emitted {
                    Some(emitted) => self.dispatch(id, emitted, None)?,
                    None => break,
                }
            }
        }
        Ok(())
    }
}

mod group;
mod held;
mod queue;
#[cfg(test)]
mod tests;

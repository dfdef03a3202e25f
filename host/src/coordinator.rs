//! The coordinator: cuts the input into batches with txids, keeps up to
//! `max_pending` of them processing while earlier ones commit, commits
//! strictly in txid order, and replays failed batches.
//!
//! The process phase runs on a thread of its own, so that batch n+1 is
//! processed while batch n commits. A failed batch is replayed with the same
//! txid and the next attempt, together with every later batch in flight;
//! results of a superseded attempt are dropped when they arrive. How a batch
//! is replayed follows its spout's kind: a transactional spout's metadata is
//! recorded before the batch is processed and the replay re-reads it; an
//! opaque spout's metadata is stored at commit and a replay is emitted
//! afresh from the last committed metadata.

use crate::config::RunConfig;
use crate::exec::{BatchError, Committer, Handover, Origin, Processor};
use crate::fault::{self, Point};
use crate::instances::OperatorSource;
use crate::metrics::Latencies;
use crate::plan::Plan;
use crate::spout::{Emitted, Spout, SpoutKind};
use crate::state::{BatchRecord, Db};
use anyhow::{Context, Result, anyhow, bail};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use weir_sdk::codec::Batch;

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
    /// How long each batch's commit took.
    pub commit_latency: Latencies,
    /// Time spent in each guest operator, for committed batches.
    pub operator_time: BTreeMap<String, Duration>,
    /// How far the committed batches are behind the source, where the spout
    /// knows (see `Spout::lag`).
    pub spout_lag: Option<u64>,
}

impl RunReport {
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
        })
    }
}

struct Work {
    txid: u64,
    attempt: u32,
    batch: Batch<'static>,
}

struct Done {
    txid: u64,
    attempt: u32,
    result: Result<Handover, BatchError>,
    /// Time the batch spent in each operator.
    times: BTreeMap<String, Duration>,
}

struct InFlight {
    txid: u64,
    attempt: u32,
    meta: Vec<u8>,
    tuples: u64,
    deadline: Instant,
}

/// Runs `plan` over what `spout` emits until it has nothing left (or, when
/// following, until `stop` is set) and every batch in flight is committed.
pub fn run(
    db: &Db,
    plan: Arc<Plan>,
    source: OperatorSource,
    spout: &mut dyn Spout,
    config: &RunConfig,
    stop: &AtomicBool,
    on_commit: &mut dyn FnMut(&RunReport),
) -> Result<RunReport> {
    fault::check()?;
    let (work_tx, work_rx) = mpsc::channel::<Work>();
    let (done_tx, done_rx) = mpsc::channel::<Done>();
    std::thread::scope(|scope| {
        let processor_plan = Arc::clone(&plan);
        let processor_source = source.clone();
        let process_phase = std::thread::Builder::new().name("weir-process".into());
        process_phase.spawn_scoped(scope, move || {
            let mut processor = Processor::new(processor_plan, processor_source);
            for work in work_rx {
                let result = processor.process(work.txid, work.attempt, work.batch);
                fault::at(Point::AfterProcess, work.txid);
                let times = processor.take_times();
                if done_tx.send(Done { txid: work.txid, attempt: work.attempt, result, times }).is_err() {
                    break;
                }
            }
        })?;
        let mut coordinator = Coordinator {
            db,
            plan: &plan,
            committer: Committer::new(Arc::clone(&plan), source),
            kind: spout.kind(),
            spout,
            config,
            stop,
            work: work_tx,
            done: done_rx,
            pending: VecDeque::new(),
            arrived: HashMap::new(),
            report: RunReport::default(),
            started: Instant::now(),
            next_txid: 1,
            last_meta: None,
            committed_meta: None,
            exhausted: false,
        };
        coordinator.run(on_commit)
    })
}

struct Coordinator<'a> {
    db: &'a Db,
    plan: &'a Plan,
    committer: Committer,
    spout: &'a mut dyn Spout,
    kind: SpoutKind,
    config: &'a RunConfig,
    stop: &'a AtomicBool,
    work: mpsc::Sender<Work>,
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
}

impl Coordinator<'_> {
    /// The name its progress is kept under (`Plan::stored_as`).
    fn topology(&self) -> &str {
        self.plan.stored_as.as_str()
    }

    fn run(&mut self, on_commit: &mut dyn FnMut(&RunReport)) -> Result<RunReport> {
        let progress = self.db.progress(self.topology())?;
        let last = progress.last_committed;
        self.report.last_committed = last;
        self.next_txid = last + 1;
        self.committed_meta = progress.batches.iter().find(|(txid, _)| *txid == last).map(|(_, r)| r.spout.clone());
        if last > 0 && self.committed_meta.is_none() {
            bail!("topology {}: txid {last} is committed but its spout metadata is missing", self.topology());
        }
        self.last_meta = self.committed_meta.clone();
        if self.kind == SpoutKind::Transactional {
            for (txid, record) in progress.batches.iter().filter(|(txid, _)| *txid > last) {
                // Processed or in flight when the last run stopped: replay
                // exactly what was recorded, as the next attempt.
                tracing::info!("topology {}: replaying uncommitted txid {txid}", self.topology());
                let batch = self.spout.replay(*txid, record.attempt + 1, &record.spout)?;
                self.dispatch(*txid, record.attempt + 1, Emitted { meta: record.spout.clone(), batch })?;
            }
        }
        loop {
            let stopping = self.stop.load(Ordering::Relaxed);
            while !stopping && !self.exhausted && self.pending.len() < self.config.max_pending {
                let txid = self.next_txid;
                match self.emit(txid)? {
                    Some((attempt, emitted)) => self.dispatch(txid, attempt, emitted)?,
                    None => self.exhausted = true,
                }
            }
            let Some(front) = self.pending.front() else {
                match self.config.follow {
                    Some(interval) if !stopping => {
                        // Caught up: ask the spout again after a while.
                        self.spout.wait_for_input(interval);
                        self.exhausted = false;
                        continue;
                    }
                    _ => break,
                }
            };
            let (txid, attempt, tuples, deadline) = (front.txid, front.attempt, front.tuples, front.deadline);
            let outcome = match self.wait_for(txid, attempt, deadline)? {
                Some(Done { result: Ok(handover), times, .. }) => {
                    let committed = self.commit(txid, attempt, handover);
                    if committed.is_ok() {
                        let commit_times = self.committer.take_times();
                        for (operator, time) in times.into_iter().chain(commit_times) {
                            *self.report.operator_time.entry(operator).or_default() += time;
                        }
                    }
                    committed
                }
                Some(Done { result: Err(e), .. }) => Err(e),
                None => Err(BatchError::retry(
                    "(batch deadline)",
                    format!("the batch was not processed within {} ms", self.config.batch_timeout.as_millis()),
                )
                .with_origin(Origin::Deadline)),
            };
            match outcome {
                Ok(()) => {
                    let done = self.pending.pop_front().expect("the front batch");
                    self.committed_meta = Some(done.meta);
                    self.report.spout_lag = self.spout.lag(self.committed_meta.as_deref());
                    self.report.last_committed = txid;
                    self.report.batches += 1;
                    self.report.tuples += tuples;
                    self.report.elapsed = self.started.elapsed();
                    on_commit(&self.report);
                }
                Err(error) => self.fail(txid, attempt, error)?,
            }
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
            match self.spout.emit(txid, attempt, self.last_meta.as_deref()) {
                Ok(emitted) => return Ok(emitted.map(|e| (attempt, e))),
                // Its input changed under committed batches: no retry helps.
                Err(e) if crate::spout::input_changed(&e) => {
                    return Err(e.context(format!("topology {} halted at txid {txid}", self.topology())));
                }
                Err(e) if self.stop.load(Ordering::Relaxed) => {
                    // Nothing of the batch was recorded: the next start
                    // emits it afresh.
                    tracing::warn!("topology {}: emitting txid {txid} failed while stopping: {e:#}", self.topology());
                    return Ok(None);
                }
                Err(e) if attempt + 1 < self.config.max_attempts => {
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
                    return Err(e.context(format!(
                        "topology {} halted: emitting txid {txid} failed {} times",
                        self.topology(),
                        self.config.max_attempts
                    )));
                }
            }
        }
    }

    /// Hands a batch to the process phase; a transactional spout's batch is
    /// recorded first, so that a replay emits exactly the same tuples.
    fn dispatch(&mut self, txid: u64, attempt: u32, emitted: Emitted) -> Result<()> {
        if self.kind == SpoutKind::Transactional {
            self.db.record_batch(self.topology(), txid, &BatchRecord { attempt, spout: emitted.meta.clone() })?;
        }
        let tuples = emitted.batch.len() as u64;
        self.work
            .send(Work { txid, attempt, batch: emitted.batch })
            .map_err(|_| anyhow!("the process phase stopped"))?;
        let deadline = Instant::now() + self.config.batch_timeout;
        self.pending.push_back(InFlight { txid, attempt, meta: emitted.meta.clone(), tuples, deadline });
        self.last_meta = Some(emitted.meta);
        self.next_txid = txid + 1;
        Ok(())
    }

    /// The result of `txid` at `attempt` (results of other attempts are
    /// stale), or `None` if it did not come by `deadline`.
    fn wait_for(&mut self, txid: u64, attempt: u32, deadline: Instant) -> Result<Option<Done>> {
        loop {
            if let Some(done) = self.arrived.remove(&txid)
                && done.attempt == attempt
            {
                return Ok(Some(done));
            }
            let wait = deadline.saturating_duration_since(Instant::now());
            let done = match self.done.recv_timeout(wait) {
                Ok(done) => done,
                Err(mpsc::RecvTimeoutError::Timeout) => return Ok(None),
                Err(mpsc::RecvTimeoutError::Disconnected) => bail!("the process phase stopped"),
            };
            self.report.first_batch_ready.get_or_insert_with(|| self.started.elapsed());
            let current = self.pending.iter().find(|p| p.txid == done.txid).map(|p| p.attempt);
            if current == Some(done.attempt) {
                self.arrived.insert(done.txid, done);
            }
        }
    }

    fn commit(&mut self, txid: u64, attempt: u32, handover: Handover) -> Result<(), BatchError> {
        let meta = self.pending.front().map(|p| p.meta.clone()).unwrap_or_default();
        let record = BatchRecord { attempt, spout: meta };
        let started = Instant::now();
        fault::at(Point::BeforeCommit, txid);
        let written = self.committer.commit(self.db, txid, &record, handover)?;
        fault::at(Point::AfterCommit, txid);
        self.report.commit_latency.record(started.elapsed());
        tracing::debug!(
            "topology {}: committed txid {txid} (attempt {attempt}): {written} keys written",
            self.plan.topology
        );
        Ok(())
    }

    /// Replays `txid` and every later batch in flight as their next attempt,
    /// after a back-off, or halts when the error is fatal or the retry
    /// budget is spent.
    fn fail(&mut self, txid: u64, attempt: u32, error: BatchError) -> Result<()> {
        let topology = self.topology().to_owned();
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
        let last = self.pending.back().map_or(txid, |p| p.txid);
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
                let replayed = self.spout.replay(batch.txid, batch.attempt + 1, &batch.meta);
                let batch_data = replayed.with_context(|| format!("replaying txid {}", batch.txid))?;
                self.dispatch(batch.txid, batch.attempt + 1, Emitted { meta: batch.meta, batch: batch_data })?;
            }
        } else {
            // An opaque replay starts again from what was committed; its
            // batches may differ from the failed ones.
            self.last_meta = self.committed_meta.clone();
            self.next_txid = txid;
            self.exhausted = false;
            for batch in in_flight {
                match self.spout.emit(batch.txid, batch.attempt + 1, self.last_meta.as_deref())? {
                    Some(emitted) => self.dispatch(batch.txid, batch.attempt + 1, emitted)?,
                    None => break,
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SandboxConfig;
    use crate::exec::Cause;
    use crate::load::LoadedTopology;
    use crate::runtime::{ComponentCache, Limit};
    use crate::spout::FileLines;
    use std::path::Path;
    use weir_sdk::topology::SPOUT_ID;

    /// The hostile guest's topology `name`, each call limited to `call_ms`
    /// of CPU time.
    fn hostile(name: &str, call_ms: u64) -> LoadedTopology {
        let engine = crate::runtime::engine(true).unwrap();
        let cache = ComponentCache::new(Path::new(weir_test_guests::GUEST_TARGET_DIR).join("compiled-cache"));
        let sandbox = SandboxConfig { max_call_ms: call_ms, ..SandboxConfig::default() };
        let component = Path::new(weir_test_guests::HOSTILE);
        crate::load::topologies(&engine, &cache, component, &[name.to_owned()], &sandbox).unwrap().remove(0)
    }

    /// Runs `loaded` over `spout` into a fresh database: the run's outcome,
    /// and the last committed txid.
    fn run_over(loaded: LoadedTopology, spout: &mut dyn Spout, config: RunConfig) -> (Result<RunReport>, u64) {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        let name = loaded.plan.topology.clone();
        let source = OperatorSource::Wasm(Arc::clone(&loaded.components));
        let outcome = run(&db, loaded.plan, source, spout, &config, &AtomicBool::new(false), &mut |_| {});
        (outcome, db.progress(&name).unwrap().last_committed)
    }

    /// Runs topology `name` over `lines`, one line per batch.
    fn run_lines(name: &str, lines: &str, call_ms: u64, config: RunConfig) -> (Result<RunReport>, u64) {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("input.txt");
        std::fs::write(&input, lines).unwrap();
        run_over(hostile(name, call_ms), &mut FileLines::open(&input, 1).unwrap(), config)
    }

    fn halted_by(outcome: Result<RunReport>) -> BatchError {
        let error = outcome.expect_err("the run halts");
        error.downcast_ref::<BatchError>().unwrap_or_else(|| panic!("not a batch error: {error:#}")).clone()
    }

    fn attempts(max_attempts: u32) -> RunConfig {
        RunConfig { max_attempts, max_pending: 1, ..RunConfig::default() }
    }

    #[test]
    fn a_blocked_operator_halts_the_run_with_the_call_deadline() {
        let (outcome, committed) = run_lines("sleep-in-wasi", "calm words\nthe attack begins\n", 100, attempts(2));
        let error = halted_by(outcome);
        assert_eq!(error.origin, Origin::Operator(Cause::Trapped(Some(Limit::Deadline))), "{error}");
        assert_eq!((error.operator.as_str(), error.retryable), ("attacker", true));
        assert_eq!(committed, 1);
    }

    #[test]
    fn a_blocked_spout_halts_the_run_with_the_call_deadline() {
        let loaded = hostile("sleepy-spout", 100);
        let guest =
            Some((Arc::clone(loaded.components.for_operator(SPOUT_ID)), loaded.plan.sandboxes.of(SPOUT_ID).clone()));
        let def = loaded.definition.spout().unwrap().clone();
        let mut spout =
            crate::spout::open(&def, &crate::spout::SpoutEnv::local("sleepy-spout", None, 10, None), guest).unwrap();
        let (outcome, committed) = run_over(loaded, &mut *spout, attempts(2));
        let error = halted_by(outcome);
        assert_eq!(error.origin, Origin::Spout(Cause::Trapped(Some(Limit::Deadline))), "{error}");
        // The spout blocks from txid 4 on.
        assert_eq!(committed, 3);
    }

    #[test]
    fn a_batch_past_the_batch_deadline_halts_the_run_with_it() {
        // The batch deadline passes long before the call's (4 s).
        let config = RunConfig { batch_timeout: Duration::from_millis(100), ..attempts(1) };
        let (outcome, committed) = run_lines("sleep-in-wasi", "the attack begins\n", 2000, config);
        assert_eq!(halted_by(outcome).origin, Origin::Deadline);
        assert_eq!(committed, 0);
    }

    #[test]
    fn what_an_operator_returned_and_how_it_trapped_are_told_apart() {
        let (outcome, _) = run_lines("read-passwd", "the attack begins\n", 1000, attempts(1));
        assert_eq!(halted_by(outcome).origin, Origin::Operator(Cause::Returned));
        let (outcome, _) = run_lines("panic", "the attack begins\n", 1000, attempts(1));
        assert_eq!(halted_by(outcome).origin, Origin::Operator(Cause::Trapped(None)));
        let (outcome, _) = run_lines("infinite-loop", "the attack begins\n", 100, attempts(1));
        assert_eq!(halted_by(outcome).origin, Origin::Operator(Cause::Trapped(Some(Limit::Cpu))));
    }
}

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
use crate::exec::{BatchError, BatchId, Committer, Handover, Origin, Processor};
use crate::instances::OperatorSource;
use crate::metrics::Latencies;
use crate::plan::Plan;
use crate::spout::{Emitted, Spout, SpoutKind};
use crate::state::BatchRecord;
use crate::state::store::Store;
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
    id: BatchId,
    batch: Batch<'static>,
}

struct Done {
    id: BatchId,
    result: Result<Handover, BatchError>,
    /// Time the batch spent in each operator.
    times: BTreeMap<String, Duration>,
}

struct InFlight {
    id: BatchId,
    meta: Vec<u8>,
    tuples: u64,
    deadline: Instant,
}

/// Runs `plan` over what `spout` emits until it has nothing left (or, when
/// following, until `stop` is set) and every batch in flight is committed.
pub fn run(
    store: &dyn Store,
    plan: Arc<Plan>,
    source: OperatorSource,
    spout: &mut dyn Spout,
    config: &RunConfig,
    stop: &AtomicBool,
    on_commit: &mut dyn FnMut(&RunReport),
) -> Result<RunReport> {
    let (work_tx, work_rx) = mpsc::channel::<Work>();
    let (done_tx, done_rx) = mpsc::channel::<Done>();
    std::thread::scope(|scope| {
        let processor_plan = Arc::clone(&plan);
        let processor_source = source.clone();
        let process_phase = std::thread::Builder::new().name("weir-process".into());
        process_phase.spawn_scoped(scope, move || {
            let mut processor = Processor::new(processor_plan, processor_source);
            for work in work_rx {
                let result = processor.process(work.id, work.batch);
                let times = processor.take_times();
                if done_tx.send(Done { id: work.id, result, times }).is_err() {
                    break;
                }
            }
        })?;
        let mut coordinator = Coordinator {
            store,
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
    store: &'a dyn Store,
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
        let progress = self.store.progress(self.topology())?;
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
                let id = BatchId { txid: *txid, attempt: record.attempt }.next_attempt();
                let batch = self.spout.replay(id.txid, id.attempt, &record.spout)?;
                self.dispatch(id, Emitted { meta: record.spout.clone(), batch })?;
            }
        }
        loop {
            let stopping = self.stop.load(Ordering::Relaxed);
            while !stopping && !self.exhausted && self.pending.len() < self.config.max_pending {
                let txid = self.next_txid;
                match self.emit(txid)? {
                    Some((attempt, emitted)) => self.dispatch(BatchId { txid, attempt }, emitted)?,
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
            let (id, tuples, deadline) = (front.id, front.tuples, front.deadline);
            let outcome = match self.wait_for(id, deadline)? {
                Some(Done { result: Ok(handover), times, .. }) => {
                    let committed = self.commit(id, handover);
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
                    self.report.last_committed = id.txid;
                    self.report.batches += 1;
                    self.report.tuples += tuples;
                    self.report.elapsed = self.started.elapsed();
                    on_commit(&self.report);
                }
                Err(error) => self.fail(id, error)?,
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
    fn dispatch(&mut self, id: BatchId, emitted: Emitted) -> Result<()> {
        if self.kind == SpoutKind::Transactional {
            let record = BatchRecord { attempt: id.attempt, spout: emitted.meta.clone() };
            self.store.record_batch(self.topology(), id.txid, &record)?;
        }
        let tuples = emitted.batch.len() as u64;
        self.work.send(Work { id, batch: emitted.batch }).map_err(|_| anyhow!("the process phase stopped"))?;
        let deadline = Instant::now() + self.config.batch_timeout;
        self.pending.push_back(InFlight { id, meta: emitted.meta.clone(), tuples, deadline });
        self.last_meta = Some(emitted.meta);
        self.next_txid = id.txid + 1;
        Ok(())
    }

    /// The result of batch `id` (results of its other attempts are stale),
    /// or `None` if it did not come by `deadline`.
    fn wait_for(&mut self, id: BatchId, deadline: Instant) -> Result<Option<Done>> {
        loop {
            if let Some(done) = self.arrived.remove(&id.txid)
                && done.id == id
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
            if self.pending.iter().any(|p| p.id == done.id) {
                self.arrived.insert(done.id.txid, done);
            }
        }
    }

    fn commit(&mut self, id: BatchId, handover: Handover) -> Result<(), BatchError> {
        let meta = self.pending.front().map(|p| p.meta.clone()).unwrap_or_default();
        let record = BatchRecord { attempt: id.attempt, spout: meta };
        let started = Instant::now();
        let written = self.committer.commit(self.store, id.txid, &record, handover)?;
        self.report.commit_latency.record(started.elapsed());
        tracing::debug!(
            "topology {}: committed txid {} (attempt {}): {written} keys written",
            self.plan.topology,
            id.txid,
            id.attempt
        );
        Ok(())
    }

    /// Replays `txid` and every later batch in flight as their next attempt,
    /// after a back-off, or halts when the error is fatal or the retry
    /// budget is spent.
    fn fail(&mut self, id: BatchId, error: BatchError) -> Result<()> {
        let BatchId { txid, attempt } = id;
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
                let replayed = self.spout.replay(id.txid, id.attempt, &batch.meta);
                let batch_data = replayed.with_context(|| format!("replaying txid {}", id.txid))?;
                self.dispatch(id, Emitted { meta: batch.meta, batch: batch_data })?;
            }
        } else {
            // An opaque replay starts again from what was committed; its
            // batches may differ from the failed ones.
            self.last_meta = self.committed_meta.clone();
            self.next_txid = txid;
            self.exhausted = false;
            for batch in in_flight {
                let id = batch.id.next_attempt();
                match self.spout.emit(id.txid, id.attempt, self.last_meta.as_deref())? {
                    Some(emitted) => self.dispatch(id, emitted)?,
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
    use crate::state::keys;
    use crate::state::memory::MemoryStore;
    use crate::state::rules::Stored;
    use crate::state::store::CommitLog;
    use std::path::Path;
    use std::sync::Mutex;
    use weir_sdk::codec::{BatchWriter, Value, ValueRef};
    use weir_sdk::topology::SPOUT_ID;

    /// Topology `name` of the test guest `component`, each call limited to
    /// `call_ms` of CPU time.
    fn load(component: &str, name: &str, call_ms: u64) -> LoadedTopology {
        let engine = crate::runtime::engine(true).unwrap();
        let cache = ComponentCache::new(Path::new(weir_test_guests::GUEST_TARGET_DIR).join("compiled-cache"));
        let sandbox = SandboxConfig { max_call_ms: call_ms, ..SandboxConfig::default() };
        let component = Path::new(component);
        crate::load::topologies(&engine, &cache, component, &[name.to_owned()], &sandbox).unwrap().remove(0)
    }

    /// The hostile guest's topology `name`.
    fn hostile(name: &str, call_ms: u64) -> LoadedTopology {
        load(weir_test_guests::HOSTILE, name, call_ms)
    }

    /// Runs `loaded` over `spout` into `store`.
    fn run_into(
        store: &MemoryStore,
        loaded: LoadedTopology,
        spout: &mut dyn Spout,
        config: RunConfig,
    ) -> Result<RunReport> {
        let source = OperatorSource::Wasm(Arc::clone(&loaded.components));
        run(store, loaded.plan, source, spout, &config, &AtomicBool::new(false), &mut |_| {})
    }

    /// Runs `loaded` over `spout` into a fresh store: the run's outcome,
    /// and the last committed txid.
    fn run_over(loaded: LoadedTopology, spout: &mut dyn Spout, config: RunConfig) -> (Result<RunReport>, u64) {
        let store = MemoryStore::new();
        let name = loaded.plan.stored_as.clone();
        let outcome = run_into(&store, loaded, spout, config);
        (outcome, store.progress(&name).unwrap().last_committed)
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

    /// Word counts of `lines`, as a word-count topology stores them.
    fn counted(lines: &[&str]) -> Vec<(Vec<u8>, i64)> {
        let mut counts = BTreeMap::new();
        for word in lines.iter().flat_map(|line| line.split_whitespace()) {
            *counts.entry(keys::encode([ValueRef::Str(word)])).or_insert(0) += 1;
        }
        counts.into_iter().collect()
    }

    /// The counts `store` holds for `topology`.
    fn stored_counts(store: &MemoryStore, topology: &str) -> Vec<(Vec<u8>, i64)> {
        let count = |stored: Stored| match stored.value() {
            Value::I64(n) => *n,
            other => panic!("not a count: {other:?}"),
        };
        store.scan(topology, "counts").into_iter().map(|(key, stored)| (key, count(stored))).collect()
    }

    const LINES: [&str; 8] = ["a b", "b c", "c d", "d e", "e f", "f g", "g h", "h a"];

    /// How [`Lines`] replays line `index`: each word marked, so that what
    /// a replay counted is told apart from what its first attempt did.
    fn replayed(index: usize) -> String {
        LINES[index].split_whitespace().map(|word| format!("{word}'")).collect::<Vec<_>>().join(" ")
    }

    /// Each emission asked of a spout: txid, attempt and the index it
    /// follows.
    type Asked = Arc<Mutex<Vec<(u64, u32, Option<u64>)>>>;

    /// A spout of `kind` over [`LINES`], a line a batch, whose metadata is
    /// the next line's index; it notes each emission asked of it.
    struct Lines {
        kind: SpoutKind,
        asked: Asked,
    }

    fn index(meta: &[u8]) -> u64 {
        u64::from_le_bytes(meta.try_into().expect("eight bytes"))
    }

    fn one_line(line: &str) -> Batch<'static> {
        let mut writer = BatchWriter::new(1);
        writer.push_row(0, [ValueRef::Str(line)]).unwrap();
        writer.finish_batch()
    }

    impl Spout for Lines {
        fn kind(&self) -> SpoutKind {
            self.kind
        }

        fn emit(&mut self, txid: u64, attempt: u32, previous: Option<&[u8]>) -> Result<Option<Emitted>> {
            let next = previous.map(index);
            self.asked.lock().unwrap().push((txid, attempt, next));
            let at = next.unwrap_or(0);
            let Some(line) = LINES.get(at as usize) else { return Ok(None) };
            Ok(Some(Emitted { meta: (at + 1).to_le_bytes().to_vec(), batch: one_line(line) }))
        }

        fn replay(&mut self, _txid: u64, _attempt: u32, meta: &[u8]) -> Result<Batch<'static>> {
            Ok(one_line(&replayed(index(meta) as usize - 1)))
        }
    }

    fn lines(kind: SpoutKind) -> (Lines, Asked) {
        let asked = Arc::new(Mutex::new(Vec::new()));
        (Lines { kind, asked: Arc::clone(&asked) }, asked)
    }

    /// Txid 3's first attempt asks for a replay while txids 4 to 6 are in
    /// flight (at most 4 pending).
    fn flaky_run(spout: &mut Lines) -> (MemoryStore, RunReport) {
        let loaded = load(weir_test_guests::TEST_TOPOLOGIES, "flaky-word-count", 1000);
        let store = MemoryStore::new();
        let config = RunConfig { max_pending: 4, ..RunConfig::default() };
        let report = run_into(&store, loaded, spout, config).unwrap();
        assert_eq!((report.batches, report.replays, report.last_committed), (8, 1, 8));
        (store, report)
    }

    #[test]
    fn a_failed_batch_is_replayed_with_every_later_batch_in_flight_and_their_stale_results_dropped() {
        let (mut spout, _) = lines(SpoutKind::Transactional);
        let (store, _) = flaky_run(&mut spout);
        let attempts: Vec<(u64, u32)> =
            store.commits("flaky-word-count").iter().map(|(txid, record)| (*txid, record.attempt)).collect();
        assert_eq!(attempts, [(1, 0), (2, 0), (3, 1), (4, 1), (5, 1), (6, 1), (7, 0), (8, 0)]);
        // What txids 4 to 6 counted at their first attempt arrived after
        // txid 3 failed: only their replays' words are counted.
        let replays: Vec<String> = (2..6).map(replayed).collect();
        let counted_lines: Vec<&str> = LINES[..2]
            .iter()
            .copied()
            .chain(replays.iter().map(String::as_str))
            .chain(LINES[6..].iter().copied())
            .collect();
        assert_eq!(stored_counts(&store, "flaky-word-count"), counted(&counted_lines));
    }

    #[test]
    fn an_opaque_replay_is_emitted_afresh_from_the_last_committed_metadata() {
        let (mut spout, asked) = lines(SpoutKind::Opaque);
        let (store, _) = flaky_run(&mut spout);
        // Txid 3 follows what txid 2 committed, and each later batch in
        // flight the one emitted again before it; nothing is replayed from
        // a record.
        let again: Vec<_> = asked.lock().unwrap().iter().copied().filter(|&(_, attempt, _)| attempt > 0).collect();
        assert_eq!(again, [(3, 1, Some(2)), (4, 1, Some(3)), (5, 1, Some(4)), (6, 1, Some(5))]);
        let metas: Vec<u64> = store.commits("flaky-word-count").iter().map(|(_, r)| index(&r.spout)).collect();
        assert_eq!(metas, [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(stored_counts(&store, "flaky-word-count"), counted(&LINES));
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

//! The coordinator: cuts the input into batches with txids, keeps up to
//! `max_pending` of them processing while earlier ones commit, commits
//! strictly in txid order, and replays failed batches.
//!
//! The process phase runs on a thread of its own, so that batch n+1 is
//! processed while batch n commits. A failed batch is replayed with the same
//! txid and the next attempt, together with every later batch in flight;
//! results of a superseded attempt are dropped when they arrive.

use crate::config::RunConfig;
use crate::metrics::Latencies;
use crate::operators::{OperatorSource, Operators};
use crate::plan::Plan;
use crate::process::{BatchError, Processor, combine_at_commit};
use crate::spout::{FileLines, LineRange};
use crate::state::{BatchRecord, Combine, Db, StateUpdate};
use anyhow::{Context, Result, anyhow, bail};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use weir_sdk::codec::{Batch, Value};

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
}

struct Work {
    txid: u64,
    attempt: u32,
    batch: Batch<'static>,
}

type Partials = Vec<(Vec<u8>, Value)>;

struct Done {
    txid: u64,
    attempt: u32,
    result: Result<Partials, BatchError>,
}

struct InFlight {
    txid: u64,
    attempt: u32,
    range: LineRange,
}

/// Runs `plan` over the input until every line is committed.
pub fn run(
    db: &Db,
    plan: Arc<Plan>,
    source: OperatorSource,
    spout: &mut FileLines,
    config: &RunConfig,
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
                let result = processor.process(work.txid, work.attempt, work.batch);
                if done_tx.send(Done { txid: work.txid, attempt: work.attempt, result }).is_err() {
                    break;
                }
            }
        })?;
        let mut coordinator = Coordinator {
            db,
            plan: &plan,
            committer: Operators::new(source, Arc::clone(&plan)),
            spout,
            config,
            work: work_tx,
            done: done_rx,
            pending: VecDeque::new(),
            arrived: HashMap::new(),
            report: RunReport::default(),
            started: Instant::now(),
        };
        coordinator.run(on_commit)
    })
}

struct Coordinator<'a> {
    db: &'a Db,
    plan: &'a Plan,
    committer: Operators,
    spout: &'a mut FileLines,
    config: &'a RunConfig,
    work: mpsc::Sender<Work>,
    done: mpsc::Receiver<Done>,
    pending: VecDeque<InFlight>,
    arrived: HashMap<u64, Done>,
    report: RunReport,
    started: Instant,
}

impl Coordinator<'_> {
    fn topology(&self) -> &str {
        &self.plan.topology
    }

    fn run(&mut self, on_commit: &mut dyn FnMut(&RunReport)) -> Result<RunReport> {
        let progress = self.db.progress(self.topology())?;
        self.report.last_committed = progress.last_committed;
        let mut next_offset = 0;
        let mut next_txid = progress.last_committed + 1;
        for (txid, record) in &progress.batches {
            let range = LineRange::decode(&record.spout)
                .with_context(|| format!("topology {}: batch record of txid {txid}", self.topology()))?;
            next_offset = range.end;
            if *txid > progress.last_committed {
                // Processed or in flight when the last run stopped: replay
                // exactly the recorded lines, as the next attempt.
                tracing::info!(
                    "topology {}: replaying uncommitted txid {txid} (lines at bytes {}..{})",
                    self.topology(),
                    range.start,
                    range.end
                );
                self.start(*txid, record.attempt + 1, range, None)?;
                next_txid = txid + 1;
            }
        }
        if progress.last_committed > 0 && progress.batches.is_empty() {
            bail!(
                "topology {}: txid {} is committed but its spout metadata is missing",
                self.topology(),
                progress.last_committed
            );
        }
        let mut exhausted = false;
        loop {
            while !exhausted && self.pending.len() < self.config.max_pending {
                match self.spout.next_batch(next_offset, self.config.batch_size)? {
                    Some((range, batch)) => {
                        self.start(next_txid, 0, range, Some(batch))?;
                        next_offset = range.end;
                        next_txid += 1;
                    }
                    None => exhausted = true,
                }
            }
            let Some(front) = self.pending.front() else { break };
            let (txid, attempt, range) = (front.txid, front.attempt, front.range);
            let done = self.wait_for(txid, attempt)?;
            let outcome = match done.result {
                Ok(partials) => self.commit(txid, attempt, range, partials),
                Err(e) => Err(e),
            };
            match outcome {
                Ok(()) => {
                    self.pending.pop_front();
                    self.report.last_committed = txid;
                    self.report.batches += 1;
                    self.report.tuples += range.lines;
                    self.report.elapsed = self.started.elapsed();
                    on_commit(&self.report);
                }
                Err(error) => self.fail(txid, attempt, error)?,
            }
        }
        self.report.elapsed = self.started.elapsed();
        Ok(self.report.clone())
    }

    /// Records the batch, then hands it to the process phase.
    fn start(&mut self, txid: u64, attempt: u32, range: LineRange, batch: Option<Batch<'static>>) -> Result<()> {
        self.db.record_batch(self.topology(), txid, &BatchRecord { attempt, spout: range.encode() })?;
        let batch = match batch {
            Some(batch) => batch,
            None => self.spout.replay(&range).with_context(|| format!("replaying txid {txid}"))?,
        };
        self.work.send(Work { txid, attempt, batch }).map_err(|_| anyhow!("the process phase stopped"))?;
        self.pending.push_back(InFlight { txid, attempt, range });
        Ok(())
    }

    /// The result of `txid` at `attempt`; results of other attempts are stale.
    fn wait_for(&mut self, txid: u64, attempt: u32) -> Result<Done> {
        loop {
            if let Some(done) = self.arrived.remove(&txid)
                && done.attempt == attempt
            {
                return Ok(done);
            }
            let done = self.done.recv().map_err(|_| anyhow!("the process phase stopped"))?;
            self.report.first_batch_ready.get_or_insert_with(|| self.started.elapsed());
            let current = self.pending.iter().find(|p| p.txid == done.txid).map(|p| p.attempt);
            if current == Some(done.attempt) {
                self.arrived.insert(done.txid, done);
            }
        }
    }

    fn commit(&mut self, txid: u64, attempt: u32, range: LineRange, partials: Partials) -> Result<(), BatchError> {
        let sink = &self.plan.sink;
        let record = BatchRecord { attempt, spout: range.encode() };
        let update = StateUpdate { state: sink.state.clone(), partials };
        let committer = &mut self.committer;
        let mut guest_error = None;
        let mut in_guest = |pairs: &[(Value, Value)]| {
            combine_at_commit(sink, committer, txid, attempt, pairs).map_err(|e| {
                guest_error = Some(e.clone());
                anyhow!("{e}")
            })
        };
        let native = |stored: Value, partial: Value| Ok(weir_sdk::operator::add(stored, partial)?);
        let combine = if sink.combiner_in_guest() { Combine::Batched(&mut in_guest) } else { Combine::Native(&native) };
        let started = Instant::now();
        let result = self.db.commit(&self.plan.topology, txid, &record, &update, combine);
        match result {
            Ok(stats) => {
                self.report.commit_latency.record(started.elapsed());
                tracing::debug!(
                    "topology {}: committed txid {txid} (attempt {attempt}): {} keys written, {} skipped",
                    self.plan.topology,
                    stats.written,
                    stats.skipped
                );
                Ok(())
            }
            Err(e) => {
                Err(guest_error.unwrap_or_else(|| BatchError::retry(&sink.state.name, format!("commit failed: {e:#}"))))
            }
        }
    }

    /// Replays `txid` and every later batch in flight as their next attempt,
    /// or halts when the error is fatal or the retry budget is spent.
    fn fail(&mut self, txid: u64, attempt: u32, error: BatchError) -> Result<()> {
        let topology = self.topology().to_owned();
        if !error.retryable {
            bail!("topology {topology} halted at txid {txid}, attempt {attempt}: {error}");
        }
        if attempt + 1 >= self.config.max_attempts {
            bail!(
                "topology {topology} halted: txid {txid} failed {} times; last error at attempt {attempt}: {error}",
                self.config.max_attempts
            );
        }
        let last = self.pending.back().map_or(txid, |p| p.txid);
        tracing::warn!(
            "topology {topology}: txid {txid} attempt {attempt} failed: {error}; replaying txids {txid}..={last} as the next attempt"
        );
        self.report.replays += 1;
        self.arrived.clear();
        let in_flight: Vec<InFlight> = self.pending.drain(..).collect();
        for batch in in_flight {
            self.start(batch.txid, batch.attempt + 1, batch.range, None)?;
        }
        Ok(())
    }
}

//! A host's process phase of one partitioned topology, on a thread of its
//! own: it reads a span of the host's partitions and runs the topology's
//! operators over it, making each state's partials. The worker asks for a
//! batch's partials at its start, and for the next batch's as soon as it
//! has sent this one's, so that the next batch is read and processed while
//! this one is gathered and committed and the leader moves the commit
//! record on.
//!
//! Partials depend only on the span's messages, so a batch whose txid,
//! span and partitions match partials made before (ahead, or by the try
//! before) takes them: a replay is not read and processed again, which on
//! a loaded host could outlast the batch timeout try after try.

use super::plan::ClusterPlan;
use anyhow::{Context, Result, anyhow, bail};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::mpsc;
use std::thread::JoinHandle;
use weir_engine::exec::{BatchId, Partials, Processor};
use weir_io::spout::jetstream::SpanReader;
use weir_state::keyed::KeyedValues;

/// Each state's partials from a span, by state name.
pub type SpanPartials = Arc<BTreeMap<String, KeyedValues>>;

/// A batch's span of this host's partitions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Span {
    pub id: BatchId,
    /// The stream sequences after which the span starts and at which it ends.
    pub after: u64,
    pub until: u64,
    pub partitions: Vec<String>,
}

/// A span's partials.
pub struct Made {
    /// The messages read.
    pub tuples: u64,
    pub partials: SpanPartials,
    /// Made before the batch's start asked for them.
    pub ahead: bool,
}

enum Job {
    Ahead(Span),
    Now(Span, mpsc::Sender<Result<Made>>),
}

/// The process phase's thread, for one topology on this host.
pub struct ProcessPhase {
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

impl ProcessPhase {
    /// Starts the thread, reading with `reader`.
    pub fn start(plan: Arc<ClusterPlan>, reader: SpanReader) -> Result<ProcessPhase> {
        let (jobs, queue) = mpsc::channel();
        let processor = Processor::new(Arc::clone(&plan.plan), plan.source.clone());
        let mut phase = Phase { plan, reader, processor, made: Vec::new() };
        let thread = std::thread::Builder::new()
            .name("weir-cluster-process".into())
            .spawn(move || {
                for job in queue {
                    match job {
                        Job::Ahead(span) => {
                            if let Err(e) = phase.make(&span, true) {
                                tracing::debug!(
                                    "topology {}: txid {} was not processed ahead: {e:#}",
                                    phase.plan.name,
                                    span.id.txid
                                );
                            }
                        }
                        Job::Now(span, reply) => {
                            let _ = reply.send(phase.make(&span, false));
                        }
                    }
                }
            })
            .context("starting the process phase's thread")?;
        Ok(ProcessPhase { jobs: Some(jobs), thread: Some(thread) })
    }

    /// Reads and processes `span` ahead of its batch's start.
    pub fn ahead(&self, span: Span) {
        if let Some(jobs) = &self.jobs {
            let _ = jobs.send(Job::Ahead(span));
        }
    }

    /// `span`'s partials: those made before, or made now.
    pub fn now(&self, span: Span) -> Result<Made> {
        let (reply, answer) = mpsc::channel();
        let jobs = self.jobs.as_ref().context("the process phase has stopped")?;
        jobs.send(Job::Now(span, reply)).map_err(|_| anyhow!("the process phase's thread has stopped"))?;
        answer.recv().map_err(|_| anyhow!("the process phase's thread has stopped"))?
    }
}

impl Drop for ProcessPhase {
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A span's partials kept for a later ask.
struct Kept {
    txid: u64,
    span: (u64, u64),
    partitions: Vec<String>,
    tuples: u64,
    partials: SpanPartials,
    /// Made ahead, and not asked for yet.
    ahead: bool,
}

/// What the thread holds.
struct Phase {
    plan: Arc<ClusterPlan>,
    reader: SpanReader,
    processor: Processor,
    /// The partials of the last spans made: a txid's and the one before's,
    /// which may be replayed while the next is made ahead.
    made: Vec<Kept>,
}

impl Phase {
    /// `span`'s partials (`ahead`: asked before its batch's start).
    fn make(&mut self, span: &Span, ahead: bool) -> Result<Made> {
        let txid = span.id.txid;
        let same =
            |k: &&mut Kept| k.txid == txid && k.span == (span.after, span.until) && k.partitions == span.partitions;
        if let Some(kept) = self.made.iter_mut().find(same) {
            // Counted as made ahead once, not again on a replay.
            let made_ahead = !ahead && std::mem::take(&mut kept.ahead);
            return Ok(Made { tuples: kept.tuples, partials: Arc::clone(&kept.partials), ahead: made_ahead });
        }
        self.made.retain(|k| k.txid + 1 == txid);
        let (tuples, partials) = self.read_and_process(span)?;
        let partials = Arc::new(partials);
        self.made.push(Kept {
            txid,
            span: (span.after, span.until),
            partitions: span.partitions.clone(),
            tuples,
            partials: Arc::clone(&partials),
            ahead,
        });
        Ok(Made { tuples, partials, ahead: false })
    }

    /// Reads `span` from the stream and runs the process phase over it.
    fn read_and_process(&mut self, span: &Span) -> Result<(u64, BTreeMap<String, KeyedValues>)> {
        let batch = self.reader.read(&span.partitions, span.after, span.until)?;
        let tuples = batch.len() as u64;
        let handover = self.processor.process(span.id, batch).map_err(|e| anyhow!("{e}"))?;
        let mut by_node = handover.into_partials().context("the commit phase takes more than partials")?;
        let mut out = BTreeMap::new();
        for aggregate in &self.plan.aggregates {
            let values = match by_node.remove(&aggregate.node) {
                Some(Partials::Values(values)) => values,
                Some(Partials::Rows { .. }) => bail!("state {}: a reducer's rows cannot cross hosts", aggregate.state),
                None => KeyedValues::default(),
            };
            out.insert(aggregate.state.clone(), values);
        }
        Ok((tuples, out))
    }
}

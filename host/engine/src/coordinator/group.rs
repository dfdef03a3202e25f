//! Commit groups: the oldest batch in flight commits with the batches after
//! it that are processed already, in one durable write, so that they share
//! its flush. A group never waits for a batch: it takes what is ready, up
//! to `group_max` batches, and stops taking more once `group_time` has
//! passed or its batches' results hold max pending bytes (the commit writes
//! them in one transaction, which holds what it wrote until it ends). A
//! batch whose commit phase fails ends the group: those before it commit,
//! and it fails as a batch alone would. A topology with a Kafka sink commits
//! each batch alone; JetStream sinks' output is sent after its group's
//! commit, its acknowledgements awaited in flight.

use super::held::Holding;
use super::{Coordinator, Ready, RunReport};
use crate::exec::{BatchError, BatchId, GroupFailure};
use anyhow::Result;
use std::time::Instant;
use weir_config::fault::{self, Point};
use weir_state::BatchRecord;

impl Coordinator<'_> {
    /// Commits `first`, the batch at the front, with the processed batches
    /// after it, and reports them; returns the batch that failed, if one
    /// did, for the caller to replay or halt with.
    pub(super) fn commit_group(
        &mut self,
        first: Ready,
        on_report: &mut dyn FnMut(&RunReport),
    ) -> Result<Option<(BatchId, BatchError)>> {
        let started = Instant::now();
        let group_max = self.group_max();
        let mut process_times = Vec::new();
        let mut failed = None;
        let mut group_bytes = 0;
        let mut next = Some(first);
        let mut process_tuples = Vec::new();
        while let Some(Ready { id, mut handover, times, holding }) = next.take() {
            group_bytes += holding.as_ref().map_or(0, Holding::bytes);
            let in_flight = &self.pending[process_times.len()];
            let record = BatchRecord { attempt: id.attempt, time_ms: in_flight.time_ms, spout: in_flight.meta.clone() };
            fault::at(Point::BeforeCommit, id.txid);
            let tuples = std::mem::take(&mut handover.tuples);
            if let Err(error) = self.committer.prepare(self.store, id.txid, &record, handover) {
                failed = Some((id, error));
                break;
            }
            process_times.push(times);
            process_tuples.push(tuples);
            let grouped = process_times.len();
            if grouped >= group_max
                || started.elapsed() >= self.config.group_time
                || group_bytes >= self.config.max_pending_bytes
                || fault::ends_group(id.txid)
            {
                break;
            }
            // A fault point before a batch's commit promises every earlier
            // batch committed: that batch starts the next group.
            let after = self.pending.get(grouped).map(|p| p.id).filter(|id| !fault::starts_group(id.txid));
            next = after.and_then(|id| self.ready(id));
        }
        let grouped = process_times.len();
        if grouped == 0 {
            return Ok(failed);
        }
        let (committed, written) = match self.committer.commit_group(self.store) {
            Ok(written) => (grouped, Some(written)),
            Err(GroupFailure { committed, error }) => {
                // The batch it failed at is replayed, with those after it.
                failed = Some((self.pending[committed].id, error));
                (committed, None)
            }
        };
        let commit_times = self.committer.take_times();
        for (window, late) in self.committer.take_late() {
            *self.report.late_tuples.entry(window).or_default() += late;
        }
        self.report.watermarks.extend(self.committer.take_watermarks());
        if committed == 0 {
            return Ok(failed);
        }
        for batch in self.pending.iter().take(committed) {
            fault::at(Point::AfterCommit, batch.id.txid);
        }
        self.report.commit_latency.record(started.elapsed());
        self.report.commit_groups.record(committed);
        let times = process_times.into_iter().take(committed).flatten().chain(commit_times);
        for (operator, time) in times {
            *self.report.operator_time.entry(operator).or_default() += time;
        }
        for (operator, counts) in process_tuples.into_iter().take(committed).flatten() {
            self.report.operator_tuples.entry(operator).or_default().add(counts);
        }
        // The spout is timed by its emission of each batch (its tuples out
        // are counted by the process phase, as every node's).
        if let Some(spout) = &self.spout_id {
            for batch in self.pending.iter().take(committed) {
                *self.report.operator_time.entry(spout.clone()).or_default() += batch.emitting;
            }
        }
        for _ in 0..committed {
            let done = self.pending.pop_front().expect("a committed batch is in flight");
            let keys = written.map_or(String::new(), |n| format!(", {n} keys written"));
            tracing::debug!(
                "topology {}: committed txid {} (attempt {}) in a group of {committed}{keys}",
                self.plan.topology,
                done.id.txid,
                done.id.attempt
            );
            self.committed_meta = Some(done.meta);
            self.report.last_committed = done.id.txid;
            self.report.batches += 1;
            self.report.tuples += done.tuples;
        }
        self.report.spout_lag = self.spout.lag(self.committed_meta.as_deref());
        self.report.partition_lag = self.spout.partition_lag();
        self.report.elapsed = self.started.elapsed();
        on_report(&self.report);
        self.publish_committed()?;
        Ok(failed)
    }
}

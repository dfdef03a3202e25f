//! What a log spout (JetStream, Kafka) has not yet seen committed, per
//! partition: the messages its last read left in the log, and those of the
//! batches it emitted that are not yet known committed. Their sum is the
//! spout's lag.

use std::collections::{BTreeMap, VecDeque};

/// A log spout's backlog, by partition `P`.
pub struct Backlog<P> {
    /// Per partition, messages left after the last emission.
    pending: BTreeMap<P, u64>,
    /// Emitted batches not yet known committed: metadata and messages per
    /// partition.
    uncommitted: VecDeque<(Vec<u8>, BTreeMap<P, u64>)>,
    /// Per partition, messages not yet committed, as of the last `lag`.
    lag: BTreeMap<P, u64>,
}

impl<P> Default for Backlog<P> {
    fn default() -> Self {
        Backlog { pending: BTreeMap::new(), uncommitted: VecDeque::new(), lag: BTreeMap::new() }
    }
}

impl<P: Ord + Clone> Backlog<P> {
    /// A read found nothing left in any partition.
    pub fn caught_up(&mut self) {
        self.pending.values_mut().for_each(|n| *n = 0);
    }

    /// A read left `pending` messages in each partition, after the batch it
    /// emitted (`meta`, which took `taken` from each partition): the
    /// batches emitted after `previous` before are abandoned (an opaque
    /// replay emits anew).
    pub fn emitted(
        &mut self,
        previous: Option<&[u8]>,
        meta: &[u8],
        taken: BTreeMap<P, u64>,
        pending: BTreeMap<P, u64>,
    ) {
        let keep = previous.and_then(|p| self.uncommitted.iter().position(|(m, _)| m == p)).map_or(0, |i| i + 1);
        self.uncommitted.truncate(keep);
        self.uncommitted.push_back((meta.to_vec(), taken));
        self.pending = pending;
    }

    /// Batch `meta`, which took `taken` from each partition, was replayed.
    pub fn replayed(&mut self, meta: &[u8], taken: BTreeMap<P, u64>) {
        if !self.uncommitted.iter().any(|(m, _)| m == meta) {
            self.uncommitted.push_back((meta.to_vec(), taken));
        }
    }

    /// The messages not yet committed once batch `committed` is, in all.
    pub fn lag(&mut self, committed: Option<&[u8]>) -> u64 {
        if let Some(committed) = committed
            && let Some(i) = self.uncommitted.iter().position(|(m, _)| m == committed)
        {
            self.uncommitted.drain(..=i);
        }
        let mut lag = self.pending.clone();
        for (_, batch) in &self.uncommitted {
            for (partition, n) in batch {
                *lag.entry(partition.clone()).or_default() += n;
            }
        }
        let total = lag.values().sum();
        self.lag = lag;
        total
    }

    /// Per partition, as of the last [`Backlog::lag`].
    pub fn by_partition(&self) -> &BTreeMap<P, u64> {
        &self.lag
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lag_counts_what_is_left_and_what_is_emitted_but_not_committed() {
        let mut backlog = Backlog::default();
        let taken = |n| BTreeMap::from([("a", n)]);
        backlog.emitted(None, b"1", taken(10), BTreeMap::from([("a", 5), ("b", 2)]));
        backlog.emitted(Some(b"1"), b"2", taken(3), BTreeMap::from([("a", 2), ("b", 2)]));
        assert_eq!(backlog.lag(None), 17);
        assert_eq!(backlog.lag(Some(b"1")), 7, "batch 1 committed");
        assert_eq!(backlog.by_partition(), &BTreeMap::from([("a", 5), ("b", 2)]));
        // An opaque replay of the batch after 1 abandons batch 2.
        backlog.emitted(Some(b"1"), b"2'", taken(4), BTreeMap::from([("a", 1)]));
        assert_eq!(backlog.lag(None), 5);
        backlog.replayed(b"2'", taken(4));
        assert_eq!(backlog.lag(None), 5, "a replay of a batch noted already adds nothing");
        backlog.caught_up();
        assert_eq!(backlog.lag(Some(b"2'")), 0);
    }
}

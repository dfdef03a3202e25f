//! Figures that cost the same memory however long a run goes: latencies,
//! and the sizes of commit groups.

use std::time::Duration;

const EXACT: u64 = 16;
const SUB_BUCKETS: u64 = 16;

/// Latencies in log-spaced buckets of microseconds: exact below 16 µs, then
/// 16 buckets per power of two (quantiles within about 6%).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Latencies {
    buckets: Vec<u64>,
    count: u64,
}

impl Default for Latencies {
    fn default() -> Latencies {
        Latencies { buckets: vec![0; bucket_of(u64::MAX) + 1], count: 0 }
    }
}

fn bucket_of(micros: u64) -> usize {
    if micros < EXACT {
        return micros as usize;
    }
    let power = 63 - u64::from(micros.leading_zeros());
    let sub = (micros >> (power - 4)) - SUB_BUCKETS;
    (EXACT + (power - 4) * SUB_BUCKETS + sub) as usize
}

/// The smallest value that falls in `bucket`.
fn lower_bound(bucket: usize) -> u64 {
    let bucket = bucket as u64;
    if bucket < EXACT {
        return bucket;
    }
    let power = (bucket - EXACT) / SUB_BUCKETS + 4;
    let sub = (bucket - EXACT) % SUB_BUCKETS;
    (SUB_BUCKETS + sub) << (power - 4)
}

impl Latencies {
    /// Records one latency.
    pub fn record(&mut self, latency: Duration) {
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.buckets[bucket_of(micros)] += 1;
        self.count += 1;
    }

    /// Number of latencies recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The latencies recorded after `earlier`, a copy of these taken before:
    /// a recent window's. Where `earlier` holds more than these, they were
    /// reset (a new run) and all of these count.
    pub fn since(&self, earlier: &Latencies) -> Latencies {
        if earlier.count > self.count || earlier.buckets.len() != self.buckets.len() {
            return self.clone();
        }
        let buckets: Vec<u64> =
            self.buckets.iter().zip(&earlier.buckets).map(|(now, then)| now.saturating_sub(*then)).collect();
        let count = buckets.iter().sum();
        Latencies { buckets, count }
    }

    /// The latency below which `q` (0 to 1) of them fall, to a bucket's
    /// precision; `None` when nothing was recorded.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (bucket, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(Duration::from_micros(lower_bound(bucket)));
            }
        }
        None
    }
}

/// Tuples an operator took in and gave out, in committed batches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct TupleCounts {
    /// Tuples of its inputs.
    pub tuples_in: u64,
    /// Tuples of its output (none counted for the nodes of the commit
    /// phase, whose output is state).
    pub tuples_out: u64,
}

impl TupleCounts {
    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: TupleCounts) {
        self.tuples_in += other.tuples_in;
        self.tuples_out += other.tuples_out;
    }
}

/// How many batches the commit groups held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct GroupSizes {
    /// Groups committed.
    pub groups: u64,
    /// Batches in them.
    pub batches: u64,
    /// The most batches one held.
    pub max: u64,
}

impl GroupSizes {
    /// Records a group of `batches`.
    pub fn record(&mut self, batches: usize) {
        let batches = batches as u64;
        self.groups += 1;
        self.batches += batches;
        self.max = self.max.max(batches);
    }

    /// Batches per group; `None` before the first.
    pub fn mean(&self) -> Option<f64> {
        (self.groups > 0).then(|| self.batches as f64 / self.groups as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_sizes_keep_count_mean_and_max() {
        let mut sizes = GroupSizes::default();
        assert_eq!(sizes.mean(), None);
        for batches in [1, 4, 16, 3] {
            sizes.record(batches);
        }
        assert_eq!(sizes, GroupSizes { groups: 4, batches: 24, max: 16 });
        assert_eq!(sizes.mean(), Some(6.0));
    }

    #[test]
    fn latencies_since_an_earlier_copy_hold_only_the_later_ones() {
        let mut latencies = Latencies::default();
        for _ in 0..100 {
            latencies.record(Duration::from_millis(1));
        }
        let earlier = latencies.clone();
        latencies.record(Duration::from_millis(500));
        let window = latencies.since(&earlier);
        assert_eq!(window.count(), 1);
        let ms = window.quantile(0.5).unwrap().as_millis();
        assert!((470..=500).contains(&ms), "{ms}");
        let run = latencies.quantile(0.5).unwrap().as_micros();
        assert!((940..=1000).contains(&run), "the run's p50 is still 1 ms: {run} µs");
        // A reset run: everything it holds is new.
        assert_eq!(Latencies::default().since(&earlier).count(), 0);
        assert_eq!(window.since(&earlier).count(), 1);
        assert_eq!(earlier.since(&earlier).quantile(0.99), None);
    }

    #[test]
    fn buckets_cover_every_value_in_order() {
        let mut last = 0;
        for micros in [0, 1, 15, 16, 17, 31, 32, 1000, 4_000_000, u64::MAX / 2, u64::MAX] {
            let bucket = bucket_of(micros);
            assert!(bucket >= last, "{micros}");
            assert!(lower_bound(bucket) <= micros, "{micros}");
            last = bucket;
        }
    }

    #[test]
    fn quantiles_are_within_a_bucket() {
        let mut latencies = Latencies::default();
        for ms in 1..=100 {
            latencies.record(Duration::from_millis(ms));
        }
        let p50 = latencies.quantile(0.5).unwrap().as_secs_f64() * 1000.0;
        let p99 = latencies.quantile(0.99).unwrap().as_secs_f64() * 1000.0;
        assert!((47.0..=50.0).contains(&p50), "{p50}");
        assert!((93.0..=99.0).contains(&p99), "{p99}");
        assert_eq!(Latencies::default().quantile(0.5), None);
    }
}

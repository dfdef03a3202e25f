//! The figures behind the dashboard's charts: every deployment's status,
//! sampled every [`HISTORY_INTERVAL`], the last [`HISTORY_SAMPLES`] of
//! them kept in a ring of its own, dropped when it is deleted.
//!
//! All rings together hold at most [`HISTORY_MAX_SAMPLES`]: with more
//! deployments than that allows at full length, each ring is kept shorter.

use super::status::Status;
use serde_json::json;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use weir_config::sync::Locked;
use weir_config::{HISTORY_INTERVAL, HISTORY_MAX_SAMPLES, HISTORY_SAMPLES};

/// One deployment's figures at one moment.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Sample {
    /// When, in seconds since the Unix epoch.
    at: f64,
    last_committed: u64,
    /// Rates over the time since the previous sample.
    batches_per_s: f32,
    tuples_per_s: f32,
    /// Of the run so far.
    commit_p50_ms: Option<f32>,
    commit_p99_ms: Option<f32>,
    replays: u64,
    spout_lag: Option<u64>,
}

/// One deployment's samples, oldest first, and the counts the next rates
/// are taken from.
struct Ring {
    samples: VecDeque<Sample>,
    batches: u64,
    tuples: u64,
    taken: Instant,
}

/// Every deployment's ring, by name.
pub struct History {
    rings: Mutex<BTreeMap<String, Ring>>,
    /// Samples one ring keeps at most.
    per_ring: usize,
    /// Samples all rings keep at most.
    total: usize,
}

impl Default for History {
    fn default() -> History {
        History::new(HISTORY_SAMPLES, HISTORY_MAX_SAMPLES)
    }
}

/// `x` to three decimals, as a chart shows it (an `f32` widened to `f64`
/// would print digits it never had).
fn short(x: f32) -> f64 {
    (f64::from(x) * 1e3).round() / 1e3
}

/// `to - from` over `seconds`; a count that went down was reset by a restart
/// and counts from zero.
fn rate(from: u64, to: u64, seconds: f64) -> f32 {
    let done = if to >= from { to - from } else { to };
    (done as f64 / seconds.max(1e-3)) as f32
}

impl History {
    /// Rings of at most `per_ring` samples, `total` in all.
    pub fn new(per_ring: usize, total: usize) -> History {
        History { rings: Mutex::default(), per_ring, total }
    }

    /// Samples a ring keeps when there are `rings` of them.
    fn capacity(&self, rings: usize) -> usize {
        (self.total / rings.max(1)).min(self.per_ring)
    }

    /// Records a sample of each deployment `list` gives (every deployment
    /// there is), taken `now`; rings of deployments no longer there are
    /// dropped. The list is taken under the rings' lock, so that a ring
    /// [`forget`](History::forget) drops on delete cannot come back from a
    /// list taken before it.
    pub fn record(&self, list: impl FnOnce() -> Vec<(String, Status)>, now: Instant, wall: SystemTime) {
        let at = wall.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        let mut rings = self.rings.locked();
        let all = list();
        let capacity = self.capacity(all.len());
        rings.retain(|name, _| all.iter().any(|(n, _)| n == name));
        for (name, status) in &all {
            let ring = rings.entry(name.clone()).or_insert_with(|| Ring {
                samples: VecDeque::new(),
                batches: 0,
                tuples: 0,
                taken: now,
            });
            let seconds = now.saturating_duration_since(ring.taken).as_secs_f64();
            let (batches_per_s, tuples_per_s) = if ring.samples.is_empty() {
                // Nothing to take a rate over yet: the run's own.
                (status.batches_per_s as f32, status.tuples_per_s as f32)
            } else {
                (rate(ring.batches, status.batches, seconds), rate(ring.tuples, status.tuples, seconds))
            };
            (ring.batches, ring.tuples, ring.taken) = (status.batches, status.tuples, now);
            ring.samples.push_back(Sample {
                at,
                last_committed: status.last_committed,
                batches_per_s,
                tuples_per_s,
                commit_p50_ms: status.commit_p50_ms.map(|ms| ms as f32),
                commit_p99_ms: status.commit_p99_ms.map(|ms| ms as f32),
                replays: status.replays,
                spout_lag: status.spout_lag,
            });
            if ring.samples.len() > capacity {
                let excess = ring.samples.len() - capacity;
                ring.samples.drain(..excess);
                // A ring cut shorter gives its memory back.
                ring.samples.shrink_to(capacity);
            }
        }
    }

    /// Drops deployment `name`'s ring.
    pub fn forget(&self, name: &str) {
        self.rings.locked().remove(name);
    }

    /// Deployment `name`'s samples as columns, oldest first, as a chart
    /// reads them (absent figures are null).
    pub fn columns(&self, name: &str) -> serde_json::Value {
        let rings = self.rings.locked();
        let samples: Vec<Sample> = rings.get(name).map(|r| r.samples.iter().copied().collect()).unwrap_or_default();
        drop(rings);
        let column = |figure: fn(&Sample) -> serde_json::Value| samples.iter().map(figure).collect::<Vec<_>>();
        json!({
            "interval_ms": HISTORY_INTERVAL.as_millis() as u64,
            "at": column(|s| json!((s.at * 1e3).round() / 1e3)),
            "last_committed": column(|s| json!(s.last_committed)),
            "batches_per_s": column(|s| json!(short(s.batches_per_s))),
            "tuples_per_s": column(|s| json!(short(s.tuples_per_s))),
            "commit_p50_ms": column(|s| json!(s.commit_p50_ms.map(short))),
            "commit_p99_ms": column(|s| json!(s.commit_p99_ms.map(short))),
            "replays": column(|s| json!(s.replays)),
            "spout_lag": column(|s| json!(s.spout_lag)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn status(batches: u64) -> Status {
        Status { batches, tuples: batches * 1000, last_committed: batches, ..Status::default() }
    }

    impl History {
        /// Samples kept in all.
        fn len(&self) -> usize {
            self.rings.lock().unwrap().values().map(|r| r.samples.len()).sum()
        }
    }

    fn named(n: usize, batches: u64) -> Vec<(String, Status)> {
        (0..n).map(|i| (format!("t{i}"), status(batches))).collect()
    }

    #[test]
    fn rates_are_taken_between_samples_and_a_ring_keeps_its_last_samples() {
        let history = History::new(3, 100);
        let start = Instant::now();
        for (second, batches) in [(0, 10), (1, 12), (2, 15), (4, 15), (5, 2)] {
            history.record(
                || vec![("wc".into(), status(batches))],
                start + Duration::from_secs(second),
                SystemTime::now(),
            );
        }
        let columns = history.columns("wc");
        assert_eq!(columns["last_committed"], json!([15, 15, 2]));
        // 3 batches in a second; none in two; a restart counts from zero.
        assert_eq!(columns["batches_per_s"], json!([3.0, 0.0, 2.0]));
        assert_eq!(columns["tuples_per_s"], json!([3000.0, 0.0, 2000.0]));
        assert_eq!(columns["commit_p99_ms"], json!([null, null, null]));
        assert_eq!(history.columns("unknown")["at"], json!([]));
    }

    #[test]
    fn many_deployments_keep_no_more_samples_than_the_cap_and_a_deleted_one_none() {
        let history = History::new(900, 900 * 4);
        let start = Instant::now();
        for second in 0..1000 {
            history.record(|| named(4, second), start + Duration::from_secs(second), SystemTime::now());
        }
        assert_eq!(history.len(), 900 * 4);
        for second in 1000..1010 {
            history.record(|| named(1000, second), start + Duration::from_secs(second), SystemTime::now());
            assert!(history.len() <= 900 * 4, "{} samples", history.len());
        }
        assert_eq!(history.columns("t0")["at"].as_array().unwrap().len(), 3);
        // Gone from the list, or forgotten on delete: its ring is dropped.
        history.record(|| named(2, 1010), start + Duration::from_secs(1010), SystemTime::now());
        assert_eq!(history.rings.lock().unwrap().len(), 2);
        history.forget("t1");
        assert_eq!(history.columns("t1")["at"], json!([]));
        assert_eq!(history.rings.lock().unwrap().len(), 1);
    }
}

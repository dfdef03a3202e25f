//! The figures behind the dashboard's charts: every deployment's status,
//! sampled every [`HISTORY_INTERVAL`], the last [`HISTORY_SAMPLES`] of
//! them kept in a ring of its own, dropped when it is deleted.
//!
//! All rings together hold at most [`HISTORY_MAX_SAMPLES`]: with more
//! deployments than that allows at full length, each ring is kept shorter.
//! The samples are saved to a file of the data directory now and then and
//! read back at start, so that the charts survive a restart.

use super::status::Status;
use serde_json::json;
use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use weir_config::sync::Locked;
use weir_config::{HISTORY_INTERVAL, HISTORY_MAX_SAMPLES, HISTORY_SAMPLES};
use weir_engine::metrics::{Latencies, TupleCounts};

/// One deployment's figures at one moment.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Sample {
    /// When, in seconds since the Unix epoch.
    at: f64,
    last_committed: u64,
    /// Rates over the time since the previous sample.
    batches_per_s: f32,
    tuples_per_s: f32,
    /// Of the commits since the previous sample (none: no commit).
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
    latencies: Latencies,
    taken: Instant,
    /// Read back from the file: the counts above are not the run's yet.
    restored: bool,
    /// Each operator's tuples at the last sample, and its rates in and out
    /// over the interval before it.
    operators: BTreeMap<String, TupleCounts>,
    operator_rates: BTreeMap<String, (f32, f32)>,
    /// Each guest operator's time at the last sample, and the share of the
    /// interval before it that it was busy.
    operator_ms: BTreeMap<String, f64>,
    operator_busy: BTreeMap<String, f32>,
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
                latencies: Latencies::default(),
                taken: now,
                restored: false,
                operators: BTreeMap::new(),
                operator_rates: BTreeMap::new(),
                operator_ms: BTreeMap::new(),
                operator_busy: BTreeMap::new(),
            });
            let seconds = now.saturating_duration_since(ring.taken).as_secs_f64();
            let (batches_per_s, tuples_per_s) = if ring.samples.is_empty() || ring.restored {
                // Nothing to take a rate over yet: the run's own.
                (status.batches_per_s as f32, status.tuples_per_s as f32)
            } else {
                (rate(ring.batches, status.batches, seconds), rate(ring.tuples, status.tuples, seconds))
            };
            let window = status.commit_latency.since(&ring.latencies);
            let ms = |q| window.quantile(q).map(|d| (d.as_secs_f64() * 1e3) as f32);
            let fresh = ring.samples.is_empty() || ring.restored;
            ring.operator_rates = status
                .operator_tuples
                .iter()
                .map(|(operator, now)| {
                    let then = ring.operators.get(operator).copied().filter(|_| !fresh).unwrap_or_default();
                    let rates =
                        (rate(then.tuples_in, now.tuples_in, seconds), rate(then.tuples_out, now.tuples_out, seconds));
                    (operator.clone(), if fresh { (0.0, 0.0) } else { rates })
                })
                .collect();
            ring.operators.clone_from(&status.operator_tuples);
            ring.operator_busy = status
                .operator_ms
                .iter()
                .filter(|_| !fresh)
                .map(|(operator, &ms)| {
                    let then = ring.operator_ms.get(operator).copied().unwrap_or(0.0);
                    let spent = if ms >= then { ms - then } else { ms };
                    (operator.clone(), (spent / (seconds.max(1e-3) * 1e3)) as f32)
                })
                .collect();
            ring.operator_ms.clone_from(&status.operator_ms);
            (ring.batches, ring.tuples, ring.taken, ring.restored) = (status.batches, status.tuples, now, false);
            ring.latencies.clone_from(&status.commit_latency);
            ring.samples.push_back(Sample {
                at,
                last_committed: status.last_committed,
                batches_per_s,
                tuples_per_s,
                commit_p50_ms: ms(0.5),
                commit_p99_ms: ms(0.99),
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

    /// Writes every ring's samples to `file` (through a file beside it, so
    /// that a crash leaves the old one whole).
    pub fn save(&self, file: &Path) -> std::io::Result<()> {
        let rings: BTreeMap<String, Vec<Sample>> = self
            .rings
            .locked()
            .iter()
            .map(|(name, ring)| (name.clone(), ring.samples.iter().copied().collect()))
            .collect();
        let text = serde_json::to_vec(&json!({ "version": 1, "rings": rings })).map_err(std::io::Error::other)?;
        let next = file.with_extension("json.next");
        std::fs::write(&next, text)?;
        std::fs::rename(&next, file)
    }

    /// Rings read back from `file`, as [`save`](History::save) wrote them,
    /// cut to this history's bounds; none when there is no such file.
    pub fn restore(&self, file: &Path, now: Instant) -> anyhow::Result<()> {
        let text = match std::fs::read(file) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(anyhow::anyhow!("reading the dashboard's history {}: {e}", file.display())),
        };
        #[derive(serde::Deserialize)]
        struct Saved {
            rings: BTreeMap<String, Vec<Sample>>,
        }
        let saved: Saved = serde_json::from_slice(&text)
            .map_err(|e| anyhow::anyhow!("the dashboard's history {} is damaged: {e}", file.display()))?;
        let capacity = self.capacity(saved.rings.len());
        let mut rings = self.rings.locked();
        for (name, samples) in saved.rings {
            let skip = samples.len().saturating_sub(capacity);
            rings.insert(
                name,
                Ring {
                    samples: samples.into_iter().skip(skip).collect(),
                    batches: 0,
                    tuples: 0,
                    latencies: Latencies::default(),
                    taken: now,
                    restored: true,
                    operators: BTreeMap::new(),
                    operator_rates: BTreeMap::new(),
                    operator_ms: BTreeMap::new(),
                    operator_busy: BTreeMap::new(),
                },
            );
        }
        Ok(())
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
        let operators: serde_json::Map<String, serde_json::Value> = rings
            .get(name)
            .map(|r| &r.operator_rates)
            .into_iter()
            .flatten()
            .map(|(op, (tuples_in, tuples_out))| {
                (op.clone(), json!({ "in_per_s": short(*tuples_in), "out_per_s": short(*tuples_out) }))
            })
            .collect();
        let mut operators = operators;
        for (op, busy) in rings.get(name).map(|r| &r.operator_busy).into_iter().flatten() {
            let entry = operators.entry(op.clone()).or_insert_with(|| json!({}));
            entry["busy"] = json!(short(*busy));
        }
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
            "operators": operators,
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
    fn each_operators_rates_are_the_last_intervals() {
        let history = History::new(10, 100);
        let start = Instant::now();
        let at = |second: u64, tuples_in: u64, tuples_out: u64| {
            let counts = TupleCounts { tuples_in, tuples_out };
            let status = Status {
                operator_tuples: [("split".to_owned(), counts)].into(),
                operator_ms: [("split".to_owned(), second as f64 * 250.0)].into(),
                ..status(second)
            };
            history.record(|| vec![("wc".into(), status)], start + Duration::from_secs(second), SystemTime::now());
        };
        at(0, 1000, 9000);
        assert_eq!(history.columns("wc")["operators"]["split"], json!({"in_per_s": 0.0, "out_per_s": 0.0}));
        at(2, 3000, 25_000);
        // 500 ms of work in 2 s: a quarter busy.
        assert_eq!(
            history.columns("wc")["operators"]["split"],
            json!({"in_per_s": 1000.0, "out_per_s": 8000.0, "busy": 0.25})
        );
    }

    #[test]
    fn latencies_are_each_intervals_and_none_without_commits() {
        let history = History::new(10, 100);
        let start = Instant::now();
        let mut latencies = Latencies::default();
        let at = |second: u64, latencies: &Latencies| {
            let status = Status { commit_latency: latencies.clone(), ..status(second) };
            history.record(|| vec![("wc".into(), status)], start + Duration::from_secs(second), SystemTime::now());
        };
        for _ in 0..100 {
            latencies.record(Duration::from_millis(2));
        }
        at(0, &latencies);
        // One slow commit: this interval's p99 shows it, though the run's
        // would still read 2 ms.
        latencies.record(Duration::from_millis(400));
        at(1, &latencies);
        at(2, &latencies);
        let columns = history.columns("wc");
        let p99: Vec<Option<f64>> = serde_json::from_value(columns["commit_p99_ms"].clone()).unwrap();
        assert!(p99[0].is_some_and(|ms| (1.8..=2.0).contains(&ms)), "{p99:?}");
        assert!(p99[1].is_some_and(|ms| (376.0..=400.0).contains(&ms)), "{p99:?}");
        assert_eq!(p99[2], None, "no commit in the last interval");
    }

    #[test]
    fn samples_saved_are_read_back_within_the_bounds_and_rates_start_afresh() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("history.json");
        let history = History::new(5, 100);
        let start = Instant::now();
        for second in 0..8 {
            history.record(|| named(2, second * 10), start + Duration::from_secs(second), SystemTime::now());
        }
        history.save(&file).unwrap();
        let again = History::new(3, 100);
        again.restore(&file, start).unwrap();
        assert_eq!(again.columns("t0")["last_committed"], json!([50, 60, 70]));
        // A restarted run counts from zero: its first rate is its own.
        let restarted = Status { batches_per_s: 4.0, ..status(2) };
        again.record(|| vec![("t0".into(), restarted)], start + Duration::from_secs(60), SystemTime::now());
        assert_eq!(again.columns("t0")["batches_per_s"], json!([10.0, 10.0, 4.0]));
        assert_eq!(again.columns("t1")["at"], json!([]), "t1 is gone: its ring too");
        // No file is no history; a damaged one is refused by name.
        History::default().restore(&dir.path().join("none.json"), start).unwrap();
        std::fs::write(&file, b"{").unwrap();
        let refused = History::default().restore(&file, start).unwrap_err().to_string();
        assert!(refused.contains("history.json is damaged"), "{refused}");
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

//! How long a log spout's server (NATS, Kafka) has been out of reach, and
//! how long to wait before trying it again: doubling waits, until the
//! spout's retry window has passed.

use std::time::{Duration, Instant};
use weir_config::backoff::{Backoff, RECONNECT};

/// A spout's current outage, if any.
pub struct Outage {
    /// How long to keep trying before the topology halts.
    retry_for: Duration,
    /// Since when the server has been out of reach.
    since: Option<Instant>,
    backoff: Backoff,
}

impl Outage {
    /// No outage yet; `retry_for`: how long one may last.
    pub fn new(retry_for: Duration) -> Outage {
        Outage { retry_for, since: None, backoff: RECONNECT }
    }

    /// A request got through: whether that ends an outage.
    pub fn reached(&mut self) -> bool {
        self.backoff.reset();
        self.since.take().is_some()
    }

    /// A request found the server out of reach: the wait before the next
    /// try, or `None` once it has been out of reach for the whole window.
    pub fn lost(&mut self) -> Option<Duration> {
        let since = *self.since.get_or_insert_with(Instant::now);
        (since.elapsed() < self.retry_for).then(|| self.backoff.next_wait())
    }

    /// How long the server has been out of reach, in seconds.
    pub fn seconds(&self) -> f64 {
        self.since.map_or(0.0, |since| since.elapsed().as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_until_the_window_passes_and_a_success_starts_afresh() {
        let mut outage = Outage::new(Duration::from_millis(50));
        assert!(!outage.reached());
        assert_eq!(outage.lost(), Some(Duration::from_millis(100)));
        assert_eq!(outage.lost(), Some(Duration::from_millis(200)));
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(outage.lost(), None);
        assert!(outage.seconds() >= 0.05);
        assert!(outage.reached());
        assert_eq!(outage.lost(), Some(Duration::from_millis(100)));
    }
}

//! Waits between retries: doubling from a first wait up to a ceiling.

use std::time::Duration;

/// Doubling waits: `first`, twice `first`, and so on, never past `max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    first: Duration,
    max: Duration,
    next: Duration,
}

/// Reconnecting to a service: 100 ms, doubling up to 2 s.
pub const RECONNECT: Backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));

impl Backoff {
    /// Waits from `first`, doubling up to `max`.
    pub const fn new(first: Duration, max: Duration) -> Backoff {
        Backoff { first, max, next: first }
    }

    /// The wait before retry `n` (0 for the first), whatever came before.
    pub fn nth(&self, n: u32) -> Duration {
        self.first.saturating_mul(1 << n.min(20)).min(self.max)
    }

    /// The wait now; the one after is twice as long, up to the ceiling.
    pub fn next_wait(&mut self) -> Duration {
        let wait = self.next.min(self.max);
        self.next = self.next.saturating_mul(2).min(self.max);
        wait
    }

    /// Starts again from the first wait, after a success.
    pub fn reset(&mut self) {
        self.next = self.first;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_up_to_the_ceiling_and_start_again_after_a_reset() {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_millis(500));
        let waits: Vec<u128> = (0..5).map(|_| backoff.next_wait().as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 500, 500]);
        backoff.reset();
        assert_eq!(backoff.next_wait(), Duration::from_millis(100));
    }

    #[test]
    fn the_nth_wait_does_not_depend_on_earlier_ones() {
        let backoff = Backoff::new(Duration::from_millis(10), Duration::from_secs(1));
        assert_eq!(backoff.nth(0), Duration::from_millis(10));
        assert_eq!(backoff.nth(3), Duration::from_millis(80));
        assert_eq!(backoff.nth(u32::MAX), Duration::from_secs(1));
    }
}

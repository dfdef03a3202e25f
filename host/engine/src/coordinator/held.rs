//! What processed batches hold until they commit: their partials, the rows
//! their commit phase takes. Max pending bounds the batches in flight and
//! the input they hold, but a guest emitting hundreds of thousands of keys
//! of its own from a line makes each batch's result many times its input.
//! The process phase's thread takes no further batch while the batches it
//! processed hold max pending bytes, and the coordinator helps only while
//! all of them hold less; each hold ends when its batch's result is
//! dropped, committed or superseded.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;
use weir_config::sync::Locked;

/// Bytes held by processed batches, against a limit.
pub struct Held {
    limit: usize,
    counts: Mutex<Counts>,
    released: Condvar,
}

#[derive(Default)]
struct Counts {
    /// By every processed batch.
    total: usize,
    /// By the batches the process phase's thread processed.
    by_process_phase: usize,
}

/// One processed batch's hold, ended when dropped.
pub struct Holding {
    held: Arc<Held>,
    bytes: usize,
    by_process_phase: bool,
}

/// How often a wait for room looks whether it should end anyway.
const RECHECK: Duration = Duration::from_millis(50);

impl Held {
    pub fn new(limit: usize) -> Arc<Held> {
        Arc::new(Held { limit, counts: Mutex::default(), released: Condvar::new() })
    }

    fn lock(&self) -> MutexGuard<'_, Counts> {
        self.counts.locked()
    }

    /// A hold of `bytes` by a batch the process phase's thread processed
    /// (`by_process_phase`) or the coordinator did.
    pub fn hold(self: &Arc<Held>, bytes: usize, by_process_phase: bool) -> Holding {
        let mut counts = self.lock();
        counts.total += bytes;
        if by_process_phase {
            counts.by_process_phase += bytes;
        }
        Holding { held: Arc::clone(self), bytes, by_process_phase }
    }

    /// Bytes held by every processed batch.
    pub fn total(&self) -> usize {
        self.lock().total
    }

    /// Whether the coordinator may process a batch: every processed batch
    /// holds less than the limit.
    pub fn has_room(&self) -> bool {
        self.total() < self.limit
    }

    /// Waits until the batches the process phase's thread processed hold
    /// less than the limit, or `give_up` says to stop waiting. Those
    /// batches are older than any it has yet to take, so the coordinator
    /// commits them without it and the wait ends.
    pub fn wait_for_room(&self, give_up: impl Fn() -> bool) {
        let mut counts = self.lock();
        while counts.by_process_phase >= self.limit && !give_up() {
            counts = self.released.wait_timeout(counts, RECHECK).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
}

impl Holding {
    /// The bytes it holds.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        let mut counts = self.held.lock();
        counts.total -= self.bytes;
        if self.by_process_phase {
            counts.by_process_phase -= self.bytes;
        }
        drop(counts);
        self.held.released.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_phase_waits_while_what_it_processed_holds_the_limit_and_goes_on_once_it_is_released() {
        let held = Held::new(100);
        let by_coordinator = held.hold(500, false);
        assert!(!held.has_room());
        held.wait_for_room(|| panic!("the coordinator's holds do not stop the process phase"));
        let first = held.hold(60, true);
        let second = held.hold(40, true);
        drop(by_coordinator);
        assert_eq!(held.total(), 100);
        let released = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| {
                held.wait_for_room(|| false);
                released.load(std::sync::atomic::Ordering::SeqCst)
            });
            std::thread::sleep(Duration::from_millis(50));
            released.store(true, std::sync::atomic::Ordering::SeqCst);
            drop(second);
            assert!(waiter.join().unwrap(), "the wait ended only once a hold was released");
        });
        drop(first);
        assert_eq!(held.total(), 0);
        assert!(held.has_room());
    }
}

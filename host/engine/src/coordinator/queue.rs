//! The batches waiting for the process phase. Its thread takes the oldest;
//! the coordinator, rather than wait idle for a batch, may take the newest
//! to process itself, never the one it waits for, and leaving some.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};
use weir_config::sync::Locked;

pub struct WorkQueue<T> {
    state: Mutex<State<T>>,
    ready: Condvar,
}

struct State<T> {
    items: VecDeque<T>,
    closed: bool,
}

impl<T> WorkQueue<T> {
    pub fn new() -> WorkQueue<T> {
        WorkQueue { state: Mutex::new(State { items: VecDeque::new(), closed: false }), ready: Condvar::new() }
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.locked()
    }

    pub fn push(&self, item: T) {
        self.lock().items.push_back(item);
        self.ready.notify_one();
    }

    /// The oldest item, waiting for one; `None` once the queue is closed.
    pub fn take_oldest(&self) -> Option<T> {
        let mut state = self.lock();
        loop {
            if state.closed {
                return None;
            }
            if let Some(item) = state.items.pop_front() {
                return Some(item);
            }
            state = self.ready.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// The newest item, if more than `leave` are queued and `wanted`
    /// accepts it; no waiting.
    pub fn take_newest_if(&self, leave: usize, wanted: impl FnOnce(&T) -> bool) -> Option<T> {
        let mut state = self.lock();
        if state.items.len() > leave && state.items.back().is_some_and(wanted) { state.items.pop_back() } else { None }
    }

    /// Whether [`WorkQueue::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// No more items: what is left is dropped (the run that would have
    /// read its results is over), and [`WorkQueue::take_oldest`] returns
    /// `None`.
    pub fn close(&self) {
        let mut state = self.lock();
        state.closed = true;
        state.items.clear();
        drop(state);
        self.ready.notify_all();
    }
}

/// Closes the queue when dropped, however the run that fills it ends.
pub struct Closing<'a, T>(pub &'a WorkQueue<T>);

impl<T> Drop for Closing<'_, T> {
    fn drop(&mut self) {
        self.0.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_goes_first_the_newest_only_when_wanted_and_a_closed_queue_drops_the_rest() {
        let queue = WorkQueue::new();
        for i in 1..=3 {
            queue.push(i);
        }
        assert_eq!(queue.take_newest_if(0, |&i| i != 3), None);
        assert_eq!(queue.take_newest_if(3, |_| true), None, "leaves 3");
        assert_eq!(queue.take_newest_if(2, |&i| i == 3), Some(3));
        assert_eq!(queue.take_oldest(), Some(1));
        drop(Closing(&queue));
        assert_eq!(queue.take_oldest(), None);
        assert_eq!(queue.take_newest_if(0, |_| true), None);
    }

    #[test]
    fn a_waiting_taker_wakes_for_an_item_and_for_the_close() {
        let queue = WorkQueue::new();
        std::thread::scope(|scope| {
            let taker = scope.spawn(|| (queue.take_oldest(), queue.take_oldest()));
            std::thread::sleep(std::time::Duration::from_millis(20));
            queue.push(7);
            std::thread::sleep(std::time::Duration::from_millis(20));
            queue.close();
            assert_eq!(taker.join().unwrap(), (Some(7), None));
        });
    }
}

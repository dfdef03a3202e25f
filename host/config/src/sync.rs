//! Locks that outlive a panic elsewhere.

use std::sync::{Mutex, MutexGuard};

/// Takes a mutex whatever became of the thread that held it last: every
/// value the host guards stays consistent between its statements, so a
/// panic in one batch's thread must not take the figures, registries and
/// queues of the others down with it.
pub trait Locked<T> {
    /// The guard, even when the lock is poisoned.
    fn locked(&self) -> MutexGuard<'_, T>;
}

impl<T> Locked<T> for Mutex<T> {
    fn locked(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_is_taken_all_the_same() {
        let shared = std::sync::Arc::new(Mutex::new(1));
        let held = std::sync::Arc::clone(&shared);
        let _ = std::thread::spawn(move || {
            let _guard = held.lock().unwrap();
            panic!("poisons the lock");
        })
        .join();
        assert!(shared.is_poisoned());
        *shared.locked() += 1;
        assert_eq!(*shared.locked(), 2);
    }
}

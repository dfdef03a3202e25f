//! The limits a guest instance runs under: memory through a resource
//! limiter, CPU time through epoch interruption, and a deadline on every
//! call, however the guest spends it.

use crate::config::{CALL_DEADLINE_FACTOR, EPOCH_TICK};
use anyhow::{Result, bail};
use std::time::Duration;
use wasmtime::{Engine, ResourceLimiter};

/// A limit of the sandbox that a call ran into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Limit {
    /// The instance's linear memory.
    Memory,
    /// CPU time per call: the guest's code ran past it.
    Cpu,
    /// The guest's call stack.
    Stack,
    /// The call's deadline: the guest was still blocked in a host call (a
    /// WASI sleep or poll) when it passed, and the call was abandoned.
    Deadline,
    /// Bytes or tuples one call may return.
    Output,
    /// State entries or bytes a call (or the calls of one batch) may read
    /// or write.
    State,
    /// Bytes or lines one call may write to stdout and stderr.
    Log,
}

/// Tables a guest may grow to: far above what compiled languages use, low
/// enough that a runaway table cannot take the host's memory.
const MAX_TABLE_ELEMENTS: usize = 1_000_000;

/// Caps one instance's linear memory, and remembers whether it was hit.
pub struct MemoryLimiter {
    max_bytes: usize,
    /// Size the guest tried to grow to past the limit, if it did.
    pub exceeded: Option<usize>,
    /// Size of the instance's largest linear memory.
    pub largest: usize,
    /// `largest` when the instance's first call ended.
    after_first_call: Option<usize>,
}

impl MemoryLimiter {
    /// A limiter allowing `max_bytes` of linear memory.
    pub fn new(max_bytes: u64) -> MemoryLimiter {
        MemoryLimiter {
            max_bytes: usize::try_from(max_bytes).unwrap_or(usize::MAX),
            exceeded: None,
            largest: 0,
            after_first_call: None,
        }
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.max_bytes {
            self.exceeded = Some(desired);
            // Trap rather than fail the growth: a guest's allocator would
            // abort anyway, with a less helpful message.
            wasmtime::bail!("memory limit of {} MiB exceeded", self.max_bytes >> 20);
        }
        self.largest = self.largest.max(desired);
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}

impl MemoryLimiter {
    /// Notes the end of a call.
    pub fn call_ended(&mut self) {
        self.after_first_call.get_or_insert(self.largest);
    }

    /// Whether the instance is better replaced by a fresh one before its
    /// next call: its memory passed three quarters of the limit, or grew by
    /// a quarter of the limit since its first call. A garbage-collected
    /// language's heap grows from call to call without being given back
    /// (the JavaScript word count's by about 5 MiB a batch of 10,000), and
    /// a fresh instance, made from the component's initial memory, holds
    /// a fraction of it; a guest that needs a large memory in every call
    /// has it from its first call on, and keeps its instance.
    pub fn should_replace(&self) -> bool {
        let grown = self.after_first_call.map_or(0, |first| self.largest.saturating_sub(first));
        self.largest > self.max_bytes / 4 * 3 || grown > self.max_bytes / 4
    }
}

/// Epoch ticks a call of `call_ms` milliseconds may run for.
pub fn deadline_ticks(call_ms: u64) -> u64 {
    call_ms.div_ceil(EPOCH_TICK.as_millis() as u64).max(1)
}

/// The wall-clock time after which a call of `call_ms` milliseconds of CPU
/// time is abandoned; `None` when calls are not limited in time
/// (`--max-call-ms 0`).
pub fn call_deadline(call_ms: u64) -> Option<Duration> {
    (call_ms > 0).then(|| Duration::from_millis(call_ms.saturating_mul(CALL_DEADLINE_FACTOR)))
}

/// Advances `engine`'s epoch every [`EPOCH_TICK`] on a thread of its own,
/// outside any async runtime, until the engine is dropped. Guests run on
/// their own threads too, so a spinning guest never starves the host's other
/// work; the epoch only bounds how long one call may spin.
pub fn start_epoch_ticker(engine: &Engine) -> Result<()> {
    let weak = engine.weak();
    let spawned = std::thread::Builder::new().name("weir-epoch".into()).spawn(move || {
        loop {
            std::thread::sleep(EPOCH_TICK);
            match weak.upgrade() {
                Some(engine) => engine.increment_epoch(),
                None => return,
            }
        }
    });
    if let Err(e) = spawned {
        bail!("cannot start the epoch ticker: {e}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    fn grow(limiter: &mut MemoryLimiter, mib: usize) {
        assert!(limiter.memory_growing(limiter.largest, mib * MIB, None).unwrap());
    }

    #[test]
    fn an_instance_is_replaced_once_it_grew_a_quarter_of_the_limit_since_its_first_call_or_passed_three_quarters() {
        // A heap that grows 5 MiB a call from 10 MiB after the first.
        let mut growing = MemoryLimiter::new(64 << 20);
        grow(&mut growing, 8);
        assert!(!growing.should_replace(), "instantiated");
        for (mib, replace) in [(10, false), (15, false), (20, false), (26, false), (27, true)] {
            grow(&mut growing, mib);
            growing.call_ended();
            assert_eq!(growing.should_replace(), replace, "at {mib} MiB");
        }
        // A large memory from the first call on is kept, up to three
        // quarters of the limit.
        let mut large = MemoryLimiter::new(64 << 20);
        grow(&mut large, 40);
        large.call_ended();
        for (mib, replace) in [(40, false), (48, false), (49, true)] {
            grow(&mut large, mib);
            large.call_ended();
            assert_eq!(large.should_replace(), replace, "at {mib} MiB");
        }
    }
}

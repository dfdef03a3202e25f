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

/// Table elements an instance may have, all its tables together: far
/// above what compiled languages use (the Python guest's interpreter has
/// two tables), low enough that a runaway table cannot take the host's
/// memory.
const MAX_TABLE_ELEMENTS: usize = 1_000_000;

/// Core instances, linear memories and tables an operator instance may
/// create. The Python guest's component instantiates 14 core modules with
/// one memory and two tables between them; each instance holds host memory
/// of its own (its globals and tables, up to megabytes) and each memory an
/// address-space reservation, so a component of thousands (Wasmtime
/// allows 10,000 of each) could take the host's memory or address space.
const MAX_CORE_INSTANCES: usize = 64;
const MAX_MEMORIES: usize = 8;
const MAX_TABLES: usize = 32;

/// Caps one instance's linear memory, all its memories together, and
/// remembers whether it was hit.
pub struct MemoryLimiter {
    max_bytes: usize,
    /// Size the guest tried to grow its memories to past the limit, if it did.
    pub exceeded: Option<usize>,
    /// Bytes of the instance's linear memories, added up.
    pub memory: usize,
    /// `memory` when the instance's first call ended.
    after_first_call: Option<usize>,
    /// Elements of the instance's tables, added up.
    table_elements: usize,
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        if maximum.is_some_and(|maximum| desired > maximum) {
            // Past the memory's own maximum: Wasmtime refuses the growth.
            return Ok(false);
        }
        // Saturating: a memory whose minimum overflows asks for the most.
        let memory = (self.memory - current).saturating_add(desired);
        if memory > self.max_bytes {
            self.exceeded = Some(memory);
            // Trap rather than fail the growth: a guest's allocator would
            // abort anyway, with a less helpful message.
            wasmtime::bail!("memory limit of {} MiB exceeded", self.max_bytes >> 20);
        }
        self.memory = memory;
        Ok(true)
    }

    fn table_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        let elements = (self.table_elements - current).saturating_add(desired);
        if maximum.is_some_and(|maximum| desired > maximum) || elements > MAX_TABLE_ELEMENTS {
            return Ok(false);
        }
        self.table_elements = elements;
        Ok(true)
    }

    fn instances(&self) -> usize {
        MAX_CORE_INSTANCES
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES
    }

    fn tables(&self) -> usize {
        MAX_TABLES
    }
}

impl MemoryLimiter {
    /// A limiter allowing `max_bytes` of linear memory.
    pub fn new(max_bytes: u64) -> MemoryLimiter {
        MemoryLimiter {
            max_bytes: usize::try_from(max_bytes).unwrap_or(usize::MAX),
            exceeded: None,
            memory: 0,
            after_first_call: None,
            table_elements: 0,
        }
    }

    /// Notes the end of a call.
    pub fn call_ended(&mut self) {
        self.after_first_call.get_or_insert(self.memory);
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
        let grown = self.after_first_call.map_or(0, |first| self.memory.saturating_sub(first));
        self.memory > self.max_bytes / 4 * 3 || grown > self.max_bytes / 4
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
        assert!(limiter.memory_growing(limiter.memory, mib * MIB, None).unwrap());
    }

    /// A core module of `memories` memories of `pages` pages each and
    /// `tables` funcref tables of `elements` elements each.
    fn module(memories: usize, pages: usize, tables: usize, elements: usize) -> Vec<u8> {
        fn leb(mut n: usize, out: &mut Vec<u8>) {
            while n >= 0x80 {
                out.push((n as u8 & 0x7f) | 0x80);
                n >>= 7;
            }
            out.push(n as u8);
        }
        let mut module = b"\0asm\x01\0\0\0".to_vec();
        for (id, count, entry_prefix, size) in
            [(4u8, tables, &[0x70u8, 0][..], elements), (5, memories, &[0][..], pages)]
        {
            let mut payload = Vec::new();
            leb(count, &mut payload);
            for _ in 0..count {
                payload.extend(entry_prefix);
                leb(size, &mut payload);
            }
            module.push(id);
            leb(payload.len(), &mut module);
            module.extend(payload);
        }
        module
    }

    /// Instantiates `wasm` `times` times in one store under a 64 MiB limit;
    /// the first error, if any.
    fn instantiate(wasm: &[u8], times: usize) -> Option<String> {
        let engine = Engine::default();
        let module = wasmtime::Module::new(&engine, wasm).unwrap();
        let mut store = wasmtime::Store::new(&engine, MemoryLimiter::new(64 << 20));
        store.limiter(|limiter| limiter);
        (0..times).find_map(|_| wasmtime::Instance::new(&mut store, &module, &[]).err().map(|e| format!("{e:#}")))
    }

    #[test]
    fn an_instance_is_held_to_its_limits_across_all_its_memories_tables_and_core_instances() {
        // 40 MiB is within the limit; two memories of 40 MiB are not.
        assert_eq!(instantiate(&module(1, 640, 0, 0), 1), None);
        let error = instantiate(&module(2, 640, 0, 0), 1).unwrap();
        assert!(error.contains("memory limit of 64 MiB exceeded"), "{error}");
        // Nor are two instances of one 40 MiB memory each, in one store.
        let error = instantiate(&module(1, 640, 0, 0), 2).unwrap();
        assert!(error.contains("memory limit of 64 MiB exceeded"), "{error}");
        let error = instantiate(&module(MAX_MEMORIES + 1, 0, 0, 0), 1).unwrap();
        assert!(error.contains("memory count too high"), "{error}");
        // Tables: their elements added up, and their number.
        assert_eq!(instantiate(&module(0, 0, 1, 600_000), 1), None);
        let error = instantiate(&module(0, 0, 2, 600_000), 1).unwrap();
        assert!(error.contains("table"), "{error}");
        let error = instantiate(&module(0, 0, MAX_TABLES + 1, 1), 1).unwrap();
        assert!(error.contains("table count too high"), "{error}");
        // Core instances.
        assert_eq!(instantiate(&module(0, 0, 0, 0), MAX_CORE_INSTANCES), None);
        let error = instantiate(&module(0, 0, 0, 0), MAX_CORE_INSTANCES + 1).unwrap();
        assert!(error.contains("instance count too high"), "{error}");
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

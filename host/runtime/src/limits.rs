//! The limits a guest instance runs under: memory through a resource
//! limiter, CPU time through epoch interruption, and a deadline on every
//! call, however the guest spends it.

use super::memory_pool::{HOST_MEMORY, MemoryExceeded, MemoryPool, TopologyMemory};
use anyhow::{Result, bail};
use std::time::Duration;
use wasmtime::{Engine, ResourceLimiter};
use weir_config::{CALL_DEADLINE_FACTOR, EPOCH_TICK};

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

/// Caps one instance's linear memory, all its memories together, draws it
/// from its topology's pool and the host's, and remembers which limit it
/// met.
pub struct MemoryLimiter {
    max_bytes: usize,
    /// The limit the guest's last growth met, if it met one.
    pub exceeded: Option<MemoryExceeded>,
    /// Bytes of the instance's linear memories, added up.
    pub memory: usize,
    /// `memory` when the instance's first call ended.
    after_first_call: Option<usize>,
    /// Elements of the instance's tables, added up.
    table_elements: usize,
    topology: TopologyMemory,
    host: &'static MemoryPool,
    /// `memory` before the last growth, which Wasmtime may yet fail.
    before_growth: usize,
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        if maximum.is_some_and(|maximum| desired > maximum) {
            // Past the memory's own maximum: Wasmtime refuses the growth.
            return Ok(false);
        }
        // Saturating: a memory whose minimum overflows asks for the most.
        let memory = (self.memory - current).saturating_add(desired);
        let more = memory.saturating_sub(self.memory);
        let exceeded = if memory > self.max_bytes {
            Some(MemoryExceeded::Instance { limit: self.max_bytes, would: memory })
        } else if let Err(would) = self.topology.pool().take(more) {
            Some(MemoryExceeded::Topology { limit: self.topology.pool().limit(), would })
        } else if let Err(would) = self.host.take(more) {
            self.topology.pool().give_back(more);
            Some(MemoryExceeded::Host { limit: self.host.limit(), would })
        } else {
            None
        };
        if let Some(exceeded) = exceeded {
            self.exceeded = Some(exceeded);
            // Trap rather than fail the growth: a guest's allocator would
            // abort anyway, with a less helpful message.
            wasmtime::bail!("{exceeded}");
        }
        (self.before_growth, self.memory) = (self.memory, memory);
        Ok(true)
    }

    fn memory_grow_failed(&mut self, _error: wasmtime::Error) -> wasmtime::Result<()> {
        // Allowed above, then failed in Wasmtime (no address space left):
        // the pools get back what the growth took.
        let taken = self.memory - self.before_growth;
        self.give_back(taken);
        self.memory = self.before_growth;
        Ok(())
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
    /// A limiter allowing `max_bytes` of linear memory, drawn from
    /// `topology`'s pool and the host's.
    pub fn new(max_bytes: u64, topology: TopologyMemory) -> MemoryLimiter {
        MemoryLimiter::drawing_on(max_bytes, topology, &HOST_MEMORY)
    }

    /// [`MemoryLimiter::new`] with `host` for the host's pool.
    fn drawing_on(max_bytes: u64, topology: TopologyMemory, host: &'static MemoryPool) -> MemoryLimiter {
        MemoryLimiter {
            max_bytes: usize::try_from(max_bytes).unwrap_or(usize::MAX),
            exceeded: None,
            memory: 0,
            after_first_call: None,
            table_elements: 0,
            topology,
            host,
            before_growth: 0,
        }
    }

    fn give_back(&self, bytes: usize) {
        self.topology.pool().give_back(bytes);
        self.host.give_back(bytes);
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

/// The instance's memory goes back to the pools with its store.
impl Drop for MemoryLimiter {
    fn drop(&mut self) {
        self.give_back(self.memory);
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

    fn unpooled() -> TopologyMemory {
        TopologyMemory::new(u64::MAX)
    }

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
        let mut store = wasmtime::Store::new(&engine, MemoryLimiter::new(64 << 20, unpooled()));
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
        let mut growing = MemoryLimiter::new(64 << 20, unpooled());
        grow(&mut growing, 8);
        assert!(!growing.should_replace(), "instantiated");
        for (mib, replace) in [(10, false), (15, false), (20, false), (26, false), (27, true)] {
            grow(&mut growing, mib);
            growing.call_ended();
            assert_eq!(growing.should_replace(), replace, "at {mib} MiB");
        }
        // A large memory from the first call on is kept, up to three
        // quarters of the limit.
        let mut large = MemoryLimiter::new(64 << 20, unpooled());
        grow(&mut large, 40);
        large.call_ended();
        for (mib, replace) in [(40, false), (48, false), (49, true)] {
            grow(&mut large, mib);
            large.call_ended();
            assert_eq!(large.should_replace(), replace, "at {mib} MiB");
        }
    }

    #[test]
    fn instances_draw_their_memory_from_their_topologys_pool_and_the_hosts_and_give_it_back() {
        let host: &'static MemoryPool = Box::leak(Box::new(MemoryPool::with_limit(150 * MIB)));
        let (a, b) = (TopologyMemory::new(100 << 20), TopologyMemory::new(100 << 20));
        let limiter = |topology: &TopologyMemory| MemoryLimiter::drawing_on(64 << 20, topology.clone(), host);
        let growth = |limiter: &mut MemoryLimiter, mib: usize| {
            limiter.memory_growing(limiter.memory, mib * MIB, None).map_err(|e| (e.to_string(), limiter.exceeded))
        };
        let mut a1 = limiter(&a);
        let mut a2 = limiter(&a);
        grow(&mut a1, 60);
        let (error, exceeded) = growth(&mut a2, 50).unwrap_err();
        assert_eq!(exceeded, Some(MemoryExceeded::Topology { limit: 100 * MIB, would: 110 * MIB }));
        assert!(error.contains("--max-topology-memory-mib"), "{error}");
        assert_eq!((a.pool().used(), host.used()), (60 * MIB, 60 * MIB), "a refused growth takes nothing");
        grow(&mut a2, 40);
        // Topology b is within its own pool, but the host's is spent.
        let mut b1 = limiter(&b);
        let (error, exceeded) = growth(&mut b1, 60).unwrap_err();
        assert_eq!(exceeded, Some(MemoryExceeded::Host { limit: 150 * MIB, would: 160 * MIB }));
        assert!(error.contains("--max-guest-memory-mib"), "{error}");
        assert_eq!(b.pool().used(), 0, "the topology's pool gets back what the host's refused");
        // A dropped instance gives its memory back to both pools.
        drop(a1);
        assert_eq!((a.pool().used(), host.used()), (40 * MIB, 40 * MIB));
        grow(&mut b1, 60);
        assert_eq!(growth(&mut b1, 64).map_err(|(_, e)| e), Ok(true));
        drop((a2, b1));
        assert_eq!((a.pool().used(), b.pool().used(), host.used()), (0, 0, 0));
    }

    #[test]
    fn instances_in_stores_of_their_own_share_their_topologys_pool() {
        let engine = Engine::default();
        let module = wasmtime::Module::new(&engine, module(1, 640, 0, 0)).unwrap();
        let topology = TopologyMemory::new(64 << 20);
        let instantiate = || {
            let mut store = wasmtime::Store::new(&engine, MemoryLimiter::new(64 << 20, topology.clone()));
            store.limiter(|limiter| limiter);
            wasmtime::Instance::new(&mut store, &module, &[]).map(|_| store).map_err(|e| format!("{e:#}"))
        };
        let first = instantiate().expect("40 MiB within the topology's 64");
        let error = instantiate().err().expect("another 40 MiB is past it");
        assert!(error.contains("the topology's memory limit of 64 MiB exceeded"), "{error}");
        drop(first);
        assert!(instantiate().is_ok(), "the first store's memory went back to the pool");
    }
}

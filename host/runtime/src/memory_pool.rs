//! Linear memory shared out among guest instances. Each instance is held
//! to `--max-memory-mib`, but a topology may have a thousand instances
//! and a host many topologies: every instance's memory is also drawn from
//! its topology's pool (`--max-topology-memory-mib`) and from the host's
//! (`--max-guest-memory-mib`), so that neither many operators nor many
//! deployments, each instance within its own limit, can take the memory
//! the host needs.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Bytes of linear memory that instances may hold together.
#[derive(Debug)]
pub struct MemoryPool {
    limit: AtomicUsize,
    used: AtomicUsize,
}

/// The pool of every instance of this process.
pub static HOST_MEMORY: MemoryPool = MemoryPool::with_limit(usize::MAX);

impl MemoryPool {
    /// A pool of `limit` bytes, none of them taken.
    pub const fn with_limit(limit: usize) -> MemoryPool {
        MemoryPool { limit: AtomicUsize::new(limit), used: AtomicUsize::new(0) }
    }

    /// Sets the pool's limit; what instances hold already stays theirs.
    pub fn set_limit(&self, limit: usize) {
        self.limit.store(limit, Ordering::Relaxed);
    }

    /// The pool's limit, in bytes.
    pub fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    /// Bytes the instances drawing from the pool hold.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Takes `bytes` from the pool; where that would pass its limit, takes
    /// nothing and returns what the pool's instances would then hold.
    pub fn take(&self, bytes: usize) -> Result<(), usize> {
        let limit = self.limit();
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&after| after <= limit)
            })
            .map(|_| ())
            .map_err(|used| used.saturating_add(bytes))
    }

    /// Gives back `bytes` taken before.
    pub fn give_back(&self, bytes: usize) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
    }
}

/// A topology's pool, shared by its operators' sandboxes.
#[derive(Clone, Debug)]
pub struct TopologyMemory(Arc<MemoryPool>);

impl TopologyMemory {
    /// A pool of `limit` bytes for one topology's instances.
    pub fn new(limit: u64) -> TopologyMemory {
        TopologyMemory(Arc::new(MemoryPool::with_limit(usize::try_from(limit).unwrap_or(usize::MAX))))
    }

    /// The pool itself.
    pub fn pool(&self) -> &MemoryPool {
        &self.0
    }
}

/// Sandboxes are compared by their limits: two pools of one limit are
/// alike, whatever they hold.
impl PartialEq for TopologyMemory {
    fn eq(&self, other: &TopologyMemory) -> bool {
        self.0.limit() == other.0.limit()
    }
}

impl Eq for TopologyMemory {}

/// Why an instance could not grow its memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryExceeded {
    /// Its own memories would have held `would` bytes, past `limit`.
    Instance { limit: usize, would: usize },
    /// Its topology's instances would have held `would` bytes.
    Topology { limit: usize, would: usize },
    /// The host's instances would have held `would` bytes.
    Host { limit: usize, would: usize },
}

impl fmt::Display for MemoryExceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mib = |bytes: usize| bytes as f64 / f64::from(1 << 20);
        match *self {
            MemoryExceeded::Instance { limit, would } => write!(
                f,
                "memory limit of {} MiB exceeded (the guest tried to grow its memory to {:.1} MiB)",
                limit >> 20,
                mib(would)
            ),
            MemoryExceeded::Topology { limit, would } => write!(
                f,
                "the topology's memory limit of {} MiB exceeded: its operator instances would hold {:.1} MiB of \
                 linear memory together (--max-topology-memory-mib)",
                limit >> 20,
                mib(would)
            ),
            MemoryExceeded::Host { limit, would } => write!(
                f,
                "this host's memory limit for guests of {} MiB exceeded: the instances of all its topologies \
                 would hold {:.1} MiB of linear memory together (--max-guest-memory-mib)",
                limit >> 20,
                mib(would)
            ),
        }
    }
}

/// The host pool's default limit: half of this machine's memory, as
/// `/proc/meminfo` gives it (8 GiB where it cannot be read).
pub fn default_host_limit_mib() -> u64 {
    let total_kib = std::fs::read_to_string("/proc/meminfo").ok().and_then(|info| {
        let line = info.lines().find(|line| line.starts_with("MemTotal:"))?;
        line.split_whitespace().nth(1)?.parse::<u64>().ok()
    });
    total_kib.map_or(8 << 10, |kib| (kib >> 10) / 2).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_gives_out_up_to_its_limit_and_takes_back_what_it_gave() {
        let pool = MemoryPool::with_limit(100);
        assert_eq!(pool.take(60), Ok(()));
        assert_eq!(pool.take(50), Err(110));
        assert_eq!(pool.used(), 60, "a refused take takes nothing");
        assert_eq!(pool.take(40), Ok(()));
        pool.give_back(60);
        assert_eq!(pool.take(usize::MAX), Err(usize::MAX));
        assert_eq!(pool.take(60), Ok(()));
        assert_eq!(pool.used(), 100);
    }
}

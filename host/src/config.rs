//! Defaults, written once: the CLI's `--help`, the docs and the code read them here.

/// Sentences (spout tuples) per batch, unless `--batch-size` says otherwise.
/// Large enough that the per-batch costs (a durable commit, one call per
/// operator) are spread thin; small enough to keep a batch's memory modest.
pub const DEFAULT_BATCH_SIZE: usize = 1000;

/// Batches processing at once, unless `--max-pending` says otherwise: one
/// committing while the next ones are processed.
pub const DEFAULT_MAX_PENDING: usize = 4;

/// Attempts a batch gets before the topology halts (Trident retries forever;
/// a poison batch here stops the run with its error instead).
pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;

/// Wait before the first replay of a failed batch, in milliseconds; each
/// further attempt waits twice as long, up to [`MAX_RETRY_BACKOFF`].
pub const DEFAULT_RETRY_BACKOFF_MS: u64 = 50;

/// The longest wait between two attempts of a batch.
pub const MAX_RETRY_BACKOFF: std::time::Duration = std::time::Duration::from_secs(5);

/// Time a batch may take from being handed to the process phase until it
/// is processed, in milliseconds; past it the batch fails and is replayed.
pub const DEFAULT_BATCH_TIMEOUT_MS: u64 = 60_000;

/// How a run cuts and pipelines its batches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunConfig {
    /// Spout tuples per batch.
    pub batch_size: usize,
    /// Batches processing at once.
    pub max_pending: usize,
    /// Attempts per batch before the topology halts.
    pub max_attempts: u32,
    /// Wait before the first replay; doubled for each later attempt.
    pub retry_backoff: std::time::Duration,
    /// Time a batch may take to be processed.
    pub batch_timeout: std::time::Duration,
    /// Keep running when the spout has nothing more, asking it again at this
    /// interval, until stopped (a served topology); `None` ends the run.
    pub follow: Option<std::time::Duration>,
}

impl RunConfig {
    /// The wait before replaying a batch whose attempt `attempt` failed.
    pub fn backoff(&self, attempt: u32) -> std::time::Duration {
        self.retry_backoff.saturating_mul(1 << attempt.min(20)).min(MAX_RETRY_BACKOFF)
    }
}

impl Default for RunConfig {
    fn default() -> RunConfig {
        RunConfig {
            batch_size: DEFAULT_BATCH_SIZE,
            max_pending: DEFAULT_MAX_PENDING,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            retry_backoff: std::time::Duration::from_millis(DEFAULT_RETRY_BACKOFF_MS),
            batch_timeout: std::time::Duration::from_millis(DEFAULT_BATCH_TIMEOUT_MS),
            follow: None,
        }
    }
}

/// Largest linear memory an operator instance may have, in MiB, unless the
/// host is configured otherwise (`--max-memory-mib`).
pub const DEFAULT_MAX_MEMORY_MIB: u64 = 64;

/// CPU time one operator call may take, in milliseconds (`--max-call-ms`).
/// A call handles a whole batch: word count spends about a millisecond on
/// 10,000 sentences, so this only stops a guest that has lost its way.
pub const DEFAULT_MAX_CALL_MS: u64 = 10_000;

/// A call's deadline, in multiples of its CPU time limit: a call still
/// running then (its guest blocked in a host call, a WASI sleep or poll,
/// where the CPU limit cannot fire) is abandoned and its instance dropped.
pub const CALL_DEADLINE_FACTOR: u64 = 2;

/// Bytes one operator call may return, in MiB (`--max-output-mib`).
pub const DEFAULT_MAX_OUTPUT_MIB: u64 = 32;

/// Tuples one operator call may emit (`--max-output-tuples`).
pub const DEFAULT_MAX_OUTPUT_TUPLES: u64 = 10_000_000;

/// How often the host checks a running guest against its CPU time limit.
pub const EPOCH_TICK: std::time::Duration = std::time::Duration::from_millis(10);

/// The most any operator of this host may get; topologies may ask for less.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxConfig {
    /// Linear memory per instance, in MiB.
    pub max_memory_mib: u64,
    /// CPU time per call, in milliseconds.
    pub max_call_ms: u64,
    /// Bytes a call may return, in MiB.
    pub max_output_mib: u64,
    /// Tuples a call may emit.
    pub max_output_tuples: u64,
    /// Directories (and everything under them) operators may be granted
    /// read-only access to. Empty: no filesystem access at all.
    pub allowed_dirs: Vec<std::path::PathBuf>,
}

impl Default for SandboxConfig {
    fn default() -> SandboxConfig {
        SandboxConfig {
            max_memory_mib: DEFAULT_MAX_MEMORY_MIB,
            max_call_ms: DEFAULT_MAX_CALL_MS,
            max_output_mib: DEFAULT_MAX_OUTPUT_MIB,
            max_output_tuples: DEFAULT_MAX_OUTPUT_TUPLES,
            allowed_dirs: Vec::new(),
        }
    }
}

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

/// How a run cuts and pipelines its batches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunConfig {
    /// Spout tuples per batch.
    pub batch_size: usize,
    /// Batches processing at once.
    pub max_pending: usize,
    /// Attempts per batch before the topology halts.
    pub max_attempts: u32,
}

impl Default for RunConfig {
    fn default() -> RunConfig {
        RunConfig {
            batch_size: DEFAULT_BATCH_SIZE,
            max_pending: DEFAULT_MAX_PENDING,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
        }
    }
}

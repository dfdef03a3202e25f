//! The flags that bound what a guest can make the host hold, shared by
//! `weir run` and `weir serve`.

use clap::Args;
use weir::config::{
    DEFAULT_MAX_BATCH_STATE_READ_MIB, DEFAULT_MAX_BATCH_STATE_READS, DEFAULT_MAX_BATCH_STATE_WRITE_MIB,
    DEFAULT_MAX_BATCH_STATE_WRITES, DEFAULT_MAX_CALL_STATE_READ_MIB, DEFAULT_MAX_CALL_STATE_READS,
    DEFAULT_MAX_CALL_STATE_WRITE_MIB, DEFAULT_MAX_CALL_STATE_WRITES, DEFAULT_MAX_LOG_KIB, DEFAULT_MAX_LOG_LINES,
    DEFAULT_MAX_STATE_CACHE_MIB, LogLimits, StateLimits, StateQuota,
};

const MIB: u64 = 1 << 20;

#[derive(Args, Debug)]
pub struct HoldLimitArgs {
    /// State entries one operator call may read (keys asked for); past it
    /// the call traps.
    #[arg(long, default_value_t = DEFAULT_MAX_CALL_STATE_READS, value_parser = clap::value_parser!(u64).range(1..))]
    max_call_state_reads: u64,
    /// Bytes one operator call may read from states (keys and values), in MiB.
    #[arg(long, default_value_t = DEFAULT_MAX_CALL_STATE_READ_MIB, value_parser = clap::value_parser!(u64).range(1..))]
    max_call_state_read_mib: u64,
    /// State entries one operator call may write.
    #[arg(long, default_value_t = DEFAULT_MAX_CALL_STATE_WRITES, value_parser = clap::value_parser!(u64).range(1..))]
    max_call_state_writes: u64,
    /// Bytes one operator call may write to states (keys and values), in MiB.
    #[arg(long, default_value_t = DEFAULT_MAX_CALL_STATE_WRITE_MIB, value_parser = clap::value_parser!(u64).range(1..))]
    max_call_state_write_mib: u64,
    /// State entries the operator calls of one batch (or one query) may
    /// read, all together.
    #[arg(long, default_value_t = DEFAULT_MAX_BATCH_STATE_READS, value_parser = clap::value_parser!(u64).range(1..))]
    max_batch_state_reads: u64,
    /// Bytes the operator calls of one batch may read from states, in MiB.
    #[arg(long, default_value_t = DEFAULT_MAX_BATCH_STATE_READ_MIB, value_parser = clap::value_parser!(u64).range(1..))]
    max_batch_state_read_mib: u64,
    /// State entries the operator calls of one batch may write, all together.
    #[arg(long, default_value_t = DEFAULT_MAX_BATCH_STATE_WRITES, value_parser = clap::value_parser!(u64).range(1..))]
    max_batch_state_writes: u64,
    /// Bytes the operator calls of one batch may write to states, in MiB:
    /// what the host holds for the batch until it commits.
    #[arg(long, default_value_t = DEFAULT_MAX_BATCH_STATE_WRITE_MIB, value_parser = clap::value_parser!(u64).range(1..))]
    max_batch_state_write_mib: u64,
    /// Bytes of committed values cached per state, in MiB, whatever number
    /// of entries the topology asks to cache.
    #[arg(long, default_value_t = DEFAULT_MAX_STATE_CACHE_MIB)]
    max_state_cache_mib: u64,
    /// Bytes one operator call may write to stdout and stderr together, in
    /// KiB; past it the call traps.
    #[arg(long, default_value_t = DEFAULT_MAX_LOG_KIB, value_parser = clap::value_parser!(u64).range(1..))]
    max_log_kib: u64,
    /// Lines one operator call may write to stdout and stderr together.
    #[arg(long, default_value_t = DEFAULT_MAX_LOG_LINES, value_parser = clap::value_parser!(u64).range(1..))]
    max_log_lines: u64,
}

impl HoldLimitArgs {
    /// The state limits these flags set.
    pub fn state(&self) -> StateLimits {
        StateLimits {
            per_call: StateQuota {
                read_entries: self.max_call_state_reads,
                read_bytes: self.max_call_state_read_mib.saturating_mul(MIB),
                write_entries: self.max_call_state_writes,
                write_bytes: self.max_call_state_write_mib.saturating_mul(MIB),
            },
            per_batch: StateQuota {
                read_entries: self.max_batch_state_reads,
                read_bytes: self.max_batch_state_read_mib.saturating_mul(MIB),
                write_entries: self.max_batch_state_writes,
                write_bytes: self.max_batch_state_write_mib.saturating_mul(MIB),
            },
            cache_bytes: self.max_state_cache_mib.saturating_mul(MIB),
        }
    }

    /// The log limits these flags set.
    pub fn log(&self) -> LogLimits {
        LogLimits { bytes: self.max_log_kib.saturating_mul(1 << 10), lines: self.max_log_lines }
    }
}

//! The flags that bound what a guest may ask of the host, shared by the
//! verbs that load topologies: caps on a topology's description (`run`,
//! `serve`, `query`, `inspect`, `bundle`), and an operator's sandbox and
//! what a guest can make the host hold (`run`, `serve`).

use clap::Args;
use clap::builder::RangedU64ValueParser;
use std::path::PathBuf;
use weir_config::{
    DEFAULT_MAX_BATCH_STATE_READ_MIB, DEFAULT_MAX_BATCH_STATE_READS, DEFAULT_MAX_BATCH_STATE_WRITE_MIB,
    DEFAULT_MAX_BATCH_STATE_WRITES, DEFAULT_MAX_CALL_STATE_READ_MIB, DEFAULT_MAX_CALL_STATE_READS,
    DEFAULT_MAX_CALL_STATE_WRITE_MIB, DEFAULT_MAX_CALL_STATE_WRITES, DEFAULT_MAX_DB_CACHE_MIB, DEFAULT_MAX_LOG_KIB,
    DEFAULT_MAX_LOG_LINES, DEFAULT_MAX_STATE_CACHE_MIB, DEFAULT_MAX_TOPOLOGY_MEMORY_MIB, LogLimits, StateLimits,
    StateQuota,
};
use weir_config::{
    DEFAULT_MAX_CALL_MS, DEFAULT_MAX_MEMORY_MIB, DEFAULT_MAX_OUTPUT_MIB, DEFAULT_MAX_OUTPUT_TUPLES, SandboxConfig,
};
use weir_config::{
    DEFAULT_MAX_FIELDS, DEFAULT_MAX_INSTANCES, DEFAULT_MAX_NAME_LEN, DEFAULT_MAX_NODE_FIELDS, DEFAULT_MAX_NODES,
    DEFAULT_MAX_PARALLELISM, DEFAULT_MAX_QUERIES, DEFAULT_MAX_STATE_CACHE, DEFAULT_MAX_STATES, TopologyLimits,
};

const MIB: u64 = 1 << 20;

#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Caps on a topology's description (a topology over one is refused at load)")]
pub struct TopologyLimitArgs {
    /// Nodes (operations) a topology's stream graph may have; the inputs of
    /// all its nodes together are held to the same number.
    #[arg(long, default_value_t = DEFAULT_MAX_NODES, value_parser = positive())]
    max_nodes: usize,
    /// Fields one node's tuples may have, and names (fields, aggregators)
    /// one operation may list.
    #[arg(long, default_value_t = DEFAULT_MAX_NODE_FIELDS, value_parser = positive())]
    max_node_fields: usize,
    /// Fields of every node's tuples, added up over the graph.
    #[arg(long, default_value_t = DEFAULT_MAX_FIELDS, value_parser = positive())]
    max_fields: usize,
    /// Bytes of a topology, operator, state, query or field name. Names are
    /// ASCII letters, digits, '-', '_' and '.', not starting with '.'.
    #[arg(long, default_value_t = DEFAULT_MAX_NAME_LEN, value_parser = positive())]
    max_name_len: usize,
    /// States a topology may have.
    #[arg(long, default_value_t = DEFAULT_MAX_STATES, value_parser = positive())]
    max_states: usize,
    /// Query streams a topology may have.
    #[arg(long, default_value_t = DEFAULT_MAX_QUERIES, value_parser = positive())]
    max_queries: usize,
    /// Instances of one operator that may run at once, each on a thread of
    /// its own: the cap on --parallelism and on every parallelism_hint.
    #[arg(long, default_value_t = DEFAULT_MAX_PARALLELISM, value_parser = clap::value_parser!(u32).range(1..))]
    max_parallelism: u32,
    /// Guest operator instances a topology may run in all (each guest
    /// operator once per partition).
    #[arg(long, default_value_t = DEFAULT_MAX_INSTANCES, value_parser = positive())]
    max_instances: usize,
    /// Entries a state may ask the host to keep cached.
    #[arg(long, default_value_t = DEFAULT_MAX_STATE_CACHE)]
    max_state_cache: usize,
}

/// A count of at least one.
fn positive() -> RangedU64ValueParser<usize> {
    RangedU64ValueParser::new().range(1..)
}

impl TopologyLimitArgs {
    /// The caps these flags set.
    pub fn limits(&self) -> TopologyLimits {
        TopologyLimits {
            max_nodes: self.max_nodes,
            max_node_fields: self.max_node_fields,
            max_fields: self.max_fields,
            max_name_len: self.max_name_len,
            max_states: self.max_states,
            max_queries: self.max_queries,
            max_parallelism: self.max_parallelism,
            max_instances: self.max_instances,
            max_state_cache: self.max_state_cache,
        }
    }
}

/// An operator instance's sandbox, and what guests may make the host hold.
#[derive(Args, Debug)]
pub struct SandboxArgs {
    /// Linear memory of an operator instance, all its memories together, in
    /// MiB. Topologies may ask for less; one asking for more is refused.
    #[arg(long, default_value_t = DEFAULT_MAX_MEMORY_MIB, value_parser = clap::value_parser!(u64).range(1..))]
    max_memory_mib: u64,
    /// CPU time one operator call (a whole batch) may take, in milliseconds;
    /// a call still blocked in a host call (a WASI sleep or poll) at twice
    /// this time is abandoned. 0 runs without either limit (and without the
    /// CPU limit's small cost).
    #[arg(long, default_value_t = DEFAULT_MAX_CALL_MS)]
    max_call_ms: u64,
    /// Bytes one operator call may return, in MiB.
    #[arg(long, default_value_t = DEFAULT_MAX_OUTPUT_MIB, value_parser = clap::value_parser!(u64).range(1..))]
    max_output_mib: u64,
    /// Tuples one operator call may emit.
    #[arg(long, default_value_t = DEFAULT_MAX_OUTPUT_TUPLES, value_parser = clap::value_parser!(u64).range(1..))]
    max_output_tuples: u64,
    /// A directory operators may be granted read-only access to (the
    /// topology asks for it per operator). Repeatable; without it guests get
    /// no filesystem at all.
    #[arg(long)]
    allow_dir: Vec<PathBuf>,
    /// Limits on what guests may read and write through states and log.
    #[command(flatten)]
    hold: HoldLimitArgs,
}

impl SandboxArgs {
    /// Opens the state database of `data`, with its pages cached as
    /// --max-db-cache-mib says, each topology's states bounded by
    /// --max-state-mib and all of them by `total_mib`.
    pub fn open_db(&self, data: &std::path::Path, total_mib: Option<u64>) -> anyhow::Result<weir_state::Db> {
        let mut db = weir_state::Db::open_caching(data, self.hold.max_db_cache_mib.saturating_mul(MIB))?;
        db.limit_state_size(weir_state::size::SizeLimits {
            per_topology: self.hold.max_state_mib.map(|mib| mib.saturating_mul(MIB)),
            total: total_mib.map(|mib| mib.saturating_mul(MIB)),
        });
        Ok(db)
    }

    /// Holds every guest instance of this process to --max-guest-memory-mib.
    pub fn limit_guest_memory(&self) {
        let mib = self.hold.max_guest_memory_mib.unwrap_or_else(weir_runtime::memory_pool::default_host_limit_mib);
        weir_runtime::memory_pool::HOST_MEMORY
            .set_limit(usize::try_from(mib.saturating_mul(MIB)).unwrap_or(usize::MAX));
    }

    /// The sandbox these flags set, with the caps on a topology's
    /// description.
    pub fn config(&self, topology: TopologyLimits) -> SandboxConfig {
        SandboxConfig {
            max_memory_mib: self.max_memory_mib,
            max_topology_memory_mib: self.hold.max_topology_memory_mib,
            max_call_ms: self.max_call_ms,
            max_output_mib: self.max_output_mib,
            max_output_tuples: self.max_output_tuples,
            allowed_dirs: self.allow_dir.clone(),
            topology,
            state: self.hold.state(),
            log: self.hold.log(),
        }
    }
}

#[derive(Args, Debug)]
pub struct HoldLimitArgs {
    /// Linear memory of all of one topology's operator instances together,
    /// in MiB, however many operators and partitions it has; an instance
    /// growing past it traps.
    #[arg(long, default_value_t = DEFAULT_MAX_TOPOLOGY_MEMORY_MIB, value_parser = clap::value_parser!(u64).range(1..))]
    max_topology_memory_mib: u64,
    /// Linear memory of every guest instance of this host together (all its
    /// topologies), in MiB; an instance growing past it traps [default:
    /// half of this machine's memory].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    max_guest_memory_mib: Option<u64>,
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
    /// Bytes of the state database's pages kept in memory, in MiB: the rest
    /// is read from the file (through the system's page cache).
    #[arg(long, default_value_t = DEFAULT_MAX_DB_CACHE_MIB, value_parser = clap::value_parser!(u64).range(1..))]
    max_db_cache_mib: u64,
    /// Bytes one topology's states may hold on disk together, in MiB: a
    /// commit that would pass it halts the topology, naming the state, and
    /// writes nothing (what committed before stays). Measuring walks the
    /// pages of the states each commit writes [default: unbounded].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    max_state_mib: Option<u64>,
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
    fn state(&self) -> StateLimits {
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
    fn log(&self) -> LogLimits {
        LogLimits { bytes: self.max_log_kib.saturating_mul(1 << 10), lines: self.max_log_lines }
    }
}

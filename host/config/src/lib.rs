//! `weir-config`: the host's defaults and limits, written once, and the two
//! knobs tests turn through the environment (a clock to advance, points
//! at which to fail). Every other crate reads it; it depends on none of
//! them.
//!
//! Defaults, written once: the CLI's `--help`, the docs and the code read them here.

pub mod backoff;
pub mod clock;
pub mod fault;
pub mod sync;

/// Sentences (spout tuples) per batch, unless `--batch-size` says otherwise.
/// Large enough that the per-batch costs (a durable commit, one call per
/// operator) are spread thin; small enough to keep a batch's memory modest.
pub const DEFAULT_BATCH_SIZE: usize = 1000;

/// Batches processing at once, unless `--max-pending` says otherwise, for
/// large batches: one committing while the next ones are processed.
pub const DEFAULT_MAX_PENDING: usize = 4;

/// Spout tuples in flight that the default max pending allows: smaller
/// batches get more of them in flight, up to [`DEFAULT_GROUP_MAX`], so
/// that while one commit group commits enough batches are processed to
/// make the next group large. At batch 10,000 that is 12 batches: with
/// 4, each batch committed alone and wrote its keys itself, and a run took
/// 40 % more CPU time.
pub const DEFAULT_TUPLES_PENDING: usize = 128_000;

/// Bytes of spout batches in flight past which no further batch is emitted
/// until one commits (one batch is always let through): max pending counts
/// batches, and batches of long lines must not multiply the memory it
/// allows.
pub const DEFAULT_MAX_PENDING_BYTES: usize = 64 << 20;

/// The max pending at `batch_size`, unless `--max-pending` says otherwise:
/// [`DEFAULT_TUPLES_PENDING`] divided by it, from [`DEFAULT_MAX_PENDING`]
/// to [`DEFAULT_GROUP_MAX`] (a batch size counts a partition's messages for
/// a JetStream spout, lines for a file's).
pub fn default_max_pending(batch_size: usize) -> usize {
    (DEFAULT_TUPLES_PENDING / batch_size.max(1)).clamp(DEFAULT_MAX_PENDING, DEFAULT_GROUP_MAX)
}

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

/// Batches one commit group may hold, unless `--group-max` says otherwise:
/// processed batches waiting to commit share one durable write (one flush),
/// and each key is written once for them. At batch 1,000 a word count's
/// groups of 64 (half of max pending, what the coordinator gathers while
/// the input is backed up) took a fifth less time than groups of 13.
/// 1 commits each batch on its own.
pub const DEFAULT_GROUP_MAX: usize = 128;

/// Time a commit group may spend running its batches' commit phases before
/// it commits, in milliseconds (`--group-time-ms`): a group takes what is
/// processed already, never waits for more, and stops taking batches when
/// this has passed, so that its first batch's commit is not held up long.
pub const DEFAULT_GROUP_TIME_MS: u64 = 50;

/// How a run cuts and pipelines its batches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunConfig {
    /// Spout tuples per batch.
    pub batch_size: usize,
    /// Batches processing at once.
    pub max_pending: usize,
    /// Bytes of spout batches in flight past which no further batch is
    /// emitted (one batch is always let through).
    pub max_pending_bytes: usize,
    /// Attempts per batch before the topology halts.
    pub max_attempts: u32,
    /// Wait before the first replay; doubled for each later attempt.
    pub retry_backoff: std::time::Duration,
    /// Time a batch may take to be processed.
    pub batch_timeout: std::time::Duration,
    /// Batches one commit group may hold (at least 1).
    pub group_max: usize,
    /// Time a commit group may take to gather its batches.
    pub group_time: std::time::Duration,
    /// Keep running when the spout has nothing more, asking it again at this
    /// interval, until stopped (a served topology); `None` ends the run.
    pub follow: Option<std::time::Duration>,
    /// Bytes one sink's outbox may hold, its output waiting for the
    /// server's acknowledgement (`--max-outbox-kib`).
    pub max_outbox_bytes: u64,
}

impl RunConfig {
    /// The wait before replaying a batch whose attempt `attempt` failed.
    pub fn backoff(&self, attempt: u32) -> std::time::Duration {
        backoff::Backoff::new(self.retry_backoff, MAX_RETRY_BACKOFF).nth(attempt)
    }
}

impl Default for RunConfig {
    fn default() -> RunConfig {
        RunConfig {
            batch_size: DEFAULT_BATCH_SIZE,
            max_pending: default_max_pending(DEFAULT_BATCH_SIZE),
            max_pending_bytes: DEFAULT_MAX_PENDING_BYTES,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            retry_backoff: std::time::Duration::from_millis(DEFAULT_RETRY_BACKOFF_MS),
            batch_timeout: std::time::Duration::from_millis(DEFAULT_BATCH_TIMEOUT_MS),
            group_max: DEFAULT_GROUP_MAX,
            group_time: std::time::Duration::from_millis(DEFAULT_GROUP_TIME_MS),
            follow: None,
            max_outbox_bytes: DEFAULT_MAX_OUTBOX_KIB << 10,
        }
    }
}

/// Bytes one sink's outbox may hold, in KiB (`--max-outbox-kib`): a batch
/// whose output would pass it halts its topology before it commits.
pub const DEFAULT_MAX_OUTBOX_KIB: u64 = 64 << 10;

/// Linear memory an operator instance may have, all its memories together,
/// in MiB, unless the host is configured otherwise (`--max-memory-mib`).
pub const DEFAULT_MAX_MEMORY_MIB: u64 = 64;

/// Linear memory of all of a topology's operator instances together, in
/// MiB (`--max-topology-memory-mib`): 64 instances at the default
/// instance limit. A topology may have a thousand instances, each within
/// its own limit; this bounds what one deployment can take from the others.
pub const DEFAULT_MAX_TOPOLOGY_MEMORY_MIB: u64 = 4096;

/// Memory compiling one component may take, in MiB (`--compile-memory-mib`):
/// the Python and JavaScript guests' interpreters took about 420 MiB on two
/// cores, a hand-made function of 2.5 million nested blocks 2 GiB per core.
pub const DEFAULT_COMPILE_MEMORY_MIB: u64 = 1024;

/// Time compiling one component may take, in milliseconds
/// (`--compile-timeout-ms`): the Python and JavaScript guests took 6 s on
/// two cores.
pub const DEFAULT_COMPILE_TIMEOUT_MS: u64 = 120_000;

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

// Caps on a topology's description. A guest describes its own topology, so
// the description is as untrusted as anything else it sends: each cap is
// checked when the topology loads, before anything walks the graph, and a
// topology over one is refused naming it and its flag. Every example stays
// far below them.

/// Nodes (operations) of a topology's stream graph (`--max-nodes`); the
/// inputs of all its nodes together are held to the same number.
pub const DEFAULT_MAX_NODES: usize = 1_000;

/// Fields of one node's tuples, and field names one operation may list
/// (`--max-node-fields`).
pub const DEFAULT_MAX_NODE_FIELDS: usize = 128;

/// Fields of every node's tuples, added up over the graph (`--max-fields`):
/// what the host holds of a topology's names.
pub const DEFAULT_MAX_FIELDS: usize = 20_000;

/// Bytes of a name: topology, operator, state, query or field
/// (`--max-name-len`). Names are ASCII letters, digits, `-`, `_` and `.`, not
/// starting with `.`: they become redb table names (`state/<topology>/<state>`),
/// file names, log fields and metrics labels.
pub const DEFAULT_MAX_NAME_LEN: usize = 128;

/// States of one topology (`--max-states`).
pub const DEFAULT_MAX_STATES: usize = 64;

/// Query streams of one topology (`--max-queries`).
pub const DEFAULT_MAX_QUERIES: usize = 64;

/// Instances of one operator that run at once, each on a thread of its own
/// over its partition of the batch (`--max-parallelism`): the cap on
/// `--parallelism` and on every `parallelism_hint`.
pub const DEFAULT_MAX_PARALLELISM: u32 = 64;

/// Guest operator instances of one topology, added up over its operators
/// at their parallelism (`--max-instances`): each instance is a store with
/// its own linear memory.
pub const DEFAULT_MAX_INSTANCES: usize = 1_024;

/// Entries a state may ask the host to keep cached (`--max-state-cache`).
pub const DEFAULT_MAX_STATE_CACHE: usize = 1_000_000;

/// The most a topology's description may ask of this host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopologyLimits {
    /// Nodes of the graph, and their inputs in all.
    pub max_nodes: usize,
    /// Fields of one node's tuples; field names one operation lists.
    pub max_node_fields: usize,
    /// Fields of every node's tuples, added up.
    pub max_fields: usize,
    /// Bytes of a name.
    pub max_name_len: usize,
    /// States.
    pub max_states: usize,
    /// Query streams.
    pub max_queries: usize,
    /// Instances of one operator at once.
    pub max_parallelism: u32,
    /// Guest operator instances in all.
    pub max_instances: usize,
    /// Cached entries a state may ask for.
    pub max_state_cache: usize,
}

impl Default for TopologyLimits {
    fn default() -> TopologyLimits {
        TopologyLimits {
            max_nodes: DEFAULT_MAX_NODES,
            max_node_fields: DEFAULT_MAX_NODE_FIELDS,
            max_fields: DEFAULT_MAX_FIELDS,
            max_name_len: DEFAULT_MAX_NAME_LEN,
            max_states: DEFAULT_MAX_STATES,
            max_queries: DEFAULT_MAX_QUERIES,
            max_parallelism: DEFAULT_MAX_PARALLELISM,
            max_instances: DEFAULT_MAX_INSTANCES,
            max_state_cache: DEFAULT_MAX_STATE_CACHE,
        }
    }
}

/// The most any topology and operator of this host may get; topologies may
/// ask for less.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxConfig {
    /// Linear memory per instance, in MiB.
    pub max_memory_mib: u64,
    /// Linear memory of a topology's instances together, in MiB.
    pub max_topology_memory_mib: u64,
    /// CPU time per call, in milliseconds.
    pub max_call_ms: u64,
    /// Bytes a call may return, in MiB.
    pub max_output_mib: u64,
    /// Tuples a call may emit.
    pub max_output_tuples: u64,
    /// Directories (and everything under them) operators may be granted
    /// read-only access to. Empty: no filesystem access at all.
    pub allowed_dirs: Vec<std::path::PathBuf>,
    /// What a topology's description may ask for.
    pub topology: TopologyLimits,
    /// What guests may read and write through states.
    pub state: StateLimits,
    /// What a guest call may write to stdout and stderr.
    pub log: LogLimits,
}

impl Default for SandboxConfig {
    fn default() -> SandboxConfig {
        SandboxConfig {
            max_memory_mib: DEFAULT_MAX_MEMORY_MIB,
            max_topology_memory_mib: DEFAULT_MAX_TOPOLOGY_MEMORY_MIB,
            max_call_ms: DEFAULT_MAX_CALL_MS,
            max_output_mib: DEFAULT_MAX_OUTPUT_MIB,
            max_output_tuples: DEFAULT_MAX_OUTPUT_TUPLES,
            allowed_dirs: Vec::new(),
            topology: TopologyLimits::default(),
            state: StateLimits::default(),
            log: LogLimits::default(),
        }
    }
}

// What `weir serve` allows a client.

/// Largest request body (a bundle upload), in MiB (`--max-upload-mib`); a
/// body declared larger gets 413 before any of it is read.
pub const DEFAULT_MAX_UPLOAD_MIB: usize = 64;

/// Time a client may take to send a request's headers, in milliseconds
/// (`--header-timeout-ms`); past it the connection is closed. An idle
/// kept-alive connection is closed after it too.
pub const DEFAULT_HEADER_TIMEOUT_MS: u64 = 10_000;

/// Client connections a server serves at once (`--max-connections`);
/// further clients wait in the listen queue until one closes, so that idle
/// or slow clients cannot take the file descriptors the topologies need
/// (their input files, bundles, state). Never more than a quarter of the
/// process's open-file limit.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;

/// Time a client may take to send a request's body, in milliseconds
/// (`--body-timeout-ms`): a full-size upload at about 1 MiB/s; past it the
/// call gets 408 and the connection is closed.
pub const DEFAULT_BODY_TIMEOUT_MS: u64 = 60_000;

/// Time the topologies get to stop at a batch boundary on SIGTERM or SIGINT,
/// in milliseconds (`--shutdown-timeout-ms`); past it the server exits
/// anyway (their uncommitted batches replay at the next start).
pub const DEFAULT_SHUTDOWN_TIMEOUT_MS: u64 = 10_000;

/// Longest name a topology may be deployed under, in characters.
pub const MAX_DEPLOYMENT_NAME: usize = 128;

/// Topologies one server runs, unless `--max-deployments` says otherwise:
/// each holds threads, operator instances and cached state of its own.
pub const DEFAULT_MAX_DEPLOYMENTS: usize = 64;

/// How often `weir serve` samples each topology's figures for the
/// dashboard's charts.
pub const HISTORY_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Samples kept per topology: 15 minutes of them.
pub const HISTORY_SAMPLES: usize = 900;

/// Samples kept of all topologies together: past 64 topologies each keeps
/// a shorter history, so that many topologies cannot take the server's
/// memory.
pub const HISTORY_MAX_SAMPLES: usize = 64 * HISTORY_SAMPLES;

/// Keys in a page of a state's keys (`?limit=`), when the call does not say.
pub const DEFAULT_STATE_PAGE: usize = 100;

/// Most keys in a page of a state's keys.
pub const MAX_STATE_PAGE: usize = 1000;

/// Bytes of keys and values a page of a state's keys may hold: a guest may
/// store values of megabytes, and a page of a thousand of them would be
/// held whole in memory. A page that would hold more is refused, naming
/// how many keys to ask for.
pub const MAX_STATE_PAGE_BYTES: usize = 16 << 20;

/// Keys, and bytes of keys and values, of a state answered whole (no
/// `?limit=`); past either the call is told to ask for pages.
pub const MAX_STATE_ANSWER_KEYS: usize = 100_000;
pub const MAX_STATE_ANSWER_BYTES: usize = 64 << 20;
/// How long the host keeps trying to reach a NATS server, when a JetStream
/// spout opens and after its connection is lost, before the topology halts,
/// in milliseconds (`--nats-retry-ms`). Long enough to ride out a server's
/// restart.
pub const DEFAULT_NATS_RETRY_MS: u64 = 30_000;

/// Time one request to a NATS server (or the next message of a read) may
/// take before the server counts as out of reach.
pub const NATS_REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Subjects (partitions) one JetStream spout reads at most; a topology whose
/// subjects expand to more is refused, naming the stream.
pub const MAX_JETSTREAM_PARTITIONS: usize = 1024;

/// Messages one JetStream batch holds at most, all partitions together:
/// with many partitions, each gives fewer than its `max_per_partition`.
pub const MAX_JETSTREAM_BATCH_MESSAGES: usize = 1_000_000;

/// Bytes of messages a JetStream spout's batch takes, shared among its
/// partitions: a batch ends short of its message count here, so that large
/// messages (up to the server's max_payload each) cannot make one batch
/// hold gigabytes. At least one message of each partition is taken.
pub const MAX_JETSTREAM_BATCH_BYTES: usize = 64 << 20;

/// Publish acknowledgements `weir publish` and a sink wait on at once.
pub const PUBLISH_ACKS_IN_FLIGHT: usize = 1024;

/// Sinks one topology may have.
pub const MAX_SINKS: usize = 16;

/// Largest payload a sink publishes, in bytes: a NATS server's default
/// `max_payload`. A bigger one fails its batch before it commits.
pub const MAX_SINK_PAYLOAD: usize = 1024 * 1024;

/// Messages one batch may give one sink. The outbox holds at most the
/// committed batches not yet published: the commit of the next batch waits
/// for the publisher, so that is one batch's messages in a run (more only
/// after a halt, when they wait for the next start).
pub const MAX_SINK_BATCH_MESSAGES: usize = 1_000_000;
// What a guest can make the host hold: every state entry a guest reads or
// writes is copied by the host (writes stay until the batch commits), and
// every line it logs is formatted and kept. Bytes count keys and values as
// they cross the boundary.

/// State entries one operator call may read (`--max-call-state-reads`).
pub const DEFAULT_MAX_CALL_STATE_READS: u64 = 1_000_000;
/// Bytes one operator call may read from states, in MiB (`--max-call-state-read-mib`).
pub const DEFAULT_MAX_CALL_STATE_READ_MIB: u64 = 64;
/// State entries one operator call may write (`--max-call-state-writes`).
pub const DEFAULT_MAX_CALL_STATE_WRITES: u64 = 1_000_000;
/// Bytes one operator call may write to states, in MiB (`--max-call-state-write-mib`).
pub const DEFAULT_MAX_CALL_STATE_WRITE_MIB: u64 = 64;
/// State entries the guests of one batch (or one query) may read, all calls
/// together (`--max-batch-state-reads`).
pub const DEFAULT_MAX_BATCH_STATE_READS: u64 = 10_000_000;
/// Bytes the guests of one batch may read from states, in MiB (`--max-batch-state-read-mib`).
pub const DEFAULT_MAX_BATCH_STATE_READ_MIB: u64 = 1024;
/// State entries the guests of one batch may write (`--max-batch-state-writes`).
pub const DEFAULT_MAX_BATCH_STATE_WRITES: u64 = 2_000_000;
/// Bytes the guests of one batch may write to states, in MiB
/// (`--max-batch-state-write-mib`): what the host holds until the commit.
pub const DEFAULT_MAX_BATCH_STATE_WRITE_MIB: u64 = 128;
/// Bytes of committed values the host caches per state, in MiB
/// (`--max-state-cache-mib`), whatever number of entries the topology asks
/// it to cache.
pub const DEFAULT_MAX_STATE_CACHE_MIB: u64 = 64;
/// Bytes of the state database's pages the host keeps in memory, in MiB
/// (`--max-db-cache-mib`): pages read, and pages written until the commit
/// (half of it at most; beyond, they go to the file early). The rest is
/// read from the file, through the system's page cache, which the host's
/// resident memory does not count: a state of millions of keys, or of
/// millions of open windows, costs this much and no more in pages.
pub const DEFAULT_MAX_DB_CACHE_MIB: u64 = 32;
/// Bytes of stdout and stderr one operator call may write, in KiB
/// (`--max-log-kib`). One call handles a whole batch partition.
pub const DEFAULT_MAX_LOG_KIB: u64 = 1024;
/// Lines of stdout and stderr one operator call may write (`--max-log-lines`).
pub const DEFAULT_MAX_LOG_LINES: u64 = 10_000;

/// Entries and bytes (keys and values) read and written through states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateQuota {
    /// Entries read (keys asked for).
    pub read_entries: u64,
    /// Bytes read: keys asked for and the values returned.
    pub read_bytes: u64,
    /// Entries written.
    pub write_entries: u64,
    /// Bytes written: keys and values.
    pub write_bytes: u64,
}

/// What guests may read and write through states, per call and per batch,
/// and what the host keeps of them between batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateLimits {
    /// For one operator call.
    pub per_call: StateQuota,
    /// For every call of one batch (or one query) together.
    pub per_batch: StateQuota,
    /// Bytes of committed values cached per state.
    pub cache_bytes: u64,
}

impl Default for StateLimits {
    fn default() -> StateLimits {
        StateLimits {
            per_call: StateQuota {
                read_entries: DEFAULT_MAX_CALL_STATE_READS,
                read_bytes: DEFAULT_MAX_CALL_STATE_READ_MIB << 20,
                write_entries: DEFAULT_MAX_CALL_STATE_WRITES,
                write_bytes: DEFAULT_MAX_CALL_STATE_WRITE_MIB << 20,
            },
            per_batch: StateQuota {
                read_entries: DEFAULT_MAX_BATCH_STATE_READS,
                read_bytes: DEFAULT_MAX_BATCH_STATE_READ_MIB << 20,
                write_entries: DEFAULT_MAX_BATCH_STATE_WRITES,
                write_bytes: DEFAULT_MAX_BATCH_STATE_WRITE_MIB << 20,
            },
            cache_bytes: DEFAULT_MAX_STATE_CACHE_MIB << 20,
        }
    }
}

/// What one operator call may write to stdout and stderr together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogLimits {
    /// Bytes.
    pub bytes: u64,
    /// Lines.
    pub lines: u64,
}

impl Default for LogLimits {
    fn default() -> LogLimits {
        LogLimits { bytes: DEFAULT_MAX_LOG_KIB << 10, lines: DEFAULT_MAX_LOG_LINES }
    }
}

/// For tests only: the environment variable that names a fault point,
/// `<point>:<txid>` (`after-process`, `before-commit` or `after-commit`),
/// where the host kills itself with SIGKILL (see `crate::fault`). Unset in
/// any real deployment.
pub const FAULT_ENV: &str = "WEIR_FAULT";

/// For tests only: the environment variable that pins the clock batches
/// are emitted by to `<start>:<step>`: its n-th reading is `start + step ×
/// n` milliseconds (see `crate::clock`). Unset in any real deployment.
pub const CLOCK_ENV: &str = "WEIR_CLOCK";

/// The most windows one tuple may fall into: a sliding window's size over
/// its slide, which a description chooses.
pub const MAX_WINDOWS_PER_TUPLE: u64 = 1_000;

/// The most sessions a group may hold open at once: how many gaps fit in
/// the watermark's delay and lateness, which a description chooses.
pub const MAX_OPEN_SESSIONS: u64 = 10_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_batches_get_more_of_them_in_flight() {
        assert_eq!(default_max_pending(50), DEFAULT_GROUP_MAX);
        assert_eq!(default_max_pending(1000), 128);
        assert_eq!(default_max_pending(2000), 64);
        assert_eq!(default_max_pending(10_000), 12);
        assert_eq!(default_max_pending(16_000), 8);
        assert_eq!(default_max_pending(100_000), DEFAULT_MAX_PENDING);
        assert_eq!(default_max_pending(0), DEFAULT_GROUP_MAX);
    }
}

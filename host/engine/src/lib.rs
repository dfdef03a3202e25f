//! `weir-engine`: runs a topology's batches: the coordinator (txids,
//! pipelining, commits in txid order), the execution of each node over a
//! batch, operator instances, loading bundles into plans, metrics, and
//! building guests from source. It may not depend on the cluster, the
//! server or the CLI.

pub mod bundle;
pub mod coordinator;
pub mod exec;
pub mod guest_build;
pub mod instances;
pub mod load;
pub mod metrics;

//! `weir-cluster`: several `weir serve` hosts running topologies together.
//!
//! Cluster mode of `weir serve`: membership and leadership in etcd, the
//! cluster's topologies and their bundles, the assignment of each one's
//! work to live hosts, and the records that outlive a host: the commit log
//! in etcd and the state changelog in JetStream (`docs/cluster.md`).
//! A topology is partitioned across the hosts (`coordinator`, `worker`,
//! `process_phase`: persistent aggregates of built-in aggregators over a
//! JetStream stream)
//! or placed whole on one host (`whole`, `replicated`, `whole_log`: every
//! other topology, run by the single-host engine).

pub mod assignment;
pub mod bundles;
pub mod catalog;
pub mod changelog;
pub mod changes;
pub mod commit_log;
pub mod coordinator;
mod leader;
mod membership;
pub mod plan;
mod process_phase;
pub mod reads;
pub mod replicated;
pub mod slots;
pub mod whole;
pub mod whole_log;
pub mod wire;
pub mod worker;

pub use membership::{ClusterConfig, ClusterView, Member, Membership, check_name};

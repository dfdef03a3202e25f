//! Cluster mode of `weir serve`: membership and leadership in etcd, and the
//! assignment of each topology's work to live hosts (`docs/cluster.md`).

pub mod assignment;
pub mod bundles;
pub mod catalog;
pub mod changelog;
mod leader;
pub mod membership;

pub use membership::{ClusterConfig, ClusterView, Member, Membership, check_name};

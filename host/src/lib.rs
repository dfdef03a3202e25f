//! Weir: Trident-style exactly-once stream topologies whose operators are
//! WebAssembly components, with state in redb.

pub mod bindings;
pub mod bundle;
pub mod config;
pub mod coordinator;
pub mod exec;
pub mod fault;
pub mod guest_build;
pub mod instances;
pub mod json;
pub mod load;
pub mod metrics;
pub mod nats;
pub mod plan;
pub mod runtime;
pub mod sandbox;
pub mod server;
pub mod spout;
pub mod state;

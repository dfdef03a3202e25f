//! Weir: Trident-style exactly-once stream topologies whose operators are
//! WebAssembly components, with state in redb.

pub mod bindings;
pub mod runtime;
pub mod state;

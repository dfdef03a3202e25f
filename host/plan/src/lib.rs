//! `weir-plan`: a topology's description checked into the plan the host
//! runs, with each operator's sandbox settings, the spout kinds and NATS
//! subjects a description names. It runs nothing: no engine, spouts,
//! sinks or state above it.
//!
//! Turns a topology definition into the graph the host runs, checking it
//! when the topology is loaded: fields, operator ids, states, pairings,
//! cycles. `build` runs the passes in order: the checks of what the
//! description asks (`checks`), the graph's order, each node's fields
//! (`fields`), when each node runs (`phases`).
//!
//! Fields are resolved to positions here, once. A node's output carries only
//! the fields something after it reads (Trident keeps every field; the host
//! drops the ones no one can see, so a sentence is not copied into each of
//! its words).

mod build;
mod checks;
mod error;
mod fields;
mod graph;
mod phases;
mod positions;
mod spout_kind;
pub mod subject;
#[cfg(test)]
mod tests;

pub use checks::{allowed_name, check_limits, guest_operators};
pub use error::{Excess, NameOf, PlanError};
pub(crate) use graph::json;
pub use graph::{Aggregator, FunctionKind, Input, Node, Op, Phase, Plan, builtin_name};
pub use spout_kind::SpoutKind;

use weir_config::{SandboxConfig, TopologyLimits};
use weir_sdk::topology::TopologyDef;

/// Checks `def` against this host's `config` and builds its plan; a
/// [`PlanError`] says what it refuses.
pub fn plan(def: &TopologyDef, config: &SandboxConfig) -> Result<Plan, PlanError> {
    build::build(def, &config.topology, Some(config))
}

/// Checks `def`'s graph (its size against `limits`, fields, operators,
/// states, pairings) without the sandbox it asks for, which only the host
/// that runs it can grant: what packing a bundle checks.
pub fn check_stream(def: &TopologyDef, limits: &TopologyLimits) -> Result<(), PlanError> {
    build::build(def, limits, None).map(drop)
}

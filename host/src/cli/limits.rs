//! The caps on a topology's description, as flags: one set shared by every
//! verb that loads topologies (`run`, `serve`, `query`, `inspect`, `bundle`).

use clap::Args;
use clap::builder::RangedU64ValueParser;
use weir::config::{
    DEFAULT_MAX_FIELDS, DEFAULT_MAX_INSTANCES, DEFAULT_MAX_NAME_LEN, DEFAULT_MAX_NODE_FIELDS, DEFAULT_MAX_NODES,
    DEFAULT_MAX_PARALLELISM, DEFAULT_MAX_QUERIES, DEFAULT_MAX_STATE_CACHE, DEFAULT_MAX_STATES, TopologyLimits,
};

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

//! Global count: one number, how many input lines the topology has ever
//! seen, counted exactly once however often it is stopped, killed and run
//! again. An ungrouped `persistent_aggregate` keeps a single value; the
//! query `count` reads it.

use weir_sdk::prelude::*;

/// The `global-count` topology: the single-value state `count`, and the
/// query `count` (no arguments; result: `[[count]]`).
pub fn topology() -> Topology {
    let topology = Topology::new("global-count");
    let count = topology
        .new_stream(FileLines::new("line"))
        .persistent_aggregate(State::transactional("count"), Count, ["count"])
        .name("count");
    topology.new_query_stream("count").state_query(&count, [], MapGet, ["count"]).name("get-count").project(["count"]);
    topology.build()
}

weir_sdk::export!(topology);

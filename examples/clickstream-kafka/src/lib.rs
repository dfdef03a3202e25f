//! Clickstream on Kafka: the `clickstream` example's topology with its
//! spout and sink declared for Kafka instead of JetStream (nothing else
//! changes). Clicks are read from the topic `clicks` (every partition, each
//! record's value a JSON object with `user` and `page`), counted per page
//! and per user exactly once, and each batch's new per-page counts are
//! written to the topic `page-counts` by a sink, exactly once as well.

use weir_sdk::prelude::*;

/// The `clickstream` topology: states `per-page` and `per-user`, the sink
/// `page-counts`, and the queries `page` and `user` (arguments: a page or
/// a user; result: `[[count]]`).
pub fn topology() -> Topology {
    let topology = Topology::new("clickstream");
    let clicks = topology.new_stream(Kafka::transactional("clicks").json(["user", "page"]));
    let per_page = clicks
        .group_by(["page"])
        .persistent_aggregate(State::transactional("per-page"), Count, ["count"])
        .name("count-pages");
    per_page.new_values_stream().sink(KafkaSink::topic("page-counts")).name("page-counts");
    let per_user = clicks
        .group_by(["user"])
        .persistent_aggregate(State::transactional("per-user"), Count, ["count"])
        .name("count-users");
    for (query, state) in [("page", &per_page), ("user", &per_user)] {
        topology
            .new_query_stream(query)
            .state_query(state, ["args"], MapGet, ["count"])
            .name(&format!("get-{query}"))
            .project(["count"]);
    }
    topology.build()
}

weir_sdk::export!(topology);

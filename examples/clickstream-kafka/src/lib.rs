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
    example_common::clickstream(Kafka::transactional("clicks").json(["user", "page"]), KafkaSink::topic("page-counts"))
}

weir_sdk::export!(topology);

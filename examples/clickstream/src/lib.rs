//! Clickstream: clicks read from a NATS JetStream stream (a partition per
//! subject), counted per page and per user exactly once, and each batch's
//! new per-page counts published to the subject `page-counts` by a sink,
//! exactly once as well.

use weir_sdk::prelude::*;

/// The `clickstream` topology: states `per-page` and `per-user`, the sink
/// `page-counts`, and the queries `page` and `user` (arguments: a page or
/// a user; result: `[[count]]`).
pub fn topology() -> Topology {
    example_common::clickstream(
        JetStream::transactional("clicks", ["clicks.*"]).json(["user", "page"]),
        JetStreamSink::subject("page-counts"),
    )
}

weir_sdk::export!(topology);

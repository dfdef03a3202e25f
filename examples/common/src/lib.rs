//! The topologies several examples share: each example names its spout
//! (and sink), and builds the topology here over it. A component exports
//! its own crate's topologies, so this crate exports none.

use weir_sdk::builder::{Sink, Spout};
use weir_sdk::prelude::*;

/// The `word-count` topology over the sentences of `sentences` (each
/// tuple's one field, `sentence`): each sentence split into words and an
/// exactly-once count per word in the state `counts`, with the query
/// `words`: the sum of the counts of the words in its arguments.
pub fn word_count(sentences: impl Spout) -> Topology {
    let topology = Topology::new("word-count");
    let counts = topology
        .new_stream(sentences)
        .each(["sentence"], SplitWords, ["word"])
        .name("split")
        .group_by(["word"])
        .persistent_aggregate(State::transactional("counts"), Count, ["count"])
        .name("count");
    topology
        .new_query_stream("words")
        .each(["args"], SplitWords, ["word"])
        .name("split-args")
        .group_by(["word"])
        .state_query(&counts, ["word"], MapGet, ["count"])
        .name("get-count")
        .aggregate(["count"], Sum, ["sum"])
        .name("sum");
    topology.build()
}

/// The `clickstream` topology over `clicks` (tuples of `user` and `page`):
/// states `per-page` and `per-user`, each batch's new per-page counts
/// written to `page_counts`, and the queries `page` and `user` (arguments:
/// a page or a user; result: `[[count]]`).
pub fn clickstream(clicks: impl Spout, page_counts: impl Sink) -> Topology {
    let topology = Topology::new("clickstream");
    let clicks = topology.new_stream(clicks);
    let per_page = clicks
        .group_by(["page"])
        .persistent_aggregate(State::transactional("per-page"), Count, ["count"])
        .name("count-pages");
    per_page.new_values_stream().sink(page_counts).name("page-counts");
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

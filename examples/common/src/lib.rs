//! The topologies several examples share: each example names its spout
//! (and sink), and builds the topology here over it; and how the examples'
//! batch spouts number their batches. A component exports its own crate's
//! topologies, so this crate exports none.

use std::ops::Range;
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

/// The items batch `txid` holds when batch n holds the n-th run of
/// `per_batch` of `total` items (the last run may be shorter): fixed, since
/// a replay must emit the same batch; `None` past the last.
pub fn batch_range(txid: u64, per_batch: u64, total: u64) -> Option<Range<u64>> {
    let start = txid.saturating_sub(1).saturating_mul(per_batch);
    (start < total).then(|| start..start.saturating_add(per_batch).min(total))
}

#[cfg(test)]
mod tests {
    use super::batch_range;

    #[test]
    fn batches_cover_the_items_once_in_order_and_end_after_the_last() {
        assert_eq!(batch_range(1, 100, 250), Some(0..100));
        assert_eq!(batch_range(3, 100, 250), Some(200..250));
        assert_eq!(batch_range(4, 100, 250), None);
        assert_eq!(batch_range(u64::MAX, 100, 250), None);
    }
}

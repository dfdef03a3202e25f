//! Word count over the sentences of a Kafka topic: the `word-count`
//! example's topology with the host's transactional Kafka spout (topic
//! `corpus`, every partition, each record's value a string field
//! `sentence`) in place of the file spout, as `scripts/bench --kafka`
//! measures it beside a raw client draining the same topic. It splits with
//! the SDK's [`SplitWords`], which splits as the example's `Split` does.

use weir_sdk::prelude::*;

/// The `word-count` topology (state `counts`), reading topic `corpus`,
/// with the query `words`: the sum of the counts of the words in its
/// arguments.
pub fn topology() -> Topology {
    let topology = Topology::new("word-count");
    let counts = topology
        .new_stream(Kafka::transactional("corpus").string("sentence"))
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

weir_sdk::export!(topology);

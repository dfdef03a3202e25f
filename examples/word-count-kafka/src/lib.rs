//! Word count over the sentences of a Kafka topic: the `word-count`
//! example's topology with the host's transactional Kafka spout (topic
//! `corpus`, every partition, each record's value a string field
//! `sentence`) in place of the file spout, as `scripts/bench --kafka`
//! measures it beside a raw client draining the same topic.

use weir_sdk::prelude::*;

/// The `word-count` topology (state `counts`), reading topic `corpus`,
/// with the query `words`: the sum of the counts of the words in its
/// arguments.
pub fn topology() -> Topology {
    example_common::word_count(Kafka::transactional("corpus").string("sentence"))
}

weir_sdk::export!(topology);

//! Word count over the sentences of a NATS JetStream stream: the
//! `word-count` example's topology with the host's transactional JetStream
//! spout (stream `corpus`, a partition per subject `corpus.*`) in place of
//! the file spout, as `scripts/bench` measures it next to the file spout.

use weir_sdk::prelude::*;

/// The `word-count` topology (state `counts`), reading stream `corpus`,
/// with the query `words`: the sum of the counts of the words in its
/// arguments.
pub fn topology() -> Topology {
    example_common::word_count(JetStream::transactional("corpus", ["corpus.*"]).string("sentence"))
}

weir_sdk::export!(topology);

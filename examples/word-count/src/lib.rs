//! Word count, Weir's first topology: split each sentence of the input into
//! words and keep an exactly-once count per word in the state `counts`.
//! The topology is `example-common`'s, which the JetStream and Kafka word
//! counts build over their spouts as well; here it reads the input file.

use weir_sdk::prelude::*;

/// The `word-count` topology over the lines of the input, with the query
/// `words`: the sum of the counts of the words in its arguments.
pub fn topology() -> Topology {
    example_common::word_count(FileLines::new("sentence"))
}

weir_sdk::export!(topology);

//! Word count, Weir's first topology: split each sentence of the input into
//! words and keep an exactly-once count per word in the state `counts`.

use weir_sdk::prelude::*;

/// Splits a string (a sentence, or a query's arguments) into its
/// whitespace-separated words.
pub struct Split;

impl Function for Split {
    fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
        for word in tuple.str(0)?.split_whitespace() {
            out.emit([word])?;
        }
        Ok(())
    }
}

/// The `word-count` topology, with the query `words`: the sum of the counts
/// of the words in its arguments.
pub fn topology() -> Topology {
    let topology = Topology::new("word-count");
    let counts = topology
        .new_stream(FileLines::new("sentence"))
        .each(["sentence"], Split, ["word"])
        .name("split")
        .group_by(["word"])
        .persistent_aggregate(State::transactional("counts"), Count, ["count"])
        .name("count");
    topology
        .new_query_stream("words")
        .each(["args"], Split, ["word"])
        .name("split-args")
        .group_by(["word"])
        .state_query(&counts, ["word"], MapGet, ["count"])
        .name("get-count")
        .aggregate(["count"], Sum, ["sum"])
        .name("sum");
    topology.build()
}

weir_sdk::export!(topology);

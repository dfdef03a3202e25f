//! Word count, Weir's first topology: split each sentence of the input into
//! words and keep an exactly-once count per word in the state `counts`.

use weir_sdk::prelude::*;

/// Splits a sentence into its whitespace-separated words.
pub struct Split;

impl Function for Split {
    fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
        for word in tuple.str("sentence")?.split_whitespace() {
            out.emit([word])?;
        }
        Ok(())
    }
}

/// The `word-count` topology.
pub fn topology() -> Topology {
    Topology::new("word-count")
        .new_stream(FileLines::new("sentence"))
        .each(["sentence"], Split, ["word"])
        .name("split")
        .group_by(["word"])
        .persistent_aggregate(State::transactional("counts"), Count, ["count"])
        .name("count")
        .build()
}

weir_sdk::export!(topology);

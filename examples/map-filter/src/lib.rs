//! Map and filter: Trident's stateless operations on sentences. `flat_map`
//! splits each sentence into words, `map` normalises each word, `filter`
//! drops stop words, `peek` prints what passes, and the words left are
//! counted in the state `counts`; the query `count` sums the counts of its
//! arguments' words.

use weir_sdk::prelude::*;

/// Words never counted.
pub const STOP_WORDS: &[&str] = &["a", "and", "over", "the"];

/// Splits a sentence into words: runs of letters, digits and apostrophes.
pub struct Words;

impl FlatMapFunction for Words {
    fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
        for word in tuple.str(0)?.split(|c: char| !(c.is_alphanumeric() || c == '\'')) {
            if !word.is_empty() {
                out.emit([word])?;
            }
        }
        Ok(())
    }
}

/// Lower-cases a word.
pub struct Lowercase;

impl MapFunction for Lowercase {
    fn execute(&self, tuple: &Tuple<'_>) -> Result<Vec<Value>, Error> {
        Ok(vec![Value::from(tuple.str("word")?.to_lowercase())])
    }
}

/// Keeps the words that are not stop words.
pub struct NotStopWord;

impl Filter for NotStopWord {
    fn is_keep(&self, tuple: &Tuple<'_>) -> Result<bool, Error> {
        Ok(!STOP_WORDS.contains(&tuple.str("word")?))
    }
}

/// Prints each word that passes, to the guest's stdout.
pub struct Show;

impl Consumer for Show {
    fn accept(&self, tuple: &Tuple<'_>) -> Result<(), Error> {
        println!("kept {}", tuple.str("word")?);
        Ok(())
    }
}

/// The `map-filter` topology: the state `counts` (word to count) and the
/// query `count` (arguments: words, normalised as the sentences' are;
/// result: the sum of their counts).
pub fn topology() -> Topology {
    let topology = Topology::new("map-filter");
    let counts = topology
        .new_stream(FileLines::new("sentence"))
        .flat_map(["sentence"], Words, ["word"])
        .name("words")
        .map(["word"], Lowercase, ["word"])
        .name("lowercase")
        .filter(["word"], NotStopWord)
        .name("not-stop-word")
        .peek(["word"], Show)
        .name("show")
        .group_by(["word"])
        .persistent_aggregate(State::transactional("counts"), Count, ["count"])
        .name("count");
    topology
        .new_query_stream("count")
        .flat_map(["args"], Words, ["word"])
        .name("query-words")
        .map(["word"], Lowercase, ["word"])
        .name("query-lowercase")
        .state_query(&counts, ["word"], MapGet, ["count"])
        .name("get-count")
        .aggregate(["count"], Sum, ["sum"])
        .name("sum");
    topology.build()
}

weir_sdk::export!(topology);

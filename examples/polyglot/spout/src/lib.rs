//! The `polyglot` topology, whose operators are written in three languages:
//! this Rust component defines the topology and runs its batch spout, the
//! Python component `split-py` splits the sentences into words, and the
//! JavaScript component `count-js` counts them with a combiner aggregator,
//! exactly once, into the state `counts`. `weir-bundle.json` says which
//! component runs which operator.

use weir_sdk::prelude::*;

/// How many sentences the spout emits.
pub const SENTENCES: u64 = 2_000;

/// Sentences per batch: fixed, since a replay must emit the same batch.
pub const BATCH: u64 = 100;

const WORDS: [&str; 12] =
    ["the", "river", "weir", "flows", "over", "stone", "and", "salmon", "leap", "in", "cold", "water"];

/// Sentence `n`: three to seven words of a small vocabulary.
pub fn sentence(n: u64) -> String {
    let words: Vec<&str> = (0..n % 5 + 3).map(|k| WORDS[((n * 7 + k * 5 + n / 3) % 12) as usize]).collect();
    words.join(" ")
}

/// Trident's `IBatchSpout`: batch n holds the sentences of range n.
struct Sentences;

impl BatchSpout for Sentences {
    fn emit_batch(&self, info: &SpoutInfo, out: &mut SpoutEmitter<'_>) -> Result<bool, Error> {
        let Some(batch) = example_common::batch_range(info.txid, BATCH, SENTENCES) else { return Ok(false) };
        for n in batch {
            out.emit([sentence(n).as_str()])?;
        }
        Ok(true)
    }
}

/// The Python component runs `split`: this component never does.
struct InPython;

impl Function for InPython {
    fn execute(&self, _: &Tuple<'_>, _: &mut Emitter<'_>) -> Result<(), Error> {
        Err(Error::fatal("split runs in the Python component: weir-bundle.json maps it there"))
    }
}

/// The JavaScript component runs `count`: this component never does.
struct InJavaScript;

impl CombinerAggregator for InJavaScript {
    fn init(&self, _: &Tuple<'_>) -> Result<Value, Error> {
        Err(Error::fatal("count runs in the JavaScript component: weir-bundle.json maps it there"))
    }
    fn combine(&self, _: Value, _: Value) -> Result<Value, Error> {
        Err(Error::fatal("count runs in the JavaScript component: weir-bundle.json maps it there"))
    }
    fn zero(&self) -> Value {
        Value::I64(0)
    }
}

/// The topology.
pub fn topology() -> Topology {
    Topology::new("polyglot")
        .new_stream(GuestSpout::batch(Sentences, ["sentence"]))
        .each(["sentence"], InPython, ["word"])
        .name("split")
        .group_by(["word"])
        .persistent_aggregate_over(State::transactional("counts"), ["word"], InJavaScript, ["count"])
        .name("count")
        .build()
}

weir_sdk::export!(topology);

#[cfg(test)]
mod tests {
    #[test]
    fn sentences_hold_three_to_seven_words() {
        assert_eq!(super::sentence(0), "the stone cold");
        assert!((0..super::SENTENCES).all(|n| (3..=7).contains(&super::sentence(n).split(' ').count())));
    }
}

//! Word-count variants for the host's tests.

use weir_sdk::prelude::*;

/// Splits sentences into words; with `fail_txid` set, the first attempt of
/// that txid asks for a replay.
struct Split {
    fail_txid: Option<u64>,
}

impl Function for Split {
    fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
        let batch = tuple.batch();
        if Some(batch.txid) == self.fail_txid && batch.attempt == 0 {
            return Err(Error::retry(format!("txid {} fails on its first attempt", batch.txid)));
        }
        for word in tuple.str("sentence")?.split_whitespace() {
            out.emit([word])?;
        }
        Ok(())
    }
}

/// Counts in the guest: Trident's `Count`, as a user would write it.
struct GuestCount;

impl CombinerAggregator for GuestCount {
    fn init(&self, _tuple: &Tuple<'_>) -> Result<Value, Error> {
        Ok(Value::I64(1))
    }
    fn combine(&self, a: Value, b: Value) -> Result<Value, Error> {
        match (a, b) {
            (Value::I64(a), Value::I64(b)) => Ok(Value::I64(a + b)),
            (a, b) => Err(Error::fatal(format!("cannot add {a:?} and {b:?}"))),
        }
    }
    fn zero(&self) -> Value {
        Value::I64(0)
    }
}

fn word_count(name: &str, split: Split, state: State, counter: impl CombinerAggregator) -> Topology {
    Topology::new(name)
        .new_stream(FileLines::new("sentence"))
        .each(["sentence"], split, ["word"])
        .name("split")
        .group_by(["word"])
        .persistent_aggregate(state, counter, ["count"])
        .name("count")
        .build()
}

fn topologies() -> Vec<Topology> {
    vec![
        word_count("word-count-opaque", Split { fail_txid: None }, State::opaque("counts"), Count),
        word_count("flaky-word-count", Split { fail_txid: Some(3) }, State::transactional("counts"), Count),
        word_count("guest-count", Split { fail_txid: None }, State::transactional("counts"), GuestCount),
    ]
}

weir_sdk::export!(topologies);

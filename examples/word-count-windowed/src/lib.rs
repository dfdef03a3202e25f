//! Windowed word count: each input line is `TIMESTAMP_MS SENTENCE`; each
//! word is counted per minute of event time, in tumbling windows, and each
//! minute's count is kept in the state `minute-counts` by window start and
//! word, exactly once. Keyed by time first, each minute's counts are one
//! key range, and a closing minute's counts go in after the earlier
//! minutes' rather than among them, where redb would rewrite pages all over
//! the table every minute. The benchmark runs it over the canonical corpus
//! with a timestamp added to each sentence.

use weir_sdk::Window;
use weir_sdk::prelude::*;

/// Splits `TIMESTAMP_MS SENTENCE` into the timestamp and each word.
pub struct SplitTimed;

impl Function for SplitTimed {
    fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
        let line = tuple.str(0)?;
        let mut words = line.split_whitespace();
        let Some(ts) = words.next() else { return Ok(()) };
        let ts: i64 = ts.parse().map_err(|e| Error::fatal(format!("timestamp {ts:?} of {line:?}: {e}")))?;
        for word in words {
            out.emit([ValueRef::I64(ts), ValueRef::Str(word)])?;
        }
        Ok(())
    }
}

/// The `word-count-windowed` topology.
pub fn topology() -> Topology {
    let topology = Topology::new("word-count-windowed");
    topology
        .new_stream(FileLines::new("line"))
        .each(["line"], SplitTimed, ["ts", "word"])
        .name("split")
        .group_by(["word"])
        .window(Window::tumbling("ts", 60_000).max_delay_ms(1_000), "open-minutes", [], Count, ["count"])
        .name("minutes")
        .group_by(["window_start", "word"])
        .persistent_aggregate_over(State::transactional("minute-counts"), ["count"], Sum, ["count"])
        .name("store");
    topology.build()
}

weir_sdk::export!(topology);

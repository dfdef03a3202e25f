//! Word-count variants for the host's tests.

#[path = "../../shared/topologies.rs"]
mod shared_topologies;
#[path = "../../shared/sums.rs"]
mod sums;

use shared_topologies::jetstream_lines;
use sums::Sums;
use weir_sdk::Window;
use weir_sdk::builder::{Sink, Spout};
use weir_sdk::prelude::*;

use std::sync::atomic::{AtomicU64, Ordering};

/// Markup a page must show as text: were it read as HTML, its script would
/// rename the page.
const MARKUP: &str = r#"<img src=x onerror="document.title='injected'"><script>document.title='injected'</script>"#;

/// How a test's `Split` misbehaves.
#[derive(Default)]
struct Split {
    /// The first attempt of this txid asks for a replay.
    retry_txid: Option<u64>,
    /// Every attempt of this txid panics.
    panic_txid: Option<u64>,
    /// The first attempt of this txid asks for the topology to halt.
    fatal_txid: Option<u64>,
    /// Writes a line to stdout and stderr at the start of each batch.
    chatty: bool,
    /// Writes [`MARKUP`] to stdout at the start of each batch, and puts it
    /// in the errors it fails with.
    markup: bool,
    last_txid: AtomicU64,
}

impl Function for Split {
    fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
        let batch = tuple.batch();
        let markup = if self.markup { MARKUP } else { "" };
        if self.markup && self.last_txid.swap(batch.txid, Ordering::Relaxed) != batch.txid {
            println!("{MARKUP} split starts txid {}", batch.txid);
        }
        if Some(batch.txid) == self.retry_txid && batch.attempt == 0 {
            return Err(Error::retry(format!("{markup}txid {} fails on its first attempt", batch.txid)));
        }
        if Some(batch.txid) == self.fatal_txid {
            return Err(Error::fatal(format!("{markup}txid {} cannot be processed", batch.txid)));
        }
        if Some(batch.txid) == self.panic_txid {
            panic!("split cannot go on at txid {}", batch.txid);
        }
        if self.chatty && self.last_txid.swap(batch.txid, Ordering::Relaxed) != batch.txid {
            println!("split starts txid {}", batch.txid);
            eprintln!("split warns about txid {}", batch.txid);
        }
        Function::execute(&SplitWords, tuple, out)
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

/// A batch spout over the lines of a file in a granted directory: batch n
/// holds lines 100 (n - 1) to 100 n.
struct GrantedLines;

impl BatchSpout for GrantedLines {
    fn emit_batch(&self, info: &SpoutInfo, out: &mut SpoutEmitter<'_>) -> Result<bool, Error> {
        let text = std::fs::read_to_string("/input/corpus.txt")
            .map_err(|e| Error::retry(format!("reading /input/corpus.txt: {e}")))?;
        let start = (info.txid as usize - 1) * 100;
        let lines: Vec<&str> = text.lines().skip(start).take(100).collect();
        for line in &lines {
            out.emit([*line])?;
        }
        Ok(!lines.is_empty())
    }
}

/// A batch spout over the integers 0 to 999, 100 a batch, whose first
/// attempt at emitting txid 2 asks for a retry and at txid 3 panics.
struct FlakyNumbers;

impl BatchSpout for FlakyNumbers {
    fn emit_batch(&self, info: &SpoutInfo, out: &mut SpoutEmitter<'_>) -> Result<bool, Error> {
        if info.txid == 2 && info.attempt == 0 {
            return Err(Error::retry("the source is not ready for txid 2 yet"));
        }
        if info.txid == 3 && info.attempt == 0 {
            panic!("the spout fails at txid 3");
        }
        let start = (info.txid as i64 - 1) * 100;
        if start >= 1000 {
            return Ok(false);
        }
        for n in start..start + 100 {
            out.emit([n])?;
        }
        Ok(true)
    }
}

/// A line's first word.
struct FirstWord;

impl Function for FirstWord {
    fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
        out.emit([tuple.str("line")?.split_whitespace().next().unwrap_or_default()])
    }
}

/// Word count over the `sentence`s of `spout`, split by `split`, counted
/// into `state` by `counter`.
fn counted(name: &str, spout: impl Spout, split: Split, state: State, counter: impl CombinerAggregator) -> Topology {
    Topology::new(name)
        .new_stream(spout)
        .each(["sentence"], split, ["word"])
        .name("split")
        .group_by(["word"])
        .persistent_aggregate(state, counter, ["count"])
        .name("count")
        .build()
}

/// Word count over the sentences of a file.
fn word_count(name: &str, split: Split, state: State, counter: impl CombinerAggregator) -> Topology {
    counted(name, FileLines::new("sentence"), split, state, counter)
}

/// Word count over the sentences of a JetStream stream.
fn jetstream_word_count(name: &str, spout: JetStream, split: Split, state: State) -> Topology {
    counted(name, spout.string("sentence"), split, state, Count)
}

/// JSON events from a JetStream stream: totals per user, messages per
/// subject, the last sequence and the latest timestamp.
fn jetstream_events() -> Topology {
    let t = Topology::new("jetstream-events");
    let events = t.new_stream(
        JetStream::transactional("events", ["events.*"])
            .json(["user", "n"])
            .subject_field("subject")
            .sequence_field("seq")
            .timestamp_field("at")
            .max_per_partition(3),
    );
    events.group_by(["user"]).persistent_aggregate_over(State::transactional("totals"), ["n"], Sum, ["total"]);
    events.group_by(["subject"]).persistent_aggregate(State::transactional("per-subject"), Count, ["count"]);
    events.persistent_aggregate_over(State::transactional("last-seq"), ["seq"], Max, ["seq"]);
    events.persistent_aggregate_over(State::transactional("latest"), ["at"], Max, ["at"]);
    t.build()
}

/// Clicks (a page per message or record of `spout`) counted per page;
/// each batch's new counts go to `sink`.
fn page_counts(name: &str, spout: impl Spout, state: State, sink: impl Sink) -> Topology {
    Topology::new(name)
        .new_stream(spout)
        .group_by(["page"])
        .persistent_aggregate(state, Count, ["count"])
        .name("count")
        .new_values_stream()
        .sink(sink)
        .name("page-counts")
        .build()
}

/// [`page_counts`] over a JetStream stream, to a subject.
fn jetstream_sink(name: &str, spout: JetStream, state: State, sink: JetStreamSink) -> Topology {
    page_counts(name, spout.string("page"), state, sink)
}

/// A state updater: each sensor's total of its readings' values.
struct SensorTotals;

impl StateUpdater for SensorTotals {
    fn update_state(&self, state: &dyn MapState, tuples: &[Tuple<'_>], _out: &mut Emitter<'_>) -> Result<(), Error> {
        let mut totals = Sums::default();
        for tuple in tuples {
            totals.add(vec![Value::from(tuple.str("sensor")?)], tuple.i64("value")?);
        }
        totals.add_into(state)
    }
}

/// A reducer: the sum of squares of the values, whatever their order.
struct SquareSum;

impl ReducerAggregator for SquareSum {
    fn init(&self) -> Value {
        Value::I64(0)
    }
    fn reduce(&self, acc: Value, tuple: &Tuple<'_>) -> Result<Value, Error> {
        let Value::I64(acc) = acc else { return Err(Error::fatal(format!("a sum of squares of {acc:?}"))) };
        let value = tuple.i64("value")?;
        Ok(Value::I64(acc + value * value))
    }
}

/// Sensor readings (JSON `sensor`, `ts`, `value`) from a JetStream stream,
/// through one of each kind of commit-phase operator: a state updater,
/// an event-time window, a guest reducer, a count whose new values feed a
/// second aggregate and a sink, and a query. Every result is the same
/// however the readings are cut into batches, as long as each partition's
/// timestamps rise and no partition falls a minute behind the others.
fn jetstream_everything() -> Topology {
    let t = Topology::new("jetstream-everything");
    let readings = t.new_stream(JetStream::transactional("readings", ["readings.*"]).json(["sensor", "ts", "value"]));
    readings.partition_persist(State::transactional("totals"), ["sensor", "value"], SensorTotals, []).name("totals");
    readings
        .group_by(["sensor"])
        // Held open a minute of event time past the greatest timestamp: a
        // partition a batch brings less of than the others is not late.
        .window(Window::tumbling("ts", 1_000).max_delay_ms(60_000), "open", ["value"], Sum, ["sum"])
        .name("windows")
        .group_by(["sensor", "window_start", "window_end"])
        .persistent_aggregate_over(State::transactional("windows"), ["sum"], First, ["sum"])
        .name("keep-windows");
    readings
        .group_by(["sensor"])
        .persistent_aggregate_over(State::transactional("squares"), ["value"], Reducer(SquareSum), ["squares"])
        .name("squares");
    let counts = readings
        .group_by(["sensor"])
        .persistent_aggregate(State::transactional("counts"), Count, ["count"])
        .name("count");
    counts
        .new_values_stream()
        .persistent_aggregate_over(State::transactional("highest"), ["count"], Max, ["highest"])
        .name("highest");
    counts.new_values_stream().sink(JetStreamSink::subject("sensor-counts")).name("sensor-counts");
    let total = readings.persistent_aggregate(State::transactional("total"), Count, ["count"]).name("total");
    t.new_query_stream("total").state_query(&total, [], MapGet, ["total"]).name("get-total").project(["total"]);
    t.build()
}

fn jetstream_topologies() -> Vec<Topology> {
    let corpus = ["corpus.0", "corpus.1", "corpus.2", "corpus.3"];
    vec![
        jetstream_word_count(
            "jetstream-word-count",
            JetStream::transactional("corpus", ["corpus.*"]),
            Split::default(),
            State::transactional("counts"),
        ),
        jetstream_word_count(
            "jetstream-word-count-opaque",
            JetStream::opaque("corpus", corpus),
            Split::default(),
            State::opaque("counts"),
        ),
        // Halts at txid 3 with txids 3 and later recorded: a restart replays them.
        jetstream_word_count(
            "jetstream-fatal-at-3",
            JetStream::transactional("purgeable", ["purgeable.*"]),
            Split { fatal_txid: Some(3), ..Split::default() },
            State::transactional("counts"),
        ),
        // Replays txid 3 after its first attempt fails, within the run.
        jetstream_word_count(
            "jetstream-retry-at-3",
            JetStream::transactional("purged-live", ["purged-live.*"]),
            Split { retry_txid: Some(3), ..Split::default() },
            State::transactional("counts"),
        ),
        // Emits txid 3 and those after it afresh after its first attempt
        // fails, within the run.
        jetstream_word_count(
            "jetstream-retry-at-3-opaque",
            JetStream::opaque("corpus", corpus),
            Split { retry_txid: Some(3), ..Split::default() },
            State::opaque("counts"),
        ),
        jetstream_word_count(
            "jetstream-follow",
            JetStream::transactional("follow", ["follow.*"]),
            Split::default(),
            State::transactional("counts"),
        ),
        // Its stream takes `dynamic.>`: the partitions are the subjects
        // that hold messages, looked up for each batch.
        jetstream_word_count(
            "jetstream-dynamic",
            JetStream::opaque("dynamic", ["dynamic.*"]),
            Split::default(),
            State::opaque("counts"),
        ),
        jetstream_word_count(
            "jetstream-missing-stream",
            JetStream::transactional("no-such-stream", ["anything.*"]),
            Split::default(),
            State::transactional("counts"),
        ),
        jetstream_word_count(
            "jetstream-wrong-subject",
            JetStream::transactional("corpus", ["corpus.1", "elsewhere.1"]),
            Split::default(),
            State::transactional("counts"),
        ),
        jetstream_events(),
        // Words of JSON lines; a line that is not a string halts it (the
        // stream-ops guest's topology of the same name takes any value).
        jetstream_lines(SplitWords),
        jetstream_sink(
            "jetstream-sink",
            JetStream::transactional("clicks", ["clicks.*"]),
            State::transactional("counts"),
            JetStreamSink::subject("page-counts"),
        ),
        jetstream_sink(
            "jetstream-sink-opaque",
            JetStream::opaque("clicks", ["clicks.*"]),
            State::opaque("counts"),
            JetStreamSink::subject("page-counts"),
        ),
        // A file's lines counted, the counts published: only the sink
        // needs a NATS server.
        Topology::new("file-sink")
            .new_stream(FileLines::new("page"))
            .group_by(["page"])
            .persistent_aggregate(State::transactional("counts"), Count, ["count"])
            .new_values_stream()
            .sink(JetStreamSink::subject("page-counts"))
            .name("page-counts")
            .build(),
        // file-sink without its sink: the twin its benchmark row compares
        // it with.
        Topology::new("file-count")
            .new_stream(FileLines::new("page"))
            .group_by(["page"])
            .persistent_aggregate(State::transactional("counts"), Count, ["count"])
            .build(),
        jetstream_sink(
            "jetstream-sink-raw",
            JetStream::transactional("clicks", ["clicks.*"]),
            State::transactional("counts"),
            JetStreamSink::subject("pages-seen").raw("page"),
        ),
    ]
}

/// Word count over the sentences of a Kafka topic.
fn kafka_word_count(name: &str, spout: Kafka, split: Split, state: State) -> Topology {
    counted(name, spout.string("sentence"), split, state, Count)
}

/// [`page_counts`] over a Kafka topic, to a topic.
fn kafka_sink(name: &str, spout: Kafka, state: State, sink: KafkaSink) -> Topology {
    page_counts(name, spout.string("page"), state, sink)
}

fn kafka_topologies() -> Vec<Topology> {
    let events = Topology::new("kafka-events");
    let stream = events.new_stream(
        Kafka::transactional("events")
            .json(["user", "n"])
            .key_field("key")
            .partition_field("partition")
            .offset_field("offset")
            .timestamp_field("at")
            .headers_field("headers")
            .max_per_partition(3),
    );
    stream.group_by(["user"]).persistent_aggregate_over(State::transactional("totals"), ["n"], Sum, ["total"]);
    stream.group_by(["partition"]).persistent_aggregate(State::transactional("per-partition"), Count, ["count"]);
    stream.persistent_aggregate_over(State::transactional("last-offset"), ["offset"], Max, ["offset"]);
    stream.persistent_aggregate_over(State::transactional("latest"), ["at"], Max, ["at"]);
    stream.group_by(["key", "headers"]).persistent_aggregate(State::transactional("keys"), Count, ["count"]);
    vec![
        kafka_word_count(
            "kafka-word-count",
            Kafka::transactional("corpus"),
            Split::default(),
            State::transactional("counts"),
        ),
        kafka_word_count(
            "kafka-word-count-opaque",
            Kafka::opaque("corpus").partitions([0, 1, 2, 3]),
            Split::default(),
            State::opaque("counts"),
        ),
        // Halts at txid 3 with txids 3 and later recorded: a restart replays them.
        kafka_word_count(
            "kafka-fatal-at-3",
            Kafka::transactional("deletable"),
            Split { fatal_txid: Some(3), ..Split::default() },
            State::transactional("counts"),
        ),
        // Fails txid 3's first attempt: the opaque spout emits it afresh.
        kafka_word_count(
            "kafka-flaky-opaque",
            Kafka::opaque("corpus"),
            Split { retry_txid: Some(3), ..Split::default() },
            State::opaque("counts"),
        ),
        kafka_word_count(
            "kafka-follow",
            Kafka::transactional("follow"),
            Split::default(),
            State::transactional("counts"),
        ),
        kafka_word_count(
            "kafka-missing-topic",
            Kafka::transactional("no-such-topic"),
            Split::default(),
            State::transactional("counts"),
        ),
        kafka_word_count(
            "kafka-missing-partition",
            Kafka::transactional("corpus").partitions([0, 9]),
            Split::default(),
            State::transactional("counts"),
        ),
        kafka_word_count(
            "kafka-poison",
            Kafka::transactional("poison"),
            Split::default(),
            State::transactional("counts"),
        ),
        events.build(),
        kafka_sink(
            "kafka-sink",
            Kafka::transactional("clicks"),
            State::transactional("counts"),
            KafkaSink::topic("page-counts"),
        ),
        kafka_sink(
            "kafka-sink-opaque",
            Kafka::opaque("clicks"),
            State::opaque("counts"),
            KafkaSink::topic("page-counts"),
        ),
    ]
}

fn topologies() -> Vec<Topology> {
    let mut topologies = vec![
        word_count("word-count-opaque", Split::default(), State::opaque("counts"), Count),
        word_count(
            "flaky-word-count",
            Split { retry_txid: Some(3), ..Split::default() },
            State::transactional("counts"),
            Count,
        ),
        // A guest combiner reads the field it counts: one whose init saw
        // no field could only count, which the built-in does in the host.
        Topology::new("guest-count")
            .new_stream(FileLines::new("sentence"))
            .each(["sentence"], Split::default(), ["word"])
            .name("split")
            .group_by(["word"])
            .persistent_aggregate_over(State::transactional("counts"), ["word"], GuestCount, ["count"])
            .name("count")
            .build(),
        word_count(
            "chatty-word-count",
            Split { chatty: true, ..Split::default() },
            State::transactional("counts"),
            Count,
        ),
        // Markup in its logs, its failures and its halt, for pages to show as text.
        word_count(
            "markup-word-count",
            Split { markup: true, retry_txid: Some(1), fatal_txid: Some(2), ..Split::default() },
            State::transactional("counts"),
            Count,
        ),
        word_count(
            "poison-word-count",
            Split { panic_txid: Some(2), ..Split::default() },
            State::transactional("counts"),
            Count,
        ),
        word_count(
            "fails-at-5",
            Split { panic_txid: Some(5), ..Split::default() },
            State::transactional("counts"),
            Count,
        ),
        word_count(
            "fatal-at-3",
            Split { fatal_txid: Some(3), ..Split::default() },
            State::transactional("counts"),
            Count,
        ),
        // The example's topology with opaque state: run over the example's
        // data, its commits meet values of another kind.
        word_count("word-count", Split::default(), State::opaque("counts"), Count),
        Topology::new("directory-word-count")
            .new_stream(DirectoryLines::new("sentence"))
            .each(["sentence"], Split::default(), ["word"])
            .name("split")
            .group_by(["word"])
            .persistent_aggregate(State::transactional("counts"), Count, ["count"])
            .build(),
        Topology::new("granted-spout")
            .new_stream(GuestSpout::batch(GrantedLines, ["sentence"]))
            .read_only_dir("input", "/input")
            .each(["sentence"], Split::default(), ["word"])
            .name("split")
            .group_by(["word"])
            .persistent_aggregate(State::transactional("counts"), Count, ["count"])
            .build(),
        Topology::new("flaky-spout-total")
            .new_stream(GuestSpout::batch(FlakyNumbers, ["n"]))
            .persistent_aggregate_over(State::transactional("total"), ["n"], Sum, ["sum"])
            .build(),
        // Each line under its first word: values as long as the lines.
        Topology::new("first-lines")
            .new_stream(FileLines::new("line"))
            .each(["line"], FirstWord, ["id"])
            .group_by(["id"])
            .persistent_aggregate_over(State::transactional("lines"), ["line"], First, ["line"])
            .build(),
        Topology::new("generated-total")
            .new_stream(Generator::new("n", 5000))
            .persistent_aggregate_over(State::transactional("total"), ["n"], Sum, ["sum"])
            .build(),
    ];
    topologies.extend(jetstream_topologies());
    topologies.push(jetstream_everything());
    topologies.extend(kafka_topologies());
    topologies
}

weir_sdk::export!(topologies);

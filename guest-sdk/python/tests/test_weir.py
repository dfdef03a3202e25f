"""The Python SDK's tests: the shared codec and topology vectors, and the
operators' dispatch. Plain unittest: `python3 -m unittest discover -s
guest-sdk/python/tests`."""

import inspect
import json
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
VECTORS = os.path.join(HERE, "..", "..", "..", "tests", "vectors")

import weir  # noqa: E402
from weir import (  # noqa: E402
    INNER,
    OUTER,
    Aggregator,
    BatchInfo,
    CombinerAggregator,
    Count,
    DirectoryLines,
    Fatal,
    FileLines,
    First,
    General,
    Generator,
    GuestSpout,
    JetStream,
    JetStreamSink,
    Limits,
    MapGet,
    Max,
    Min,
    PartitionedSpout,
    Reducer,
    Retry,
    SpoutInfo,
    State,
    Sum,
    Topology,
    Window,
    codec,
    dispatch,
)


def vector_value(v):
    kind, x = next(iter(v.items()))
    if kind == "bytes":
        return bytes.fromhex(x)
    if kind == "f64":
        return float(x)
    return x


class Codec(unittest.TestCase):
    def test_shared_vectors_decode_and_encode_byte_for_byte(self):
        with open(os.path.join(VECTORS, "batches.json"), encoding="utf-8") as f:
            cases = json.load(f)
        self.assertTrue(cases)
        for case in cases:
            with self.subTest(case["name"]):
                raw = bytes.fromhex(case["hex"])
                rows = [(tag, [vector_value(v) for v in values]) for tag, values in case["rows"]]
                arity, decoded = codec.decode(raw)
                self.assertEqual(arity, case["arity"])
                self.assertEqual(decoded, rows)
                for (_, got), (_, want) in zip(decoded, rows):
                    self.assertEqual([type(v) for v in got], [type(v) for v in want])
                self.assertEqual(codec.encode(case["arity"], rows), raw)

    def test_malformed_buffers_are_refused_with_the_reason(self):
        good = codec.encode(1, [(0, ["abc"])])
        for buf, reason in [
            (good[:-1], "more bytes"),
            (good + b"\0", "1 bytes after the last row"),
            (good[:12] + b"\x63" + good[13:], "unknown value kind 99"),
            (codec.encode(1, [(0, [b"\xff"])]).replace(b"\x06", b"\x05"), "not valid UTF-8"),
            (b"\xff\xff\xff\x00\x01\x00\x00\x00", "claims"),
            (b"\x01\x00", "more bytes"),
        ]:
            with self.assertRaises(codec.DecodeError) as caught:
                codec.decode(buf)
            self.assertIn(reason, str(caught.exception))
            self.assertTrue(str(caught.exception).startswith("malformed batch at byte"))

    def test_values_the_encoding_cannot_hold_are_refused(self):
        writer = codec.BatchWriter(1)
        for bad in [1 << 63, object(), [1]]:
            with self.assertRaises(codec.EncodeError):
                writer.push(0, [bad])
        with self.assertRaises(codec.EncodeError) as caught:
            writer.push(0, [1, 2])
        self.assertEqual(str(caught.exception), "a row of 2 values where 1 are declared")
        self.assertEqual(writer.finish(), codec.encode(1, []))

    def test_whole_columns_encode_as_rows_pushed_one_by_one_do(self):
        columns = {
            "string": ["a", "gr\u00fc\u00dfe \u2713", ""],
            "i64": [1, -(1 << 63), (1 << 63) - 1],
            "f64": [0.5, -1e300, 2.0],
            "bool": [True, False, True],
            "bytes": [b"", b"\xff", b"ab"],
            "null": [None, None, None],
            "mixed": [1, "a", None],
        }
        tags = [0, 7, 7]
        for name, column in columns.items():
            with self.subTest(name):
                whole = codec.BatchWriter(2)
                whole.push_columns(tags, [column, column[::-1]])
                one_by_one = codec.BatchWriter(2)
                for tag, a, b in zip(tags, column, column[::-1]):
                    one_by_one.push(tag, [a, b])
                self.assertEqual(whole.finish(), one_by_one.finish())

    def test_a_column_the_encoding_cannot_hold_appends_nothing(self):
        writer = codec.BatchWriter(1)
        writer.push(3, ["kept"])
        for bad in ([1, 1 << 63], ["a", object()]):
            with self.assertRaises(codec.EncodeError):
                writer.push_columns([0, 1], [bad])
        with self.assertRaises(codec.EncodeError) as caught:
            writer.push_columns([0, 1], [["a"]])
        self.assertEqual(str(caught.exception), "a column of 1 values for 2 rows")
        self.assertEqual(writer.finish(), codec.encode(1, [(3, ["kept"])]))


# -- the shared topology vectors ------------------------------------------------


def op(t):
    return ()


class Longest(CombinerAggregator):
    def init(self, t):
        return 0

    def combine(self, a, b):
        return a

    def zero(self):
        return 0


class Total:
    def init(self):
        return 0

    def reduce(self, acc, t):
        return acc


class Distinct(Aggregator):
    def init(self, batch, emit):
        return None

    def aggregate(self, state, t, emit):
        return None

    def complete(self, state, emit):
        pass


class Seen:
    def update_state(self, state, tuples):
        return []

    def batch_retrieve(self, state, tuples):
        return [None] * len(tuples)

    def execute(self, t, result):
        return []


class Numbers(PartitionedSpout):
    def emit_batch(self, info):
        return None

    def partitions(self, info):
        return []

    def emit_partition(self, info, partition, previous):
        return None


def kitchen_sink():
    """The topologies of guest-sdk/tests/topology_vectors.rs, built in Python."""
    t = Topology("kitchen-sink")
    words = (
        t.new_stream(FileLines("sentence"))
        .each(["sentence"], op, ["word"])
        .name("split")
        .parallelism_hint(2)
        .filter(["word"], op)
        .limits(Limits().memory_mib(16).call_ms(500))
        .peek(["word"], op)
    )
    counts = (
        words.group_by(["word"])
        .persistent_aggregate(State.transactional("counts").cache_size(1000), Count, ["count"])
        .name("count")
    )
    lengths = words.map(["word"], op, ["len"]).name("len").read_only_dir("/srv/reference", "/reference")
    lengths.group_by(["len"]).partition_aggregate(["len"], Reducer(Total()), ["total"])
    words.flat_map(["word"], op, ["char"]).shuffle().aggregate(["char"], General(Distinct()), ["distinct"])
    (
        words.group_by(["word"])
        .chained_agg()
        .aggregate([], Count, ["n"])
        .aggregate(["word"], Longest(), ["longest"])
        .aggregate(["word"], Max, ["last"])
        .chain_end()
        .name("stats")
    )
    seen = words.partition_persist(State.opaque("seen"), ["word"], Seen(), ["word", "first"]).name("remember")
    seen.new_values_stream().project(["word"]).global_().batch_global().broadcast().partition_by(["word"]).min()
    words.persistent_aggregate_over(State.non_transactional("longest"), ["word"], Longest(), ["longest"])
    words.persistent_aggregate(State.opaque("total"), Total(), ["total"]).parallelism_hint(3)
    left = words.each(["word"], op, ["a"])
    right = words.each(["word"], op, ["b"])
    joined = t.join(left, ["word"], right, ["word"], ["word", "a", "b"])
    outer = t.join(joined, ["word"], left, ["word"], ["word", "a", "b", "c"], [INNER, OUTER])
    t.merge(outer.project(["word"]), words.project("word")).max_by("word").min_by("word").max()
    query = t.new_query_stream("words").each("args", op, "word").name("split-args")
    (
        query.group_by(["word"])
        .state_query(counts, ["word"], MapGet, ["count"])
        .name("get-count")
        .aggregate(["count"], Sum, ["sum"])
        .name("sum")
    )
    query.state_query(seen, ["word"], Seen(), ["first"]).aggregate(["first"], First, ["first"])
    query.group_by(["word"]).aggregate(["word"], Min, ["least"]).partition_aggregate([], Count, ["n"])

    batch = (
        Topology("batch-spout")
        .new_stream(GuestSpout.batch(Numbers(), ["n", "label"]))
        .limits(Limits().output_tuples(100).output_mib(1))
        .partition_persist(State.transactional("all"), ["n"], Seen(), [])
        .build()
    )
    partitioned = (
        Topology("partitioned")
        .new_stream(GuestSpout.partitioned_transactional(Numbers(), ["n"]))
        .persistent_aggregate_over(State.transactional("sum"), ["n"], Sum, ["sum"])
        .build()
    )
    opaque = (
        Topology("opaque")
        .new_stream(GuestSpout.partitioned_opaque(Numbers(), ["n"]))
        .persistent_aggregate_over(State.opaque("sum"), ["n"], Sum, ["sum"])
        .build()
    )
    generated = (
        Topology("generated")
        .new_stream(Generator("n", 1000))
        .persistent_aggregate_over(State.transactional("sum"), ["n"], Sum, ["sum"])
        .build()
    )
    files = (
        Topology("ünïcode-directory")
        .new_stream(DirectoryLines("line"))
        .persistent_aggregate(State.transactional("lines"), Count, ["count"])
        .build()
    )
    clicks = (
        Topology("clicks")
        .new_stream(
            JetStream.transactional("clicks", ["clicks.*", "ads.eu"])
            .json(["user", "url"])
            .subject_field("subject")
            .sequence_field("seq")
            .timestamp_field("at")
            .max_per_partition(500)
        )
        .group_by(["user"])
        .persistent_aggregate(State.transactional("clicks"), Count, ["count"])
        .build()
    )
    lines = (
        Topology("log-lines")
        .new_stream(JetStream.opaque("logs", "logs.>").string("line"))
        .persistent_aggregate(State.opaque("lines"), Count, ["count"])
        .build()
    )
    raw = (
        Topology("raw-bytes")
        .new_stream(JetStream.opaque("raw", ["raw.0"]))
        .persistent_aggregate(State.opaque("messages"), Count, ["count"])
        .build()
    )
    pages = Topology("page-counts")
    counts = (
        pages.new_stream(JetStream.transactional("clicks", ["clicks.*"]).string("page"))
        .group_by(["page"])
        .persistent_aggregate(State.transactional("counts"), Count, ["count"])
    )
    counts.new_values_stream().sink(JetStreamSink.subject("page-counts")).name("to-nats")
    counts.new_values_stream().sink(JetStreamSink.subject("pages.raw").raw("page"))
    return [t.build(), batch, partitioned, opaque, generated, files, clicks, lines, raw, pages.build(), windows()]


def windows():
    """Every kind of window, grouped and not, over built-in and guest
    aggregators, named and not, and a window's late stream."""
    t = Topology("windows")
    readings = t.new_stream(GuestSpout.batch(Numbers(), ["sensor", "value", "at"]))
    sensors = readings.group_by("sensor")
    readings.window(Window.tumbling_count(3), "threes", ["value"], Sum, ["sum"])
    sensors.window(Window.sliding_count(10, 5), "tens", ["value"], Longest(), ["longest"]).name("longest")
    readings.window(Window.tumbling_duration(60_000), "minutes", [], Count, ["count"])
    sensors.window(Window.sliding_duration(60_000, 10_000), "moving", ["value"], Reducer(Total()), ["total"])
    (
        readings.window(Window.tumbling("at", 1_000).lateness_ms(500).max_delay_ms(200), "seconds", "value", Max, "max")
        .name("per-second")
        .project(["window_end", "max"])
    )
    sensors.window(Window.sliding("at", 10_000, 2_500).lateness_ms(1_000).idle_timeout_ms(3_000), "sliding", ["value"], Min, ["min"])
    sessions = (
        sensors.window(Window.session("at", 30_000).max_delay_ms(5_000), "sessions", ["value"], Total(), ["total"])
        .name("sessions")
    )
    readings.window(Window.session("at", 1).idle_timeout_ms(0), "bursts", ["value"], Longest(), ["longest"])
    sessions.late_stream().group_by("sensor").persistent_aggregate(State.transactional("late"), Count, ["count"])
    return t.build()


class Builder(unittest.TestCase):
    def test_the_builder_writes_the_rust_builders_definitions_byte_for_byte(self):
        with open(os.path.join(VECTORS, "topologies.json"), encoding="utf-8") as f:
            want = f.read().rstrip("\n")
        self.assertEqual(weir.describe(kitchen_sink()), want)

    def test_a_jetstream_spout_emits_its_payload_fields_then_the_message_fields(self):
        clicks = kitchen_sink()[6]
        self.assertEqual(clicks.spout_fields(), ["user", "url", "subject", "seq", "at"])
        self.assertEqual(kitchen_sink()[8].spout_fields(), ["payload"])

    def assert_registered(self, topology, kinds):
        """The kind of code registered under each id (None: none)."""
        for id, kind in kinds.items():
            code = topology.code(id)
            self.assertEqual(None if code is None else code[0], kind, id)

    def test_operators_are_registered_under_their_final_ids(self):
        t = kitchen_sink()[0]
        self.assert_registered(
            t,
            {
                "split": "function",
                "each-1": None,
                "stats.1": "combiner",
                "partition-aggregate-7": "reducer",
                "aggregate-10": "general",
                "remember": "updater",
                "state-query-36": "query",
                "count": None,
            },
        )
        self.assertEqual(t.output_arity("peek-3"), 0)
        self.assertEqual(t.aggregator_arity("stats.2"), 1)

    def test_window_aggregators_are_registered_under_their_final_ids(self):
        t = kitchen_sink()[10]
        self.assert_registered(
            t,
            {
                "longest": "combiner",
                "window-2": None,
                "window-4": "reducer",
                "sessions": "reducer",
                "window-9": "combiner",
                "per-second": None,
            },
        )
        self.assertEqual(t.aggregator_arity("sessions"), 1)

    def test_a_window_size_that_is_no_whole_number_is_refused_naming_it(self):
        for make, message in [
            (lambda: Window.tumbling_count(-1), "window size: -1 is not a whole number"),
            (lambda: Window.sliding_duration(1_000, 2.5), "window slide: 2.5 is not a whole number"),
            (lambda: Window.session("at", True), "window gap: True is not a whole number"),
            (lambda: Window.tumbling("at", 10).lateness_ms(2**64), "window lateness: 18446744073709551616 is not"),
            (lambda: Window.session("at", 10).idle_timeout_ms(-1), "window idle timeout: -1 is not a whole number"),
        ]:
            with self.assertRaises(ValueError) as caught:
                make()
            self.assertIn(message, str(caught.exception))

    def test_a_window_keeps_the_definition_it_was_given(self):
        t = Topology("t")
        window = Window.tumbling("at", 1_000)
        t.new_stream(FileLines("line")).window(window, "open", [], Count, ["n"])
        window.max_delay_ms(5)
        self.assertNotIn("max_delay_ms", t.nodes[1]["op"]["window"])


# -- dispatch ----------------------------------------------------------------


def split(t):
    if t.batch.txid == 3 and t.batch.attempt == 0:
        raise Retry("txid 3 fails once")
    yield from t.str("sentence").split()


class Longer(CombinerAggregator):
    def init(self, t):
        return len(t.str(0))

    def combine(self, a, b):
        return max(a, b)

    def zero(self):
        return 0


class Concat:
    def init(self):
        return ""

    def reduce(self, acc, t):
        return acc + t.str("word")


class Pairs(Aggregator):
    """Emits (group size, first word) at the end of each group."""

    def init(self, batch, emit):
        return [0, None]

    def aggregate(self, state, t, emit):
        state[0] += 1
        if state[1] is None:
            state[1] = t["word"]

    def complete(self, state, emit):
        emit(state[0], state[1])


class Remember:
    def update_state(self, state, tuples):
        words = [(t["word"],) for t in tuples]
        stored = state.multi_get(words)
        state.multi_put([(w, (s or 0) + 1) for w, s in zip(words, stored)])
        for (w,), s in zip(words, stored):
            yield w, s

    def batch_retrieve(self, state, tuples):
        return state.multi_get([[t["word"]] for t in tuples])

    def execute(self, t, result):
        if result is not None:
            yield result * 10


class Letters(PartitionedSpout):
    def partitions(self, info):
        return ["a", "b"]

    def emit_partition(self, info, partition, previous):
        start = 0 if previous is None else previous[0] + 1
        if start >= 3:
            return None
        return [(f"{partition}{start}",)], bytes([start])

    def reemit_partition(self, info, partition, meta):
        return [f"{partition}{meta[0]}"]


class Numbers3:
    def emit_batch(self, info):
        if info.txid > 2:
            return None
        return [(info.txid * 10 + i, "x") for i in range(3)]


def topologies():
    wc = Topology("wc")
    words = wc.new_stream(FileLines("sentence")).each(["sentence"], split, ["word"]).name("split")
    words.filter(["word"], lambda t: len(t["word"]) > 1).name("long")
    words.map(["word"], lambda t: (t["word"].upper(), len(t["word"])), ["upper", "len"]).name("upper")
    words.flat_map(["word"], lambda t: list(t["word"]), ["char"]).name("chars")
    seen = []
    words.peek(["word"], lambda t: seen.append(t["word"])).name("look")
    words.group_by("word").persistent_aggregate_over(State.opaque("max"), ["word"], Longer(), ["len"]).name("longest")
    words.group_by("word").aggregate(["word"], Concat(), ["all"]).name("concat")
    words.group_by("word").aggregate(["word"], Pairs(), ["n", "first"]).name("pairs")
    remembered = words.partition_persist(State.transactional("seen"), ["word"], Remember(), ["word", "before"])
    remembered.name("remember")
    q = wc.new_query_stream("q").each("args", split, "word")
    q.state_query(remembered, ["word"], Remember(), ["tens"]).name("lookup")
    numbers = Topology("numbers").new_stream(GuestSpout.batch(Numbers3(), ["n", "s"])).build()
    letters = Topology("letters").new_stream(GuestSpout.partitioned_transactional(Letters(), "letter")).build()
    return [wc.build(), numbers, letters], seen


def info(operator, fields, txid=1, attempt=0, topology="wc"):
    return BatchInfo(topology, operator, txid, attempt, 0, list(fields))


def rows(buf):
    return codec.decode(buf)[1]


def batch(*values, tags=None):
    return codec.encode(1, [(tags[i] if tags else 0, [v]) for i, v in enumerate(values)])


class FakeState:
    def __init__(self):
        self.data = {}

    def get(self, keys):
        arity, key_rows = codec.decode(keys)
        return codec.encode(1, [(0, [self.data.get(tuple(k))]) for _, k in key_rows])

    def put(self, entries):
        for _, row in codec.decode(entries)[1]:
            self.data[tuple(row[:-1])] = row[-1]


class Dispatch(unittest.TestCase):
    def setUp(self):
        self.t, self.seen = topologies()

    def test_function_output_rows_are_tagged_with_their_input_row(self):
        out = dispatch.run_function(self.t, info("split", ["sentence"]), batch("a b", "", "c"))
        self.assertEqual(rows(out), [(0, ["a"]), (0, ["b"]), (2, ["c"])])

    def test_map_flat_map_peek_and_filter(self):
        words = batch("ab", "c")
        self.assertEqual(
            rows(dispatch.run_function(self.t, info("upper", ["word"]), words)), [(0, ["AB", 2]), (1, ["C", 1])]
        )
        self.assertEqual(
            rows(dispatch.run_function(self.t, info("chars", ["word"]), words)),
            [(0, ["a"]), (0, ["b"]), (1, ["c"])],
        )
        out = dispatch.run_function(self.t, info("look", ["word"]), words)
        self.assertEqual((codec.decode(out), self.seen), ((0, []), ["ab", "c"]))
        self.assertEqual(dispatch.run_filter(self.t, info("long", ["word"]), words), b"\x01\x00")

    def test_guest_errors_and_unknown_operators_come_back_as_errors(self):
        with self.assertRaises(Retry) as caught:
            dispatch.run_function(self.t, info("split", ["sentence"], txid=3), batch("a"))
        self.assertEqual(caught.exception.message, "txid 3 fails once")
        dispatch.run_function(self.t, info("split", ["sentence"], txid=3, attempt=1), batch("a"))
        with self.assertRaisesRegex(Fatal, 'no function "nope"'):
            dispatch.run_function(self.t, info("nope", ["sentence"]), batch())
        with self.assertRaisesRegex(Fatal, "malformed batch"):
            dispatch.run_function(self.t, info("split", ["sentence"]), b"\x01\x02\x03")
        with self.assertRaisesRegex(Fatal, "input rows hold 1 values for 2 fields"):
            dispatch.run_function(self.t, info("split", ["sentence", "x"]), batch("a"))
        with self.assertRaisesRegex(Fatal, 'no topology "other"'):
            dispatch.run_function(self.t, info("split", ["sentence"], topology="other"), batch("a"))
        with self.assertRaisesRegex(Fatal, "field sentence is i64, not string"):
            dispatch.run_function(self.t, info("split", ["sentence"]), batch(7))
        two = [Topology("wc").new_stream(FileLines("x")).each("x", lambda t: [1], ["a", "b"]).name("e").build()]
        with self.assertRaisesRegex(Fatal, "emitted a row of 1 values where 2 are declared"):
            dispatch.run_function(two, info("e", ["x"]), batch(1))

    def test_combiner_folds_groups_from_zero_and_combines_pairs(self):
        ctx = info("longest", ["word"])
        out = dispatch.combine_groups(self.t, ctx, 3, batch("abc", "a", "ab", tags=[0, 1, 0]))
        self.assertEqual(rows(out), [(0, [3]), (1, [1]), (2, [0])])
        pairs = codec.encode(2, [(0, [5, 2]), (1, [1, 4])])
        self.assertEqual(rows(dispatch.combine_pairs(self.t, ctx, pairs)), [(0, [5]), (1, [4])])
        with self.assertRaisesRegex(Fatal, "group 4 of 1"):
            dispatch.combine_groups(self.t, ctx, 1, batch("x", tags=[4]))

    def test_reducer_starts_from_the_stored_value_or_init(self):
        start = codec.encode(1, [(1, ["z"])])
        out = dispatch.reduce_groups(self.t, info("concat", ["word"]), 3, start, batch("a", "b", "c", tags=[0, 1, 0]))
        self.assertEqual(rows(out), [(0, ["ac"]), (1, ["zb"]), (2, [""])])

    def test_general_aggregator_runs_each_group(self):
        out = dispatch.aggregate_groups(self.t, info("pairs", ["word"]), 2, batch("a", "b", "c", tags=[1, 1, 1]))
        self.assertEqual(rows(out), [(0, [0, None]), (1, [3, "a"])])

    def test_state_updater_and_query_function_use_the_host_state(self):
        store = FakeState()
        state = dispatch.MapState(store.get, store.put)
        out = dispatch.update_state(self.t, info("remember", ["word"]), state, batch("a", "b"))
        self.assertEqual(rows(out), [(0, ["a", None]), (0, ["b", None])])
        dispatch.update_state(self.t, info("remember", ["word"]), state, batch("a"))
        self.assertEqual(store.data, {("a",): 2, ("b",): 1})
        words = batch("a", "zz")
        results = dispatch.batch_retrieve(self.t, info("lookup", ["word"]), state, words)
        self.assertEqual(rows(results), [(0, [2]), (1, [None])])
        out = dispatch.execute_query(self.t, info("lookup", ["word"]), words, results)
        self.assertEqual(rows(out), [(0, [20])])

    def test_spouts(self):
        spout = SpoutInfo("numbers", 2, 0, 100)
        self.assertEqual(rows(dispatch.emit_batch(self.t, spout)), [(0, [20, "x"]), (0, [21, "x"]), (0, [22, "x"])])
        self.assertIsNone(dispatch.emit_batch(self.t, SpoutInfo("numbers", 3, 0, 100)))
        letters = SpoutInfo("letters", 1, 0, 100)
        self.assertEqual(dispatch.spout_partitions(self.t, letters), ["a", "b"])
        tuples, meta = dispatch.emit_partition(self.t, letters, "b", None)
        self.assertEqual((rows(tuples), meta), ([(0, ["b0"])], b"\x00"))
        tuples, meta = dispatch.emit_partition(self.t, letters, "b", meta)
        self.assertEqual(rows(dispatch.reemit_partition(self.t, letters, "b", meta)), [(0, ["b1"])])
        self.assertIsNone(dispatch.emit_partition(self.t, letters, "b", b"\x02"))
        with self.assertRaisesRegex(Fatal, "no batch spout"):
            dispatch.emit_batch(self.t, letters)


def split_all(sentences):
    return [sentence.split() for sentence in sentences]


class BatchFunctions(unittest.TestCase):
    def test_a_batch_function_takes_whole_columns_and_emits_as_each_does(self):
        batched = Topology("wc")
        batched.new_stream(FileLines("sentence")).each_batch(["sentence"], split_all, ["word"]).name("split")
        per_tuple = Topology("wc")
        per_tuple.new_stream(FileLines("sentence")).each(["sentence"], split, ["word"]).name("split")
        self.assertEqual(weir.describe([batched]), weir.describe([per_tuple]))
        out = dispatch.run_function([batched], info("split", ["sentence"]), batch("a b", "", "c"))
        self.assertEqual(rows(out), [(0, ["a"]), (0, ["b"]), (2, ["c"])])

    def test_a_batch_function_over_two_fields_emits_tuples_generators_or_nothing(self):
        def repeated(word, count):
            for _ in range(count):
                yield word, count

        def pairs(words, counts):
            return [repeated(w, c) if c else None for w, c in zip(words, counts)]

        ops = [weir.Operators("t").function_batch("pairs", pairs, ["word", "n"])]
        two = codec.encode(2, [(0, ["a", 2]), (0, ["b", 0]), (0, ["c", 1])])
        out = dispatch.run_function(ops, info("pairs", ["word", "count"], topology="t"), two)
        self.assertEqual(rows(out), [(0, ["a", 2]), (0, ["a", 2]), (2, ["c", 1])])

    def test_a_batch_function_answers_for_every_row_or_the_batch_fails(self):
        ops = weir.Operators("t")
        ops.function_batch("short", lambda words: [[w] for w in words][1:], ["word"])
        ops.function_batch("none", lambda words: None, ["word"])
        ops.function_batch("bad", lambda words: [[object()] for _ in words], ["word"])
        for operator, message in [
            ("short", "returns a list of what each of the 2 input rows emits; it returned 1 entries"),
            ("none", "it returned a NoneType"),
            ("bad", "emitted cannot encode a value of type object"),
        ]:
            with self.subTest(operator), self.assertRaises(Fatal) as caught:
                dispatch.run_function([ops], info(operator, ["word"], topology="t"), batch("x", "y"))
            self.assertIn(message, caught.exception.message)


def lengths(sentence):
    return [len(sentence["sentence"])]


LENGTHS_LINE = inspect.getsourcelines(lengths)[1] + 1


class Failures(unittest.TestCase):
    def test_an_unexpected_exception_says_where_in_the_guest_it_was_raised(self):
        t = Topology("wc")
        t.new_stream(FileLines("sentence")).each(["sentence"], lengths, ["n"]).name("lengths")
        # Caught here, not by assertRaises, which drops the traceback.
        try:
            dispatch.run_function([t], info("lengths", ["sentence"]), batch(7))
        except TypeError as e:
            message = weir.failure_message(e, HERE)
        lines = message.splitlines()
        self.assertEqual(lines[:2], ["TypeError: object of type 'int' has no len()", "Traceback (most recent call last):"])
        # Innermost last, as Python prints it: the guest's own line.
        self.assertEqual(
            lines[-2:], [f'  File "test_weir.py", line {LENGTHS_LINE}, in lengths', '    return [len(sentence["sentence"])]']
        )
        self.assertNotIn("dispatch.py", message)


class OperatorsOfAnotherComponentsTopology(unittest.TestCase):
    def test_they_run_by_operator_id_and_describe_nothing(self):
        ops = (
            weir.Operators("polyglot")
            .function("split", split, ["word"])
            .aggregator("count", Longer())
            .aggregator("pairs", Pairs(), ["n", "first"])
            .guest_spout(GuestSpout.batch(Numbers3(), ["n", "s"]))
        )
        out = dispatch.run_function([ops], info("split", ["sentence"], topology="polyglot"), batch("a b"))
        self.assertEqual(rows(out), [(0, ["a"]), (0, ["b"])])
        pairs = codec.encode(2, [(0, [5, 2])])
        self.assertEqual(rows(dispatch.combine_pairs([ops], info("count", [], topology="polyglot"), pairs)), [(0, [5])])
        out = dispatch.aggregate_groups([ops], info("pairs", ["word"], topology="polyglot"), 1, batch("x"))
        self.assertEqual(rows(out), [(0, [1, "x"])])
        self.assertEqual(len(rows(dispatch.emit_batch([ops], SpoutInfo("polyglot", 1, 0, 10)))), 3)
        with self.assertRaisesRegex(Fatal, 'no filter "split"'):
            dispatch.run_filter([ops], info("split", ["sentence"], topology="polyglot"), batch("a"))
        self.assertEqual(weir.describe([ops]), "[]")
        with self.assertRaises(TypeError):
            weir.Operators("t").aggregator("n", Count)


if __name__ == "__main__":
    unittest.main()


class KafkaBuilders(unittest.TestCase):
    def test_the_kafka_spout_and_sink_define_what_the_host_reads(self):
        spout = (
            weir.Kafka.opaque("clicks")
            .partitions([0, 2])
            .json(["user", "page"])
            .key_field("key")
            .offset_field("offset")
            .max_per_partition(500)
        )
        self.assertEqual(
            json.dumps(spout._define(None)),
            '{"kind": "kafka", "promise": "opaque", "topic": "clicks", "partitions": [0, 2], '
            '"value": {"as": "json", "fields": ["user", "page"]}, "key_field": "key", '
            '"offset_field": "offset", "max_per_partition": 500}',
        )
        self.assertEqual(
            weir.topology._spout_fields(spout._define(None)), ["user", "page", "key", "offset"]
        )
        sink = weir.KafkaSink.topic("page-counts").raw("page")
        self.assertEqual(
            sink._define(), {"kind": "kafka", "topic": "page-counts", "payload": {"as": "raw", "field": "page"}}
        )

// The JavaScript SDK's tests: the shared codec and topology vectors, and the
// operators' dispatch. `node --test guest-sdk/js/test/`.

import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import * as weir from "../weir.js";
import {
  BatchInfo,
  Count,
  DirectoryLines,
  FileLines,
  Fatal,
  First,
  General,
  Generator,
  GuestSpout,
  INNER,
  JetStream,
  JetStreamSink,
  Limits,
  MapGet,
  MapState,
  Max,
  Min,
  OUTER,
  Reducer,
  Retry,
  SpoutInfo,
  State,
  Sum,
  Topology,
  Window,
  decode,
  encode,
  BatchWriter,
  DecodeError,
  EncodeError,
} from "../weir.js";

const vectors = (name) => readFileSync(fileURLToPath(new URL(`../../../tests/vectors/${name}`, import.meta.url)), "utf8");

function vectorValue(v) {
  const [kind, x] = Object.entries(v)[0];
  switch (kind) {
    case "i64":
      return BigInt(x);
    case "f64":
      return Number(x);
    case "bytes":
      return Uint8Array.from(Buffer.from(x, "hex"));
  }
  return x;
}

const hex = (bytes) => Buffer.from(bytes).toString("hex");

test("the shared vectors decode and encode byte for byte", () => {
  // Integers as strings, so that none loses precision on the way.
  const cases = JSON.parse(vectors("batches.json").replace(/"i64": (-?\d+)/g, '"i64": "$1"'));
  assert.ok(cases.length > 0);
  for (const c of cases) {
    const raw = Uint8Array.from(Buffer.from(c.hex, "hex"));
    const rows = c.rows.map(([tag, values]) => [tag, values.map(vectorValue)]);
    const decoded = decode(raw);
    assert.equal(decoded.arity, c.arity, c.name);
    assert.deepEqual(decoded.rows, rows, c.name);
    assert.equal(hex(encode(c.arity, rows)), c.hex, c.name);
  }
});

test("malformed buffers are refused with the reason", () => {
  const good = encode(1, [[0, ["abc"]]]);
  const kind99 = good.slice();
  kind99[12] = 0x63;
  const badUtf8 = encode(1, [[0, [Uint8Array.of(0x61, 0xff)]]]);
  badUtf8[12] = 5;
  for (const [buf, reason] of [
    [good.slice(0, -1), "more bytes"],
    [Uint8Array.of(...good, 0), "1 bytes after the last row"],
    [kind99, "unknown value kind 99"],
    [badUtf8, "at byte 18: string is not valid UTF-8"],
    [Uint8Array.of(0xff, 0xff, 0xff, 0, 1, 0, 0, 0), "claims"],
    [Uint8Array.of(1, 0), "more bytes"],
  ]) {
    assert.throws(() => decode(buf), (e) => e instanceof DecodeError && e.message.includes(reason) && e.message.startsWith("malformed batch at byte"));
  }
});

test("one-field string batches decode as the checked reader reads them", () => {
  const long = "w".repeat(200); // its length has a byte above 0x7f
  for (const strings of [["a b", "", "c"], ["a", "gr\u00fc\u00dfe \u2713", "b"], [long, "x"], ["x", null, "y"]]) {
    const rowsOf = strings.map((s, i) => [i % 2, [s]]);
    assert.deepEqual(decode(encode(1, rowsOf)), { arity: 1, rows: rowsOf });
  }
  // One whose last length runs past its end, or with a byte after its last
  // row, is refused with the checked reader's reason.
  const ascii = encode(1, [
    [0, ["ab"]],
    [0, ["cd"]],
  ]);
  const longer = ascii.slice();
  longer[ascii.length - 6] = 3;
  for (const [buf, reason] of [
    [longer, "more bytes"],
    [Uint8Array.of(...ascii, 0x20), "1 bytes after the last row"],
  ]) {
    assert.throws(() => decode(buf), (e) => e instanceof DecodeError && e.message.includes(reason));
  }
});

test("values the encoding cannot hold are refused", () => {
  const writer = new BatchWriter(1);
  for (const bad of [2n ** 63n, {}, undefined, [1]]) assert.throws(() => writer.push(0, [bad]), EncodeError);
  assert.throws(() => writer.push(0, [1n, 2n]), { message: "a row of 2 values where 1 are declared" });
  assert.equal(hex(writer.finish()), hex(encode(1, [])));
});

// -- the shared topology vectors ---------------------------------------------

const op = () => [];
const longest = { init: () => 0n, combine: (a) => a, zero: () => 0n };
const total = { init: () => 0n, reduce: (acc) => acc };
const distinct = { init() {}, aggregate() {}, complete() {} };
const seenOps = { updateState: () => [], batchRetrieve: (s, tuples) => tuples.map(() => null), execute: () => [] };
const numbers = { emitBatch: () => null, partitions: () => [], emitPartition: () => null };

/** The topologies of guest-sdk/tests/topology_vectors.rs, built in JavaScript. */
function kitchenSink() {
  const t = new Topology("kitchen-sink");
  const words = t
    .newStream(new FileLines("sentence"))
    .each(["sentence"], op, ["word"])
    .name("split")
    .parallelismHint(2)
    .filter(["word"], op)
    .limits(new Limits().memoryMib(16).callMs(500))
    .peek(["word"], op);
  const counts = words
    .groupBy(["word"])
    .persistentAggregate(State.transactional("counts").cacheSize(1000), Count, ["count"])
    .name("count");
  const lengths = words.map(["word"], op, ["len"]).name("len").readOnlyDir("/srv/reference", "/reference");
  lengths.groupBy(["len"]).partitionAggregate(["len"], Reducer(total), ["total"]);
  words.flatMap(["word"], op, ["char"]).shuffle().aggregate(["char"], General(distinct), ["distinct"]);
  words
    .groupBy(["word"])
    .chainedAgg()
    .aggregate([], Count, ["n"])
    .aggregate(["word"], longest, ["longest"])
    .aggregate(["word"], Max, ["last"])
    .chainEnd()
    .name("stats");
  const seen = words.partitionPersist(State.opaque("seen"), ["word"], seenOps, ["word", "first"]).name("remember");
  seen.newValuesStream().project(["word"]).global().batchGlobal().broadcast().partitionBy(["word"]).min();
  words.persistentAggregateOver(State.nonTransactional("longest"), ["word"], longest, ["longest"]);
  words.persistentAggregate(State.opaque("total"), total, ["total"]).parallelismHint(3);
  const left = words.each(["word"], op, ["a"]);
  const right = words.each(["word"], op, ["b"]);
  const joined = t.join(left, ["word"], right, ["word"], ["word", "a", "b"]);
  const outer = t.join(joined, ["word"], left, ["word"], ["word", "a", "b", "c"], [INNER, OUTER]);
  t.merge(outer.project(["word"]), words.project("word")).maxBy("word").minBy("word").max();
  const query = t.newQueryStream("words").each("args", op, "word").name("split-args");
  query
    .groupBy(["word"])
    .stateQuery(counts, ["word"], MapGet, ["count"])
    .name("get-count")
    .aggregate(["count"], Sum, ["sum"])
    .name("sum");
  query.stateQuery(seen, ["word"], seenOps, ["first"]).aggregate(["first"], First, ["first"]);
  query.groupBy(["word"]).aggregate(["word"], Min, ["least"]).partitionAggregate([], Count, ["n"]);

  const batch = new Topology("batch-spout")
    .newStream(GuestSpout.batch(numbers, ["n", "label"]))
    .limits(new Limits().outputTuples(100).outputMib(1))
    .partitionPersist(State.transactional("all"), ["n"], seenOps, [])
    .build();
  const partitioned = new Topology("partitioned")
    .newStream(GuestSpout.partitionedTransactional(numbers, ["n"]))
    .persistentAggregateOver(State.transactional("sum"), ["n"], Sum, ["sum"])
    .build();
  const opaque = new Topology("opaque")
    .newStream(GuestSpout.partitionedOpaque(numbers, ["n"]))
    .persistentAggregateOver(State.opaque("sum"), ["n"], Sum, ["sum"])
    .build();
  const generated = new Topology("generated")
    .newStream(new Generator("n", 1000))
    .persistentAggregateOver(State.transactional("sum"), ["n"], Sum, ["sum"])
    .build();
  const files = new Topology("ünïcode-directory")
    .newStream(new DirectoryLines("line"))
    .persistentAggregate(State.transactional("lines"), Count, ["count"])
    .build();
  const clicks = new Topology("clicks")
    .newStream(
      JetStream.transactional("clicks", ["clicks.*", "ads.eu"])
        .json(["user", "url"])
        .subjectField("subject")
        .sequenceField("seq")
        .timestampField("at")
        .maxPerPartition(500),
    )
    .groupBy(["user"])
    .persistentAggregate(State.transactional("clicks"), Count, ["count"])
    .build();
  const lines = new Topology("log-lines")
    .newStream(JetStream.opaque("logs", "logs.>").string("line"))
    .persistentAggregate(State.opaque("lines"), Count, ["count"])
    .build();
  const raw = new Topology("raw-bytes")
    .newStream(JetStream.opaque("raw", ["raw.0"]))
    .persistentAggregate(State.opaque("messages"), Count, ["count"])
    .build();
  const pages = new Topology("page-counts");
  const perPage = pages
    .newStream(JetStream.transactional("clicks", ["clicks.*"]).string("page"))
    .groupBy(["page"])
    .persistentAggregate(State.transactional("counts"), Count, ["count"]);
  perPage.newValuesStream().sink(JetStreamSink.subject("page-counts")).name("to-nats");
  perPage.newValuesStream().sink(JetStreamSink.subject("pages.raw").raw("page"));
  return [t.build(), batch, partitioned, opaque, generated, files, clicks, lines, raw, pages.build(), windows()];
}

/** Every kind of window, grouped and not, over built-in and guest
 *  aggregators, named and not, and a window's late stream. */
function windows() {
  const t = new Topology("windows");
  const readings = t.newStream(GuestSpout.batch(numbers, ["sensor", "value", "at"]));
  const sensors = readings.groupBy("sensor");
  readings.window(Window.tumblingCount(3), "threes", ["value"], Sum, ["sum"]);
  sensors.window(Window.slidingCount(10, 5), "tens", ["value"], longest, ["longest"]).name("longest");
  readings.window(Window.tumblingDuration(60_000), "minutes", [], Count, ["count"]);
  sensors.window(Window.slidingDuration(60_000n, 10_000n), "moving", ["value"], Reducer(total), ["total"]);
  readings
    .window(Window.tumbling("at", 1_000).latenessMs(500).maxDelayMs(200), "seconds", "value", Max, "max")
    .name("per-second")
    .project(["window_end", "max"]);
  sensors.window(Window.sliding("at", 10_000, 2_500).latenessMs(1_000).idleTimeoutMs(3_000), "sliding", ["value"], Min, ["min"]);
  const sessions = sensors
    .window(Window.session("at", 30_000).maxDelayMs(5_000), "sessions", ["value"], total, ["total"])
    .name("sessions");
  readings.window(Window.session("at", 1).idleTimeoutMs(0), "bursts", ["value"], longest, ["longest"]);
  sessions.lateStream().groupBy("sensor").persistentAggregate(State.transactional("late"), Count, ["count"]);
  return t.build();
}

test("the builder writes the Rust builder's definitions byte for byte", () => {
  assert.equal(weir.describe(kitchenSink()), vectors("topologies.json").trimEnd());
});

test("a JetStream spout emits its payload fields, then the message fields", () => {
  const topologies = kitchenSink();
  assert.deepEqual(topologies[6].spoutFields(), ["user", "url", "subject", "seq", "at"]);
  assert.deepEqual(topologies[8].spoutFields(), ["payload"]);
});

/** The kind of code registered under each id (undefined: none). */
function assertRegistered(topology, kinds) {
  for (const [id, kind] of Object.entries(kinds)) assert.equal(topology.code.get(id)?.kind, kind, id);
}

test("operators and window aggregators are registered under their final ids", () => {
  const cases = [
    {
      topology: 0,
      kinds: {
        split: "function",
        "each-1": undefined,
        "stats.1": "combiner",
        "partition-aggregate-7": "reducer",
        "aggregate-10": "general",
        remember: "updater",
        "state-query-36": "query",
        count: undefined,
      },
      outputArities: { "peek-3": 0 },
      aggregatorArities: { "stats.2": 1 },
    },
    {
      topology: 10,
      kinds: {
        longest: "combiner",
        "window-2": undefined,
        "window-4": "reducer",
        sessions: "reducer",
        "window-9": "combiner",
        "per-second": undefined,
      },
      outputArities: {},
      aggregatorArities: { sessions: 1 },
    },
  ];
  for (const { topology, kinds, outputArities, aggregatorArities } of cases) {
    const t = kitchenSink()[topology];
    assertRegistered(t, kinds);
    for (const [id, arity] of Object.entries(outputArities)) assert.equal(t.outputArity(id), arity, id);
    for (const [id, arity] of Object.entries(aggregatorArities)) assert.equal(t.aggregatorArity(id), arity, id);
  }
});

test("a window size that is no whole number is refused, naming it", () => {
  for (const [make, message] of [
    [() => Window.tumblingCount(-1), "window size: -1 is not a whole number"],
    [() => Window.slidingDuration(1_000, 2.5), "window slide: 2.5 is not a whole number"],
    [() => Window.session("at", "10"), "window gap: 10 is not a whole number"],
    [() => Window.tumbling("at", 10).latenessMs(2n ** 53n), "window lateness: 9007199254740992 is not"],
    [() => Window.session("at", 10).idleTimeoutMs(-1), "window idle timeout: -1 is not a whole number"],
  ]) {
    assert.throws(make, (e) => e instanceof RangeError && e.message.includes(message));
  }
});

test("a window keeps the definition it was given", () => {
  const t = new Topology("t");
  const window = Window.tumbling("at", 1_000);
  t.newStream(new FileLines("line")).window(window, "open", [], Count, ["n"]);
  window.maxDelayMs(5);
  assert.equal(t.nodes[1].op.window.max_delay_ms, undefined);
});

// -- dispatch ------------------------------------------------------------------

function* split(t) {
  if (t.batch.txid === 3n && t.batch.attempt === 0) throw new Retry("txid 3 fails once");
  yield* t.str("sentence").split(/\s+/).filter(Boolean);
}

function topologies() {
  const seen = [];
  const wc = new Topology("wc");
  const words = wc.newStream(new FileLines("sentence")).each(["sentence"], split, ["word"]).name("split");
  words.filter(["word"], (t) => t.get("word").length > 1).name("long");
  words.map(["word"], (t) => [t.get("word").toUpperCase(), BigInt(t.get("word").length)], ["upper", "len"]).name("upper");
  words.flatMap(["word"], (t) => [...t.get("word")], ["char"]).name("chars");
  words.peek(["word"], (t) => seen.push(t.get("word"))).name("look");
  const longer = { init: (t) => BigInt(t.str(0).length), combine: (a, b) => (a > b ? a : b), zero: () => 0n };
  words.groupBy("word").persistentAggregateOver(State.opaque("max"), ["word"], longer, ["len"]).name("longest");
  const concat = { init: () => "", reduce: (acc, t) => acc + t.str("word") };
  words.groupBy("word").aggregate(["word"], concat, ["all"]).name("concat");
  const pairs = {
    init: () => ({ n: 0n, first: null }),
    aggregate(state, t) {
      state.n += 1n;
      state.first ??= t.get("word");
    },
    complete: (state, emit) => emit(state.n, state.first),
  };
  words.groupBy("word").aggregate(["word"], pairs, ["n", "first"]).name("pairs");
  const remember = {
    *updateState(state, tuples) {
      const words = tuples.map((t) => [t.get("word")]);
      const stored = state.multiGet(words);
      state.multiPut(words.map((w, i) => [w, (stored[i] ?? 0n) + 1n]));
      for (const [i, [w]] of words.entries()) yield [w, stored[i]];
    },
    batchRetrieve: (state, tuples) => state.multiGet(tuples.map((t) => [t.get("word")])),
    execute: (t, result) => (result === null ? [] : [result * 10n]),
  };
  const remembered = words.partitionPersist(State.transactional("seen"), ["word"], remember, ["word", "before"]);
  remembered.name("remember");
  const q = wc.newQueryStream("q").each("args", split, "word");
  q.stateQuery(remembered, ["word"], remember, ["tens"]).name("lookup");
  const numbers = new Topology("numbers")
    .newStream(
      GuestSpout.batch(
        { emitBatch: (info) => (info.txid > 2n ? null : [0n, 1n, 2n].map((i) => [info.txid * 10n + i, "x"])) },
        ["n", "s"],
      ),
    )
    .build();
  const letters = {
    partitions: () => ["a", "b"],
    emitPartition(info, partition, previous) {
      const start = previous === null ? 0 : previous[0] + 1;
      return start >= 3 ? null : [[[`${partition}${start}`]], Uint8Array.of(start)];
    },
    reemitPartition: (info, partition, meta) => [`${partition}${meta[0]}`],
  };
  const lettersTopology = new Topology("letters").newStream(GuestSpout.partitionedTransactional(letters, "letter")).build();
  return [[wc.build(), numbers, lettersTopology], seen];
}

const info = (operator, fields, { txid = 1n, attempt = 0, topology = "wc" } = {}) =>
  new BatchInfo({ topology, operator, txid, attempt, partition: 0, fields });
const rows = (buf) => decode(buf).rows;
const batch = (values, tags) => encode(1, values.map((v, i) => [tags ? tags[i] : 0, [v]]));

class FakeState {
  constructor() {
    this.data = new Map();
  }
  get(keys) {
    return encode(1, decode(keys).rows.map(([, k]) => [0, [this.data.get(JSON.stringify(k)) ?? null]]));
  }
  put(entries) {
    for (const [, row] of decode(entries).rows) this.data.set(JSON.stringify(row.slice(0, -1)), row.at(-1));
  }
}

test("function output rows are tagged with their input row", () => {
  const [t] = topologies();
  assert.deepEqual(rows(weir.runFunction(t, info("split", ["sentence"]), batch(["a b", "", "c"]))), [
    [0, ["a"]],
    [0, ["b"]],
    [2, ["c"]],
  ]);
  // Rows of two fields, and of none, each reach the function whole.
  const ops = new weir.Operators("t");
  ops.function("swap", (t) => [[t.get(1), t.str(0)]], ["n", "w"]);
  ops.function("count", (t) => [[BigInt(t.values.length)]], ["k"]);
  const two = encode(2, [
    [0, ["a", 1n]],
    [0, ["b", 2n]],
  ]);
  assert.deepEqual(rows(weir.runFunction([ops], info("swap", ["w", "n"], { topology: "t" }), two)), [
    [0, [1n, "a"]],
    [1, [2n, "b"]],
  ]);
  const none = encode(0, [
    [0, []],
    [0, []],
  ]);
  assert.deepEqual(rows(weir.runFunction([ops], info("count", [], { topology: "t" }), none)), [
    [0, [0n]],
    [1, [0n]],
  ]);
});

test("map, flat-map, peek and filter", () => {
  const [t, seen] = topologies();
  const words = batch(["ab", "c"]);
  assert.deepEqual(rows(weir.runFunction(t, info("upper", ["word"]), words)), [
    [0, ["AB", 2n]],
    [1, ["C", 1n]],
  ]);
  assert.deepEqual(rows(weir.runFunction(t, info("chars", ["word"]), words)), [
    [0, ["a"]],
    [0, ["b"]],
    [1, ["c"]],
  ]);
  assert.deepEqual(decode(weir.runFunction(t, info("look", ["word"]), words)), { arity: 0, rows: [] });
  assert.deepEqual(seen, ["ab", "c"]);
  assert.deepEqual([...weir.runFilter(t, info("long", ["word"]), words)], [1, 0]);
});

test("guest errors and unknown operators come back as errors", () => {
  const [t] = topologies();
  assert.throws(() => weir.runFunction(t, info("split", ["sentence"], { txid: 3n }), batch(["a"])), {
    name: "Retry",
    message: "txid 3 fails once",
  });
  weir.runFunction(t, info("split", ["sentence"], { txid: 3n, attempt: 1 }), batch(["a"]));
  const fatal = (f, message) => assert.throws(f, (e) => e instanceof Fatal && e.message.includes(message));
  fatal(() => weir.runFunction(t, info("nope", ["sentence"]), batch([])), 'no function "nope"');
  fatal(() => weir.runFunction(t, info("split", ["sentence"]), Uint8Array.of(1, 2, 3)), "malformed batch");
  fatal(() => weir.runFunction(t, info("split", ["sentence", "x"]), batch(["a"])), "input rows hold 1 values for 2 fields");
  fatal(() => weir.runFunction(t, info("split", ["sentence"], { topology: "other" }), batch(["a"])), 'no topology "other"');
  fatal(() => weir.runFunction(t, info("split", ["sentence"]), batch([7n])), "field sentence is i64, not string");
  const two = [new Topology("wc").newStream(new FileLines("x")).each("x", () => [1n], ["a", "b"]).name("e").build()];
  fatal(() => weir.runFunction(two, info("e", ["x"]), batch([1n])), "emitted a row of 1 values where 2 are declared");
});

test("the exports return operator errors as values", () => {
  const [t] = topologies();
  const ops = weir.exportsFor(t);
  const ctx = { topology: "wc", operator: "split", txid: 3n, attempt: 0, partition: 0, fields: ["sentence"] };
  assert.deepEqual(ops.runFunction(ctx, batch(["a"])), { tag: "err", val: { tag: "retry", val: "txid 3 fails once" } });
  assert.deepEqual(ops.runFunction({ ...ctx, operator: "nope" }, batch([])), {
    tag: "err",
    val: { tag: "fatal", val: 'topology wc has no function "nope"' },
  });
  const ok = ops.runFunction({ ...ctx, txid: 1n }, batch(["a b"]));
  assert.equal(ok.tag, "ok");
  assert.deepEqual(rows(ok.val), [
    [0, ["a"]],
    [0, ["b"]],
  ]);
  assert.deepEqual(JSON.parse(ops.describe()).map((d) => d.name), ["wc", "numbers", "letters"]);
});

test("combiner folds groups from zero and combines pairs", () => {
  const [t] = topologies();
  const ctx = info("longest", ["word"]);
  assert.deepEqual(rows(weir.combineGroups(t, ctx, 3, batch(["abc", "a", "ab"], [0, 1, 0]))), [
    [0, [3n]],
    [1, [1n]],
    [2, [0n]],
  ]);
  const pairs = encode(2, [
    [0, [5n, 2n]],
    [1, [1n, 4n]],
  ]);
  assert.deepEqual(rows(weir.combinePairs(t, ctx, pairs)), [
    [0, [5n]],
    [1, [4n]],
  ]);
  assert.throws(() => weir.combineGroups(t, ctx, 1, batch(["x"], [4])), { message: /group 4 of 1/ });
});

test("reducer starts from the stored value or init", () => {
  const [t] = topologies();
  const start = encode(1, [[1, ["z"]]]);
  assert.deepEqual(rows(weir.reduceGroups(t, info("concat", ["word"]), 3, start, batch(["a", "b", "c"], [0, 1, 0]))), [
    [0, ["ac"]],
    [1, ["zb"]],
    [2, [""]],
  ]);
});

test("general aggregator runs each group", () => {
  const [t] = topologies();
  assert.deepEqual(rows(weir.aggregateGroups(t, info("pairs", ["word"]), 2, batch(["a", "b", "c"], [1, 1, 1]))), [
    [0, [0n, null]],
    [1, [3n, "a"]],
  ]);
});

test("state updater and query function use the host state", () => {
  const [t] = topologies();
  const store = new FakeState();
  const state = new MapState(
    (k) => store.get(k),
    (e) => store.put(e),
  );
  assert.deepEqual(rows(weir.updateState(t, info("remember", ["word"]), state, batch(["a", "b"]))), [
    [0, ["a", null]],
    [0, ["b", null]],
  ]);
  weir.updateState(t, info("remember", ["word"]), state, batch(["a"]));
  assert.deepEqual([...store.data], [
    ['["a"]', 2n],
    ['["b"]', 1n],
  ]);
  const words = batch(["a", "zz"]);
  const results = weir.batchRetrieve(t, info("lookup", ["word"]), state, words);
  assert.deepEqual(rows(results), [
    [0, [2n]],
    [1, [null]],
  ]);
  assert.deepEqual(rows(weir.executeQuery(t, info("lookup", ["word"]), words, results)), [[0, [20n]]]);
});

test("spouts", () => {
  const [t] = topologies();
  const spout = new SpoutInfo({ topology: "numbers", txid: 2n, attempt: 0, maxTuples: 100 });
  assert.deepEqual(rows(weir.emitBatch(t, spout)), [
    [0, [20n, "x"]],
    [0, [21n, "x"]],
    [0, [22n, "x"]],
  ]);
  assert.equal(weir.emitBatch(t, new SpoutInfo({ topology: "numbers", txid: 3n })), null);
  const letters = new SpoutInfo({ topology: "letters", txid: 1n });
  assert.deepEqual(weir.spoutPartitions(t, letters), ["a", "b"]);
  let { tuples, meta } = weir.emitPartition(t, letters, "b", undefined);
  assert.deepEqual([rows(tuples), [...meta]], [[[0, ["b0"]]], [0]]);
  ({ tuples, meta } = weir.emitPartition(t, letters, "b", meta));
  assert.deepEqual(rows(weir.reemitPartition(t, letters, "b", meta)), [[0, ["b1"]]]);
  assert.equal(weir.emitPartition(t, letters, "b", Uint8Array.of(2)), null);
  assert.throws(() => weir.emitBatch(t, letters), { message: "the topology has no batch spout" });
});

test("operators of another component's topology run by id and describe nothing", () => {
  const counter = { init: () => 1n, combine: (a, b) => a + b, zero: () => 0n };
  const ops = new weir.Operators("polyglot")
    .function("split", split, ["word"])
    .aggregator("count", counter)
    .spout(GuestSpout.batch({ emitBatch: () => [[1n, "a"]] }, ["n", "s"]));
  const ctx = (operator, fields) => info(operator, fields, { topology: "polyglot" });
  assert.deepEqual(rows(weir.runFunction([ops], ctx("split", ["sentence"]), batch(["a b"]))), [
    [0, ["a"]],
    [0, ["b"]],
  ]);
  assert.deepEqual(rows(weir.combineGroups([ops], ctx("count", ["word"]), 2, batch(["a", "b", "c"], [0, 1, 0]))), [
    [0, [2n]],
    [1, [1n]],
  ]);
  assert.deepEqual(rows(weir.combinePairs([ops], ctx("count", []), encode(2, [[0, [5n, 2n]]]))), [[0, [7n]]]);
  assert.deepEqual(rows(weir.emitBatch([ops], new SpoutInfo({ topology: "polyglot", txid: 1n }))), [[0, [1n, "a"]]]);
  assert.throws(() => weir.runFilter([ops], ctx("split", ["sentence"]), batch(["a"])), { message: /no filter "split"/ });
  assert.equal(weir.describe([ops]), "[]");
  assert.throws(() => new weir.Operators("t").aggregator("n", Count), TypeError);
});

test("strings pushed at once encode as rows pushed one by one do", () => {
  const long = "w".repeat(300); // a length above 255
  const lists = [["a", ""], null, [], ["bc", "longer words here", "x"], [long]];
  const one = new BatchWriter(1);
  one.push(9, ["kept"]);
  lists.forEach((list, tag) => (list ?? []).forEach((s) => one.push(tag, [s])));
  const whole = new BatchWriter(1);
  whole.push(9, ["kept"]);
  assert.equal(whole.pushStrings(lists), true);
  assert.deepEqual(whole.finish(), one.finish());
  // Tags above 255 take all four bytes.
  const many = Array.from({ length: 300 }, (_, i) => (i % 7 ? [`w${i}`] : null));
  const each = new BatchWriter(1);
  many.forEach((list, tag) => (list ?? []).forEach((s) => each.push(tag, [s])));
  const at = new BatchWriter(1);
  assert.equal(at.pushStrings(many), true);
  assert.deepEqual(at.finish(), each.finish());
  // Anything but arrays of ASCII strings appends nothing and is left to push.
  for (const bad of [[["a", 1n]], [["gr\u00fc\u00dfe"]], [["a", null]], [["a"], "b"], [[["a"]]], [[{ toString: () => "a" }]]]) {
    const writer = new BatchWriter(1);
    writer.push(3, ["kept"]);
    assert.equal(writer.pushStrings(bad), false);
    assert.deepEqual(writer.finish(), encode(1, [[3, ["kept"]]]));
  }
  assert.equal(new BatchWriter(2).pushStrings([["a"]]), false);
});

test("a batch function takes whole columns and emits as each does", () => {
  const batched = new Topology("wc");
  batched
    .newStream(new FileLines("sentence"))
    .eachBatch(["sentence"], (sentences) => sentences.map((s) => s.split(" ").filter(Boolean)), ["word"])
    .name("split");
  const perTuple = new Topology("wc");
  perTuple
    .newStream(new FileLines("sentence"))
    .each(["sentence"], (t) => t.str(0).split(" ").filter(Boolean), ["word"])
    .name("split");
  assert.equal(weir.describe([batched.build()]), weir.describe([perTuple.build()]));
  const out = weir.runFunction([batched.build()], info("split", ["sentence"]), batch(["a b", "", "c"]));
  assert.deepEqual(rows(out), [
    [0, ["a"]],
    [0, ["b"]],
    [2, ["c"]],
  ]);
  const ops = new weir.Operators("t");
  ops.functionBatch("pairs", (words, counts) => words.map((w, i) => (counts[i] ? [[w, counts[i]]] : null)), ["w", "n"]);
  ops.functionBatch("short", (words) => words.slice(1), ["w"]);
  const two = encode(2, [
    [0, ["a", 2n]],
    [0, ["b", 0n]],
  ]);
  assert.deepEqual(rows(weir.runFunction([ops], info("pairs", ["w", "n"], { topology: "t" }), two)), [[0, ["a", 2n]]]);
  assert.throws(
    () => weir.runFunction([ops], info("short", ["w", "n"], { topology: "t" }), two),
    (e) => e instanceof Fatal && e.message.includes("returns an array of what each of the 2 input rows emits; it returned 1 entries"),
  );
});

function lengths(t) {
  return [t.get(0).missing.length];
}

test("an unexpected error says where in the guest it was thrown", () => {
  const t = new Topology("wc");
  t.newStream(new FileLines("sentence")).each(["sentence"], lengths, ["n"]).name("lengths");
  const ops = weir.exportsFor([t.build()]);
  const ctx = { topology: "wc", operator: "lengths", txid: 1n, attempt: 0, partition: 0, fields: ["sentence"] };
  const original = console.error;
  console.error = () => {};
  let result;
  try {
    result = ops.runFunction(ctx, batch(["a"]));
  } finally {
    console.error = original;
  }
  assert.equal(result.tag, "err");
  assert.equal(result.val.tag, "retry");
  const lines = result.val.val.split("\n");
  assert.match(lines[0], /^TypeError: /);
  // Innermost call first, as the stack has it: the guest's own line.
  const source = readFileSync(fileURLToPath(import.meta.url), "utf8").split("\n");
  const line = source.indexOf("  return [t.get(0).missing.length];") + 1;
  assert.match(lines[1], new RegExp(`^    at lengths \\(.*weir\\.test\\.js:${line}:\\d+\\)$`));
  assert.ok(!result.val.val.includes("weir.js:"), result.val.val);
});

test("the Kafka spout and sink define what the host reads", () => {
  const spout = weir.Kafka.transactional("clicks").partitions([1]).string("line").timestampField("at").headersField("h");
  assert.equal(
    JSON.stringify(spout.define()),
    '{"kind":"kafka","promise":"transactional","topic":"clicks","partitions":[1],' +
      '"value":{"as":"string","field":"line"},"timestamp_field":"at","headers_field":"h"}',
  );
  assert.deepEqual(weir.KafkaSink.topic("out").define(), { kind: "kafka", topic: "out", payload: { as: "json" } });
});

// Weir's JavaScript guest SDK: write a topology and its operators in
// JavaScript; `weir run DIR` builds the directory into a component with
// componentize-js. One ES module: the packed batch codec, the topology
// builder, every operator kind's dispatch and the component's exports.
//
// A guest is a directory holding `app.js`, whose exported `topology()`
// returns the topology (or an array of them):
//
//     import { Count, FileLines, State, Topology } from "weir";
//
//     const split = (t) => t.str("sentence").split(/\s+/).filter(Boolean);
//
//     export function topology() {
//       return new Topology("word-count")
//         .newStream(new FileLines("sentence"))
//         .each(["sentence"], split, ["word"]).name("split")
//         .groupBy(["word"])
//         .persistentAggregate(State.transactional("counts"), Count, ["count"]).name("count")
//         .build();
//     }
//
// Values: null, booleans, bigints (64-bit integers: `1n`), numbers (64-bit
// floats), strings and Uint8Arrays (bytes). An operator fails a batch by
// throwing `Retry` (replayed) or `Fatal` (the topology halts); anything
// else it throws counts as a retry.

export const WIT_PACKAGE = "weir:topology@0.1.0";

// ---------------------------------------------------------------------------
// Errors and tuples

/**
 * What `Retry` and `Fatal` share: an error named for its class, whose
 * `kind` (the class's `KIND`) tells the host what to do with the batch.
 */
class OperatorFailure extends Error {
  constructor(message) {
    super(message);
    this.name = new.target.name;
  }

  get kind() {
    return this.constructor.KIND;
  }
}

/** Why an operator failed on a batch: replayed with the next attempt. */
export class Retry extends OperatorFailure {
  static KIND = "retry";
}

/** Why an operator failed on a batch: the topology halts. */
export class Fatal extends OperatorFailure {
  static KIND = "fatal";
}

/** The name of a value's type, as every SDK spells it in errors. */
export function typeName(v) {
  if (v === null) return "null";
  switch (typeof v) {
    case "boolean":
      return "bool";
    case "bigint":
      return "i64";
    case "number":
      return "f64";
    case "string":
      return "string";
  }
  if (v instanceof Uint8Array) return "bytes";
  if (v === undefined) return "undefined";
  return v?.constructor?.name ?? typeof v;
}

/** One input tuple: the fields the operator declared, by name or position. */
export class Tuple {
  constructor(values, batch) {
    this.values = values;
    this.batch = batch;
  }

  /** Names of the tuple's fields, in order. */
  get fields() {
    return this.batch.fields;
  }

  position(field) {
    if (typeof field === "number") {
      if (Number.isInteger(field) && field >= 0 && field < this.values.length) return field;
    } else {
      const at = this.batch.fields.indexOf(field);
      if (at >= 0) return at;
    }
    throw new Fatal(
      `operator ${this.batch.operator} has no input field ${field} (it has ${JSON.stringify(this.batch.fields)})`,
    );
  }

  /** A field's value, by name or position. */
  get(field) {
    const values = this.values;
    if (typeof field === "number" && (field | 0) === field && field >= 0 && field < values.length) return values[field];
    return values[this.position(field)];
  }

  typed(field, type, wanted) {
    const value = this.get(field);
    if (typeName(value) !== type) {
      throw new Fatal(`operator ${this.batch.operator}: field ${field} is ${typeName(value)}, not ${wanted}`);
    }
    return value;
  }

  /** A string field. */
  str(field) {
    // A string at a position is the common case: no call before it.
    const value = typeof field === "number" ? this.values[field] : undefined;
    return typeof value === "string" ? value : this.typed(field, "string", "string");
  }

  /** An integer field, as a bigint. */
  int(field) {
    return this.typed(field, "i64", "i64");
  }

  /** A float field. */
  float(field) {
    return this.typed(field, "f64", "f64");
  }

  /** A boolean field. */
  bool(field) {
    return this.typed(field, "bool", "bool");
  }

  /** A bytes field. */
  bytes(field) {
    return this.typed(field, "bytes", "bytes");
  }
}

// ---------------------------------------------------------------------------
// The packed batch encoding (docs/wire-format.md)

/** A buffer that is not a valid packed batch. */
export class DecodeError extends Error {
  constructor(offset, reason) {
    super(`malformed batch at byte ${offset}: ${reason}`);
    this.offset = offset;
    this.reason = reason;
  }
}

/** A value the encoding cannot hold, or a row of the wrong arity. */
export class EncodeError extends Error {}

const UTF8 = new TextDecoder("utf-8", { fatal: true });
const UTF8_ENCODER = new TextEncoder();
// A one-field row's header before a string of its length: tag, kind, length.
const ROW_HEAD = "\0\0\0\0\x05\0\0\0\0";
const I64_MIN = -(2n ** 63n);
const I64_MAX = 2n ** 63n - 1n;

function bytesOf(buf) {
  if (buf instanceof Uint8Array) return buf;
  if (buf instanceof ArrayBuffer) return new Uint8Array(buf);
  if (ArrayBuffer.isView(buf)) return new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
  if (Array.isArray(buf)) return Uint8Array.from(buf);
  throw new TypeError(`not bytes: ${typeName(buf)}`);
}

/** The header of a buffer: `[count, arity]`, checked against its length. */
function header(buf, view) {
  const len = buf.length;
  if (len < 8) throw new DecodeError(len < 4 ? 0 : 4, `needs 4 more bytes, ${len < 4 ? len : len - 4} left`);
  const count = view.getUint32(0, true);
  const arity = view.getUint32(4, true);
  // Each row takes at least its tag and one byte per value.
  if (count * (4 + arity) > len - 8) {
    throw new DecodeError(8, `header claims ${count} rows of ${arity} values, the buffer holds ${len} bytes`);
  }
  return [count, arity];
}

/**
 * Checks a whole buffer; returns `{ arity, rows }`, each row `[tag, values]`.
 */
export function decode(input) {
  const { arity, tags, values } = decodeFlat(input);
  const rows = new Array(tags.length);
  for (let r = 0, at = 0; r < rows.length; r++, at += arity) {
    rows[r] = [tags[r], arity === 1 ? [values[at]] : values.slice(at, at + arity)];
  }
  return { arity, rows };
}

/**
 * Checks a whole buffer; returns `{ arity, tags, values }`: every row's
 * tag, and every row's values one after another (row `r`'s are
 * `values[r * arity]` to `values[r * arity + arity - 1]`). No array per row.
 */
function decodeFlat(input) {
  const buf = bytesOf(input);
  const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  const [count, arity] = header(buf, view);
  const tags = new Array(count);
  let values = null;
  try {
    values = valuesFast(buf, view, count, arity, tags);
  } catch {
    // A fault the fast reader does not name: the checked one does.
  }
  if (values === null) values = valuesChecked(buf, view, count, arity, tags);
  return { arity, tags, values };
}

// Where the fast reader's last value ended (a second result without an
// allocation per value).
let fastEnd = 0;

/** The value at `pos` of a buffer the fast reader is reading; sets `fastEnd`. */
function fastValue(buf, view, pos) {
  const kind = buf[pos];
  switch (kind) {
    case 5: {
      const start = pos + 5;
      fastEnd = start + view.getUint32(pos + 1, true);
      return UTF8.decode(buf.subarray(start, fastEnd));
    }
    case 3:
      fastEnd = pos + 9;
      return view.getBigInt64(pos + 1, true);
    case 0:
      fastEnd = pos + 1;
      return null;
    case 1:
    case 2:
      fastEnd = pos + 1;
      return kind === 2;
    case 4:
      fastEnd = pos + 9;
      return view.getFloat64(pos + 1, true);
    case 6: {
      const start = pos + 5;
      fastEnd = start + view.getUint32(pos + 1, true);
      return buf.slice(start, fastEnd);
    }
  }
  throw new DecodeError(pos, `unknown value kind ${kind}`);
}

/**
 * The values of a sound buffer into one array, its tags into `tags`, with
 * as few reads per value as the encoding allows; null (or an exception) at
 * any fault, which the checked reader then names. A value running past the
 * end comes back short, but leaves the position past the end, which the
 * last check sees.
 */
function valuesFast(buf, view, count, arity, tags) {
  const len = buf.length;
  const values = new Array(count * arity);
  let pos = 8;
  if (arity === 1) {
    for (let r = 0; r < count; r++) {
      tags[r] = view.getUint32(pos, true);
      if (buf[pos + 4] === 5) {
        const start = pos + 9;
        pos = start + view.getUint32(pos + 5, true);
        if (pos > len) return null;
        values[r] = UTF8.decode(buf.subarray(start, pos));
      } else {
        values[r] = fastValue(buf, view, pos + 4);
        pos = fastEnd;
      }
    }
  } else {
    for (let r = 0, at = 0; r < count; r++) {
      tags[r] = view.getUint32(pos, true);
      pos += 4;
      for (let i = 0; i < arity; i++) {
        values[at++] = fastValue(buf, view, pos);
        pos = fastEnd;
      }
    }
  }
  return pos === len ? values : null;
}

/** The values and tags, every read checked: throws a DecodeError naming the first fault. */
function valuesChecked(buf, view, count, arity, tags) {
  const len = buf.length;
  let pos = 8;
  const need = (n) => {
    if (pos + n > len) throw new DecodeError(pos, `needs ${n} more bytes, ${len - pos} left`);
  };
  const values = new Array(count * arity);
  let at = 0;
  for (let r = 0; r < count; r++) {
    need(4);
    tags[r] = view.getUint32(pos, true);
    pos += 4;
    for (let i = 0; i < arity; i++, at++) {
      need(1);
      const kind = buf[pos];
      pos += 1;
      switch (kind) {
        case 0:
          values[at] = null;
          break;
        case 1:
          values[at] = false;
          break;
        case 2:
          values[at] = true;
          break;
        case 3:
          need(8);
          values[at] = view.getBigInt64(pos, true);
          pos += 8;
          break;
        case 4:
          need(8);
          values[at] = view.getFloat64(pos, true);
          pos += 8;
          break;
        case 5:
        case 6: {
          need(4);
          const n = view.getUint32(pos, true);
          pos += 4;
          need(n);
          const raw = buf.subarray(pos, pos + n);
          if (kind === 6) {
            values[at] = raw.slice();
          } else {
            try {
              values[at] = UTF8.decode(raw);
            } catch {
              throw new DecodeError(pos + validUtf8Prefix(raw), "string is not valid UTF-8");
            }
          }
          pos += n;
          break;
        }
        default:
          throw new DecodeError(pos - 1, `unknown value kind ${kind}`);
      }
    }
  }
  if (pos !== len) throw new DecodeError(pos, `${len - pos} bytes after the last row`);
  return values;
}

function validUtf8Prefix(raw) {
  // The length of the longest valid prefix, to name where the error is.
  let lo = 0;
  let hi = raw.length;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    try {
      new TextDecoder("utf-8", { fatal: true }).decode(raw.subarray(0, mid), { stream: true });
      lo = mid;
    } catch {
      hi = mid - 1;
    }
  }
  return lo;
}

/** Builds a packed batch of rows of `arity` values. */
export class BatchWriter {
  constructor(arity) {
    this.arity = arity;
    this.rows = 0;
    this.buf = new Uint8Array(256);
    this.view = new DataView(this.buf.buffer);
    this.len = 8;
  }

  reserve(n) {
    if (this.len + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.len + n) size *= 2;
    const grown = new Uint8Array(size);
    grown.set(this.buf.subarray(0, this.len));
    this.buf = grown;
    this.view = new DataView(grown.buffer);
  }

  u32(n) {
    this.reserve(4);
    this.view.setUint32(this.len, n, true);
    this.len += 4;
  }

  byte(b) {
    this.reserve(1);
    this.buf[this.len++] = b;
  }

  raw(kind, bytes) {
    this.byte(kind);
    this.u32(bytes.length);
    this.reserve(bytes.length);
    this.buf.set(bytes, this.len);
    this.len += bytes.length;
  }

  value(v) {
    if (v === null) return this.byte(0);
    switch (typeof v) {
      case "boolean":
        return this.byte(v ? 2 : 1);
      case "bigint":
        if (v < I64_MIN || v > I64_MAX) throw new EncodeError(`integer ${v} does not fit in 64 bits`);
        this.byte(3);
        this.reserve(8);
        this.view.setBigInt64(this.len, v, true);
        this.len += 8;
        return;
      case "number":
        this.byte(4);
        this.reserve(8);
        this.view.setFloat64(this.len, v, true);
        this.len += 8;
        return;
      case "string": {
        // At most 3 bytes per UTF-16 unit.
        this.byte(5);
        const at = this.len;
        this.len += 4;
        this.reserve(v.length * 3);
        const { written } = UTF8_ENCODER.encodeInto(v, this.buf.subarray(this.len));
        this.view.setUint32(at, written, true);
        this.len += written;
        return;
      }
    }
    if (v instanceof Uint8Array) return this.raw(6, v);
    if (v instanceof ArrayBuffer || ArrayBuffer.isView(v)) return this.raw(6, bytesOf(v));
    throw new EncodeError(`cannot encode a value of type ${typeName(v)}`);
  }

  /** Appends a row; throws EncodeError when it does not hold `arity` values. */
  push(tag, values) {
    if (values.length !== this.arity) {
      throw new EncodeError(`a row of ${values.length} values where ${this.arity} are declared`);
    }
    const mark = this.len;
    this.u32(tag);
    try {
      for (let i = 0; i < values.length; i++) this.value(values[i]);
    } catch (e) {
      this.len = mark;
      throw e;
    }
    this.rows += 1;
  }

  /**
   * Appends one-field rows holding the strings of `lists`: those of
   * `lists[0]` tagged 0, those of `lists[1]` tagged 1, and so on (a null
   * list holds none). All the strings are encoded in one call, each row's
   * header then written in place; returns false, having appended nothing,
   * unless every list is an array of ASCII strings (push those rows one by
   * one).
   */
  pushStrings(lists) {
    if (this.arity !== 1) return false;
    const rows = lists.length;
    let joined;
    try {
      // Each value's header, 9 bytes, goes before it; only its tag and
      // length are left to write.
      const parts = [];
      for (let row = 0; row < rows; row++) {
        const list = lists[row];
        if (list === null || list === undefined) continue;
        if (!Array.isArray(list)) return false;
        if (list.length > 0) parts.push(list.join(ROW_HEAD));
      }
      if (parts.length === 0) return true;
      joined = ROW_HEAD + parts.join(ROW_HEAD);
    } catch {
      return false;
    }
    this.reserve(joined.length);
    const start = this.len;
    const { read, written } = UTF8_ENCODER.encodeInto(joined, this.buf.subarray(start));
    if (read !== joined.length || written !== joined.length) return false;
    // The header's bytes are zeros: a tag or length under 256 is one byte
    // to write, which the interpreter does faster than a DataView call.
    const buf = this.buf;
    const view = this.view;
    let pos = start;
    let count = 0;
    for (let row = 0; row < rows; row++) {
      const list = lists[row];
      if (list === null || list === undefined) continue;
      const n = list.length;
      for (let i = 0; i < n; i++) {
        const s = list[i];
        if (typeof s !== "string") return false;
        const len = s.length;
        if (row < 256) buf[pos] = row;
        else view.setUint32(pos, row, true);
        if (len < 256) buf[pos + 5] = len;
        else view.setUint32(pos + 5, len, true);
        pos += 9 + len;
      }
      count += n;
    }
    if (pos !== start + written) return false;
    this.len = pos;
    this.rows += count;
    return true;
  }

  /** The batch's bytes. */
  finish() {
    this.view.setUint32(0, this.rows, true);
    this.view.setUint32(4, this.arity, true);
    return this.buf.slice(0, this.len);
  }
}

/** Encodes `[tag, values]` rows of `arity` values. */
export function encode(arity, rows) {
  const writer = new BatchWriter(arity);
  for (const [tag, values] of rows) writer.push(tag, values);
  return writer.finish();
}

// ---------------------------------------------------------------------------
// Aggregators and query functions the host runs itself

class Builtin {
  constructor(name) {
    this.builtin = name;
  }
}

/** Number of tuples. Runs in the host. */
export const Count = new Builtin("count");
/** Sum of the single input field (integers stay integers). Runs in the host. */
export const Sum = new Builtin("sum");
/** Least value of the single input field. Runs in the host. */
export const Min = new Builtin("min");
/** Greatest value of the single input field. Runs in the host. */
export const Max = new Builtin("max");
/** The single input field of the first tuple. Runs in the host. */
export const First = new Builtin("first");
/** Trident's MapGet: the stored value of the key made of the input fields. */
export const MapGet = Object.freeze({ mapGet: true });

/** Marks a reducer aggregator (`init()`, `reduce(acc, tuple)`). Optional. */
export function Reducer(aggregator) {
  return { reducer: aggregator };
}

/** Marks a general aggregator (`init`, `aggregate`, `complete`). Optional. */
export function General(aggregator) {
  return { general: aggregator };
}

const has = (o, ...methods) => o !== null && typeof o === "object" && methods.every((m) => typeof o[m] === "function");

function aggregatorKind(aggregator) {
  if (aggregator instanceof Builtin) return ["builtin", aggregator.builtin];
  if (aggregator && aggregator.reducer) return ["reducer", aggregator.reducer];
  if (aggregator && aggregator.general) return ["general", aggregator.general];
  if (has(aggregator, "init", "combine", "zero")) return ["combiner", aggregator];
  if (has(aggregator, "init", "reduce")) return ["reducer", aggregator];
  if (has(aggregator, "init", "aggregate", "complete")) return ["general", aggregator];
  throw new TypeError(
    "not an aggregator: give a built-in (Count, Sum, ...) or an object with init/combine/zero, " +
      "init/reduce or init/aggregate/complete",
  );
}

// ---------------------------------------------------------------------------
// The topology builder: the same definitions as the Rust SDK's, node for
// node and id for id.

const SPOUT_ID = "spout";
export const INNER = "inner";
export const OUTER = "outer";

const names = (fields) => (typeof fields === "string" ? [fields] : Array.from(fields, String));

/** A state to persist into. */
export class State {
  constructor(name, kind) {
    this.name = name;
    this.kind = kind;
    this.cache = undefined;
  }

  /** Stores `{txid, value}`; a batch already applied is skipped. */
  static transactional(name) {
    return new State(name, "transactional");
  }

  /** Stores `{txid, curr, prev}`; a replay recomputes from `prev`. */
  static opaque(name) {
    return new State(name, "opaque");
  }

  /** Updated blindly: no exactly-once guarantee. */
  static nonTransactional(name) {
    return new State(name, "non-transactional");
  }

  /** Keeps up to `entries` of the state cached in front of the store. */
  cacheSize(entries) {
    this.cache = entries;
    return this;
  }

  def() {
    const out = { name: this.name, kind: this.kind };
    if (this.cache !== undefined) out.cache_size = this.cache;
    return out;
  }
}

// A window's sizes as the host reads them: whole numbers, bigints taken.
function whole(value, what) {
  const n = typeof value === "bigint" ? Number(value) : value;
  if (!Number.isSafeInteger(n) || n < 0) {
    throw new RangeError(`window ${what}: ${String(value)} is not a whole number from 0 to 2^53 - 1`);
  }
  return n;
}

/** How a window operation cuts its stream into windows: by a count of
 *  tuples per group or by when the host emitted each batch (Trident's), or
 *  by a timestamp field (event time). */
export class Window {
  constructor(definition) {
    this.definition = definition;
    // Event time only: the watermark's delay and the lateness allowed,
    // and after how long a spout partition with no tuples stops holding
    // the watermark back (null: never).
    this.delays = { max_delay_ms: 0, lateness_ms: 0 };
    this.idleTimeout = null;
  }

  /** Trident's tumbling count window: every `size` tuples of a group. */
  static tumblingCount(size) {
    return Window.slidingCount(size, size);
  }

  /** Trident's sliding count window: every `slide` tuples of a group, the last `size`. */
  static slidingCount(size, slide) {
    return new Window({ kind: "count", size: whole(size, "size"), slide: whole(slide, "slide") });
  }

  /** Trident's tumbling duration window: `sizeMs` of processing time, by
   *  when the host emitted each batch. */
  static tumblingDuration(sizeMs) {
    return Window.slidingDuration(sizeMs, sizeMs);
  }

  /** Trident's sliding duration window: `sizeMs` of processing time, one
   *  starting every `slideMs`. */
  static slidingDuration(sizeMs, slideMs) {
    return new Window({ kind: "duration", size_ms: whole(sizeMs, "size"), slide_ms: whole(slideMs, "slide") });
  }

  /** Tumbling event-time windows of `sizeMs` by the timestamp (in
   *  milliseconds) in `field`. */
  static tumbling(field, sizeMs) {
    return Window.sliding(field, sizeMs, sizeMs);
  }

  /** Sliding event-time windows of `sizeMs`, one starting every `slideMs`,
   *  by the timestamp (in milliseconds) in `field`. */
  static sliding(field, sizeMs, slideMs) {
    return new Window({ kind: "event-time", field, size_ms: whole(sizeMs, "size"), slide_ms: whole(slideMs, "slide") });
  }

  /** Event-time session windows by the timestamp (in milliseconds) in
   *  `field`: a group's session ends after `gapMs` without a tuple. */
  static session(field, gapMs) {
    return new Window({ kind: "session", field, gap_ms: whole(gapMs, "gap") });
  }

  /** Event time: timestamps may come up to `ms` out of order (a spout
   *  partition's watermark trails its greatest timestamp by this much). */
  maxDelayMs(ms) {
    this.delays.max_delay_ms = whole(ms, "max delay");
    return this;
  }

  /** Event time: a window still takes tuples for `ms` after the watermark
   *  passes its end, and closes then. */
  latenessMs(ms) {
    this.delays.lateness_ms = whole(ms, "lateness");
    return this;
  }

  /** Event time, with a spout that deals into several partitions: a
   *  partition that has brought tuples stops holding the watermark back
   *  once the greatest timestamp seen has moved on by more than `ms`
   *  without a tuple of it (by default it holds it back until it brings
   *  more). */
  idleTimeoutMs(ms) {
    this.idleTimeout = whole(ms, "idle timeout");
    return this;
  }

  def() {
    const out = { ...this.definition };
    if (out.kind === "event-time" || out.kind === "session") {
      for (const [key, ms] of Object.entries(this.delays)) if (ms) out[key] = ms;
      if (this.idleTimeout !== null) out.idle_timeout_ms = this.idleTimeout;
    }
    return out;
  }
}

/** Limits an operator asks for, lower than the host's where it likes. */
export class Limits {
  constructor() {
    this.values = { memory_mib: null, call_ms: null, output_mib: null, output_tuples: null };
  }
  set(key, value) {
    this.values[key] = value;
    return this;
  }
  /** Largest linear memory, in MiB. */
  memoryMib(mib) {
    return this.set("memory_mib", mib);
  }
  /** CPU time one call may take, in milliseconds. */
  callMs(ms) {
    return this.set("call_ms", ms);
  }
  /** Bytes one call may return, in MiB. */
  outputMib(mib) {
    return this.set("output_mib", mib);
  }
  /** Tuples one call may emit. */
  outputTuples(tuples) {
    return this.set("output_tuples", tuples);
  }
}

/** The host's built-in spout over the lines of the run's input file. */
export class FileLines {
  constructor(field) {
    this.field = field;
  }
  define() {
    return { kind: "file-lines", field: this.field };
  }
}

/** The host's built-in spout over the lines of the input directory's files. */
export class DirectoryLines {
  constructor(field) {
    this.field = field;
  }
  define() {
    return { kind: "directory-lines", field: this.field };
  }
}

/** The host's built-in spout emitting the integers 0 to `count` - 1. */
export class Generator {
  constructor(field, count) {
    this.field = field;
    this.count = count;
  }
  define() {
    return { kind: "generator", field: this.field, count: Number(this.count) };
  }
}

/**
 * What the JetStream and Kafka spouts share: where a message's payload (a
 * record's value) goes, the metadata fields also emitted (each class's
 * `EXTRA`, each set by its method), and the bound on a partition's batch.
 */
class BrokerSpout {
  constructor(promise, defaultField, extra) {
    this.promise = promise;
    this.payload = { as: "bytes", field: defaultField };
    this.extra = Object.fromEntries(extra.map((key) => [key, null]));
    this.perPartition = null;
  }
  /**
   * A replay reads exactly the range (of stream sequences, of offsets) each
   * partition had in the batch. `source`: the spout's own arguments.
   */
  static transactional(...source) {
    return new this("transactional", ...source);
  }
  /** A replay reads afresh from each partition's next message as of the last commit. */
  static opaque(...source) {
    return new this("opaque", ...source);
  }
  /** The payload (a Kafka record's value) as bytes in `field`. */
  bytes(field) {
    this.payload = { as: "bytes", field };
    return this;
  }
  /** The payload (a Kafka record's value) as a UTF-8 string in `field`. */
  string(field) {
    this.payload = { as: "string", field };
    return this;
  }
  /** The payload (a Kafka record's value) is a JSON object: each of `fields` takes its member. */
  json(fields) {
    this.payload = { as: "json", fields: names(fields) };
    return this;
  }
  /** Takes at most `count` messages (records) from each partition per batch. */
  maxPerPartition(count) {
    this.perPartition = count;
    return this;
  }
  /** `out` with the payload under `payloadKey`, then the metadata fields set and the bound. */
  defineInto(out, payloadKey) {
    out[payloadKey] = this.payload;
    for (const [key, value] of Object.entries(this.extra)) if (value !== null) out[key] = value;
    if (this.perPartition !== null) out.max_per_partition = Number(this.perPartition);
    return out;
  }
  /** The fields of a definition's tuples: the payload's, then the metadata fields set. */
  static fieldsOf(spout, payloadKey, extra) {
    const payload = spout[payloadKey];
    const fields = payload.as === "json" ? [...payload.fields] : [payload.field];
    for (const key of extra) if (key in spout) fields.push(spout[key]);
    return fields;
  }
}

/**
 * Gives `spout` a method per metadata field, `subjectField(field)` for
 * `subject_field`: each also emits that field, in the field it is given.
 */
function extraFieldMethods(spout) {
  for (const key of spout.EXTRA) {
    const method = key.replace(/_(\w)/g, (_, c) => c.toUpperCase());
    spout.prototype[method] = function (field) {
      this.extra[key] = field;
      return this;
    };
  }
}

/**
 * What the JetStream and Kafka sinks share: where each tuple goes (a
 * subject, a topic), and what it is sent as: a JSON object of its fields
 * unless `raw` names one field to send as it is.
 */
class BrokerSink {
  constructor(target) {
    this.target = target;
    this.payload = { as: "json" };
  }
  /** Sends the value of `field` as it is: the message's payload, the record's value. */
  raw(field) {
    this.payload = { as: "raw", field };
    return this;
  }
  define() {
    const sink = this.constructor;
    return { kind: sink.KIND, [sink.TARGET_KEY]: this.target, payload: this.payload };
  }
}

/**
 * Makes `sink` a sink of definition kind `kind`, sending to a `targetKey`
 * (a subject, a topic), with its constructor named for it:
 * `KafkaSink.topic(topic)`.
 */
function brokerSink(sink, kind, targetKey) {
  sink.KIND = kind;
  sink.TARGET_KEY = targetKey;
  sink[targetKey] = (target) => new sink(target);
}

/**
 * The host's built-in spout over a NATS JetStream stream, each subject a
 * partition, read by the host from the server `weir run --nats` names:
 * `JetStream.transactional("clicks", ["clicks.*"]).json(["user", "url"])`.
 * The payload goes into one bytes field named `payload` unless `string`,
 * `bytes` or `json` says otherwise. `subjectField`, `sequenceField` and
 * `timestampField` (the time the server stored the message, in ms since
 * the Unix epoch) each also emit that of the message, in the field given.
 */
export class JetStream extends BrokerSpout {
  static EXTRA = ["subject_field", "sequence_field", "timestamp_field"];
  constructor(promise, stream, subjects) {
    super(promise, "payload", JetStream.EXTRA);
    this.stream = stream;
    this.subjects = names(subjects);
  }
  define() {
    const out = { kind: "jetstream", promise: this.promise, stream: this.stream, subjects: this.subjects };
    return this.defineInto(out, "payload");
  }
}
extraFieldMethods(JetStream);

/**
 * A sink publishing to NATS JetStream, for `Stream.sink`: each tuple of
 * every committed batch is published once to its subject:
 * `JetStreamSink.subject("page-counts")`. The payload is a JSON object of
 * the tuple's fields unless `raw` names one field (a string or bytes) to
 * publish as it is.
 */
export class JetStreamSink extends BrokerSink {}
brokerSink(JetStreamSink, "jetstream", "subject");

/**
 * The host's built-in spout over a Kafka topic, each of its partitions a
 * partition of the spout, read by the host from the brokers `weir run
 * --kafka` names: `Kafka.transactional("clicks").json(["user", "url"])`.
 * The value goes into one bytes field named `value` unless `string`,
 * `bytes` or `json` says otherwise. `keyField` (bytes, or null),
 * `partitionField`, `offsetField`, `timestampField` (ms since the Unix
 * epoch) and `headersField` (a JSON object of strings) each also emit that
 * of the record, in the field given.
 */
export class Kafka extends BrokerSpout {
  static EXTRA = ["key_field", "partition_field", "offset_field", "timestamp_field", "headers_field"];
  constructor(promise, topic) {
    super(promise, "value", Kafka.EXTRA);
    this.topic = topic;
    this.partitionList = null;
  }
  /** Reads only these partitions (all of them when not called). */
  partitions(list) {
    this.partitionList = list.map(Number);
    return this;
  }
  define() {
    const out = { kind: "kafka", promise: this.promise, topic: this.topic };
    if (this.partitionList !== null) out.partitions = this.partitionList;
    return this.defineInto(out, "value");
  }
}
extraFieldMethods(Kafka);

/**
 * A sink writing to a Kafka topic, for `Stream.sink`: each tuple of every
 * committed batch becomes one record of the topic, exactly once:
 * `KafkaSink.topic("page-counts")`.
 */
export class KafkaSink extends BrokerSink {}
brokerSink(KafkaSink, "kafka", "topic");

/** The fields of a spout definition's tuples, as the host reads them. */
function spoutFieldsOf(spout) {
  if (spout.kind === "guest") return spout.fields;
  if (spout.kind === "kafka") return BrokerSpout.fieldsOf(spout, "value", Kafka.EXTRA);
  if (spout.kind === "jetstream") return BrokerSpout.fieldsOf(spout, "payload", JetStream.EXTRA);
  return [spout.field];
}

/** A spout of the guest's own, declared with the fields of its tuples. */
export class GuestSpout {
  constructor(promise, spout, fields) {
    this.promise = promise;
    this.spout = spout;
    this.fields = names(fields);
  }
  /** A batch spout (`emitBatch(info)`), the same batch for every attempt of a txid. */
  static batch(spout, fields) {
    return new GuestSpout("batch", spout, fields);
  }
  /** A transactional partitioned spout. */
  static partitionedTransactional(spout, fields) {
    return new GuestSpout("partitioned-transactional", spout, fields);
  }
  /** An opaque partitioned spout. */
  static partitionedOpaque(spout, fields) {
    return new GuestSpout("partitioned-opaque", spout, fields);
  }
  define(topology) {
    topology.guestSpout = { promise: this.promise, code: this.spout };
    return { kind: "guest", promise: this.promise, fields: this.fields };
  }
}

function sandboxDef(sandbox) {
  const out = {};
  for (const key of ["memory_mib", "call_ms", "output_mib", "output_tuples"]) {
    if (sandbox[key] !== null && sandbox[key] !== undefined) out[key] = sandbox[key];
  }
  if (sandbox.read_only_dirs && sandbox.read_only_dirs.length) out.read_only_dirs = sandbox.read_only_dirs;
  return out;
}

function nodeWith(id, inputs, parallelism, op) {
  const node = { id };
  if (inputs.length) node.inputs = inputs;
  if (parallelism !== 1) node.parallelism = parallelism;
  node.op = op;
  return node;
}

/** A topology: its definition and the operators it calls. */
export class Topology {
  constructor(name) {
    this.name = name;
    this.nodes = [];
    this.sandbox = new Map();
    this.guestSpout = null;
    // operator id -> { kind, code }; kind: function, filter, combiner,
    // reducer, general, updater, query.
    this.code = new Map();
  }

  /** The definition the host reads. */
  definition() {
    const out = { name: this.name, nodes: this.nodes };
    if (this.sandbox.size) {
      const sandbox = {};
      for (const id of [...this.sandbox.keys()].sort(compareStrings)) sandbox[id] = sandboxDef(this.sandbox.get(id));
      out.sandbox = sandbox;
    }
    return out;
  }

  /** Finishes the topology (it is the topology itself). */
  build() {
    return this;
  }

  node(id) {
    return this.nodes.find((n) => n.id === id);
  }

  /** Number of output fields of the function, updater or query `id`. */
  outputArity(id) {
    const op = this.node(id)?.op;
    if (!op) return undefined;
    switch (op.op) {
      case "each":
      case "map":
      case "flat-map":
      case "state-query":
        return op.output.length;
      case "partition-persist":
        return (op.output ?? []).length;
      case "peek":
        return 0;
    }
    return undefined;
  }

  /** Number of output fields of the aggregator `id`. */
  aggregatorArity(id) {
    for (const { op } of this.nodes) {
      if (op.op === "aggregate") {
        const found = op.aggregators.find((a) => a.id === id);
        if (found) return found.output.length;
      } else if ((op.op === "persistent-aggregate" || op.op === "window") && op.aggregator.id === id) {
        return op.aggregator.output.length;
      }
    }
    return undefined;
  }

  /** The fields of the data spout's tuples. */
  spoutFields() {
    const node = this.nodes.find((n) => n.op.op === "spout");
    if (!node) return [];
    return spoutFieldsOf(node.op.spout);
  }

  root(id, op) {
    this.nodes.push({ id, op });
    return new Stream(this, this.nodes.length - 1);
  }

  /** A stream from `spout` (one data spout per topology). */
  newStream(spout) {
    return this.root(SPOUT_ID, { op: "spout", spout: spout.define(this) });
  }

  /** Trident's DRPC stream: each request to the query `name` enters as one
   *  tuple with its arguments in the field `args`. */
  newQueryStream(name) {
    return this.root(`query-${name}`, { op: "query-stream", name });
  }

  joinNode(inputs, op, kind) {
    const index = this.nodes.length;
    this.nodes.push(
      nodeWith(
        `${kind}-${index}`,
        inputs.map((s) => s.node),
        1,
        op,
      ),
    );
    return new Stream(this, index);
  }

  /** The tuples of every stream, which must have the same fields. */
  merge(...streams) {
    return this.joinNode(streams, { op: "merge" }, "merge");
  }

  /** Joins two streams within each batch on `fieldsA` = `fieldsB`; output:
   *  the join fields, then a's other fields, then b's, named by `output`.
   *  `kinds`: INNER or OUTER for each side. */
  join(a, fieldsA, b, fieldsB, output, kinds = [INNER, INNER]) {
    const op = { op: "join", fields: [names(fieldsA), names(fieldsB)], kinds: [...kinds], output: names(output) };
    return this.joinNode([a, b], op, "join");
  }

  rename(old, renamed) {
    for (const table of [this.sandbox, this.code]) {
      if (table.has(old)) {
        const value = table.get(old);
        table.delete(old);
        table.set(renamed, value);
      }
    }
  }
}

// Rust orders strings by their UTF-8 bytes, which is code point order.
function compareStrings(a, b) {
  const x = [...a].map((c) => c.codePointAt(0));
  const y = [...b].map((c) => c.codePointAt(0));
  for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return x[i] - y[i];
  return x.length - y.length;
}

function registerAggregator(topology, id, aggregator) {
  const [kind, code] = aggregatorKind(aggregator);
  if (kind === "builtin") return { kind: "builtin", name: code };
  topology.code.set(id, { kind, code });
  return { kind };
}

/** A stream being defined: each method adds an operation after it and
 *  returns the stream that operation produces. Using one twice branches it. */
export class Stream {
  constructor(topology, node) {
    this.topology = topology;
    this.node = node;
  }

  then(kind, make) {
    const t = this.topology;
    const index = t.nodes.length;
    const id = `${kind}-${index}`;
    const op = make(t, id);
    const parallelism = op.op === "partition" ? 1 : (t.nodes[this.node].parallelism ?? 1);
    t.nodes.push(nodeWith(id, [this.node], parallelism, op));
    return new Stream(t, index);
  }

  registered(kind, code, op) {
    return (t, id) => {
      t.code.set(id, { kind, code });
      return op;
    };
  }

  /** Trident's `each`: `fn(tuple)` returns the tuples to append (an
   *  iterable: an array or a generator), each an array of the output
   *  fields' values or, for one field, the value. */
  each(input, fn, output) {
    return this.then(
      "each",
      this.registered("function", fn, { op: "each", input: names(input), output: names(output) }),
    );
  }

  /** `each` a batch partition at a time: `fn(...columns)` takes one array
   *  per `input` field (its value in every row, in order) and returns an
   *  array with one entry per row: what `each`'s function returns for that
   *  row. The same operation as `each` to the host, without a call per
   *  tuple: `(sentences) => sentences.map((s) => s.split(" "))`. */
  eachBatch(input, fn, output) {
    const op = { op: "each", input: names(input), output: names(output) };
    return this.then("each", this.registered("function", { batch: fn }, op));
  }

  /** Trident's `map`: `fn(tuple)` returns the one tuple of `output` that replaces it. */
  map(input, fn, output) {
    const op = { op: "map", input: names(input), output: names(output) };
    return this.then("map", this.registered("function", { adapted: "map", fn }, op));
  }

  /** Trident's `flatMap`: the tuples of `output` that `fn(tuple)` returns replace it. */
  flatMap(input, fn, output) {
    const op = { op: "flat-map", input: names(input), output: names(output) };
    return this.then("flat-map", this.registered("function", { adapted: "flat-map", fn }, op));
  }

  /** Trident's `peek`: `fn(tuple)` sees each tuple, which passes on unchanged. */
  peek(input, fn) {
    return this.then("peek", this.registered("function", { adapted: "peek", fn }, { op: "peek", input: names(input) }));
  }

  /** Trident's `filter`: keeps the tuples for which `fn(tuple)` is true. */
  filter(input, fn) {
    return this.then("filter", this.registered("filter", fn, { op: "filter", input: names(input) }));
  }

  /** Ends this stream in `sink`: every committed batch's tuples are
   *  published exactly once, written with the batch's state in one commit.
   *  The stream must be of the commit phase (a state's `newValuesStream`,
   *  or after a `stateQuery`). Returns the sink's stream, for `name` only:
   *  nothing follows a sink. */
  sink(sink) {
    return this.then("sink", () => ({ op: "sink", sink: sink.define() }));
  }

  /** Trident's `project`: keeps only `fields`. */
  project(fields) {
    return this.then("project", () => ({ op: "project", fields: names(fields) }));
  }

  partition(by) {
    return this.then("partition", () => ({ op: "partition", by }));
  }

  /** Tuples spread round-robin over the next stage's partitions. */
  shuffle() {
    return this.partition({ kind: "shuffle" });
  }

  /** Equal values of `fields` meet in one partition. */
  partitionBy(fields) {
    return this.partition({ kind: "fields", fields: names(fields) });
  }

  /** Every tuple to one partition. */
  global() {
    return this.partition({ kind: "global" });
  }

  /** Each batch's tuples to one partition. */
  batchGlobal() {
    return this.partition({ kind: "batch-global" });
  }

  /** Every tuple to every partition. */
  broadcast() {
    return this.partition({ kind: "broadcast" });
  }

  /** The aggregation or query that follows runs per group of `fields`. */
  groupBy(fields) {
    return new GroupedStream(this, names(fields));
  }

  aggregateNode(scope, group, input, aggregator, output) {
    return this.then(scope === "partition" ? "partition-aggregate" : "aggregate", (t, id) => {
      const kind = registerAggregator(t, id, aggregator);
      const op = { op: "aggregate", scope };
      if (group.length) op.group = group;
      op.aggregators = [{ id, kind, input: names(input), output: names(output) }];
      return op;
    });
  }

  /** Aggregates each partition of a batch. */
  partitionAggregate(input, aggregator, output) {
    return this.aggregateNode("partition", [], input, aggregator, output);
  }

  /** One result per batch, even an empty one. */
  aggregate(input, aggregator, output) {
    return this.aggregateNode("batch", [], input, aggregator, output);
  }

  /** Several aggregators over the same tuples; end with `chainEnd()`. */
  chainedAgg() {
    return new ChainedAggregate(this, []);
  }

  persist(state, group, input, aggregator, output) {
    const stream = this.then("persistent-aggregate", (t, id) => {
      const kind = registerAggregator(t, id, aggregator);
      const op = { op: "persistent-aggregate", state: state.def() };
      if (group.length) op.group = group;
      op.aggregator = { id, kind, input: names(input), output: names(output) };
      return op;
    });
    return new TridentState(stream, state.name);
  }

  /** Each batch's value is combined into `state`, a single value, exactly once. */
  persistentAggregate(state, aggregator, output) {
    return this.persist(state, [], [], aggregator, output);
  }

  /** `persistentAggregate` whose aggregator reads `input`. */
  persistentAggregateOver(state, input, aggregator, output) {
    return this.persist(state, [], input, aggregator, output);
  }

  windowNode(window, state, group, input, aggregator, output) {
    return this.then("window", (t, id) => {
      const kind = registerAggregator(t, id, aggregator);
      const op = { op: "window", window: window.def(), state: { name: state, kind: "opaque" } };
      if (group.length) op.group = group;
      op.aggregator = { id, kind, input: names(input), output: names(output) };
      return op;
    });
  }

  /** Trident's `tumblingWindow` and `slidingWindow`, and event-time
   *  windows: aggregates each `window` of the stream (a combiner, reducer
   *  or built-in over `input`), keeping the open windows in the opaque
   *  state named `state`, exactly once. Each window's result is emitted
   *  once, when it closes: `window_start`, `window_end`, then `output`. */
  window(window, state, input, aggregator, output) {
    return this.windowNode(window, state, [], input, aggregator, output);
  }

  /** On a window's stream: the tuples the window found late (every window
   *  they fall into had closed), as they came, with the fields of the
   *  window's input. A late tuple is dropped from the windows either way. */
  lateStream() {
    const t = this.topology;
    const index = t.nodes.length;
    const window = t.nodes[this.node];
    const inputs = [window.inputs?.[0] ?? this.node, this.node];
    t.nodes.push(nodeWith(`late-tuples-${index}`, inputs, window.parallelism ?? 1, { op: "late-tuples" }));
    return new Stream(t, index);
  }

  /** `updater.updateState(state, tuples)` writes each batch partition's
   *  `input` tuples into `state` in the commit phase; what it returns
   *  (tuples of `output`) forms the new-values stream. */
  partitionPersist(state, input, updater, output = []) {
    const stream = this.then("partition-persist", (t, id) => {
      t.code.set(id, { kind: "updater", code: updater });
      const op = { op: "partition-persist", state: state.def(), input: names(input) };
      if (names(output).length) op.output = names(output);
      return op;
    });
    return new TridentState(stream, state.name);
  }

  /** Looks each tuple's `input` up in `state` with `query` (MapGet or an
   *  object with `batchRetrieve` and `execute`), appending `output`. */
  stateQuery(state, input, query, output) {
    return this.then("state-query", (t, id) => {
      let kind = "map-get";
      if (query !== MapGet) {
        t.code.set(id, { kind: "query", code: query });
        kind = "guest";
      }
      return { op: "state-query", state: state.stateName, input: names(input), query: kind, output: names(output) };
    });
  }

  extreme(by, max) {
    return this.then(max ? "max" : "min", () => {
      const op = { op: "extreme" };
      if (by.length) op.by = by;
      op.max = max;
      return op;
    });
  }

  /** The batch's tuple with the least `field`. */
  minBy(field) {
    return this.extreme([field], false);
  }

  /** The batch's tuple with the greatest `field`. */
  maxBy(field) {
    return this.extreme([field], true);
  }

  /** The batch's least tuple, comparing fields in order. */
  min() {
    return this.extreme([], false);
  }

  /** The batch's greatest tuple, comparing fields in order. */
  max() {
    return this.extreme([], true);
  }

  /** `n` instances run each operation of this stage (back to the last
   *  repartitioning) at once, each over its own partition of the batch. */
  parallelismHint(n) {
    const nodes = this.topology.nodes;
    let index = this.node;
    for (;;) {
      const node = nodes[index];
      const inputs = node.inputs ?? [];
      nodes[index] = nodeWith(node.id, inputs, Math.max(n, 1), node.op);
      if (node.op.op === "partition" || inputs.length !== 1) break;
      index = inputs[0];
    }
    return this;
  }

  sandboxOf() {
    const t = this.topology;
    const id = t.nodes[this.node].id;
    if (!t.sandbox.has(id)) t.sandbox.set(id, {});
    return t.sandbox.get(id);
  }

  /** Sets this operator's limits; on a guest spout's stream, the spout's. */
  limits(limits) {
    Object.assign(this.sandboxOf(), limits.values);
    return this;
  }

  /** Mounts host directory `host` read-only at `guest` in this operator's
   *  sandbox, where the host's configuration allows it. */
  readOnlyDir(host, guest) {
    const sandbox = this.sandboxOf();
    (sandbox.read_only_dirs ??= []).push({ host, guest });
    return this;
  }

  /** Gives this stream's operation the id `label`, used in logs, errors and metrics. */
  name(label) {
    const t = this.topology;
    const node = t.nodes[this.node];
    const renamed = [[node.id, label]];
    node.id = label;
    if (node.op.op === "aggregate") {
      node.op.aggregators.forEach((aggregator, k) => {
        const id = k === 0 ? label : `${label}.${k}`;
        renamed.push([aggregator.id, id]);
        aggregator.id = id;
      });
    }
    if (node.op.op === "persistent-aggregate" || node.op.op === "window") node.op.aggregator.id = label;
    const deduped = renamed.filter((p, i) => i === 0 || p[0] !== renamed[i - 1][0] || p[1] !== renamed[i - 1][1]);
    for (const [old, id] of deduped) t.rename(old, id);
    return this;
  }

  /** Finishes the topology. */
  build() {
    return this.topology;
  }
}

/** A stream grouped by fields, for the aggregation or query that follows. */
export class GroupedStream {
  constructor(stream, group) {
    this.stream = stream;
    this.group = group;
  }

  partitioned() {
    return this.stream.partition({ kind: "fields", fields: [...this.group] });
  }

  /** Aggregates each group of the batch; output: the group fields, then `output`. */
  aggregate(input, aggregator, output) {
    return this.stream.aggregateNode("batch", [...this.group], input, aggregator, output);
  }

  /** Aggregates each group within each partition (partitioned by the group fields first). */
  partitionAggregate(input, aggregator, output) {
    return this.partitioned().aggregateNode("partition", [...this.group], input, aggregator, output);
  }

  /** Chained aggregators per group. */
  chainedAgg() {
    return new ChainedAggregate(this.stream, [...this.group]);
  }

  /** Each batch's value per group is combined into `state`, a map keyed by
   *  the group fields, exactly once. */
  persistentAggregate(state, aggregator, output) {
    return this.stream.persist(state, [...this.group], [], aggregator, output);
  }

  /** Grouped `persistentAggregate` whose aggregator reads `input`. */
  persistentAggregateOver(state, input, aggregator, output) {
    return this.stream.persist(state, [...this.group], input, aggregator, output);
  }

  /** `Stream.window` per group: each group's windows, output after the group fields. */
  window(window, state, input, aggregator, output) {
    return this.stream.windowNode(window, state, [...this.group], input, aggregator, output);
  }

  /** `stateQuery` after partitioning by the group fields. */
  stateQuery(state, input, query, output) {
    return this.partitioned().stateQuery(state, input, query, output);
  }
}

/** Aggregators chained over the same tuples (Trident's `chainedAgg`). */
export class ChainedAggregate {
  constructor(stream, group) {
    this.stream = stream;
    this.group = group;
    this.scope = null;
    this.parts = [];
  }

  part(scope, input, aggregator, output) {
    if (this.scope !== null && this.scope !== scope) {
      throw new Error("a chained aggregate's aggregators are all partitionAggregate or all aggregate");
    }
    this.scope = scope;
    this.parts.push([names(input), aggregator, names(output)]);
    return this;
  }

  /** Adds an aggregator over each partition. */
  partitionAggregate(input, aggregator, output) {
    return this.part("partition", input, aggregator, output);
  }

  /** Adds an aggregator over the whole batch. */
  aggregate(input, aggregator, output) {
    return this.part("batch", input, aggregator, output);
  }

  /** The stream of the group fields, then every aggregator's outputs. */
  chainEnd() {
    const scope = this.scope ?? "batch";
    return this.stream.then("chained-aggregate", (t, id) => {
      const aggregators = this.parts.map(([input, aggregator, output], k) => {
        const partId = k === 0 ? id : `${id}.${k}`;
        return { id: partId, kind: registerAggregator(t, partId, aggregator), input, output };
      });
      const op = { op: "aggregate", scope };
      if (this.group.length) op.group = this.group;
      op.aggregators = aggregators;
      return op;
    });
  }
}

/** A state a stream persists into: queried with `stateQuery`, and the
 *  source of the new-values stream. */
export class TridentState {
  constructor(stream, name) {
    this.stream = stream;
    this.stateName = name;
  }

  /** The stream of what each batch changed. */
  newValuesStream() {
    return new Stream(this.stream.topology, this.stream.node);
  }

  /** Gives the operation that persists into this state the id `label`. */
  name(label) {
    this.stream.name(label);
    return this;
  }

  /** See `Stream.parallelismHint`. */
  parallelismHint(n) {
    this.stream.parallelismHint(n);
    return this;
  }

  /** Finishes the topology. */
  build() {
    return this.stream.topology;
  }
}

/**
 * Operators of a topology that another component defines, for a bundle of
 * several guests (in several languages): each registered under its
 * operator id, with the output fields the topology gives it. A component of
 * these describes no topology; the bundle's `weir-bundle.json` says which
 * operators it runs:
 *
 *     export const topology = () => new Operators("polyglot").aggregator("count", counter);
 */
export class Operators {
  constructor(topology) {
    this.name = topology;
    this.code = new Map();
    this.arity = new Map();
    this.guestSpout = null;
    this.fieldsOfSpout = [];
  }

  add(id, kind, code, arity) {
    this.code.set(id, { kind, code });
    this.arity.set(id, arity);
    return this;
  }

  /** A function (`each`): `fn(tuple)` returns the tuples to append. */
  function(id, fn, output) {
    return this.add(id, "function", fn, names(output).length);
  }

  /** A function (`each`) over whole columns, as `Stream.eachBatch` takes it. */
  functionBatch(id, fn, output) {
    return this.add(id, "function", { batch: fn }, names(output).length);
  }

  /** A `map`: `fn(tuple)` returns the tuple that replaces it. */
  map(id, fn, output) {
    return this.add(id, "function", { adapted: "map", fn }, names(output).length);
  }

  /** A `flatMap`: `fn(tuple)` returns the tuples that replace it. */
  flatMap(id, fn, output) {
    return this.add(id, "function", { adapted: "flat-map", fn }, names(output).length);
  }

  /** A `peek`: `fn(tuple)` sees each tuple. */
  peek(id, fn) {
    return this.add(id, "function", { adapted: "peek", fn }, 0);
  }

  /** A filter: keeps the tuples for which `fn(tuple)` is true. */
  filter(id, fn) {
    return this.add(id, "filter", fn, undefined);
  }

  /** An aggregator of any kind (combiner, reducer or general, as the
   *  aggregation methods take them); `output`: a general aggregator's
   *  output fields. */
  aggregator(id, aggregator, output = ["value"]) {
    const [kind, code] = aggregatorKind(aggregator);
    if (kind === "builtin") throw new TypeError("built-in aggregators run in the host: the topology names them");
    return this.add(id, kind, code, names(output).length);
  }

  /** A state updater (`partitionPersist`) emitting tuples of `output`. */
  stateUpdater(id, updater, output = []) {
    return this.add(id, "updater", updater, names(output).length);
  }

  /** A query function (`stateQuery`) appending `output`. */
  query(id, query, output) {
    return this.add(id, "query", query, names(output).length);
  }

  /** The topology's guest spout (a GuestSpout), which this component runs. */
  spout(spout) {
    this.guestSpout = { promise: spout.promise, code: spout.spout };
    this.fieldsOfSpout = [...spout.fields];
    return this;
  }

  spoutFields() {
    return this.fieldsOfSpout;
  }

  outputArity(id) {
    return this.arity.get(id);
  }

  aggregatorArity(id) {
    return this.arity.get(id);
  }

  get describes() {
    return false;
  }

  build() {
    return this;
  }
}

/** The JSON a component returns from `describe`. */
export function describe(topologies) {
  return JSON.stringify(topologies.filter((t) => t.describes !== false).map((t) => t.definition()));
}

/** The topologies a guest's `topology()` returned, as an array. */
export function topologiesOf(topology) {
  return (Array.isArray(topology) ? topology : [topology]).map((t) => t.build());
}

// ---------------------------------------------------------------------------
// Dispatch: what each export of the WIT world does (as guest-sdk/src/dispatch.rs)

/** A batch an operator call belongs to. */
export class BatchInfo {
  constructor({ topology = "", operator = "", txid = 0n, attempt = 0, partition = 0, fields = [] } = {}) {
    Object.assign(this, { topology, operator, txid: BigInt(txid), attempt, partition, fields: [...fields] });
  }
}

/** The batch a spout call emits. */
export class SpoutInfo {
  constructor({ topology = "", txid = 0n, attempt = 0, maxTuples = 0 } = {}) {
    Object.assign(this, { topology, txid: BigInt(txid), attempt, maxTuples });
  }
}

function findTopology(topologies, name) {
  const found = topologies.find((t) => t.name === name);
  if (!found) throw new Fatal(`this component defines no topology ${JSON.stringify(name)}`);
  return found;
}

function code(topologies, info, kinds, what) {
  const topology = findTopology(topologies, info.topology);
  const found = topology.code.get(info.operator);
  if (!found || !kinds.includes(found.kind)) {
    throw new Fatal(`topology ${info.topology} has no ${what} ${JSON.stringify(info.operator)}`);
  }
  return [topology, found.code];
}

function decodeOr(buf, info, what = "input", read = decode) {
  try {
    return read(buf);
  } catch (e) {
    if (e instanceof DecodeError) throw new Fatal(`operator ${info.operator}: ${what} ${e.message}`);
    throw e;
  }
}

function checkArity(arity, info) {
  if (arity !== info.fields.length) {
    throw new Fatal(`operator ${info.operator}: input rows hold ${arity} values for ${info.fields.length} fields`);
  }
}

function decodeInput(buf, info) {
  const { arity, rows } = decodeOr(buf, info);
  checkArity(arity, info);
  return rows;
}

/** The input's values, row after row, without an array per row; and how many rows. */
function decodeInputValues(buf, info) {
  const { arity, tags, values } = decodeOr(buf, info, "input", decodeFlat);
  checkArity(arity, info);
  return [values, tags.length];
}

/** Row `r`'s values of a flat array of rows of `arity` values. */
const rowOf = (values, arity, r) => (arity === 1 ? [values[r]] : values.slice(r * arity, r * arity + arity));

const valuesOf = (item) => (Array.isArray(item) ? item : item instanceof Tuple ? item.values : [item]);

function push(out, tag, values, who = "emitted") {
  try {
    out.push(tag, values);
  } catch (e) {
    if (e instanceof EncodeError) throw new Fatal(`${who} ${e.message}`);
    throw e;
  }
}

function emitAll(out, tag, produced) {
  if (produced === undefined || produced === null) return;
  if (typeof produced === "string" || typeof produced[Symbol.iterator] !== "function") {
    throw new Fatal(`an operator returned a ${typeName(produced)} where an iterable of tuples was expected`);
  }
  for (const item of produced) push(out, tag, valuesOf(item));
}

const emitter = (out, tag) => (...values) => push(out, tag, values);

const NOTHING = [];

/**
 * Writes what each input row produced (`produced[row]`: an iterable of
 * tuples, or null) into `out`, tagged with the row: arrays of strings for a
 * one-field output in one pass, anything else tuple by tuple.
 */
function emitGrouped(out, produced) {
  if (out.pushStrings(produced)) return;
  for (let row = 0; row < produced.length; row++) emitAll(out, row, produced[row]);
}

/** Runs the function `info.operator` over every input row; output rows are
 *  tagged with the index of the row they extend. */
export function runFunction(topologies, info, input) {
  const [topology, fn] = code(topologies, info, ["function"], "function");
  const out = new BatchWriter(topology.outputArity(info.operator));
  const [values, count] = decodeInputValues(input, info);
  const arity = info.fields.length;
  let produced = new Array(count);
  if (fn && fn.batch) {
    const columns = [];
    for (let k = 0; k < arity; k++) {
      const column = new Array(count);
      for (let r = 0; r < count; r++) column[r] = values[r * arity + k];
      columns.push(column);
    }
    produced = fn.batch(...columns);
    if (!Array.isArray(produced) || produced.length !== count) {
      const shape = Array.isArray(produced) ? `${produced.length} entries` : `a ${typeName(produced)}`;
      throw new Fatal(
        `operator ${info.operator}: a batch function returns an array of what each of the ${count} input rows emits; it returned ${shape}`,
      );
    }
  } else if (fn && fn.adapted) {
    const call = fn.fn;
    for (let r = 0; r < count; r++) {
      const result = call(new Tuple(rowOf(values, arity, r), info));
      produced[r] = fn.adapted === "map" ? [result] : fn.adapted === "flat-map" ? result : NOTHING;
    }
  } else if (arity === 1) {
    for (let r = 0; r < count; r++) produced[r] = fn(new Tuple([values[r]], info));
  } else {
    for (let r = 0; r < count; r++) produced[r] = fn(new Tuple(rowOf(values, arity, r), info));
  }
  emitGrouped(out, produced);
  return out.finish();
}

/** Runs the filter `info.operator`: one byte per input row, 1 to keep it. */
export function runFilter(topologies, info, input) {
  const [, keep] = code(topologies, info, ["filter"], "filter");
  const [values, count] = decodeInputValues(input, info);
  const arity = info.fields.length;
  const kept = new Uint8Array(count);
  for (let r = 0; r < kept.length; r++) kept[r] = keep(new Tuple(rowOf(values, arity, r), info)) ? 1 : 0;
  return kept;
}

function groupOf(info, groups, tag) {
  if (tag >= groups) throw new Fatal(`operator ${info.operator}: row tagged with group ${tag} of ${groups}`);
  return tag;
}

const UNSET = Symbol("unset");

/** Folds each group's rows: `combine(zero, init(row))` for each row, in
 *  order; one row per group, tagged with it. */
export function combineGroups(topologies, info, groups, input) {
  const [, aggregator] = code(topologies, info, ["combiner"], "combiner aggregator");
  const rows = decodeInput(input, info);
  const partials = new Array(groups).fill(UNSET);
  for (const [tag, values] of rows) {
    const slot = groupOf(info, groups, tag);
    const acc = partials[slot] === UNSET ? aggregator.zero() : partials[slot];
    partials[slot] = aggregator.combine(acc, aggregator.init(new Tuple(values, info)));
  }
  const out = new BatchWriter(1);
  partials.forEach((partial, group) =>
    push(out, group, [partial === UNSET ? aggregator.zero() : partial], "aggregator returned"),
  );
  return out.finish();
}

/** Folds each group's rows with the reducer, from the group's row in
 *  `start` or from `init()`; one row per group. */
export function reduceGroups(topologies, info, groups, start, input) {
  const [, reducer] = code(topologies, info, ["reducer"], "reducer aggregator");
  const values = new Array(groups).fill(UNSET);
  for (const [tag, row] of decodeOr(start, info, "start").rows) values[groupOf(info, groups, tag)] = row[0] ?? null;
  for (const [tag, row] of decodeInput(input, info)) {
    const slot = groupOf(info, groups, tag);
    const acc = values[slot] === UNSET ? reducer.init() : values[slot];
    values[slot] = reducer.reduce(acc, new Tuple(row, info));
  }
  const out = new BatchWriter(1);
  values.forEach((value, group) => push(out, group, [value === UNSET ? reducer.init() : value], "aggregator returned"));
  return out.finish();
}

/** Runs the general aggregator over each group; emitted rows are tagged
 *  with their group. `aggregate` returns the group's new state, or
 *  undefined to keep it. */
export function aggregateGroups(topologies, info, groups, input) {
  const [topology, aggregator] = code(topologies, info, ["general"], "aggregator");
  const rows = decodeInput(input, info);
  const out = new BatchWriter(topology.aggregatorArity(info.operator));
  const states = [];
  for (let group = 0; group < groups; group++) states.push(aggregator.init(info, emitter(out, group)));
  for (const [tag, values] of rows) {
    const slot = groupOf(info, groups, tag);
    const state = aggregator.aggregate(states[slot], new Tuple(values, info), emitter(out, slot));
    if (state !== undefined) states[slot] = state;
  }
  states.forEach((state, group) => aggregator.complete(state, emitter(out, group)));
  return out.finish();
}

/** A state the host keeps, as a state updater or query function sees it
 *  during a call. Keys are arrays of values; each key holds one value. */
export class MapState {
  constructor(multiGet, multiPut) {
    this.getRaw = multiGet;
    this.putRaw = multiPut;
  }

  /** The values of `keys`, in order; null where a key has none. */
  multiGet(keys) {
    keys = keys.map(valuesOf);
    const out = new BatchWriter(keys.length ? keys[0].length : 0);
    for (const key of keys) push(out, 0, key, "state key:");
    let decoded;
    try {
      decoded = decode(this.getRaw(out.finish()));
    } catch (e) {
      if (e instanceof DecodeError) throw new Fatal(`state values: ${e.message}`);
      throw e;
    }
    if (decoded.rows.length !== keys.length || decoded.arity !== 1) {
      throw new Fatal(`state returned ${decoded.rows.length} values for ${keys.length} keys`);
    }
    return decoded.rows.map(([, row]) => row[0]);
  }

  /** Writes `[key, value]` entries; they commit with the batch, exactly once. */
  multiPut(entries) {
    entries = entries.map(([key, value]) => [valuesOf(key), value]);
    const out = new BatchWriter(entries.length ? entries[0][0].length + 1 : 1);
    for (const [key, value] of entries) push(out, 0, [...key, value], "state entry:");
    this.putRaw(out.finish());
  }

  /** The value of one key, or null. */
  get(key) {
    return this.multiGet([key])[0];
  }

  /** Writes one key's value. */
  put(key, value) {
    this.multiPut([[key, value]]);
  }
}

/** Runs the state updater over the batch partition. */
export function updateState(topologies, info, state, input) {
  const [topology, updater] = code(topologies, info, ["updater"], "state updater");
  const tuples = decodeInput(input, info).map(([, values]) => new Tuple(values, info));
  const out = new BatchWriter(topology.outputArity(info.operator));
  emitAll(out, 0, updater.updateState(state, tuples));
  return out.finish();
}

/** The first half of a query function: one result row per input row. */
export function batchRetrieve(topologies, info, state, input) {
  const [, query] = code(topologies, info, ["query"], "query function");
  const tuples = decodeInput(input, info).map(([, values]) => new Tuple(values, info));
  const results = [...query.batchRetrieve(state, tuples)];
  if (results.length !== tuples.length) {
    throw new Fatal(
      `operator ${info.operator}: batch_retrieve returned ${results.length} results for ${tuples.length} tuples`,
    );
  }
  const out = new BatchWriter(1);
  results.forEach((result, index) => push(out, index, [result], "query returned"));
  return out.finish();
}

/** The second half of a query function: emits per input row given its
 *  result; output rows are tagged with the row they extend. */
export function executeQuery(topologies, info, input, results) {
  const [topology, query] = code(topologies, info, ["query"], "query function");
  const rows = decodeInput(input, info);
  const decoded = decodeOr(results, info, "results");
  if (decoded.rows.length !== rows.length || decoded.arity !== 1) {
    throw new Fatal(`operator ${info.operator}: ${decoded.rows.length} results for ${rows.length} tuples`);
  }
  const out = new BatchWriter(topology.outputArity(info.operator));
  rows.forEach(([, values], index) =>
    emitAll(out, index, query.execute(new Tuple(values, info), decoded.rows[index][1][0])),
  );
  return out.finish();
}

/** Combines each input row's stored value with its partial. */
export function combinePairs(topologies, info, input) {
  const [, aggregator] = code(topologies, info, ["combiner"], "combiner aggregator");
  const { arity, rows } = decodeOr(input, info);
  if (arity !== 2) throw new Fatal(`operator ${info.operator}: pairs must hold 2 values`);
  const out = new BatchWriter(1);
  for (const [tag, [stored, partial]] of rows) {
    push(out, tag, [aggregator.combine(stored, partial)], "aggregator returned");
  }
  return out.finish();
}

const PARTITIONED = ["partitioned-transactional", "partitioned-opaque"];

function spoutOf(topologies, info, promises) {
  const topology = findTopology(topologies, info.topology);
  const spout = topology.guestSpout;
  if (!spout || !promises.includes(spout.promise)) {
    throw new Fatal(`the topology has no ${promises.includes("batch") ? "batch" : "partitioned"} spout`);
  }
  return [spout.code, topology.spoutFields().length];
}

function spoutBatch(arity, tuples) {
  const out = new BatchWriter(arity);
  if (typeof tuples === "string" || typeof tuples?.[Symbol.iterator] !== "function") {
    throw new Fatal(`a spout returned a ${typeName(tuples)} where an iterable of tuples was expected`);
  }
  for (const item of tuples) push(out, 0, valuesOf(item), "spout emitted");
  return out.finish();
}

/** Batch `info.txid` of the batch spout, or null when it has nothing more. */
export function emitBatch(topologies, info) {
  const [spout, arity] = spoutOf(topologies, info, ["batch"]);
  const tuples = spout.emitBatch(info);
  return tuples === null || tuples === undefined ? null : spoutBatch(arity, tuples);
}

/** The partitions of the partitioned spout. */
export function spoutPartitions(topologies, info) {
  const [spout] = spoutOf(topologies, info, PARTITIONED);
  return Array.from(spout.partitions(info), String);
}

/** `{ tuples, meta }` of the next batch of `partition`, or null. */
export function emitPartition(topologies, info, partition, previous) {
  const [spout, arity] = spoutOf(topologies, info, PARTITIONED);
  const emitted = spout.emitPartition(info, partition, previous ?? null);
  if (emitted === null || emitted === undefined) return null;
  const [tuples, meta] = emitted;
  return { tuples: spoutBatch(arity, tuples), meta: bytesOf(meta) };
}

/** The batch of `partition` that `meta` describes, again. */
export function reemitPartition(topologies, info, partition, meta) {
  const [spout, arity] = spoutOf(topologies, info, PARTITIONED);
  if (typeof spout.reemitPartition !== "function") throw new Fatal("this spout is opaque: it cannot re-emit a batch");
  return spoutBatch(arity, spout.reemitPartition(info, partition, meta));
}

// ---------------------------------------------------------------------------
// The component's exports

// Bounds on what one failure says: a deep recursion's frames are many.
const MAX_FRAMES = 12;
const MAX_LINE = 240;

const clip = (text) => (text.length <= MAX_LINE ? text : `${text.slice(0, MAX_LINE - 3)}...`);

/** A line of a stack as `{ name, place }`, from SpiderMonkey's
 *  `name@file:line:column` or V8's `at name (file:line:column)`; null for
 *  a line that is no frame. */
function frameOf(line) {
  const spidermonkey = /^(.*)@(.*:\d+:\d+)$/.exec(line);
  if (spidermonkey) return { name: spidermonkey[1], place: spidermonkey[2] };
  const v8 = /^\s*at (?:(.*) \()?(.*:\d+:\d+)\)?$/.exec(line);
  return v8 ? { name: v8[1] ?? "", place: v8[2] } : null;
}

const fileOf = (frame) => frame.place.replace(/:\d+:\d+$/, "");

// The file this module runs from, as stacks name it: its frames, and the
// component's plumbing that calls it, are left out of a guest's stack.
const SDK_FILE = (() => {
  const frames = String(new Error().stack ?? "").split("\n").map(frameOf).filter(Boolean);
  return frames.length ? fileOf(frames[0]) : null;
})();

/** What an error an operator did not mean to throw says in the batch's
 *  error: its name and message, then the stack of the guest's own code
 *  (innermost call first), without the SDK's frames. */
export function failureMessage(e) {
  const lines = [clip(`${e && e.name ? e.name : "Error"}: ${e && e.message ? e.message : e}`)];
  const stack = e && typeof e.stack === "string" ? e.stack : "";
  const frames = stack.split("\n").map(frameOf).filter(Boolean);
  let outer = frames.length;
  while (outer > 0 && fileOf(frames[outer - 1]) !== SDK_FILE) outer--;
  const own = frames.slice(0, outer || frames.length).filter((f) => fileOf(f) !== SDK_FILE);
  for (const frame of own.slice(0, MAX_FRAMES)) {
    const name = frame.name.replace(/\/<+$/, "");
    lines.push(clip(name ? `    at ${name} (${frame.place})` : `    at ${frame.place}`));
  }
  if (own.length > MAX_FRAMES) lines.push(`    ... ${own.length - MAX_FRAMES} calls further out left out`);
  return lines.join("\n");
}

function failure(e) {
  if (e instanceof Fatal) return { tag: "err", val: { tag: "fatal", val: e.message } };
  if (e instanceof Retry) return { tag: "err", val: { tag: "retry", val: e.message } };
  // A bug in an operator: like a panic in a Rust guest, the batch is
  // replayed until its attempts run out. The log has the whole stack; the
  // batch's error says where in the guest's code.
  console.error(e && e.stack ? `${e}\n${e.stack}` : String(e));
  return { tag: "err", val: { tag: "retry", val: failureMessage(e) } };
}

function call(run) {
  try {
    return { tag: "ok", val: run() };
  } catch (e) {
    return failure(e);
  }
}

function hostState(handle) {
  const wrap = (f) => (bytes) => {
    try {
      return f(bytes);
    } catch (e) {
      throw new Retry(String(e && e.payload !== undefined ? e.payload : e && e.message ? e.message : e));
    }
  };
  return new MapState(
    wrap((keys) => handle.multiGet(keys)),
    wrap((entries) => handle.multiPut(entries)),
  );
}

const batchInfo = (ctx) => new BatchInfo(ctx);
const spoutInfo = (ctx) => new SpoutInfo(ctx);

/** The `operators` export of the WIT world over `topologies` (what a
 *  guest's `topology()` returned). */
export function exportsFor(topology) {
  const t = topologiesOf(topology);
  return {
    describe: () => describe(t),
    runFunction: (ctx, input) => call(() => runFunction(t, batchInfo(ctx), input)),
    runFilter: (ctx, input) => call(() => runFilter(t, batchInfo(ctx), input)),
    combineGroups: (ctx, groups, input) => call(() => combineGroups(t, batchInfo(ctx), groups, input)),
    reduceGroups: (ctx, groups, start, input) => call(() => reduceGroups(t, batchInfo(ctx), groups, start, input)),
    aggregateGroups: (ctx, groups, input) => call(() => aggregateGroups(t, batchInfo(ctx), groups, input)),
    updateState: (ctx, state, input) => call(() => updateState(t, batchInfo(ctx), hostState(state), input)),
    batchRetrieve: (ctx, state, input) => call(() => batchRetrieve(t, batchInfo(ctx), hostState(state), input)),
    executeQuery: (ctx, input, results) => call(() => executeQuery(t, batchInfo(ctx), input, results)),
    combinePairs: (ctx, pairs) => call(() => combinePairs(t, batchInfo(ctx), pairs)),
    emitBatch: (ctx) => call(() => emitBatch(t, spoutInfo(ctx))),
    spoutPartitions: (ctx) => call(() => spoutPartitions(t, spoutInfo(ctx))),
    emitPartition: (ctx, partition, previous) => call(() => emitPartition(t, spoutInfo(ctx), partition, previous)),
    reemitPartition: (ctx, partition, meta) => call(() => reemitPartition(t, spoutInfo(ctx), partition, meta)),
  };
}

"""The topology builder, in Trident's style, next to the operators it calls::

    topology = Topology("word-count")
    words = topology.new_stream(FileLines("sentence")).each("sentence", split, "word")
    counts = words.group_by("word").persistent_aggregate(State.transactional("counts"), Count, "count")

It writes the same definition, node for node and id for id, as the Rust
SDK's builder; ``describe`` returns it as JSON. Streams are handles: using
one twice branches it. Field lists may be given as a list or, for one
field, a string.
"""

import json

from .operators import (
    Aggregator,
    Builtin,
    CombinerAggregator,
    ReducerAggregator,
    _MapGet,
)

__all__ = [
    "Topology",
    "Operators",
    "Stream",
    "GroupedStream",
    "TridentState",
    "ChainedAggregate",
    "State",
    "Window",
    "Limits",
    "FileLines",
    "DirectoryLines",
    "Generator",
    "JetStream",
    "JetStreamSink",
    "Kafka",
    "KafkaSink",
    "GuestSpout",
    "Reducer",
    "General",
    "INNER",
    "OUTER",
    "describe",
]

SPOUT_ID = "spout"
INNER = "inner"
OUTER = "outer"


def _names(fields):
    if isinstance(fields, str):
        return [fields]
    return [str(f) for f in fields]


class State:
    """A state to persist into."""

    def __init__(self, name, kind):
        self.name = name
        self.kind = kind
        self._cache_size = None

    @staticmethod
    def transactional(name):
        """Stores ``{txid, value}``; a batch already applied is skipped."""
        return State(name, "transactional")

    @staticmethod
    def opaque(name):
        """Stores ``{txid, curr, prev}``; a replay recomputes from ``prev``."""
        return State(name, "opaque")

    @staticmethod
    def non_transactional(name):
        """Updated blindly: no exactly-once guarantee."""
        return State(name, "non-transactional")

    def cache_size(self, entries):
        """Keeps up to ``entries`` of the state cached in front of the store."""
        self._cache_size = entries
        return self

    def _def(self):
        out = {"name": self.name, "kind": self.kind}
        if self._cache_size is not None:
            out["cache_size"] = self._cache_size
        return out


def _whole(value, what):
    """``value`` if it is a whole number a window's ``what`` can hold."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**64:
        raise ValueError(f"window {what}: {value!r} is not a whole number from 0 to 2**64 - 1")
    return value


class Window:
    """How a window operation cuts its stream into windows: by a count of
    tuples per group or by when the host emitted each batch (Trident's), or
    by a timestamp field (event time)."""

    def __init__(self, definition):
        self._definition = definition
        # Event time only: the watermark's delay and the lateness allowed,
        # and after how long a spout partition with no tuples stops holding
        # the watermark back (None: never).
        self._delays = {"max_delay_ms": 0, "lateness_ms": 0}
        self._idle_timeout_ms = None

    @staticmethod
    def tumbling_count(size):
        """Trident's tumbling count window: every ``size`` tuples of a group."""
        return Window.sliding_count(size, size)

    @staticmethod
    def sliding_count(size, slide):
        """Trident's sliding count window: every ``slide`` tuples of a
        group, the last ``size``."""
        return Window({"kind": "count", "size": _whole(size, "size"), "slide": _whole(slide, "slide")})

    @staticmethod
    def tumbling_duration(size_ms):
        """Trident's tumbling duration window: ``size_ms`` of processing
        time, by when the host emitted each batch."""
        return Window.sliding_duration(size_ms, size_ms)

    @staticmethod
    def sliding_duration(size_ms, slide_ms):
        """Trident's sliding duration window: ``size_ms`` of processing
        time, one starting every ``slide_ms``."""
        return Window({"kind": "duration", "size_ms": _whole(size_ms, "size"), "slide_ms": _whole(slide_ms, "slide")})

    @staticmethod
    def tumbling(field, size_ms):
        """Tumbling event-time windows of ``size_ms`` by the timestamp (in
        milliseconds) in ``field``."""
        return Window.sliding(field, size_ms, size_ms)

    @staticmethod
    def sliding(field, size_ms, slide_ms):
        """Sliding event-time windows of ``size_ms``, one starting every
        ``slide_ms``, by the timestamp (in milliseconds) in ``field``."""
        size_ms, slide_ms = _whole(size_ms, "size"), _whole(slide_ms, "slide")
        return Window({"kind": "event-time", "field": field, "size_ms": size_ms, "slide_ms": slide_ms})

    @staticmethod
    def session(field, gap_ms):
        """Event-time session windows by the timestamp (in milliseconds) in
        ``field``: a group's session ends after ``gap_ms`` without a tuple."""
        return Window({"kind": "session", "field": field, "gap_ms": _whole(gap_ms, "gap")})

    def max_delay_ms(self, ms):
        """Event time: timestamps may come up to ``ms`` out of order (a
        spout partition's watermark trails its greatest timestamp by this
        much)."""
        self._delays["max_delay_ms"] = _whole(ms, "max delay")
        return self

    def lateness_ms(self, ms):
        """Event time: a window still takes tuples for ``ms`` after the
        watermark passes its end, and closes then."""
        self._delays["lateness_ms"] = _whole(ms, "lateness")
        return self

    def idle_timeout_ms(self, ms):
        """Event time, with a spout that deals into several partitions: a
        partition that has brought tuples stops holding the watermark back
        once the greatest timestamp seen has moved on by more than ``ms``
        without a tuple of it (by default it holds it back until it brings
        more)."""
        self._idle_timeout_ms = _whole(ms, "idle timeout")
        return self

    def _def(self):
        out = dict(self._definition)
        if out["kind"] in ("event-time", "session"):
            out.update((key, ms) for key, ms in self._delays.items() if ms)
            if self._idle_timeout_ms is not None:
                out["idle_timeout_ms"] = self._idle_timeout_ms
        return out


class Limits:
    """Limits an operator asks for, lower than the host's where it likes."""

    def __init__(self, memory_mib=None, call_ms=None, output_mib=None, output_tuples=None):
        self._values = {
            "memory_mib": memory_mib,
            "call_ms": call_ms,
            "output_mib": output_mib,
            "output_tuples": output_tuples,
        }

    def _set(self, key, value):
        self._values[key] = value
        return self

    def memory_mib(self, mib):
        """Largest linear memory, in MiB."""
        return self._set("memory_mib", mib)

    def call_ms(self, ms):
        """CPU time one call may take, in milliseconds."""
        return self._set("call_ms", ms)

    def output_mib(self, mib):
        """Bytes one call may return, in MiB."""
        return self._set("output_mib", mib)

    def output_tuples(self, tuples):
        """Tuples one call may emit."""
        return self._set("output_tuples", tuples)

    def _apply(self, sandbox):
        sandbox.update(self._values)


class FileLines:
    """The host's built-in spout over the lines of the run's input file."""

    def __init__(self, field):
        self.field = field

    def _define(self, topology):
        return {"kind": "file-lines", "field": self.field}


class DirectoryLines:
    """The host's built-in spout over the lines of the files of the run's
    input directory, in name order."""

    def __init__(self, field):
        self.field = field

    def _define(self, topology):
        return {"kind": "directory-lines", "field": self.field}


class Generator:
    """The host's built-in spout emitting the integers 0 to ``count`` - 1."""

    def __init__(self, field, count):
        self.field = field
        self.count = count

    def _define(self, topology):
        return {"kind": "generator", "field": self.field, "count": self.count}


def _extra_field(key, doc):
    """A spout builder method that also emits the metadata field ``key``
    (a message's subject, a record's offset) in the field it is given."""

    def setter(self, field):
        self._extra[key] = field
        return self

    setter.__name__ = key
    setter.__doc__ = doc
    return setter


class _BrokerSpout:
    """What the JetStream and Kafka spouts share: where a message's payload
    (a record's value) goes, the metadata fields also emitted (``_EXTRA``,
    each set by its method), and the bound on a partition's batch."""

    _EXTRA = ()

    def __init__(self, promise, default_field):
        self._promise = promise
        self._payload = {"as": "bytes", "field": default_field}
        self._extra = dict.fromkeys(self._EXTRA)
        self._max_per_partition = None

    def bytes(self, field):
        """The payload (a Kafka record's value) as bytes in ``field``."""
        self._payload = {"as": "bytes", "field": field}
        return self

    def string(self, field):
        """The payload (a Kafka record's value) as a UTF-8 string in ``field``."""
        self._payload = {"as": "string", "field": field}
        return self

    def json(self, fields):
        """The payload (a Kafka record's value) is a JSON object: each of
        ``fields`` takes its member."""
        self._payload = {"as": "json", "fields": _names(fields)}
        return self

    def max_per_partition(self, count):
        """Takes at most ``count`` messages (records) from each partition per
        batch."""
        self._max_per_partition = count
        return self

    def _define_into(self, out, payload_key):
        """``out`` with the payload under ``payload_key``, then the metadata
        fields set and the bound."""
        out[payload_key] = self._payload
        out.update((key, value) for key, value in self._extra.items() if value is not None)
        if self._max_per_partition is not None:
            out["max_per_partition"] = self._max_per_partition
        return out

    @classmethod
    def _fields_of(cls, spout, payload_key):
        """The fields of a definition's tuples: the payload's, then the
        metadata fields set."""
        payload = spout[payload_key]
        fields = list(payload["fields"]) if payload["as"] == "json" else [payload["field"]]
        extra = (spout.get(key) for key in cls._EXTRA)
        return fields + [field for field in extra if field is not None]


class JetStream(_BrokerSpout):
    """The host's built-in spout over a NATS JetStream stream, each subject a
    partition, read by the host from the server ``weir run --nats`` names::

        JetStream.transactional("clicks", ["clicks.*"]).json(["user", "url"])

    The payload goes into one bytes field named ``payload`` unless
    ``string``, ``bytes`` or ``json`` says otherwise."""

    _EXTRA = ("subject_field", "sequence_field", "timestamp_field")

    def __init__(self, promise, stream, subjects):
        super().__init__(promise, "payload")
        self._stream = stream
        self._subjects = _names(subjects)

    @staticmethod
    def transactional(stream, subjects):
        """A replay reads exactly the sequence range each partition had in
        the batch; ``subjects`` are the stream's subjects, or wildcards."""
        return JetStream("transactional", stream, subjects)

    @staticmethod
    def opaque(stream, subjects):
        """A replay reads afresh from each partition's next sequence as of
        the last commit."""
        return JetStream("opaque", stream, subjects)

    subject_field = _extra_field("subject_field", "Also emits the message's subject in ``field``.")
    sequence_field = _extra_field("sequence_field", "Also emits the message's stream sequence in ``field``.")
    timestamp_field = _extra_field(
        "timestamp_field",
        "Also emits the time the server stored the message (milliseconds since the Unix epoch) in ``field``.",
    )

    def _define(self, topology):
        out = {"kind": "jetstream", "promise": self._promise, "stream": self._stream, "subjects": self._subjects}
        return self._define_into(out, "payload")


class _BrokerSink:
    """What the JetStream and Kafka sinks share: where each tuple goes (a
    subject, a topic), and what it is sent as: a JSON object of its fields
    unless ``raw`` names one field to send as it is."""

    # Each sink's definition kind, and the key naming where it sends.
    _KIND = None
    _TARGET_KEY = None

    def __init__(self, target):
        self._target = target
        self._payload = {"as": "json"}

    def raw(self, field):
        """Sends the value of ``field`` as it is: the message's payload, the
        record's value."""
        self._payload = {"as": "raw", "field": field}
        return self

    def _define(self):
        return {"kind": self._KIND, self._TARGET_KEY: self._target, "payload": self._payload}


def _sink_constructor(target_key, doc):
    """A sink's constructor named for where it sends (``subject``,
    ``topic``): ``JetStreamSink.subject("page-counts")``."""

    def make(cls, target):
        return cls(target)

    make.__name__ = target_key
    make.__doc__ = doc
    return classmethod(make)


class JetStreamSink(_BrokerSink):
    """A sink publishing to NATS JetStream, for ``Stream.sink``: each tuple
    of every committed batch is published once to ``subject``::

        JetStreamSink.subject("page-counts")
        JetStreamSink.subject("pages.raw").raw("page")

    The payload is a JSON object of the tuple's fields unless ``raw`` names
    one field (a string or bytes) to publish as it is."""

    _KIND, _TARGET_KEY = "jetstream", "subject"
    subject = _sink_constructor("subject", "Publishes to ``subject``, each tuple as a JSON object of its fields.")


class Kafka(_BrokerSpout):
    """The host's built-in spout over a Kafka topic, each of its partitions a
    partition of the spout, read by the host from the brokers ``weir run
    --kafka`` names::

        Kafka.transactional("clicks").json(["user", "url"]).key_field("key")

    The value goes into one bytes field named ``value`` unless ``string``,
    ``bytes`` or ``json`` says otherwise."""

    _EXTRA = ("key_field", "partition_field", "offset_field", "timestamp_field", "headers_field")

    def __init__(self, promise, topic):
        super().__init__(promise, "value")
        self._topic = topic
        self._partitions = None

    @staticmethod
    def transactional(topic):
        """A replay reads exactly the offset range each partition had in the
        batch."""
        return Kafka("transactional", topic)

    @staticmethod
    def opaque(topic):
        """A replay reads afresh from each partition's next offset as of the
        last commit."""
        return Kafka("opaque", topic)

    def partitions(self, partitions):
        """Reads only these partitions (all of them when not called)."""
        self._partitions = [int(p) for p in partitions]
        return self

    key_field = _extra_field("key_field", "Also emits the record's key (bytes, or null) in ``field``.")
    partition_field = _extra_field("partition_field", "Also emits the record's partition in ``field``.")
    offset_field = _extra_field("offset_field", "Also emits the record's offset in ``field``.")
    timestamp_field = _extra_field("timestamp_field", "Also emits the record's timestamp (ms since the Unix epoch).")
    headers_field = _extra_field("headers_field", "Also emits the record's headers, a JSON object of strings.")

    def _define(self, topology):
        out = {"kind": "kafka", "promise": self._promise, "topic": self._topic}
        if self._partitions is not None:
            out["partitions"] = self._partitions
        return self._define_into(out, "value")


class KafkaSink(_BrokerSink):
    """A sink writing to a Kafka topic, for ``Stream.sink``: each tuple of
    every committed batch becomes one record of ``topic``, exactly once::

        KafkaSink.topic("page-counts")
        KafkaSink.topic("pages").raw("page")
    """

    _KIND, _TARGET_KEY = "kafka", "topic"
    topic = _sink_constructor("topic", "Writes to ``topic``, each tuple as a JSON object of its fields.")


def _spout_fields(spout):
    """The fields of a spout definition's tuples, as the host reads them."""
    kind = spout["kind"]
    if kind == "guest":
        return list(spout["fields"])
    if kind == "jetstream":
        return JetStream._fields_of(spout, "payload")
    if kind == "kafka":
        return Kafka._fields_of(spout, "value")
    return [spout["field"]]


class GuestSpout:
    """A spout of the guest's own: a BatchSpout or a PartitionedSpout,
    declared with the fields of its tuples."""

    def __init__(self, promise, spout, fields):
        self.promise = promise
        self.spout = spout
        self.fields = _names(fields)

    @staticmethod
    def batch(spout, fields):
        """A batch spout, the same batch for every attempt of a txid."""
        return GuestSpout("batch", spout, fields)

    @staticmethod
    def partitioned_transactional(spout, fields):
        """A transactional partitioned spout."""
        return GuestSpout("partitioned-transactional", spout, fields)

    @staticmethod
    def partitioned_opaque(spout, fields):
        """An opaque partitioned spout."""
        return GuestSpout("partitioned-opaque", spout, fields)

    def _define(self, topology):
        topology._spout = (self.promise, self.spout)
        return {"kind": "guest", "promise": self.promise, "fields": self.fields}


class Reducer:
    """Marks a reducer aggregator for the aggregation methods (optional: an
    object with ``init()`` and ``reduce(acc, tuple)`` is one already)."""

    def __init__(self, aggregator):
        self.aggregator = aggregator


class General:
    """Marks a general aggregator for the aggregation methods (optional: an
    object with ``init``, ``aggregate`` and ``complete`` is one already)."""

    def __init__(self, aggregator):
        self.aggregator = aggregator


def _aggregator_kind(aggregator):
    """("builtin", name), ("combiner" | "reducer" | "general", code)."""
    if isinstance(aggregator, Builtin):
        return "builtin", aggregator.name
    if isinstance(aggregator, Reducer):
        return "reducer", aggregator.aggregator
    if isinstance(aggregator, General):
        return "general", aggregator.aggregator
    if isinstance(aggregator, CombinerAggregator):
        return "combiner", aggregator
    if isinstance(aggregator, ReducerAggregator):
        return "reducer", aggregator
    if isinstance(aggregator, Aggregator):
        return "general", aggregator
    if all(hasattr(aggregator, m) for m in ("init", "combine", "zero")):
        return "combiner", aggregator
    if all(hasattr(aggregator, m) for m in ("init", "reduce")):
        return "reducer", aggregator
    if all(hasattr(aggregator, m) for m in ("init", "aggregate", "complete")):
        return "general", aggregator
    raise TypeError(
        f"{aggregator!r} is no aggregator: give a built-in (Count, Sum, ...) or an object with "
        "init/combine/zero, init/reduce or init/aggregate/complete"
    )


class _Adapted:
    """A map, flat-map or peek operator run as a function."""

    __slots__ = ("kind", "code")

    def __init__(self, kind, code):
        self.kind = kind
        self.code = code


class _Columns:
    """A function run over whole columns of a batch."""

    __slots__ = ("code",)

    def __init__(self, code):
        self.code = code


class Topology:
    """A topology: its definition and the operators it calls. Call
    ``new_stream`` (and ``new_query_stream``) on it to define its streams."""

    describes = True

    def __init__(self, name):
        self.name = name
        self.nodes = []
        self.sandbox = {}
        self._spout = None
        # operator id -> (kind, code); kind: function, filter, combiner,
        # reducer, general, updater, query.
        self._code = {}

    # -- the definition ----------------------------------------------------

    def definition(self):
        """The definition the host reads, as JSON-ready dicts."""
        out = {"name": self.name, "nodes": [dict(n) for n in self.nodes]}
        if self.sandbox:
            out["sandbox"] = {k: _sandbox_def(v) for k, v in sorted(self.sandbox.items())}
        return out

    def build(self):
        """Finishes the topology (it is the topology itself)."""
        return self

    def code(self, operator):
        """``(kind, code)`` registered under ``operator``, or None."""
        return self._code.get(operator)

    def node(self, operator):
        """The node whose id is ``operator``, or None."""
        for node in self.nodes:
            if node["id"] == operator:
                return node
        return None

    def output_arity(self, operator):
        """Number of output fields of the function, updater or query ``operator``."""
        node = self.node(operator)
        if node is None:
            return None
        op = node["op"]
        if op["op"] in ("each", "map", "flat-map", "state-query"):
            return len(op["output"])
        if op["op"] == "partition-persist":
            return len(op.get("output", []))
        if op["op"] == "peek":
            return 0
        return None

    def aggregator_arity(self, operator):
        """Number of output fields of the aggregator ``operator``."""
        for node in self.nodes:
            op = node["op"]
            if op["op"] == "aggregate":
                for aggregator in op["aggregators"]:
                    if aggregator["id"] == operator:
                        return len(aggregator["output"])
            elif op["op"] in ("persistent-aggregate", "window") and op["aggregator"]["id"] == operator:
                return len(op["aggregator"]["output"])
        return None

    def spout(self):
        """``(promise, code)`` of the guest spout, or None."""
        return self._spout

    def spout_fields(self):
        """The fields of the data spout's tuples."""
        for node in self.nodes:
            if node["op"]["op"] == "spout":
                return _spout_fields(node["op"]["spout"])
        return []

    # -- building ------------------------------------------------------------

    def _root(self, id, op):
        self.nodes.append({"id": id, "op": op})
        return Stream(self, len(self.nodes) - 1)

    def new_stream(self, spout):
        """A stream from ``spout`` (one data spout per topology)."""
        definition = spout._define(self)
        return self._root(SPOUT_ID, {"op": "spout", "spout": definition})

    def new_query_stream(self, name):
        """Trident's DRPC stream: each request to the query ``name`` enters
        as one tuple with its arguments in the field ``args``."""
        return self._root(f"query-{name}", {"op": "query-stream", "name": name})

    def _join_node(self, inputs, op, kind_name):
        stream = self._root("", op)
        node = self.nodes[stream.node]
        node["id"] = f"{kind_name}-{stream.node}"
        inputs = [s.node for s in inputs]
        if inputs:
            # Keep the key order the host's serializer writes.
            self.nodes[stream.node] = {"id": node["id"], "inputs": inputs, "op": op}
        return stream

    def merge(self, *streams):
        """The tuples of every stream, which must have the same fields."""
        return self._join_node(streams, {"op": "merge"}, "merge")

    def join(self, a, fields_a, b, fields_b, output, kinds=(INNER, INNER)):
        """Joins two streams within each batch on ``fields_a`` = ``fields_b``;
        output fields: the join fields, then a's other fields, then b's,
        named by ``output``. ``kinds``: INNER or OUTER for each side."""
        op = {
            "op": "join",
            "fields": [_names(fields_a), _names(fields_b)],
            "kinds": list(kinds),
            "output": _names(output),
        }
        return self._join_node([a, b], op, "join")

    def _rename(self, old, new):
        for table in (self.sandbox, self._code):
            if old in table:
                table[new] = table.pop(old)


def _sandbox_def(sandbox):
    out = {}
    for key in ("memory_mib", "call_ms", "output_mib", "output_tuples"):
        if sandbox.get(key) is not None:
            out[key] = sandbox[key]
    if sandbox.get("read_only_dirs"):
        out["read_only_dirs"] = list(sandbox["read_only_dirs"])
    return out


def _with_parallelism(node, parallelism):
    """``node`` with ``parallelism`` in the place the host's serializer
    writes it (left out when 1)."""
    out = {"id": node["id"]}
    if node.get("inputs"):
        out["inputs"] = node["inputs"]
    if parallelism != 1:
        out["parallelism"] = parallelism
    out["op"] = node["op"]
    return out


def _parallelism(node):
    return node.get("parallelism", 1)


class Stream:
    """A stream being defined: each method adds an operation after it and
    returns the stream that operation produces."""

    def __init__(self, topology, node):
        self.topology = topology
        self.node = node

    def _then(self, kind, make):
        t = self.topology
        index = len(t.nodes)
        id = f"{kind}-{index}"
        op = make(t, id)
        parallelism = 1 if op["op"] == "partition" else _parallelism(t.nodes[self.node])
        t.nodes.append(_with_parallelism({"id": id, "inputs": [self.node], "op": op}, parallelism))
        return Stream(t, index)

    def _register(self, kind, code):
        def make(t, id):
            t._code[id] = (kind, code)

        return make

    def each(self, input, function, output):
        """Trident's ``each``: ``function(tuple)`` returns (or yields) the
        tuples to append, each a tuple of the ``output`` fields' values or,
        for one field, the value."""

        def make(t, id):
            t._code[id] = ("function", function)
            return {"op": "each", "input": _names(input), "output": _names(output)}

        return self._then("each", make)

    def each_batch(self, input, function, output):
        """``each`` a batch partition at a time: ``function(*columns)``
        takes one list per ``input`` field (its value in every row, in
        order) and returns a list with one entry per row: what ``each``'s
        function returns for that row. The same operation as ``each`` to
        the host, without a call per tuple::

            def split_all(sentences):
                return [sentence.split() for sentence in sentences]
        """

        def make(t, id):
            t._code[id] = ("function", _Columns(function))
            return {"op": "each", "input": _names(input), "output": _names(output)}

        return self._then("each", make)

    def map(self, input, function, output):
        """Trident's ``map``: ``function(tuple)`` returns the one tuple of
        ``output`` that replaces it."""

        def make(t, id):
            t._code[id] = ("function", _Adapted("map", function))
            return {"op": "map", "input": _names(input), "output": _names(output)}

        return self._then("map", make)

    def flat_map(self, input, function, output):
        """Trident's ``flatMap``: the tuples of ``output`` that
        ``function(tuple)`` returns replace it."""

        def make(t, id):
            t._code[id] = ("function", _Adapted("flat-map", function))
            return {"op": "flat-map", "input": _names(input), "output": _names(output)}

        return self._then("flat-map", make)

    def peek(self, input, consumer):
        """Trident's ``peek``: ``consumer(tuple)`` sees each tuple, which
        passes on unchanged."""

        def make(t, id):
            t._code[id] = ("function", _Adapted("peek", consumer))
            return {"op": "peek", "input": _names(input)}

        return self._then("peek", make)

    def filter(self, input, filter):
        """Trident's ``filter``: keeps the tuples for which ``filter(tuple)``
        is true."""

        def make(t, id):
            t._code[id] = ("filter", filter)
            return {"op": "filter", "input": _names(input)}

        return self._then("filter", make)

    def sink(self, sink):
        """Ends this stream in ``sink``: every committed batch's tuples are
        published exactly once, written with the batch's state in one
        commit. The stream must be of the commit phase (a state's
        ``new_values_stream``, or after a ``state_query``). Returns the
        sink's stream, for ``name`` only: nothing follows a sink."""
        return self._then("sink", lambda t, id: {"op": "sink", "sink": sink._define()})

    def project(self, fields):
        """Trident's ``project``: keeps only ``fields``."""
        return self._then("project", lambda t, id: {"op": "project", "fields": _names(fields)})

    def _partition(self, by):
        return self._then("partition", lambda t, id: {"op": "partition", "by": by})

    def shuffle(self):
        """Tuples spread round-robin over the next stage's partitions."""
        return self._partition({"kind": "shuffle"})

    def partition_by(self, fields):
        """Equal values of ``fields`` meet in one partition."""
        return self._partition({"kind": "fields", "fields": _names(fields)})

    def global_(self):
        """Every tuple to one partition (Trident's ``global``)."""
        return self._partition({"kind": "global"})

    def batch_global(self):
        """Each batch's tuples to one partition."""
        return self._partition({"kind": "batch-global"})

    def broadcast(self):
        """Every tuple to every partition."""
        return self._partition({"kind": "broadcast"})

    def group_by(self, fields):
        """The aggregation or query that follows runs per group of ``fields``."""
        return GroupedStream(self, _names(fields))

    def _aggregate_node(self, scope, group, input, aggregator, output):
        kind_name = "partition-aggregate" if scope == "partition" else "aggregate"

        def make(t, id):
            kind = _register_aggregator(t, id, aggregator)
            op = {"op": "aggregate", "scope": scope}
            if group:
                op["group"] = group
            op["aggregators"] = [{"id": id, "kind": kind, "input": _names(input), "output": _names(output)}]
            return op

        return self._then(kind_name, make)

    def partition_aggregate(self, input, aggregator, output):
        """Aggregates each partition of a batch."""
        return self._aggregate_node("partition", [], input, aggregator, output)

    def aggregate(self, input, aggregator, output):
        """One result per batch, even an empty one."""
        return self._aggregate_node("batch", [], input, aggregator, output)

    def chained_agg(self):
        """Several aggregators over the same tuples, their outputs joined as
        a cross product; end with ``chain_end()``."""
        return ChainedAggregate(self, [])

    def _persist(self, state, group, input, aggregator, output):
        def make(t, id):
            kind = _register_aggregator(t, id, aggregator)
            op = {"op": "persistent-aggregate", "state": state._def()}
            if group:
                op["group"] = group
            op["aggregator"] = {"id": id, "kind": kind, "input": _names(input), "output": _names(output)}
            return op

        return TridentState(self._then("persistent-aggregate", make), state.name)

    def persistent_aggregate(self, state, aggregator, output, input=()):
        """Each batch's value is combined into ``state``, a single value,
        exactly once; ``input``: the fields the aggregator reads."""
        return self._persist(state, [], input, aggregator, output)

    def persistent_aggregate_over(self, state, input, aggregator, output):
        """``persistent_aggregate`` whose aggregator reads ``input``."""
        return self._persist(state, [], input, aggregator, output)

    def _window(self, window, state, group, input, aggregator, output):
        def make(t, id):
            kind = _register_aggregator(t, id, aggregator)
            op = {"op": "window", "window": window._def(), "state": {"name": state, "kind": "opaque"}}
            if group:
                op["group"] = group
            op["aggregator"] = {"id": id, "kind": kind, "input": _names(input), "output": _names(output)}
            return op

        return self._then("window", make)

    def window(self, window, state, input, aggregator, output):
        """Trident's ``tumblingWindow`` and ``slidingWindow``, and event-time
        windows: aggregates each ``window`` of the stream (a combiner,
        reducer or built-in over ``input``), keeping the open windows in the
        opaque state named ``state``, exactly once. Each window's result is
        emitted once, when it closes: ``window_start``, ``window_end``, then
        ``output``."""
        return self._window(window, state, [], input, aggregator, output)

    def late_stream(self):
        """On a window's stream: the tuples the window found late (every
        window they fall into had closed), as they came, with the fields of
        the window's input. A late tuple is dropped from the windows either
        way."""
        t = self.topology
        index = len(t.nodes)
        window = t.nodes[self.node]
        inputs = [(window.get("inputs") or [self.node])[0], self.node]
        node = {"id": f"late-tuples-{index}", "inputs": inputs, "op": {"op": "late-tuples"}}
        t.nodes.append(_with_parallelism(node, _parallelism(window)))
        return Stream(t, index)

    def partition_persist(self, state, input, updater, output=()):
        """``updater.update_state(state, tuples)`` writes each batch
        partition's ``input`` tuples into ``state`` in the commit phase; what
        it returns (tuples of ``output``) forms the new-values stream."""

        def make(t, id):
            t._code[id] = ("updater", updater)
            op = {"op": "partition-persist", "state": state._def(), "input": _names(input)}
            if _names(output):
                op["output"] = _names(output)
            return op

        return TridentState(self._then("partition-persist", make), state.name)

    def state_query(self, state, input, query, output):
        """Looks each tuple's ``input`` up in ``state`` with ``query`` (MapGet
        or a QueryFunction), appending ``output``."""

        def make(t, id):
            if isinstance(query, _MapGet):
                kind = "map-get"
            else:
                t._code[id] = ("query", query)
                kind = "guest"
            return {
                "op": "state-query",
                "state": state.state_name,
                "input": _names(input),
                "query": kind,
                "output": _names(output),
            }

        return self._then("state-query", make)

    def _extreme(self, by, max):
        def make(t, id):
            op = {"op": "extreme"}
            if by:
                op["by"] = by
            op["max"] = max
            return op

        return self._then("max" if max else "min", make)

    def min_by(self, field):
        """The batch's tuple with the least ``field``."""
        return self._extreme([field], False)

    def max_by(self, field):
        """The batch's tuple with the greatest ``field``."""
        return self._extreme([field], True)

    def min(self):
        """The batch's least tuple, comparing fields in order."""
        return self._extreme([], False)

    def max(self):
        """The batch's greatest tuple, comparing fields in order."""
        return self._extreme([], True)

    def parallelism_hint(self, n):
        """``n`` instances run each operation of this stage (back to the last
        repartitioning) at once, each over its own partition of the batch."""
        nodes = self.topology.nodes
        index = self.node
        while True:
            node = _with_parallelism(nodes[index], max(n, 1))
            nodes[index] = node
            inputs = node.get("inputs", [])
            if node["op"]["op"] == "partition" or len(inputs) != 1:
                break
            index = inputs[0]
        return self

    def _sandbox(self):
        t = self.topology
        return t.sandbox.setdefault(t.nodes[self.node]["id"], {})

    def limits(self, limits):
        """Sets this operator's limits (each capped by the host's); on a
        guest spout's stream, the spout's."""
        limits._apply(self._sandbox())
        return self

    def read_only_dir(self, host, guest):
        """Mounts host directory ``host`` read-only at ``guest`` in this
        operator's sandbox, where the host's configuration allows it."""
        self._sandbox().setdefault("read_only_dirs", []).append({"host": host, "guest": guest})
        return self

    def name(self, label):
        """Gives this stream's operation the id ``label``, used in logs,
        errors and metrics."""
        t = self.topology
        node = t.nodes[self.node]
        old = node["id"]
        node["id"] = label
        renamed = [(old, label)]
        op = node["op"]
        if op["op"] == "aggregate":
            for k, aggregator in enumerate(op["aggregators"]):
                new = label if k == 0 else f"{label}.{k}"
                renamed.append((aggregator["id"], new))
                aggregator["id"] = new
        if op["op"] in ("persistent-aggregate", "window"):
            op["aggregator"]["id"] = label
        deduped = []
        for pair in renamed:
            if not deduped or deduped[-1] != pair:
                deduped.append(pair)
        for old, new in deduped:
            t._rename(old, new)
        return self

    def build(self):
        """Finishes the topology."""
        return self.topology


def _register_aggregator(topology, id, aggregator):
    kind, code = _aggregator_kind(aggregator)
    if kind == "builtin":
        return {"kind": "builtin", "name": code}
    topology._code[id] = (kind, code)
    return {"kind": kind}


class GroupedStream:
    """A stream grouped by fields, for the aggregation or query that follows."""

    def __init__(self, stream, group):
        self.stream = stream
        self.group = group

    def _partitioned(self):
        return self.stream._partition({"kind": "fields", "fields": list(self.group)})

    def aggregate(self, input, aggregator, output):
        """Aggregates each group of the batch; output: the group fields,
        then ``output``."""
        return self.stream._aggregate_node("batch", list(self.group), input, aggregator, output)

    def partition_aggregate(self, input, aggregator, output):
        """Aggregates each group within each partition (the stream is
        partitioned by the group fields first)."""
        return self._partitioned()._aggregate_node("partition", list(self.group), input, aggregator, output)

    def chained_agg(self):
        """Chained aggregators per group."""
        return ChainedAggregate(self.stream, list(self.group))

    def persistent_aggregate(self, state, aggregator, output, input=()):
        """Each batch's value per group is combined into ``state``, a map
        keyed by the group fields, exactly once."""
        return self.stream._persist(state, list(self.group), input, aggregator, output)

    def persistent_aggregate_over(self, state, input, aggregator, output):
        """Grouped ``persistent_aggregate`` whose aggregator reads ``input``."""
        return self.stream._persist(state, list(self.group), input, aggregator, output)

    def window(self, window, state, input, aggregator, output):
        """``Stream.window`` per group: each group's windows, output after
        the group fields."""
        return self.stream._window(window, state, list(self.group), input, aggregator, output)

    def state_query(self, state, input, query, output):
        """``state_query`` after partitioning by the group fields."""
        return self._partitioned().state_query(state, input, query, output)


class ChainedAggregate:
    """Aggregators chained over the same tuples (Trident's ``chainedAgg``)."""

    def __init__(self, stream, group):
        self.stream = stream
        self.group = group
        self.scope = None
        self.parts = []

    def _part(self, scope, input, aggregator, output):
        if self.scope is not None and self.scope != scope:
            raise ValueError("a chained aggregate's aggregators are all partition_aggregate or all aggregate")
        self.scope = scope
        self.parts.append((_names(input), aggregator, _names(output)))
        return self

    def partition_aggregate(self, input, aggregator, output):
        """Adds an aggregator over each partition."""
        return self._part("partition", input, aggregator, output)

    def aggregate(self, input, aggregator, output):
        """Adds an aggregator over the whole batch."""
        return self._part("batch", input, aggregator, output)

    def chain_end(self):
        """The stream of the group fields, then every aggregator's outputs."""
        scope = self.scope or "batch"

        def make(t, id):
            aggregators = []
            for k, (input, aggregator, output) in enumerate(self.parts):
                part_id = id if k == 0 else f"{id}.{k}"
                kind = _register_aggregator(t, part_id, aggregator)
                aggregators.append({"id": part_id, "kind": kind, "input": input, "output": output})
            op = {"op": "aggregate", "scope": scope}
            if self.group:
                op["group"] = self.group
            op["aggregators"] = aggregators
            return op

        return self.stream._then("chained-aggregate", make)


class TridentState:
    """A state a stream persists into: queried with ``state_query``, and the
    source of the new-values stream."""

    def __init__(self, stream, name):
        self.stream = stream
        self.state_name = name

    def new_values_stream(self):
        """The stream of what each batch changed."""
        return Stream(self.stream.topology, self.stream.node)

    def name(self, label):
        """Gives the operation that persists into this state the id ``label``."""
        self.stream.name(label)
        return self

    def parallelism_hint(self, n):
        """See ``Stream.parallelism_hint``."""
        self.stream.parallelism_hint(n)
        return self

    def build(self):
        """Finishes the topology."""
        return self.stream.topology


class Operators:
    """Operators of a topology that another component defines, for a bundle
    of several guests (in several languages): each registered under its
    operator id, with the output fields the topology gives it. A component
    of these describes no topology; the bundle's ``weir-bundle.json`` says
    which operators it runs::

        def topology():
            return Operators("polyglot").function("split", split, ["word"])
    """

    describes = False

    def __init__(self, topology):
        self.name = topology
        self._code = {}
        self._arity = {}
        self._spout = None
        self._spout_fields = []

    def _add(self, id, kind, code, arity=None):
        self._code[id] = (kind, code)
        self._arity[id] = arity
        return self

    def function(self, id, function, output):
        """A function (``each``): ``function(tuple)`` returns the tuples to append."""
        return self._add(id, "function", function, len(_names(output)))

    def function_batch(self, id, function, output):
        """A function (``each``) over whole columns, as ``Stream.each_batch`` takes it."""
        return self._add(id, "function", _Columns(function), len(_names(output)))

    def map(self, id, function, output):
        """A ``map``: ``function(tuple)`` returns the tuple that replaces it."""
        return self._add(id, "function", _Adapted("map", function), len(_names(output)))

    def flat_map(self, id, function, output):
        """A ``flat_map``: ``function(tuple)`` returns the tuples that replace it."""
        return self._add(id, "function", _Adapted("flat-map", function), len(_names(output)))

    def peek(self, id, consumer):
        """A ``peek``: ``consumer(tuple)`` sees each tuple."""
        return self._add(id, "function", _Adapted("peek", consumer), 0)

    def filter(self, id, filter):
        """A filter: keeps the tuples for which ``filter(tuple)`` is true."""
        return self._add(id, "filter", filter)

    def aggregator(self, id, aggregator, output=("value",)):
        """An aggregator of any kind (combiner, reducer or general, as the
        aggregation methods take them); ``output``: a general aggregator's
        output fields."""
        kind, code = _aggregator_kind(aggregator)
        if kind == "builtin":
            raise TypeError("built-in aggregators run in the host: the topology's definition names them")
        return self._add(id, kind, code, len(_names(output)))

    def state_updater(self, id, updater, output=()):
        """A state updater (``partition_persist``) emitting tuples of ``output``."""
        return self._add(id, "updater", updater, len(_names(output)))

    def query(self, id, query, output):
        """A query function (``state_query``) appending ``output``."""
        return self._add(id, "query", query, len(_names(output)))

    def guest_spout(self, spout):
        """The topology's guest spout (a GuestSpout), which this component runs."""
        self._spout = (spout.promise, spout.spout)
        self._spout_fields = list(spout.fields)
        return self

    def spout(self):
        return self._spout

    def spout_fields(self):
        return list(self._spout_fields)

    def code(self, operator):
        return self._code.get(operator)

    def output_arity(self, operator):
        return self._arity.get(operator)

    def aggregator_arity(self, operator):
        return self._arity.get(operator)

    def definition(self):
        return None

    def build(self):
        return self


def describe(topologies):
    """The JSON a component returns from ``describe``: every topology's
    definition, written as the Rust SDK writes it."""
    defined = [t.definition() for t in topologies if t.describes]
    return json.dumps(defined, separators=(",", ":"), ensure_ascii=False)

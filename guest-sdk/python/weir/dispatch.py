"""Runs a component's operators over packed batches: the logic behind each
export of the WIT world, in plain Python so that it is tested without a
component. The semantics are the Rust SDK's (guest-sdk/src/dispatch.rs)."""

from itertools import chain, repeat

from .codec import BatchWriter, DecodeError, EncodeError, decode
from .operators import Fatal, Tuple
from .topology import _Adapted, _Columns

__all__ = [
    "run_function",
    "run_filter",
    "combine_groups",
    "reduce_groups",
    "aggregate_groups",
    "update_state",
    "batch_retrieve",
    "execute_query",
    "combine_pairs",
    "emit_batch",
    "spout_partitions",
    "emit_partition",
    "reemit_partition",
    "MapState",
]


def _topology(topologies, name):
    for topology in topologies:
        if topology.name == name:
            return topology
    raise Fatal(f"this component defines no topology {_quote(name)}")


def _quote(s):
    # As Rust's {:?} writes a plain string.
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _missing(kind, info):
    return Fatal(f"topology {info.topology} has no {kind} {_quote(info.operator)}")


def _code(topologies, info, kinds, name):
    topology = _topology(topologies, info.topology)
    found = topology.code(info.operator)
    if found is None or found[0] not in kinds:
        raise _missing(name, info)
    return topology, found[1]


def _decode(buf, info, what="input"):
    try:
        return decode(buf)
    except DecodeError as e:
        raise Fatal(f"operator {info.operator}: {what} {e}") from None


def _decode_input(buf, info):
    arity, rows = _decode(buf, info)
    if arity != len(info.fields):
        raise Fatal(f"operator {info.operator}: input rows hold {arity} values for {len(info.fields)} fields")
    return rows


def _values(item):
    """An emitted item as the values of a tuple: a tuple or list is one
    value per field, anything else the value of the only field."""
    if isinstance(item, (tuple, list)):
        return item
    if isinstance(item, Tuple):
        return item.values
    return (item,)


def _push(out, tag, values, who="emitted"):
    try:
        out.push(tag, values)
    except EncodeError as e:
        raise Fatal(f"{who} {e}") from None


def _emit_all(out, tag, produced):
    if produced is None:
        return
    if isinstance(produced, (str, bytes)):
        raise Fatal(f"an operator returned a {type(produced).__name__} where an iterable of tuples was expected")
    for item in produced:
        _push(out, tag, _values(item))


def _emitter(out, tag):
    def emit(*values):
        _push(out, tag, values)

    return emit


class _Emitted:
    """What an operator emitted for each input row, kept as it came and
    written into the output batch at once: a one-field output of plain
    values is then encoded a column at a time."""

    __slots__ = ("items", "counts")

    def __init__(self):
        self.items = []
        self.counts = []

    def add(self, produced):
        """The iterable of tuples (or None) that the next input row produced."""
        if produced is None:
            self.counts.append(0)
            return
        if isinstance(produced, (str, bytes)):
            raise Fatal(f"an operator returned a {type(produced).__name__} where an iterable of tuples was expected")
        items = self.items
        before = len(items)
        items += produced
        self.counts.append(len(items) - before)

    def add_all(self, produced):
        """What each input row produced, in order: lists taken whole."""
        if set(map(type, produced)) <= {list}:
            self.items += chain.from_iterable(produced)
            self.counts += map(len, produced)
            return
        add = self.add
        for one in produced:
            add(one)

    def write(self, out, who="emitted"):
        """Writes the items into ``out``, each tagged with the row that produced it."""
        items = self.items
        if out.arity == 1 and out.push_strings(self.counts, items):
            return
        tags = list(chain.from_iterable(map(repeat, range(len(self.counts)), self.counts)))
        if out.arity == 1 and not any(issubclass(kind, _ROWS) for kind in set(map(type, items))):
            try:
                out.push_columns(tags, [items])
                return
            except EncodeError:
                pass  # pushed row by row below, which names the item at fault
        for tag, item in zip(tags, items):
            _push(out, tag, _values(item), who)


# What an emitted item that holds a tuple's values is, rather than the
# value of its one field.
_ROWS = (tuple, list, Tuple)


def run_function(topologies, info, input):
    """Runs the function ``info.operator`` over every input row; output rows
    are tagged with the index of the row they extend."""
    topology, function = _code(topologies, info, ("function",), "function")
    out = BatchWriter(topology.output_arity(info.operator))
    emitted = _Emitted()
    if isinstance(function, _Columns):
        rows = _decode_input(input, info)
        produced = function.code(*_columns(rows, len(info.fields)))
        if isinstance(produced, (tuple, range)) or hasattr(produced, "__next__"):
            produced = list(produced)
        if not isinstance(produced, list) or len(produced) != len(rows):
            raise Fatal(
                f"operator {info.operator}: a batch function returns a list of what each of the {len(rows)} "
                f"input rows emits; it returned {_shape(produced)}"
            )
        emitted.add_all(produced)
    elif isinstance(function, _Adapted):
        kind, call = function.kind, function.code
        rows = _decode_input(input, info)
        if kind == "map":
            emitted.add_all([[call(Tuple(values, info))] for _, values in rows])
        elif kind == "flat-map":
            emitted.add_all([call(Tuple(values, info)) for _, values in rows])
        else:
            for _, values in rows:
                call(Tuple(values, info))
    else:
        rows = _decode_input(input, info)
        emitted.add_all([function(Tuple(values, info)) for _, values in rows])
    emitted.write(out)
    return out.finish()


def _columns(rows, arity):
    """The rows' values as one list per field."""
    if not rows:
        return [[] for _ in range(arity)]
    return [list(column) for column in zip(*(values for _, values in rows))]


def _shape(result):
    if isinstance(result, list):
        return f"{len(result)} entries"
    return f"a {type(result).__name__}"


def run_filter(topologies, info, input):
    """Runs the filter ``info.operator``: one byte per input row, 1 to keep it."""
    _, keep = _code(topologies, info, ("filter",), "filter")
    rows = _decode_input(input, info)
    return bytes(1 if keep(Tuple(values, info)) else 0 for _, values in rows)


def _group_slot(info, groups, tag):
    if tag >= groups:
        raise Fatal(f"operator {info.operator}: row tagged with group {tag} of {groups}")
    return tag


_UNSET = object()


def combine_groups(topologies, info, groups, input):
    """Folds each group's rows: ``combine(zero, init(row))`` for each row of
    the group, in order; one row per group, tagged with it."""
    _, aggregator = _code(topologies, info, ("combiner",), "combiner aggregator")
    rows = _decode_input(input, info)
    partials = [_UNSET] * groups
    for tag, values in rows:
        slot = _group_slot(info, groups, tag)
        acc = partials[slot]
        if acc is _UNSET:
            acc = aggregator.zero()
        partials[slot] = aggregator.combine(acc, aggregator.init(Tuple(values, info)))
    out = BatchWriter(1)
    for group, partial in enumerate(partials):
        _push(out, group, (aggregator.zero() if partial is _UNSET else partial,), "aggregator returned")
    return out.finish()


def reduce_groups(topologies, info, groups, start, input):
    """Folds each group's rows with the reducer, from the group's row in
    ``start`` or from ``init()``; one row per group."""
    _, reducer = _code(topologies, info, ("reducer",), "reducer aggregator")
    values = [_UNSET] * groups
    _, start_rows = _decode(start, info, "start")
    for tag, row in start_rows:
        values[_group_slot(info, groups, tag)] = row[0] if row else None
    for tag, row in _decode_input(input, info):
        slot = _group_slot(info, groups, tag)
        acc = values[slot]
        if acc is _UNSET:
            acc = reducer.init()
        values[slot] = reducer.reduce(acc, Tuple(row, info))
    out = BatchWriter(1)
    for group, value in enumerate(values):
        _push(out, group, (reducer.init() if value is _UNSET else value,), "aggregator returned")
    return out.finish()


def aggregate_groups(topologies, info, groups, input):
    """Runs the general aggregator over each group; emitted rows are tagged
    with their group."""
    topology, aggregator = _code(topologies, info, ("general",), "aggregator")
    arity = topology.aggregator_arity(info.operator)
    rows = _decode_input(input, info)
    out = BatchWriter(arity)
    states = [aggregator.init(info, _emitter(out, group)) for group in range(groups)]
    for tag, values in rows:
        slot = _group_slot(info, groups, tag)
        state = aggregator.aggregate(states[slot], Tuple(values, info), _emitter(out, slot))
        if state is not None:
            states[slot] = state
    for group, state in enumerate(states):
        aggregator.complete(state, _emitter(out, group))
    return out.finish()


class MapState:
    """A state the host keeps, as a state updater or query function sees it
    during a call. Keys are sequences of values; each key holds one value."""

    def __init__(self, multi_get, multi_put):
        self._get = multi_get
        self._put = multi_put

    def multi_get(self, keys):
        """The values of ``keys``, in order; None where a key has none."""
        keys = [_values(k) for k in keys]
        arity = len(keys[0]) if keys else 0
        out = BatchWriter(arity)
        for key in keys:
            _push(out, 0, key, "state key:")
        answer = self._get(out.finish())
        try:
            arity, rows = decode(answer)
        except DecodeError as e:
            raise Fatal(f"state values: {e}") from None
        if len(rows) != len(keys) or arity != 1:
            raise Fatal(f"state returned {len(rows)} values for {len(keys)} keys")
        return [row[0] for _, row in rows]

    def multi_put(self, entries):
        """Writes ``(key, value)`` entries; they commit with the batch,
        exactly once."""
        entries = [(_values(k), v) for k, v in entries]
        arity = len(entries[0][0]) + 1 if entries else 1
        out = BatchWriter(arity)
        for key, value in entries:
            _push(out, 0, list(key) + [value], "state entry:")
        self._put(out.finish())

    def get(self, key):
        """The value of one key, or None."""
        return self.multi_get([key])[0]

    def put(self, key, value):
        """Writes one key's value."""
        self.multi_put([(key, value)])


def update_state(topologies, info, state, input):
    """Runs the state updater over the batch partition."""
    topology, updater = _code(topologies, info, ("updater",), "state updater")
    arity = topology.output_arity(info.operator)
    tuples = [Tuple(values, info) for _, values in _decode_input(input, info)]
    out = BatchWriter(arity)
    _emit_all(out, 0, updater.update_state(state, tuples))
    return out.finish()


def batch_retrieve(topologies, info, state, input):
    """The first half of a query function: one result row per input row."""
    _, query = _code(topologies, info, ("query",), "query function")
    tuples = [Tuple(values, info) for _, values in _decode_input(input, info)]
    results = list(query.batch_retrieve(state, tuples))
    if len(results) != len(tuples):
        raise Fatal(
            f"operator {info.operator}: batch_retrieve returned {len(results)} results for {len(tuples)} tuples"
        )
    out = BatchWriter(1)
    for index, result in enumerate(results):
        _push(out, index, (result,), "query returned")
    return out.finish()


def execute_query(topologies, info, input, results):
    """The second half of a query function: emits per input row given its
    result; output rows are tagged with the row they extend."""
    topology, query = _code(topologies, info, ("query",), "query function")
    arity = topology.output_arity(info.operator)
    rows = _decode_input(input, info)
    result_arity, result_rows = _decode(results, info, "results")
    if len(result_rows) != len(rows) or result_arity != 1:
        raise Fatal(f"operator {info.operator}: {len(result_rows)} results for {len(rows)} tuples")
    out = BatchWriter(arity)
    for index, ((_, values), (_, result)) in enumerate(zip(rows, result_rows)):
        _emit_all(out, index, query.execute(Tuple(values, info), result[0]))
    return out.finish()


def combine_pairs(topologies, info, input):
    """Combines each input row's stored value with its partial."""
    _, aggregator = _code(topologies, info, ("combiner",), "combiner aggregator")
    arity, rows = _decode(input, info)
    if arity != 2:
        raise Fatal(f"operator {info.operator}: pairs must hold 2 values")
    out = BatchWriter(1)
    for tag, (stored, partial) in rows:
        _push(out, tag, (aggregator.combine(stored, partial),), "aggregator returned")
    return out.finish()


def _spout(topologies, info, promises):
    topology = _topology(topologies, info.topology)
    spout = topology.spout()
    if spout is None or spout[0] not in promises:
        kind = "batch" if promises == ("batch",) else "partitioned"
        raise Fatal(f"the topology has no {kind} spout")
    return spout[1], len(topology.spout_fields())


def _spout_batch(arity, tuples):
    out = BatchWriter(arity)
    if isinstance(tuples, (str, bytes)):
        raise Fatal("a spout returned a string where an iterable of tuples was expected")
    for item in tuples:
        _push(out, 0, _values(item), "spout emitted")
    return out.finish()


def emit_batch(topologies, info):
    """Batch ``info.txid`` of the batch spout, or None when it has nothing more."""
    spout, arity = _spout(topologies, info, ("batch",))
    tuples = spout.emit_batch(info)
    if tuples is None:
        return None
    return _spout_batch(arity, tuples)


_PARTITIONED = ("partitioned-transactional", "partitioned-opaque")


def spout_partitions(topologies, info):
    """The partitions of the partitioned spout."""
    spout, _ = _spout(topologies, info, _PARTITIONED)
    return [str(p) for p in spout.partitions(info)]


def emit_partition(topologies, info, partition, previous):
    """``(tuples, meta)`` of the next batch of ``partition``, or None."""
    spout, arity = _spout(topologies, info, _PARTITIONED)
    emitted = spout.emit_partition(info, partition, previous)
    if emitted is None:
        return None
    tuples, meta = emitted
    return _spout_batch(arity, tuples), bytes(meta)


def reemit_partition(topologies, info, partition, meta):
    """The batch of ``partition`` that ``meta`` describes, again."""
    spout, arity = _spout(topologies, info, _PARTITIONED)
    return _spout_batch(arity, spout.reemit_partition(info, partition, meta))

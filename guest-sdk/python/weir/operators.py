"""The operator kinds a Python guest implements, the tuples they read and
the errors they raise.

Functions, filters, map, flat-map and peek operators are plain callables
taking a :class:`Tuple`. Aggregators, state updaters, query functions and
spouts are objects with Trident's methods; subclassing the classes here is
optional (they only document the methods and give defaults)."""

import os
import traceback
from dataclasses import dataclass, field

from .codec import type_name

__all__ = [
    "WeirError",
    "Retry",
    "Fatal",
    "failure_message",
    "BatchInfo",
    "SpoutInfo",
    "Tuple",
    "CombinerAggregator",
    "ReducerAggregator",
    "Aggregator",
    "StateUpdater",
    "QueryFunction",
    "BatchSpout",
    "PartitionedSpout",
    "Builtin",
    "Count",
    "Sum",
    "Min",
    "Max",
    "First",
    "MapGet",
]


class WeirError(Exception):
    """Why an operator failed on a batch."""

    kind = "retry"

    def __init__(self, message):
        super().__init__(message)
        self.message = message

    def __str__(self):
        return f"{self.kind}: {self.message}"


class Retry(WeirError):
    """The batch fails and is replayed with the same txid and the next attempt."""

    kind = "retry"


class Fatal(WeirError):
    """The topology halts with this message."""

    kind = "fatal"


# The SDK's own files: their frames are left out of a guest's traceback.
_SDK_PACKAGE = os.path.dirname(os.path.abspath(__file__))
_SDK_FILES = (os.path.join(_SDK_PACKAGE, ""), os.path.join(os.path.dirname(_SDK_PACKAGE), "weir_component.py"))

# Bounds on what one failure says: a deep recursion's frames are many.
_MAX_FRAMES = 12
_MAX_LINE = 240


def _clip(text):
    return text if len(text) <= _MAX_LINE else text[: _MAX_LINE - 3] + "..."


def failure_message(error, root=None):
    """What an exception an operator did not mean to raise says in the
    batch's error: its type and message, then where it was raised, as
    Python prints a traceback (innermost call last), with the SDK's frames
    left out and paths under ``root`` given relative to it."""
    try:
        said = str(error)
    except Exception:
        said = "(its message cannot be printed)"
    lines = [_clip(f"{type(error).__name__}: {said}" if said else type(error).__name__)]
    frames = [f for f in traceback.extract_tb(error.__traceback__) if not f.filename.startswith(_SDK_FILES)]
    if frames:
        lines.append("Traceback (most recent call last):")
        if len(frames) > _MAX_FRAMES:
            lines.append(f"  ... {len(frames) - _MAX_FRAMES} calls before these left out")
            frames = frames[-_MAX_FRAMES:]
        for frame in frames:
            path = frame.filename
            if root and path.startswith(os.path.join(root, "")):
                path = os.path.relpath(path, root)
            lines.append(_clip(f'  File "{path}", line {frame.lineno}, in {frame.name}'))
            source = (frame.line or "").strip()
            if source:
                lines.append(_clip(f"    {source}"))
    return "\n".join(lines)


@dataclass
class BatchInfo:
    """The batch an operator call belongs to."""

    topology: str = ""
    operator: str = ""
    txid: int = 0
    attempt: int = 0
    partition: int = 0
    fields: list = field(default_factory=list)


@dataclass
class SpoutInfo:
    """The batch a spout call emits."""

    topology: str = ""
    txid: int = 0
    attempt: int = 0
    max_tuples: int = 0


def _accessor(kind, wanted, doc):
    """A typed accessor of :class:`Tuple`: the field's value, which must be
    of type ``kind`` (named ``wanted`` in the error)."""

    def accessor(self, name):
        value = self[name]
        return value if type(value) is kind else self._typed(name, value, kind, wanted)

    accessor.__doc__ = doc
    accessor.__name__ = kind.__name__
    accessor.__qualname__ = f"Tuple.{kind.__name__}"
    return accessor


class Tuple:
    """One input tuple: the fields the operator declared, by name or position.

    ``t["word"]`` and ``t[0]`` give a field's value; ``t.str("word")`` and
    ``t.int("count")`` check its type as well."""

    __slots__ = ("values", "batch")

    def __init__(self, values, batch):
        self.values = values
        self.batch = batch

    @property
    def fields(self):
        """Names of the tuple's fields, in order."""
        return self.batch.fields

    def _position(self, name):
        if isinstance(name, int) and not isinstance(name, bool):
            if 0 <= name < len(self.values):
                return name
        else:
            try:
                return self.batch.fields.index(name)
            except ValueError:
                pass
        raise Fatal(f"operator {self.batch.operator} has no input field {name} (it has {self.batch.fields})")

    def __getitem__(self, name):
        values = self.values
        if type(name) is int and 0 <= name < len(values):
            return values[name]
        return values[self._position(name)]

    def __len__(self):
        return len(self.values)

    def __iter__(self):
        return iter(self.values)

    def __repr__(self):
        return f"Tuple({dict(zip(self.batch.fields, self.values))!r})"

    def _typed(self, name, value, types, wanted):
        if not isinstance(value, types) or (wanted != "bool" and isinstance(value, bool)):
            raise Fatal(f"operator {self.batch.operator}: field {name} is {type_name(value)}, not {wanted}")
        return value

    # Each accessor returns at once a value of exactly its type: the check
    # that names a wrong one runs only when it is not.
    str = _accessor(str, "string", "A string field.")
    int = _accessor(int, "i64", "An integer field.")
    float = _accessor(float, "f64", "A float field.")
    bool = _accessor(bool, "bool", "A boolean field.")
    bytes = _accessor(bytes, "bytes", "A bytes field.")


class CombinerAggregator:
    """Trident's CombinerAggregator: ``init`` turns each tuple into a value,
    ``combine`` merges two values, ``zero`` is the value of no tuples. A
    stored state is updated as ``combine(stored, partial)``."""

    def init(self, tuple):
        raise NotImplementedError

    def combine(self, a, b):
        raise NotImplementedError

    def zero(self):
        raise NotImplementedError


class ReducerAggregator:
    """Trident's ReducerAggregator: a group's value is
    ``reduce(... reduce(start, t1) ..., tn)``, ``start`` being ``init()`` or,
    in a persistent aggregate, the stored value."""

    def init(self):
        raise NotImplementedError

    def reduce(self, acc, tuple):
        raise NotImplementedError


class Aggregator:
    """Trident's general Aggregator: per group ``init(batch, emit)`` makes a
    state, each tuple goes through ``aggregate(state, tuple, emit)`` (which
    returns the new state, or None to keep it), and ``complete(state, emit)``
    ends the group. ``emit(*values)`` emits a tuple of the output fields."""

    def init(self, batch, emit):
        raise NotImplementedError

    def aggregate(self, state, tuple, emit):
        raise NotImplementedError

    def complete(self, state, emit):
        raise NotImplementedError


class StateUpdater:
    """Trident's StateUpdater (``partition_persist``): writes a batch
    partition's tuples into ``state`` in the commit phase, in txid order.
    What it returns (an iterable of output tuples) forms the new-values
    stream."""

    def update_state(self, state, tuples):
        raise NotImplementedError


class QueryFunction:
    """Trident's QueryFunction (``state_query``): reads the state once for
    the whole batch partition, then emits per tuple."""

    def batch_retrieve(self, state, tuples):
        """One result per tuple, in order."""
        raise NotImplementedError

    def execute(self, tuple, result):
        """The output tuples of ``tuple`` given its result (an iterable)."""
        raise NotImplementedError


class BatchSpout:
    """Trident's IBatchSpout: returns the tuples of batch ``info.txid`` (an
    iterable), the same on every attempt, or None when the source has
    nothing more."""

    def emit_batch(self, info):
        raise NotImplementedError


class PartitionedSpout:
    """Trident's partitioned spouts: a source split into partitions, each
    read from metadata (bytes) that the host keeps."""

    def partitions(self, info):
        """The source's partitions (a list of strings)."""
        raise NotImplementedError

    def emit_partition(self, info, partition, previous):
        """``(tuples, meta)`` for the batch of ``partition`` after the one
        ``previous`` describes (None: the partition's first), or None when
        the partition has nothing new."""
        raise NotImplementedError

    def reemit_partition(self, info, partition, meta):
        """Exactly the tuples ``meta`` describes, again."""
        raise Fatal("this spout is opaque: it cannot re-emit a batch")


class Builtin:
    """An aggregation the host runs itself, without a call into the guest."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"weir.{self.name.capitalize()}"


Count = Builtin("count")
"""Number of tuples."""
Sum = Builtin("sum")
"""Sum of the single input field (integers stay integers)."""
Min = Builtin("min")
"""Least value of the single input field."""
Max = Builtin("max")
"""Greatest value of the single input field."""
First = Builtin("first")
"""The single input field of the first tuple."""


class _MapGet:
    def __repr__(self):
        return "weir.MapGet"


MapGet = _MapGet()
"""Trident's MapGet: the stored value of the key made of the input fields,
looked up by the host."""

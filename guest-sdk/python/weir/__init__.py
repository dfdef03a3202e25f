"""Weir's Python guest SDK: write a topology and its operators in Python,
and ``weir run`` builds the directory into a component with componentize-py.

A guest is a directory holding ``app.py``, whose ``topology()`` returns the
topology (or a list of them)::

    from weir import Count, FileLines, State, Topology

    def split(t):
        return t.str("sentence").split()

    def topology():
        return (
            Topology("word-count")
            .new_stream(FileLines("sentence"))
            .each(["sentence"], split, ["word"])
            .name("split")
            .group_by(["word"])
            .persistent_aggregate(State.transactional("counts"), Count, ["count"])
            .name("count")
            .build()
        )

Values are ``None``, ``bool``, ``int`` (64-bit), ``float``, ``str`` and
``bytes``. An operator fails a batch by raising :class:`Retry` (replayed) or
:class:`Fatal` (the topology halts); any other exception counts as a retry.
"""

from . import codec, dispatch
from .dispatch import MapState
from .operators import (
    Aggregator,
    BatchInfo,
    BatchSpout,
    CombinerAggregator,
    Count,
    Fatal,
    First,
    MapGet,
    Max,
    Min,
    PartitionedSpout,
    QueryFunction,
    ReducerAggregator,
    Retry,
    SpoutInfo,
    StateUpdater,
    Sum,
    Tuple,
    WeirError,
    failure_message,
)
from .topology import (
    INNER,
    OUTER,
    ChainedAggregate,
    DirectoryLines,
    FileLines,
    General,
    Generator,
    GroupedStream,
    GuestSpout,
    JetStream,
    JetStreamSink,
    Kafka,
    KafkaSink,
    Limits,
    Operators,
    Reducer,
    State,
    Stream,
    Topology,
    TridentState,
    Window,
    describe,
)

WIT_PACKAGE = "weir:topology@0.1.0"


def topologies_of(topology):
    """The topologies a guest's ``topology()`` returned, as a list."""
    if isinstance(topology, (list, tuple)):
        return [t.build() for t in topology]
    return [topology.build()]


__all__ = [
    "codec",
    "dispatch",
    "MapState",
    "Aggregator",
    "BatchInfo",
    "BatchSpout",
    "CombinerAggregator",
    "Count",
    "Fatal",
    "First",
    "MapGet",
    "Max",
    "Min",
    "PartitionedSpout",
    "QueryFunction",
    "ReducerAggregator",
    "Retry",
    "SpoutInfo",
    "StateUpdater",
    "Sum",
    "Tuple",
    "WeirError",
    "failure_message",
    "INNER",
    "OUTER",
    "ChainedAggregate",
    "DirectoryLines",
    "FileLines",
    "General",
    "Generator",
    "GroupedStream",
    "GuestSpout",
    "JetStream",
    "JetStreamSink",
    "Kafka",
    "KafkaSink",
    "Limits",
    "Operators",
    "Reducer",
    "State",
    "Stream",
    "Topology",
    "TridentState",
    "Window",
    "describe",
    "topologies_of",
    "WIT_PACKAGE",
]

"""The component's exports: componentize-py builds this module, with the
bindings it generates from wit/, into a component of the world
``weir:topology/topology``. It runs the topologies of the guest's ``app``
module through :mod:`weir.dispatch`."""

import os
import sys
import traceback

import app
import weir
from componentize_py_types import Err
from weir import dispatch
from weir.operators import BatchInfo, Fatal, SpoutInfo, WeirError, failure_message
from wit_world import exports
from wit_world.imports.types import OperatorError_Fatal, OperatorError_Retry, PartitionBatch

# Built when the component is built: the snapshot holds them ready.
TOPOLOGIES = weir.topologies_of(app.topology())
# The guest's directory: its files are named relative to it in errors.
APP_ROOT = os.path.dirname(os.path.abspath(app.__file__))
_started = False


def _start():
    global _started
    if not _started:
        _started = True
        # Each line of output reaches the host's log as it is written.
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.reconfigure(line_buffering=True)
            except Exception:
                pass


def _call(run, *args):
    _start()
    try:
        return run(TOPOLOGIES, *args)
    except Fatal as e:
        raise Err(OperatorError_Fatal(e.message)) from None
    except WeirError as e:
        raise Err(OperatorError_Retry(e.message)) from None
    except Err:
        raise
    except Exception as e:
        # A bug in an operator: like a panic in a Rust guest, the batch is
        # replayed until its attempts run out. The log has the whole
        # traceback; the batch's error says where in the guest's code.
        traceback.print_exc()
        raise Err(OperatorError_Retry(failure_message(e, APP_ROOT))) from None


def _info(ctx):
    return BatchInfo(ctx.topology, ctx.operator, ctx.txid, ctx.attempt, ctx.partition, list(ctx.fields))


def _spout_info(ctx):
    return SpoutInfo(ctx.topology, ctx.txid, ctx.attempt, ctx.max_tuples)


def _state(handle):
    def get(keys):
        try:
            return handle.multi_get(keys)
        except Err as e:
            raise weir.Retry(str(e.value)) from None

    def put(entries):
        try:
            handle.multi_put(entries)
        except Err as e:
            raise weir.Retry(str(e.value)) from None

    return dispatch.MapState(get, put)


class Operators(exports.Operators):
    def describe(self):
        return weir.describe(TOPOLOGIES)

    def run_function(self, ctx, input):
        return _call(dispatch.run_function, _info(ctx), input)

    def run_filter(self, ctx, input):
        return _call(dispatch.run_filter, _info(ctx), input)

    def combine_groups(self, ctx, groups, input):
        return _call(dispatch.combine_groups, _info(ctx), groups, input)

    def reduce_groups(self, ctx, groups, start, input):
        return _call(dispatch.reduce_groups, _info(ctx), groups, start, input)

    def aggregate_groups(self, ctx, groups, input):
        return _call(dispatch.aggregate_groups, _info(ctx), groups, input)

    def update_state(self, ctx, state, input):
        return _call(dispatch.update_state, _info(ctx), _state(state), input)

    def batch_retrieve(self, ctx, state, input):
        return _call(dispatch.batch_retrieve, _info(ctx), _state(state), input)

    def execute_query(self, ctx, input, results):
        return _call(dispatch.execute_query, _info(ctx), input, results)

    def combine_pairs(self, ctx, pairs):
        return _call(dispatch.combine_pairs, _info(ctx), pairs)

    def emit_batch(self, ctx):
        return _call(dispatch.emit_batch, _spout_info(ctx))

    def spout_partitions(self, ctx):
        return _call(dispatch.spout_partitions, _spout_info(ctx))

    def emit_partition(self, ctx, partition, previous):
        emitted = _call(dispatch.emit_partition, _spout_info(ctx), partition, previous)
        if emitted is None:
            return None
        tuples, meta = emitted
        return PartitionBatch(tuples, meta)

    def reemit_partition(self, ctx, partition, meta):
        return _call(dispatch.reemit_partition, _spout_info(ctx), partition, meta)

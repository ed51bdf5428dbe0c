"""Coordinator writes to the internal partitions they lead, answered once committed.

A coordinator (groups: workers/group_service.py; transactions: workers/txn/service.py)
persists a state change as one batch on its `__consumer_offsets` / `__transaction_state`
partition and answers its client only when the change is durable, as Kafka's
coordinators append with required acks -1 (`offsets.commit.required.acks`) and a
timeout (`offsets.commit.timeout.ms`). `append_committed` has two outcomes:

* refused, nothing written: the partition is no longer led here
  (NOT_LEADER_OR_FOLLOWER), its ISR is below min.insync.replicas (NOT_ENOUGH_REPLICAS,
  acks -1 only) or the log refused the batch (the StorageError's code). The code is
  returned and `on_done` is never called, so the caller can undo its in-memory change
  before anything else runs.
* written (0 returned): the fetches waiting on the partition are woken (followers copy
  the batch now instead of after replica.fetch.wait.max.ms), and `on_done(code)` runs
  exactly once: 0 when the high watermark covers the batch, else NOT_LEADER_OR_FOLLOWER,
  NOT_ENOUGH_REPLICAS_AFTER_APPEND or REQUEST_TIMED_OUT from the DelayedProduce that
  waits for it in the produce purgatory (the acks=all Produce path,
  workers/handlers/produce.py). With one replica, or required acks other than -1, the
  batch is committed by the append: `on_done(0)` runs before `append_committed` returns.

Owner: the worker that leads the partition, on its event loop.
"""
from __future__ import annotations

import asyncio
from typing import Callable

from mpbroker.protocol.errors import ErrorCode
from storage import errors as serr
from workers.delayed import DelayedProduce


def append_committed(broker, partition, batch: bytes, on_done: Callable[[int], None], *,
                     required_acks: int = -1, timeout_ms: int = 5000) -> int:
    """Append one batch built by a coordinator; see the module docstring."""
    p = partition
    if p.closed or not p.is_leader:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    if required_acks == -1 and p.not_enough_replicas():
        return ErrorCode.NOT_ENOUGH_REPLICAS
    try:
        info = p.append(memoryview(bytearray(batch)))
    except serr.StorageError as e:
        return e.code if e.code else ErrorCode.UNKNOWN_SERVER_ERROR
    broker.fetch_purgatory.check_and_complete(p.key)
    if required_acks != -1 or p.high_watermark > info.last_offset:
        on_done(ErrorCode.NONE)
    else:
        _wait_for_high_watermark(broker, p, info.last_offset, timeout_ms, on_done)
    return ErrorCode.NONE


def _wait_for_high_watermark(broker, p, last_offset: int, timeout_ms: int, on_done) -> None:
    result = {"error_code": ErrorCode.NONE}
    done = asyncio.get_running_loop().create_future()
    done.add_done_callback(lambda _f: on_done(result["error_code"]))
    op = DelayedProduce(timeout_ms, [(p, last_offset, result)], result, done)
    broker.produce_purgatory.try_complete_else_watch(op, [p.key])

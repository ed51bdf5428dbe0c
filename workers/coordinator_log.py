"""The coordinators' runtime on the internal partition they lead: replay it, append to it.

Both coordinators (groups: workers/groups/service.py on `__consumer_offsets`;
transactions: workers/txn/service.py on `__transaction_state`) keep their state in
memory and the partition as its log, as Kafka's GroupMetadataManager and
TransactionStateManager do. This module is what they share:

* `load_with_backoff(load, still_ours, what)`: run `load()` until it succeeds; a load
  that fails starts over after a backoff (LOAD_RETRY_MIN_MS doubling up to
  LOAD_RETRY_MAX_MS) while `still_ours()`, so a coordinator never serves part of its
  state. The caller's task is cancelled when the partition is lost.
* `replay(log, chunk_bytes, on_batch, still_ours)`: feed every batch of the partition
  to `on_batch`, reading chunks of `chunk_bytes` (`offsets.load.buffer.size`) and
  yielding to the loop between chunks and, within a chunk, every LOAD_SLICE_MS of
  decoding (Kafka's 5 MiB default decodes in about 0.4 s here), so the worker's other
  partitions keep being served. It reads up to the log end offset at the moment it
  finishes (no await after the last check), so records appended meanwhile are replayed
  too.
* `append_committed(broker, partition, batch, on_done, required_acks, timeout_ms)`:
  persist one batch and answer once it is durable, as Kafka's coordinators append with
  required acks -1 and a timeout. Two outcomes:

  - refused, nothing written: the partition is no longer led here
    (NOT_LEADER_OR_FOLLOWER), its ISR is below min.insync.replicas
    (NOT_ENOUGH_REPLICAS, acks -1 only) or the log refused the batch (the
    StorageError's code). The code is returned and `on_done` is never called, so the
    caller can undo its in-memory change before anything else runs.
  - written (0 returned): the fetches waiting on the partition are woken (followers
    copy the batch now instead of after replica.fetch.wait.max.ms), and `on_done(code)`
    runs exactly once: 0 when the high watermark covers the batch, else
    NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS_AFTER_APPEND or REQUEST_TIMED_OUT from
    the DelayedProduce that waits for it in the produce purgatory (the acks=all Produce
    path). With one replica, or required acks other than -1, the batch is committed by
    the append: `on_done(0)` runs before `append_committed` returns.
  `append_committed_async` is the same for a coroutine: the code, refused or final.

Owner: the worker that leads the partition, on its event loop.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Awaitable, Callable, TypeVar

from mpbroker.protocol.errors import ErrorCode
from storage import errors as serr
from storage.batch import iter_batches
from workers.delayed import DelayedProduce

log = logging.getLogger(__name__)

LOAD_RETRY_MIN_MS = 100
LOAD_RETRY_MAX_MS = 10000
LOAD_SLICE_MS = 20  # longest stretch of decoding before the load lets requests in

T = TypeVar("T")


class LoadError(serr.StorageError):
    """The partition could not be read to its end (the load starts over)."""


async def load_with_backoff(load: Callable[[], Awaitable[T]], still_ours: Callable[[], bool],
                            what: str, on_failure: Callable[[], None] | None = None) -> T | None:
    """`await load()` until it returns; after a failure, `on_failure()` then a backoff,
    while `still_ours()`. None when the partition was lost after a failure."""
    backoff_ms = LOAD_RETRY_MIN_MS
    while True:
        try:
            return await load()
        except asyncio.CancelledError:
            raise
        except Exception:
            if not still_ours():
                return None
            log.exception("loading %s failed; retrying in %d ms", what, backoff_ms)
            if on_failure is not None:
                on_failure()
            await asyncio.sleep(backoff_ms / 1000)
            backoff_ms = min(backoff_ms * 2, LOAD_RETRY_MAX_MS)


async def replay(lg, chunk_bytes: int, on_batch: Callable, what: str,
                 still_ours: Callable[[], bool] | None = None) -> int:
    """Every batch of `lg` from its start to its end, to `on_batch(batch)`; see the module
    docstring. Returns the number of chunks read; stops early (after a chunk) once
    `still_ours()` is false."""
    offset = lg.log_start_offset
    chunks = 0
    while offset < lg.log_end_offset:
        data = lg.read_records_bytes(offset, chunk_bytes)
        start = offset
        deadline = time.monotonic() + LOAD_SLICE_MS / 1000
        for batch in iter_batches(memoryview(data), allow_partial_tail=True):
            on_batch(batch)
            offset = batch.last_offset + 1
            if time.monotonic() >= deadline:
                await asyncio.sleep(0)  # a large chunk: let requests in meanwhile
                deadline = time.monotonic() + LOAD_SLICE_MS / 1000
        if offset <= start:
            raise LoadError(f"no batch readable at offset {start} of {what} "
                            f"(log end {lg.log_end_offset})")
        chunks += 1
        await asyncio.sleep(0)  # let requests in between chunks
        if still_ours is not None and not still_ours():
            break               # lost meanwhile: the caller drops what it has
    return chunks


def append_committed(broker, partition, batch: bytes, on_done: Callable[[int], None], *,
                     required_acks: int, timeout_ms: int) -> int:
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


async def append_committed_async(broker, partition, batch: bytes, *, required_acks: int,
                                 timeout_ms: int) -> int:
    """`append_committed` for a coroutine: the refusal's code, or the final one."""
    done = asyncio.get_running_loop().create_future()
    code = append_committed(broker, partition, batch,
                            lambda c: done.done() or done.set_result(c),  # done: cancelled
                            required_acks=required_acks, timeout_ms=timeout_ms)
    return code if code else await done


def _wait_for_high_watermark(broker, p, last_offset: int, timeout_ms: int, on_done) -> None:
    result = {"error_code": ErrorCode.NONE}
    done = asyncio.get_running_loop().create_future()
    done.add_done_callback(lambda _f: on_done(result["error_code"]))
    op = DelayedProduce(timeout_ms, [(p, last_offset, result)], result, done)
    broker.produce_purgatory.try_complete_else_watch(op, [p.key])

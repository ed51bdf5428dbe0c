"""WriteTxnMarkers (key 27), v0-1: the transaction coordinator's COMMIT/ABORT markers.

Sent by a transaction coordinator (workers/txn/markers.py `MarkerSender`: in process
through `apply_markers`, over the worker mesh, or by another broker over the wire) to
the leaders of the partitions of a transaction once EndTxn (or a timeout) decided its
outcome.  Per marker (producer id, producer epoch, result, coordinator epoch) and per
partition, the owning worker appends one control batch (`Partition.write_txn_marker`,
storage/log.py `append_control`) and answers a per-partition error code:

* UNKNOWN_TOPIC_OR_PARTITION (3): no such topic/partition in the metadata;
* NOT_LEADER_OR_FOLLOWER (6): this worker does not lead/own it (the router sends each
  partition to its owner, so this means "not this broker" or a move in flight);
* INVALID_PRODUCER_EPOCH (47): the marker's producer epoch is older than the producer's;
* TRANSACTION_COORDINATOR_FENCED (52): its coordinator epoch is older than the last
  marker's of that producer on this partition;
* INVALID_PRODUCER_ID_MAPPING (49): a producer id below 0;
* REQUEST_TIMED_OUT (7): the high watermark did not reach the marker within
  `request.timeout.ms` (Kafka appends markers with acks=-1, so do we);
* other storage errors with their own codes.

After the markers are appended the fetch purgatory is woken for those partitions: the
LSO moved, so parked read_committed fetches complete.  A COMMIT/ABORT written to a
`__consumer_offsets` partition, once committed, completes (or drops) the pending
transactional offset commits of that producer in the group coordinator of that
partition (Kafka's `onTransactionCompleted`).

`apply_markers(broker, markers)` takes the request's `markers` list and returns the
response's `markers` list (`[{"producer_id", "topics": [{"name", "partitions":
[{"partition_index", "error_code"}]}]}]`), or an awaitable of it when a marker waits
for its high watermark; `handle` wraps it as the API handler.
"""
from __future__ import annotations

import asyncio

from mpbroker.metadata.model import OFFSETS_TOPIC
from mpbroker.protocol.errors import ErrorCode

from workers.delayed import DelayedProduce

DEFAULT_TIMEOUT_MS = 30_000


def _write_one(broker, topic: str, index: int, producer_id: int, producer_epoch: int,
               commit: bool, coordinator_epoch: int):
    """(error code, partition or None, marker offset)."""
    p = broker.partition(topic, index)
    if p is None or p.closed:
        return broker.partition_error(topic, index), None, -1
    if producer_id < 0:
        return ErrorCode.INVALID_PRODUCER_ID_MAPPING, None, -1
    if producer_epoch < 0:
        return ErrorCode.INVALID_PRODUCER_EPOCH, None, -1
    code = p.write_txn_marker(producer_id, producer_epoch, bool(commit), coordinator_epoch)
    if code:
        return code, None, -1
    return ErrorCode.NONE, p, p.log_end_offset - 1


def apply_markers(broker, markers: list):
    """Append every marker of a WriteTxnMarkers request; see the module docstring."""
    results: list[dict] = []
    waiting: list = []           # [(partition, marker offset, result dict)] for acks=-1
    offsets_parts: list = []     # [(partition, producer id, commit, result dict)]
    touched = {}
    for m in markers or ():
        pid = m["producer_id"]
        epoch = m["producer_epoch"]
        commit = bool(m["transaction_result"])
        coord_epoch = m["coordinator_epoch"]
        topics = []
        for t in m.get("topics") or ():
            name = t["name"]
            parts = []
            for idx in t.get("partition_indexes") or ():
                code, p, offset = _write_one(broker, name, idx, pid, epoch, commit, coord_epoch)
                res = {"partition_index": idx, "error_code": code}
                parts.append(res)
                if p is not None:
                    touched[p.key] = p
                    waiting.append((p, offset, res))
                    if name == OFFSETS_TOPIC:
                        offsets_parts.append((p, pid, commit, res))
            topics.append({"name": name, "partitions": parts})
        results.append({"producer_id": pid, "topics": topics})
    for key in touched:
        broker.fetch_purgatory.check_and_complete(key)
        broker.produce_purgatory.check_and_complete(key)

    def finish():
        groups = getattr(broker, "groups", None)
        for p, pid, commit, res in offsets_parts:
            if res["error_code"] == ErrorCode.NONE and groups is not None:
                coord = groups.coordinators.get(p.index)
                if coord is not None:
                    coord.complete_txn(pid, commit)
        return results

    if all(p.high_watermark > offset for p, offset, _ in waiting):
        return finish()
    future = asyncio.get_running_loop().create_future()
    timeout = broker.config.get("request.timeout.ms", DEFAULT_TIMEOUT_MS) or DEFAULT_TIMEOUT_MS
    op = DelayedProduce(int(timeout), waiting, results, future)
    broker.produce_purgatory.try_complete_else_watch(op, list(touched))

    async def wait():
        await future
        return finish()
    return wait()


def handle(broker, ctx, req):
    out = apply_markers(broker, req.get("markers") or [])
    if isinstance(out, list):
        return {"markers": out}

    async def wait():
        return {"markers": await out}
    return wait()

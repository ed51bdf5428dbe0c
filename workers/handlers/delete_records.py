"""DeleteRecords (key 21), v0-v2: move a partition's log start offset forward.

Per partition, on the leader (Kafka's ReplicaManager.deleteRecords and
Partition.deleteRecordsOnLeader):
* an internal topic: INVALID_TOPIC_EXCEPTION; a topic whose cleanup.policy has no
  `delete` (compact only): POLICY_VIOLATION;
* offset -1 means the high watermark; an offset below -1 or above the high watermark is
  OFFSET_OUT_OF_RANGE; one at or below the log start changes nothing;
* whole segments below the new start are deleted; reads below it get
  OFFSET_OUT_OF_RANGE.

The answer's `low_watermark` is the minimum log start offset over the leader and its
followers on live brokers (Kafka's lowWatermarkIfLeader). A follower learns the new
log start from the leader's Fetch responses and reports its own in its next Fetch
(workers/handlers/fetch/plan.py records it, then checks this purgatory). When some
partition's low watermark is still below its target, a DelayedDeleteRecords (workers/delayed.py) waits in
the worker's `delete_records_purgatory` until every such partition reached it (or is
no longer led here: NOT_LEADER_OR_FOLLOWER), at most the request's `timeout_ms`, after
which those partitions answer REQUEST_TIMED_OUT. With one replica the low watermark is
the leader's log start, so the answer is immediate.
"""
from __future__ import annotations

import asyncio

from mpbroker.protocol.errors import ErrorCode
from mpbroker.metadata.model import INTERNAL_TOPICS
from storage import errors as serr

from workers.delayed import DelayedDeleteRecords, alive_brokers, low_watermark


def delete_on_leader(broker, topic: str, idx: int, offset: int) -> tuple[dict, object, int]:
    """(result dict, partition, required offset) after deleting locally; the partition
    is None when the result is final (an error)."""
    res = {"partition_index": idx, "low_watermark": -1, "error_code": ErrorCode.NONE}
    if topic in INTERNAL_TOPICS:
        res["error_code"] = ErrorCode.INVALID_TOPIC_EXCEPTION
        return res, None, -1
    p = broker.partition(topic, idx)
    if p is None:
        res["error_code"] = broker.partition_error(topic, idx)
        return res, None, -1
    if not p.log.config.delete:
        res["error_code"] = ErrorCode.POLICY_VIOLATION
        return res, None, -1
    required = p.high_watermark if offset == -1 else offset
    if required < 0 or required > p.high_watermark:
        res["error_code"] = ErrorCode.OFFSET_OUT_OF_RANGE
        return res, None, -1
    try:
        p.delete_records_before(required)
    except serr.StorageError as e:
        res["error_code"] = e.code
        return res, None, -1
    finally:    # waiters re-check their partition (its log start may have moved anyway)
        broker.fetch_purgatory.check_and_complete(p.key)
    res["low_watermark"] = low_watermark(p, alive_brokers(broker))
    return res, p, required


def handle(broker, ctx, req):
    topics, waiting = [], []
    for t in req["topics"]:
        parts = []
        for rp in t["partitions"]:
            res, p, required = delete_on_leader(broker, t["name"], rp["partition_index"],
                                                rp["offset"])
            parts.append(res)
            if p is not None and res["low_watermark"] < required:
                res["error_code"] = ErrorCode.REQUEST_TIMED_OUT
                waiting.append((p, required, res))
        topics.append({"name": t["name"], "partitions": parts})
    response = {"throttle_time_ms": 0, "topics": topics}
    if not waiting:
        return response
    future = asyncio.get_running_loop().create_future()
    op = DelayedDeleteRecords(req["timeout_ms"], broker, waiting, response, future)
    broker.delete_records_purgatory.try_complete_else_watch(op, [p.key for p, _, _ in waiting])
    return future

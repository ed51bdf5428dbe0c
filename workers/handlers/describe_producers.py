"""DescribeProducers (key 61), v0: the active producers of partitions (KIP-664).

Answered by each partition's owner from its producer state (storage/producer_state.py):
per producer id its epoch, last sequence, last write timestamp, the coordinator epoch of
its last marker and the first offset of its open transaction (-1 when none), which is
what `kafka-transactions.sh describe-producers` / `Admin.describeProducers` show to
find a hanging transaction.  Partition errors: UNKNOWN_TOPIC_OR_PARTITION,
NOT_LEADER_OR_FOLLOWER (not owned here, or a follower replica).  Routed like
Produce: each partition's part goes to its owner worker (workers/router.py).
"""
from __future__ import annotations

from mpbroker.protocol.errors import ErrorCode


def active_producers(p) -> list[dict]:
    out = []
    for pid, e in sorted(p.log.producer_state.producers.items()):
        out.append({"producer_id": pid, "producer_epoch": e.producer_epoch,
                    "last_sequence": e.last_seq, "last_timestamp": e.last_timestamp_ms,
                    "coordinator_epoch": e.coordinator_epoch,
                    "current_txn_start_offset": -1 if e.current_txn_first_offset is None
                    else e.current_txn_first_offset})
    return out


def handle(broker, ctx, req):
    topics = []
    for t in req.get("topics") or ():
        parts = []
        for idx in t.get("partition_indexes") or ():
            res = {"partition_index": idx, "error_code": ErrorCode.NONE, "error_message": None,
                   "active_producers": []}
            p = broker.partition(t["name"], idx)
            if p is None or p.closed:
                res["error_code"] = broker.partition_error(t["name"], idx)
            elif not getattr(p, "is_leader", True):
                res["error_code"] = ErrorCode.NOT_LEADER_OR_FOLLOWER
            else:
                res["active_producers"] = active_producers(p)
            parts.append(res)
        topics.append({"name": t["name"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}

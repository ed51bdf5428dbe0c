"""Shared plumbing of the group API handlers: find the coordinator of a group and turn
its `respond` callback into something the dispatcher can wait for."""
from __future__ import annotations

import asyncio

from mpbroker.protocol.errors import ErrorCode


def call(method, *args):
    """Run a coordinator method that answers through a callback; return the response
    dict if it answered at once, else a future of it."""
    box = []
    fut = None

    def respond(resp):
        if fut is None:
            box.append(resp)
        elif not fut.done():
            fut.set_result(resp)

    method(*args, respond)
    if box:
        return box[0]
    fut = asyncio.get_running_loop().create_future()
    return fut


def coordinator(broker, group_id: str):
    """(coordinator, error code): NOT_COORDINATOR when another worker/broker has it,
    COORDINATOR_NOT_AVAILABLE when the offsets topic does not exist yet."""
    groups = broker.groups
    if groups is None or "__consumer_offsets" not in broker.metadata.topics:
        return None, ErrorCode.COORDINATOR_NOT_AVAILABLE
    coord = groups.coordinator_for(group_id)
    if coord is None:
        return None, ErrorCode.NOT_COORDINATOR
    return coord, ErrorCode.NONE


def _exists(broker, name: str, index: int) -> bool:
    t = broker.metadata.topics.get(name)
    return t is not None and index in t.partitions


def call_for_known_partitions(broker, method, req, version: int):
    """OffsetCommit / OffsetDelete as Kafka's KafkaApis: partitions of topics (or indexes)
    that do not exist answer UNKNOWN_TOPIC_OR_PARTITION and never reach the coordinator
    `method`; the rest does, and the answers are merged back in request order. A
    group-level error in the coordinator's answer (`error_code`) is kept as it is."""
    topics = req.get("topics") or []
    known = []
    for t in topics:
        parts = [p for p in t["partitions"] if _exists(broker, t["name"], p["partition_index"])]
        if parts:
            known.append({**t, "partitions": parts})
    result = call(method, {**req, "topics": known}, version)
    if sum(len(t["partitions"]) for t in known) == sum(len(t["partitions"]) for t in topics):
        return result

    def merge(resp):
        if resp.get("error_code"):
            return resp
        codes = {(t["name"], p["partition_index"]): p["error_code"]
                 for t in resp.get("topics", []) for p in t["partitions"]}
        resp["topics"] = [{"name": t["name"], "partitions": [
            {"partition_index": p["partition_index"],
             "error_code": codes.get((t["name"], p["partition_index"]),
                                     ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)}
            for p in t["partitions"]]} for t in topics]
        return resp

    if isinstance(result, dict):
        return merge(result)

    async def later():
        return merge(await result)
    return later()

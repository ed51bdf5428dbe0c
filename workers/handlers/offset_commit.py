"""OffsetCommit (key 8), v0-v9. Partitions of topics that do not exist get
UNKNOWN_TOPIC_OR_PARTITION (the coordinator never sees them); the rest goes to the
group's coordinator, and the two answers are merged in request order."""
import asyncio
import inspect

from mpbroker.protocol.errors import ErrorCode
from workers.handlers._groups import call, coordinator


def _unknown(broker, name: str, index: int) -> bool:
    t = broker.metadata.topics.get(name)
    return t is None or index not in t.partitions


def handle(broker, ctx, req):
    coord, err = coordinator(broker, req["group_id"])
    topics = req["topics"]
    if coord is None:
        return {"throttle_time_ms": 0, "topics": [
            {"name": t["name"], "partitions": [
                {"partition_index": p["partition_index"], "error_code": err}
                for p in t["partitions"]]} for t in topics]}
    known = []
    for t in topics:
        parts = [p for p in t["partitions"] if not _unknown(broker, t["name"], p["partition_index"])]
        if parts:
            known.append({**t, "partitions": parts})
    result = call(coord.offset_commit, {**req, "topics": known}, ctx.api_version)
    if all(not _unknown(broker, t["name"], p["partition_index"])
           for t in topics for p in t["partitions"]):
        return result

    def merge(resp):
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

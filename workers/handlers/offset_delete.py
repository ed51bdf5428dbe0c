"""OffsetDelete (key 47), v0. As Kafka's KafkaApis: partitions of topics (or partition
indexes) that do not exist answer UNKNOWN_TOPIC_OR_PARTITION and never reach the
coordinator; the rest goes to the group's coordinator (GROUP_SUBSCRIBED_TO_TOPIC for
topics a live consumer group subscribes to). A group-level error (GROUP_ID_NOT_FOUND,
NON_EMPTY_GROUP, NOT_COORDINATOR, ...) is the whole answer, without partitions."""
from mpbroker.protocol.errors import ErrorCode
from workers.handlers._groups import call, coordinator


def _known(broker, name: str, index: int) -> bool:
    t = broker.metadata.topics.get(name)
    return t is not None and index in t.partitions


def handle(broker, ctx, req):
    coord, err = coordinator(broker, req["group_id"])
    if coord is None:
        return {"error_code": err, "throttle_time_ms": 0, "topics": []}
    topics = req.get("topics") or []
    known = []
    for t in topics:
        parts = [p for p in t["partitions"] if _known(broker, t["name"], p["partition_index"])]
        if parts:
            known.append({**t, "partitions": parts})
    result = call(coord.offset_delete, {**req, "topics": known}, ctx.api_version)

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

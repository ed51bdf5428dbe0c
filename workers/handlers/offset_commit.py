"""OffsetCommit (key 8), v0-v9. Partitions of topics that do not exist get
UNKNOWN_TOPIC_OR_PARTITION (the coordinator never sees them); the rest goes to the
group's coordinator, and the two answers are merged in request order."""
from workers.handlers._groups import call_for_known_partitions, coordinator


def handle(broker, ctx, req):
    coord, err = coordinator(broker, req["group_id"])
    if coord is None:
        return {"throttle_time_ms": 0, "topics": [
            {"name": t["name"], "partitions": [
                {"partition_index": p["partition_index"], "error_code": err}
                for p in t["partitions"]]} for t in req["topics"]]}
    return call_for_known_partitions(broker, coord.offset_commit, req, ctx.api_version)

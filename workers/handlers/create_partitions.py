"""CreatePartitions (key 37), v0-v3: raise a topic's partition count (never lower).
Cluster-scoped: the controller validates and persists (INVALID_PARTITIONS for a count
not above the current one, UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT...).
A topic named more than once gets INVALID_REQUEST for every occurrence and is not
changed, as Kafka does (the controller never sees it). More than 9,999 new partitions,
or passing `max.broker.partitions` / `max.partitions`, is POLICY_VIOLATION; the KIP-599
quota: workers/handlers/_quota.py."""
import collections

from mpbroker.protocol.errors import ErrorCode
from workers.handlers import _quota


async def handle(broker, ctx, req):
    specs = []
    for t in req["topics"]:
        assignments = t.get("assignments")
        specs.append({"name": t["name"], "count": t["count"],
                      "assignments": None if assignments is None
                      else [list(a["broker_ids"]) for a in assignments]})
    names = [s["name"] for s in specs]
    dupes = {n for n, c in collections.Counter(names).items() if c > 1}
    results = await broker.controller.create_partitions(
        [s for s in specs if s["name"] not in dupes], req["validate_only"], req["timeout_ms"],
        _quota.quota_arg(ctx))
    throttle_ms = await _quota.throttle(ctx, results)
    by_name = {r["name"]: r for r in results}
    out = [{"name": n, "error_code": ErrorCode.INVALID_REQUEST,
            "error_message": "Duplicate topic in request."} if n in dupes else by_name[n]
           for n in names]
    return {"throttle_time_ms": throttle_ms, "results": out}

"""CreateTopics (key 19), v0-v7. Cluster-scoped: the controller decides and persists;
this handler translates. v5+ returns the topic's partitions, replication factor and
configs; `validate_only` (v1+) checks everything and creates nothing. The controller
applies the limits (more than 9,999 partitions in one request, `max.broker.partitions`,
`max.partitions`: POLICY_VIOLATION) and the KIP-599 quota (workers/handlers/_quota.py)."""
import collections

from mpbroker.protocol.errors import ErrorCode
from workers.handlers import _quota


async def handle(broker, ctx, req):
    specs = []
    for t in req["topics"]:
        specs.append({
            "name": t["name"], "num_partitions": t["num_partitions"],
            "replication_factor": t["replication_factor"],
            "assignments": {a["partition_index"]: list(a["broker_ids"]) for a in t["assignments"]},
            "configs": [(c["name"], c["value"]) for c in t["configs"]]})
    counts = collections.Counter(s["name"] for s in specs)
    dupes = {n for n, c in counts.items() if c > 1}
    results = await broker.controller.create_topics(
        [s for s in specs if s["name"] not in dupes], req.get("validate_only", False),
        req.get("timeout_ms", 60000), _quota.quota_arg(ctx))
    throttle_ms = await _quota.throttle(ctx, results)
    by_name = {r["name"]: r for r in results}
    out = []
    for s in specs:
        if s["name"] in dupes:
            out.append({"name": s["name"], "error_code": ErrorCode.INVALID_REQUEST,
                        "error_message": "Create topics request from client contains "
                                         "multiple entries for the same topic",
                        "num_partitions": -1, "replication_factor": -1, "configs": None})
            continue
        r = by_name[s["name"]]
        if ctx.api_version < 5 or r["error_code"]:
            r.setdefault("configs", None)
        out.append(r)
    return {"throttle_time_ms": throttle_ms, "topics": out}

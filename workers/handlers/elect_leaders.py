"""ElectLeaders (key 43), v0-2. Cluster-scoped: the active controller runs a preferred
(election_type 0; v0 has no type) or unclean (1) election for the named partitions, or
for every partition when `topic_partitions` is null (mpbroker/controller/zk/
`elect_leaders`). Per-partition errors: ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE,
ELIGIBLE_LEADERS_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION; a broker that is not the
active controller answers NOT_CONTROLLER (top level from v1, and per partition)."""
from mpbroker.protocol.errors import ErrorCode


async def handle(broker, ctx, req):
    election_type = req.get("election_type", 0)
    requested = req.get("topic_partitions")
    if election_type not in (0, 1):
        code = ErrorCode.INVALID_REQUEST
        results = [(t["topic"], p, code, f"Unknown election type {election_type}")
                   for t in (requested or []) for p in t["partitions"]]
        return _response(ctx, code, results)
    partitions = None
    if requested is not None:
        partitions = []
        for t in requested:
            for p in t["partitions"]:
                if (t["topic"], p) not in partitions:
                    partitions.append((t["topic"], p))
    code, results = await broker.controller.elect_leaders(election_type, partitions)
    return _response(ctx, code, results)


def _response(ctx, code, results):
    topics = {}
    for t, p, err, msg in results:
        topics.setdefault(t, []).append({"partition_id": p, "error_code": err, "error_message": msg})
    out = {"throttle_time_ms": 0,
           "replica_election_results": [{"topic": t, "partition_result": r} for t, r in topics.items()]}
    if ctx.api_version >= 1:
        out["error_code"] = code
    return out

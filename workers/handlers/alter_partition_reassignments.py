"""AlterPartitionReassignments (key 45), v0. Cluster-scoped: the active controller starts
(replicas given) or cancels (replicas null) partition reassignments (KIP-455; see
mpbroker/controller/zk/ "reassignment"). A broker that is not the active controller
answers NOT_CONTROLLER at the top level."""
from mpbroker.protocol.errors import ErrorCode


async def handle(broker, ctx, req):
    moves, seen, dupes = [], set(), []
    for t in req["topics"]:
        for p in t["partitions"]:
            key = (t["name"], p["partition_index"])
            if key in seen:
                dupes.append(key)
                continue
            seen.add(key)
            r = p.get("replicas")
            moves.append((key[0], key[1], None if r is None else list(r)))
    code, message, results = await broker.controller.alter_partition_reassignments(moves)
    topics = {}
    for t, p, err, msg in results:
        topics.setdefault(t, []).append({"partition_index": p, "error_code": err, "error_message": msg})
    for t, p in dupes:
        topics.setdefault(t, []).append({"partition_index": p, "error_code": ErrorCode.INVALID_REQUEST,
                                         "error_message": "Duplicate partition in the request."})
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message,
            "responses": [{"name": t, "partitions": ps} for t, ps in topics.items()]}

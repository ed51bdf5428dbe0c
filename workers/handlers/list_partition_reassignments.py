"""ListPartitionReassignments (key 46), v0. Cluster-scoped: the ongoing reassignments
(replicas = the current replica set RS, adding and removing replicas) known to the active
controller, for the named partitions or all (topics null)."""


async def handle(broker, ctx, req):
    partitions = None
    if req.get("topics") is not None:
        partitions = [(t["name"], p) for t in req["topics"] for p in t["partition_indexes"]]
    code, message, ongoing = await broker.controller.list_partition_reassignments(partitions)
    topics = {}
    for t, p, rs, adding, removing in ongoing:
        topics.setdefault(t, []).append({"partition_index": p, "replicas": rs,
                                         "adding_replicas": adding, "removing_replicas": removing})
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}

"""CreatePartitions (key 37), v0-v3: raise a topic's partition count (never lower)."""


async def handle(broker, ctx, req):
    specs = []
    for t in req["topics"]:
        assignments = t.get("assignments")
        specs.append({"name": t["name"], "count": t["count"],
                      "assignments": None if assignments is None
                      else [list(a["broker_ids"]) for a in assignments]})
    results = await broker.controller.create_partitions(specs, req["validate_only"],
                                                        req["timeout_ms"])
    return {"throttle_time_ms": 0, "results": results}

"""DeleteTopics (key 20), v0-v6: by name (v0-v5 `topic_names`, v6 `topics[].name`) or by
topic id (v6). The controller removes them from the metadata; owners delete the logs
when the new metadata reaches them. The deleted partitions count against the KIP-599
quota (workers/handlers/_quota.py)."""
from workers.handlers import _quota


async def handle(broker, ctx, req):
    if ctx.api_version >= 6:
        targets = [(t.get("name"), t.get("topic_id")) for t in req["topics"]]
    else:
        targets = [(n, None) for n in req["topic_names"]]
    results = await broker.controller.delete_topics(targets, req.get("timeout_ms", 30000),
                                                    _quota.quota_arg(ctx))
    throttle_ms = await _quota.throttle(ctx, results)
    return {"throttle_time_ms": throttle_ms, "responses": list(results)}

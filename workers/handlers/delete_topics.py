"""DeleteTopics (key 20), v0-v6: by name (v0-v5 `topic_names`, v6 `topics[].name`) or by
topic id (v6). The controller removes them from the metadata; owners delete the logs
when the new metadata reaches them."""


async def handle(broker, ctx, req):
    if ctx.api_version >= 6:
        targets = [(t.get("name"), t.get("topic_id")) for t in req["topics"]]
    else:
        targets = [(n, None) for n in req["topic_names"]]
    results = await broker.controller.delete_topics(targets, req.get("timeout_ms", 30000))
    return {"throttle_time_ms": 0, "responses": results}

"""OffsetFetch (key 9), v0-v9; v8+ asks for several groups at once, each answered by
its own coordinator and merged here."""

from workers.groups import responses
from workers.handlers._groups import call, coordinator


def _group_error(group_id, err):
    return {"group_id": group_id, "topics": [], "error_code": err}


async def _multi(broker, ctx, req):
    out = []
    for g in req["groups"]:
        coord, err = coordinator(broker, g["group_id"])
        if coord is None:
            out.append(_group_error(g["group_id"], err))
            continue
        sub = {"groups": [g], "require_stable": req.get("require_stable", False)}
        resp = call(coord.offset_fetch, sub, ctx.api_version)
        if not isinstance(resp, dict):
            resp = await resp
        out.extend(resp.get("groups", []))
    return {"throttle_time_ms": 0, "groups": out}


def handle(broker, ctx, req):
    if ctx.api_version >= 8:
        return _multi(broker, ctx, req)
    coord, err = coordinator(broker, req["group_id"])
    if coord is None:
        return responses.offset_fetch_error(ctx.api_version, err, req.get("topics"))
    return call(coord.offset_fetch, req, ctx.api_version)

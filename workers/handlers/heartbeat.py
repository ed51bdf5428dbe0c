"""Heartbeat (key 12), v0-v4."""
from workers.handlers._groups import call, coordinator


def handle(broker, ctx, req):
    coord, err = coordinator(broker, req["group_id"])
    if coord is None:
        return {"throttle_time_ms": 0, "error_code": err}
    return call(coord.heartbeat, req, ctx.api_version)

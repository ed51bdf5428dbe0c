"""OffsetDelete (key 47), v0."""
from workers.handlers._groups import call, coordinator


def handle(broker, ctx, req):
    coord, err = coordinator(broker, req["group_id"])
    if coord is None:
        return {"error_code": err, "throttle_time_ms": 0, "topics": []}
    return call(coord.offset_delete, req, ctx.api_version)

"""LeaveGroup (key 13), v0-v5 (batched members from v3)."""
from workers.handlers._groups import call, coordinator


def handle(broker, ctx, req):
    coord, err = coordinator(broker, req["group_id"])
    if coord is None:
        return {"throttle_time_ms": 0, "error_code": err, "members": []}
    return call(coord.leave_group, req, ctx.api_version)

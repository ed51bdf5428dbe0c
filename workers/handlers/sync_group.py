"""SyncGroup (key 14), v0-v5: the leader's assignment, handed to every member."""
from workers.handlers._groups import call, coordinator


def handle(broker, ctx, req):
    coord, err = coordinator(broker, req["group_id"])
    if coord is None:
        return {"throttle_time_ms": 0, "error_code": err, "protocol_type": None,
                "protocol_name": None, "assignment": b""}
    return call(coord.sync_group, req, ctx.api_version)

"""ConsumerGroupHeartbeat (key 68), v0-v1: the KIP-848 consumer protocol
(workers/groups/consumer_protocol.py). v1 (KIP-1082): the client names itself."""
from workers.handlers._groups import call, coordinator


def handle(broker, ctx, req):
    group_id = req.get("group_id") or ""
    coord, err = coordinator(broker, group_id) if group_id else (None, 0)
    if coord is None and group_id:
        return {"throttle_time_ms": 0, "error_code": err, "error_message": None, "member_id": None,
                "member_epoch": 0, "heartbeat_interval_ms": 0, "assignment": None}
    if coord is None:  # empty group id: any coordinator answers INVALID_REQUEST
        coords = list(broker.groups.coordinators.values()) if broker.groups else []
        if not coords:
            return {"throttle_time_ms": 0, "error_code": 42, "error_message": "GroupId can't be empty.",
                    "member_id": None, "member_epoch": 0, "heartbeat_interval_ms": 0,
                    "assignment": None}
        coord = coords[0]
    return call(coord.consumer_group_heartbeat, req, ctx.api_version, ctx.client_id or "",
                ctx.client_host)

"""JoinGroup (key 11), v0-v9: the coordinator's classic rebalance protocol."""
from workers.handlers._groups import call, coordinator


def handle(broker, ctx, req):
    coord, err = coordinator(broker, req["group_id"])
    if coord is None:
        return {"throttle_time_ms": 0, "error_code": err, "generation_id": -1,
                "protocol_type": None,
                # nullable only from v7 (Kafka answers "" before: GroupCoordinator.NoProtocol)
                "protocol_name": None if ctx.api_version >= 7 else "", "leader": "",
                "skip_assignment": False, "member_id": req.get("member_id", ""), "members": []}
    return call(coord.join_group, req, ctx.api_version, ctx.client_id or "", ctx.client_host)

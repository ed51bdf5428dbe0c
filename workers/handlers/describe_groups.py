"""DescribeGroups (key 15), v0-v5: each group answered by its coordinator."""
from workers.handlers._groups import coordinator


def handle(broker, ctx, req):
    out = []
    for gid in req["groups"]:
        coord, err = coordinator(broker, gid)
        if coord is None:
            out.append({"error_code": err, "group_id": gid, "group_state": "",
                        "protocol_type": "", "protocol_data": "", "members": [],
                        "authorized_operations": -2147483648})
        else:
            out.extend(coord.describe_groups([gid], ctx.api_version))
    return {"throttle_time_ms": 0, "groups": out}

"""ConsumerGroupDescribe (key 69), v0: each group answered by its coordinator."""
from workers.handlers._groups import coordinator


def handle(broker, ctx, req):
    out = []
    for gid in req.get("group_ids", []):
        coord, err = coordinator(broker, gid)
        if coord is None:
            out.append({"error_code": err, "error_message": None, "group_id": gid, "group_state": "",
                        "group_epoch": 0, "assignment_epoch": 0, "assignor_name": "", "members": [],
                        "authorized_operations": -2147483648})
        else:
            out.extend(coord.consumer_group_describe([gid]))
    return {"throttle_time_ms": 0, "groups": out}

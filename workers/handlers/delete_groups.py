"""DeleteGroups (key 42), v0-v2: each group deleted by its coordinator (NON_EMPTY_GROUP
while it has members, GROUP_ID_NOT_FOUND when unknown)."""
from workers.handlers._groups import coordinator


def handle(broker, ctx, req):
    out = []
    for gid in req["groups_names"]:
        coord, err = coordinator(broker, gid)
        if coord is None:
            out.append({"group_id": gid, "error_code": err})
        else:
            out.extend(coord.delete_groups([gid], ctx.api_version))
    return {"throttle_time_ms": 0, "results": out}

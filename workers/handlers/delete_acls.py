"""DeleteAcls (key 31), v0-v3: every stored ACL matching a filter is deleted by the
controller (mpbroker/controller/acl_ops.py); each filter's result lists what it
deleted. An invalid filter gets INVALID_REQUEST and deletes nothing."""
from mpbroker.security.acl import filter_from_wire


async def handle(broker, ctx, req):
    filters = [filter_from_wire(f) for f in req["filters"]]
    results = await broker.controller.delete_acls(filters) if filters else []
    return {"throttle_time_ms": 0, "filter_results": results}

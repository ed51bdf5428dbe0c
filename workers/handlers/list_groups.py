"""ListGroups (key 16), v0-v5: every group of every coordinator this worker runs,
filtered by state (v4+) and type (v5+)."""


def handle(broker, ctx, req):
    groups, error = [], 0
    states = req.get("states_filter") or None
    types = req.get("types_filter") or None
    for coord in (broker.groups.coordinators.values() if broker.groups else ()):
        err, entries = coord.list_groups(states, types)
        error = error or err
        groups.extend(entries)
    return {"throttle_time_ms": 0, "error_code": error, "groups": groups}

"""DescribeClientQuotas (key 48, v0-v1, KIP-546): the stored client quotas matching a
filter, answered by any broker from its copy of the metadata (the controller pushes
the quotas with it). A bad filter (unknown entity type, a type twice, an exact match
without a name) answers INVALID_REQUEST with Kafka's message and no entries."""
from mpbroker.protocol.errors import ErrorCode
from mpbroker.security import quotas as q


def handle(broker, ctx, req):
    stored = getattr(broker.metadata, "client_quotas", None) or {}
    components = [(c["entity_type"], c["match_type"], c["match"]) for c in req["components"]]
    try:
        found = q.describe(stored, components, req["strict"])
    except q.QuotaError as e:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.INVALID_REQUEST,
                "error_message": str(e), "entries": None}
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "entries": [
        {"entity": [{"entity_type": t, "entity_name": n} for t, n in key],
         "values": [{"key": k, "value": v} for k, v in sorted(values.items())]}
        for key, values in found]}

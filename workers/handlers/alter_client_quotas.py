"""AlterClientQuotas (key 49, v0-v1, KIP-546): set or remove quota keys of user /
client-id entities (None names: the defaults). The controller validates and stores
them (mpbroker/controller/client_quotas.py: INVALID_REQUEST for an unknown entity
type or key or a bad value, per entry; `validate_only` changes nothing) and pushes
them to every worker with the metadata."""


def _entries(req):
    out = []
    for e in req["entries"]:
        pairs = [(x["entity_type"], x["entity_name"]) for x in e["entity"]]
        ops = [(o["key"], o["value"], o["remove"]) for o in e["ops"]]
        out.append((pairs, ops))
    return out


async def _alter(broker, req):
    results = await broker.controller.alter_client_quotas(_entries(req), req["validate_only"])
    return {"throttle_time_ms": 0, "entries": [
        {"error_code": code, "error_message": msg,
         "entity": [{"entity_type": t, "entity_name": n} for t, n in pairs]}
        for pairs, code, msg in results]}


def handle(broker, ctx, req):
    return _alter(broker, req)

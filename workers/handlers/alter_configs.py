"""AlterConfigs (key 33, v0-v2: replace all overrides of a resource) and
IncrementalAlterConfigs (key 44, v0-v1: SET 0, DELETE 1, APPEND 2, SUBTRACT 3 per key).

Topic configs are validated and stored by the controller, then take effect on the
owning workers without a restart (the new metadata carries them; each Log re-reads its
config). Broker configs: dynamic ones only, validated as Kafka does."""


def _resources(req, incremental: bool):
    out = []
    for r in req["resources"]:
        if incremental:
            ops = [(c["name"], c["config_operation"], c["value"]) for c in r["configs"]]
        else:
            ops = [(c["name"], 0, c["value"]) for c in r["configs"]]
        out.append((r["resource_type"], r["resource_name"], ops))
    return out


async def _alter(broker, req, incremental: bool):
    results = await broker.controller.alter_configs(
        _resources(req, incremental), incremental, req["validate_only"])
    return {"throttle_time_ms": 0, "responses": [
        {"error_code": code, "error_message": msg, "resource_type": rtype,
         "resource_name": rname} for rtype, rname, code, msg in results]}


def handle(broker, ctx, req):
    return _alter(broker, req, incremental=False)


def handle_incremental(broker, ctx, req):
    return _alter(broker, req, incremental=True)

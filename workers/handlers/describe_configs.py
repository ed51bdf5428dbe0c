"""DescribeConfigs (key 32), v0-v4: topic configs (overrides + broker defaults, with
sources and synonyms) and broker configs (by broker id; "" for the cluster-wide
dynamic defaults). Resource types: TOPIC 2, BROKER 4, BROKER_LOGGER 8."""
import logging

from mpbroker import config as configmod
from mpbroker.protocol.errors import ErrorCode

TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8


def describe_resource(broker, rtype: int, name: str, keys, synonyms: bool, docs: bool):
    """(error_code, error_message, config entries)."""
    if rtype == TOPIC:
        t = broker.metadata.topics.get(name)
        if t is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist", []
        return 0, None, configmod.describe_topic_configs(broker.config, t.configs, keys,
                                                         synonyms, docs)
    if rtype == BROKER:
        if name not in ("", str(broker.broker_id)):
            return ErrorCode.INVALID_REQUEST, f"Unexpected broker id {name}", []
        cfg = broker.controller.broker_config()
        return 0, None, configmod.describe_broker_configs(cfg, name, keys, synonyms, docs)
    if rtype == BROKER_LOGGER:
        if name != str(broker.broker_id):
            return ErrorCode.INVALID_REQUEST, f"Unexpected broker id {name}", []
        loggers = ["root"] + sorted(logging.root.manager.loggerDict)
        out = []
        for ln in loggers:
            if keys is not None and ln not in keys:
                continue
            lvl = logging.getLevelName(logging.getLogger(None if ln == "root" else ln)
                                       .getEffectiveLevel())
            out.append({"name": ln, "value": lvl, "read_only": False, "is_default": False,
                        "config_source": 5, "is_sensitive": False, "synonyms": [],
                        "config_type": 2, "documentation": None})
        return 0, None, out
    return ErrorCode.INVALID_REQUEST, f"Unsupported resource type {rtype}", []


def handle(broker, ctx, req):
    results = []
    for r in req["resources"]:
        keys = r.get("configuration_keys")
        code, msg, entries = describe_resource(
            broker, r["resource_type"], r["resource_name"],
            None if keys is None else set(keys), req.get("include_synonyms", False),
            req.get("include_documentation", False))
        if ctx.api_version == 0:
            for e in entries:
                e["read_only"] = e["read_only"] or e["config_source"] == 4
        results.append({"error_code": code, "error_message": msg,
                        "resource_type": r["resource_type"],
                        "resource_name": r["resource_name"], "configs": entries})
    return {"throttle_time_ms": 0, "results": results}

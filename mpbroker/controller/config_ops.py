"""AlterConfigs / IncrementalAlterConfigs over config overrides, shared by both
controllers (pure, except `DynamicBrokerConfigs.save`, which writes the broker's
dynamic layers to `<log.dirs[0]>/__mpbroker_metadata/broker-configs.json`).

resources: [(type, name, [(key, op, value)])]; the ops are Kafka's AlterConfigOp types.
"""
from __future__ import annotations

import json
import os

from mpbroker import config as configmod
from mpbroker.metadata import model, store
from mpbroker.metadata.model import MetadataError
from mpbroker.protocol.errors import ErrorCode
from storage.checkpoint import atomic_write

TOPIC, BROKER = 2, 4                     # config resource types
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


async def alter_each(resources, alter_topic_configs, alter_broker_configs) -> list:
    """AlterConfigs over `resources` ([(type, name, ops)]): `await
    alter_topic_configs(name, ops)` for a TOPIC, `alter_broker_configs(name, ops)` for a
    BROKER; -> [(type, name, code, message)], one per resource (a MetadataError or a
    ConfigError, INVALID_CONFIG, fails that resource only)."""
    out = []
    for rtype, rname, ops in resources:
        try:
            if rtype == TOPIC:
                await alter_topic_configs(rname, ops)
            elif rtype == BROKER:
                alter_broker_configs(rname, ops)
            else:
                raise MetadataError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type {rtype}")
        except MetadataError as e:
            out.append((rtype, rname, e.code, e.message))
        except configmod.ConfigError as e:
            out.append((rtype, rname, ErrorCode.INVALID_CONFIG, str(e)))
        else:
            out.append((rtype, rname, 0, None))
    return out


def load_json(path: str, default):
    """A JSON file's value, `default` when the file does not exist."""
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return default


def apply_ops(current: dict, ops, incremental: bool, keys=None, base=None,
              kind: str = "topic") -> dict:
    """The overrides after `ops`. APPEND/SUBTRACT (incremental only) work on the keys
    whose type in `keys` (a ConfigKey table) is LIST, starting from the override or else
    `base(key)` (the default), as Kafka's ZooKeeper-mode prepareIncrementalConfigs:
    another known key is INVALID_REQUEST, an unknown one INVALID_CONFIG."""
    new = dict(current) if incremental else {}
    for key, op, value in ops:
        if op == SET:
            if value is None and incremental:
                raise MetadataError(ErrorCode.INVALID_REQUEST,
                                    f"Null value not supported for : {key}")
            if value is None:
                new.pop(key, None)
            else:
                new[key] = value
        elif op == DELETE:
            new.pop(key, None)
        elif op in (APPEND, SUBTRACT):
            new[key] = _list_op(new, key, op, value, keys or {}, base, kind)
        else:
            raise MetadataError(ErrorCode.INVALID_REQUEST, f"Unknown config operation {op}")
    return new


def _list_op(new: dict, key: str, op: int, value, keys, base, kind: str) -> str:
    spec = keys.get(key)
    if spec is None:
        raise MetadataError(ErrorCode.INVALID_CONFIG, f"Unknown {kind} config name: {key}")
    verb = "append" if op == APPEND else "subtract"
    if spec.type != configmod.ConfigType.LIST:
        raise MetadataError(ErrorCode.INVALID_REQUEST,
                            f"Config value {verb} is not allowed for config key: {key}")
    start = new[key] if key in new else (base(key) if base else "")
    items = [x.strip() for x in (start or "").split(",") if x.strip()]
    vals = [x.strip() for x in (value or "").split(",") if x.strip()]
    if op == APPEND:
        items += [v for v in vals if v not in items]
    else:
        items = [x for x in items if x not in vals]
    return ",".join(items)


def alter_topic(md: model.ClusterMetadata, broker_cfg, name: str, ops, incremental: bool,
                validate_only: bool) -> model.ClusterMetadata:
    """The metadata with topic `name`'s new overrides (`md` itself when validate_only);
    MetadataError / ConfigError when Kafka refuses them."""
    topic = md.topic(name)
    keys = [k for k, _, _ in ops]
    if len(keys) != len(set(keys)):
        raise MetadataError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
    defaults = broker_cfg.log_config_defaults()
    new = apply_ops(topic.configs, ops, incremental, configmod.TOPIC_CONFIGS,
                    lambda k: configmod.to_string(defaults.get(k)))
    configmod.effective_topic_config(broker_cfg, new)  # validates, ConfigError
    new_md = model.set_topic_configs(md, name, new)
    return md if validate_only else new_md


class DynamicBrokerConfigs:
    """The broker's dynamic config layers ({"broker": per-broker, "default": cluster
    default}) as stored in this broker's metadata dir."""

    def __init__(self, log_dir: str):
        self.path = os.path.join(log_dir, store.METADATA_DIR, "broker-configs.json")
        self.layers = load_json(self.path, {"broker": {}, "default": {}})

    def over(self, cfg: configmod.BrokerConfig) -> configmod.BrokerConfig:
        """`cfg` (the static layer) with the dynamic layers on top."""
        return cfg.with_dynamic(broker=self.layers["broker"], default=self.layers["default"])

    def alter(self, cfg, broker_id: int, name: str, ops, incremental: bool,
              validate_only: bool) -> bool:
        """Apply a BROKER resource's ops (name "" = the cluster default, else this
        broker's id); True when the layers changed (and were saved)."""
        per_broker = name != ""
        if per_broker and name != str(broker_id):
            raise MetadataError(ErrorCode.INVALID_REQUEST, f"Unexpected broker id {name}")
        layer = "broker" if per_broker else "default"
        new = apply_ops(self.layers[layer], ops, incremental, configmod.BROKER_CONFIGS,
                        lambda k: configmod.to_string(cfg.default_of(k)), "broker")
        configmod.validate_dynamic_update(new, per_broker)
        if validate_only:
            return False
        self.layers[layer] = new
        atomic_write(self.path, json.dumps(self.layers).encode())
        return True

"""The DescribeConfigs view of broker and topic configs (Kafka's ConfigHelper): values,
sources and synonyms as DescribeConfigsResult entries (snake_case fields), and the
text of `mpbroker serve --help-config`."""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional

from mpbroker.config.broker import BrokerConfig
from mpbroker.config.keys import (BROKER_CONFIGS, PLACEMENT_PREFIX, TOPIC_BROKER_SYNONYMS, TOPIC_CONFIGS,
                                  broker_config_synonyms)
from mpbroker.config.topic import effective_topic_config
from mpbroker.config.types import ConfigSource, ConfigType
from mpbroker.config.validators import validate
from mpbroker.config.values import to_string


def describe_keys_text() -> str:
    """Every broker key with its doc, type, default, valid values, importance and update
    mode, in the order and shape of Kafka's generated broker config docs
    (`mpbroker serve --help-config`). num.workers' default depends on the machine."""
    out = []
    for key in BROKER_CONFIGS.values():
        if key.name == "num.workers":
            default = "the number of CPUs usable by this process"
        else:
            default = "null" if key.default is None else (to_string(key.default, key.type) or '""')
        out.append(key.name)
        out.append(f"    {key.doc}")
        out.append(f"    Type:         {ConfigType.NAMES[key.type].lower()}")
        out.append(f"    Default:      {default}")
        out.append(f"    Valid Values: {key.validator if key.validator is not None else ''}".rstrip())
        out.append(f"    Importance:   {key.importance}")
        out.append(f"    Update Mode:  {key.update_mode}")
        out.append("")
    out.append(f"{PLACEMENT_PREFIX}*")
    out.append("    mpbroker: free-form keys pinning partitions to workers (e.g. placement.topic.<topic>=0,1); "
               "kept as strings for the supervisor.")
    out.append("    Type:         string")
    out.append("    Importance:   low")
    out.append("    Update Mode:  read-only")
    return "\n".join(out) + "\n"



def _static_defaults() -> Dict[str, str]:
    return {k.name: to_string(k.default, k.type) for k in BROKER_CONFIGS.values() if k.default is not None}


def _config_synonyms(cfg: BrokerConfig, name: str, synonyms: List[str], sensitive: bool) -> List[dict]:
    """ConfigHelper.configSynonyms: by source, then by synonym order; then drop
    entries before the first one named ``name`` (as Kafka does)."""
    defaults = _static_defaults()
    if "num.workers" in synonyms:
        defaults["num.workers"] = str(cfg.default_of("num.workers"))
    out = []
    for layer, source in ((cfg.dynamic_broker, ConfigSource.DYNAMIC_BROKER_CONFIG),
                          (cfg.dynamic_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
                          (cfg.static, ConfigSource.STATIC_BROKER_CONFIG),
                          (defaults, ConfigSource.DEFAULT_CONFIG)):
        for syn in synonyms:
            if syn in layer:
                out.append({"name": syn, "value": None if sensitive else layer[syn], "source": source})
    while out and out[0]["name"] != name:
        out.pop(0)
    return out


def _entry(name, value, read_only, source, sensitive, synonyms, type_, doc, include_synonyms, include_documentation):
    return {
        "name": name,
        "value": None if sensitive else value,
        "read_only": read_only,
        "is_default": source == ConfigSource.DEFAULT_CONFIG,      # v0
        "config_source": source,                                  # v1+
        "is_sensitive": sensitive,
        "synonyms": synonyms if include_synonyms else [],          # v1+
        "config_type": type_,                                     # v3+
        "documentation": doc if include_documentation else None,  # v3+
    }


def _wanted(names: List[str], keys: Optional[Iterable[str]]) -> List[str]:
    """`names` limited to the requested `keys` (None: all), in the order of `names`."""
    if keys is None:
        return names
    wanted = set(keys)
    return [n for n in names if n in wanted]


def describe_broker_configs(cfg: BrokerConfig, resource_name: str, keys: Optional[Iterable[str]] = None,
                            include_synonyms: bool = False, include_documentation: bool = False) -> List[dict]:
    """DescribeConfigs for a BROKER resource: ``resource_name`` is the broker id
    (every config) or "" (the cluster-wide dynamic defaults that are set).
    Entries carry the DescribeConfigsResult fields in snake_case."""
    per_broker = resource_name != ""
    if per_broker:
        names = list(BROKER_CONFIGS)
    else:
        names = [n for n in cfg.dynamic_default if n in BROKER_CONFIGS]
    out = []
    for name in _wanted(names, keys):
        key = BROKER_CONFIGS[name]
        if per_broker:
            value = to_string(cfg.values[name], key.type)
        else:
            value = to_string(validate(key, cfg.dynamic_default[name]), key.type)
        syns = _config_synonyms(cfg, name, broker_config_synonyms(name), key.sensitive)
        if not per_broker:
            syns = [s for s in syns if s["source"] == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG]
        source = syns[0]["source"] if syns else ConfigSource.DEFAULT_CONFIG
        out.append(_entry(name, value, not key.dynamic, source, key.sensitive, syns, key.type, key.doc,
                          include_synonyms, include_documentation))
    return out


def describe_topic_configs(cfg: BrokerConfig, overrides: Mapping[str, Any], keys: Optional[Iterable[str]] = None,
                           include_synonyms: bool = False, include_documentation: bool = False) -> List[dict]:
    """DescribeConfigs for a TOPIC resource (ConfigHelper.createTopicConfigEntry)."""
    values = effective_topic_config(cfg, overrides)
    out = []
    for name in _wanted(sorted(TOPIC_CONFIGS), keys):
        key = TOPIC_CONFIGS[name]
        value = to_string(values[name], key.type)
        synonyms = TOPIC_BROKER_SYNONYMS[name]
        syns = _config_synonyms(cfg, synonyms[0], synonyms, key.sensitive)
        if name in overrides:
            syns.insert(0, {"name": name, "value": value, "source": ConfigSource.DYNAMIC_TOPIC_CONFIG})
        source = syns[0]["source"] if syns else ConfigSource.DEFAULT_CONFIG
        out.append(_entry(name, value, False, source, key.sensitive, syns, key.type, key.doc,
                          include_synonyms, include_documentation))
    return out

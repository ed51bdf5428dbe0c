"""Tests for mpbroker/config/describe.py: the DescribeConfigs view and the --help-config text."""
from mpbroker import config as configmod

from mpbroker.config import (
    BROKER_CONFIGS, ConfigSource, ConfigType, describe_broker_configs,
    describe_topic_configs,
)
from tests.mpbroker.config.conftest import cfg


def by_name(entries):
    return {e["name"]: e for e in entries}


def test_describe_topic_sources_and_synonyms():
    c = cfg(**{"log.segment.bytes": "2097152"}).with_dynamic(default={"min.insync.replicas": "2"})
    d = by_name(describe_topic_configs(c, {"cleanup.policy": "compact"}, include_synonyms=True,
                                       include_documentation=True))
    assert d["cleanup.policy"]["config_source"] == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert d["cleanup.policy"]["value"] == "compact"
    assert d["cleanup.policy"]["synonyms"][0] == {"name": "cleanup.policy", "value": "compact", "source": 1}
    assert d["cleanup.policy"]["synonyms"][1]["name"] == "log.cleanup.policy"
    assert d["segment.bytes"]["config_source"] == ConfigSource.STATIC_BROKER_CONFIG
    assert d["segment.bytes"]["value"] == "2097152"
    assert [s["source"] for s in d["segment.bytes"]["synonyms"]] == [4, 5]
    assert d["min.insync.replicas"]["config_source"] == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    assert d["compression.type"]["config_source"] == ConfigSource.DEFAULT_CONFIG
    assert d["compression.type"]["is_default"] is True
    assert d["min.cleanable.dirty.ratio"]["value"] == "0.5"
    assert d["min.cleanable.dirty.ratio"]["config_type"] == ConfigType.DOUBLE
    assert d["cleanup.policy"]["config_type"] == ConfigType.LIST
    assert d["retention.ms"]["value"] == str(7 * 24 * 3600 * 1000)
    assert all(not e["read_only"] and e["documentation"] for e in d.values())
    only = describe_topic_configs(c, {}, keys=["retention.ms"])
    assert [e["name"] for e in only] == ["retention.ms"] and only[0]["synonyms"] == []


def test_describe_broker_per_broker_and_default():
    c = cfg(**{"log.retention.ms": "1000", "ssl.key.password": "secret"})
    c = c.with_dynamic(default={"log.retention.ms": "2000"})
    d = by_name(describe_broker_configs(c, "0", include_synonyms=True))
    assert set(d) == set(BROKER_CONFIGS)
    r = d["log.retention.ms"]
    assert r["value"] == "2000" and r["config_source"] == 3 and r["read_only"] is False
    assert [(s["name"], s["source"]) for s in r["synonyms"]] == [
        ("log.retention.ms", 3), ("log.retention.ms", 4), ("log.retention.hours", 5)]
    assert d["num.partitions"]["read_only"] is True
    assert d["num.partitions"]["config_source"] == ConfigSource.DEFAULT_CONFIG
    pw = d["ssl.key.password"]
    assert pw["is_sensitive"] and pw["value"] is None and pw["config_type"] == ConfigType.PASSWORD
    assert all(s["value"] is None for s in pw["synonyms"])
    assert d["log.cleaner.io.max.bytes.per.second"]["value"] == "1.7976931348623157E308"
    assert d["log.retention.minutes"]["value"] is None
    assert d["num.workers"]["value"] == "4"
    default = describe_broker_configs(c, "", include_synonyms=True)
    assert [e["name"] for e in default] == ["log.retention.ms"]
    assert default[0]["synonyms"] == [{"name": "log.retention.ms", "value": "2000", "source": 3}]


def test_describe_keys_text_lists_every_key_with_type_default_and_doc():
    text = configmod.describe_keys_text()
    blocks = {b.split("\n", 1)[0]: b for b in text.strip().split("\n\n")}
    assert set(configmod.BROKER_CONFIGS) | {"placement.*"} == set(blocks)
    for name, key in configmod.BROKER_CONFIGS.items():
        assert key.doc in blocks[name]
        assert f"Type:         {configmod.ConfigType.NAMES[key.type].lower()}" in blocks[name]
        assert f"Update Mode:  {key.update_mode}" in blocks[name]
    assert "Default:      1073741824" in blocks["log.segment.bytes"]
    assert "Valid Values: [14,...]" in blocks["log.segment.bytes"]
    assert "Default:      null" in blocks["log.dirs"]

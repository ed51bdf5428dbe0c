"""Tests for mpbroker.config: properties syntax, types, validation, derivation, describe."""
import os

import pytest

from mpbroker import config as configmod

from mpbroker.config import (
    BROKER_CONFIGS, TOPIC_BROKER_SYNONYMS, TOPIC_CONFIGS, BrokerConfig, ConfigError, ConfigSource,
    ConfigType, describe_broker_configs, describe_topic_configs, effective_topic_config,
    parse_overrides, parse_properties, parse_value, to_string, validate_topic_config,
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cfg(**props):
    base = {"log.dirs": "/d"}
    base.update({k.replace("_", "."): v for k, v in props.items()})
    return BrokerConfig(base, cpu_count=4, cwd="/cwd")


# ------------------------------------------------------------ properties syntax

def test_properties_syntax_like_java():
    text = (
        "# comment\n"
        "! bang comment\n"
        "   \n"
        "a=1\n"
        "b: 2\n"
        "c 3\n"
        "d   =   spaced value  \n"
        "e=first \\\n"
        "    second \\\n"
        "  third\n"
        "f=tab\\there\\nnew\n"
        "g\\=key=v\n"
        "h=\\u0041BC\n"
        "i=\n"
        "j\n"
        "k=ends with even backslashes \\\\\n"
        "l=x=y:z\n"
        "a=override\n"
    )
    p = parse_properties(text)
    assert p["a"] == "override"
    assert p["b"] == "2"
    assert p["c"] == "3"
    assert p["d"] == "spaced value  "
    assert p["e"] == "first second third"
    assert p["f"] == "tab\there\nnew"
    assert p["g=key"] == "v"
    assert p["h"] == "ABC"
    assert p["i"] == "" and p["j"] == ""
    assert p["k"] == "ends with even backslashes \\"
    assert p["l"] == "x=y:z"
    assert "# comment" not in p and len(p) == 12


def test_overrides():
    assert parse_overrides(["a=b", "c=d=e"]) == {"a": "b", "c": "d=e"}
    with pytest.raises(ConfigError):
        parse_overrides(["novalue"])


def test_from_text_overrides_win():
    c = BrokerConfig.from_text("log.dirs=/x\nnum.partitions=3\n", ["num.partitions=7"], cpu_count=2)
    assert c["num.partitions"] == 7
    assert c.source_of("num.partitions") == ConfigSource.STATIC_BROKER_CONFIG


def test_sample_server_properties_parses():
    c = BrokerConfig.from_file(os.path.join(ROOT, "conf", "server.properties"), cwd="/srv")
    assert c.broker_id == 0 and c.node_id == 0
    assert c.log_dirs == ["/srv/data"]
    assert c.listeners[0].host == "127.0.0.1" and c.listeners[0].port == 9092
    assert c["num.partitions"] == 1 and c["auto.create.topics.enable"] is True
    assert c.unknown == []


def test_sample_server_properties_documents_mpbroker_keys():
    """Every mpbroker-specific key (doc starting with "mpbroker:"), and the Kafka keys
    whose mpbroker default differs from Kafka's, appear in conf/server.properties, set
    or as a commented-out `#key=value` line under a comment."""
    with open(os.path.join(ROOT, "conf", "server.properties")) as f:
        lines = f.read().splitlines()
    shown = {}
    for i, line in enumerate(lines):
        text = line.lstrip("#").strip()
        if "=" in text and not text.startswith(" "):
            shown.setdefault(text.split("=", 1)[0].strip(), i)
    keys = [k.name for k in BROKER_CONFIGS.values() if k.doc.startswith("mpbroker:")]
    keys += ["max.broker.partitions"]
    assert len(keys) > 10
    missing = [k for k in keys if k not in shown]
    assert missing == [], f"not in conf/server.properties: {missing}"
    for k in keys:     # a comment line right above the key (or above its group's first key)
        i = shown[k]
        while i > 0 and lines[i - 1].startswith("#") and "=" in lines[i - 1] \
                and not lines[i - 1].startswith("# "):
            i -= 1
        assert i > 0 and lines[i - 1].startswith("# "), f"{k} has no comment above it"


# ------------------------------------------------------------ types and errors

@pytest.mark.parametrize("type_,raw,expected", [
    (ConfigType.BOOLEAN, " TRUE ", True), (ConfigType.BOOLEAN, "false", False),
    (ConfigType.INT, " 42 ", 42), (ConfigType.INT, "-7", -7), (ConfigType.INT, "+3", 3),
    (ConfigType.LONG, "9223372036854775807", 2**63 - 1), (ConfigType.SHORT, "-1", -1),
    (ConfigType.DOUBLE, "0.5", 0.5), (ConfigType.DOUBLE, "1e3", 1000.0),
    (ConfigType.LIST, " compact , delete ", ["compact", "delete"]), (ConfigType.LIST, "", []),
    (ConfigType.STRING, "  x  ", "x"),
])
def test_parse_value(type_, raw, expected):
    assert parse_value("k", type_, raw) == expected


@pytest.mark.parametrize("type_,raw,reason", [
    (ConfigType.BOOLEAN, "yes", "Expected value to be either true or false"),
    (ConfigType.INT, "1.0", "Not a number of type INT"),
    (ConfigType.INT, "2147483648", "Not a number of type INT"),
    (ConfigType.INT, "1_000", "Not a number of type INT"),
    (ConfigType.SHORT, "40000", "Not a number of type SHORT"),
    (ConfigType.LONG, "abc", "Not a number of type LONG"),
    (ConfigType.DOUBLE, "x", "Not a number of type DOUBLE"),
])
def test_parse_errors_match_kafka(type_, raw, reason):
    with pytest.raises(ConfigError) as e:
        parse_value("some.key", type_, raw)
    assert str(e.value) == f"Invalid value {raw} for configuration some.key: {reason}"


def test_validator_messages():
    with pytest.raises(ConfigError, match=r"^Invalid value 0 for configuration num.partitions: Value must be at least 1$"):
        cfg(num_partitions="0")
    with pytest.raises(ConfigError, match="String must be one of: CreateTime, LogAppendTime"):
        cfg(**{"log.message.timestamp.type": "Now"})
    with pytest.raises(ConfigError, match="Invalid value bogus for configuration log.cleanup.policy: String must be one of: compact, delete"):
        cfg(**{"log.cleanup.policy": "delete,bogus"})
    with pytest.raises(ConfigError, match="Value must be no more than 1"):
        cfg(**{"log.cleaner.min.cleanable.ratio": "1.5"})
    with pytest.raises(ConfigError) as e:
        cfg(**{"compression.type": "brotli"})
    assert e.value.error_code == 40


def test_cross_checks_like_kafka_validate_values():
    with pytest.raises(ConfigError, match="broker.id must be greater than or equal to -1"):
        cfg(broker_id="5000")
    with pytest.raises(ConfigError, match="broker.id must be greater than or equal to 0"):
        cfg(**{"broker.id.generation.enable": "false"})
    with pytest.raises(ConfigError, match="node.id"):
        cfg(**{"broker.id": "1", "node.id": "2"})
    with pytest.raises(ConfigError, match="log.retention.ms must be unlimited"):
        cfg(**{"log.retention.ms": "0"})
    with pytest.raises(ConfigError, match="log.roll.ms must be greater than or equal to 1"):
        cfg(**{"log.roll.ms": "0"})
    with pytest.raises(ConfigError, match="nonroutable meta-address 0.0.0.0"):
        cfg(listeners="PLAINTEXT://0.0.0.0:9092")
    with pytest.raises(ConfigError, match="different name"):
        cfg(listeners="PLAINTEXT://:9092,PLAINTEXT://:9093")
    with pytest.raises(ConfigError, match="different port"):
        cfg(listeners="PLAINTEXT://:9092,SSL://:9092")
    with pytest.raises(ConfigError, match="No security protocol defined for listener FOO"):
        cfg(listeners="FOO://:9092")
    with pytest.raises(ConfigError, match="At least one log directory"):
        BrokerConfig({"log.dirs": " , "}, cpu_count=1)


def test_node_id_mirrors_broker_id():
    assert cfg(broker_id="3").node_id == 3
    assert cfg(**{"node.id": "4"}).broker_id == 4


def test_unknown_and_placement_keys_are_kept():
    c = cfg(**{"placement.topic.orders": "0,1", "placement.strategy": "hash", "some.plugin.key": "x"})
    assert c.placement == {"topic.orders": "0,1", "strategy": "hash"}
    assert c.unknown == ["some.plugin.key"]
    assert c.get("some.plugin.key") == "x"


# ------------------------------------------------------------ derived values

def test_log_dirs_fallback_and_relative_paths():
    c = BrokerConfig({}, cpu_count=1, cwd="/w")
    assert c.log_dirs == ["/tmp/kafka-logs"]
    c = BrokerConfig({"log.dir": "rel"}, cpu_count=1, cwd="/w")
    assert c.log_dirs == ["/w/rel"]
    c = BrokerConfig({"log.dir": "ignored", "log.dirs": "./a, /b"}, cpu_count=1, cwd="/w")
    assert c.log_dirs == ["/w/a", "/b"]
    assert c.admin_socket == "/w/a/.mpbroker-admin.sock"


def test_retention_precedence():
    assert cfg().log_retention_time_ms == 168 * 3600000
    assert cfg(**{"log.retention.hours": "1"}).log_retention_time_ms == 3600000
    assert cfg(**{"log.retention.hours": "1", "log.retention.minutes": "5"}).log_retention_time_ms == 300000
    assert cfg(**{"log.retention.minutes": "5", "log.retention.ms": "1234"}).log_retention_time_ms == 1234
    assert cfg(**{"log.retention.ms": "-5"}).log_retention_time_ms == -1
    assert cfg(**{"log.retention.hours": "-1"}).log_retention_time_ms == -1


def test_roll_and_flush_derivation():
    assert cfg().log_roll_time_ms == 168 * 3600000
    assert cfg(**{"log.roll.hours": "2"}).log_roll_time_ms == 7200000
    assert cfg(**{"log.roll.hours": "2", "log.roll.ms": "10"}).log_roll_time_ms == 10
    assert cfg(**{"log.roll.jitter.hours": "1"}).log_roll_time_jitter_ms == 3600000
    assert cfg().log_flush_interval_ms == 2**63 - 1
    assert cfg(**{"log.flush.scheduler.interval.ms": "500"}).log_flush_interval_ms == 500
    assert cfg(**{"log.flush.interval.ms": "7", "log.flush.scheduler.interval.ms": "500"}).log_flush_interval_ms == 7
    assert cfg().offsets_retention_ms == 7 * 24 * 3600 * 1000


def test_num_workers_defaults_to_usable_cpus():
    assert BrokerConfig({}, cwd="/").num_workers == len(os.sched_getaffinity(0))
    assert cfg().num_workers == 4
    assert cfg(**{"num.workers": "2"}).num_workers == 2
    with pytest.raises(ConfigError):
        cfg(**{"num.workers": "0"})


def test_defaults_table_matches_kafka():
    c = cfg()
    assert c["log.segment.bytes"] == 1073741824
    assert c["message.max.bytes"] == 1048588
    assert c["socket.request.max.bytes"] == 104857600
    assert c["offsets.topic.num.partitions"] == 50
    assert c["group.min.session.timeout.ms"] == 6000
    assert c["group.max.session.timeout.ms"] == 1800000
    assert c["fetch.max.bytes"] == 57671680
    assert c["replica.lag.time.max.ms"] == 30000
    assert c["log.index.size.max.bytes"] == 10485760
    assert c["log.cleanup.policy"] == ["delete"]
    assert c["unclean.leader.election.enable"] is False
    assert BROKER_CONFIGS["log.retention.ms"].update_mode == "cluster-wide"
    assert BROKER_CONFIGS["log.retention.hours"].update_mode == "read-only"
    assert BROKER_CONFIGS["listeners"].update_mode == "per-broker"


# ------------------------------------------------------------ dynamic layers

def test_dynamic_layers_precedence_and_modes():
    c = cfg(**{"log.retention.ms": "1000"})
    c2 = c.with_dynamic(default={"log.retention.ms": "2000"})
    assert c2.log_retention_time_ms == 2000
    assert c2.source_of("log.retention.ms") == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    c3 = c2.with_dynamic(broker={"log.retention.ms": "3000"})
    assert c3.log_retention_time_ms == 3000
    assert c3.source_of("log.retention.ms") == ConfigSource.DYNAMIC_BROKER_CONFIG
    with pytest.raises(ConfigError, match=r"Cannot update these configs dynamically: Set\(num.partitions\)"):
        c.with_dynamic(broker={"num.partitions": "3"})
    with pytest.raises(ConfigError, match="broker id must be specified"):
        c.with_dynamic(default={"listeners": "PLAINTEXT://:9093"})
    with pytest.raises(ConfigError, match="Not a number of type LONG"):
        c.with_dynamic(default={"log.retention.ms": "soon"})


# ------------------------------------------------------------ topic configs

def test_topic_config_synonyms_cover_topicconfig_names():
    assert set(TOPIC_CONFIGS) == set(TOPIC_BROKER_SYNONYMS)
    assert TOPIC_BROKER_SYNONYMS["segment.bytes"] == ["log.segment.bytes"]
    assert TOPIC_BROKER_SYNONYMS["retention.ms"] == ["log.retention.ms", "log.retention.minutes", "log.retention.hours"]
    assert TOPIC_BROKER_SYNONYMS["max.message.bytes"] == ["message.max.bytes"]
    assert TOPIC_BROKER_SYNONYMS["file.delete.delay.ms"] == ["log.segment.delete.delay.ms"]
    for synonyms in TOPIC_BROKER_SYNONYMS.values():
        assert all(s in BROKER_CONFIGS for s in synonyms)


def test_effective_topic_config_uses_broker_synonyms():
    c = cfg(**{"log.retention.hours": "2", "log.segment.bytes": "1048576", "log.roll.hours": "1",
               "log.cleanup.policy": "compact"})
    eff = effective_topic_config(c, {"retention.bytes": "100"})
    assert eff["retention.ms"] == 7200000
    assert eff["segment.bytes"] == 1048576
    assert eff["segment.ms"] == 3600000
    assert eff["cleanup.policy"] == ["compact"]
    assert eff["retention.bytes"] == 100
    assert eff["max.message.bytes"] == 1048588
    assert set(eff) == set(TOPIC_CONFIGS)


def test_topic_config_validation():
    assert validate_topic_config({"cleanup.policy": "compact,delete"}) == {"cleanup.policy": ["compact", "delete"]}
    with pytest.raises(ConfigError, match="Unknown topic config name: nope"):
        validate_topic_config({"nope": "1"})
    with pytest.raises(ConfigError, match="Invalid value -2 for configuration retention.ms: Value must be at least -1"):
        validate_topic_config({"retention.ms": "-2"})
    with pytest.raises(ConfigError, match="min.compaction.lag.ms"):
        validate_topic_config({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})
    with pytest.raises(ConfigError, match="Value must be between 1 and 9"):
        validate_topic_config({"compression.gzip.level": "12"})
    assert validate_topic_config({"compression.zstd.level": "-5"}) == {"compression.zstd.level": -5}


# ------------------------------------------------------------ describe

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


def test_to_string_java_forms():
    assert to_string(True) == "true"
    assert to_string(["a", "b"]) == "a,b"
    assert to_string(0.9) == "0.9"
    assert to_string(10.0) == "10.0"
    assert to_string(1e10) == "1.0E10"
    assert to_string(0.0001) == "1.0E-4"
    assert to_string(None) is None


# ------------------------------------------------- unknown, ignored and refused keys

def test_typos_are_unknown_and_kafka_keys_mpbroker_ignores_are_not():
    c = cfg(**{"log.dirz": "x", "ssl.keystore.location": "/k", "metric.reporters": "",
               "controller.quorum.voters": "1@h:9093", "sasl.enabled.mechanisms": "PLAIN"})
    assert c.unknown == ["log.dirz"]
    assert c.ignored == ["controller.quorum.voters", "metric.reporters", "sasl.enabled.mechanisms",
                         "ssl.keystore.location"]
    assert configmod.unknown_config_warning("log.dirz") == \
        "The configuration 'log.dirz' was supplied but isn't a known config."


def test_keys_mpbroker_defines_are_never_ignored():
    c = cfg(**{"ssl.keystore.password": "x"})          # defined (PASSWORD) and also an ssl. key
    assert c.ignored == [] and c.unknown == []


@pytest.mark.parametrize("overrides, message", [
    ({"listeners": "SSL://127.0.0.1:9093"}, "listener SSL uses security protocol SSL"),
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:9093"}, "SASL_PLAINTEXT, which mpbroker does not implement"),
    ({"listeners": "PLAINTEXT://:9092,INTERNAL://:9093",
      "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL"},
     "listener INTERNAL uses security protocol SASL_SSL"),
    ({"security.inter.broker.protocol": "SSL"}, "security.inter.broker.protocol: mpbroker does not implement SSL"),
    ({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"},
     "mpbroker has no authorizer"),
])
def test_security_settings_mpbroker_cannot_honour_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        cfg(**overrides)
    assert cfg(**{"authorizer.class.name": ""}).get("authorizer.class.name") == ""


def test_log_level_is_a_documented_key():
    assert cfg(**{"log.level": "debug"})["log.level"] == "debug"
    assert cfg()["log.level"] == "INFO"
    with pytest.raises(ConfigError, match="Invalid value LOUD for configuration log.level"):
        cfg(**{"log.level": "LOUD"})


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


def test_queued_max_request_bytes_must_hold_one_request():
    """KafkaConfig: a bounded request pool smaller than one request could never fill."""
    with pytest.raises(ConfigError, match="queued.max.request.bytes must be larger or equal "
                                          "to socket.request.max.bytes"):
        cfg(**{"queued.max.request.bytes": "1000", "socket.request.max.bytes": "1001"})
    assert cfg(**{"queued.max.request.bytes": "1001", "socket.request.max.bytes": "1001"})
    assert cfg()["queued.max.request.bytes"] == -1            # Kafka's default: unbounded
    assert cfg()["max.incremental.fetch.session.cache.slots"] == 1000

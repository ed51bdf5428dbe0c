"""Tests for mpbroker/config/broker.py: BrokerConfig: derivations and cross-checks as KafkaConfig does."""
import os

import pytest

from mpbroker import config as configmod

from mpbroker.config import BROKER_CONFIGS, BrokerConfig, ConfigError, ConfigSource
from tests.mpbroker.config.conftest import cfg

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


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


def test_typos_are_unknown_and_kafka_keys_mpbroker_ignores_are_not():
    c = cfg(**{"log.dirz": "x", "ssl.keymanager.algorithm": "SunX509", "metric.reporters": "",
               "controller.quorum.voters": "1@h:9093", "sasl.kerberos.service.name": "kafka",
               "listener.name.sasl_ssl.plain.sasl.jaas.config": "x required;",
               "listener.name.ssl.ssl.client.auth": "required", "listener.name.ssl.no.such.key": "1"})
    assert c.unknown == ["listener.name.ssl.no.such.key", "log.dirz"]
    assert c.ignored == ["controller.quorum.voters", "metric.reporters", "sasl.kerberos.service.name",
                         "ssl.keymanager.algorithm"]
    assert configmod.unknown_config_warning("log.dirz") == \
        "The configuration 'log.dirz' was supplied but isn't a known config."


@pytest.mark.parametrize("overrides, message", [
    ({"security.inter.broker.protocol": "SSL"}, "security.inter.broker.protocol=SSL: no listener named SSL"),
    ({"listeners": "INTERNAL://:9093", "listener.security.protocol.map": "INTERNAL:SASL_SSL"},
     "security.inter.broker.protocol=PLAINTEXT: no listener named PLAINTEXT"),
    ({"authorizer.class.name": "com.example.MyAuthorizer"},
     "mpbroker implements only the ACL authorizer"),
])
def test_security_settings_mpbroker_cannot_honour_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        cfg(**overrides).inter_broker_listener
    assert cfg(**{"authorizer.class.name": ""}).get("authorizer.class.name") == ""
    for name in ("kafka.security.authorizer.AclAuthorizer",
                 "org.apache.kafka.metadata.authorizer.StandardAuthorizer"):
        assert cfg(**{"authorizer.class.name": name}).get("authorizer.class.name") == name


@pytest.mark.parametrize("overrides, listener", [
    ({"listeners": "SSL://127.0.0.1:9093", "security.inter.broker.protocol": "SSL"}, "SSL"),
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:9093",
      "security.inter.broker.protocol": "SASL_PLAINTEXT"}, "SASL_PLAINTEXT"),
    ({"listeners": "PLAINTEXT://:9092,INTERNAL://:9093",
      "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL",
      "inter.broker.listener.name": "INTERNAL"}, "INTERNAL"),
    ({"listeners": "PLAINTEXT://:9092,SSL://:9093"}, "PLAINTEXT"),
])
def test_tls_and_sasl_listeners_are_served_and_pick_the_inter_broker_one(overrides, listener):
    c = cfg(**overrides)
    assert c.inter_broker_listener.listener_name == listener


def test_queued_max_request_bytes_must_hold_one_request():
    """KafkaConfig: a bounded request pool smaller than one request could never fill."""
    with pytest.raises(ConfigError, match="queued.max.request.bytes must be larger or equal "
                                          "to socket.request.max.bytes"):
        cfg(**{"queued.max.request.bytes": "1000", "socket.request.max.bytes": "1001"})
    assert cfg(**{"queued.max.request.bytes": "1001", "socket.request.max.bytes": "1001"})
    assert cfg()["queued.max.request.bytes"] == -1            # Kafka's default: unbounded
    assert cfg()["max.incremental.fetch.session.cache.slots"] == 1000

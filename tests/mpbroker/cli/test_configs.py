"""`mpbroker configs` (topic and broker entities) and its --add-config parser."""
from __future__ import annotations

import pytest

from mpbroker.cli.admin import CliError
from mpbroker.cli.configs import parse_config_list
from tests.mpbroker.cli.conftest import failed_one_line


def test_parse_config_list():
    assert parse_config_list("a=1,b=[x,y],c=") == {"a": "1", "b": "x,y", "c": ""}
    assert parse_config_list("cleanup.policy=[delete,compact]") == {"cleanup.policy": "delete,compact"}
    for bad in ("a", "=1", "a=[1,2", "a=[1]x"):
        with pytest.raises(CliError):
            parse_config_list(bad)


def test_topic_configs(cli, make_topic):
    topic = make_topic()
    out = cli.json("configs", "describe", "--entity-type", "topics", "--entity-name", topic)
    assert out["configs"] == []
    cli("configs", "alter", "--entity-type", "topics", "--entity-name", topic,
        "--add-config", "retention.ms=60000,cleanup.policy=[delete,compact]")
    out = cli.json("configs", "describe", "--topic", topic)
    got = {c["name"]: (c["value"], c["source"]) for c in out["configs"]}
    assert got == {"retention.ms": ("60000", "DYNAMIC_TOPIC_CONFIG"),
                   "cleanup.policy": ("delete,compact", "DYNAMIC_TOPIC_CONFIG")}
    text = cli("configs", "describe", "--topic", topic).stdout_text
    assert text.startswith(f"Dynamic configs for topic {topic} are:\n")
    assert "  retention.ms=60000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=60000" in text
    cli("configs", "alter", "--topic", topic, "--delete-config", "retention.ms")
    assert [c["name"] for c in cli.json("configs", "describe", "--topic", topic)["configs"]] \
        == ["cleanup.policy"]
    every = cli.json("configs", "describe", "--topic", topic, "--all")["configs"]
    assert {"segment.bytes", "retention.ms"} <= {c["name"] for c in every}
    line = failed_one_line(cli("configs", "alter", "--topic", topic, "--add-config",
                               "no.such.key=1", check=False))
    assert "INVALID_CONFIG" in line
    line = failed_one_line(cli("configs", "describe", "--topic", "no-such-topic-cfg", check=False))
    assert "UNKNOWN_TOPIC_OR_PARTITION" in line
    failed_one_line(cli("configs", "alter", "--topic", topic, "--add-config", "a=1",
                        "--delete-config", "a", check=False), code=2)
    failed_one_line(cli("configs", "describe", check=False), code=2)


def test_broker_configs(cli):
    """Per-broker and cluster-default dynamic configs; the default is cleaned up."""
    key = "log.cleaner.backoff.ms"
    try:
        cli("configs", "alter", "--entity-type", "brokers", "--entity-default",
            "--add-config", f"{key}=16000")
        dflt = cli.json("configs", "describe", "--broker-defaults")["configs"]
        assert [(c["name"], c["value"], c["source"]) for c in dflt] == \
            [(key, "16000", "DYNAMIC_DEFAULT_BROKER_CONFIG")]
        mine = {c["name"]: c for c in cli.json("configs", "describe", "--broker", 1)["configs"]}
        assert mine[key]["value"] == "16000"
        assert "the default broker" in cli("configs", "describe", "--broker-defaults").stdout_text
    finally:
        cli("configs", "alter", "--broker-defaults", "--delete-config", key)
    assert cli.json("configs", "describe", "--broker-defaults")["configs"] == []
    every = {c["name"]: c for c in cli.json("configs", "describe", "--broker", 1, "--all")["configs"]}
    assert every["broker.id"]["value"] == "1" and every["broker.id"]["source"] == "STATIC_BROKER_CONFIG"

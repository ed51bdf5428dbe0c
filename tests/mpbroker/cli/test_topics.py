"""`mpbroker topics` against the real broker (subprocesses, --json parsed)."""
from __future__ import annotations

from tests.integration.broker import wait_for_topic
from tests.mpbroker.cli.conftest import failed_one_line, wait_until


def test_topic_lifecycle(cli, topic_name):
    r = cli("topics", "create", topic_name, "--partitions", 3, "--config", "retention.ms=123456")
    assert r.stdout_text.strip() == f"Created topic {topic_name}."
    wait_for_topic(cli.bootstrap, topic_name, 3)
    assert topic_name in cli.json("topics", "list")

    [t] = cli.json("topics", "describe", "--topic", topic_name)
    assert t["topic"] == topic_name and t["partition_count"] == 3
    assert t["replication_factor"] == 1 and t["topic_id"] and not t["internal"]
    assert t["configs"] == {"retention.ms": "123456"}
    assert [p["partition"] for p in t["partitions"]] == [0, 1, 2]
    assert all(p["leader"] == 1 and p["isr"] == [1] for p in t["partitions"])
    text = cli("topics", "describe", topic_name).stdout_text
    assert (f"Topic: {topic_name}\tTopicId: {t['topic_id']}\tPartitionCount: 3\t"
            "ReplicationFactor: 1\tConfigs: retention.ms=123456") in text
    assert f"\tTopic: {topic_name}\tPartition: 2\tLeader: 1\tReplicas: 1\tIsr: 1" in text

    # creating it again: Kafka's error, one line; --if-not-exists: fine
    line = failed_one_line(cli("topics", "create", topic_name, check=False))
    assert "TOPIC_ALREADY_EXISTS" in line
    cli("topics", "create", topic_name, "--if-not-exists")

    # alter: more partitions, a config set and one removed
    out = cli.json("topics", "alter", topic_name, "--partitions", 5,
                   "--config", "cleanup.policy=compact", "--delete-config", "retention.ms")
    assert out["partitions"] == 5
    wait_for_topic(cli.bootstrap, topic_name, 5)
    [t] = cli.json("topics", "describe", topic_name)
    assert t["partition_count"] == 5 and t["configs"] == {"cleanup.policy": "compact"}
    line = failed_one_line(cli("topics", "alter", topic_name, "--partitions", 2, check=False))
    assert "INVALID_PARTITIONS" in line
    line = failed_one_line(cli("topics", "alter", topic_name, "--config", "no.such.config=1",
                               check=False))
    assert "INVALID_CONFIG" in line

    assert cli.json("topics", "delete", topic_name) == {"deleted": [topic_name], "missing": []}
    wait_until(lambda: topic_name not in cli.json("topics", "list"), what="topic gone")
    line = failed_one_line(cli("topics", "delete", topic_name, check=False))
    assert "UNKNOWN_TOPIC_OR_PARTITION" in line
    assert cli.json("topics", "delete", topic_name, "--if-exists")["missing"] == [topic_name]
    line = failed_one_line(cli("topics", "describe", topic_name, check=False))
    assert "UNKNOWN_TOPIC_OR_PARTITION" in line


def test_topics_bad_arguments(cli, topic_name):
    failed_one_line(cli("topics", "create", check=False), code=2)
    failed_one_line(cli("topics", "create", topic_name, "--config", "novalue", check=False), code=2)
    failed_one_line(cli("topics", "alter", topic_name, check=False), code=2)
    line = failed_one_line(cli("topics", "create", "bad/name", check=False))
    assert "INVALID_TOPIC_EXCEPTION" in line and "bad/name" in line   # Kafka's name, not librdkafka's
    assert not {"__consumer_offsets", "__transaction_state"} & \
        set(cli.json("topics", "list", "--exclude-internal"))

"""`mpbroker offsets` (kafka-get-offsets): earliest, latest, by timestamp."""
from __future__ import annotations

from tests.integration.broker import producer
from tests.mpbroker.cli.conftest import failed_one_line


def test_offsets_by_time(cli, make_topic):
    topic = make_topic(partitions=2)
    base = 1_700_000_000_000
    p = producer(cli.bootstrap)
    for i in range(3):
        p.produce(topic, value=b"x", partition=0, timestamp=base + i * 1000)
    assert p.flush(30) == 0

    def offsets(*args):
        return {(r["topic"], r["partition"]): r["offset"]
                for r in cli.json("offsets", "--topic", topic, *args)}

    assert offsets() == {(topic, 0): 3, (topic, 1): 0}
    assert offsets("--time", "earliest") == {(topic, 0): 0, (topic, 1): 0}
    assert offsets("--time", -2, "--partitions", "0") == {(topic, 0): 0}
    assert offsets("--time", base + 1000, "--partitions", "0") == {(topic, 0): 1}
    assert offsets("--time", base + 1, "--partitions", "0") == {(topic, 0): 1}
    assert offsets("--time", base + 10_000, "--partitions", "0") == {(topic, 0): None}
    assert offsets("--time", "max-timestamp", "--partitions", "0") == {(topic, 0): 2}
    text = cli("offsets", "--topic", topic, "--time", base + 10_000).stdout_text
    assert text.splitlines() == [f"{topic}:0:", f"{topic}:1:"]
    assert f"{topic}:0:3" in cli("offsets").stdout_text       # every topic
    failed_one_line(cli("offsets", "--topic", topic, "--time", "soon", check=False), 2)
    line = failed_one_line(cli("offsets", "--topic", topic, "--partitions", "5", check=False))
    assert "UNKNOWN_TOPIC_OR_PARTITION" in line
    line = failed_one_line(cli("offsets", "--topic", "no-such-topic-off", check=False))
    assert "UNKNOWN_TOPIC_OR_PARTITION" in line

"""`mpbroker groups` on a real group: a confluent-kafka consumer commits, the tool
describes (lag) and resets its offsets, and the consumer resumes from the new ones."""
from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer

from tests.integration.broker import producer
from tests.mpbroker.cli.conftest import failed_one_line, wait_until


def _member(bootstrap: str, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "enable.auto.commit": False, "auto.offset.reset": "earliest",
                     "session.timeout.ms": 10000})


def _consume(c: Consumer, n: int, timeout: float = 30.0) -> list[tuple[int, int]]:
    """(partition, offset) of the next n records."""
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None or m.error():
            continue
        got.append((m.partition(), m.offset()))
    assert len(got) == n, got
    return got


def _current(cli, group: str) -> dict:
    [g] = cli.json("groups", "describe", "--group", group)
    return {(o["topic"], o["partition"]): o["current_offset"] for o in g["offsets"]}


def test_describe_reset_resume(cli, make_topic):
    topic = make_topic(partitions=2)
    group = f"cli-group-{uuid.uuid4().hex[:8]}"
    p = producer(cli.bootstrap)
    for i in range(10):
        p.produce(topic, value=b"v%d" % i, partition=i % 2)
    assert p.flush(30) == 0

    c = _member(cli.bootstrap, group)
    c.subscribe([topic])
    _consume(c, 10)
    c.commit(asynchronous=False)

    # active group: describe shows the member per partition; reset is refused
    [g] = cli.json("groups", "describe", "--group", group)
    assert g["state"] == "Stable" and len(g["members"]) == 1
    rows = {o["partition"]: o for o in g["offsets"]}
    assert {k: (v["current_offset"], v["log_end_offset"], v["lag"]) for k, v in rows.items()} \
        == {0: (5, 5, 0), 1: (5, 5, 0)}
    assert rows[0]["consumer_id"] == g["members"][0]["consumer_id"]
    assert group in {x["group"] for x in cli.json("groups", "list")}
    assert group in cli("groups", "list").stdout_text.split()
    state = cli("groups", "describe", "--group", group, "--state").stdout_text.splitlines()
    assert state[0].split() == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE",
                                "#MEMBERS"]
    assert state[1].split()[0] == group and state[1].split()[-2:] == ["Stable", "1"]
    members = cli("groups", "describe", "--group", group, "--members").stdout_text.splitlines()
    assert members[1].split()[0] == group and members[1].split()[-1] == "2"
    assert group in {x["group"] for x in cli.json("groups", "describe", "--all-groups")}
    line = failed_one_line(cli("groups", "reset-offsets", "--group", group, "--topic", topic,
                               "--to-earliest", "--execute", check=False))
    assert "inactive" in line and "Stable" in line
    c.close()
    wait_until(lambda: cli.json("groups", "describe", "--group", group)[0]["state"] == "Empty",
               what="group empty")

    # more records: lag per partition
    for i in range(3):
        p.produce(topic, value=b"late", partition=0)
    assert p.flush(30) == 0
    [g] = cli.json("groups", "describe", "--group", group)
    assert {o["partition"]: o["lag"] for o in g["offsets"]} == {0: 3, 1: 0}
    assert "has no active members" in cli("groups", "describe", "--group", group).stdout_text

    # dry run (the default) changes nothing
    plan = cli.json("groups", "reset-offsets", "--group", group, "--topic", topic,
                    "--to-earliest")
    assert not plan["executed"]
    assert [(o["partition"], o["new_offset"]) for o in plan["offsets"]] == [(0, 0), (1, 0)]
    assert _current(cli, group) == {(topic, 0): 5, (topic, 1): 5}

    # --shift-by on one partition, clamped to the log
    out = cli.json("groups", "reset-offsets", "--group", group, "--topic", f"{topic}:0",
                   "--shift-by", "-2", "--execute")
    assert out["executed"] and [o["new_offset"] for o in out["offsets"]] == [3]
    cli("groups", "reset-offsets", "--group", group, "--topic", f"{topic}:1",
        "--to-offset", 99, "--execute")
    assert _current(cli, group) == {(topic, 0): 3, (topic, 1): 5}
    cli("groups", "reset-offsets", "--group", group, "--all-topics", "--to-datetime",
        "2000-01-01T00:00:00.000Z", "--execute")           # before every record: the start
    assert _current(cli, group) == {(topic, 0): 0, (topic, 1): 0}
    cli("groups", "reset-offsets", "--group", group, "--topic", f"{topic}:0",
        "--to-offset", 6, "--execute")
    text = cli("groups", "reset-offsets", "--group", group, "--all-topics", "--to-latest").stdout_text
    assert "NEW-OFFSET" in text and "--execute" in text

    # the consumer resumes from the reset offsets: p0 at 6 (2 records), p1 at 0 (5)
    c = _member(cli.bootstrap, group)
    c.subscribe([topic])
    got = _consume(c, 7)
    assert sorted(got) == [(0, 6), (0, 7)] + [(1, o) for o in range(5)]
    c.close()

    # delete-offsets of one partition, then the group
    wait_until(lambda: cli.json("groups", "describe", "--group", group)[0]["state"] == "Empty",
               what="group empty")
    out = cli.json("groups", "delete-offsets", "--group", group, "--topic", f"{topic}:1")
    assert out["partitions"] == [{"topic": topic, "partition": 1, "error": None}]
    assert set(_current(cli, group)) == {(topic, 0)}
    assert cli.json("groups", "delete", "--group", group) == [{"group": group, "error": None}]
    assert group not in {x["group"] for x in cli.json("groups", "list")}
    line = failed_one_line(cli("groups", "delete", "--group", group, check=False))
    assert "GROUP_ID_NOT_FOUND" in line
    assert cli("groups", "describe", "--group", group).stdout_text == \
        f"Consumer group '{group}' does not exist.\n"


def test_reset_argument_errors(cli, make_topic):
    topic = make_topic()
    for args in (["--topic", topic],                                      # no target
                 ["--to-earliest"],                                       # no topic scope
                 ["--topic", topic, "--all-topics", "--to-latest"],
                 ["--topic", topic, "--to-latest", "--to-earliest"],
                 ["--topic", f"{topic}:x", "--to-latest"],
                 ["--topic", topic, "--to-datetime", "yesterday"]):
        failed_one_line(cli("groups", "reset-offsets", "--group", "g", *args, check=False), 2)
    line = failed_one_line(cli("groups", "reset-offsets", "--group", "g", "--topic",
                               f"{topic}:7", "--to-latest", check=False))
    assert "UNKNOWN_TOPIC_OR_PARTITION" in line

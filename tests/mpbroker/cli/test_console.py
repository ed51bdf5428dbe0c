"""`mpbroker produce` / `mpbroker consume`: keys, headers, partitions, offsets, groups,
format strings, JSON."""
from __future__ import annotations

import json
import uuid

from tests.mpbroker.cli.conftest import failed_one_line


def test_produce_consume(cli, make_topic):
    topic = make_topic(partitions=2)
    out = cli("produce", "--topic", topic, "--partition", 1, "--key-separator", ":",
              "--header", "src=cli", "--header", "n=1", "--json",
              input="k1:v1\nk2:v:2\n:empty-key\n")
    acks = [json.loads(ln) for ln in out.stdout_text.splitlines()]
    assert [(a["partition"], a["offset"]) for a in acks] == [(1, 0), (1, 1), (1, 2)]
    cli("produce", "--topic", topic, "--partition", 0, "--compression", "zstd",
        input="plain\nno key here\n")

    r = cli("consume", "--topic", topic, "--from-beginning", "--max-messages", 5,
            "--format", r"%t|%p|%o|%k|%s|%h|%K\n")
    lines = sorted(r.stdout_text.splitlines())
    assert lines == sorted([f"{topic}|0|0||plain||-1", f"{topic}|0|1||no key here||-1",
                            f"{topic}|1|0|k1|v1|src=cli,n=1|2", f"{topic}|1|1|k2|v:2|src=cli,n=1|2",
                            f"{topic}|1|2||empty-key|src=cli,n=1|0"])
    assert "Processed a total of 5 messages" in r.stderr_text

    recs = [json.loads(ln) for ln in cli("consume", "--topic", topic, "--partition", 1,
                                         "--offset", 1, "--max-messages", 2, "--json"
                                         ).stdout_text.splitlines()]
    assert [(x["offset"], x["key"], x["value"]) for x in recs] == [(1, "k2", "v:2"), (2, "", "empty-key")]
    assert recs[0]["headers"] == [["src", "cli"], ["n", "1"]]
    assert recs[0]["timestamp_type"] == "CreateTime"

    # a default-format consumer from the latest offset that sees nothing ends on --timeout-ms
    r = cli("consume", "--topic", topic, "--timeout-ms", 1500)
    assert r.stdout == b"" and "Processed a total of 0 messages" in r.stderr_text

    # with --group: commits what it read; a second run continues after it
    group = f"console-{uuid.uuid4().hex[:8]}"
    first = cli("consume", "--topic", topic, "--group", group, "--offset", "earliest",
                "--max-messages", 5).stdout_text.splitlines()
    assert sorted(first) == sorted(["plain", "no key here", "v1", "v:2", "empty-key"])
    [g] = cli.json("groups", "describe", "--group", group)
    assert {o["partition"]: o["current_offset"] for o in g["offsets"]} == {0: 2, 1: 3}
    cli("produce", "--topic", topic, "--partition", 0, input="after\n")
    assert cli("consume", "--topic", topic, "--group", group, "--max-messages", 1
               ).stdout_text == "after\n"


def test_console_errors(cli, make_topic):
    topic = make_topic()
    line = failed_one_line(cli("produce", "--topic", topic, "--key-separator", ":",
                               input="k:v\nnokey\n", check=False))
    assert "No key separator found on line number 2" in line
    line = failed_one_line(cli("consume", "--topic", "no-such-topic-con", "--max-messages", 1,
                               "--timeout-ms", 5000, check=False))
    assert "UNKNOWN_TOPIC_OR_PARTITION" in line
    failed_one_line(cli("consume", "--topic", topic, "--group", "g", "--offset", "3",
                        check=False), 2)
    failed_one_line(cli("consume", "--topic", topic, "--offset", "soon", check=False), 2)
    line = failed_one_line(cli("consume", "--topic", topic, "--partition", 4, check=False))
    assert "UNKNOWN_TOPIC_OR_PARTITION" in line

"""`mpbroker log-dirs` and the broker's DescribeLogDirs: per dir, per partition sizes
equal to the record data in the segment files on disk (not their preallocated
length), partitions of every worker, every configured dir; kafka-python's
describe_log_dirs works too."""
from __future__ import annotations

import os
import struct
import threading
import time

from kafka.admin import KafkaAdminClient

from tests.integration.broker import consumer, create_topic, producer
from tests.mpbroker.cli.conftest import Cli, failed_one_line


def data_bytes_on_disk(partition_dir: str) -> int:
    """The bytes of record batches in the partition's .log files: walk the batch
    headers (base offset int64, batch length int32) until a zero length (the
    preallocated tail) or the end of the file."""
    total = 0
    for name in os.listdir(partition_dir):
        if not name.endswith(".log"):
            continue
        with open(os.path.join(partition_dir, name), "rb") as f:
            data = f.read()
        pos = 0
        while pos + 12 <= len(data):
            (length,) = struct.unpack_from(">i", data, pos + 8)
            if length <= 0 or pos + 12 + length > len(data):
                break
            pos += 12 + length
        total += pos
    return total


def test_log_dirs_sizes_match_disk(fresh_broker, tmp_path):
    extra = tmp_path / "second-dir"
    extra.mkdir()
    first = tmp_path / "broker0" / "data"       # fresh_broker's data dir (its first broker)
    b = fresh_broker({"num.workers": 2, "log.dirs": f"{first},{extra}"})
    assert b.data_dir == first
    cli = Cli(b.bootstrap)
    topic = create_topic(b.bootstrap, "sizes", 4)
    p = producer(b.bootstrap)
    for part, n in enumerate((0, 3, 10, 25)):
        for i in range(n):
            p.produce(topic, value=os.urandom(50 + 10 * i), key=b"k%d" % i, partition=part)
    assert p.flush(30) == 0

    show = cli.json("placement", "show", "-c", b.config_path, "--interval", "0.1", bootstrap=False)
    owners = {w["worker"] for w in show["workers"] for x in w["partitions"] if x["topic"] == topic}
    assert owners == {0, 1}          # the answer below needs both workers' parts

    out = cli.json("log-dirs", "--topic-list", topic)
    [broker] = out["brokers"]
    assert broker["broker"] == 1
    dirs = {d["logDir"]: d for d in broker["logDirs"]}
    assert set(dirs) == {str(b.data_dir), str(extra)}        # the empty dir is listed too
    seen = {}
    for path, d in dirs.items():
        assert d["error"] is None and d["totalBytes"] > 0 and 0 <= d["usableBytes"] <= d["totalBytes"]
        for part in d["partitions"]:
            assert part["offsetLag"] == 0 and part["isFuture"] is False
            seen[part["partition"]] = part["size"]
            on_disk = data_bytes_on_disk(os.path.join(path, part["partition"]))
            assert part["size"] == on_disk, (part, on_disk)
    assert sorted(seen) == [f"{topic}-{i}" for i in range(4)]   # from both workers
    assert seen[f"{topic}-0"] == 0 and 0 < seen[f"{topic}-1"] < seen[f"{topic}-2"] < seen[f"{topic}-3"]
    # a segment's file is longer than its data (preallocated): the size is not the file's
    seg = os.path.join(b.data_dir, f"{topic}-3", "00000000000000000000.log")
    if os.path.exists(seg):
        assert os.path.getsize(seg) >= seen[f"{topic}-3"]

    everything = cli.json("log-dirs")
    names = {p["partition"] for d in everything["brokers"][0]["logDirs"] for p in d["partitions"]}
    assert {f"{topic}-{i}" for i in range(4)} <= names
    text = cli("log-dirs", "--topic-list", topic).stdout_text
    assert f"{topic}-3" in text and text.startswith("BROKER")
    line = failed_one_line(cli("log-dirs", "--broker-list", "7", check=False))
    assert "7" in line
    line = failed_one_line(cli("log-dirs", "--topic-list", "no-such-topic-ld", check=False))
    assert "UNKNOWN_TOPIC_OR_PARTITION" in line

    # a real client's DescribeLogDirs (kafka-python picks v4)
    a = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        [res] = a.describe_log_dirs({topic: [2, 3]})
    finally:
        a.close()
    got = {(t["name"], p["partition_index"]): p["partition_size"]
           for d in res["log_dirs"] for t in d["topics"] for p in t["partitions"]}
    assert got == {(topic, 2): seen[f"{topic}-2"], (topic, 3): seen[f"{topic}-3"]}


def _dir_of(cli, topic: str, partition: str) -> dict[str, bool]:
    """logDir -> isFuture of `partition`'s entries in `mpbroker log-dirs --json`."""
    out = cli.json("log-dirs", "--topic-list", topic)
    return {d["logDir"]: p["isFuture"] for d in out["brokers"][0]["logDirs"]
            for p in d["partitions"] if p["partition"] == partition}


def _consume_values(bootstrap: str, topic: str, partition: int, n: int) -> list[bytes]:
    from confluent_kafka import TopicPartition
    c = consumer(bootstrap)
    c.assign([TopicPartition(topic, partition, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(values) < n and time.monotonic() < deadline:
            for m in c.consume(500, timeout=0.5):
                assert m.error() is None, m.error()
                values.append(m.value())
    finally:
        c.close()
    return values


def test_log_dirs_move(fresh_broker, tmp_path):
    """`mpbroker log-dirs move` (AlterReplicaLogDirs) with two log dirs and two workers:
    the replica is served from the new dir, its files moved, every acknowledged record
    read back (also those produced while it moved), and a restart keeps it there."""
    extra = tmp_path / "second-dir"
    extra.mkdir()
    first = tmp_path / "broker0" / "data"
    b = fresh_broker({"num.workers": 2, "log.dirs": f"{first},{extra}"})
    cli = Cli(b.bootstrap)
    topic = create_topic(b.bootstrap, "moving", 2)
    name = f"{topic}-1"
    show = cli.json("placement", "show", "-c", b.config_path, "--interval", "0.1", bootstrap=False)
    owners = {w["worker"] for w in show["workers"] for x in w["partitions"] if x["topic"] == topic}
    assert owners == {0, 1}          # each worker moves a partition of its own
    [src] = _dir_of(cli, topic, name)
    dst = str(first) if src == str(extra) else str(extra)
    p = producer(b.bootstrap)
    sent = [b"before-%d-" % i + os.urandom(500) for i in range(2000)]
    for v in sent:
        p.produce(topic, value=v, partition=1)
    assert p.flush(30) == 0

    errors: list = []
    stop = threading.Event()

    def produce_meanwhile():           # acknowledged records survive the move
        i = 0
        while not stop.is_set() or i < 20:
            v = b"during-%d" % i
            p.produce(topic, value=v, partition=1,
                      on_delivery=lambda err, msg, v=v: errors.append(err) if err else sent.append(v))
            p.poll(0.01)
            i += 1
        p.flush(30)

    t = threading.Thread(target=produce_meanwhile)
    t.start()
    try:
        out = cli.json("log-dirs", "move", "--topic", topic, "--partition", 1, "--dir", dst,
                       "--wait")
    finally:
        stop.set()
        t.join(60)
    assert errors == []
    assert out == {"version": 1, "moves": [{"broker": 1, "partition": name, "logDir": dst,
                                            "error": None, "done": True}]}
    assert _dir_of(cli, topic, name) == {dst: False}
    assert any(n.endswith(".log") for n in os.listdir(os.path.join(dst, name)))
    assert not os.path.exists(os.path.join(src, name))
    assert not [n for n in os.listdir(dst) if n.endswith("-future")]
    # the other partition (the other worker's: each worker moves its own)
    [src0] = _dir_of(cli, topic, f"{topic}-0")
    dst0 = str(first) if src0 == str(extra) else str(extra)
    cli("log-dirs", "move", "--topic", topic, "--partition", 0, "--dir", dst0, "--wait")
    assert _dir_of(cli, topic, f"{topic}-0") == {dst0: False}

    for i in range(10):                # produce goes on after the move
        p.produce(topic, value=b"after-%d" % i, partition=1)
        sent.append(b"after-%d" % i)
    assert p.flush(30) == 0
    assert _consume_values(b.bootstrap, topic, 1, len(sent)) == sent

    b.restart()
    assert _dir_of(cli, topic, name) == {dst: False}
    assert _consume_values(b.bootstrap, topic, 1, len(sent)) == sent

    # refusals: one error line, exit code 1
    line = failed_one_line(cli("log-dirs", "move", "--topic", topic, "--partition", 1,
                               "--dir", str(tmp_path / "not-a-log-dir"), check=False))
    assert "LOG_DIR_NOT_FOUND" in line
    line = failed_one_line(cli("log-dirs", "move", "--topic", topic, "--partition", 9,
                               "--dir", dst, check=False))
    assert "UNKNOWN_TOPIC_OR_PARTITION" in line
    line = failed_one_line(cli("log-dirs", "move", "--topic", "no-such-topic", "--partition", 0,
                               "--dir", dst, check=False))
    assert "UNKNOWN_TOPIC_OR_PARTITION" in line
    text = cli("log-dirs", "move", "--topic", topic, "--partition", 1, "--dir", dst).stdout_text
    assert f"moving {name} to {dst}: done" in text          # already there

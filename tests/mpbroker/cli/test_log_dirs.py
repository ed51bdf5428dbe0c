"""`mpbroker log-dirs` and the broker's DescribeLogDirs: per dir, per partition sizes
equal to the record data in the segment files on disk (not their preallocated
length), partitions of every worker, every configured dir; kafka-python's
describe_log_dirs works too."""
from __future__ import annotations

import os
import struct

from kafka.admin import KafkaAdminClient

from tests.integration.broker import create_topic, producer
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

